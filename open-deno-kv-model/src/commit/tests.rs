use std::collections::BTreeMap;

use chrono::TimeDelta;

use super::*;
use crate::{AtomicWrite, Check, Enqueue, Mutation, encode_key, key, rules::v8_number};

/// The simplest possible engine transaction: a sorted map and a list of messages.
#[derive(Default)]
struct MapTxn {
    entries: BTreeMap<Vec<u8>, StoredEntry>,
    queue: Vec<QueuedMessage>,
}

impl WriteTransaction for MapTxn {
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        Ok(self.entries.get(key).cloned())
    }
    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError> {
        self.entries.insert(key.to_vec(), entry);
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.entries.remove(key);
        Ok(())
    }
    fn delete_range(&mut self, range: &KeyRange) -> Result<(), KvError> {
        self.entries.retain(|key, _| !range.contains(key));
        Ok(())
    }
    fn enqueue(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        self.queue.push(message);
        Ok(())
    }
}

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).unwrap()
}

/// The write as the engine layer would pass it on. These tests exercise the write path itself,
/// so the write is vouched for without running the limits (some tests break them on purpose).
fn valid(write: &AtomicWrite) -> ValidatedWrite {
    crate::Validated::vouched(write.clone())
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

const VS1: Versionstamp = Versionstamp::from_bytes([0, 0, 0, 0, 0, 0, 0, 1, 0, 0]);
const VS2: Versionstamp = Versionstamp::from_bytes([0, 0, 0, 0, 0, 0, 0, 2, 0, 0]);

fn seeded() -> MapTxn {
    let mut txn = MapTxn::default();
    let write = AtomicWrite {
        mutations: vec![Mutation::set(k("a"), KvValue::U64(1))],
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap();
    txn
}

#[test]
fn failed_check_applies_nothing() {
    let mut txn = seeded();
    let before = txn.entries.clone();
    let write = AtomicWrite {
        checks: vec![
            Check {
                key: k("a"),
                versionstamp: Some(VS1),
            },
            Check {
                key: k("b"),
                versionstamp: Some(VS1),
            },
        ],
        mutations: vec![Mutation::set(k("c"), KvValue::U64(3))],
        enqueues: vec![Enqueue {
            payload: vec![1],
            ready_at: now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
    };
    assert_eq!(
        apply_atomic_write(&mut txn, &valid(&write), VS2, now()).unwrap(),
        WriteOutcome::CheckFailed
    );
    assert_eq!(txn.entries, before);
    assert!(txn.queue.is_empty());
}

#[test]
fn matching_checks_commit_everything() {
    let mut txn = seeded();
    let write = AtomicWrite {
        checks: vec![
            Check {
                key: k("a"),
                versionstamp: Some(VS1),
            },
            Check {
                key: k("b"),
                versionstamp: None,
            },
        ],
        mutations: vec![
            Mutation::set(k("b"), KvValue::U64(2)),
            Mutation::delete(k("a")),
        ],
        enqueues: vec![],
    };
    let outcome = apply_atomic_write(&mut txn, &valid(&write), VS2, now()).unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Committed {
            changed_keys: vec![k("b"), k("a")],
            changed_ranges: vec![],
            enqueued: false
        }
    );
    assert_eq!(txn.entries.len(), 1);
    assert_eq!(txn.entries[&k("b")].versionstamp, VS2);
}

#[test]
fn expired_entries_count_as_absent() {
    let mut txn = MapTxn::default();
    let expiring = Mutation {
        expire_at: Some(now() + TimeDelta::seconds(10)),
        ..Mutation::set(k("t"), KvValue::U64(5))
    };
    let write = AtomicWrite {
        mutations: vec![expiring],
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap();

    let later = now() + TimeDelta::seconds(10);
    // Expiry happens at the expiry time: the check for absence passes, sum starts from nothing.
    let write = AtomicWrite {
        checks: vec![Check {
            key: k("t"),
            versionstamp: None,
        }],
        mutations: vec![Mutation::sum(k("t"), KvValue::U64(1))],
        enqueues: vec![],
    };
    assert!(matches!(
        apply_atomic_write(&mut txn, &valid(&write), VS2, later).unwrap(),
        WriteOutcome::Committed { .. }
    ));
    assert_eq!(txn.entries[&k("t")].value, KvValue::U64(1));
    assert_eq!(
        txn.entries[&k("t")].expires_at,
        None,
        "sum clears the expiry"
    );
}

#[test]
fn unexpired_entry_is_still_there_just_before() {
    let mut txn = MapTxn::default();
    let at = now() + TimeDelta::seconds(10);
    let expiring = Mutation {
        expire_at: Some(at),
        ..Mutation::set(k("t"), KvValue::U64(5))
    };
    apply_atomic_write(
        &mut txn,
        &valid(&AtomicWrite {
            mutations: vec![expiring],
            ..Default::default()
        }),
        VS1,
        now(),
    )
    .unwrap();
    let check = AtomicWrite {
        checks: vec![Check {
            key: k("t"),
            versionstamp: Some(VS1),
        }],
        ..Default::default()
    };
    let just_before = at - TimeDelta::milliseconds(1);
    assert!(matches!(
        apply_atomic_write(&mut txn, &valid(&check), VS2, just_before).unwrap(),
        WriteOutcome::Committed { .. }
    ));
    assert_eq!(
        apply_atomic_write(&mut txn, &valid(&check), VS2, at).unwrap(),
        WriteOutcome::CheckFailed
    );
}

#[test]
fn mutations_apply_in_order() {
    let mut txn = MapTxn::default();
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(k("x"), KvValue::U64(10)),
            Mutation::sum(k("x"), KvValue::U64(5)),
            Mutation {
                key: k("x"),
                kind: MutationKind::Min(KvValue::U64(12)),
                expire_at: None,
            },
            Mutation::delete(k("y")),
            Mutation::set(k("y"), KvValue::Bytes(vec![1].into())),
            Mutation {
                key: k("z"),
                kind: MutationKind::Max(KvValue::U64(3)),
                expire_at: None,
            },
        ],
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap();
    assert_eq!(txn.entries[&k("x")].value, KvValue::U64(12));
    assert_eq!(txn.entries[&k("y")].value, KvValue::Bytes(vec![1].into()));
    assert_eq!(txn.entries[&k("z")].value, KvValue::U64(3));
}

#[test]
fn mutation_error_names_the_key() {
    let mut txn = MapTxn::default();
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(k("n"), KvValue::V8(v8_number(1.0).into())),
            Mutation::sum(k("n"), KvValue::U64(1)),
        ],
        ..Default::default()
    };
    let err = apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    assert!(matches!(err, KvError::Mutation { ref key, .. } if key == &k("n")));
}

#[test]
fn versionstamped_set_appends_the_commit_stamp() {
    let mut txn = MapTxn::default();
    let write = AtomicWrite {
        mutations: vec![Mutation {
            key: k("log"),
            kind: MutationKind::SetSuffixVersionstampedKey(KvValue::U64(1)),
            expire_at: None,
        }],
        ..Default::default()
    };
    let outcome = apply_atomic_write(&mut txn, &valid(&write), VS2, now()).unwrap();
    let full = encode_key(&key!["log", "00000000000000020000"]).unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Committed {
            changed_keys: vec![full.clone()],
            changed_ranges: vec![],
            enqueued: false
        }
    );
    assert_eq!(txn.entries[&full].versionstamp, VS2);
}

#[test]
fn set_keeps_its_expiry_and_plain_set_clears_it() {
    let mut txn = MapTxn::default();
    let at = now() + TimeDelta::hours(1);
    let write = AtomicWrite {
        mutations: vec![Mutation {
            expire_at: Some(at),
            ..Mutation::set(k("e"), KvValue::U64(1))
        }],
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap();
    assert_eq!(txn.entries[&k("e")].expires_at, Some(at));
    let write = AtomicWrite {
        mutations: vec![Mutation::set(k("e"), KvValue::U64(2))],
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&write), VS2, now()).unwrap();
    assert_eq!(txn.entries[&k("e")].expires_at, None);
}

#[test]
fn enqueues_ride_in_the_commit() {
    let mut txn = MapTxn::default();
    let write = AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![7],
            ready_at: now() + TimeDelta::seconds(3),
            keys_if_undelivered: vec![k("dead")],
            backoff_schedule: None,
        }],
        ..Default::default()
    };
    let outcome = apply_atomic_write(&mut txn, &valid(&write), VS1, now()).unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Committed {
            changed_keys: vec![],
            changed_ranges: vec![],
            enqueued: true
        }
    );
    assert_eq!(txn.queue.len(), 1);
    assert_eq!(
        txn.queue[0].backoff_schedule,
        crate::DEFAULT_BACKOFF_SCHEDULE.to_vec()
    );
    assert_eq!(txn.queue[0].keys_if_undelivered, vec![k("dead")]);
}

#[test]
fn a_range_delete_removes_the_range_in_order_with_the_other_mutations() {
    let mut txn = MapTxn::default();
    let user = |n: i64| encode_key(&key!["users", n]).unwrap();
    let seed = AtomicWrite {
        mutations: (1..=3)
            .map(|n| Mutation::set(user(n), KvValue::U64(n as u64)))
            .chain([Mutation::set(k("users"), KvValue::U64(0))])
            .collect(),
        ..Default::default()
    };
    apply_atomic_write(&mut txn, &valid(&seed), VS1, now()).unwrap();

    let users = KeyRange::prefix(&key!["users"]).unwrap();
    let write = AtomicWrite {
        checks: vec![Check {
            key: k("users"),
            versionstamp: Some(VS1),
        }],
        mutations: vec![
            Mutation::set(user(9), KvValue::U64(9)), // taken by the range after it
            Mutation::delete_range(users.clone()),
            Mutation::set(user(2), KvValue::U64(22)), // after it: stays
            Mutation::delete_range(KeyRange::new(k("z"), k("a"))), // inverted: nothing
        ],
        ..Default::default()
    };
    let outcome = apply_atomic_write(&mut txn, &valid(&write), VS2, now()).unwrap();
    assert_eq!(
        outcome,
        WriteOutcome::Committed {
            changed_keys: vec![user(9), user(2)],
            changed_ranges: vec![users],
            enqueued: false
        }
    );
    let left: Vec<(Vec<u8>, KvValue)> = txn
        .entries
        .iter()
        .map(|(key, entry)| (key.clone(), entry.value.clone()))
        .collect();
    assert_eq!(
        left,
        vec![(k("users"), KvValue::U64(0)), (user(2), KvValue::U64(22))],
        "the prefix itself is not under it"
    );
}

use chrono::TimeDelta;

use super::*;
use crate::{Check, KvValue, Mutation, ReadRange, encode_key, key};

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

/// A valid encoded key of exactly `len` bytes (a bytes part of 0x01s: tag + body + terminator).
fn key_of_len(len: usize) -> Vec<u8> {
    let key = encode_key(&key![vec![1u8; len - 2]]).unwrap();
    assert_eq!(key.len(), len);
    key
}

fn numbered_key(i: usize) -> Vec<u8> {
    encode_key(&key!["m", i]).unwrap()
}

fn write_err(write: &AtomicWrite) -> String {
    Limits::deno()
        .validate_atomic_write(write, now())
        .unwrap_err()
        .to_string()
}

fn write_ok(write: &AtomicWrite) {
    Limits::deno().validate_atomic_write(write, now()).unwrap();
}

fn sets(keys: impl IntoIterator<Item = Vec<u8>>, value: KvValue) -> AtomicWrite {
    let mutations = keys
        .into_iter()
        .map(|k| Mutation::set(k, value.clone()))
        .collect();
    AtomicWrite {
        mutations,
        ..Default::default()
    }
}

fn enqueue(payload_len: usize, delay: TimeDelta, schedule: Option<Vec<u32>>) -> AtomicWrite {
    AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![0; payload_len],
            ready_at: now() + delay,
            keys_if_undelivered: vec![],
            backoff_schedule: schedule,
        }],
        ..Default::default()
    }
}

#[test]
fn write_key_size() {
    write_ok(&sets([key_of_len(2048)], KvValue::U64(1)));
    assert_eq!(
        write_err(&sets([key_of_len(2049)], KvValue::U64(1))),
        "Key too large for write (max 2048 bytes)"
    );
    // Checks and deletes are held to the same limit.
    let check = AtomicWrite {
        checks: vec![Check {
            key: key_of_len(2049),
            versionstamp: None,
        }],
        ..Default::default()
    };
    assert_eq!(
        write_err(&check),
        "Key too large for write (max 2048 bytes)"
    );
    let delete = AtomicWrite {
        mutations: vec![Mutation::delete(key_of_len(2049))],
        ..Default::default()
    };
    assert_eq!(
        write_err(&delete),
        "Key too large for write (max 2048 bytes)"
    );
}

#[test]
fn value_size() {
    write_ok(&sets(
        [numbered_key(0)],
        KvValue::Bytes(vec![0; 65_536].into()),
    ));
    write_ok(&sets(
        [numbered_key(0)],
        KvValue::V8(vec![0; 65_536].into()),
    ));
    assert_eq!(
        write_err(&sets(
            [numbered_key(0)],
            KvValue::V8(vec![0; 65_537].into())
        )),
        "Value too large (max 65536 bytes)"
    );
}

#[test]
fn enqueue_payload_size() {
    write_ok(&enqueue(65_536, TimeDelta::zero(), None));
    assert_eq!(
        write_err(&enqueue(65_537, TimeDelta::zero(), None)),
        "enqueue payload too large (max 65536 bytes)"
    );
}

#[test]
fn check_count() {
    let checks = |n| AtomicWrite {
        checks: (0..n)
            .map(|i| Check {
                key: numbered_key(i),
                versionstamp: None,
            })
            .collect(),
        ..Default::default()
    };
    write_ok(&checks(100));
    assert_eq!(write_err(&checks(101)), "Too many checks (max 100)");
}

#[test]
fn mutation_count_includes_enqueues() {
    write_ok(&sets((0..1000).map(numbered_key), KvValue::U64(1)));
    assert_eq!(
        write_err(&sets((0..1001).map(numbered_key), KvValue::U64(1))),
        "Too many mutations (max 1000)"
    );
    let mut mixed = sets((0..999).map(numbered_key), KvValue::U64(1));
    mixed.enqueues = enqueue(1, TimeDelta::zero(), None).enqueues;
    write_ok(&mixed);
    mixed.enqueues.push(mixed.enqueues[0].clone());
    assert_eq!(write_err(&mixed), "Too many mutations (max 1000)");
}

/// 13 sets whose value sizes add up so the write totals exactly `total` bytes.
fn write_totalling(total: usize) -> AtomicWrite {
    let keys: Vec<Vec<u8>> = (0..13).map(numbered_key).collect();
    // Each key counts once as a mutation key, then again with its value.
    let key_bytes: usize = keys.iter().map(|k| 2 * k.len()).sum();
    let mut left = total - key_bytes;
    let mutations = keys
        .into_iter()
        .map(|k| {
            let len = left.min(65_536);
            left -= len;
            Mutation::set(k, KvValue::Bytes(vec![0; len].into()))
        })
        .collect();
    assert_eq!(left, 0);
    AtomicWrite {
        mutations,
        ..Default::default()
    }
}

#[test]
fn total_mutation_size() {
    write_ok(&write_totalling(819_200));
    assert_eq!(
        write_err(&write_totalling(819_201)),
        "Total mutation size too large (max 819200 bytes)"
    );
}

#[test]
fn total_mutation_size_counts_checks_and_backoff() {
    let mut write = write_totalling(819_200 - 6 - 20);
    write.checks.push(Check {
        key: numbered_key(1),
        versionstamp: None,
    }); // 5 bytes
    write.enqueues = enqueue(1, TimeDelta::zero(), Some(vec![1; 5])).enqueues; // 1 + 4 * 5
    write_ok(&write);
    write.checks.push(Check {
        key: encode_key(&key![0]).unwrap(),
        versionstamp: None,
    }); // 1 byte
    assert_eq!(
        write_err(&write),
        "Total mutation size too large (max 819200 bytes)"
    );
}

#[test]
fn total_key_size_counts_only_keys_with_values() {
    let mut write = sets(
        (0..40).map(|_| key_of_len(2048)),
        KvValue::Bytes(vec![].into()),
    );
    write
        .mutations
        .push(Mutation::delete(encode_key(&key![0]).unwrap()));
    write_ok(&write);
    write.mutations.push(Mutation::set(
        encode_key(&key![0]).unwrap(),
        KvValue::Bytes(vec![].into()),
    ));
    assert_eq!(
        write_err(&write),
        "Total key size too large (max 81920 bytes)"
    );
}

#[test]
fn empty_and_malformed_keys() {
    assert_eq!(
        write_err(&sets([vec![]], KvValue::U64(1))),
        "key cannot be empty"
    );
    let check = AtomicWrite {
        checks: vec![Check {
            key: vec![],
            versionstamp: None,
        }],
        ..Default::default()
    };
    assert_eq!(write_err(&check), "key cannot be empty");
    let err = Limits::deno()
        .validate_atomic_write(&sets([vec![0x99]], KvValue::U64(1)), now())
        .unwrap_err();
    assert!(
        matches!(err, KvError::InvalidKey { key: Some(ref k), .. } if k == &[0x99]),
        "{err:?}"
    );
}

#[test]
fn queue_delay() {
    write_ok(&enqueue(1, TimeDelta::days(30), None));
    assert_eq!(
        write_err(&enqueue(
            1,
            TimeDelta::days(30) + TimeDelta::milliseconds(1),
            None
        )),
        "Delay cannot be greater than 30 days: received 2592000001"
    );
}

#[test]
fn backoff_schedule() {
    write_ok(&enqueue(1, TimeDelta::zero(), Some(vec![3_600_000; 5])));
    assert_eq!(
        write_err(&enqueue(1, TimeDelta::zero(), Some(vec![1; 6]))),
        "Invalid backoffSchedule, max 5 intervals allowed"
    );
    assert_eq!(
        write_err(&enqueue(1, TimeDelta::zero(), Some(vec![1, 3_600_001]))),
        "Invalid backoffSchedule, interval at index 1 is invalid"
    );
}

#[test]
fn undelivered_keys_must_be_writable() {
    let mut write = enqueue(1, TimeDelta::zero(), None);
    write.enqueues[0].keys_if_undelivered = vec![key_of_len(2048)];
    write_ok(&write);
    write.enqueues[0].keys_if_undelivered = vec![key_of_len(2049)];
    assert_eq!(
        write_err(&write),
        "Key too large for write (max 2048 bytes)"
    );
}

#[test]
fn errors_follow_denos_order() {
    // Too many checks is reported before anything about keys or values.
    let mut write = sets([key_of_len(2049)], KvValue::Bytes(vec![0; 70_000].into()));
    write.checks = (0..101)
        .map(|i| Check {
            key: numbered_key(i),
            versionstamp: None,
        })
        .collect();
    assert_eq!(write_err(&write), "Too many checks (max 100)");
    // Enqueue timing is checked (in JavaScript) before everything else.
    let mut late = write.clone();
    late.enqueues = enqueue(1, TimeDelta::days(31), None).enqueues;
    assert!(write_err(&late).starts_with("Delay cannot be greater than 30 days"));
    // A bad key is reported before a bad value.
    write.checks.clear();
    assert_eq!(
        write_err(&write),
        "Key too large for write (max 2048 bytes)"
    );
}

fn read(ranges: Vec<ReadRange>) -> Result<(), KvError> {
    Limits::deno().validate_snapshot_read(&SnapshotRead {
        ranges,
        ..Default::default()
    })
}

fn range(start_len: usize, limit: u32) -> ReadRange {
    ReadRange {
        start: vec![1; start_len],
        end: vec![0xff],
        limit,
        reverse: false,
    }
}

#[test]
fn read_limits() {
    read(vec![range(2049, 1)]).unwrap();
    assert_eq!(
        read(vec![range(2050, 1)]).unwrap_err().to_string(),
        "Key too large for read (max 2049 bytes)"
    );
    read(vec![range(1, 1); 10]).unwrap();
    assert_eq!(
        read(vec![range(1, 1); 11]).unwrap_err().to_string(),
        "Too many ranges (max 10)"
    );
    read(vec![range(1, 500), range(1, 500)]).unwrap();
    assert_eq!(
        read(vec![range(1, 500), range(1, 501)])
            .unwrap_err()
            .to_string(),
        "Too many entries (max 1000)"
    );
    assert_eq!(
        read(vec![range(1, 0)]).unwrap_err().to_string(),
        "limit must be greater than 0"
    );
}

#[test]
fn watch_limits() {
    let keys: Vec<Vec<u8>> = (0..11).map(numbered_key).collect();
    Limits::deno().validate_watch(&keys[..10]).unwrap();
    assert_eq!(
        Limits::deno()
            .validate_watch(&keys)
            .unwrap_err()
            .to_string(),
        "Too many keys (max 10)"
    );
    let long = encode_key(&key![vec![1u8; 2047]]).unwrap();
    assert_eq!(long.len(), 2049);
    Limits::deno().validate_watch(&[long]).unwrap();
}

#[test]
fn limit_errors_carry_the_numbers_and_key() {
    let err = Limits::deno()
        .validate_atomic_write(&sets([key_of_len(2049)], KvValue::U64(1)), now())
        .unwrap_err();
    let KvError::Limit(limit) = err else {
        panic!("expected a limit error")
    };
    assert_eq!(
        (limit.kind, limit.max, limit.actual),
        (LimitKind::KeySizeWrite, 2048, 2049)
    );
    assert_eq!(limit.key, Some(key_of_len(2049)));
}

//! The checker's teeth: fabricated child logs and recovered stores, correct and broken in one
//! way each, and the violation each break must produce.

use std::collections::BTreeMap;

use open_deno_kv_model::{KvEntry, KvValue, MutationKind, Versionstamp};

use super::check::{ACK, BEGIN, History, Recovered};
use super::workload::{WriteSpec, counter_key, group_key, marker_key};
use super::{Violation, ViolationKind};

const SEED: u64 = 0x5eed;

fn vs(n: u64) -> Versionstamp {
    Versionstamp::from_version(n, 0)
}

/// A store as a correct backend would hold it, built by applying writes in commit order.
#[derive(Default, Clone)]
struct Store {
    entries: BTreeMap<Vec<u8>, KvEntry>,
    queue: Vec<Vec<u8>>,
}

impl Store {
    fn apply(&mut self, id: u64, stamp: Versionstamp) {
        let write = WriteSpec::generate(SEED, id, true).atomic_write();
        for m in write.mutations {
            let value = match m.kind {
                MutationKind::Set(v) => v,
                MutationKind::Sum {
                    value: KvValue::U64(x),
                    ..
                } => match self.entries.get(&m.key).map(|e| &e.value) {
                    Some(KvValue::U64(current)) => KvValue::U64(current + x),
                    _ => KvValue::U64(x),
                },
                other => panic!("the workload does not use {other:?}"),
            };
            self.entries.insert(
                m.key.clone(),
                KvEntry {
                    key: m.key.into(),
                    value,
                    versionstamp: stamp,
                    expires_at: None,
                },
            );
        }
        self.queue
            .extend(write.enqueues.into_iter().map(|e| e.payload));
    }

    /// What the parent would gather: entries in key order, the whole queue, a probe above all.
    fn recovered(&self, probe: u64) -> Recovered {
        Recovered {
            entries: self.entries.values().cloned().collect(),
            messages: self.queue.clone(),
            probe: vs(probe),
        }
    }
}

/// A child log: writes `begun` begin one after the other, each acked (with versionstamp
/// `10 * (id + 1)`) before the next begins, if it is in `acked`.
fn sequential_log(begun: std::ops::Range<u64>, acked: std::ops::Range<u64>) -> String {
    let mut log = String::from("kv-crash ready\n");
    for id in begun {
        log.push_str(&format!("{BEGIN}{id}\n"));
        if acked.contains(&id) {
            log.push_str(&format!("{ACK}{id} {}\n", vs(10 * (id + 1))));
        }
    }
    log
}

/// 20 writes begun, 0..15 acked, 15..18 committed but not acked, 18..20 never committed.
fn scenario() -> (History, Store) {
    let mut history = History::new(SEED, true);
    let order = history
        .record_child_output(&sequential_log(0..20, 0..15))
        .unwrap();
    assert!(order.is_empty(), "{order:?}");
    let mut store = Store::default();
    for id in 0..18 {
        store.apply(id, vs(10 * (id + 1)));
    }
    (history, store)
}

fn kinds(violations: &[Violation]) -> Vec<ViolationKind> {
    let mut kinds: Vec<_> = violations.iter().map(|v| v.kind).collect();
    kinds.dedup();
    kinds
}

fn first_id(pred: impl Fn(&WriteSpec) -> bool, range: std::ops::Range<u64>) -> u64 {
    range
        .into_iter()
        .find(|&id| pred(&WriteSpec::generate(SEED, id, true)))
        .expect("the seed makes such a write")
}

#[test]
fn a_correct_recovery_passes_and_is_counted() {
    let (mut history, store) = scenario();
    let (violations, stats) = history.check(&store.recovered(1000));
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!(
        (
            stats.begun,
            stats.acked,
            stats.landed_unacked,
            stats.vanished_unacked
        ),
        (20, 15, 3, 2)
    );
    assert_eq!(stats.messages, store.queue.len());
    assert_eq!(stats.expected_messages, store.queue.len());
}

#[test]
fn a_lost_acknowledged_write_is_a_loss() {
    let (mut history, _) = scenario();
    // The store lost write 14, the last acknowledged one (a "drops the last write on reopen"
    // bug): build the store without it.
    let mut store = Store::default();
    for id in (0..14).chain(15..18) {
        store.apply(id, vs(10 * (id + 1)));
    }
    let (violations, _) = history.check(&store.recovered(1000));
    assert!(
        violations
            .iter()
            .any(|v| v.kind == ViolationKind::Loss && v.message.contains("write 14 ")),
        "{violations:#?}"
    );
}

#[test]
fn acknowledging_without_persisting_is_a_loss() {
    // A backend that acks everything but persisted nothing: the reopened store is empty.
    let (mut history, _) = scenario();
    let (violations, _) = history.check(&Store::default().recovered(1000));
    let losses = violations
        .iter()
        .filter(|v| v.kind == ViolationKind::Loss)
        .count();
    assert!(losses >= 15, "{violations:#?}");
}

#[test]
fn a_torn_multi_key_write_is_a_partial_commit() {
    let (mut history, mut store) = scenario();
    // An in-flight write that landed, missing its last group key.
    let id = first_id(|s| s.group.len() >= 2, 15..18);
    let last = WriteSpec::generate(SEED, id, true).group.len() - 1;
    store.entries.remove(&group_key(id, last));
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::PartialCommit]);
    assert!(violations[0].message.contains(&format!("write {id} ")));

    // The other way round: group keys of a write that did not land, without its marker.
    let (mut history, mut store) = scenario();
    let id = first_id(|s| !s.group.is_empty(), 0..18);
    store.entries.remove(&marker_key(id));
    let (violations, _) = history.check(&store.recovered(1000));
    assert!(
        violations
            .iter()
            .any(|v| v.kind == ViolationKind::PartialCommit
                && v.message.contains("but its marker key is not")),
        "{violations:#?}"
    );
}

#[test]
fn a_sum_without_its_marker_is_caught_by_the_counter() {
    let (mut history, mut store) = scenario();
    // Write 18 never landed, but its increment did.
    let id = 18;
    let spec = WriteSpec::generate(SEED, id, true);
    let (index, operand) = match spec.counter {
        Some(c) => c,
        None => {
            let id = first_id(|s| s.counter.is_some(), 0..18);
            WriteSpec::generate(SEED, id, true).counter.unwrap()
        }
    };
    let entry = store
        .entries
        .entry(counter_key(index))
        .or_insert_with(|| KvEntry {
            key: counter_key(index).into(),
            value: KvValue::U64(0),
            versionstamp: vs(1),
            expires_at: None,
        });
    let KvValue::U64(current) = entry.value else {
        panic!("counters are u64")
    };
    entry.value = KvValue::U64(current + operand);
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::PartialCommit]);
    assert!(violations[0].message.contains(&format!("counter {index}")));

    // And an increment lost below the acknowledged sum is a loss.
    let (mut history, mut store) = scenario();
    let id = first_id(|s| s.counter.is_some(), 0..15);
    let (index, _) = WriteSpec::generate(SEED, id, true).counter.unwrap();
    store.entries.remove(&counter_key(index));
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::Loss]);
}

#[test]
fn messages_must_arrive_exactly_once() {
    // Delivered twice in one recovery.
    let (mut history, mut store) = scenario();
    let first = store.queue[0].clone();
    store.queue.push(first);
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::DuplicateMessage]);

    // Delivered again by the next recovery after being finished.
    let (mut history, store) = scenario();
    let (violations, _) = history.check(&store.recovered(1000));
    assert!(violations.is_empty(), "{violations:#?}");
    history
        .record_child_output(&format!("kv-crash ready\n{BEGIN}{}\n", 1u64 << 32))
        .unwrap();
    let mut again = store.clone();
    again.entries.insert(
        super::workload::probe_key(),
        KvEntry {
            key: super::workload::probe_key().into(),
            value: KvValue::U64(0),
            versionstamp: vs(1000),
            expires_at: None,
        },
    );
    again.queue.truncate(1);
    let (violations, _) = history.check(&again.recovered(2000));
    assert_eq!(kinds(&violations), [ViolationKind::DuplicateMessage]);

    // An acknowledged write's message that never comes is a loss.
    let (mut history, mut store) = scenario();
    let id = first_id(|s| s.enqueue, 0..15);
    let payload = super::workload::payload(id);
    store.queue.retain(|p| *p != payload);
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::Loss]);
    assert!(violations[0].message.contains("queue message"));

    // A message from a write that did not land is a partial commit.
    let (mut history, mut store) = scenario();
    let id = first_id(|s| s.enqueue, 18..200);
    store.queue.push(super::workload::payload(id));
    let mut log = String::new();
    for extra in 20..=id {
        log.push_str(&format!("{BEGIN}{extra}\n"));
    }
    history.record_child_output(&log).unwrap();
    let (violations, _) = history.check(&store.recovered(100_000));
    assert_eq!(kinds(&violations), [ViolationKind::PartialCommit]);
}

#[test]
fn versionstamps_must_move_forward() {
    // An ack below one acknowledged before the write began.
    let mut history = History::new(SEED, true);
    let log = format!("{BEGIN}0\n{ACK}0 {}\n{BEGIN}1\n{ACK}1 {}\n", vs(50), vs(40));
    let violations = history.record_child_output(&log).unwrap();
    assert_eq!(kinds(&violations), [ViolationKind::Versionstamp]);

    // Concurrent writes may be acknowledged out of order, but never share a versionstamp.
    let mut history = History::new(SEED, true);
    let log = format!("{BEGIN}0\n{BEGIN}1\n{ACK}1 {}\n{ACK}0 {}\n", vs(50), vs(40));
    assert!(history.record_child_output(&log).unwrap().is_empty());
    let mut history = History::new(SEED, true);
    let log = format!("{BEGIN}0\n{BEGIN}1\n{ACK}1 {}\n{ACK}0 {}\n", vs(50), vs(50));
    let violations = history.record_child_output(&log).unwrap();
    assert_eq!(kinds(&violations), [ViolationKind::Versionstamp]);

    // The store's next commit after recovery must be above every acknowledged one.
    let (mut history, store) = scenario();
    let (violations, _) = history.check(&store.recovered(150));
    assert!(
        violations
            .iter()
            .any(|v| v.kind == ViolationKind::Versionstamp && v.message.contains("went back")),
        "{violations:#?}"
    );
}

#[test]
fn a_line_cut_by_the_kill_does_not_count() {
    let mut history = History::new(SEED, true);
    let log = format!("{BEGIN}0\n{ACK}0 {}", vs(10));
    history.record_child_output(&log).unwrap();
    // Write 0 is in flight, not acknowledged: an empty store is fine.
    let (violations, stats) = history.check(&Store::default().recovered(100));
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!((stats.acked, stats.vanished_unacked), (0, 1));
}

#[test]
fn protocol_errors_are_harness_errors_not_violations() {
    let mut history = History::new(SEED, true);
    assert!(
        history
            .record_child_output(&format!("{ACK}3 {}\n", vs(1)))
            .is_err()
    );
    assert!(history.record_child_output("kv-crash begin x\n").is_err());
    // The engine's own output is ignored.
    assert!(history.record_child_output("some log line\n").is_ok());
}

#[test]
fn unknown_keys_and_wrong_values_are_corruption() {
    let (mut history, mut store) = scenario();
    let stray = marker_key(999);
    store.entries.insert(
        stray.clone(),
        KvEntry {
            key: stray.into(),
            value: KvValue::U64(999),
            versionstamp: vs(5),
            expires_at: None,
        },
    );
    let (violations, _) = history.check(&store.recovered(1000));
    assert_eq!(kinds(&violations), [ViolationKind::Corrupt]);

    let (mut history, mut store) = scenario();
    let id = first_id(|s| !s.group.is_empty(), 0..15);
    if let Some(entry) = store.entries.get_mut(&group_key(id, 0)) {
        entry.value = KvValue::Bytes(vec![0; 3].into());
    }
    let (violations, _) = history.check(&store.recovered(1000));
    assert!(
        violations.iter().any(|v| v.kind == ViolationKind::Corrupt),
        "{violations:#?}"
    );
}

#[test]
fn what_one_recovery_saw_the_next_must_still_see() {
    let (mut history, store) = scenario();
    let (violations, _) = history.check(&store.recovered(1000));
    assert!(violations.is_empty());
    // Next run: nothing new, but write 16 (unacknowledged, landed, seen) vanished.
    let mut next = store.clone();
    next.queue.clear();
    next.entries.insert(
        super::workload::probe_key(),
        KvEntry {
            key: super::workload::probe_key().into(),
            value: KvValue::U64(0),
            versionstamp: vs(1000),
            expires_at: None,
        },
    );
    next.entries.remove(&marker_key(16));
    for i in 0..WriteSpec::generate(SEED, 16, true).group.len() {
        next.entries.remove(&group_key(16, i));
    }
    let (violations, _) = history.check(&next.recovered(2000));
    assert!(
        violations
            .iter()
            .any(|v| v.kind == ViolationKind::Loss && v.message.contains("write 16 was visible")),
        "{violations:#?}"
    );
}

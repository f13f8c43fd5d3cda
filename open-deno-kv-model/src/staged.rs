//! Staging an atomic write before touching the engine: for engines that cannot roll back one
//! write on its own.
//!
//! [`apply_atomic_write`] writes into the engine's transaction as it goes, and on a failed check
//! or a refused mutation the engine rolls the transaction back. An engine that runs several
//! writes in one transaction (group commit) or has no transaction at all (a map in memory)
//! cannot roll back just one of them. [`stage_atomic_write`] runs the same write path over an
//! overlay instead: reads see the write's own earlier mutations first, then the engine (through a
//! closure); puts, deletes and enqueues go into the overlay only. If the write commits, the engine
//! gets a [`StagedCommit`] to apply; if not, nothing was touched.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::commit::{StoredEntry, WriteOutcome, WriteTransaction, apply_atomic_write};
use crate::queue::QueuedMessage;
use crate::{ChangedKeys, KeyRange, KvError, ValidatedWrite, Versionstamp};

/// What a committed write leaves for the engine to store: first delete every range of
/// `deleted_ranges`, then store `writes`, then the messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StagedCommit {
    /// The ranges the write deleted as a whole ([`crate::MutationKind::DeleteRange`]), to delete
    /// *before* storing `writes`: a key the write set after deleting its range is in `writes`,
    /// and one it set before is not (the range took it). Empty unless the engine offers
    /// [`crate::Capabilities::range_delete`].
    pub deleted_ranges: Vec<KeyRange>,
    /// The final state of every key the write touched, in key order: `Some` to store, `None` to
    /// delete.
    pub writes: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    /// The messages the write enqueued, in order.
    pub enqueued: Vec<QueuedMessage>,
}

impl StagedCommit {
    /// The keys and ranges this commit changed, for the watches it must wake.
    pub fn changed(&self) -> ChangedKeys {
        let mut changed = ChangedKeys::new();
        changed.extend(self.writes.keys().cloned());
        self.deleted_ranges
            .iter()
            .for_each(|range| changed.extend_range(range.clone()));
        changed
    }

    /// What the write staged so far says of `key`: `Some(state)` if it set or deleted the key
    /// (or deleted a range holding it: `Some(None)`), `None` if the store's state still holds.
    pub fn staged_state(&self, key: &[u8]) -> Option<Option<StoredEntry>> {
        match self.writes.get(key) {
            Some(staged) => Some(staged.clone()),
            None if self.deleted_ranges.iter().any(|r| r.contains(key)) => Some(None),
            None => None,
        }
    }

    /// Stages storing `entry` at `key`.
    pub fn stage_put(&mut self, key: &[u8], entry: StoredEntry) {
        self.writes.insert(key.to_vec(), Some(entry));
    }

    /// Stages deleting `key`.
    pub fn stage_delete(&mut self, key: &[u8]) {
        self.writes.insert(key.to_vec(), None);
    }

    /// Stages deleting every key of `range`: what the write staged inside it so far goes with
    /// it, what it stages later stays in `writes` (stored after the ranges are deleted).
    pub fn stage_delete_range(&mut self, range: &KeyRange) {
        if range.is_empty() {
            return; // `BTreeMap::range` refuses an inverted range
        }
        let inside: Vec<Vec<u8>> = self
            .writes
            .range(range.start.clone()..range.end.clone())
            .map(|(key, _)| key.clone())
            .collect();
        for key in inside {
            self.writes.remove(&key);
        }
        self.deleted_ranges.push(range.clone());
    }

    /// Stages enqueueing `message`.
    pub fn stage_enqueue(&mut self, message: QueuedMessage) {
        self.enqueued.push(message);
    }
}

/// Runs [`apply_atomic_write`] over an overlay of the entries `read` returns (stored entries,
/// expired or not). Returns `Ok(None)` if a check failed, the commit to apply otherwise; an error
/// (a refused mutation, or one from `read`) leaves nothing to apply.
///
/// ```
/// use std::collections::BTreeMap;
/// use open_deno_kv_model::{AtomicWrite, KvValue, Limits, Mutation, StoredEntry, Versionstamp, chrono::Utc};
///
/// let stored: BTreeMap<Vec<u8>, StoredEntry> = BTreeMap::new();
/// let write = AtomicWrite {
///     mutations: vec![Mutation::set(b"\x02a\x00".to_vec(), KvValue::U64(1))],
///     ..Default::default()
/// };
/// let write = Limits::deno().accept_atomic_write(write, Utc::now()).unwrap();
/// let stamp = Versionstamp::from_version(1, 0);
/// let staged = open_deno_kv_model::stage_atomic_write(|key| Ok(stored.get(key).cloned()), &write, stamp, Utc::now())
///     .unwrap()
///     .expect("no checks, so it commits");
/// assert_eq!(staged.writes.len(), 1);
/// ```
pub fn stage_atomic_write(
    read: impl FnMut(&[u8]) -> Result<Option<StoredEntry>, KvError>,
    write: &ValidatedWrite,
    versionstamp: Versionstamp,
    now: DateTime<Utc>,
) -> Result<Option<StagedCommit>, KvError> {
    let mut overlay = Overlay {
        read,
        staged: StagedCommit::default(),
    };
    match apply_atomic_write(&mut overlay, write, versionstamp, now)? {
        WriteOutcome::CheckFailed => Ok(None),
        WriteOutcome::Committed { .. } => Ok(Some(overlay.staged)),
    }
}

struct Overlay<R> {
    read: R,
    staged: StagedCommit,
}

impl<R> WriteTransaction for Overlay<R>
where
    R: FnMut(&[u8]) -> Result<Option<StoredEntry>, KvError>,
{
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        match self.staged.staged_state(key) {
            Some(staged) => Ok(staged),
            None => (self.read)(key),
        }
    }

    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError> {
        self.staged.stage_put(key, entry);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.staged.stage_delete(key);
        Ok(())
    }

    fn delete_range(&mut self, range: &KeyRange) -> Result<(), KvError> {
        self.staged.stage_delete_range(range);
        Ok(())
    }

    fn enqueue(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        self.staged.stage_enqueue(message);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AtomicWrite, Check, Enqueue, KvValue, Mutation, MutationKind, Validated};

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).expect("time")
    }

    fn stored(n: u64) -> StoredEntry {
        StoredEntry {
            value: KvValue::U64(n),
            versionstamp: Versionstamp::from_version(1, 0),
            expires_at: None,
        }
    }

    fn sum(key: &[u8], n: u64) -> Mutation {
        Mutation {
            key: key.to_vec(),
            kind: MutationKind::Sum {
                value: KvValue::U64(n),
                min_v8: vec![],
                max_v8: vec![],
                clamp: false,
            },
            expire_at: None,
        }
    }

    /// Later mutations of one write read the earlier ones from the overlay, the rest from the
    /// engine; deletes are staged as `None`; enqueues are collected.
    #[test]
    fn reads_see_the_write_itself_first_then_the_engine() {
        let engine = BTreeMap::from([(b"a".to_vec(), stored(10)), (b"gone".to_vec(), stored(1))]);
        let write = AtomicWrite {
            mutations: vec![
                sum(b"a", 1),
                sum(b"a", 2),
                Mutation::delete(b"gone".to_vec()),
            ],
            enqueues: vec![Enqueue {
                payload: vec![7],
                ready_at: now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..Default::default()
        };
        let stamp = Versionstamp::from_version(2, 0);
        let staged = stage_atomic_write(
            |key| Ok(engine.get(key).cloned()),
            &Validated::vouched(write),
            stamp,
            now(),
        )
        .expect("valid")
        .expect("no checks");
        let a = staged.writes[b"a".as_slice()].as_ref().expect("stored");
        assert_eq!((a.value.clone(), a.versionstamp), (KvValue::U64(13), stamp));
        assert_eq!(staged.writes[b"gone".as_slice()], None);
        assert_eq!(staged.enqueued.len(), 1);
        assert_eq!(staged.enqueued[0].payload, vec![7]);
    }

    /// A failed check stages nothing; an engine error is passed on.
    #[test]
    fn a_failed_check_or_a_read_error_leaves_nothing() {
        let write = AtomicWrite {
            checks: vec![Check {
                key: b"a".to_vec(),
                versionstamp: None,
            }],
            mutations: vec![Mutation::set(b"b".to_vec(), KvValue::U64(1))],
            ..Default::default()
        };
        let write = Validated::vouched(write);
        let stamp = Versionstamp::from_version(2, 0);
        let present = |_: &[u8]| Ok(Some(stored(1)));
        assert!(matches!(
            stage_atomic_write(present, &write, stamp, now()),
            Ok(None)
        ));
        let broken = |_: &[u8]| Err(KvError::Closed);
        assert!(matches!(
            stage_atomic_write(broken, &write, stamp, now()),
            Err(KvError::Closed)
        ));
    }

    /// A range delete in the overlay: it takes what the write staged inside it before, hides
    /// the engine's entries inside it from later reads, and leaves what the write stages after
    /// it; the engine deletes the ranges first, then stores the writes.
    #[test]
    fn a_range_delete_is_staged_in_order() {
        let engine = BTreeMap::from([(b"b1".to_vec(), stored(10)), (b"c".to_vec(), stored(5))]);
        let range = crate::KeyRange::new(b"b".to_vec(), b"c".to_vec());
        let write = AtomicWrite {
            mutations: vec![
                Mutation::set(b"b2".to_vec(), KvValue::U64(1)),
                Mutation::delete_range(range.clone()),
                sum(b"b1", 1), // reads "absent" now: the range took the stored 10
                sum(b"c", 1),
            ],
            ..Default::default()
        };
        let stamp = Versionstamp::from_version(2, 0);
        let staged = stage_atomic_write(
            |key| Ok(engine.get(key).cloned()),
            &Validated::vouched(write),
            stamp,
            now(),
        )
        .expect("valid")
        .expect("no checks");
        assert_eq!(staged.deleted_ranges, vec![range.clone()]);
        let values: Vec<(&[u8], Option<KvValue>)> = staged
            .writes
            .iter()
            .map(|(k, e)| (k.as_slice(), e.as_ref().map(|e| e.value.clone())))
            .collect();
        assert_eq!(
            values,
            vec![
                (b"b1".as_slice(), Some(KvValue::U64(1))),
                (b"c".as_slice(), Some(KvValue::U64(6)))
            ]
        );
        let mut expected = crate::ChangedKeys::new();
        expected.extend([b"b1".to_vec(), b"c".to_vec()]);
        expected.extend_range(range);
        assert_eq!(staged.changed(), expected);
    }
}

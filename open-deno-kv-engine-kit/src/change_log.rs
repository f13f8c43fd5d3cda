//! A write transaction that also writes down what it did, for engines that apply a write in place
//! (open-deno-kv-sqlite) and still owe the change log a record of it.
//!
//! The change log itself (its record, their encoding, retention, replaying a log over a backup)
//! is the model's, in `open_deno_kv_model::change_log`; it is named here too, so an engine finds
//! every change-log item under one path.

pub use open_deno_kv_model::change_log::*;

use crate::queue::QueuedMessage;
use crate::{KeyRange, KvError, StagedCommit, StoredEntry, WriteTransaction};

/// Wraps an engine's [`WriteTransaction`]: every call goes through to it, and what it changed is
/// collected as a [`StagedCommit`] (ranges deleted, the final state of each key, messages), the
/// same effects [`crate::stage_atomic_write`] hands an engine that stages. Reads are not
/// recorded. Use it only for a write that logs: it costs a copy of every key and value written.
///
/// ```
/// use open_deno_kv_engine_kit::change_log::RecordingTransaction;
/// use open_deno_kv_engine_kit::{KvError, KvValue, StoredEntry, Versionstamp, WriteTransaction};
/// # struct Nothing;
/// # impl WriteTransaction for Nothing {
/// #     fn get(&mut self, _: &[u8]) -> Result<Option<StoredEntry>, KvError> { Ok(None) }
/// #     fn put(&mut self, _: &[u8], _: StoredEntry) -> Result<(), KvError> { Ok(()) }
/// #     fn delete(&mut self, _: &[u8]) -> Result<(), KvError> { Ok(()) }
/// #     fn delete_range(&mut self, _: &open_deno_kv_engine_kit::KeyRange) -> Result<(), KvError> { Ok(()) }
/// #     fn enqueue(&mut self, _: open_deno_kv_engine_kit::QueuedMessage) -> Result<(), KvError> { Ok(()) }
/// # }
/// let mut engine_txn = Nothing;
/// let mut txn = RecordingTransaction::new(&mut engine_txn);
/// let entry = StoredEntry {
///     value: KvValue::U64(1),
///     versionstamp: Versionstamp::from_version(1, 0),
///     expires_at: None,
/// };
/// txn.put(b"a", entry.clone())?;
/// txn.delete(b"b")?;
/// let changes = txn.into_changes();
/// assert_eq!(changes.writes[b"a".as_slice()], Some(entry));
/// assert_eq!(changes.writes[b"b".as_slice()], None);
/// # Ok::<(), KvError>(())
/// ```
pub struct RecordingTransaction<'a, T: WriteTransaction> {
    inner: &'a mut T,
    changes: StagedCommit,
}

impl<'a, T: WriteTransaction> RecordingTransaction<'a, T> {
    /// Starts recording over `inner`.
    pub fn new(inner: &'a mut T) -> Self {
        RecordingTransaction {
            inner,
            changes: StagedCommit::default(),
        }
    }

    /// What the write did.
    pub fn into_changes(self) -> StagedCommit {
        self.changes
    }
}

impl<T: WriteTransaction> WriteTransaction for RecordingTransaction<'_, T> {
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        self.inner.get(key)
    }

    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError> {
        self.inner.put(key, entry.clone())?;
        self.changes.stage_put(key, entry);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.inner.delete(key)?;
        self.changes.stage_delete(key);
        Ok(())
    }

    fn delete_range(&mut self, range: &KeyRange) -> Result<(), KvError> {
        self.inner.delete_range(range)?;
        self.changes.stage_delete_range(range);
        Ok(())
    }

    fn enqueue(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        self.inner.enqueue(message.clone())?;
        self.changes.stage_enqueue(message);
        Ok(())
    }
}

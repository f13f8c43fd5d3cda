//! The atomic write path, written once: checks, then mutations in order, then enqueues, against
//! any engine's transaction.
//!
//! A backend opens a write transaction in its engine, allocates the next versionstamp, wraps the
//! transaction in a [`WriteTransaction`] (four small methods: get, put, delete, enqueue) and calls
//! [`apply_atomic_write`]. If that returns [`WriteOutcome::Committed`] the backend commits its
//! transaction; on [`WriteOutcome::CheckFailed`] or an error it rolls back (nothing has been
//! written for a failed check; for an error, mutations before the failing one may have been
//! written to the transaction and must be discarded). An engine that cannot roll back one write
//! on its own (several writes per transaction, or no transaction at all) uses
//! [`crate::stage_atomic_write`], which runs this path over an overlay first.
//!
//! So the rules — expired entries count as absent, sum/min/max, versionstamped keys, the default
//! backoff schedule, which writes clear an expiry — live here and not in each backend.

use chrono::{DateTime, Utc};

use crate::queue::QueuedMessage;
use crate::rules::{MinMax, SumBounds, apply_min_max, apply_sum, versionstamped_key};
use crate::{KeyRange, KvError, KvValue, MutationKind, ValidatedWrite, Versionstamp};

/// An entry as a backend stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    /// The value.
    pub value: KvValue,
    /// The versionstamp of the commit that wrote it.
    pub versionstamp: Versionstamp,
    /// When it expires, if ever.
    pub expires_at: Option<DateTime<Utc>>,
}

impl StoredEntry {
    /// Whether the entry has expired at `now` (expired entries are never visible).
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        is_expired(self.expires_at, now)
    }
}

/// Whether an entry with this expiry time is gone at `now`: expiry happens *at* the expiry time,
/// never before it, and an expired entry is never returned by a read.
pub fn is_expired(expires_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    expires_at.is_some_and(|at| at <= now)
}

/// The view of an engine's open write transaction that [`apply_atomic_write`] needs.
///
/// `get` returns what is stored, expired or not; the caller decides visibility.
pub trait WriteTransaction {
    /// The stored entry for an encoded key, if any.
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError>;
    /// Stores an entry, replacing any other.
    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError>;
    /// Removes an entry if present.
    fn delete(&mut self, key: &[u8]) -> Result<(), KvError>;
    /// Removes every entry in `range` (expired or not), natively: one statement or one range
    /// drain, not a loop over reads. Only called for a write holding a
    /// [`MutationKind::DeleteRange`], which [`crate::Checked`] lets through only when the engine
    /// sets [`crate::Capabilities::range_delete`]; an engine that does not can answer
    /// [`KvError::Unsupported`].
    fn delete_range(&mut self, range: &KeyRange) -> Result<(), KvError>;
    /// Stores a new queue message.
    fn enqueue(&mut self, message: QueuedMessage) -> Result<(), KvError>;
}

/// What [`apply_atomic_write`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A check did not match; nothing was written. The backend reports "not committed".
    CheckFailed,
    /// Everything was applied to the transaction; the backend commits it.
    Committed {
        /// Every encoded key the write set or deleted, in mutation order (may repeat), for watch
        /// notifications.
        changed_keys: Vec<Vec<u8>>,
        /// Every range the write deleted as a whole ([`MutationKind::DeleteRange`]), in order.
        changed_ranges: Vec<KeyRange>,
        /// Whether the write enqueued messages, so the backend can wake its consumers.
        enqueued: bool,
    },
}

/// Applies a validated atomic write to `txn` as of `now`, stamping writes with `versionstamp`.
///
/// The write must have passed [`crate::Limits::accept_atomic_write`]: the [`ValidatedWrite`]
/// type is the proof, so an unvalidated write does not compile here.
pub fn apply_atomic_write(
    txn: &mut impl WriteTransaction,
    write: &ValidatedWrite,
    versionstamp: Versionstamp,
    now: DateTime<Utc>,
) -> Result<WriteOutcome, KvError> {
    for check in &write.checks {
        let current = visible(txn, &check.key, now)?.map(|entry| entry.versionstamp);
        if current != check.versionstamp {
            return Ok(WriteOutcome::CheckFailed);
        }
    }

    let mut changed_keys = Vec::with_capacity(write.mutations.len());
    let mut changed_ranges = Vec::new();
    for mutation in &write.mutations {
        let stamp = |value: KvValue, expires_at| StoredEntry {
            value,
            versionstamp,
            expires_at,
        };
        let key = match &mutation.kind {
            MutationKind::SetSuffixVersionstampedKey(_) => {
                versionstamped_key(&mutation.key, versionstamp)
            }
            _ => mutation.key.clone(),
        };
        let failed = |source| KvError::Mutation {
            key: mutation.key.clone(),
            source,
        };
        match &mutation.kind {
            MutationKind::Set(value) | MutationKind::SetSuffixVersionstampedKey(value) => {
                txn.put(&key, stamp(value.clone(), mutation.expire_at))?;
            }
            MutationKind::Delete => txn.delete(&key)?,
            MutationKind::DeleteRange { end } => {
                let range = KeyRange::new(key, end.clone());
                if !range.is_empty() {
                    txn.delete_range(&range)?;
                    changed_ranges.push(range);
                }
                continue;
            }
            MutationKind::Sum {
                value,
                min_v8,
                max_v8,
                clamp,
            } => {
                let current = visible(txn, &key, now)?.map(|e| e.value);
                let bounds = SumBounds {
                    min_v8: min_v8.clone(),
                    max_v8: max_v8.clone(),
                    clamp: *clamp,
                };
                let result = apply_sum(current.as_ref(), value, &bounds).map_err(failed)?;
                txn.put(&key, stamp(result, None))?;
            }
            MutationKind::Min(value) | MutationKind::Max(value) => {
                let which = if matches!(mutation.kind, MutationKind::Min(_)) {
                    MinMax::Min
                } else {
                    MinMax::Max
                };
                let current = visible(txn, &key, now)?.map(|e| e.value);
                let result = apply_min_max(which, current.as_ref(), value).map_err(failed)?;
                txn.put(&key, stamp(result, None))?;
            }
        }
        changed_keys.push(key);
    }

    for enqueue in &write.enqueues {
        txn.enqueue(QueuedMessage::from_enqueue(enqueue))?;
    }
    Ok(WriteOutcome::Committed {
        changed_keys,
        changed_ranges,
        enqueued: !write.enqueues.is_empty(),
    })
}

/// The entry at `key` unless it is absent or expired.
fn visible(
    txn: &mut impl WriteTransaction,
    key: &[u8],
    now: DateTime<Utc>,
) -> Result<Option<StoredEntry>, KvError> {
    Ok(txn.get(key)?.filter(|entry| !entry.is_expired(now)))
}

#[cfg(test)]
mod tests;

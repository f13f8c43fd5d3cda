//! Atomic operations: checks, mutations and enqueues committed all together or not at all.
//!
//! ```no_run
//! # async fn demo(kv: open_deno_kv::Kv) -> open_deno_kv::Result<()> {
//! use open_deno_kv::key;
//! // Move 10 from alice to bob, but only if neither balance changed since it was read.
//! let alice = kv.get(key!["balance", "alice"]).await?;
//! let bob = kv.get(key!["balance", "bob"]).await?;
//! let outcome = kv
//!     .atomic()
//!     .check(&alice)
//!     .check(&bob)
//!     .sum(key!["balance", "alice"], u64::MAX - 9) // u64 sums wrap: this subtracts 10
//!     .sum(key!["balance", "bob"], 10u64)
//!     .commit()
//!     .await?;
//! if !outcome.is_committed() {
//!     // Someone else wrote one of the balances first: read again and retry.
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_model::{
    AtomicWrite, Backend, Check, Clock, Key, KvValue, Mutation, MutationKind, Versionstamp,
    encode_key,
};

use crate::entry::{Entry, MaybeEntry};
use crate::error::{Error, Result};
use crate::list::Selector;
use crate::outcome::CommitOutcome;
use crate::queue::EnqueueOptions;
use crate::value::IntoValue;

/// One check of an atomic operation (`Deno.AtomicCheck`): commit only if `key` is still at
/// `versionstamp` (`None`: only if the key does not exist).
///
/// Made from what a read returned (`check(&entry)`, as in Deno) or from a key and a
/// versionstamp (`check((key!["k"], None))`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtomicCheck {
    /// The key checked.
    pub key: Key,
    /// The versionstamp it must still have; `None`: it must not exist.
    pub versionstamp: Option<Versionstamp>,
}

impl From<&MaybeEntry> for AtomicCheck {
    /// The key as this read saw it: unchanged, or still absent.
    fn from(entry: &MaybeEntry) -> Self {
        AtomicCheck {
            key: entry.key.clone(),
            versionstamp: entry.versionstamp,
        }
    }
}

impl From<&Entry> for AtomicCheck {
    /// The key unchanged since this entry was read (from a list, say).
    fn from(entry: &Entry) -> Self {
        AtomicCheck {
            key: entry.key.clone(),
            versionstamp: Some(entry.versionstamp),
        }
    }
}

impl<K: Into<Key>> From<(K, Option<Versionstamp>)> for AtomicCheck {
    fn from((key, versionstamp): (K, Option<Versionstamp>)) -> Self {
        AtomicCheck {
            key: key.into(),
            versionstamp,
        }
    }
}

impl<K: Into<Key>> From<(K, Versionstamp)> for AtomicCheck {
    fn from((key, versionstamp): (K, Versionstamp)) -> Self {
        AtomicCheck {
            key: key.into(),
            versionstamp: Some(versionstamp),
        }
    }
}

/// Builds one atomic write; nothing happens until [`AtomicOperation::commit`]. Made by
/// [`crate::Kv::atomic`].
///
/// A key that cannot be encoded (or a value that cannot be enqueued) is reported by `commit`,
/// and nothing is written.
#[must_use = "an atomic operation does nothing until it is committed"]
pub struct AtomicOperation {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    write: AtomicWrite,
    error: Option<Error>,
}

impl AtomicOperation {
    pub(crate) fn new(backend: Arc<dyn Backend>, clock: Arc<dyn Clock>) -> Self {
        AtomicOperation {
            backend,
            clock,
            write: AtomicWrite::default(),
            error: None,
        }
    }

    /// Records the first error; later steps are skipped.
    fn try_step(mut self, step: impl FnOnce(&mut Self) -> Result<()>) -> Self {
        if self.error.is_none()
            && let Err(err) = step(&mut self)
        {
            self.error = Some(err);
        }
        self
    }

    /// Adds a mutation whose kind carries a value converted from `value`.
    fn value_mutation(
        self,
        key: Key,
        value: impl IntoValue,
        kind: impl FnOnce(KvValue) -> MutationKind,
        expire_in: Option<Duration>,
    ) -> Self {
        match value.into_value() {
            Ok(value) => self.mutation(key, kind(value), expire_in),
            Err(err) => self.try_step(|_| Err(err)),
        }
    }

    fn mutation(self, key: Key, kind: MutationKind, expire_in: Option<Duration>) -> Self {
        self.try_step(|op| {
            let expire_at = match expire_in {
                Some(after) => Some(crate::time::time_after(op.clock.now(), after)?),
                None => None,
            };
            op.write.mutations.push(Mutation {
                key: encode_key(&key)?,
                kind,
                expire_at,
            });
            Ok(())
        })
    }

    /// Commit only if the checked key is unchanged: pass what a read returned, as in Deno
    /// (`check(&entry)`: the key still at the versionstamp read, or still absent), or a
    /// `(key, versionstamp)` pair.
    pub fn check(self, check: impl Into<AtomicCheck>) -> Self {
        let AtomicCheck { key, versionstamp } = check.into();
        self.try_step(|op| {
            op.write.checks.push(Check {
                key: encode_key(&key)?,
                versionstamp,
            });
            Ok(())
        })
    }

    /// Sets `key` to `value` (any [`IntoValue`]: a string, number, `u64`, bytes, JSON,
    /// [`crate::Json`] of a serde type, …).
    pub fn set(self, key: impl Into<Key>, value: impl IntoValue) -> Self {
        self.value_mutation(key.into(), value, MutationKind::Set, None)
    }

    /// Sets `key` to `value`, to disappear `expire_in` from now (Deno's `expireIn`).
    pub fn set_expiring(
        self,
        key: impl Into<Key>,
        value: impl IntoValue,
        expire_in: Duration,
    ) -> Self {
        self.value_mutation(key.into(), value, MutationKind::Set, Some(expire_in))
    }

    /// Sets the key `prefix` + the commit's versionstamp (a 20-hex-digit string part) to `value`:
    /// Deno's `[...prefix, kv.commitVersionstamp()]`. Such keys sort in commit order.
    pub fn set_versionstamped(self, prefix: impl Into<Key>, value: impl IntoValue) -> Self {
        self.value_mutation(
            prefix.into(),
            value,
            MutationKind::SetSuffixVersionstampedKey,
            None,
        )
    }

    /// Deletes `key`.
    pub fn delete(self, key: impl Into<Key>) -> Self {
        self.mutation(key.into(), MutationKind::Delete, None)
    }

    /// Deletes every entry the selector covers (a prefix, or `[start, end)`), in this commit
    /// and at the position of this call among its mutations: a set before it in the same
    /// operation is deleted with the range, a set after it stays. One mutation whatever the
    /// number of entries. Not part of Deno KV: a backend without
    /// [`Capabilities::range_delete`](open_deno_kv_model::Capabilities) refuses the commit with
    /// [`KvError::Unsupported`](crate::KvError::Unsupported).
    pub fn delete_range(self, selector: Selector) -> Self {
        self.try_step(|op| {
            op.write
                .mutations
                .push(Mutation::delete_range(selector.key_range()?));
            Ok(())
        })
    }

    /// Adds `operand` to the value at `key` (a missing key takes the operand). A `u64` operand
    /// works on `Deno.KvU64` values and wraps around; a V8 number or bigint operand adds to a V8
    /// value of the same type.
    pub fn sum(self, key: impl Into<Key>, operand: impl IntoValue) -> Self {
        self.value_mutation(
            key.into(),
            operand,
            |operand| Mutation::sum(Vec::new(), operand).kind,
            None,
        )
    }

    /// Keeps the smaller of the stored `Deno.KvU64` and `operand`.
    pub fn min(self, key: impl Into<Key>, operand: u64) -> Self {
        self.mutation(key.into(), MutationKind::Min(KvValue::U64(operand)), None)
    }

    /// Keeps the larger of the stored `Deno.KvU64` and `operand`.
    pub fn max(self, key: impl Into<Key>, operand: u64) -> Self {
        self.mutation(key.into(), MutationKind::Max(KvValue::U64(operand)), None)
    }

    /// Adds any mutation open-deno-kv-model knows (for example a V8 sum with bounds), as it is.
    pub fn mutate(mut self, mutation: Mutation) -> Self {
        if self.error.is_none() {
            self.write.mutations.push(mutation);
        }
        self
    }

    /// Enqueues `message` in the same commit: it is delivered only if the commit happens.
    pub fn enqueue(self, message: impl IntoValue, options: EnqueueOptions) -> Self {
        let message = message.into_value();
        self.try_step(|op| {
            let enqueue = options.to_enqueue(&message?, op.clock.now())?;
            op.write.enqueues.push(enqueue);
            Ok(())
        })
    }

    /// Commits everything: [`CommitOutcome::Committed`] with the commit's versionstamp, or
    /// [`CommitOutcome::CheckFailed`] (then nothing was written). Errors (a limit, a bad key, a
    /// value that does not convert, a closed store) also write nothing.
    pub async fn commit(self) -> Result<CommitOutcome> {
        if let Some(err) = self.error {
            return Err(err);
        }
        Ok(self.backend.atomic_write(self.write).await?.into())
    }
}

//! Atomic operations: checks, mutations and enqueues committed all together or not at all.
//!
//! ```no_run
//! # async fn demo(kv: kv::Kv) -> kv::Result<()> {
//! use kv::key;
//! // Move 10 from alice to bob, but only if neither balance changed since it was read.
//! let alice = kv.get(key!["balance", "alice"]).await?;
//! let bob = kv.get(key!["balance", "bob"]).await?;
//! let committed = kv
//!     .atomic()
//!     .check(key!["balance", "alice"], alice.versionstamp)
//!     .check(key!["balance", "bob"], bob.versionstamp)
//!     .sum(key!["balance", "alice"], u64::MAX - 9) // u64 sums wrap: this subtracts 10
//!     .sum(key!["balance", "bob"], 10u64)
//!     .commit()
//!     .await?;
//! if committed.is_none() {
//!     // Someone else wrote one of the balances first: read again and retry.
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use kv_proto::{
    AtomicWrite, Backend, Check, Clock, CommitResult, Key, KvValue, Mutation, MutationKind,
    Versionstamp, encode_key,
};

use crate::error::{Error, Result};
use crate::queue::EnqueueOptions;

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

    fn mutation(self, key: Key, kind: MutationKind, expire_in: Option<Duration>) -> Self {
        self.try_step(|op| {
            let expire_at = match expire_in {
                Some(after) => Some(crate::handle::expiry_time(op.clock.now(), after)?),
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

    /// Commit only if `key` is still at `versionstamp` (`None`: only if the key does not exist).
    /// Take the versionstamp from a [`crate::MaybeEntry`].
    pub fn check(self, key: impl Into<Key>, versionstamp: Option<Versionstamp>) -> Self {
        let key = key.into();
        self.try_step(|op| {
            op.write.checks.push(Check {
                key: encode_key(&key)?,
                versionstamp,
            });
            Ok(())
        })
    }

    /// Sets `key` to `value`.
    pub fn set(self, key: impl Into<Key>, value: impl Into<KvValue>) -> Self {
        self.mutation(key.into(), MutationKind::Set(value.into()), None)
    }

    /// Sets `key` to `value`, to disappear `expire_in` from now (Deno's `expireIn`).
    pub fn set_expiring(
        self,
        key: impl Into<Key>,
        value: impl Into<KvValue>,
        expire_in: Duration,
    ) -> Self {
        self.mutation(key.into(), MutationKind::Set(value.into()), Some(expire_in))
    }

    /// Sets the key `prefix` + the commit's versionstamp (a 20-hex-digit string part) to `value`:
    /// Deno's `[...prefix, kv.commitVersionstamp()]`. Such keys sort in commit order.
    pub fn set_versionstamped(self, prefix: impl Into<Key>, value: impl Into<KvValue>) -> Self {
        self.mutation(
            prefix.into(),
            MutationKind::SetSuffixVersionstampedKey(value.into()),
            None,
        )
    }

    /// Deletes `key`.
    pub fn delete(self, key: impl Into<Key>) -> Self {
        self.mutation(key.into(), MutationKind::Delete, None)
    }

    /// Adds `operand` to the value at `key` (a missing key takes the operand). A `u64` operand
    /// works on `Deno.KvU64` values and wraps around; a V8 number or bigint operand adds to a V8
    /// value of the same type.
    pub fn sum(self, key: impl Into<Key>, operand: impl Into<KvValue>) -> Self {
        let kind = Mutation::sum(Vec::new(), operand.into()).kind;
        self.mutation(key.into(), kind, None)
    }

    /// Keeps the smaller of the stored `Deno.KvU64` and `operand`.
    pub fn min(self, key: impl Into<Key>, operand: u64) -> Self {
        self.mutation(key.into(), MutationKind::Min(KvValue::U64(operand)), None)
    }

    /// Keeps the larger of the stored `Deno.KvU64` and `operand`.
    pub fn max(self, key: impl Into<Key>, operand: u64) -> Self {
        self.mutation(key.into(), MutationKind::Max(KvValue::U64(operand)), None)
    }

    /// Adds any mutation kv-proto knows (for example a V8 sum with bounds), as it is.
    pub fn mutate(mut self, mutation: Mutation) -> Self {
        if self.error.is_none() {
            self.write.mutations.push(mutation);
        }
        self
    }

    /// Enqueues `message` in the same commit: it is delivered only if the commit happens.
    pub fn enqueue(self, message: impl Into<KvValue>, options: EnqueueOptions) -> Self {
        let message = message.into();
        self.try_step(|op| {
            let enqueue = options.to_enqueue(&message, op.clock.now())?;
            op.write.enqueues.push(enqueue);
            Ok(())
        })
    }

    /// Commits everything: `Some` with the commit's versionstamp, or `None` if a check failed
    /// (then nothing was written). Errors (a limit, a bad key, a closed store) also write
    /// nothing.
    pub async fn commit(self) -> Result<Option<CommitResult>> {
        if let Some(err) = self.error {
            return Err(err);
        }
        Ok(self.backend.atomic_write(self.write).await?)
    }
}

//! Requests that passed Deno's limits, as types: the proof that validation ran.

use std::ops::Deref;

use crate::{AtomicWrite, SnapshotRead};

/// A request of type `T` that passed [`crate::Limits`]; read it through `Deref`, take it apart
/// with [`Validated::into_inner`]: the proof that validation ran.
///
/// [`Limits::accept_atomic_write`](crate::Limits::accept_atomic_write) (and its read and watch
/// siblings) is the only way to build a [`Validated`] value: the field is private, and there is no
/// public constructor, no `From`, no `Default`. The write path every engine runs
/// ([`crate::apply_atomic_write`], [`crate::stage_atomic_write`]) and the [`crate::Engine`] trait
/// take these types, so an engine cannot apply a write nobody validated — the compiler refuses
/// it, instead of a review having to notice a missing call.
///
/// ```
/// use open_deno_kv_model::{AtomicWrite, KvValue, Limits, Mutation, ValidatedWrite, encode_key, key};
///
/// let write = AtomicWrite {
///     mutations: vec![Mutation::set(encode_key(&key!["a"]).unwrap(), KvValue::U64(1))],
///     ..Default::default()
/// };
/// let valid: ValidatedWrite = Limits::deno().accept_atomic_write(write, chrono::Utc::now()).unwrap();
/// assert_eq!(valid.mutations.len(), 1); // read through `Deref`
/// let _plain: AtomicWrite = valid.into_inner(); // or taken back apart
/// ```
///
/// Building one by hand does not compile:
///
/// ```compile_fail
/// use open_deno_kv_model::{AtomicWrite, Validated};
/// let forged = Validated(AtomicWrite::default()); // the field is private
/// ```
///
/// ```compile_fail
/// use open_deno_kv_model::{AtomicWrite, ValidatedWrite};
/// let forged = ValidatedWrite::from(AtomicWrite::default()); // no `From`
/// ```
///
/// ```compile_fail
/// use open_deno_kv_model::ValidatedWrite;
/// let forged = ValidatedWrite::default(); // no `Default`
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated<T>(T);

/// An atomic write within the limits, built by [`crate::Limits::accept_atomic_write`]: what an
/// engine's write path accepts.
pub type ValidatedWrite = Validated<AtomicWrite>;

/// A snapshot read within the limits, built by [`crate::Limits::accept_snapshot_read`].
pub type ValidatedRead = Validated<SnapshotRead>;

/// Encoded keys a watch may follow (at most 10, each well-formed), built by
/// [`crate::Limits::accept_watch`].
pub type ValidatedWatch = Validated<Vec<Vec<u8>>>;

/// A key range whose bounds passed [`crate::Limits::accept_range`]: what an engine counts or
/// watches as a whole.
pub type ValidatedRange = Validated<crate::KeyRange>;

impl<T> Validated<T> {
    /// Wraps a request that open-deno-kv-model itself vouches for: one that just passed the limits, or one
    /// open-deno-kv-model built from data that did (a dead-letter write from a stored message's
    /// `keys_if_undelivered`, validated when it was enqueued).
    pub(crate) fn vouched(request: T) -> Self {
        Validated(request)
    }

    /// The request itself.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> Deref for Validated<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

//! The one error type of open-deno-kv-model and of every backend.
//!
//! Variants are split by what a caller can do about them: fix the input ([`KvError::Limit`],
//! [`KvError::InvalidKey`], [`KvError::InvalidArgument`], [`KvError::Mutation`]), stop using a
//! closed handle ([`KvError::Closed`]), pick another backend ([`KvError::Unsupported`]), find out
//! whether a write landed before retrying it ([`KvError::OutcomeUnknown`]), or treat the store as
//! failing ([`KvError::Storage`], [`KvError::Corrupt`]).
//!
//! Where Deno has an error text, `to_string()` is exactly that text, so programs and tests that
//! compare messages see the same words Deno prints. The key involved is kept in a field.

use std::error::Error as StdError;
use std::sync::Arc;

use thiserror::Error;

use crate::{KeyError, LimitError, MutationError, ValueError};

/// Everything that can go wrong in a Deno KV operation.
///
/// A failed *check* is not an error: [`crate::Backend::atomic_write`] returns `Ok(None)` for it.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum KvError {
    /// A request exceeds one of Deno's limits (too large, too many). Display is Deno's text.
    #[error(transparent)]
    Limit(#[from] LimitError),

    /// A key that cannot be encoded, decoded or written (empty, integer too large, bad bytes).
    #[error("{reason}")]
    InvalidKey {
        /// What is wrong.
        reason: KeyError,
        /// The encoded key, when there is one.
        key: Option<Vec<u8>>,
    },

    /// A request that is malformed in another way (for example a zero read limit, a bad backoff
    /// schedule, a delay too long). The message is Deno's text where Deno has one.
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong, in Deno's words where possible.
        message: String,
    },

    /// A `sum`, `min` or `max` that cannot apply to the stored value or operand. The whole write
    /// is rejected and nothing is committed.
    #[error("{source}")]
    Mutation {
        /// The encoded key of the failing mutation.
        key: Vec<u8>,
        /// Why it failed (Display is Deno's text).
        source: MutationError,
    },

    /// The backend was closed; open a new one.
    #[error("the database is closed")]
    Closed,

    /// A write to a database opened read-only.
    #[error("the database was opened read-only")]
    ReadOnly,

    /// The backend does not offer this feature (see [`crate::Capabilities`]).
    #[error("{feature} is not supported by this backend")]
    Unsupported {
        /// The feature, e.g. "queues".
        feature: &'static str,
    },

    /// A restore ([`crate::Backend::import_snapshot`]) into a store that already holds entries
    /// or queued messages; nothing was written.
    #[error("the database is not empty: a snapshot is imported only into a new or empty database")]
    NotEmpty,

    /// The storage engine failed (I/O error, lock failure...). The source says why.
    #[error("storage error: {source}")]
    Storage {
        /// The engine's error.
        source: Arc<dyn StdError + Send + Sync>,
    },

    /// A write whose outcome nobody can tell: it was handed to the store, which then became
    /// unreachable before it could say whether the write was committed, and stayed unreachable
    /// for as long as the engine kept trying to find out. The write may or may not have been
    /// applied. Do not retry it blindly (a `sum` could count twice): read what it wrote — or
    /// guard the retry with a check — once the store answers again.
    ///
    /// Engines that can look the outcome up (open-deno-kv-postgres records every commit) report
    /// this only after a deadline; a network client reports it when a request was sent and its
    /// answer lost.
    #[error(
        "the write may or may not have been committed: the store could not be reached to \
         find out ({source})"
    )]
    OutcomeUnknown {
        /// Why the outcome could not be learnt (the engine's error).
        source: Arc<dyn StdError + Send + Sync>,
    },

    /// Stored data that does not decode (a foreign or damaged file).
    #[error("corrupt data in storage: {message}")]
    Corrupt {
        /// What did not decode, and where.
        message: String,
    },

    /// This project's own machinery failed, not the storage: a worker thread that panicked or
    /// stopped without an answer, a backend that broke its contract (a failed check reported for
    /// a write without checks). A bug to report; the operation may or may not have happened.
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
}

impl KvError {
    /// Wraps an engine error as [`KvError::Storage`].
    pub fn storage(source: impl StdError + Send + Sync + 'static) -> Self {
        KvError::Storage {
            source: Arc::new(source),
        }
    }

    /// Wraps an engine error as [`KvError::OutcomeUnknown`]: a write that may or may not have
    /// been committed.
    pub fn outcome_unknown(source: impl StdError + Send + Sync + 'static) -> Self {
        KvError::OutcomeUnknown {
            source: Arc::new(source),
        }
    }

    /// An [`KvError::InvalidArgument`] with this message.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        KvError::InvalidArgument {
            message: message.into(),
        }
    }

    /// An [`KvError::Internal`] with this message.
    pub fn internal(message: impl Into<String>) -> Self {
        KvError::Internal {
            message: message.into(),
        }
    }

    /// An [`KvError::InvalidKey`] for an encoded key.
    pub fn invalid_key(reason: KeyError, key: &[u8]) -> Self {
        KvError::InvalidKey {
            reason,
            key: Some(key.to_vec()),
        }
    }

    /// Whether the caller's input is at fault (as opposed to the store or its state).
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            KvError::Limit(_)
                | KvError::InvalidKey { .. }
                | KvError::InvalidArgument { .. }
                | KvError::Mutation { .. }
        )
    }
}

impl From<KeyError> for KvError {
    fn from(reason: KeyError) -> Self {
        KvError::InvalidKey { reason, key: None }
    }
}

impl From<ValueError> for KvError {
    /// A stored value that does not decode is corruption, not bad input.
    fn from(err: ValueError) -> Self {
        KvError::Corrupt {
            message: err.to_string(),
        }
    }
}

//! The one error type of this crate.

use std::error::Error as StdError;
use std::sync::Arc;

use open_deno_kv_model::{KeyError, KvError, LimitError, MutationError};
use thiserror::Error;

use crate::v8::V8Error;

/// Everything a [`crate::Kv`] call can fail with, one level deep: match the variant and act.
///
/// A failed *check* is not an error: [`crate::AtomicOperation::commit`] returns
/// [`crate::CommitOutcome::CheckFailed`] for it. Where Deno has an error text, `to_string()` is
/// that text.
///
/// ```
/// # async fn demo(kv: open_deno_kv::Kv) {
/// use open_deno_kv::{Error, key};
/// match kv.set(key!["big"], vec![0u8; 70_000]).await {
///     Err(Error::Limit(limit)) => assert_eq!(limit.to_string(), "Value too large (max 65536 bytes)"),
///     Err(Error::Closed) => { /* reopen the store */ }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum Error {
    /// A request exceeds one of Deno's limits (too large, too many); Display is Deno's text.
    #[error(transparent)]
    Limit(#[from] LimitError),

    /// A key that cannot be encoded or written (empty where a key is needed, an integer too
    /// large, …).
    #[error("{reason}")]
    InvalidKey {
        /// What is wrong.
        reason: KeyError,
        /// The encoded key, when there is one.
        key: Option<Vec<u8>>,
    },

    /// A request that is malformed in another way (a bad cursor, a selector whose `start` is
    /// outside its `prefix`, a back-off schedule too long, …), in Deno's words where Deno has
    /// them.
    #[error("{message}")]
    InvalidArgument {
        /// What is wrong.
        message: String,
    },

    /// A `sum`, `min` or `max` that cannot apply to the stored value or operand; nothing was
    /// written.
    #[error("{source}")]
    Mutation {
        /// The encoded key of the failing mutation.
        key: Vec<u8>,
        /// Why it failed (Display is Deno's text).
        source: MutationError,
    },

    /// The store was closed: open it again.
    #[error("the database is closed")]
    Closed,

    /// A write to a store opened read-only.
    #[error("the database was opened read-only")]
    ReadOnly,

    /// The backend does not offer this feature (for example queues over some remote servers).
    #[error("{feature} is not supported by this backend")]
    Unsupported {
        /// The feature, e.g. "queues".
        feature: &'static str,
    },

    /// The storage engine, the file system or the network failed; the source says why.
    #[error("storage error: {source}")]
    Storage {
        /// The underlying error.
        source: Arc<dyn StdError + Send + Sync>,
    },

    /// A write that may or may not have been committed: the store became unreachable before it
    /// could say whether the write landed, and stayed unreachable past the engine's deadline for
    /// finding out. Read what the write did (or guard a retry with a check) before retrying: a
    /// blind retry of a `sum` could count twice. See [`KvError::OutcomeUnknown`].
    #[error(
        "the write may or may not have been committed: the store could not be reached to \
         find out ({source})"
    )]
    OutcomeUnknown {
        /// Why the outcome could not be learnt.
        source: Arc<dyn StdError + Send + Sync>,
    },

    /// Stored data that does not decode (a foreign or damaged file, or a stored key that is not
    /// a Deno KV key).
    #[error("corrupt data in storage: {message}")]
    Corrupt {
        /// What did not decode, and where.
        message: String,
    },

    /// A value that does not convert between V8 and JSON or a Rust type (a serde type that
    /// JSON cannot express, a stored value of another shape than the type asked for, …).
    #[error(transparent)]
    Serialization(#[from] V8Error),

    /// A backend URL this crate cannot open.
    #[error("cannot open backend {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it (and what would be accepted).
        reason: String,
    },
}

impl Error {
    /// A [`Error::InvalidArgument`] with this message.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    /// A [`Error::Storage`] wrapping `source` (for a handler or a tool that fails on I/O).
    pub fn storage(source: impl StdError + Send + Sync + 'static) -> Self {
        Error::Storage {
            source: Arc::new(source),
        }
    }

    /// Whether the caller's input is at fault (as opposed to the store or its state): fix the
    /// request rather than retry it.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::Limit(_)
                | Error::InvalidKey { .. }
                | Error::InvalidArgument { .. }
                | Error::Mutation { .. }
                | Error::Serialization(_)
                | Error::BadUrl { .. }
        )
    }
}

impl From<KvError> for Error {
    /// The store's error, as the same variant of this enum.
    fn from(err: KvError) -> Self {
        match err {
            KvError::Limit(limit) => Error::Limit(limit),
            KvError::InvalidKey { reason, key } => Error::InvalidKey { reason, key },
            KvError::InvalidArgument { message } => Error::InvalidArgument { message },
            KvError::Mutation { key, source } => Error::Mutation { key, source },
            KvError::Closed => Error::Closed,
            KvError::ReadOnly => Error::ReadOnly,
            KvError::Unsupported { feature } => Error::Unsupported { feature },
            KvError::Storage { source } => Error::Storage { source },
            KvError::Corrupt { message } => Error::Corrupt { message },
            KvError::OutcomeUnknown { source } => Error::OutcomeUnknown { source },
            // A kind of failure added to open-deno-kv-model after this crate was written: the store failed
            // in a way this enum has no closer variant for; the original error is the source.
            other => Error::Storage {
                source: Arc::new(other),
            },
        }
    }
}

impl From<KeyError> for Error {
    /// A key given by the caller that cannot be encoded.
    fn from(reason: KeyError) -> Self {
        Error::InvalidKey { reason, key: None }
    }
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

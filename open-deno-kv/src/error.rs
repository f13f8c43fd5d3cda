//! The one error type of this crate.

use std::error::Error as StdError;

use open_deno_kv_model::{KeyError, KvError, LimitError};
use thiserror::Error;

use crate::v8::V8Error;

/// Everything a [`crate::Kv`] call can fail with, one level deep: match the variant and act.
///
/// What the store answers is a [`KvError`], carried as itself in [`Error::Kv`] (not copied
/// variant by variant, so a kind of failure added to the store reaches programs as what it is):
/// Deno's limits, bad keys and arguments, a `sum`/`min`/`max` that cannot apply, a closed or
/// read-only store, an unsupported feature, a restore into a store that is not empty, storage
/// failures, corrupt data. This crate adds what only it can fail with: a value that does not
/// convert ([`Error::Serialization`]) and a backend URL it cannot open ([`Error::BadUrl`]).
///
/// A failed *check* is not an error: [`crate::AtomicOperation::commit`] returns
/// [`crate::CommitOutcome::CheckFailed`] for it. Where Deno has an error text, `to_string()` is
/// that text.
///
/// ```
/// # async fn demo(kv: open_deno_kv::Kv) {
/// use open_deno_kv::{Error, KvError, key};
/// match kv.set(key!["big"], vec![0u8; 70_000]).await {
///     Err(Error::Kv(KvError::Limit(limit))) => {
///         assert_eq!(limit.to_string(), "Value too large (max 65536 bytes)")
///     }
///     Err(Error::Kv(KvError::Closed)) => { /* reopen the store */ }
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum Error {
    /// What the store answered (see [`KvError`]'s variants); Display is the store's text, Deno's
    /// where Deno has one.
    #[error(transparent)]
    Kv(#[from] KvError),

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
    /// A [`KvError::InvalidArgument`] with this message.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::Kv(KvError::invalid_argument(message))
    }

    /// A [`KvError::Storage`] wrapping `source` (for a handler or a tool that fails on I/O).
    pub fn storage(source: impl StdError + Send + Sync + 'static) -> Self {
        Error::Kv(KvError::storage(source))
    }

    /// The store's error, if this is one.
    pub fn as_kv(&self) -> Option<&KvError> {
        match self {
            Error::Kv(err) => Some(err),
            _ => None,
        }
    }

    /// Whether the caller's input is at fault (as opposed to the store or its state): fix the
    /// request rather than retry it.
    pub fn is_invalid_input(&self) -> bool {
        match self {
            Error::Kv(err) => err.is_invalid_input(),
            Error::Serialization(_) | Error::BadUrl { .. } => true,
        }
    }
}

impl From<KeyError> for Error {
    /// A key given by the caller that cannot be encoded.
    fn from(reason: KeyError) -> Self {
        Error::Kv(KvError::from(reason))
    }
}

impl From<LimitError> for Error {
    /// A request over one of Deno's limits.
    fn from(limit: LimitError) -> Self {
        Error::Kv(KvError::Limit(limit))
    }
}

/// `Result` with this crate's [`Error`](enum@Error).
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer of the store reaches programs as itself, including a kind this crate never
    /// names: a restore into a store that is not empty used to arrive as a "storage error".
    #[test]
    fn the_store_s_errors_reach_programs_as_themselves() {
        let err = Error::from(KvError::NotEmpty);
        assert!(matches!(err, Error::Kv(KvError::NotEmpty)), "{err:?}");
        assert_eq!(err.to_string(), KvError::NotEmpty.to_string());
        assert!(!err.is_invalid_input());
        let internal = Error::from(KvError::internal("a worker thread stopped"));
        assert_eq!(
            internal.to_string(),
            "internal error: a worker thread stopped"
        );
    }
}

//! The one error type of this crate.

use thiserror::Error;

use crate::v8::V8Error;

/// Everything a [`crate::Kv`] call can fail with.
///
/// Most errors come from the store and are Deno's own ([`Error::Kv`]: limits with Deno's texts,
/// bad keys, a closed handle, storage failures). The others are this crate's: a backend URL that
/// names nothing it knows, or a value that does not convert to or from V8.
#[derive(Debug, Error)]
pub enum Error {
    /// The store refused the request or failed; see [`kv_proto::KvError`] for what to do.
    #[error(transparent)]
    Kv(#[from] kv_proto::KvError),

    /// A value could not be converted between V8 and JSON or a Rust type.
    #[error(transparent)]
    Value(#[from] V8Error),

    /// A backend URL this crate cannot open.
    #[error("cannot open backend {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it (and what would be accepted).
        reason: String,
    },

    /// A stored key that is not a valid Deno KV key (the file is foreign or damaged).
    #[error("stored key {key_hex} does not decode: {reason}")]
    BadStoredKey {
        /// The key's bytes, in hex.
        key_hex: String,
        /// Why it does not decode.
        reason: kv_proto::KeyError,
    },
}

impl From<kv_proto::KeyError> for Error {
    /// A key given by the caller that cannot be encoded.
    fn from(err: kv_proto::KeyError) -> Self {
        Error::Kv(err.into())
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

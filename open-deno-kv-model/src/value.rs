//! Values and their stored encodings.
//!
//! Deno KV stores every value as bytes plus a small integer naming how to read them:
//!
//! | id | [`ValueEncoding`] | bytes |
//! |---|---|---|
//! | 1 | `V8` | V8 `ValueSerializer` output (any structured-clonable JavaScript value) |
//! | 2 | `U64` | 8 bytes, little-endian (`Deno.KvU64`) |
//! | 3 | `Bytes` | the contents of a top-level `Uint8Array` |
//!
//! ```
//! use open_deno_kv_model::{KvValue, ValueEncoding};
//! let v = KvValue::U64(258);
//! let (bytes, encoding) = v.encode();
//! assert_eq!(bytes, vec![2, 1, 0, 0, 0, 0, 0, 0]);
//! assert_eq!(encoding, ValueEncoding::U64);
//! assert_eq!(KvValue::decode(bytes, encoding.id()).unwrap(), v);
//! ```

use bytes::Bytes;
use thiserror::Error;

/// How a stored value's bytes are to be read. The numeric ids are Deno's and appear on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueEncoding {
    /// V8 serialized JavaScript value.
    V8,
    /// Unsigned 64-bit integer, 8 bytes little-endian.
    U64,
    /// Raw bytes.
    Bytes,
}

impl ValueEncoding {
    /// The id Deno stores next to the value (`v_encoding` in SQLite).
    pub fn id(self) -> i64 {
        match self {
            ValueEncoding::V8 => 1,
            ValueEncoding::U64 => 2,
            ValueEncoding::Bytes => 3,
        }
    }

    /// The encoding with this id.
    pub fn from_id(id: i64) -> Result<Self, ValueError> {
        match id {
            1 => Ok(ValueEncoding::V8),
            2 => Ok(ValueEncoding::U64),
            3 => Ok(ValueEncoding::Bytes),
            other => Err(ValueError::UnknownEncoding(other)),
        }
    }

    /// The lower-case name used in JSON dumps and manifests: `v8`, `u64`, `bytes`.
    pub fn name(self) -> &'static str {
        match self {
            ValueEncoding::V8 => "v8",
            ValueEncoding::U64 => "u64",
            ValueEncoding::Bytes => "bytes",
        }
    }
}

/// Why stored bytes are not a valid value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ValueError {
    /// An encoding id other than 1, 2 or 3.
    #[error("unknown value encoding {0}")]
    UnknownEncoding(i64),
    /// A u64 value that is not exactly 8 bytes long.
    #[error("invalid u64 value: expected 8 bytes, got {0}")]
    BadU64Length(usize),
}

/// A value as Deno KV stores it.
///
/// V8 values are kept as the serializer's bytes: a backend stores them verbatim and never needs to
/// understand them (only `sum` looks inside, see [`crate::rules`]).
///
/// The bytes are a [`Bytes`]: a reference-counted slice. Cloning a value counts a reference
/// instead of copying, and an engine may answer a page of entries as slices of one buffer, one
/// allocation for the page instead of two for every entry (BENCHMARKS.md, "W4"). `Vec<u8>`, `&[u8]`
/// and `&'static [u8]` convert into it with `.into()` or [`Bytes::copy_from_slice`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KvValue {
    /// V8 `ValueSerializer` bytes.
    V8(Bytes),
    /// Raw bytes (a JavaScript `Uint8Array`).
    Bytes(Bytes),
    /// A `Deno.KvU64`.
    U64(u64),
}

/// A Rust `u64` is a `Deno.KvU64` (the u64 encoding), the type `sum`, `min` and `max` work on.
impl From<u64> for KvValue {
    fn from(value: u64) -> Self {
        KvValue::U64(value)
    }
}

/// Rust bytes are a JavaScript `Uint8Array` (the bytes encoding).
impl From<Vec<u8>> for KvValue {
    fn from(bytes: Vec<u8>) -> Self {
        KvValue::Bytes(bytes.into())
    }
}

/// Rust bytes are a JavaScript `Uint8Array` (the bytes encoding).
impl From<Bytes> for KvValue {
    fn from(bytes: Bytes) -> Self {
        KvValue::Bytes(bytes)
    }
}

/// Rust bytes are a JavaScript `Uint8Array` (the bytes encoding).
impl From<&[u8]> for KvValue {
    fn from(bytes: &[u8]) -> Self {
        KvValue::Bytes(Bytes::copy_from_slice(bytes))
    }
}

impl KvValue {
    /// The value borrowed: its bytes as a slice.
    pub fn as_value_ref(&self) -> KvValueRef<'_> {
        match self {
            KvValue::V8(b) => KvValueRef::V8(b),
            KvValue::Bytes(b) => KvValueRef::Bytes(b),
            KvValue::U64(n) => KvValueRef::U64(*n),
        }
    }

    /// The encoding this value is stored with.
    pub fn encoding(&self) -> ValueEncoding {
        self.as_value_ref().encoding()
    }

    /// The number of bytes the value occupies when stored; this is what the value size limit
    /// counts (a u64 is 8).
    pub fn encoded_len(&self) -> usize {
        self.as_value_ref().encoded_len()
    }

    /// The stored bytes and their encoding. The bytes of a V8 or bytes value are shared, not
    /// copied.
    pub fn encode(&self) -> (Bytes, ValueEncoding) {
        match self {
            KvValue::V8(b) | KvValue::Bytes(b) => (b.clone(), self.encoding()),
            KvValue::U64(n) => (Bytes::copy_from_slice(&n.to_le_bytes()), ValueEncoding::U64),
        }
    }

    /// Reads a value back from stored bytes and the encoding id stored beside them. The bytes
    /// are taken as they are: a `Vec<u8>` is not copied, and a [`Bytes`] slice of a larger
    /// buffer stays a slice of it.
    pub fn decode(bytes: impl Into<Bytes>, encoding_id: i64) -> Result<Self, ValueError> {
        let bytes = bytes.into();
        Ok(match KvValueRef::decode(&bytes, encoding_id)? {
            KvValueRef::V8(_) => KvValue::V8(bytes),
            KvValueRef::Bytes(_) => KvValue::Bytes(bytes),
            KvValueRef::U64(n) => KvValue::U64(n),
        })
    }
}

/// A value borrowed from wherever it is kept: a stored row, an engine's own entry. What an
/// engine reads without copying, before it decides where the bytes go (a page's buffer, see
/// open-deno-kv-engine-kit's `PageBuilder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvValueRef<'a> {
    /// V8 `ValueSerializer` bytes.
    V8(&'a [u8]),
    /// Raw bytes (a JavaScript `Uint8Array`).
    Bytes(&'a [u8]),
    /// A `Deno.KvU64`.
    U64(u64),
}

impl<'a> KvValueRef<'a> {
    /// Reads stored bytes and the encoding id stored beside them, without copying: Deno's rules
    /// for which ids exist and that a u64 is exactly 8 little-endian bytes.
    pub fn decode(bytes: &'a [u8], encoding_id: i64) -> Result<Self, ValueError> {
        Ok(match ValueEncoding::from_id(encoding_id)? {
            ValueEncoding::V8 => KvValueRef::V8(bytes),
            ValueEncoding::Bytes => KvValueRef::Bytes(bytes),
            ValueEncoding::U64 => {
                let raw: [u8; 8] = bytes
                    .try_into()
                    .map_err(|_| ValueError::BadU64Length(bytes.len()))?;
                KvValueRef::U64(u64::from_le_bytes(raw))
            }
        })
    }

    /// The encoding this value is stored with.
    pub fn encoding(&self) -> ValueEncoding {
        match self {
            KvValueRef::V8(_) => ValueEncoding::V8,
            KvValueRef::Bytes(_) => ValueEncoding::Bytes,
            KvValueRef::U64(_) => ValueEncoding::U64,
        }
    }

    /// The number of bytes the value occupies when stored (a u64 is 8), as
    /// [`KvValue::encoded_len`].
    pub fn encoded_len(&self) -> usize {
        match self {
            KvValueRef::V8(b) | KvValueRef::Bytes(b) => b.len(),
            KvValueRef::U64(_) => 8,
        }
    }

    /// An owned value, its bytes copied.
    pub fn to_value(&self) -> KvValue {
        match *self {
            KvValueRef::V8(b) => KvValue::V8(Bytes::copy_from_slice(b)),
            KvValueRef::Bytes(b) => KvValue::Bytes(Bytes::copy_from_slice(b)),
            KvValueRef::U64(n) => KvValue::U64(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_ids_are_denos() {
        for e in [ValueEncoding::V8, ValueEncoding::U64, ValueEncoding::Bytes] {
            assert_eq!(ValueEncoding::from_id(e.id()), Ok(e));
        }
        assert_eq!(ValueEncoding::V8.id(), 1);
        assert_eq!(ValueEncoding::U64.id(), 2);
        assert_eq!(ValueEncoding::Bytes.id(), 3);
        assert_eq!(
            ValueEncoding::from_id(4),
            Err(ValueError::UnknownEncoding(4))
        );
    }

    #[test]
    fn u64_must_be_eight_bytes() {
        assert_eq!(
            KvValue::decode(vec![1; 7], 2),
            Err(ValueError::BadU64Length(7))
        );
        assert_eq!(
            KvValue::decode(vec![1; 9], 2),
            Err(ValueError::BadU64Length(9))
        );
        assert_eq!(
            KvValue::decode(u64::MAX.to_le_bytes().to_vec(), 2),
            Ok(KvValue::U64(u64::MAX))
        );
    }

    #[test]
    fn a_borrowed_value_reads_and_owns_as_an_owned_one_does() {
        for (bytes, id) in [
            (&b"\xff\x0f"[..], 1),
            (&7u64.to_le_bytes()[..], 2),
            (&b"raw"[..], 3),
        ] {
            let owned = KvValue::decode(bytes.to_vec(), id).unwrap();
            let borrowed = KvValueRef::decode(bytes, id).unwrap();
            assert_eq!(owned.as_value_ref(), borrowed);
            assert_eq!(borrowed.to_value(), owned);
            assert_eq!(borrowed.encoding().id(), id);
        }
        assert_eq!(
            KvValueRef::decode(&[1; 9], 2),
            Err(ValueError::BadU64Length(9))
        );
        assert_eq!(
            KvValueRef::decode(b"x", 0),
            Err(ValueError::UnknownEncoding(0))
        );
    }

    #[test]
    fn sizes_count_u64_as_eight() {
        assert_eq!(KvValue::U64(1).encoded_len(), 8);
        assert_eq!(KvValue::from(vec![0; 3]).encoded_len(), 3);
    }
}

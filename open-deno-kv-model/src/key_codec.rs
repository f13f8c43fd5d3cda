//! The ordered byte encoding of keys: the FoundationDB tuple layer, as Deno KV writes it.
//!
//! Parts are encoded one after another, each starting with a tag byte that names its kind:
//!
//! | part | bytes |
//! |---|---|
//! | bytes | `01`, the bytes with every `00` written as `00 FF`, then `00` |
//! | string | `02`, the UTF-8 bytes escaped the same way, then `00` |
//! | integer 0 | `14` |
//! | integer, magnitude of n ≤ 8 bytes | `14+n` (positive) or `14−n` (negative), then the big-endian magnitude, complemented bit by bit when negative |
//! | integer, larger | `1D n magnitude` (positive) or `0B (n XOR FF) complemented-magnitude` (negative), n ≤ 255 |
//! | float | `21`, then the 8 IEEE bytes: all bits flipped if negative, else only the sign bit |
//! | false / true | `26` / `27` |
//!
//! Comparing two encodings with `memcmp` gives the same answer as comparing the keys with
//! [`Ord`]. The decoder is strict: it accepts only canonical encodings (the bytes that
//! [`encode_key`] itself produces), so anything it accepts re-encodes to exactly the same bytes.
//!
//! ```
//! use open_deno_kv_model::{decode_key, encode_key, key};
//! let bytes = encode_key(&key!["users", 1]).unwrap();
//! assert_eq!(bytes, b"\x02users\x00\x15\x01");
//! assert_eq!(decode_key(&bytes).unwrap(), key!["users", 1]);
//! ```

use num_bigint::{BigInt, Sign};
use thiserror::Error;

use crate::key::{CANONICAL_NAN_BITS, float_from_order_bits, float_order_bits};
use crate::{Key, KeyPart};

const TAG_BYTES: u8 = 0x01;
const TAG_STRING: u8 = 0x02;
const TAG_NEG_INT_LONG: u8 = 0x0b;
const TAG_INT_ZERO: u8 = 0x14;
const TAG_POS_INT_LONG: u8 = 0x1d;
const TAG_FLOAT: u8 = 0x21;
const TAG_FALSE: u8 = 0x26;
const TAG_TRUE: u8 = 0x27;

/// Largest integer magnitude a key part may have, in bytes.
pub const MAX_INT_MAGNITUDE_BYTES: usize = 255;

/// Why a key could not be encoded or decoded.
///
/// Offsets count bytes from the start of the encoded key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// An integer part whose magnitude needs more than 255 bytes (Deno's text).
    #[error("BigUint requires more than {MAX_INT_MAGNITUDE_BYTES} bytes to be represented")]
    IntegerTooLarge,
    /// A write or check named the empty key (Deno's text).
    #[error("key cannot be empty")]
    Empty,
    /// A byte that starts no known part.
    #[error("invalid key: unknown type tag 0x{tag:02x} at byte {offset}")]
    UnknownTag {
        /// The tag byte.
        tag: u8,
        /// Where it stands.
        offset: usize,
    },
    /// The key ends in the middle of a part.
    #[error("invalid key: truncated part starting at byte {offset}")]
    Truncated {
        /// Where the unfinished part starts.
        offset: usize,
    },
    /// A string part whose bytes are not UTF-8.
    #[error("invalid key: string part at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// Where the string part starts.
        offset: usize,
    },
    /// A `00` inside a bytes or string part followed by something other than `FF` or a tag.
    /// (Only `00 FF` escapes a zero; a lone `00` ends the part.)
    /// Also: an integer or float written in a form the encoder never produces (for example a
    /// magnitude with leading zero bytes, or a NaN with a payload).
    #[error("invalid key: non-canonical encoding of the part at byte {offset}")]
    NonCanonical {
        /// Where the part starts.
        offset: usize,
    },
    /// A key written as a JavaScript literal that does not parse ([`crate::parse_key_literal`]).
    #[error("invalid key literal: {reason}")]
    Literal {
        /// What is wrong, and at which character.
        reason: String,
    },
}

/// Encodes a key into its ordered byte form.
///
/// Fails only for an integer part whose magnitude exceeds 255 bytes. The empty key encodes to no
/// bytes (it is a valid prefix); refusing it for writes is validation's job.
pub fn encode_key(key: &Key) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(16 * key.len());
    for part in key.parts() {
        encode_part(part, &mut out)?;
    }
    Ok(out)
}

/// Appends one part's encoding to `out`.
pub fn encode_part(part: &KeyPart, out: &mut Vec<u8>) -> Result<(), KeyError> {
    match part {
        KeyPart::Bytes(bytes) => {
            out.push(TAG_BYTES);
            escape_into(bytes, out);
        }
        KeyPart::String(text) => {
            out.push(TAG_STRING);
            escape_into(text.as_bytes(), out);
        }
        KeyPart::Int(value) => encode_int(value, out)?,
        KeyPart::Float(value) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&float_order_bits(*value).to_be_bytes());
        }
        KeyPart::Bool(false) => out.push(TAG_FALSE),
        KeyPart::Bool(true) => out.push(TAG_TRUE),
    }
    Ok(())
}

fn escape_into(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
    out.push(0);
}

fn encode_int(value: &BigInt, out: &mut Vec<u8>) -> Result<(), KeyError> {
    let (sign, magnitude) = value.to_bytes_be();
    if sign == Sign::NoSign {
        out.push(TAG_INT_ZERO);
        return Ok(());
    }
    let n = magnitude.len();
    if n > MAX_INT_MAGNITUDE_BYTES {
        return Err(KeyError::IntegerTooLarge);
    }
    // n ≤ 255 was checked just above, so the casts below are exact.
    let n_byte = n as u8;
    if sign == Sign::Plus {
        if n <= 8 {
            out.push(TAG_INT_ZERO + n_byte);
        } else {
            out.push(TAG_POS_INT_LONG);
            out.push(n_byte);
        }
        out.extend_from_slice(&magnitude);
    } else {
        if n <= 8 {
            out.push(TAG_INT_ZERO - n_byte);
        } else {
            out.push(TAG_NEG_INT_LONG);
            out.push(n_byte ^ 0xff);
        }
        out.extend(magnitude.iter().map(|b| !b));
    }
    Ok(())
}

/// Decodes a key from its byte form, accepting only canonical encodings.
///
/// ```
/// use open_deno_kv_model::{decode_key, KeyError};
/// assert_eq!(decode_key(&[0x99]), Err(KeyError::UnknownTag { tag: 0x99, offset: 0 }));
/// assert_eq!(decode_key(&[0x02, b'a']), Err(KeyError::Truncated { offset: 0 }));
/// ```
pub fn decode_key(bytes: &[u8]) -> Result<Key, KeyError> {
    let mut parts = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let (part, next) = decode_part(bytes, pos)?;
        parts.push(part);
        pos = next;
    }
    Ok(Key::new(parts))
}

/// Decodes the part that starts at `start`; returns it and the offset just past it.
fn decode_part(bytes: &[u8], start: usize) -> Result<(KeyPart, usize), KeyError> {
    let tag = bytes[start];
    let body = start + 1;
    match tag {
        TAG_BYTES => {
            let (raw, next) = unescape(bytes, start)?;
            Ok((KeyPart::Bytes(raw), next))
        }
        TAG_STRING => {
            let (raw, next) = unescape(bytes, start)?;
            let text =
                String::from_utf8(raw).map_err(|_| KeyError::InvalidUtf8 { offset: start })?;
            Ok((KeyPart::String(text), next))
        }
        TAG_INT_ZERO => Ok((KeyPart::Int(BigInt::ZERO), body)),
        0x15..=0x1c => {
            let n = usize::from(tag - TAG_INT_ZERO);
            let magnitude = take(bytes, body, n, start)?;
            decode_magnitude(Sign::Plus, magnitude.to_vec(), n, start, 1)
                .map(|part| (part, body + n))
        }
        0x0c..=0x13 => {
            let n = usize::from(TAG_INT_ZERO - tag);
            let magnitude: Vec<u8> = take(bytes, body, n, start)?.iter().map(|b| !b).collect();
            decode_magnitude(Sign::Minus, magnitude, n, start, 1).map(|part| (part, body + n))
        }
        TAG_POS_INT_LONG => {
            let n = usize::from(*take(bytes, body, 1, start)?.first().unwrap_or(&0));
            let magnitude = take(bytes, body + 1, n, start)?;
            decode_magnitude(Sign::Plus, magnitude.to_vec(), n, start, 9)
                .map(|part| (part, body + 1 + n))
        }
        TAG_NEG_INT_LONG => {
            let n = usize::from(take(bytes, body, 1, start)?.first().unwrap_or(&0xff) ^ 0xff);
            let magnitude: Vec<u8> = take(bytes, body + 1, n, start)?
                .iter()
                .map(|b| !b)
                .collect();
            decode_magnitude(Sign::Minus, magnitude, n, start, 9).map(|part| (part, body + 1 + n))
        }
        TAG_FLOAT => {
            let raw = take(bytes, body, 8, start)?;
            let mut be = [0u8; 8];
            be.copy_from_slice(raw);
            let value = float_from_order_bits(u64::from_be_bytes(be));
            // Only the two canonical NaNs are ever written.
            if value.is_nan() && (value.to_bits() & !(1 << 63)) != CANONICAL_NAN_BITS {
                return Err(KeyError::NonCanonical { offset: start });
            }
            Ok((KeyPart::Float(value), body + 8))
        }
        TAG_FALSE => Ok((KeyPart::Bool(false), body)),
        TAG_TRUE => Ok((KeyPart::Bool(true), body)),
        other => Err(KeyError::UnknownTag {
            tag: other,
            offset: start,
        }),
    }
}

/// `len` bytes from `from`, or a truncation error for the part that starts at `start`.
fn take(bytes: &[u8], from: usize, len: usize, start: usize) -> Result<&[u8], KeyError> {
    bytes
        .get(from..from + len)
        .ok_or(KeyError::Truncated { offset: start })
}

/// Builds an integer part, refusing magnitudes the encoder would have written differently: a
/// leading zero byte, or a long form (`min_len` = 9) holding 8 bytes or fewer.
fn decode_magnitude(
    sign: Sign,
    magnitude: Vec<u8>,
    n: usize,
    start: usize,
    min_len: usize,
) -> Result<KeyPart, KeyError> {
    if n < min_len || magnitude.first() == Some(&0) {
        return Err(KeyError::NonCanonical { offset: start });
    }
    Ok(KeyPart::Int(BigInt::from_bytes_be(sign, &magnitude)))
}

/// Reads an escaped bytes/string body starting after the tag at `start`; returns the raw bytes
/// and the offset just past the terminating `00`.
fn unescape(bytes: &[u8], start: usize) -> Result<(Vec<u8>, usize), KeyError> {
    let mut out = Vec::new();
    let mut pos = start + 1;
    loop {
        match bytes.get(pos) {
            None => return Err(KeyError::Truncated { offset: start }),
            Some(0) => {
                if bytes.get(pos + 1) == Some(&0xff) {
                    out.push(0);
                    pos += 2;
                } else {
                    return Ok((out, pos + 1));
                }
            }
            Some(&b) => {
                out.push(b);
                pos += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key;

    fn hex_of(k: &Key) -> String {
        hex::encode(encode_key(k).unwrap())
    }

    #[test]
    fn known_encodings() {
        assert_eq!(hex_of(&key![""]), "0200");
        assert_eq!(hex_of(&key!["\u{0}"]), "0200ff00");
        assert_eq!(hex_of(&key![vec![0u8, 0xff]]), "0100ffff00");
        assert_eq!(hex_of(&key![0]), "14");
        assert_eq!(hex_of(&key![-1]), "13fe");
        assert_eq!(hex_of(&key![-256]), "12feff");
        assert_eq!(hex_of(&key![u64::MAX]), "1cffffffffffffffff");
        assert_eq!(
            hex_of(&key![BigInt::from(u64::MAX) + 1]),
            "1d09010000000000000000"
        );
        assert_eq!(
            hex_of(&key![-(BigInt::from(u64::MAX) + 1u8)]),
            "0bf6feffffffffffffffff"
        );
        assert_eq!(hex_of(&key![-0.0]), "217fffffffffffffff");
        assert_eq!(hex_of(&key![f64::NAN]), "21fff8000000000000");
        assert_eq!(hex_of(&key![-f64::NAN]), "210007ffffffffffff");
        assert_eq!(hex_of(&key![false, true]), "2627");
    }

    #[test]
    fn integer_size_limit() {
        let largest: BigInt = (BigInt::from(1u8) << (8 * 255usize)) - 1u8;
        assert!(encode_key(&key![largest.clone()]).is_ok());
        assert!(encode_key(&key![-largest.clone()]).is_ok());
        assert_eq!(
            encode_key(&key![largest.clone() + 1]),
            Err(KeyError::IntegerTooLarge)
        );
        assert_eq!(
            encode_key(&key![-(largest + 1u8)]),
            Err(KeyError::IntegerTooLarge)
        );
        assert_eq!(
            KeyError::IntegerTooLarge.to_string(),
            "BigUint requires more than 255 bytes to be represented"
        );
    }

    #[test]
    fn strict_decoder_rejects_bad_input() {
        let cases: &[(&str, KeyError)] = &[
            (
                "ff",
                KeyError::UnknownTag {
                    tag: 0xff,
                    offset: 0,
                },
            ),
            ("0261", KeyError::Truncated { offset: 0 }),
            ("0100ff", KeyError::Truncated { offset: 0 }),
            ("02ff00", KeyError::InvalidUtf8 { offset: 0 }),
            ("1601", KeyError::Truncated { offset: 0 }),
            ("1d", KeyError::Truncated { offset: 0 }),
            ("1d0a01", KeyError::Truncated { offset: 0 }),
            ("2100", KeyError::Truncated { offset: 0 }),
            // leading zero in a magnitude, and a long form for a short number
            ("160001", KeyError::NonCanonical { offset: 0 }),
            ("13ff", KeyError::NonCanonical { offset: 0 }),
            ("1d0101", KeyError::NonCanonical { offset: 0 }),
            ("0bfefe", KeyError::NonCanonical { offset: 0 }),
            // NaN with a payload
            ("21fff8000000000001", KeyError::NonCanonical { offset: 0 }),
            // garbage after a valid part
            (
                "140a",
                KeyError::UnknownTag {
                    tag: 0x0a,
                    offset: 1,
                },
            ),
        ];
        for (input, expected) in cases {
            let bytes = hex::decode(input).unwrap();
            assert_eq!(decode_key(&bytes).as_ref(), Err(expected), "input {input}");
        }
    }

    #[test]
    fn round_trips_every_kind() {
        let k = key![
            vec![0u8, 1, 0],
            "a\u{0}b",
            -300,
            1i128 << 70,
            -2.5,
            f64::NAN,
            -f64::NAN,
            true
        ];
        let decoded = decode_key(&encode_key(&k).unwrap()).unwrap();
        assert_eq!(decoded, k);
    }
}

#[cfg(test)]
mod proptests;

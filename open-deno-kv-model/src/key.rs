//! Keys: tuples of typed parts, ordered exactly as Deno KV orders them.
//!
//! A Deno KV key is a non-empty list of parts. Each part is one of six kinds, and the kinds sort
//! in a fixed order: bytes < string < integer < float < false < true. Inside a kind, bytes and
//! strings compare by their bytes, integers numerically (arbitrary precision), and floats by IEEE
//! total order after NaN has been canonicalised.
//!
//! The [`Ord`] of [`Key`] and [`KeyPart`] is the same order as the byte order of their encoding
//! (see [`crate::encode_key`]), so a storage engine that sorts encoded keys with `memcmp` and a
//! program that sorts typed keys agree. A property test in `key_codec` holds the two together.
//!
//! ```
//! use open_deno_kv_model::{key, Key, KeyPart};
//!
//! // JavaScript's ["users", 42n, true] — Rust integers are JavaScript bigints.
//! let k = key!["users", 42, true];
//! assert_eq!(k.parts()[1], KeyPart::from(42));
//! // JavaScript's ["users", 42] — a JS number is a float part.
//! let js_number = key!["users", 42.0];
//! assert_ne!(k, js_number);
//! // Every integer sorts before every float, whatever their values.
//! assert!(key![1_000_000] < key![0.5]);
//! ```

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use num_bigint::BigInt;

/// The canonical bit pattern of a NaN with the sign bit clear (what JavaScript's `NaN` is).
pub(crate) const CANONICAL_NAN_BITS: u64 = 0x7ff8_0000_0000_0000;
const SIGN_BIT: u64 = 1 << 63;

/// One element of a [`Key`].
///
/// The variants are listed in their sort order: every `Bytes` part sorts before every `String`
/// part, and so on. `Bool(false)` sorts before `Bool(true)`.
///
/// Integers and floats are different kinds, as they are in Deno: `Int(1)` is JavaScript's `1n`,
/// `Float(1.0)` is JavaScript's `1`, and they are different keys.
#[derive(Clone, Debug)]
pub enum KeyPart {
    /// A byte string (`Uint8Array` in JavaScript).
    Bytes(Vec<u8>),
    /// A UTF-8 string.
    String(String),
    /// An integer of any size (`bigint` in JavaScript). Its magnitude must fit in 255 bytes to be
    /// encoded; [`crate::encode_key`] refuses larger ones.
    Int(BigInt),
    /// A 64-bit float (`number` in JavaScript). `-0.0` and `0.0` are different parts; every NaN
    /// is canonicalised (keeping its sign) when compared or encoded.
    Float(f64),
    /// A boolean. `false` sorts before `true`, and both after every other kind.
    Bool(bool),
}

impl KeyPart {
    /// The position of this part's kind in the order between kinds (0 = smallest).
    fn kind_rank(&self) -> u8 {
        match self {
            KeyPart::Bytes(_) => 0,
            KeyPart::String(_) => 1,
            KeyPart::Int(_) => 2,
            KeyPart::Float(_) => 3,
            KeyPart::Bool(false) => 4,
            KeyPart::Bool(true) => 5,
        }
    }
}

/// The float's bits with NaN canonicalised: any NaN becomes `7FF8…`, or `FFF8…` if its sign bit is
/// set. `-0.0` keeps its sign. This is the value Deno encodes.
pub(crate) fn canonical_float_bits(value: f64) -> u64 {
    let bits = value.to_bits();
    if value.is_nan() {
        CANONICAL_NAN_BITS | (bits & SIGN_BIT)
    } else {
        bits
    }
}

/// The eight bytes (as a big-endian `u64`) that order floats by unsigned comparison: the IEEE bits
/// with every bit flipped for negative numbers, and only the sign bit flipped otherwise.
pub(crate) fn float_order_bits(value: f64) -> u64 {
    let bits = canonical_float_bits(value);
    if bits & SIGN_BIT != 0 {
        !bits
    } else {
        bits ^ SIGN_BIT
    }
}

/// Inverse of [`float_order_bits`].
pub(crate) fn float_from_order_bits(ordered: u64) -> f64 {
    let bits = if ordered & SIGN_BIT != 0 {
        ordered ^ SIGN_BIT
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

impl Ord for KeyPart {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (KeyPart::Bytes(a), KeyPart::Bytes(b)) => a.cmp(b),
            (KeyPart::String(a), KeyPart::String(b)) => a.as_bytes().cmp(b.as_bytes()),
            (KeyPart::Int(a), KeyPart::Int(b)) => a.cmp(b),
            (KeyPart::Float(a), KeyPart::Float(b)) => {
                float_order_bits(*a).cmp(&float_order_bits(*b))
            }
            _ => self.kind_rank().cmp(&other.kind_rank()),
        }
    }
}

impl PartialOrd for KeyPart {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Two parts are equal exactly when they encode to the same bytes: `NaN == NaN` (same sign),
/// `-0.0 != 0.0`.
impl PartialEq for KeyPart {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for KeyPart {}

impl Hash for KeyPart {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.kind_rank().hash(state);
        match self {
            KeyPart::Bytes(b) => b.hash(state),
            KeyPart::String(s) => s.hash(state),
            KeyPart::Int(i) => i.hash(state),
            KeyPart::Float(f) => canonical_float_bits(*f).hash(state),
            KeyPart::Bool(_) => {}
        }
    }
}

/// Shows the part as JavaScript would write it (`"text"`, `42n`, `1.5`, `-0`, `NaN`, `true`), and
/// bytes as a short hex literal `b"0102"`.
impl fmt::Display for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Bytes(b) => write!(f, "b\"{}\"", hex::encode(b)),
            KeyPart::String(s) => write!(f, "{s:?}"),
            KeyPart::Int(i) => write!(f, "{i}n"),
            KeyPart::Float(x) if x.is_nan() => f.write_str("NaN"),
            KeyPart::Float(x) if x.is_infinite() => {
                f.write_str(if *x > 0.0 { "Infinity" } else { "-Infinity" })
            }
            KeyPart::Float(x) if *x == 0.0 && x.is_sign_negative() => f.write_str("-0"),
            KeyPart::Float(x) => write!(f, "{x}"),
            KeyPart::Bool(b) => write!(f, "{b}"),
        }
    }
}

macro_rules! key_part_from_int {
    ($($t:ty),*) => {$(
        /// A Rust integer is an integer part (JavaScript's `bigint`), not a float.
        impl From<$t> for KeyPart {
            fn from(value: $t) -> Self {
                KeyPart::Int(BigInt::from(value))
            }
        }
    )*};
}
key_part_from_int!(
    i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);

impl From<BigInt> for KeyPart {
    fn from(value: BigInt) -> Self {
        KeyPart::Int(value)
    }
}

impl From<f64> for KeyPart {
    /// A float is JavaScript's `number`.
    fn from(value: f64) -> Self {
        KeyPart::Float(value)
    }
}

impl From<f32> for KeyPart {
    fn from(value: f32) -> Self {
        KeyPart::Float(f64::from(value))
    }
}

impl From<bool> for KeyPart {
    fn from(value: bool) -> Self {
        KeyPart::Bool(value)
    }
}

impl From<&str> for KeyPart {
    fn from(value: &str) -> Self {
        KeyPart::String(value.to_owned())
    }
}

impl From<String> for KeyPart {
    fn from(value: String) -> Self {
        KeyPart::String(value)
    }
}

impl From<&String> for KeyPart {
    fn from(value: &String) -> Self {
        KeyPart::String(value.clone())
    }
}

impl From<Vec<u8>> for KeyPart {
    /// Bytes are JavaScript's `Uint8Array`.
    fn from(value: Vec<u8>) -> Self {
        KeyPart::Bytes(value)
    }
}

impl From<&[u8]> for KeyPart {
    fn from(value: &[u8]) -> Self {
        KeyPart::Bytes(value.to_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for KeyPart {
    fn from(value: &[u8; N]) -> Self {
        KeyPart::Bytes(value.to_vec())
    }
}

/// A Deno KV key: an ordered list of [`KeyPart`]s.
///
/// An empty key is a valid *prefix* (it selects every key in a list), but it cannot be written:
/// validation refuses it with Deno's "key cannot be empty".
///
/// Keys compare part by part, and a key sorts before every longer key it is a prefix of; this is
/// the same order as their encodings.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Vec<KeyPart>);

impl Key {
    /// A key made of these parts.
    pub fn new(parts: Vec<KeyPart>) -> Self {
        Key(parts)
    }

    /// The parts, first to last.
    pub fn parts(&self) -> &[KeyPart] {
        &self.0
    }

    /// Takes the parts out.
    pub fn into_parts(self) -> Vec<KeyPart> {
        self.0
    }

    /// Appends a part, returning the longer key (handy to build a child key from a prefix).
    ///
    /// ```
    /// use open_deno_kv_model::key;
    /// assert_eq!(key!["users"].push("alice"), key!["users", "alice"]);
    /// ```
    pub fn push(mut self, part: impl Into<KeyPart>) -> Self {
        self.0.push(part.into());
        self
    }

    /// Number of parts.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the key has no parts (allowed as a prefix, refused for writes).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `prefix`'s parts are the first parts of this key (a key is a prefix of itself).
    pub fn starts_with(&self, prefix: &Key) -> bool {
        self.0.starts_with(&prefix.0)
    }
}

impl From<Vec<KeyPart>> for Key {
    fn from(parts: Vec<KeyPart>) -> Self {
        Key(parts)
    }
}

/// Lets APIs that take `impl Into<Key>` accept a borrowed key too (it is cloned).
impl From<&Key> for Key {
    fn from(key: &Key) -> Self {
        key.clone()
    }
}

impl FromIterator<KeyPart> for Key {
    fn from_iter<I: IntoIterator<Item = KeyPart>>(iter: I) -> Self {
        Key(iter.into_iter().collect())
    }
}

/// Shows the key as a JavaScript array literal, e.g. `["users", 42n, true]`.
impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, part) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{part}")?;
        }
        f.write_str("]")
    }
}

/// Builds a [`Key`] from anything that converts into a [`KeyPart`].
///
/// Strings become string parts, Rust integers become integer parts (JavaScript `bigint`), `f64`
/// becomes a float part (JavaScript `number`), `bool` a boolean, and `Vec<u8>`, `&[u8]` or
/// `&[u8; N]` a bytes part.
///
/// ```
/// use open_deno_kv_model::{key, KeyPart};
/// let k = key!["users", 42, 1.5, true, b"\x00\x01"];
/// assert_eq!(k.len(), 5);
/// assert_eq!(k.to_string(), r#"["users", 42n, 1.5, true, b"0001"]"#);
/// assert!(key![].is_empty());
/// ```
#[macro_export]
macro_rules! key {
    () => { $crate::Key::default() };
    ($($part:expr),+ $(,)?) => {
        $crate::Key::new(vec![$($crate::KeyPart::from($part)),+])
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_sort_in_deno_order() {
        let ordered = [
            KeyPart::Bytes(vec![0xff]),
            KeyPart::String(String::new()),
            KeyPart::from(-5),
            KeyPart::Float(f64::NEG_INFINITY),
            KeyPart::Bool(false),
            KeyPart::Bool(true),
        ];
        for pair in ordered.windows(2) {
            assert!(pair[0] < pair[1], "{:?} < {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn floats_use_total_order_with_canonical_nan() {
        let neg_nan = f64::from_bits(0xfff8_0000_0000_0001);
        let ordered = [
            neg_nan,
            f64::NEG_INFINITY,
            -1.0,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NAN,
        ];
        for pair in ordered.windows(2) {
            assert!(KeyPart::Float(pair[0]) < KeyPart::Float(pair[1]));
        }
        // NaN payloads do not matter, the sign does.
        let payload_nan = f64::from_bits(0x7ff8_0000_0000_0001);
        assert_eq!(KeyPart::Float(payload_nan), KeyPart::Float(f64::NAN));
        assert_ne!(KeyPart::Float(-f64::NAN), KeyPart::Float(f64::NAN));
        assert_ne!(KeyPart::Float(-0.0), KeyPart::Float(0.0));
    }

    #[test]
    fn prefix_sorts_first() {
        assert!(key!["a"] < key!["a", 0]);
        assert!(key!["a", "z"] < key!["a\u{0}"]);
        assert!(key!["a"].push(1).starts_with(&key!["a"]));
    }

    #[test]
    fn display_is_javascript_like() {
        let k = key!["a", -0.0, f64::NAN, f64::INFINITY, 7, false];
        assert_eq!(k.to_string(), r#"["a", -0, NaN, Infinity, 7n, false]"#);
    }
}

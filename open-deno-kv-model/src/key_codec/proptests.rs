//! Property tests: the encoding preserves order, round-trips, and the decoder survives anything.
//! `PROPTEST_CASES` sets the number of cases (256 by default).

use num_bigint::{BigInt, Sign};
use proptest::prelude::*;

use super::*;

/// Integers of every size class: small, around the 8-byte boundary, and up to 255 bytes.
fn any_int() -> impl Strategy<Value = BigInt> {
    let magnitude = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..=3),
        4 => prop::collection::vec(any::<u8>(), 7..=10),
        1 => prop::collection::vec(any::<u8>(), 250..=255),
    ];
    (any::<bool>(), magnitude).prop_map(|(negative, bytes)| {
        BigInt::from_bytes_be(if negative { Sign::Minus } else { Sign::Plus }, &bytes)
    })
}

/// Floats from arbitrary bits (every NaN payload, subnormals, ±0, ±∞) plus common values.
fn any_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        prop::sample::select(vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN
        ]),
    ]
}

/// Bytes with many zeros and 0xFF, which exercise the escaping.
fn escapy_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![2 => Just(0u8), 2 => Just(0xffu8), 1 => Just(1u8), 3 => any::<u8>()],
        0..12,
    )
}

pub(crate) fn any_key_part() -> impl Strategy<Value = KeyPart> {
    prop_oneof![
        escapy_bytes().prop_map(KeyPart::Bytes),
        "(\\PC|\u{0}){0,8}".prop_map(KeyPart::String),
        any_int().prop_map(KeyPart::Int),
        any_float().prop_map(KeyPart::Float),
        any::<bool>().prop_map(KeyPart::Bool),
    ]
}

pub(crate) fn any_key() -> impl Strategy<Value = Key> {
    prop::collection::vec(any_key_part(), 0..5).prop_map(Key::new)
}

/// Valid encodings damaged in one place: truncated, a byte changed, or a byte inserted.
fn damaged_encoding() -> impl Strategy<Value = Vec<u8>> {
    (any_key(), any::<prop::sample::Index>(), any::<u8>(), 0..3u8).prop_map(
        |(key, at, byte, how)| {
            let mut bytes = encode_key(&key).expect("generated keys are encodable");
            if bytes.is_empty() {
                return vec![byte];
            }
            let i = at.index(bytes.len());
            match how {
                0 => bytes.truncate(i),
                1 => bytes[i] = byte,
                _ => bytes.insert(i, byte),
            }
            bytes
        },
    )
}

proptest! {
    #[test]
    fn byte_order_equals_key_order(a in any_key(), b in any_key()) {
        let (ea, eb) = (encode_key(&a).unwrap(), encode_key(&b).unwrap());
        prop_assert_eq!(a.cmp(&b), ea.cmp(&eb), "{} vs {}", a, b);
        prop_assert_eq!(a == b, ea == eb);
    }

    #[test]
    fn decode_inverts_encode(key in any_key()) {
        let bytes = encode_key(&key).unwrap();
        prop_assert_eq!(decode_key(&bytes).unwrap(), key);
    }

    #[test]
    fn random_bytes_never_panic_and_accepted_bytes_are_canonical(
        bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..40), damaged_encoding()]
    ) {
        if let Ok(key) = decode_key(&bytes) {
            prop_assert_eq!(encode_key(&key).unwrap(), bytes);
        }
    }

    #[test]
    fn prefixes_sort_before_their_extensions(key in any_key(), part in any_key_part()) {
        let longer = key.clone().push(part);
        prop_assert!(key < longer);
        prop_assert!(encode_key(&longer).unwrap().starts_with(&encode_key(&key).unwrap()));
    }
}

//! Key order: a list returns keys in Deno's order, across part types and inside each type, and
//! keys that Deno treats as equal (or different) are equal (or different) in the store.

use open_deno_kv_model::num_bigint::BigInt;
use open_deno_kv_model::{Backend, Key, KvValue, key};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        key_types_sort_bytes_string_int_float_false_true,
        bytes_parts_sort_by_unsigned_byte_order,
        string_parts_sort_by_utf8_bytes_not_utf16_units,
        integer_parts_sort_numerically_beyond_64_bits,
        float_parts_sort_by_ieee_total_order,
        prefix_key_sorts_before_its_children,
        multi_part_keys_sort_part_by_part,
        negative_zero_and_zero_are_different_keys,
        bigint_and_number_of_equal_value_are_different_keys,
        nan_payload_does_not_make_a_different_key,
        deno_key_vectors_list_in_denos_byte_order,
    ]
}

/// 2^`exp` as an integer part value.
fn pow2(exp: usize) -> BigInt {
    BigInt::from(1u8) << exp
}

/// A float with exactly these IEEE bits (for NaNs with a sign or payload).
fn float_bits(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// The items in a fixed pseudo-random order (xorshift Fisher–Yates), so no backend passes by
/// returning keys in insertion order or its reverse.
fn scrambled<T: Clone>(items: &[T]) -> Vec<T> {
    let mut out = items.to_vec();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..out.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let j = usize::try_from(state % (i as u64 + 1)).unwrap_or(0);
        out.swap(i, j);
    }
    out
}

/// Writes `ordered` (each key valued with its expected position) in a scrambled order, one commit
/// per key, then checks that listing everything returns exactly `ordered`, forward and reverse.
async fn assert_lists_in_order(kv: &dyn Backend, ordered: &[Key]) {
    let numbered: Vec<(u64, Key)> = (0u64..).zip(ordered.iter().cloned()).collect();
    for (position, k) in scrambled(&numbered) {
        set(kv, &k, KvValue::U64(position)).await;
    }
    let forward = list_prefix(kv, &key![], 1000, false).await;
    assert_eq!(
        show(&keys_of(&forward)),
        show(ordered),
        "forward list order"
    );
    let positions: Vec<KvValue> = (0u64..).take(ordered.len()).map(KvValue::U64).collect();
    let values: Vec<KvValue> = forward.iter().map(|e| e.value.clone()).collect();
    assert_eq!(values, positions, "each listed key carries its own value");
    let reverse = list_prefix(kv, &key![], 1000, true).await;
    let mut expected_reverse = ordered.to_vec();
    expected_reverse.reverse();
    assert_eq!(
        show(&keys_of(&reverse)),
        show(&expected_reverse),
        "reverse list order"
    );
}

/// Keys as JavaScript-like text, so a failure shows which keys are out of place (`-0`, `NaN`...).
fn show(keys: &[Key]) -> Vec<String> {
    keys.iter().map(ToString::to_string).collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd hex {text}");
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&text[i..i + 2], 16).unwrap_or_else(|e| panic!("hex {text}: {e}"))
        })
        .collect()
}

/// The extremes of each type next to the neighbouring type's extremes: the largest bytes before
/// the empty string, the largest string before the most negative integer, the largest integer
/// before the smallest float (negative NaN), NaN before false.
async fn key_types_sort_bytes_string_int_float_false_true(env: Env) {
    let ordered = [
        key![b"\x00"],
        key![vec![0xff_u8; 4]],
        key![""],
        key!["\u{10ffff}\u{10ffff}"],
        key![-(pow2(2040) - 1u8)],
        key![-1],
        key![pow2(2040) - 1u8],
        key![float_bits(0xfff8_0000_0000_0000)],
        key![f64::NEG_INFINITY],
        key![f64::INFINITY],
        key![f64::NAN],
        key![false],
        key![true],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// Bytes compare as unsigned bytes, a shorter run first; NUL bytes (escaped in the encoding) keep
/// their place.
async fn bytes_parts_sort_by_unsigned_byte_order(env: Env) {
    let ordered = [
        key![b""],
        key![b"\x00"],
        key![b"\x00\x00"],
        key![vec![0u8; 16]],
        key![b"\x00\x01"],
        key![b"\x00\xff"],
        key![b"\x01"],
        key![b"\x01\x00"],
        key![b"\x7f"],
        key![b"\x80"],
        key![b"\xfe"],
        key![b"\xff"],
        key![b"\xff\x00"],
        key![b"\xff\xff"],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// Strings compare by their UTF-8 bytes: NUL sorts first, and a character outside the BMP (4
/// UTF-8 bytes, a surrogate pair in UTF-16) sorts after U+FFFF, unlike JavaScript's `<`.
async fn string_parts_sort_by_utf8_bytes_not_utf16_units(env: Env) {
    let ordered = [
        key![""],
        key!["\u{0}"],
        key!["\u{0}\u{0}"],
        key!["\u{0}a"],
        key!["\u{1}"],
        key![" "],
        key!["A"],
        key!["Z"],
        key!["a"],
        key!["a\u{0}"],
        key!["a\u{0}b"],
        key!["a\u{1}"],
        key!["aa"],
        key!["b"],
        key!["~"],
        key!["\u{7f}"],
        key!["\u{80}"],
        key!["\u{e9}"],
        key!["\u{7ff}"],
        key!["\u{800}"],
        key!["\u{4e2d}\u{6587}"],
        key!["\u{fffd}"],
        key!["\u{ffff}"],
        key!["\u{10000}"],
        key!["\u{1f600}"],
        key!["\u{10ffff}"],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// Integers compare numerically whatever their encoded length: negatives first, and magnitudes
/// past 2^64 (a different encoding) on the right side of the 8-byte ones.
async fn integer_parts_sort_numerically_beyond_64_bits(env: Env) {
    let ordered = [
        key![-(pow2(2040) - 1u8)],
        key![-pow2(1000)],
        key![-pow2(200)],
        key![-pow2(72)],
        key![-pow2(64) - 1u8],
        key![-pow2(64)],
        key![-(pow2(64) - 1u8)],
        key![i64::MIN],
        key![-65536],
        key![-257],
        key![-256],
        key![-255],
        key![-2],
        key![-1],
        key![0],
        key![1],
        key![2],
        key![255],
        key![256],
        key![257],
        key![65536],
        key![i64::MAX],
        key![u64::MAX],
        key![pow2(64)],
        key![pow2(64) + 1u8],
        key![pow2(72)],
        key![pow2(200)],
        key![pow2(1000)],
        key![pow2(2040) - 1u8],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// Floats use IEEE total order: a NaN with the sign bit set sorts before −∞, −0 before 0,
/// subnormals between zero and the smallest normal, NaN after +∞.
async fn float_parts_sort_by_ieee_total_order(env: Env) {
    let ordered = [
        key![float_bits(0xfff8_0000_0000_0000)],
        key![f64::NEG_INFINITY],
        key![f64::MIN],
        key![-18_446_744_073_709_552_000.0],
        key![-256.0],
        key![-3.25],
        key![-1.5],
        key![-1.0],
        key![-0.5],
        key![-1e-300],
        key![-f64::MIN_POSITIVE],
        key![-5e-324],
        key![-0.0],
        key![0.0],
        key![5e-324],
        key![float_bits(0x000f_ffff_ffff_ffff)],
        key![f64::MIN_POSITIVE],
        key![f64::EPSILON],
        key![0.1],
        key![0.5],
        key![1.0],
        key![1.5],
        key![2.0],
        key![9_007_199_254_740_992.0],
        key![1e21],
        key![f64::MAX],
        key![f64::INFINITY],
        key![f64::NAN],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// A key sorts right before its children, and all its children sort before a sibling whose first
/// part merely starts with the same text (`["a", true]` < `["a\0"]`).
async fn prefix_key_sorts_before_its_children(env: Env) {
    let ordered = [
        key!["a"],
        key!["a", b""],
        key!["a", ""],
        key!["a", "b"],
        key!["a", "b", "c"],
        key!["a", "b", "c", 1],
        key!["a", "c"],
        key!["a", true],
        key!["a\u{0}"],
        key!["a\u{0}", ""],
        key!["a\u{1}"],
        key!["aa"],
        key![1],
        key![1, 0],
        key![2],
        key![false],
        key![false, false],
        key![true],
        key![true, "x"],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// Keys compare part by part; the type order applies at every position, not just the first.
async fn multi_part_keys_sort_part_by_part(env: Env) {
    let ordered = [
        key!["a", b"\xff"],
        key!["a", ""],
        key!["a", -1],
        key!["a", 0],
        key!["a", 0, "z"],
        key!["a", f64::NEG_INFINITY],
        key!["a", 0.0],
        key!["a", false],
        key!["a", true],
        key!["users", -1],
        key!["users", 1, "profile"],
        key!["users", 1, "settings"],
        key!["users", 2],
        key!["users", pow2(64)],
        key!["users", 1.0],
        key!["users", 1.0, b"\x01\x02\x03"],
        key!["users", 1.0, true],
        key!["users", 2.0],
        key![1.0, 1, true, b"\x01\x02\x03", "a"],
        key![1.5],
    ];
    assert_lists_in_order(&*env.kv, &ordered).await;
}

/// −0 and 0 are two keys with their own values; −0 sorts first. Deleting one keeps the other.
async fn negative_zero_and_zero_are_different_keys(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["n", 0.0], v8_string("plus")).await;
    set(kv, &key!["n", -0.0], v8_string("minus")).await;
    assert_eq!(
        get_value(kv, &key!["n", 0.0]).await,
        Some(v8_string("plus"))
    );
    assert_eq!(
        get_value(kv, &key!["n", -0.0]).await,
        Some(v8_string("minus"))
    );
    let listed = list_prefix(kv, &key!["n"], 10, false).await;
    assert_eq!(
        show(&keys_of(&listed)),
        show(&[key!["n", -0.0], key!["n", 0.0]])
    );
    assert_eq!(listed[0].value, v8_string("minus"));
    assert_eq!(listed[1].value, v8_string("plus"));
    delete(kv, &key!["n", 0.0]).await;
    assert_eq!(get(kv, &key!["n", 0.0]).await, None);
    assert_eq!(
        get_value(kv, &key!["n", -0.0]).await,
        Some(v8_string("minus"))
    );
}

/// JavaScript's `1n` (an integer part) and `1` (a number, a float part) are different keys, and
/// every integer sorts before every float, however large.
async fn bigint_and_number_of_equal_value_are_different_keys(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["k", 1.0], v8_string("number")).await;
    set(kv, &key!["k", 1], v8_string("bigint")).await;
    set(kv, &key!["k", pow2(100)], v8_string("huge bigint")).await;
    set(kv, &key!["k", 0.5], v8_string("half")).await;
    assert_eq!(
        get_value(kv, &key!["k", 1]).await,
        Some(v8_string("bigint"))
    );
    assert_eq!(
        get_value(kv, &key!["k", 1.0]).await,
        Some(v8_string("number"))
    );
    let listed = list_prefix(kv, &key!["k"], 10, false).await;
    assert_eq!(
        show(&keys_of(&listed)),
        show(&[
            key!["k", 1],
            key!["k", pow2(100)],
            key!["k", 0.5],
            key!["k", 1.0]
        ])
    );
    delete(kv, &key!["k", 1]).await;
    assert_eq!(
        get_value(kv, &key!["k", 1.0]).await,
        Some(v8_string("number")),
        "deleting 1n must not touch 1"
    );
}

/// Every NaN with the sign bit clear is the same key, whatever its payload (Deno canonicalises
/// it); a NaN with the sign bit set is a different key that sorts first.
async fn nan_payload_does_not_make_a_different_key(env: Env) {
    let kv = &*env.kv;
    let quiet_payload = float_bits(0x7ff8_0000_0000_0001);
    let signalling = float_bits(0x7ff0_0000_0000_0001);
    let negative = float_bits(0xfff8_0000_0000_0000);
    set(kv, &key!["f", quiet_payload], v8_string("payload")).await;
    assert_eq!(
        get_value(kv, &key!["f", f64::NAN]).await,
        Some(v8_string("payload")),
        "a NaN with a payload is stored as NaN"
    );
    set(kv, &key!["f", signalling], v8_string("signalling")).await;
    set(kv, &key!["f", f64::NAN], v8_string("plain")).await;
    set(kv, &key!["f", negative], v8_string("negative")).await;
    let listed = list_prefix(kv, &key!["f"], 10, false).await;
    let raw: Vec<String> = listed.iter().map(|e| to_hex(&e.key)).collect();
    assert_eq!(
        raw,
        [
            format!("{}210007ffffffffffff", to_hex(&enc(&key!["f"]))),
            format!("{}21fff8000000000000", to_hex(&enc(&key!["f"]))),
        ],
        "one key for every positive NaN, one for the negative NaN, in that order"
    );
    assert_eq!(listed[0].value, v8_string("negative"));
    assert_eq!(listed[1].value, v8_string("plain"));
}

/// A sample of `key_vectors.jsonl` (Deno 2.9.6): each typed key with the bytes Deno stored for
/// it, in Deno's stored (byte) order. Listing must return exactly these bytes in this order.
fn deno_key_vectors() -> Vec<(Key, String)> {
    let h = String::from;
    vec![
        (key![b""], h("0100")),
        (key![b"\x00"], h("0100ff00")),
        (key![b"\x00", b"\x00"], h("0100ff000100ff00")),
        (key![b"\x00\x00"], h("0100ff00ff00")),
        (key![b"\x00\xff"], h("0100ffff00")),
        (key![b"\x01"], h("010100")),
        (key![b"\xff"], h("01ff00")),
        (key![b"\xff\xff\xff"], h("01ffffff00")),
        (key![""], h("0200")),
        (key!["", ""], h("02000200")),
        (key!["\u{0}"], h("0200ff00")),
        (key!["\u{0}a"], h("0200ff6100")),
        (key!["a"], h("026100")),
        (key!["a", b""], h("0261000100")),
        (key!["a", "b"], h("026100026200")),
        (key!["a", 0], h("02610014")),
        (key!["a", 0.0], h("026100218000000000000000")),
        (key!["a", true], h("02610027")),
        (key!["a\u{0}"], h("026100ff00")),
        (key!["aa"], h("02616100")),
        (key!["b"], h("026200")),
        (key!["users", -1], h("0275736572730013fe")),
        (
            key!["users", 1, "profile"],
            h("0275736572730015010270726f66696c6500"),
        ),
        (key!["users", 2], h("027573657273001502")),
        (key!["\u{7f}"], h("027f00")),
        (key!["\u{80}"], h("02c28000")),
        (key!["\u{ffff}"], h("02efbfbf00")),
        (key!["\u{1f600}"], h("02f09f988000")),
        (key!["\u{10ffff}"], h("02f48fbfbf00")),
        (
            key![-(pow2(2040) - 1u8)],
            format!("0b00{}", "00".repeat(255)),
        ),
        (key![-pow2(200)], format!("0be5fe{}", "ff".repeat(25))),
        (key![-pow2(64)], h("0bf6feffffffffffffffff")),
        (key![-(pow2(64) - 1u8)], h("0c0000000000000000")),
        (key![-256], h("12feff")),
        (key![-255], h("1300")),
        (key![-1], h("13fe")),
        (key![0], h("14")),
        (key![0, 0], h("1414")),
        (key![1], h("1501")),
        (key![255], h("15ff")),
        (key![256], h("160100")),
        (key![u64::MAX], h("1cffffffffffffffff")),
        (key![pow2(64)], h("1d09010000000000000000")),
        (key![pow2(200)], format!("1d1a01{}", "00".repeat(25))),
        (key![pow2(2040) - 1u8], format!("1dff{}", "ff".repeat(255))),
        (
            key![float_bits(0xfff8_0000_0000_0000)],
            h("210007ffffffffffff"),
        ),
        (key![f64::NEG_INFINITY], h("21000fffffffffffff")),
        (key![-2.0], h("213fffffffffffffff")),
        (key![-1.0], h("21400fffffffffffff")),
        (key![-5e-324], h("217ffffffffffffffe")),
        (key![-0.0], h("217fffffffffffffff")),
        (key![0.0], h("218000000000000000")),
        (key![5e-324], h("218000000000000001")),
        (key![1.0], h("21bff0000000000000")),
        (
            key![1.0, 1, true, b"\x01\x02\x03", "a"],
            h("21bff00000000000001501270101020300026100"),
        ),
        (key![1.5], h("21bff8000000000000")),
        (key![f64::MAX], h("21ffefffffffffffff")),
        (key![f64::INFINITY], h("21fff0000000000000")),
        (key![f64::NAN], h("21fff8000000000000")),
        (key![false], h("26")),
        (key![false, false], h("2626")),
        (key![true], h("27")),
        (key![true, "x"], h("27027800")),
    ]
}

/// Keys written from their typed form list back as the exact bytes Deno stored, in Deno's order.
async fn deno_key_vectors_list_in_denos_byte_order(env: Env) {
    let kv = &*env.kv;
    let vectors = deno_key_vectors();
    for (k, hex) in scrambled(&vectors) {
        set(kv, &k, KvValue::Bytes(from_hex(&hex).into())).await;
    }
    let expected: Vec<String> = vectors.iter().map(|(_, hex)| hex.clone()).collect();
    let listed = list_prefix(kv, &key![], 1000, false).await;
    let raw: Vec<String> = listed.iter().map(|e| to_hex(&e.key)).collect();
    assert_eq!(raw, expected, "listed key bytes, in order");
    for entry in &listed {
        assert_eq!(
            entry.value,
            KvValue::Bytes(entry.key.clone()),
            "each key keeps its own value"
        );
    }
    let reverse = list_prefix(kv, &key![], 1000, true).await;
    let raw_reverse: Vec<String> = reverse.iter().rev().map(|e| to_hex(&e.key)).collect();
    assert_eq!(raw_reverse, expected, "reverse list is the mirror image");
}

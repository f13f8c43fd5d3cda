//! Mutations: order within one write, sum/min/max on u64, V8 number and bigint sums, their error
//! texts, and which mutations clear an expiry.

use std::time::Duration;

use open_deno_kv_model::num_bigint::BigInt;
use open_deno_kv_model::rules::{v8_bigint, v8_number};
use open_deno_kv_model::{AtomicWrite, Backend, Clock, Key, KvValue, Mutation, MutationKind, key};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        set_then_delete_in_one_write_leaves_key_absent,
        delete_then_set_in_one_write_leaves_key_present,
        set_then_sum_in_one_write_adds_to_the_new_value,
        sum_twice_in_one_write_adds_both,
        u64_sum_on_missing_key_takes_the_operand,
        u64_sum_adds,
        u64_sum_wraps_around,
        u64_min_keeps_the_smaller,
        u64_max_keeps_the_larger,
        min_max_on_missing_key_take_the_operand,
        u64_sum_on_non_u64_value_is_refused,
        min_max_on_non_u64_value_are_refused,
        min_max_with_non_u64_operand_are_refused,
        failed_mutation_rejects_the_whole_write,
        v8_number_sum_adds_numbers,
        v8_bigint_sum_is_exact_beyond_u64,
        v8_sum_reads_a_js_smi,
        v8_number_sum_clamps_into_range,
        v8_bigint_sum_clamps_into_range,
        v8_sum_out_of_range_without_clamp_is_refused,
        v8_sum_on_missing_key_takes_operand_without_range_check,
        sum_mixing_number_and_bigint_is_refused,
        number_sum_on_u64_is_refused,
        small_bigint_sum_on_u64_acts_as_u64_sum,
        sum_clears_an_earlier_expiry,
        min_and_max_clear_an_earlier_expiry,
        plain_set_clears_an_earlier_expiry,
        v8_sum_result_is_a_v8_double,
    ]
}

/// A V8 number value.
fn num(x: f64) -> KvValue {
    KvValue::V8(v8_number(x).into())
}

/// A V8 bigint value.
fn big(x: impl Into<BigInt>) -> KvValue {
    KvValue::V8(
        v8_bigint(&x.into())
            .expect("a test bigint serializes")
            .into(),
    )
}

/// What JavaScript's serializer writes for a small integer such as `100`: a Smi, tag `I` with a
/// zigzag varint (built by hand, not with the library under test).
fn js_smi(x: i32) -> KvValue {
    let mut zigzag = (x.wrapping_shl(1) ^ (x >> 31)).cast_unsigned();
    let mut bytes = vec![0xff, 0x0f, b'I'];
    loop {
        let low = u8::try_from(zigzag & 0x7f).unwrap_or_default();
        zigzag >>= 7;
        if zigzag == 0 {
            bytes.push(low);
            return KvValue::V8(bytes.into());
        }
        bytes.push(low | 0x80);
    }
}

/// A sum with bounds.
fn bounded_sum(
    key: &Key,
    operand: KvValue,
    min: Option<KvValue>,
    max: Option<KvValue>,
    clamp: bool,
) -> Mutation {
    let bytes = |bound: Option<KvValue>| match bound {
        Some(KvValue::V8(b)) => b,
        None => Vec::new().into(),
        Some(other) => panic!("bounds are V8 values, not {other:?}"),
    };
    mutation(
        key,
        MutationKind::Sum {
            value: operand,
            min_v8: bytes(min).to_vec(),
            max_v8: bytes(max).to_vec(),
            clamp,
        },
    )
}

/// Commits one mutation.
async fn apply(kv: &dyn Backend, m: Mutation) {
    commit(
        kv,
        AtomicWrite {
            mutations: vec![m],
            ..Default::default()
        },
    )
    .await;
}

/// Runs one mutation that must be refused; returns the error text.
async fn refused(kv: &dyn Backend, m: Mutation) -> String {
    write_error(
        kv,
        AtomicWrite {
            mutations: vec![m],
            ..Default::default()
        },
    )
    .await
}

fn sum(key: &Key, operand: KvValue) -> Mutation {
    Mutation::sum(enc(key), operand)
}

fn min(key: &Key, operand: KvValue) -> Mutation {
    mutation(key, MutationKind::Min(operand))
}

fn max(key: &Key, operand: KvValue) -> Mutation {
    mutation(key, MutationKind::Max(operand))
}

async fn set_then_delete_in_one_write_leaves_key_absent(env: Env) {
    let k = key!["a"];
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(enc(&k), KvValue::U64(1)),
            Mutation::delete(enc(&k)),
        ],
        ..Default::default()
    };
    commit(&*env.kv, write).await;
    assert_eq!(get(&*env.kv, &k).await, None);
}

async fn delete_then_set_in_one_write_leaves_key_present(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(1)).await;
    let write = AtomicWrite {
        mutations: vec![
            Mutation::delete(enc(&k)),
            Mutation::set(enc(&k), KvValue::U64(2)),
        ],
        ..Default::default()
    };
    let stamp = commit(&*env.kv, write).await;
    let entry = get(&*env.kv, &k).await.expect("set last");
    assert_eq!(entry.value, KvValue::U64(2));
    assert_eq!(entry.versionstamp, stamp);
}

/// A sum sees the value an earlier mutation of the same write left, not the stored one.
async fn set_then_sum_in_one_write_adds_to_the_new_value(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(1000)).await;
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(enc(&k), KvValue::U64(10)),
            sum(&k, KvValue::U64(5)),
        ],
        ..Default::default()
    };
    commit(&*env.kv, write).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(15)));
}

async fn sum_twice_in_one_write_adds_both(env: Env) {
    let k = key!["a"];
    let write = AtomicWrite {
        mutations: vec![sum(&k, KvValue::U64(3)), sum(&k, KvValue::U64(4))],
        ..Default::default()
    };
    commit(&*env.kv, write).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(7)));
}

async fn u64_sum_on_missing_key_takes_the_operand(env: Env) {
    let k = key!["a"];
    apply(&*env.kv, sum(&k, KvValue::U64(42))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(42)));
}

async fn u64_sum_adds(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(40)).await;
    apply(&*env.kv, sum(&k, KvValue::U64(2))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(42)));
    apply(&*env.kv, sum(&k, KvValue::U64(0))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(42)));
}

/// u64 sums are modulo 2^64: (2^64 - 1) + 2 = 1, as Deno stores it.
async fn u64_sum_wraps_around(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(u64::MAX)).await;
    apply(&*env.kv, sum(&k, KvValue::U64(2))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(1)));
    // Adding 2^64 - 1 is subtracting one.
    apply(&*env.kv, sum(&k, KvValue::U64(u64::MAX))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(0)));
}

async fn u64_min_keeps_the_smaller(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(10)).await;
    apply(&*env.kv, min(&k, KvValue::U64(30))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(10)));
    apply(&*env.kv, min(&k, KvValue::U64(3))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(3)));
    apply(&*env.kv, min(&k, KvValue::U64(u64::MAX))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(3)));
}

async fn u64_max_keeps_the_larger(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::U64(10)).await;
    apply(&*env.kv, max(&k, KvValue::U64(3))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(10)));
    apply(&*env.kv, max(&k, KvValue::U64(30))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(30)));
    apply(&*env.kv, max(&k, KvValue::U64(0))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(KvValue::U64(30)));
}

async fn min_max_on_missing_key_take_the_operand(env: Env) {
    // A missing min takes the operand (it is not compared with 0).
    apply(&*env.kv, min(&key!["min"], KvValue::U64(7))).await;
    apply(&*env.kv, max(&key!["max"], KvValue::U64(0))).await;
    assert_eq!(
        get_value(&*env.kv, &key!["min"]).await,
        Some(KvValue::U64(7))
    );
    assert_eq!(
        get_value(&*env.kv, &key!["max"]).await,
        Some(KvValue::U64(0))
    );
}

async fn u64_sum_on_non_u64_value_is_refused(env: Env) {
    let text = "Failed to perform 'sum' mutation on a non-U64 value in the database";
    for (k, stored) in [
        (key!["v8"], num(1.0)),
        (key!["bytes"], KvValue::Bytes(vec![1].into())),
        (key!["string"], v8_string("1")),
    ] {
        set(&*env.kv, &k, stored.clone()).await;
        assert_eq!(
            refused(&*env.kv, sum(&k, KvValue::U64(1))).await,
            text,
            "on {k}"
        );
        assert_eq!(get_value(&*env.kv, &k).await, Some(stored), "{k} unchanged");
    }
}

async fn min_max_on_non_u64_value_are_refused(env: Env) {
    let k = key!["a"];
    set(&*env.kv, &k, KvValue::Bytes(vec![1].into())).await;
    assert_eq!(
        refused(&*env.kv, min(&k, KvValue::U64(1))).await,
        "Failed to perform 'min' mutation on a non-U64 value in the database"
    );
    assert_eq!(
        refused(&*env.kv, max(&k, KvValue::U64(1))).await,
        "Failed to perform 'max' mutation on a non-U64 value in the database"
    );
    assert_eq!(
        get_value(&*env.kv, &k).await,
        Some(KvValue::Bytes(vec![1].into()))
    );
}

/// min and max only take u64 operands; the operand is checked before the stored value, so a V8
/// operand on a V8 value reports the operand.
async fn min_max_with_non_u64_operand_are_refused(env: Env) {
    set(&*env.kv, &key!["u64"], KvValue::U64(5)).await;
    set(&*env.kv, &key!["v8"], num(5.0)).await;
    for k in [key!["u64"], key!["v8"], key!["missing"]] {
        assert_eq!(
            refused(&*env.kv, min(&k, num(1.0))).await,
            "Failed to perform 'min' mutation on a non-U64 operand",
            "min on {k}"
        );
        assert_eq!(
            refused(&*env.kv, max(&k, KvValue::Bytes(vec![1].into()))).await,
            "Failed to perform 'max' mutation on a non-U64 operand",
            "max on {k}"
        );
    }
    assert_eq!(get(&*env.kv, &key!["missing"]).await, None);
    assert_eq!(
        get_value(&*env.kv, &key!["u64"]).await,
        Some(KvValue::U64(5))
    );
}

/// An error in a later mutation undoes the earlier mutations of the same write.
async fn failed_mutation_rejects_the_whole_write(env: Env) {
    let kv = &*env.kv;
    let kept = set(kv, &key!["w", "kept"], KvValue::U64(1)).await;
    set(kv, &key!["w", "bytes"], KvValue::Bytes(vec![0].into())).await;
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(enc(&key!["w", "new"]), KvValue::U64(1)),
            Mutation::delete(enc(&key!["w", "kept"])),
            sum(&key!["w", "counter"], KvValue::U64(1)),
            sum(&key!["w", "bytes"], KvValue::U64(1)),
            Mutation::set(enc(&key!["w", "after"]), KvValue::U64(1)),
        ],
        ..Default::default()
    };
    assert_eq!(
        write_error(kv, write).await,
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    let entries = list_prefix(kv, &key!["w"], 100, false).await;
    assert_eq!(
        keys_of(&entries),
        vec![key!["w", "bytes"], key!["w", "kept"]]
    );
    let entry = get(kv, &key!["w", "kept"]).await.expect("not deleted");
    assert_eq!(entry.versionstamp, kept);
    // The store still takes writes, and stamps them after the last successful commit.
    let next = set(kv, &key!["w", "new"], KvValue::U64(2)).await;
    assert!(next > kept);
}

/// Deno 2.9 sums JavaScript numbers: 1.5 + 2 = 3.5, stored as the engine's V8 double.
async fn v8_number_sum_adds_numbers(env: Env) {
    let k = key!["n"];
    set(&*env.kv, &k, num(1.5)).await;
    apply(&*env.kv, sum(&k, num(2.0))).await;
    let value = get_value(&*env.kv, &k).await.expect("set");
    assert_eq!(value, num(3.5));
    // Deno's bytes for 3.5, from the fixture.
    assert_eq!(
        value,
        KvValue::V8(vec![0xff, 0x0f, 0x4e, 0, 0, 0, 0, 0, 0, 0x0c, 0x40].into())
    );
    apply(&*env.kv, sum(&k, num(-5.25))).await;
    assert_eq!(get_value(&*env.kv, &k).await, Some(num(-1.75)));
}

/// Bigint sums are exact at any size: 2^70 + 1.
async fn v8_bigint_sum_is_exact_beyond_u64(env: Env) {
    let k = key!["b"];
    let two_70 = BigInt::from(1) << 70u32;
    set(&*env.kv, &k, big(two_70.clone())).await;
    apply(&*env.kv, sum(&k, big(1))).await;
    let value = get_value(&*env.kv, &k).await.expect("set");
    assert_eq!(value, big(two_70 + 1));
    // Deno's bytes for 1180591620717411303425n, from the fixture.
    assert_eq!(
        value,
        KvValue::V8(vec![0xff, 0x0f, 0x5a, 0x12, 0x01, 0, 0, 0, 0, 0, 0, 0, 0x40].into())
    );
    let minus_u128 = -BigInt::from(u128::MAX);
    apply(&*env.kv, sum(&k, big(minus_u128.clone()))).await;
    let expected = (BigInt::from(1) << 70u32) + 1 + minus_u128;
    assert_eq!(get_value(&*env.kv, &k).await, Some(big(expected)));
}

/// JavaScript writes small integers as Smis (`I`, zigzag varint); a sum reads them as numbers.
async fn v8_sum_reads_a_js_smi(env: Env) {
    for (stored, operand, expected) in [(100, 0.5, 100.5), (-3, 1.0, -2.0), (2, 2.0, 4.0)] {
        let k = key!["smi", stored];
        set(&*env.kv, &k, js_smi(stored)).await;
        apply(&*env.kv, sum(&k, num(operand))).await;
        assert_eq!(
            get_value(&*env.kv, &k).await,
            Some(num(expected)),
            "{stored} + {operand}"
        );
    }
}

async fn v8_number_sum_clamps_into_range(env: Env) {
    let kv = &*env.kv;
    let (lo, hi) = (Some(num(0.0)), Some(num(10.0)));
    set(kv, &key!["up"], num(8.0)).await;
    apply(
        kv,
        bounded_sum(&key!["up"], num(5.0), lo.clone(), hi.clone(), true),
    )
    .await;
    assert_eq!(get_value(kv, &key!["up"]).await, Some(num(10.0)));

    set(kv, &key!["down"], num(2.0)).await;
    apply(
        kv,
        bounded_sum(&key!["down"], num(-5.0), lo.clone(), hi.clone(), true),
    )
    .await;
    assert_eq!(get_value(kv, &key!["down"]).await, Some(num(0.0)));

    // In range, clamp changes nothing.
    set(kv, &key!["inside"], num(2.0)).await;
    apply(kv, bounded_sum(&key!["inside"], num(5.0), lo, hi, true)).await;
    assert_eq!(get_value(kv, &key!["inside"]).await, Some(num(7.0)));
}

async fn v8_bigint_sum_clamps_into_range(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["low"], big(0)).await;
    apply(
        kv,
        bounded_sum(&key!["low"], big(-10), Some(big(-3)), None, true),
    )
    .await;
    assert_eq!(get_value(kv, &key!["low"]).await, Some(big(-3)));

    set(kv, &key!["high"], big(0)).await;
    apply(
        kv,
        bounded_sum(&key!["high"], big(1000), None, Some(big(100)), true),
    )
    .await;
    assert_eq!(get_value(kv, &key!["high"]).await, Some(big(100)));
}

async fn v8_sum_out_of_range_without_clamp_is_refused(env: Env) {
    let kv = &*env.kv;
    let text = "The result of a Sum operation would exceed its range limit";
    let stamp = set(kv, &key!["n"], num(8.0)).await;
    let over = bounded_sum(&key!["n"], num(5.0), Some(num(0.0)), Some(num(10.0)), false);
    assert_eq!(refused(kv, over).await, text);
    let entry = get(kv, &key!["n"]).await.expect("still there");
    assert_eq!(entry.value, num(8.0));
    assert_eq!(entry.versionstamp, stamp);
    // Within the bounds the same sum applies.
    apply(
        kv,
        bounded_sum(&key!["n"], num(2.0), Some(num(0.0)), Some(num(10.0)), false),
    )
    .await;
    assert_eq!(get_value(kv, &key!["n"]).await, Some(num(10.0)));

    set(kv, &key!["b"], big(0)).await;
    let under = bounded_sum(&key!["b"], big(-10), Some(big(-3)), None, false);
    assert_eq!(refused(kv, under).await, text);
    assert_eq!(get_value(kv, &key!["b"]).await, Some(big(0)));
}

async fn v8_sum_on_missing_key_takes_operand_without_range_check(env: Env) {
    let kv = &*env.kv;
    let m = bounded_sum(
        &key!["n"],
        num(50.0),
        Some(num(0.0)),
        Some(num(10.0)),
        false,
    );
    apply(kv, m).await;
    assert_eq!(get_value(kv, &key!["n"]).await, Some(num(50.0)));

    let m = bounded_sum(&key!["b"], big(-50), Some(big(0)), None, true);
    apply(kv, m).await;
    assert_eq!(get_value(kv, &key!["b"]).await, Some(big(-50)));
}

async fn sum_mixing_number_and_bigint_is_refused(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["n"], num(1.0)).await;
    set(kv, &key!["b"], big(1)).await;
    assert_eq!(
        refused(kv, sum(&key!["n"], big(1))).await,
        "Cannot sum Number with BigInt"
    );
    assert_eq!(
        refused(kv, sum(&key!["b"], num(1.0))).await,
        "Cannot sum BigInt with Number"
    );
    assert_eq!(
        refused(kv, sum(&key!["b"], js_smi(1))).await,
        "Cannot sum BigInt with Number"
    );
    assert_eq!(get_value(kv, &key!["n"]).await, Some(num(1.0)));
    assert_eq!(get_value(kv, &key!["b"]).await, Some(big(1)));
}

async fn number_sum_on_u64_is_refused(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["u"], KvValue::U64(1)).await;
    assert_eq!(
        refused(kv, sum(&key!["u"], num(1.0))).await,
        "Cannot sum KvU64 with Number"
    );
    assert_eq!(get_value(kv, &key!["u"]).await, Some(KvValue::U64(1)));
}

/// A bigint operand in [0, 2^64) on a stored u64 is a u64 sum: it wraps and stays a u64.
async fn small_bigint_sum_on_u64_acts_as_u64_sum(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["u"], KvValue::U64(5)).await;
    apply(kv, sum(&key!["u"], big(3))).await;
    assert_eq!(get_value(kv, &key!["u"]).await, Some(KvValue::U64(8)));

    set(kv, &key!["wrap"], KvValue::U64(u64::MAX)).await;
    apply(kv, sum(&key!["wrap"], big(1))).await;
    assert_eq!(get_value(kv, &key!["wrap"]).await, Some(KvValue::U64(0)));
}

/// sum, min and max rewrite the entry without an expiry.
async fn sum_clears_an_earlier_expiry(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    let ttl = Duration::from_secs(60);
    set_expiring(kv, &key!["u"], KvValue::U64(1), now, ttl).await;
    set_expiring(kv, &key!["n"], num(1.0), now, ttl).await;
    apply(kv, sum(&key!["u"], KvValue::U64(1))).await;
    apply(kv, sum(&key!["n"], num(1.0))).await;
    env.advance(Duration::from_secs(3600));
    assert_eq!(get_value(kv, &key!["u"]).await, Some(KvValue::U64(2)));
    assert_eq!(get_value(kv, &key!["n"]).await, Some(num(2.0)));
}

async fn min_and_max_clear_an_earlier_expiry(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    let ttl = Duration::from_secs(60);
    set_expiring(kv, &key!["min"], KvValue::U64(5), now, ttl).await;
    set_expiring(kv, &key!["max"], KvValue::U64(5), now, ttl).await;
    // Neither changes the value, yet both drop the expiry.
    apply(kv, min(&key!["min"], KvValue::U64(9))).await;
    apply(kv, max(&key!["max"], KvValue::U64(1))).await;
    env.advance(Duration::from_secs(3600));
    assert_eq!(get_value(kv, &key!["min"]).await, Some(KvValue::U64(5)));
    assert_eq!(get_value(kv, &key!["max"]).await, Some(KvValue::U64(5)));
}

async fn plain_set_clears_an_earlier_expiry(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    set_expiring(
        kv,
        &key!["a"],
        KvValue::U64(1),
        now,
        Duration::from_secs(60),
    )
    .await;
    set(kv, &key!["a"], KvValue::U64(2)).await;
    env.advance(Duration::from_secs(3600));
    assert_eq!(get_value(kv, &key!["a"]).await, Some(KvValue::U64(2)));
}

/// The engine writes a V8 sum's result itself, as a double (`FF 0F 4E` + 8 bytes), even when
/// both sides were Smis.
async fn v8_sum_result_is_a_v8_double(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["a"], js_smi(20)).await;
    apply(kv, sum(&key!["a"], js_smi(22))).await;
    let value = get_value(kv, &key!["a"]).await.expect("set");
    assert_eq!(value, KvValue::V8(v8_number(42.0).into()));
    assert_eq!(
        value,
        KvValue::V8(vec![0xff, 0x0f, 0x4e, 0, 0, 0, 0, 0, 0, 0x45, 0x40].into())
    );
}

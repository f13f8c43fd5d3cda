use num_bigint::BigInt;
// The tests' oracle: denoland's own V8 serializer, which the engine's sum results come from.
use v8_valueserializer::{Heap, Value, ValueDeserializer, ValueSerializer};

use super::*;

fn num(x: f64) -> KvValue {
    KvValue::V8(v8_number(x).into())
}

fn big(x: i128) -> KvValue {
    KvValue::V8(v8_bigint(&BigInt::from(x)).unwrap().into())
}

/// What JavaScript's serializer writes for a small integer such as `1`: a Smi (`I`, zigzag).
fn js_smi(x: i32) -> KvValue {
    KvValue::V8(
        ValueSerializer::default()
            .finish(&Heap::default(), &Value::I32(x))
            .unwrap()
            .into(),
    )
}

fn bounds(min: Vec<u8>, max: Vec<u8>, clamp: bool) -> SumBounds {
    SumBounds {
        min_v8: min,
        max_v8: max,
        clamp,
    }
}

fn err_text(r: Result<KvValue, MutationError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn v8_number_matches_the_crate_serializer() {
    for x in [0.0, -0.0, 1.5, f64::MAX, f64::NAN] {
        let expected = ValueSerializer::default()
            .finish(&Heap::default(), &Value::Double(x))
            .unwrap();
        assert_eq!(v8_number(x), expected);
    }
    assert_eq!(&v8_number(1.0)[..2], &[0xff, 0x0f]);
}

#[test]
fn v8_bigint_matches_the_crate_serializer() {
    let huge: BigInt = BigInt::from(u128::MAX) * 1000;
    for x in [
        BigInt::from(0),
        BigInt::from(1),
        BigInt::from(-1),
        BigInt::from(255),
        BigInt::from(256),
        BigInt::from(i64::MIN),
        BigInt::from(u64::MAX) + 1,
        -huge.clone(),
        huge,
    ] {
        let expected = ValueSerializer::default()
            .finish(&Heap::default(), &Value::BigInt(x.clone()))
            .unwrap();
        assert_eq!(v8_bigint(&x).unwrap(), expected, "{x}");
    }
}

#[test]
fn sum_operands_read_as_the_crate_deserializer_reads_them() {
    // Numbers as a Smi, a double, a bigint, and values a sum refuses.
    let operands = [
        js_smi(-7),
        num(2.5),
        big(-(1 << 100)),
        KvValue::V8(hex::decode("ff10220568656c6c6f").unwrap().into()), // "hello"
        KvValue::V8(hex::decode("ff106f7b00").unwrap().into()),         // {}
        KvValue::V8(hex::decode("ff106f").unwrap().into()),             // truncated
    ];
    for operand in operands {
        let KvValue::V8(bytes) = &operand else {
            unreachable!()
        };
        let oracle = match ValueDeserializer::default().read(bytes) {
            Err(_) => Err("invalid v8 value"),
            Ok((Value::Double(x), _)) => Ok(SumOperand::Number(x)),
            Ok((Value::I32(x), _)) => Ok(SumOperand::Number(f64::from(x))),
            Ok((Value::BigInt(x), _)) => Ok(SumOperand::BigInt(x)),
            Ok(_) => Err("unsupported value type"),
        };
        let ours = SumOperand::parse(&operand);
        assert_eq!(format!("{ours:?}"), format!("{oracle:?}"), "{operand:?}");
    }
}

#[test]
fn u64_sum_wraps_and_missing_key_takes_operand() {
    let none = SumBounds::default();
    assert_eq!(
        apply_sum(None, &KvValue::U64(5), &none),
        Ok(KvValue::U64(5))
    );
    assert_eq!(
        apply_sum(Some(&KvValue::U64(u64::MAX)), &KvValue::U64(1), &none),
        Ok(KvValue::U64(0))
    );
    assert_eq!(
        apply_sum(Some(&KvValue::U64(40)), &KvValue::U64(2), &none),
        Ok(KvValue::U64(42))
    );
}

#[test]
fn u64_sum_type_errors_use_denos_texts() {
    let none = SumBounds::default();
    assert_eq!(
        err_text(apply_sum(Some(&num(1.0)), &KvValue::U64(1), &none)),
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    assert_eq!(
        err_text(apply_sum(
            Some(&KvValue::Bytes(vec![1].into())),
            &KvValue::U64(1),
            &none
        )),
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    assert_eq!(
        err_text(apply_sum(
            Some(&KvValue::U64(1)),
            &KvValue::U64(1),
            &bounds(v8_number(0.0), vec![], false)
        )),
        "Cannot use min/max parameters with KvU64 operands"
    );
}

#[test]
fn min_max_on_u64() {
    let stored = KvValue::U64(10);
    assert_eq!(
        apply_min_max(MinMax::Min, Some(&stored), &KvValue::U64(3)),
        Ok(KvValue::U64(3))
    );
    assert_eq!(
        apply_min_max(MinMax::Min, Some(&stored), &KvValue::U64(30)),
        Ok(KvValue::U64(10))
    );
    assert_eq!(
        apply_min_max(MinMax::Max, Some(&stored), &KvValue::U64(30)),
        Ok(KvValue::U64(30))
    );
    assert_eq!(
        apply_min_max(MinMax::Max, Some(&stored), &KvValue::U64(3)),
        Ok(KvValue::U64(10))
    );
    assert_eq!(
        apply_min_max(MinMax::Max, None, &KvValue::U64(3)),
        Ok(KvValue::U64(3))
    );
}

#[test]
fn min_max_type_errors_check_operand_first() {
    for (which, op) in [(MinMax::Min, "min"), (MinMax::Max, "max")] {
        assert_eq!(
            err_text(apply_min_max(which, Some(&num(1.0)), &num(2.0))),
            format!("Failed to perform '{op}' mutation on a non-U64 operand")
        );
        assert_eq!(
            err_text(apply_min_max(which, Some(&num(1.0)), &KvValue::U64(2))),
            format!("Failed to perform '{op}' mutation on a non-U64 value in the database")
        );
    }
}

#[test]
fn number_sums_read_smis_and_write_doubles() {
    let none = SumBounds::default();
    assert_eq!(apply_sum(Some(&js_smi(1)), &num(0.5), &none), Ok(num(1.5)));
    assert_eq!(
        apply_sum(Some(&num(0.1)), &num(0.2), &none),
        Ok(num(0.1 + 0.2))
    );
    // A missing key takes the operand, re-serialized by the engine (a Smi becomes a double).
    assert_eq!(apply_sum(None, &js_smi(7), &none), Ok(num(7.0)));
}

#[test]
fn bigint_sums_are_exact() {
    let none = SumBounds::default();
    let huge = BigInt::from(u128::MAX) * 1000;
    let stored = KvValue::V8(v8_bigint(&huge).unwrap().into());
    let expected = KvValue::V8(v8_bigint(&(huge.clone() + 1)).unwrap().into());
    assert_eq!(apply_sum(Some(&stored), &big(1), &none), Ok(expected));
    assert_eq!(apply_sum(Some(&big(-5)), &big(3), &none), Ok(big(-2)));
}

#[test]
fn bounds_clamp_or_fail_on_the_result() {
    let range = |clamp| bounds(v8_number(0.0), v8_number(10.0), clamp);
    assert_eq!(
        apply_sum(Some(&num(8.0)), &num(5.0), &range(true)),
        Ok(num(10.0))
    );
    assert_eq!(
        apply_sum(Some(&num(2.0)), &num(-5.0), &range(true)),
        Ok(num(0.0))
    );
    assert_eq!(
        apply_sum(Some(&num(2.0)), &num(5.0), &range(false)),
        Ok(num(7.0))
    );
    assert_eq!(
        err_text(apply_sum(Some(&num(8.0)), &num(5.0), &range(false))),
        "The result of a Sum operation would exceed its range limit"
    );
    // A missing key is not range-checked.
    assert_eq!(apply_sum(None, &num(50.0), &range(false)), Ok(num(50.0)));

    let big_range = |clamp| bounds(v8_bigint(&BigInt::from(-3)).unwrap(), vec![], clamp);
    assert_eq!(
        apply_sum(Some(&big(0)), &big(-10), &big_range(true)),
        Ok(big(-3))
    );
    assert_eq!(
        err_text(apply_sum(Some(&big(0)), &big(-10), &big_range(false))),
        "The result of a Sum operation would exceed its range limit"
    );
}

#[test]
fn mixed_sums_use_denos_texts() {
    let none = SumBounds::default();
    assert_eq!(
        err_text(apply_sum(Some(&num(1.0)), &big(1), &none)),
        "Cannot sum Number with BigInt"
    );
    assert_eq!(
        err_text(apply_sum(Some(&big(1)), &js_smi(1), &none)),
        "Cannot sum BigInt with Number"
    );
    assert_eq!(
        err_text(apply_sum(Some(&KvValue::U64(1)), &num(1.0), &none)),
        "Cannot sum KvU64 with Number"
    );
    assert_eq!(
        err_text(apply_sum(Some(&KvValue::U64(1)), &big(-1), &none)),
        "Cannot sum KvU64 with BigInt"
    );
    assert_eq!(
        err_text(apply_sum(
            Some(&KvValue::Bytes(vec![].into())),
            &big(1),
            &none
        )),
        "unsupported value type"
    );
    let string = KvValue::V8(vec![0xff, 0x0f, b'"', 1, b'a'].into());
    assert_eq!(
        err_text(apply_sum(Some(&string), &num(1.0), &none)),
        "unsupported value type"
    );
    assert_eq!(
        err_text(apply_sum(
            Some(&KvValue::V8(vec![1, 2].into())),
            &num(1.0),
            &none
        )),
        "invalid v8 value"
    );
}

#[test]
fn bad_operands_and_bounds() {
    let none = SumBounds::default();
    let text = "Some of the parameters are not valid V8 values";
    assert_eq!(
        err_text(apply_sum(None, &KvValue::Bytes(vec![1].into()), &none)),
        text
    );
    assert_eq!(
        err_text(apply_sum(None, &KvValue::V8(vec![].into()), &none)),
        text
    );
    assert_eq!(
        err_text(apply_sum(
            None,
            &num(1.0),
            &bounds(vec![0xff], vec![], false)
        )),
        text
    );
    assert_eq!(
        err_text(apply_sum(
            None,
            &num(1.0),
            &bounds(v8_bigint(&BigInt::from(1)).unwrap(), vec![], false)
        )),
        "Min/max parameters have different types than the operand"
    );
}

#[test]
fn small_bigint_on_a_u64_acts_as_u64() {
    let none = SumBounds::default();
    assert_eq!(
        apply_sum(Some(&KvValue::U64(u64::MAX)), &big(1), &none),
        Ok(KvValue::U64(0))
    );
    assert_eq!(
        apply_sum(Some(&KvValue::U64(1)), &big(i128::from(u64::MAX)), &none),
        Ok(KvValue::U64(0))
    );
    assert_eq!(
        err_text(apply_sum(Some(&KvValue::U64(1)), &big(1 << 64), &none)),
        "Cannot sum KvU64 with BigInt"
    );
}

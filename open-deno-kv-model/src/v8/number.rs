//! JavaScript numbers as text, and the integer forms V8 gives them.

/// The text JavaScript's `String(x)` gives for a number, except that negative zero is `-0`
/// (the manifests' `numRepr`, and what `Deno.inspect` shows).
///
/// Rust's shortest round-trip digits are the same digits ECMAScript's `Number::toString` picks;
/// only the layout (where the point goes, when to switch to exponent form) differs, and that
/// is done here by the specification's rules.
pub fn number_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // `{:e}` of a finite non-zero f64: shortest digits "d.ddd" then "e" and the exponent.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let k = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    // ECMAScript's n: the value is 0.digits × 10^n.
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        let zeros = usize::try_from(n - k).unwrap_or(0);
        format!("{digits}{}", "0".repeat(zeros))
    } else if 0 < n && n <= 21 {
        let split = usize::try_from(n).unwrap_or(0);
        let (int, frac) = digits.split_at(split.min(digits.len()));
        format!("{int}.{frac}")
    } else if -6 < n && n <= 0 {
        let zeros = usize::try_from(-n).unwrap_or(0);
        format!("0.{}{digits}", "0".repeat(zeros))
    } else {
        let e = n - 1;
        let e = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        let (first, rest) = digits.split_at(1.min(digits.len()));
        if rest.is_empty() {
            format!("{first}e{e}")
        } else {
            format!("{first}.{rest}e{e}")
        }
    };
    format!("{sign}{body}")
}

/// JavaScript's `ToString` of a number used as a property key: like [`number_repr`] but
/// `-0` is `"0"`.
pub(crate) fn number_key(x: f64) -> String {
    if x == 0.0 {
        "0".to_owned()
    } else {
        number_repr(x)
    }
}

/// Reads a number written as [`number_repr`] writes it, or any JavaScript decimal literal
/// (`1e21`, `.5`, `-1.50`): `NaN`, `Infinity`, `-Infinity`, `-0` and decimals.
pub fn parse_number(text: &str) -> Option<f64> {
    match text {
        "NaN" => return Some(f64::NAN),
        "Infinity" | "+Infinity" => return Some(f64::INFINITY),
        "-Infinity" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    // Rust also reads "inf", "nan", "infinity": only decimal literals are JavaScript's.
    let decimal = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        && text.chars().any(|c| c.is_ascii_digit());
    if !decimal {
        return None;
    }
    text.parse::<f64>().ok()
}

/// The small integers V8 keeps as "Smi"s and serializes with the `Int32` tag (`I`, zig-zag
/// varint) instead of a `Double`: integral, not `-0`, and in the Smi range.
///
/// The Smi range is 32 bits on a 64-bit V8 built without pointer compression, which is how
/// Deno's release builds are taken to be. (With pointer compression it would be 31 bits, and
/// numbers in `2^30 ..= 2^31 - 1` would be written as doubles instead; V8 reads both forms as
/// the same number, so only the exact bytes could differ.)
pub(crate) fn as_smi(x: f64) -> Option<i32> {
    let in_range = x >= f64::from(i32::MIN) && x <= f64::from(i32::MAX);
    if in_range && x.fract() == 0.0 && !(x == 0.0 && x.is_sign_negative()) {
        // In range and integral, so the conversion is exact.
        Some(x as i32)
    } else {
        None
    }
}

/// The array index a property key names, if it is one: the canonical decimal text of an
/// integer in `0 ..= 2^32 - 2` (`"01"` and `"4294967295"` are ordinary keys).
pub(crate) fn array_index(key: &str) -> Option<u32> {
    let canonical = !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_digit())
        && (key == "0" || !key.starts_with('0'));
    if !canonical {
        return None;
    }
    key.parse::<u32>().ok().filter(|i| *i != u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_repr_follows_javascript() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (42.0, "42"),
            (314.0 / 100.0, "3.14"),
            (0.1, "0.1"),
            (0.000001, "0.000001"),
            (0.0000001, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (2f64.powi(31), "2147483648"),
            (9007199254740991.0, "9007199254740991"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (5e-324, "5e-324"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
            (100.0, "100"),
            (1e20, "100000000000000000000"),
            (-2.25, "-2.25"),
            (123.456, "123.456"),
        ];
        for (x, want) in cases {
            assert_eq!(number_repr(*x), *want, "{x:e}");
            let back = parse_number(want).unwrap();
            assert!(back.to_bits() == x.to_bits() || (back.is_nan() && x.is_nan()));
        }
    }

    #[test]
    fn parse_number_accepts_only_javascript_spellings() {
        assert_eq!(parse_number("1e21"), Some(1e21));
        assert_eq!(parse_number(".5"), Some(0.5));
        assert_eq!(
            parse_number("-0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        for bad in [
            "", "inf", "nan", "infinity", "x", "1x", "--", "e", "0x10", " 1",
        ] {
            assert_eq!(parse_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn smis_and_indices() {
        assert_eq!(as_smi(42.0), Some(42));
        assert_eq!(as_smi(-1.0), Some(-1));
        assert_eq!(as_smi(-0.0), None);
        assert_eq!(as_smi(1.5), None);
        assert_eq!(as_smi(2f64.powi(31)), None);
        assert_eq!(as_smi(f64::from(i32::MIN)), Some(i32::MIN));
        assert_eq!(as_smi(f64::NAN), None);
        assert_eq!(array_index("0"), Some(0));
        assert_eq!(array_index("12"), Some(12));
        assert_eq!(array_index("012"), None);
        assert_eq!(array_index("4294967294"), Some(4294967294));
        assert_eq!(array_index("4294967295"), None);
        assert_eq!(array_index("-1"), None);
        assert_eq!(array_index(""), None);
        assert_eq!(number_key(-0.0), "0");
    }
}

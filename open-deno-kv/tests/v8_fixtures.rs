//! Checks `open_deno_kv::v8` against values written by the real Deno 2.9.6 (`fixtures/deno-2.9.6`
//! in the repository; `KV_FIXTURES_DIR` overrides the location).
//!
//! For every entry of `values`, `keys` and `special` (and every queue message of `special`):
//!
//! - the stored bytes, read with their encoding, give the manifest's tagged JSON
//!   (`value_json`, what Deno itself reads back);
//! - that tagged JSON, read back into a value and turned into tagged JSON again, is identical;
//! - the value re-serialized from the tagged JSON is byte-identical to Deno's, except where the
//!   tagged form drops something Deno stored (an error's stack, a `DataView`'s whole buffer)
//!   and for the values Deno's engine serialized itself (V8 `sum` results, header `ff 0f`);
//! - plain JSON and JS literal rendering work on every value (the cyclic one is refused by
//!   plain JSON, as `JSON.stringify` refuses it).

mod common;

use common::{manifest, stored_value};
use open_deno_kv::KvValue;
use open_deno_kv::v8::{V8Error, from_tagged_json, to_js_literal, to_json, to_tagged_json};
use serde_json::Value;

/// One stored value of a manifest, with what Deno read back.
struct Case {
    label: String,
    value: KvValue,
    value_json: Value,
    /// The V8 header Deno wrote (`ff10` client, `ff0f` engine), if a V8 value.
    header: Option<String>,
}

fn str_field<'a>(entry: &'a Value, field: &str, label: &str) -> &'a str {
    entry[field]
        .as_str()
        .unwrap_or_else(|| panic!("{label}: no string field {field}"))
}

fn cases(name: &str) -> Vec<Case> {
    let manifest = manifest(name);
    let mut out = Vec::new();
    let entries = manifest["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no entries"));
    for entry in entries {
        let label = format!("{name} {}", entry["key"]);
        let value = stored_value(entry, &label);
        assert_eq!(
            value.encoding().name(),
            str_field(entry, "encoding", &label)
        );
        out.push(Case {
            header: entry["v8_header"].as_str().map(str::to_owned),
            value,
            value_json: entry["value_json"].clone(),
            label,
        });
    }
    if let Some(queue) = manifest["queue"].as_array() {
        for (i, message) in queue.iter().enumerate() {
            let label = format!("{name} queue[{i}]");
            let bytes = hex::decode(str_field(message, "data_hex", &label)).expect("data_hex");
            out.push(Case {
                header: Some(hex::encode(bytes.get(..2).unwrap_or_default())),
                value: KvValue::V8(bytes.into()),
                value_json: message["value_json"].clone(),
                label,
            });
        }
    }
    out
}

/// Entries whose bytes cannot be reproduced from the tagged form, and why.
fn known_difference(case: &Case) -> Option<&'static str> {
    if case.header.as_deref() == Some("ff0f") {
        return Some("serialized by Deno's engine (header ff0f; bigint digits not padded)");
    }
    let text = case.value_json.to_string();
    if text.contains("\"error\"") {
        return Some("an error's stack is not in the tagged form");
    }
    if text.contains("\"DataView\"") {
        return Some("a DataView's buffer outside its window is not in the tagged form");
    }
    None
}

#[test]
fn every_fixture_value_reads_round_trips_and_reserializes() {
    let mut checked = 0;
    let mut identical = 0;
    let mut v8_identical = 0;
    let mut v8_total = 0;
    let mut different = Vec::new();
    for name in ["values", "keys", "special"] {
        for case in cases(name) {
            let label = &case.label;
            checked += 1;

            // Deno's bytes → what Deno read back.
            let tagged = to_tagged_json(&case.value).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(
                tagged, case.value_json,
                "{label}: tagged JSON differs from Deno's"
            );

            // Tagged → value → tagged is identical.
            let back = from_tagged_json(&tagged).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(back.encoding(), case.value.encoding(), "{label}: encoding");
            let again = to_tagged_json(&back).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(
                again, tagged,
                "{label}: tagged JSON changed in a round trip"
            );

            // The bytes, compared with Deno's.
            let is_v8 = matches!(case.value, KvValue::V8(_));
            v8_total += usize::from(is_v8);
            if back == case.value {
                identical += 1;
                v8_identical += usize::from(is_v8);
                assert_eq!(
                    known_difference(&case),
                    None,
                    "{label}: expected to differ but is byte-identical"
                );
            } else {
                let (KvValue::V8(ours), KvValue::V8(deno)) = (&back, &case.value) else {
                    panic!("{label}: a non-V8 value changed: {back:?}");
                };
                let why = known_difference(&case).unwrap_or_else(|| {
                    panic!(
                        "{label}: bytes differ from Deno's\n ours {}\n deno {}",
                        hex::encode(ours),
                        hex::encode(deno)
                    )
                });
                different.push(format!("{label}: {why}"));
            }

            // The other renderings work on every value (only the cycle is refused by JSON).
            match to_json(&case.value) {
                Ok(_) => {}
                Err(V8Error::Circular { .. }) if label.contains("cyclic") => {}
                Err(e) => panic!("{label}: to_json: {e}"),
            }
            to_js_literal(&case.value).unwrap_or_else(|e| panic!("{label}: to_js_literal: {e}"));
        }
    }
    eprintln!(
        "v8 fixtures: {checked} values checked, {identical} byte-identical after the round \
         trip ({v8_identical} of {v8_total} V8 values); different:\n  {}",
        different.join("\n  ")
    );
    // 62 values + 45 keys + 18 special entries + 3 queue messages.
    assert_eq!(checked, 128);
    // Error and DataView in values, the two engine-written sums in special.
    assert_eq!(different.len(), 4, "{different:#?}");
}

/// A few renderings compared with what `Deno.inspect` printed (modulo its spacing).
#[test]
fn js_literals_of_fixture_values() {
    let by_name = |name: &str| -> KvValue {
        cases("values")
            .into_iter()
            .find(|c| c.label == format!("values [{{\"string\":\"v\"}},{{\"string\":\"{name}\"}}]"))
            .map(|c| c.value)
            .unwrap_or_else(|| panic!("no fixture value {name}"))
    };
    let js = |name: &str| to_js_literal(&by_name(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        js("cyclic"),
        r#"<ref *1> { name: "cyclic", self: [Circular *1] }"#
    );
    assert_eq!(
        js("shared refs"),
        "{ first: { shared: true }, second: { shared: true } }"
    );
    assert_eq!(js("array sparse"), "[1, <3 empty items>, 5]");
    assert_eq!(
        js("Map"),
        r#"new Map([["k", 1], [2, "two"], [3n, [3]], [true, null]])"#
    );
    assert_eq!(js("Set"), r#"new Set([1, "a", 2n, null])"#);
    assert_eq!(js("Date 2023"), "new Date(1700000000123)");
    assert_eq!(js("Date invalid"), "new Date(NaN)");
    assert_eq!(js("RegExp"), "/ab+c/gi");
    assert_eq!(js("Float64Array"), "new Float64Array([-0, NaN, 2.5])");
    assert_eq!(js("BigInt64Array"), "new BigInt64Array([-1n])");
    assert_eq!(
        js("DataView"),
        "new DataView(new Uint8Array([2, 3]).buffer)"
    );
    assert_eq!(js("ArrayBuffer"), "new Uint8Array([0, 1, 255]).buffer");
    assert_eq!(js("Error"), r#"new Error("boom")"#);
    assert_eq!(
        js("boxed primitives"),
        r#"[new String("s"), new Number(1), new Boolean(false), Object(7n)]"#
    );
    assert_eq!(
        js("object numeric keys"),
        r#"{ "1": "one", "2": "two", b: "b", a: "a" }"#
    );
    assert_eq!(js("KvU64 nested"), "{ u: { value: 5n } }");
    assert_eq!(js("KvU64 max"), "new Deno.KvU64(18446744073709551615n)");
    assert_eq!(js("Uint8Array"), "new Uint8Array([1, 2, 3])");
    assert_eq!(js("string with NUL"), r#""a\0b""#);
    assert_eq!(js("number -0"), "-0");
    assert_eq!(js("undefined"), "undefined");
}

/// Plain JSON of fixture values, as `JSON.stringify` (plus this crate's bigint rule) gives it.
#[test]
fn plain_json_of_fixture_values() {
    let json_of = |name: &str| -> Value {
        let case = cases("values")
            .into_iter()
            .find(|c| c.label == format!("values [{{\"string\":\"v\"}},{{\"string\":\"{name}\"}}]"))
            .unwrap_or_else(|| panic!("no fixture value {name}"));
        to_json(&case.value).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    use serde_json::json;
    assert_eq!(
        json_of("object nested"),
        json!({"a": {"b": {"c": {"d": "deep"}}}, "list": [{"x": 1}]})
    );
    assert_eq!(
        json_of("array mixed"),
        json!([1, "two", 3, null, null, true, {"six": 6}])
    );
    assert_eq!(json_of("array sparse"), json!([1, null, null, null, 5]));
    assert_eq!(json_of("Date 2023"), json!("2023-11-14T22:13:20.123Z"));
    assert_eq!(json_of("Date invalid"), json!(null));
    assert_eq!(json_of("number NaN"), json!(null));
    assert_eq!(json_of("number -0"), json!(0));
    assert_eq!(json_of("bigint 2^64"), json!("18446744073709551616"));
    assert_eq!(json_of("KvU64 max"), json!(u64::MAX));
    assert_eq!(json_of("KvU64 nested"), json!({"u": {"value": 5}}));
    assert_eq!(json_of("Map"), json!({}));
    assert_eq!(json_of("Uint8Array"), json!({"0": 1, "1": 2, "2": 3}));
    assert_eq!(
        json_of("shared refs"),
        json!({"first": {"shared": true}, "second": {"shared": true}})
    );
    assert_eq!(json_of("boxed primitives"), json!(["s", 1, false, 7]));
    assert_eq!(json_of("undefined"), json!(null));
    // Key order is kept.
    assert_eq!(
        json_of("object numeric keys").to_string(),
        r#"{"1":"one","2":"two","b":"b","a":"a"}"#
    );
}

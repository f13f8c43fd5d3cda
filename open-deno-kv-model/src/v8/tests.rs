//! Tests of the whole module: byte layouts, round trips, errors, and properties.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::json::number_json;
use super::number::number_repr;
use super::*;

fn v8(kv: &KvValue) -> String {
    match kv {
        KvValue::V8(bytes) => hex::encode(bytes),
        other => panic!("not a V8 value: {other:?}"),
    }
}

fn tagged_bytes(json: Value) -> String {
    v8(&from_tagged_json(&json).unwrap())
}

fn round_trip(json: &Value) {
    let value = from_tagged_json(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    let again = to_tagged_json(&value).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(&again, json);
    // The bytes are a fixed point too.
    assert_eq!(from_tagged_json(&again).unwrap(), value);
}

// ---- byte layout -------------------------------------------------------------------------

#[test]
fn numbers_are_smis_or_doubles() {
    assert_eq!(tagged_bytes(json!({"number": "42"})), "ff104954");
    assert_eq!(tagged_bytes(json!({"number": "-1"})), "ff104901");
    assert_eq!(
        tagged_bytes(json!({"number": "-0"})),
        "ff104e0000000000000080"
    );
    assert_eq!(
        tagged_bytes(json!({"number": "2147483647"})),
        "ff1049feffffff0f"
    );
    assert_eq!(
        tagged_bytes(json!({"number": "2147483648"})),
        "ff104e000000000000e041"
    );
    assert_eq!(
        tagged_bytes(json!({"number": "NaN"})),
        "ff104e000000000000f87f"
    );
    // An array of numbers with one non-Smi is all doubles, as a JavaScript literal's is.
    assert_eq!(
        tagged_bytes(json!({"array": [{"number": "1.5"}, {"number": "2"}]})),
        concat!(
            "ff104102",
            "4e000000000000f83f",
            "4e0000000000000040",
            "240002"
        )
    );
    assert_eq!(
        tagged_bytes(json!({"array": [{"number": "1"}, {"string": "a"}, {"number": "2.5"}]})),
        concat!("ff104103", "4902", "220161", "4e0000000000000440", "240003")
    );
}

#[test]
fn bigints_use_64_bit_digits() {
    assert_eq!(tagged_bytes(json!({"bigint": "0"})), "ff105a00");
    assert_eq!(
        tagged_bytes(json!({"bigint": "42"})),
        "ff105a102a00000000000000"
    );
    assert_eq!(
        tagged_bytes(json!({"bigint": "-42"})),
        "ff105a112a00000000000000"
    );
    assert_eq!(
        tagged_bytes(json!({"bigint": "18446744073709551616"})),
        "ff105a2000000000000000000100000000000000"
    );
    assert_eq!(
        tagged_bytes(json!({"boxed": {"bigint": "7"}})),
        "ff107a100700000000000000"
    );
}

#[test]
fn strings_are_latin1_or_aligned_utf16() {
    assert_eq!(
        tagged_bytes(json!({"string": "café ÿ"})),
        "ff102206636166e920ff"
    );
    // Header (2 bytes) + tag + length = 4: even, no padding.
    assert_eq!(
        tagged_bytes(json!({"string": "中文 😀"})),
        "ff10630a2d4e876520003dd800de"
    );
    // After `ff 10 6f 22 02 61 62` the UTF-16 data would start at an odd offset: one padding
    // byte first.
    assert_eq!(
        tagged_bytes(json!({"object": [["ab", {"string": "é中"}]]})),
        concat!("ff106f22026162", "00", "6304e9002d4e", "7b01")
    );
}

#[test]
fn index_keys_are_numbers() {
    // Deno's bytes for { 1: "one", 2: "two", b: "b", a: "a" }.
    assert_eq!(
        tagged_bytes(json!({"object": [
            ["1", {"string": "one"}], ["2", {"string": "two"}],
            ["b", {"string": "b"}], ["a", {"string": "a"}],
        ]})),
        "ff106f490222036f6e654904220374776f2201622201622201612201617b04"
    );
    // Beyond the Smi range an index key is a double; "01" and 2^32 - 1 are not indices.
    assert_eq!(
        tagged_bytes(json!({"object": [
            ["4294967294", {"null": null}], ["01", {"null": null}], ["4294967295", {"null": null}],
        ]})),
        concat!(
            "ff106f",
            "4e0000c0ffffffef4130",
            "2202303130",
            "220a3432393439363732393530",
            "7b03"
        )
    );
}

#[test]
fn objects_refs_and_views() {
    // Deno's bytes for the fixtures' cyclic and shared values.
    assert_eq!(
        tagged_bytes(json!({"object": [["name", {"string": "cyclic"}], ["self", {"ref": "$"}]]})),
        "ff106f22046e616d6522066379636c6963220473656c665e007b02"
    );
    // A typed array's buffer takes an id (1) before the view (2).
    assert_eq!(
        tagged_bytes(json!({"array": [
            {"view": {"type": "Int8Array", "bytes": "ff"}},
            {"ref": "$[0]"},
        ]})),
        concat!("ff104102", "4201ff", "5662000100", "5e02", "240002")
    );
    assert_eq!(
        tagged_bytes(json!({"error": {"name": "TypeError", "message": "x"}})),
        concat!("ff1072", "54", "6d220178", "2e")
    );
    assert_eq!(
        tagged_bytes(json!({"error": {"name": "Error", "message": ""}})),
        "ff10722e"
    );
    assert_eq!(
        tagged_bytes(json!({"regexp": {"source": "a", "flags": "ydgimsu"}})),
        "ff1052220161bf01"
    );
}

// ---- round trips ---------------------------------------------------------------------------

#[test]
fn shared_and_circular_objects_round_trip() {
    let cases = [
        json!({"array": [{"object": []}, {"ref": "$[0]"}, {"ref": "$"}]}),
        json!({"map": [
            [{"object": []}, {"ref": "$<map 0 key>"}],
            [{"string": "me"}, {"ref": "$"}],
        ]}),
        json!({"set": [{"date": "0"}, {"array": [{"ref": "$<set 0>"}, {"ref": "$<set 1>"}]}]}),
        json!({"object": [
            ["d", {"date": "NaN"}], ["r", {"regexp": {"source": "x", "flags": "g"}}],
            ["b", {"arraybuffer": "00"}], ["v", {"view": {"type": "DataView", "bytes": "01"}}],
            ["e", {"error": {"name": "RangeError", "message": "m"}}],
            ["x", {"boxed": {"string": "s"}}],
            ["again", {"array": [
                {"ref": "$.d"}, {"ref": "$.r"}, {"ref": "$.b"}, {"ref": "$.v"}, {"ref": "$.e"},
                {"ref": "$.x"},
            ]}],
        ]}),
        json!({"array": [{"hole": null}, {"array": [{"hole": null}, {"ref": "$"}, {"hole": null}]}]}),
    ];
    for case in &cases {
        round_trip(case);
    }
    let inner_cycle = from_tagged_json(&cases[0]).unwrap();
    assert_eq!(
        to_js_literal(&inner_cycle).unwrap(),
        "<ref *1> [{}, {}, [Circular *1]]"
    );
}

#[test]
fn non_canonical_spellings_are_normalized() {
    let value = from_tagged_json(&json!({"array": [
        {"number": "1e21"}, {"number": "1.50"}, {"regexp": {"source": "a", "flags": "ig"}},
        {"arraybuffer": "FF"}, {"date": "1e3"},
    ]}))
    .unwrap();
    assert_eq!(
        to_tagged_json(&value).unwrap(),
        json!({"array": [
            {"number": "1e+21"}, {"number": "1.5"}, {"regexp": {"source": "a", "flags": "gi"}},
            {"arraybuffer": "ff"}, {"date": "1000"},
        ]})
    );
}

#[test]
fn maps_and_sets_hold_zero_not_minus_zero() {
    let value = from_tagged_json(&json!({"array": [
        {"map": [[{"number": "-0"}, {"number": "-0"}]]},
        {"set": [{"number": "-0"}]},
    ]}))
    .unwrap();
    assert_eq!(
        to_tagged_json(&value).unwrap(),
        json!({"array": [
            {"map": [[{"number": "0"}, {"number": "-0"}]]},
            {"set": [{"number": "0"}]},
        ]})
    );
    // V8 bytes with duplicate keys read as JavaScript holds them: first place, last value.
    let dup = concat!(
        "ff10",
        "3b",
        "4902",
        "4902",
        "4e0000000000000080",
        "4904",
        "4902",
        "4906",
        "3a06"
    );
    assert_eq!(
        to_tagged_json(&KvValue::V8(hex::decode(dup).unwrap().into())).unwrap(),
        json!({"map": [[{"number": "1"}, {"number": "3"}], [{"number": "0"}, {"number": "2"}]]})
    );
    let dup = concat!("ff10", "6f", "220161", "4902", "220161", "4904", "7b02");
    assert_eq!(
        to_tagged_json(&KvValue::V8(hex::decode(dup).unwrap().into())).unwrap(),
        json!({"object": [["a", {"number": "2"}]]})
    );
}

#[test]
fn top_level_special_encodings() {
    assert_eq!(
        from_tagged_json(&json!({"view": {"type": "Uint8Array", "bytes": "0102"}})).unwrap(),
        KvValue::Bytes(vec![1, 2].into())
    );
    assert_eq!(
        from_tagged_json(&json!({"u64": "18446744073709551615"})).unwrap(),
        KvValue::U64(u64::MAX)
    );
    // Any other top-level view is a V8 value; a nested Uint8Array too.
    assert!(matches!(
        from_tagged_json(&json!({"view": {"type": "Int8Array", "bytes": "01"}})).unwrap(),
        KvValue::V8(_)
    ));
    round_trip(&json!({"array": [{"view": {"type": "Uint8Array", "bytes": "0102"}}]}));
    // V8 bytes holding a top-level Uint8Array read as the same tagged JSON as Bytes.
    let v8_view = to_v8_bytes(&KvValue::Bytes(vec![1, 2].into())).unwrap();
    assert_eq!(
        to_tagged_json(&KvValue::V8(v8_view.into())).unwrap(),
        to_tagged_json(&KvValue::Bytes(vec![1, 2].into())).unwrap()
    );
}

#[test]
fn values_the_writer_never_makes_still_read() {
    // A dense array with an extra property, an error with a stack and a cause, a sparse array
    // with a non-index key (hand-written V8 bytes).
    let dense_extra = "ff104102490249042201784906240102"; // [1, 2] with x: 3
    let value = KvValue::V8(hex::decode(dense_extra).unwrap().into());
    assert_eq!(to_js_literal(&value).unwrap(), "[1, 2, x: 3]");
    assert_eq!(to_json(&value).unwrap(), json!([1, 2]));
    assert_eq!(
        to_tagged_json(&value).unwrap(),
        json!({"array": [{"number": "1"}, {"number": "2"}]})
    );
    let error = concat!("ff1072", "6d220161", "73220173", "636f7b00", "2e");
    let value = KvValue::V8(hex::decode(error).unwrap().into());
    assert_eq!(
        to_js_literal(&value).unwrap(),
        r#"new Error("a", { cause: {} })"#
    );
    assert_eq!(
        to_tagged_json(&value).unwrap(),
        json!({"error": {"name": "Error", "message": "a"}})
    );
    // Wire format 15 (as Deno's engine and older Deno releases write).
    assert_eq!(
        to_tagged_json(&KvValue::V8(crate::rules::v8_number(3.5).into())).unwrap(),
        json!({"number": "3.5"})
    );
}

#[test]
fn both_readers_agree_on_denos_bytes() {
    // The fixtures are the repository's (fixtures/deno-2.9.6), not this package's: the workspace's
    // .cargo/config.toml points KV_FIXTURES_DIR at them, so that nothing here reaches outside the
    // crate directory. Without it (a packaged open-deno-kv-model), the test fails saying so.
    let dir = std::path::PathBuf::from(std::env::var_os("KV_FIXTURES_DIR").unwrap_or_else(|| {
        panic!(
            "KV_FIXTURES_DIR is not set: point it at fixtures/deno-2.9.6 of the repository \
             (the workspace's .cargo/config.toml does)"
        )
    }));
    let mut compared = 0;
    for name in ["values", "keys", "special"] {
        let path = dir.join(format!("{name}.manifest.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (set KV_FIXTURES_DIR)", path.display()));
        let manifest: Value = serde_json::from_str(&text).unwrap();
        let entries = manifest["entries"].as_array().unwrap().iter();
        let queue = manifest["queue"].as_array().into_iter().flatten();
        for entry in entries.chain(queue) {
            let hex_bytes = match (entry.get("v8_hex"), entry.get("data_hex")) {
                (Some(Value::String(h)), _) | (_, Some(Value::String(h))) => h,
                _ => continue,
            };
            let bytes = hex::decode(hex_bytes).unwrap();
            let ours = tagged::graph_to_tagged(&read::read(&bytes).unwrap()).unwrap();
            let theirs = tagged::graph_to_tagged(&oracle::read(&bytes).unwrap()).unwrap();
            assert_eq!(ours, theirs, "{hex_bytes}");
            assert_eq!(ours, entry["value_json"], "{hex_bytes}");
            compared += 1;
        }
    }
    assert_eq!(compared, 118);
}

// ---- errors --------------------------------------------------------------------------------

fn err(json: Value) -> V8Error {
    match from_tagged_json(&json) {
        Ok(value) => panic!("{json} was accepted as {value:?}"),
        Err(e) => e,
    }
}

#[test]
fn malformed_tagged_json_is_refused_with_its_path() {
    let cases: Vec<(Value, &str)> = vec![
        (
            json!("x"),
            r#"$: expected a tagged value like {"string": "…"}, found "x""#,
        ),
        (
            json!({"string": "a", "number": "1"}),
            "$: expected a tagged value",
        ),
        (json!({"strung": "a"}), r#"$: unknown tag "strung""#),
        (
            json!({"array": [{"nope": null}]}),
            r#"$[0]: unknown tag "nope""#,
        ),
        (json!({"string": 1}), "$: bad string 1: expected a string"),
        (
            json!({"number": "1x"}),
            r#"$: bad number "1x": not a JavaScript number"#,
        ),
        (json!({"number": "inf"}), "not a JavaScript number"),
        (
            json!({"object": [["a", {"array": [{"null": null}, {"bigint": "1_0"}]}]]}),
            r#"$.a[1]: bad bigint "1_0": not a decimal integer"#,
        ),
        (json!({"u64": "-1"}), "bad u64"),
        (json!({"u64": "18446744073709551616"}), "out of the range"),
        (json!({"array": [{"u64": "1"}]}), "$[0]: bad u64"),
        (
            json!({"arraybuffer": "abc"}),
            "$: bad arraybuffer \"abc\": bad hex",
        ),
        (json!({"arraybuffer": "zz"}), "bad hex"),
        (
            json!({"view": {"type": "Float128Array", "bytes": ""}}),
            "unknown type \"Float128Array\"",
        ),
        (
            json!({"view": {"type": "Int32Array", "bytes": "0102"}}),
            "not a whole number of 4-byte elements",
        ),
        (
            json!({"view": {"type": "Int8Array"}}),
            "expected {\"type\": string, \"bytes\": string}",
        ),
        (
            json!({"error": {"name": "MyError", "message": ""}}),
            "not \"MyError\"",
        ),
        (
            json!({"regexp": {"source": "a", "flags": "gg"}}),
            "flag 'g' given twice",
        ),
        (
            json!({"regexp": {"source": "a", "flags": "x"}}),
            "unknown flag 'x'",
        ),
        (
            json!({"regexp": {"source": "a", "flags": "uv"}}),
            "cannot be combined",
        ),
        (json!({"date": "1.5"}), "whole number of milliseconds"),
        (json!({"date": "9e15"}), "whole number of milliseconds"),
        (json!({"date": "-0"}), "whole number of milliseconds"),
        (json!({"null": 0}), "$: bad null 0: expected null"),
        (
            json!({"hole": null}),
            "$: bad hole null: a hole can only be an element of an array",
        ),
        (
            json!({"object": [["a", {"null": null}], ["a", {"null": null}]]}),
            "duplicate key \"a\"",
        ),
        (json!({"object": [["a"]]}), "expected an entry"),
        (
            json!({"object": {"a": {"null": null}}}),
            "expected an array",
        ),
        (
            json!({"map": [[{"number": "0"}, {"null": null}], [{"number": "-0"}, {"null": null}]]}),
            "duplicate key",
        ),
        (
            json!({"set": [{"number": "NaN"}, {"number": "NaN"}]}),
            "duplicate element",
        ),
        (
            json!({"boxed": {"null": null}}),
            "only a string, number, bigint or bool can be boxed",
        ),
        (
            json!({"boxed": {"object": []}}),
            "only a string, number, bigint or bool can be boxed",
        ),
        (
            json!({"ref": "$"}),
            r#"$: bad ref "$": no object appears at this path earlier"#,
        ),
        (
            json!({"array": [{"ref": "$[1]"}, {"object": []}]}),
            "no object appears at this path earlier",
        ),
        (
            json!({"object": [["a", {"string": "s"}], ["b", {"ref": "$.a"}]]}),
            r#"$.b: bad ref "$.a": names a primitive"#,
        ),
        (
            json!({"object": [["a.b", {"object": []}], ["a", {"object": [["b", {"object": []}]]}], ["c", {"ref": "$.a.b"}]]}),
            "names more than one place",
        ),
    ];
    for (json, want) in cases {
        let e = err(json.clone());
        let text = e.to_string();
        assert!(text.contains(want), "{json}: got {text:?}, want {want:?}");
    }
}

#[test]
fn error_variants_carry_the_details() {
    assert_eq!(
        err(json!({"object": [["a", {"array": [{"bigint": "x"}]}]]})),
        V8Error::BadTagValue {
            path: "$.a[0]".to_owned(),
            tag: "bigint".to_owned(),
            found: "\"x\"".to_owned(),
            reason: "not a decimal integer".to_owned(),
        }
    );
    assert_eq!(
        err(json!({"map": [[{"string": "k"}, {"frob": 1}]]})),
        V8Error::UnknownTag {
            path: "$<map 0 value>".to_owned(),
            tag: "frob".to_owned()
        }
    );
    assert!(matches!(
        to_tagged_json(&KvValue::V8(vec![0xff, 0x10, b'Q'].into())),
        Err(V8Error::InvalidBytes { .. })
    ));
    assert!(matches!(
        to_json(&KvValue::V8(vec![].into())),
        Err(V8Error::InvalidBytes { .. })
    ));
    assert!(matches!(
        to_js_literal(&KvValue::V8(vec![0xff, 0x09, b'T'].into())),
        Err(V8Error::InvalidBytes { .. })
    ));
}

fn nested_arrays(levels: usize) -> Value {
    let mut json = json!([]);
    for _ in 1..levels {
        json = Value::Array(vec![json]);
    }
    json
}

#[test]
fn nesting_limit() {
    // 257 nested arrays: depths 0 ..= 256, the deepest the V8 reader accepts.
    let deepest = from_json(&nested_arrays(257)).unwrap();
    let tagged = to_tagged_json(&deepest).unwrap();
    assert_eq!(from_tagged_json(&tagged).unwrap(), deepest);
    assert_eq!(to_json(&deepest).unwrap(), nested_arrays(257));
    assert!(to_js_literal(&deepest).unwrap().starts_with("[[[[["));
    assert!(matches!(
        from_json(&nested_arrays(258)),
        Err(V8Error::TooDeep { limit: 256, .. })
    ));
    // V8 bytes nested one level deeper are refused too, not read with a risk to the stack.
    let bytes = hex::decode(format!(
        "ff10{}4100240000{}",
        "4101".repeat(257),
        "240001".repeat(257)
    ))
    .unwrap();
    let err = to_tagged_json(&KvValue::V8(bytes.into())).unwrap_err();
    assert!(
        err.to_string().contains("nested deeper than 256 levels"),
        "{err}"
    );
    let mut too_deep = json!({"array": []});
    for _ in 0..257 {
        too_deep = json!({"array": [too_deep]});
    }
    assert!(matches!(
        from_tagged_json(&too_deep),
        Err(V8Error::TooDeep { .. })
    ));
}

#[test]
fn huge_sparse_arrays_are_refused_not_listed() {
    // A sparse array of length 2^32 - 1 holding nothing: 13 bytes.
    let bytes = hex::decode("ff1061ffffffff0f4000ffffffff0f").unwrap();
    let value = KvValue::V8(bytes.into());
    assert!(matches!(
        to_tagged_json(&value),
        Err(V8Error::TooLarge { .. })
    ));
    assert!(matches!(to_json(&value), Err(V8Error::TooLarge { .. })));
    assert_eq!(to_js_literal(&value).unwrap(), "[<4294967295 empty items>]");
}

#[test]
fn exponential_sharing_is_bounded() {
    // Each level holds the one below twice: 2^40 values once expanded.
    let levels = 40;
    let mut json = json!({"array": []});
    for k in 1..=levels {
        let below = format!("${}", "[0]".repeat(levels - k + 1));
        json = json!({"array": [json, {"ref": below}]});
    }
    round_trip(&json);
    let value = from_tagged_json(&json).unwrap();
    assert!(matches!(to_json(&value), Err(V8Error::TooLarge { .. })));
    assert!(matches!(
        to_js_literal(&value),
        Err(V8Error::TooLarge { .. })
    ));
}

// ---- plain JSON and serde ------------------------------------------------------------------

#[test]
fn plain_json_mapping() {
    let value = from_tagged_json(&json!({"object": [
        ["u", {"undefined": null}],
        ["arr", {"array": [{"undefined": null}, {"hole": null}, {"number": "-Infinity"}]}],
        ["big", {"bigint": "-9223372036854775808"}],
        ["huge", {"bigint": "-9223372036854775809"}],
        ["boxed", {"boxed": {"number": "1.5"}}],
        ["re", {"regexp": {"source": "a", "flags": ""}}],
        ["err", {"error": {"name": "Error", "message": "m"}}],
        ["buf", {"arraybuffer": "00"}],
        ["f64", {"view": {"type": "Float64Array", "bytes": "000000000000f87f"}}],
        ["i64", {"view": {"type": "BigInt64Array", "bytes": "ffffffffffffffff"}}],
        ["dv", {"view": {"type": "DataView", "bytes": "01"}}],
        ["date", {"date": "-62198755200000"}],
    ]}))
    .unwrap();
    assert_eq!(
        to_json(&value).unwrap().to_string(),
        json!({
            "arr": [null, null, null], "big": i64::MIN, "huge": "-9223372036854775809",
            "boxed": 1.5, "re": {}, "err": {}, "buf": {}, "f64": {"0": null}, "i64": {"0": -1},
            "dv": {}, "date": "-000001-01-01T00:00:00.000Z",
        })
        .to_string()
    );
    assert_eq!(
        to_json(&from_tagged_json(&json!({"undefined": null})).unwrap()).unwrap(),
        Value::Null
    );
    let cycle = from_tagged_json(&json!({"object": [["a", {"array": [{"ref": "$"}]}]]})).unwrap();
    assert_eq!(
        to_json(&cycle),
        Err(V8Error::Circular {
            path: "$.a[0]".to_owned(),
            target: "$".to_owned()
        })
    );
    // A cycle through a Map is not followed, so it is no error.
    let through_map =
        from_tagged_json(&json!({"object": [["m", {"map": [[{"ref": "$"}, {"null": null}]]}]]}))
            .unwrap();
    assert_eq!(to_json(&through_map).unwrap(), json!({"m": {}}));
}

#[test]
fn from_json_keeps_key_order_and_numbers() {
    let json: Value =
        serde_json::from_str(r#"{"z": 1, "a": [1.5, -0.0, 1e300], "m": null}"#).unwrap();
    let value = from_json(&json).unwrap();
    assert_eq!(
        to_js_literal(&value).unwrap(),
        "{ z: 1, a: [1.5, -0, 1e+300], m: null }"
    );
    assert_eq!(
        to_json(&value).unwrap().to_string(),
        r#"{"z":1,"a":[1.5,0,1e+300],"m":null}"#
    );
    // Integers beyond 2^53 are JavaScript numbers: they lose precision.
    let big = from_json(&json!(u64::MAX)).unwrap();
    assert_eq!(
        to_tagged_json(&big).unwrap(),
        json!({"number": "18446744073709552000"})
    );
}

#[test]
fn serde_round_trips() {
    use std::collections::BTreeMap;

    #[derive(::serde::Serialize, ::serde::Deserialize, Debug, PartialEq)]
    enum Kind {
        A,
        B { x: i32 },
    }
    #[derive(::serde::Serialize, ::serde::Deserialize, Debug, PartialEq)]
    struct Doc {
        id: u64,
        name: Option<String>,
        kinds: Vec<Kind>,
        scores: BTreeMap<String, f64>,
        missing: Option<u8>,
    }
    let doc = Doc {
        id: 1 << 40,
        name: Some("n".to_owned()),
        kinds: vec![Kind::A, Kind::B { x: -3 }],
        scores: BTreeMap::from([("a".to_owned(), 0.5)]),
        missing: None,
    };
    let value = to_v8(&doc).unwrap();
    assert_eq!(
        to_js_literal(&value).unwrap(),
        r#"{ id: 1099511627776, name: "n", kinds: ["A", { B: { x: -3 } }], scores: { a: 0.5 }, missing: null }"#
    );
    assert_eq!(from_v8::<Doc>(&value).unwrap(), doc);
    // Deno's kinds of integers all deserialize into Rust integers.
    for stored in [
        KvValue::U64(9),
        from_tagged_json(&json!({"bigint": "9"})).unwrap(),
        from_tagged_json(&json!({"number": "9"})).unwrap(),
        from_tagged_json(&json!({"boxed": {"number": "9"}})).unwrap(),
    ] {
        assert_eq!(from_v8::<u8>(&stored).unwrap(), 9);
    }
    // An object without the property reads as None.
    let partial = from_json(&json!({"id": 1, "kinds": [], "scores": {}})).unwrap();
    assert_eq!(from_v8::<Doc>(&partial).unwrap().name, None);
    assert!(matches!(
        from_v8::<Doc>(&KvValue::U64(1)),
        Err(V8Error::Serde(_))
    ));
}

// ---- properties ----------------------------------------------------------------------------

fn tag(name: &str, content: Value) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(name.to_owned(), content);
    Value::Object(map)
}

fn arb_number() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(-0.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        any::<i32>().prop_map(f64::from),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|n| n as f64),
    ]
}

fn arb_primitive() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<String>().prop_map(|s| tag("string", Value::String(s))),
        arb_number().prop_map(|x| tag("number", Value::String(number_repr(x)))),
        any::<i128>().prop_map(|n| tag("bigint", Value::String(n.to_string()))),
        any::<bool>().prop_map(|b| tag("bool", Value::Bool(b))),
        Just(tag("null", Value::Null)),
        Just(tag("undefined", Value::Null)),
    ]
}

fn arb_leaf_object() -> impl Strategy<Value = Value> {
    let flags = proptest::sample::subsequence(vec!['d', 'g', 'i', 'm', 's', 'u', 'y'], 0..=7);
    prop_oneof![
        prop_oneof![
            Just(f64::NAN),
            (-8_640_000_000_000_000i64..=8_640_000_000_000_000).prop_map(|n| n as f64)
        ]
        .prop_map(|ms| tag("date", Value::String(number_repr(ms)))),
        (any::<String>(), flags).prop_map(|(source, flags)| tag(
            "regexp",
            json!({"source": source, "flags": flags.into_iter().collect::<String>()})
        )),
        prop::collection::vec(any::<u8>(), 0..16)
            .prop_map(|b| tag("arraybuffer", Value::String(hex::encode(b)))),
        (0usize..13, prop::collection::vec(any::<[u8; 8]>(), 0..4)).prop_map(|(k, chunks)| {
            let kind = graph::ViewKind::ALL[k];
            let bytes: Vec<u8> = chunks.concat();
            let len = bytes.len() / kind.width() * kind.width();
            tag(
                "view",
                json!({"type": kind.name(), "bytes": hex::encode(&bytes[..len])}),
            )
        }),
        (0usize..7, any::<String>()).prop_map(|(k, message)| tag(
            "error",
            json!({"name": graph::ErrorKind::ALL[k].name(), "message": message})
        )),
        arb_primitive()
            .prop_filter("boxable", |p| p.get("null").is_none()
                && p.get("undefined").is_none())
            .prop_map(|p| tag("boxed", p)),
    ]
}

/// A primitive's identity under SameValueZero, for keeping map keys and set elements unique
/// (`None` for objects, which are always distinct).
fn same_value_zero(tagged: &Value) -> Option<String> {
    let (k, v) = tagged.as_object()?.iter().next()?;
    let v = match (k.as_str(), v.as_str()) {
        // -0 and 0 are the same key; NaN is one key.
        ("number", Some(text)) => {
            let x = super::number::parse_number(text)?;
            number_repr(x + 0.0)
        }
        _ => v.to_string(),
    };
    match k.as_str() {
        "string" | "number" | "bigint" | "bool" | "null" | "undefined" => Some(format!("{k}:{v}")),
        _ => None,
    }
}

/// `{"number": "-0"}` as `{"number": "0"}`: a Map key or Set element -0 is 0 in JavaScript.
fn positive_zero(tagged: Value) -> Value {
    if tagged == json!({"number": "-0"}) {
        json!({"number": "0"})
    } else {
        tagged
    }
}

fn arb_tagged() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![3 => arb_primitive(), 1 => arb_leaf_object()];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(
                prop_oneof![4 => inner.clone(), 1 => Just(tag("hole", Value::Null))],
                0..6
            )
            .prop_map(|items| tag("array", Value::Array(items))),
            prop::collection::vec((any::<String>(), inner.clone()), 0..6).prop_map(|entries| {
                let mut seen = std::collections::HashSet::new();
                let entries = entries
                    .into_iter()
                    .filter(|(k, _)| seen.insert(k.clone()))
                    .map(|(k, v)| json!([k, v]))
                    .collect();
                tag("object", Value::Array(entries))
            }),
            prop::collection::vec((inner.clone(), inner.clone()), 0..5).prop_map(|entries| {
                let mut seen = std::collections::HashSet::new();
                let entries = entries
                    .into_iter()
                    .map(|(k, v)| (positive_zero(k), v))
                    .filter(|(k, _)| same_value_zero(k).is_none_or(|id| seen.insert(id)))
                    .map(|(k, v)| json!([k, v]))
                    .collect();
                tag("map", Value::Array(entries))
            }),
            prop::collection::vec(inner, 0..5).prop_map(|values| {
                let mut seen = std::collections::HashSet::new();
                let values = values
                    .into_iter()
                    .map(positive_zero)
                    .filter(|v| same_value_zero(v).is_none_or(|id| seen.insert(id)))
                    .collect();
                tag("set", Value::Array(values))
            }),
        ]
    })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Every number as the f64 JavaScript holds, written as `to_json` writes it.
fn as_f64_numbers(json: &Value) -> Value {
    match json {
        Value::Number(n) => number_json(n.as_f64().unwrap_or(f64::NAN)),
        Value::Array(items) => Value::Array(items.iter().map(as_f64_numbers).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), as_f64_numbers(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether `bytes` hold five bytes in a row with the continuation bit set: where a varint may run
/// past the five bytes a 32-bit one needs.
fn has_overlong_varint(bytes: &[u8]) -> bool {
    bytes.windows(5).any(|w| w.iter().all(|b| b & 0x80 != 0))
}

/// V8's `ValueDeserializer` reads a varint on while its bytes have the continuation bit set,
/// dropping the bits beyond the integer's width; so does this reader. `v8_valueserializer` 0.1
/// (the test oracle) stops a 32-bit varint after five bytes whatever the fifth says, and reads the
/// rest as the next tag. Such bytes are never written (a 32-bit varint takes at most five), only
/// damaged ones hold them: found by `damaged_values_never_panic`, where one damaged byte turned a
/// number's varint into six bytes that swallowed the tag of a regular expression.
#[test]
fn a_varint_longer_than_five_bytes_reads_on_as_v8_does() {
    // A dense array of two int32s, the first one's varint six bytes long (the bits of the sixth
    // are beyond 32 and dropped): [0, 2].
    let bytes = hex::decode("ff0f4102498080808080024904240002").expect("hex");
    let ours = read::read(&bytes).expect("our reader reads all six");
    let ours = tagged::graph_to_tagged(&ours).expect("tagged");
    assert_eq!(ours, json!({"array": [{"number": "0"}, {"number": "2"}]}));
    // The oracle stops after five bytes and takes the sixth for the next element's tag.
    let theirs = oracle::read(&bytes).map(|g| tagged::graph_to_tagged(&g).ok());
    assert_ne!(theirs, Some(Some(ours)));
    assert!(has_overlong_varint(&bytes));
}

proptest! {
    #[test]
    fn tagged_trees_round_trip(json in prop_oneof![
        8 => arb_tagged(),
        1 => any::<u64>().prop_map(|n| tag("u64", Value::String(n.to_string()))),
    ]) {
        let value = from_tagged_json(&json).map_err(|e| TestCaseError::fail(format!("{json}: {e}")))?;
        let again = to_tagged_json(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&again, &json);
        prop_assert_eq!(from_tagged_json(&again).map_err(|e| TestCaseError::fail(e.to_string()))?, value.clone());
        // The other renderings never fail on these (no cycles, small).
        to_json(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        to_js_literal(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }

    #[test]
    fn tagged_trees_with_refs_round_trip(inner in arb_tagged()) {
        // Wrap a random value so that it is shared, referred to from inside, and circular.
        let json = tag("array", json!([
            tag("object", json!([["v", inner], ["again", {"ref": "$[0]"}]])),
            {"ref": "$[0]"},
            tag("map", json!([[{"ref": "$"}, {"ref": "$[0]"}]])),
        ]));
        let value = from_tagged_json(&json).map_err(|e| TestCaseError::fail(format!("{json}: {e}")))?;
        prop_assert_eq!(to_tagged_json(&value).map_err(|e| TestCaseError::fail(e.to_string()))?, json);
        to_js_literal(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    }

    #[test]
    fn plain_json_round_trips(json in arb_json()) {
        let value = from_json(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = to_json(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Same structure and key order, numbers as the f64 JavaScript holds.
        prop_assert_eq!(as_f64_numbers(&back).to_string(), as_f64_numbers(&json).to_string());
        // And what comes back is a fixed point.
        prop_assert_eq!(
            from_json(&back).map_err(|e| TestCaseError::fail(e.to_string()))?,
            from_json(&as_f64_numbers(&json)).map_err(|e| TestCaseError::fail(e.to_string()))?
        );
    }

    #[test]
    fn agrees_with_v8_valueserializer(json in arb_tagged()) {
        // The crate does not know Float16Array.
        prop_assume!(!json.to_string().contains("Float16Array"));
        if let KvValue::V8(bytes) = from_tagged_json(&json).map_err(|e| TestCaseError::fail(e.to_string()))? {
            let ours = read::read(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let theirs = oracle::read(&bytes)
                .ok_or_else(|| TestCaseError::fail(format!("v8_valueserializer refused {}", hex::encode(&bytes))))?;
            prop_assert_eq!(
                tagged::graph_to_tagged(&ours).map_err(|e| TestCaseError::fail(e.to_string()))?,
                tagged::graph_to_tagged(&theirs).map_err(|e| TestCaseError::fail(e.to_string()))?
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..48), header in any::<bool>()) {
        let mut bytes = if header { vec![0xff, 0x10] } else { Vec::new() };
        bytes.extend(tail);
        let value = KvValue::V8(bytes.into());
        let _ = to_tagged_json(&value);
        let _ = to_json(&value);
        let _ = to_js_literal(&value);
    }

    #[test]
    fn damaged_values_never_panic(json in arb_tagged(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        if let Ok(KvValue::V8(stored)) = from_tagged_json(&json) {
            let mut bytes = stored.to_vec();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            // Where both readers accept the damaged bytes, they read the same value, unless the
            // damage made a varint longer than five bytes, which they read differently (see
            // `a_varint_longer_than_five_bytes_reads_on_as_v8_does`).
            if !has_overlong_varint(&bytes)
                && let (Ok(ours), Some(theirs)) = (read::read(&bytes), oracle::read(&bytes))
                && let (Ok(a), Ok(b)) =
                    (tagged::graph_to_tagged(&ours), tagged::graph_to_tagged(&theirs))
            {
                prop_assert_eq!(a, b);
            }
            let value = KvValue::V8(bytes.into());
            if let Ok(tagged) = to_tagged_json(&value) {
                // Whatever reads back is itself a value that round-trips.
                let again = from_tagged_json(&tagged).map_err(|e| TestCaseError::fail(format!("{tagged}: {e}")))?;
                prop_assert_eq!(to_tagged_json(&again).map_err(|e| TestCaseError::fail(e.to_string()))?, tagged);
            }
            let _ = to_json(&value);
            let _ = to_js_literal(&value);
        }
    }
}

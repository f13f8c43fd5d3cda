//! Checks open-deno-kv-model against bytes written by the real Deno 2.9.6 (`fixtures/deno-2.9.6`
//! in the repository; `KV_FIXTURES_DIR` overrides the location).
//!
//! - every key vector: typed key → exact bytes, bytes → typed key, and `Ord` gives the file's
//!   (byte) order;
//! - every rejected key is rejected with Deno's text;
//! - every manifest entry: its key bytes decode to its typed key, its value bytes decode with its
//!   encoding, its versionstamp is built from `version`/`seq`;
//! - the values Deno's engine computed for V8 sums are reproduced byte for byte.

use std::path::PathBuf;

use open_deno_kv_model::rules::{v8_bigint, v8_number};
use open_deno_kv_model::{
    AtomicWrite, Key, KeyPart, KvValue, Limits, Mutation, Versionstamp, decode_key, encode_key,
    num_bigint::BigInt,
};
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("KV_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deno-2.9.6"),
    };
    assert!(
        dir.join("key_vectors.jsonl").is_file(),
        "Deno fixtures not found at {} (they are committed under fixtures/deno-2.9.6; or set KV_FIXTURES_DIR)",
        dir.display()
    );
    dir
}

fn read_text(name: &str) -> String {
    let path = fixtures_dir().join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Parses a line of JSON written by JavaScript. A lone UTF-16 surrogate (valid in a JS string,
/// impossible in a Rust one) is replaced by U+FFFD, which is what Deno stores for it anyway.
fn parse_js_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        let mut fixed = text.to_owned();
        for hi in 0xd800u32..=0xdfff {
            fixed = fixed.replace(&format!("\\u{hi:04x}"), "\\ufffd");
        }
        serde_json::from_str(&fixed).unwrap_or_else(|e| panic!("bad JSON {text}: {e}"))
    })
}

/// A key in the manifests' typed form: `[{"string": s} | {"int": "n"} | {"float": r, "bits": hex}
/// | {"bool": b} | {"bytes": hex}, ...]`.
fn typed_key(json: &Value) -> Key {
    let parts = json.as_array().expect("a key is an array");
    parts.iter().map(typed_part).collect()
}

fn typed_part(part: &Value) -> KeyPart {
    let obj = part.as_object().expect("a key part is an object");
    if let Some(s) = obj.get("string") {
        KeyPart::String(s.as_str().expect("string").to_owned())
    } else if let Some(n) = obj.get("int") {
        KeyPart::Int(
            n.as_str()
                .expect("decimal")
                .parse::<BigInt>()
                .expect("bigint"),
        )
    } else if let Some(bits) = obj.get("bits") {
        let bits = u64::from_str_radix(bits.as_str().expect("hex"), 16).expect("bits");
        KeyPart::Float(f64::from_bits(bits))
    } else if let Some(b) = obj.get("bool") {
        KeyPart::Bool(b.as_bool().expect("bool"))
    } else if let Some(h) = obj.get("bytes") {
        KeyPart::Bytes(hex::decode(h.as_str().expect("hex")).expect("hex bytes"))
    } else if let Some(len) = obj.get("bytes_len") {
        let fill = hex::decode(obj["fill"].as_str().expect("fill")).expect("fill hex");
        let len = usize::try_from(len.as_u64().expect("len")).expect("len");
        KeyPart::Bytes(fill.repeat(len))
    } else {
        panic!("unknown key part {part}")
    }
}

/// JavaScript cannot tell NaNs apart: it reads every NaN key part as plain `NaN`. Rust keeps the
/// sign of a negative NaN, so compare as JavaScript sees the key.
fn as_javascript_sees_it(key: &Key) -> Key {
    key.parts()
        .iter()
        .map(|p| match p {
            KeyPart::Float(x) if x.is_nan() => KeyPart::Float(f64::NAN),
            other => other.clone(),
        })
        .collect()
}

#[test]
fn key_vectors_encode_decode_and_order() {
    let text = read_text("key_vectors.jsonl");
    let vectors: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(parse_js_json)
        .collect();
    assert_eq!(vectors.len(), 203, "the README promises 203 vectors");

    let mut decoded_keys = Vec::new();
    let mut previous_hex: Option<Vec<u8>> = None;
    for (i, vector) in vectors.iter().enumerate() {
        assert_eq!(
            vector["order"].as_u64(),
            Some(i as u64),
            "file is in byte order"
        );
        let bytes = hex::decode(vector["hex"].as_str().expect("hex")).expect("hex");
        let read_back = typed_key(&vector["key"]);

        // bytes → key
        let decoded = decode_key(&bytes).unwrap_or_else(|e| panic!("vector {i}: {e}"));
        assert_eq!(
            as_javascript_sees_it(&decoded),
            read_back,
            "vector {i} decodes"
        );
        assert_eq!(
            encode_key(&decoded).unwrap(),
            bytes,
            "vector {i} re-encodes"
        );

        // key → bytes, from the key as written where it differs (a NaN payload, a view type)
        let written = vector
            .get("input_key")
            .map(typed_key)
            .unwrap_or_else(|| read_back.clone());
        assert_eq!(
            hex::encode(encode_key(&written).unwrap()),
            hex::encode(&bytes),
            "vector {i} encodes"
        );

        if let Some(prev) = &previous_hex {
            assert!(
                prev < &bytes,
                "vector {i} bytes sort after the previous vector"
            );
        }
        previous_hex = Some(bytes);
        decoded_keys.push(decoded);
    }

    let mut sorted = decoded_keys.clone();
    sorted.sort();
    assert_eq!(
        sorted, decoded_keys,
        "Ord on keys gives the stored byte order"
    );
}

#[test]
fn rejected_keys_are_rejected_with_denos_text() {
    let doc = parse_js_json(&read_text("key_vectors_rejected.json"));
    let rejected = doc["rejected"].as_array().expect("rejected list");
    assert!(!rejected.is_empty());
    for case in rejected {
        let key = typed_key(&case["input_key"]);
        let deno_error = case["error"].as_str().expect("error text");
        let ours = match encode_key(&key) {
            Err(e) => e.to_string(),
            Ok(bytes) => {
                let write = AtomicWrite {
                    mutations: vec![Mutation::set(bytes, KvValue::U64(1))],
                    ..Default::default()
                };
                Limits::deno()
                    .validate_atomic_write(&write, chrono::Utc::now())
                    .expect_err("Deno rejected this key")
                    .to_string()
            }
        };
        assert!(
            deno_error.ends_with(&ours),
            "Deno said {deno_error:?}, we said {ours:?}"
        );
    }
}

/// A whole number the manifests write either as a JSON number or as a decimal string (for values
/// beyond 2^53).
fn number_field<T: std::str::FromStr>(value: &Value) -> T {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.parse()
        .unwrap_or_else(|_| panic!("not a whole number: {value}"))
}

fn manifest(name: &str) -> Value {
    parse_js_json(&read_text(&format!("{name}.manifest.json")))
}

#[test]
fn manifest_entries_decode() {
    let mut checked = 0;
    for name in ["keys", "values", "special"] {
        let doc = manifest(name);
        for entry in doc["entries"].as_array().expect("entries") {
            let key_bytes = hex::decode(entry["key_hex"].as_str().expect("key_hex")).expect("hex");
            let key = decode_key(&key_bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                as_javascript_sees_it(&key),
                typed_key(&entry["key"]),
                "{name}: key"
            );

            let encoding: i64 = number_field(&entry["v_encoding"]);
            let raw = hex::decode(entry["value_hex"].as_str().expect("value_hex")).expect("hex");
            let value = KvValue::decode(raw.clone(), encoding)
                .unwrap_or_else(|e| panic!("{name} {key}: {e}"));
            assert_eq!(
                value.encoding().name(),
                entry["encoding"].as_str().expect("encoding")
            );
            match &value {
                KvValue::U64(n) => assert_eq!(*n, number_field::<u64>(&entry["u64"])),
                KvValue::Bytes(b) => assert_eq!(
                    hex::encode(b),
                    entry["bytes_hex"].as_str().expect("bytes_hex")
                ),
                KvValue::V8(b) => assert_eq!(b, &raw),
            }
            assert_eq!(value.encode().0, raw, "{name} {key}: value re-encodes");

            let version: u64 = number_field(&entry["version"]);
            let seq: u16 = number_field(&entry["seq"]);
            let stamp = Versionstamp::from_version(version, seq);
            assert_eq!(
                stamp.to_string(),
                entry["versionstamp"].as_str().expect("versionstamp")
            );
            assert_eq!(
                entry["versionstamp"]
                    .as_str()
                    .expect("vs")
                    .parse::<Versionstamp>()
                    .unwrap(),
                stamp
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 45 + 62 + 18);
}

#[test]
fn engine_computed_sums_match_denos_bytes() {
    let doc = manifest("special");
    let mut found = 0;
    for entry in doc["entries"].as_array().expect("entries") {
        let note = entry.get("note").and_then(Value::as_str).unwrap_or("");
        let raw = hex::decode(entry["value_hex"].as_str().expect("value_hex")).expect("hex");
        let expected = if note.starts_with("V8 number sum") {
            let repr = entry["value_json"]["number"].as_str().expect("number");
            v8_number(repr.parse().expect("f64"))
        } else if note.starts_with("V8 bigint sum") {
            let repr = entry["value_json"]["bigint"].as_str().expect("bigint");
            v8_bigint(&repr.parse::<BigInt>().expect("bigint")).unwrap()
        } else {
            continue;
        };
        assert_eq!(hex::encode(expected), hex::encode(raw), "{note}");
        found += 1;
    }
    assert_eq!(
        found, 2,
        "one number sum and one bigint sum in special.manifest.json"
    );
}

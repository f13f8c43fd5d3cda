//! Keys as people type them, and as files carry them.
//!
//! - **JavaScript-like literals** on the command line: `'["users", 42n, true]'`. As in
//!   JavaScript, a plain number is a float (`42`, `1.5`, `-0`, `NaN`, `Infinity`) and `42n` is
//!   a bigint. Strings take double or single quotes with JavaScript's escapes (`\n`, `\t`, `\0`,
//!   `\xHH`, `\uHHHH`, `\u{H…}`). Bytes are `new Uint8Array([1, 2])` or the short hex form
//!   `b"0102"` that `kv` prints. What `kv` prints for a key parses back to the same key.
//! - **The typed JSON form** of the fixtures' manifests and of `kv dump`: a list of
//!   `{"string": s}`, `{"int": "<decimal>"}`, `{"float": "<repr>", "bits": "<hex>"}`,
//!   `{"bool": b}`, `{"bytes": "<hex>"}`. A float's `bits` (IEEE-754, big-endian hex) are
//!   authoritative when present, so NaN payloads and `-0` survive.

use open_deno_kv_model::num_bigint::BigInt;
use open_deno_kv_model::{Key, KeyError, KeyPart};
use serde_json::{Value as Json, json};

use crate::error::CliError;

/// Parses a key given on the command line: a JavaScript-like literal (`["a", 1n]`) or, if it
/// starts with `[{`, the typed JSON form.
pub fn parse_key(text: &str) -> Result<Key, CliError> {
    let trimmed = text.trim();
    if trimmed.starts_with("[{") {
        let json: Json = serde_json::from_str(trimmed).map_err(|err| CliError::BadKey {
            input: text.to_owned(),
            reason: format!("not valid typed JSON: {err}"),
        })?;
        return key_from_typed_json(&json);
    }
    open_deno_kv_model::parse_key_literal(text).map_err(|err| CliError::BadKey {
        input: text.to_owned(),
        reason: match err {
            KeyError::Literal { reason } => reason,
            other => other.to_string(),
        },
    })
}

/// The typed JSON form of a key, as in the manifests.
pub fn typed_json(key: &Key) -> Json {
    Json::Array(
        key.parts()
            .iter()
            .map(|part| match part {
                KeyPart::Bytes(bytes) => json!({ "bytes": hex::encode(bytes) }),
                KeyPart::String(s) => json!({ "string": s }),
                KeyPart::Int(i) => json!({ "int": i.to_string() }),
                KeyPart::Float(x) => json!({
                    "float": float_repr(*x),
                    "bits": hex::encode(x.to_bits().to_be_bytes()),
                }),
                KeyPart::Bool(b) => json!({ "bool": b }),
            })
            .collect(),
    )
}

/// Reads the typed JSON form of a key.
pub fn key_from_typed_json(json: &Json) -> Result<Key, CliError> {
    let bad = |why: String| CliError::BadKey {
        input: json.to_string(),
        reason: why,
    };
    let parts = json
        .as_array()
        .ok_or_else(|| bad("a typed key is a JSON array of parts".into()))?;
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let object = part
                .as_object()
                .filter(|o| !o.is_empty())
                .ok_or_else(|| bad(format!("part {i} is not a {{\"type\": value}} object")))?;
            let field = |name: &str| object.get(name);
            if let Some(s) = field("string") {
                let s = s
                    .as_str()
                    .ok_or_else(|| bad(format!("part {i}: \"string\" must be a string")))?;
                Ok(KeyPart::String(s.to_owned()))
            } else if let Some(int) = field("int") {
                let digits = int
                    .as_str()
                    .ok_or_else(|| bad(format!("part {i}: \"int\" must be a decimal string")))?;
                let value: BigInt = digits
                    .parse()
                    .map_err(|_| bad(format!("part {i}: {digits:?} is not a decimal integer")))?;
                Ok(KeyPart::Int(value))
            } else if let Some(bits) = field("bits") {
                let hex_bits = bits
                    .as_str()
                    .ok_or_else(|| bad(format!("part {i}: \"bits\" must be a hex string")))?;
                let bytes: [u8; 8] = hex::decode(hex_bits)
                    .ok()
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| {
                        bad(format!("part {i}: bits {hex_bits:?} are not 8 hex bytes"))
                    })?;
                Ok(KeyPart::Float(f64::from_bits(u64::from_be_bytes(bytes))))
            } else if let Some(repr) = field("float") {
                let repr = repr
                    .as_str()
                    .ok_or_else(|| bad(format!("part {i}: \"float\" must be a string")))?;
                let value = parse_float_repr(repr)
                    .ok_or_else(|| bad(format!("part {i}: {repr:?} is not a number")))?;
                Ok(KeyPart::Float(value))
            } else if let Some(b) = field("bool") {
                let b = b
                    .as_bool()
                    .ok_or_else(|| bad(format!("part {i}: \"bool\" must be true or false")))?;
                Ok(KeyPart::Bool(b))
            } else if let Some(bytes) = field("bytes") {
                let hex_bytes = bytes
                    .as_str()
                    .ok_or_else(|| bad(format!("part {i}: \"bytes\" must be a hex string")))?;
                let bytes = hex::decode(hex_bytes)
                    .map_err(|_| bad(format!("part {i}: {hex_bytes:?} is not hex")))?;
                Ok(KeyPart::Bytes(bytes))
            } else {
                Err(bad(format!(
                    "part {i}: expected one of string, int, float, bool, bytes"
                )))
            }
        })
        .collect()
}

/// JavaScript's text for a number (`-0`, `NaN`, `Infinity`, `1.5`, `1e+21`).
pub fn float_repr(x: f64) -> String {
    open_deno_kv::v8::number_repr(x)
}

/// Reads JavaScript's number text (and what Rust prints for floats).
fn parse_float_repr(text: &str) -> Option<f64> {
    open_deno_kv::v8::parse_number(text)
}

#[cfg(test)]
mod tests {
    use open_deno_kv_model::key;
    use proptest::prelude::*;

    use super::*;

    fn parsed(text: &str) -> Key {
        match parse_key(text) {
            Ok(key) => key,
            Err(err) => panic!("{text}: {err}"),
        }
    }

    #[test]
    fn literals_follow_javascript() {
        assert_eq!(parsed(r#"["users", 42n, true]"#), key!["users", 42, true]);
        assert_eq!(
            parsed("['a', 42, 1.5, -0, NaN, -Infinity]").parts()[1],
            KeyPart::Float(42.0)
        );
        assert_eq!(
            parsed("[-12345678901234567890123n]").parts()[0],
            KeyPart::Int("-12345678901234567890123".parse().unwrap_or_default())
        );
        assert_eq!(
            parsed("[new Uint8Array([1, 2, 255])]"),
            key![vec![1u8, 2, 255]]
        );
        assert_eq!(parsed(r#"[b"00ff"]"#), key![vec![0u8, 255]]);
        assert_eq!(
            parsed(r#"["a\u0000b", "\u{1F600}", "\x41", "\ud83d\ude00"]"#),
            key!["a\0b", "😀", "A", "😀"]
        );
        assert_eq!(parsed("[]"), key![]);
        assert_eq!(parsed("[1e+21]").parts()[0], KeyPart::Float(1e21));
        let neg_zero = parsed("[-0]");
        assert!(
            matches!(neg_zero.parts()[0], KeyPart::Float(x) if x == 0.0 && x.is_sign_negative())
        );
    }

    #[test]
    fn bad_literals_say_where() {
        for bad in [
            "users",
            "[\"a\"",
            "[1n2]",
            "[new Uint8Array([256])]",
            "[\"a\" \"b\"]",
            "[foo]",
            "[1,]x",
            "[0x10]",
        ] {
            match parse_key(bad) {
                Ok(key) => panic!("{bad} parsed as {key}"),
                Err(err) => assert!(err.to_string().contains("at character"), "{bad}: {err}"),
            }
        }
    }

    #[test]
    fn typed_json_reads_the_manifest_form() {
        let json = json!([{"string": "a"}, {"int": "-5"}, {"float": "-0", "bits": "8000000000000000"}, {"bool": false}, {"bytes": "0102"}]);
        let key = match key_from_typed_json(&json) {
            Ok(key) => key,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(typed_json(&key), json);
        assert_eq!(parsed(&json.to_string()), key);
        assert!(key_from_typed_json(&json!([{"float": "x"}])).is_err());
        assert!(key_from_typed_json(&json!([{"nope": 1}])).is_err());
        assert!(key_from_typed_json(&json!({"string": "a"})).is_err());
    }

    #[test]
    fn float_text_is_javascript_s() {
        for (x, text) in [
            (1.0, "1"),
            (1.5, "1.5"),
            (1e21, "1e+21"),
            (5e-324, "5e-324"),
            (1e-7, "1e-7"),
            (123e-9, "1.23e-7"),
            (0.000001, "0.000001"),
            (-0.0, "-0"),
        ] {
            assert_eq!(float_repr(x), text);
        }
    }

    fn any_part() -> impl Strategy<Value = KeyPart> {
        prop_oneof![
            any::<Vec<u8>>().prop_map(KeyPart::Bytes),
            any::<String>().prop_map(KeyPart::String),
            any::<i128>().prop_map(|i| KeyPart::Int(BigInt::from(i))),
            any::<f64>()
                .prop_filter("NaN prints as NaN", |x| !x.is_nan())
                .prop_map(KeyPart::Float),
            any::<bool>().prop_map(KeyPart::Bool),
        ]
    }

    proptest! {
        /// What `kv` prints for a key (its Display) parses back to the same key, and so does the
        /// typed JSON form.
        #[test]
        fn printed_keys_parse_back(parts in proptest::collection::vec(any_part(), 0..6)) {
            let key = Key::new(parts);
            prop_assert_eq!(parse_key(&key.to_string())?, key.clone());
            prop_assert_eq!(key_from_typed_json(&typed_json(&key))?, key);
        }
    }
}

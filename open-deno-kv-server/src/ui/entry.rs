//! Entries as the page shows them, and values as the page's editor writes them.
//!
//! An entry is identified by its encoded key in hex (`id`): the page never parses a key, it
//! shows the key as JavaScript writes it ([`open_deno_kv_model::key_literal`]) and sends the id
//! back. Values are shown as Deno's `console.log` would print them
//! ([`open_deno_kv_model::v8::to_js_literal`], the same printer as `kv get`), and offered to the
//! editor in the most readable form that writes back the same value.

use hyper::StatusCode;
use open_deno_kv_model::{KvEntry, KvValue, decode_key, key_literal, v8};
use serde_json::{Value as Json, json};

use crate::response::Failure;

/// The entry as the page's JSON.
pub(super) fn entry_json(entry: &KvEntry) -> Json {
    let key = match decode_key(&entry.key) {
        Ok(key) => key_literal(&key),
        Err(err) => format!("<undecodable key: {err}>"),
    };
    let value =
        v8::to_js_literal(&entry.value).unwrap_or_else(|err| format!("<undecodable value: {err}>"));
    let edit = edit_form(&entry.value).map(|(kind, text)| json!({ "type": kind, "text": text }));
    json!({
        "id": hex::encode(&entry.key),
        "key": key,
        "value": value,
        "encoding": entry.value.encoding().name(),
        "versionstamp": entry.versionstamp.to_string(),
        "expiresAt": entry.expires_at.map(|at| at.timestamp_millis()),
        "keyBytes": entry.key.len(),
        "valueBytes": entry.value.encoded_len(),
        "edit": edit,
    })
}

/// The editor's form of a value, `(type, text)`, for a type [`parse_edit`] reads back to the
/// same value: a u64 in decimal, bytes in hex, a V8 string as its text, other V8 values as plain
/// JSON when that is lossless, else as tagged JSON. `None` for V8 bytes that do not decode.
fn edit_form(value: &KvValue) -> Option<(&'static str, String)> {
    match value {
        KvValue::U64(n) => Some(("u64", n.to_string())),
        KvValue::Bytes(bytes) => Some(("bytes", hex::encode(bytes))),
        KvValue::V8(_) => {
            if let Ok(plain) = v8::to_json(value)
                && v8::from_json(&plain).is_ok_and(|back| back == *value)
            {
                return Some(match plain {
                    Json::String(text) => ("string", text),
                    other => ("json", serde_json::to_string_pretty(&other).ok()?),
                });
            }
            let tagged = v8::to_tagged_json(value).ok()?;
            Some(("tagged", serde_json::to_string_pretty(&tagged).ok()?))
        }
    }
}

/// Reads the editor's text as a value of `kind`: `json` (a plain JSON value, stored as V8),
/// `string` (the text itself, a V8 string), `tagged` (tagged JSON, any JavaScript value),
/// `u64` (a `Deno.KvU64`, decimal) or `bytes` (a `Uint8Array`, hex).
pub(super) fn parse_edit(kind: &str, text: &str) -> Result<KvValue, Failure> {
    let bad = |why: String| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, why);
    let json = |text: &str| {
        serde_json::from_str::<Json>(text)
            .map_err(|err| bad(format!("The value is not JSON: {err}")))
    };
    match kind {
        "json" => v8::from_json(&json(text)?).map_err(|err| bad(err.to_string())),
        "string" => {
            v8::from_json(&Json::String(text.to_owned())).map_err(|err| bad(err.to_string()))
        }
        "tagged" => v8::from_tagged_json(&json(text)?).map_err(|err| bad(err.to_string())),
        "u64" => text.trim().parse::<u64>().map(KvValue::U64).map_err(|_| {
            bad(format!(
                "{:?} is not a u64 (0 to 18446744073709551615)",
                text.trim()
            ))
        }),
        "bytes" => hex::decode(text.trim().replace(char::is_whitespace, ""))
            .map(|b| KvValue::Bytes(b.into()))
            .map_err(|_| bad("The bytes are not hex (two digits per byte).".to_owned())),
        other => Err(Failure::bad_request(format!(
            "Unknown value type {other:?}: expected json, string, tagged, u64 or bytes."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value's editor form parses back to the same value.
    #[test]
    fn edit_forms_write_back_the_same_value() {
        let values = [
            KvValue::U64(42),
            KvValue::Bytes(vec![0, 1, 255].into()),
            v8::from_json(&json!("text")).unwrap_or(KvValue::U64(0)),
            v8::from_json(&json!({"name": "Ada", "n": [1, 2.5, null]})).unwrap_or(KvValue::U64(0)),
            v8::from_tagged_json(&json!({"map": [[{"string": "a"}, {"bigint": "7"}]]}))
                .unwrap_or(KvValue::U64(0)),
            v8::from_tagged_json(&json!({"date": "1700000000123"})).unwrap_or(KvValue::U64(0)),
        ];
        let kinds: Vec<&str> = values
            .iter()
            .map(|value| match edit_form(value) {
                Some((kind, text)) => match parse_edit(kind, &text) {
                    Ok(back) => {
                        assert_eq!(&back, value, "{kind}: {text}");
                        kind
                    }
                    Err(_) => panic!("{kind} {text:?} does not parse back"),
                },
                None => panic!("no editor form for {value:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            ["u64", "bytes", "string", "json", "tagged", "tagged"]
        );
        assert!(parse_edit("json", "{").is_err());
        assert!(parse_edit("u64", "-1").is_err());
        assert!(parse_edit("bytes", "zz").is_err());
        assert!(parse_edit("nope", "").is_err());
    }
}

//! `--format plain-json`: entries as plain JSON, for `jq` and other JSON tools.
//!
//! An entry is the object Deno's `JSON.stringify(entry)` writes for a `Deno.KvEntry`:
//! `{"key":["users",1],"value":{"name":"Alice"},"versionstamp":"00000000000000010000"}`, plus
//! `"expires_at"` (RFC 3339) when the entry expires. An absent key (in `kv watch`) is
//! `{"key":[...],"value":null,"versionstamp":null}`, as `Deno.KvEntryMaybe`.
//!
//! Values follow [`open_deno_kv::v8::to_json`]; key parts the same rules: a string is a string, a number
//! a number (`NaN` and infinities `null`), a bigint a JSON integer (its decimal string beyond
//! 64 bits, where `JSON.stringify` would throw), a boolean a boolean, and a `Uint8Array` the
//! object of its bytes by index (`{"0":0,"1":255}`), as `JSON.stringify` writes it. Plain JSON
//! loses what JSON cannot say (bigint versus number, a `Map`'s contents); `--format json` keeps
//! everything.

use chrono::SecondsFormat;
use open_deno_kv::{Entry, Key, KvValue};
use open_deno_kv_model::KeyPart;
use serde_json::{Map, Value as Json, json};

use crate::error::CliError;

/// A present entry as plain JSON.
pub fn entry(entry: &Entry) -> Result<Json, CliError> {
    let mut object = Map::new();
    object.insert("key".into(), key(&entry.key)?);
    object.insert("value".into(), value(&entry.value)?);
    object.insert(
        "versionstamp".into(),
        Json::from(entry.versionstamp.to_string()),
    );
    if let Some(at) = entry.expires_at {
        object.insert(
            "expires_at".into(),
            Json::from(at.to_rfc3339_opts(SecondsFormat::Millis, true)),
        );
    }
    Ok(Json::Object(object))
}

/// A key that holds no entry, as plain JSON.
pub fn absent(absent_key: &Key) -> Result<Json, CliError> {
    Ok(json!({"key": key(absent_key)?, "value": null, "versionstamp": null}))
}

fn value(value: &KvValue) -> Result<Json, CliError> {
    Ok(open_deno_kv::v8::to_json(value).map_err(open_deno_kv::Error::from)?)
}

/// A key as the JSON array `JSON.stringify(key)` writes.
fn key(key: &Key) -> Result<Json, CliError> {
    key.parts()
        .iter()
        .map(|part| {
            Ok(match part {
                KeyPart::String(text) => Json::from(text.as_str()),
                KeyPart::Bool(flag) => Json::from(*flag),
                KeyPart::Bytes(bytes) => value(&KvValue::Bytes(bytes.clone().into()))?,
                KeyPart::Int(int) => i64::try_from(int)
                    .map(Json::from)
                    .or_else(|_| u64::try_from(int).map(Json::from))
                    .unwrap_or_else(|_| Json::from(int.to_string())),
                KeyPart::Float(number) => float(*number),
            })
        })
        .collect::<Result<Vec<_>, CliError>>()
        .map(Json::Array)
}

/// A number as `JSON.stringify` writes it: integral ones without a fraction, `-0` as `0`,
/// `NaN` and infinities as `null`.
fn float(number: f64) -> Json {
    /// 2^63: integral numbers below it in magnitude fit an `i64` exactly.
    const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;
    if number.fract() == 0.0 && number.abs() < I64_BOUND {
        // Exact: the number is integral and in range.
        return Json::from(number as i64);
    }
    serde_json::Number::from_f64(number).map_or(Json::Null, Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use num_bigint::BigInt;
    use open_deno_kv::key;

    #[test]
    fn key_parts_are_written_as_json_stringify_writes_them() {
        let big = BigInt::from(u64::MAX) + 1;
        let written = key(&key![
            "users",
            KeyPart::Int(BigInt::from(-5)),
            KeyPart::Int(big),
            1.5,
            -0.0,
            f64::NAN,
            true,
            vec![0u8, 255]
        ]);
        assert_eq!(
            written.ok(),
            Some(json!([
                "users",
                -5,
                "18446744073709551616",
                1.5,
                0,
                null,
                true,
                {"0": 0, "1": 255}
            ]))
        );
    }
}

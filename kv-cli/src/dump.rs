//! The dump format: JSON lines, one entry per line, lossless.
//!
//! ```text
//! {"key":[{"string":"users"},{"int":"1"}],"encoding":"v8","versionstamp":"00000000000000010000","value":{"object":[["name",{"string":"Alice"}]]}}
//! {"key":[{"string":"hits"}],"encoding":"u64","versionstamp":"00000000000000020000","expires_at":1795416615502,"value":{"u64":"7"}}
//! ```
//!
//! - `key`: the typed JSON form of the fixtures' manifests (see [`crate::key_syntax`]);
//! - `encoding`: `v8`, `u64` or `bytes`, as stored;
//! - `versionstamp`: the commit that wrote the entry (informational: `load` makes new commits);
//! - `expires_at`: Unix milliseconds, only when the entry expires;
//! - `value`: the manifests' tagged `value_json` form, which keeps every V8 value exactly
//!   (property order, Map, Set, Date, bigint, typed arrays, shared and cyclic references).
//!
//! `load` reads the same lines back, so dump → load → dump gives the same lines apart from
//! versionstamps.

use chrono::{DateTime, Utc};
use kv::{Entry, Key, KvValue, Versionstamp};
use kv_proto::ValueEncoding;
use serde_json::{Map, Value as Json};

use crate::error::CliError;
use crate::key_syntax::{key_from_typed_json, typed_json};

/// One line of a dump.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpEntry {
    /// The key.
    pub key: Key,
    /// The value.
    pub value: KvValue,
    /// The versionstamp the entry had where it was dumped.
    pub versionstamp: Option<Versionstamp>,
    /// When the entry expires.
    pub expires_at: Option<DateTime<Utc>>,
}

impl DumpEntry {
    /// The dump line of a stored entry.
    pub fn from_entry(entry: Entry) -> Self {
        DumpEntry {
            key: entry.key,
            value: entry.value,
            versionstamp: Some(entry.versionstamp),
            expires_at: entry.expires_at,
        }
    }

    /// The line's JSON object (fields in the documented order).
    pub fn to_json(&self) -> Result<Json, CliError> {
        let mut line = Map::new();
        line.insert("key".into(), typed_json(&self.key));
        line.insert("encoding".into(), Json::from(self.value.encoding().name()));
        if let Some(versionstamp) = self.versionstamp {
            line.insert("versionstamp".into(), Json::from(versionstamp.to_string()));
        }
        if let Some(at) = self.expires_at {
            line.insert("expires_at".into(), Json::from(at.timestamp_millis()));
        }
        line.insert(
            "value".into(),
            kv::v8::to_tagged_json(&self.value).map_err(kv::Error::from)?,
        );
        Ok(Json::Object(line))
    }

    /// Reads one line; `Err` holds the reason (the caller adds file and line number).
    pub fn parse(line: &str) -> Result<Self, String> {
        let json: Json = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let object = json.as_object().ok_or("a dump line is a JSON object")?;
        let key = key_from_typed_json(object.get("key").ok_or("no \"key\"")?)
            .map_err(|e| e.to_string())?;
        let value = kv::v8::from_tagged_json(object.get("value").ok_or("no \"value\"")?)
            .map_err(|e| format!("value: {e}"))?;
        if let Some(encoding) = object.get("encoding") {
            let name = encoding.as_str().ok_or("\"encoding\" must be a string")?;
            let wanted = [ValueEncoding::V8, ValueEncoding::U64, ValueEncoding::Bytes]
                .into_iter()
                .find(|e| e.name() == name)
                .ok_or_else(|| format!("unknown encoding {name:?} (v8, u64 or bytes)"))?;
            if wanted != value.encoding() {
                return Err(format!(
                    "\"encoding\" is {name} but the value is stored as {}",
                    value.encoding().name()
                ));
            }
        }
        let versionstamp = match object.get("versionstamp") {
            None | Some(Json::Null) => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or("\"versionstamp\" must be a string")?
                    .parse::<Versionstamp>()
                    .map_err(|e| format!("versionstamp: {e}"))?,
            ),
        };
        let expires_at = match object.get("expires_at") {
            None | Some(Json::Null) => None,
            Some(ms) => {
                let ms = ms
                    .as_i64()
                    .ok_or("\"expires_at\" must be Unix milliseconds")?;
                Some(
                    kv_proto::ms_to_datetime(ms)
                        .ok_or_else(|| format!("expires_at {ms} is out of range"))?,
                )
            }
        };
        Ok(DumpEntry {
            key,
            value,
            versionstamp,
            expires_at,
        })
    }
}

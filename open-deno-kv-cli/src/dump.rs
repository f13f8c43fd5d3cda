//! The dump format: a database as JSON lines, byte for byte. `kv dump` and `kv backup` write
//! it, `kv load` and `kv restore` read it.
//!
//! ```text
//! {"format":"kv-dump","version":3,"consistent":true,"versionstamp":"00000000000000030000","database":"5b0b2f64-6f8e-4a61-9d43-2f0c8d7e51aa"}
//! {"key":[{"string":"users"},{"int":"1"}],"encoding":"v8","versionstamp":"00000000000000010000","value":{"object":[["name",{"string":"Alice"}]]},"bytes":"ff106f22046e616d652205416c6963657b01"}
//! {"key":[{"string":"hits"}],"encoding":"u64","versionstamp":"00000000000000020000","expires_at":1795416615502,"value":{"u64":"7"}}
//! {"message":{"object":[["job",{"number":"1"}]]},"bytes":"ff106f22036a6f6249027b01","id":"4f1c1f43-55c5-4f0e-9a8e-5f3b1f7d2a10","ready_at":1795416615502,"keys_if_undelivered":[[{"string":"failed"}]],"backoff_schedule":[100,1000]}
//! {"end":{"entries":2,"messages":1}}
//! ```
//!
//! - the **header** line names the format and its version ([`FORMAT_VERSION`]). From version 3
//!   it also says whether the lines are one **consistent** snapshot (`"consistent": true`: every
//!   entry and message as of one commit, read through the engine's snapshot export) and then
//!   that commit's `versionstamp`: no entry's versionstamp is later, and a database restored
//!   from the file continues numbering after it. `"consistent": false` (no `versionstamp`) marks
//!   a dump read page by page from a backend without an export (a KV Connect server). A
//!   consistent header also names the `database` the snapshot is of (its identity, see
//!   `open_deno_kv_model::identity`), when the database has one: `kv restore --log` refuses a
//!   log of another database, and a backup without one (written before identities, or of a
//!   Deno-written file only ever read) restores only without a log. The field is optional, so
//!   format 3 stays as it was and earlier readers of it skip the field;
//! - an **entry** line per stored entry, in key order:
//!   - `key`: the typed JSON form of the fixtures' manifests (see [`crate::key_syntax`]);
//!   - `encoding`: `v8`, `u64` or `bytes`, as stored;
//!   - `versionstamp`: the commit that wrote the entry (`kv restore` keeps it; `kv load` makes
//!     new commits);
//!   - `expires_at`: when the entry expires, only when it does (see times below);
//!   - `value`: the manifests' tagged `value_json` form, for people and tools;
//!   - `bytes`: for `v8` values, the stored bytes in hex. The tagged form does not hold
//!     everything V8 stores (an error's stack and cause, the rest of the buffer a typed array or
//!     `DataView` looks into, which views share a buffer, the result of a V8 `sum`), so `load`
//!     stores these bytes. `u64` and `bytes` values are exact in `value` itself;
//! - a **message** line per queued message (waiting, or being delivered: then ready at the time
//!   of the dump): `message` is the payload's tagged form and `bytes` its stored V8 bytes, `id`
//!   the message's id (from version 3; `kv restore` keeps it, `kv load` gives a new one),
//!   `ready_at` its earliest delivery, `keys_if_undelivered` typed keys, `backoff_schedule` the
//!   retry intervals (ms) still left;
//! - the **end** line counts the entries and messages before it, so that a dump cut short (a
//!   full disk, a broken pipe) is refused instead of loaded in part.
//!
//! Times are Unix milliseconds, or an RFC 3339 string when the time has a finer part (engines
//! other than SQLite keep nanoseconds), so that nothing is rounded.
//!
//! Reading a line that has both `value` and `bytes`, the bytes are stored, and `value` must
//! describe them (any spelling [`open_deno_kv::v8::from_tagged_json`] reads the same way): a line whose
//! `value` was edited but whose `bytes` were not is refused, since either could be the one
//! meant. To load an edited value, delete `bytes` from its line. A line without `bytes` (an
//! edited line, or format 1) is rebuilt from its tagged form, which [`ValueSource::Tagged`]
//! reports so that `load` can warn.
//!
//! Format 2 is format 3 without `consistent`, `versionstamp` in the header and `id` in message
//! lines. Format 1 (the dumps of the first versions) has no header, no `bytes`, no messages and
//! no end line. `kv load` reads all three; `kv restore` only consistent format 3 files.

use chrono::{DateTime, SecondsFormat, Utc};
use open_deno_kv::{Entry, Key, KvValue, Versionstamp};
use open_deno_kv_model::{
    DatabaseId, Enqueue, QueuedMessage, ValueEncoding, decode_key, encode_key,
};
use serde_json::{Map, Value as Json, json};
use uuid::Uuid;

use crate::error::CliError;
use crate::key_syntax::{key_from_typed_json, typed_json};

/// The version of the format [`header_line`] announces. Version 1 is a dump without a header.
pub const FORMAT_VERSION: u64 = 3;

/// The header's `format` field.
const FORMAT_NAME: &str = "kv-dump";

/// The first line of a dump: of one consistent snapshot whose last commit is `snapshot`, of
/// the database `database` names (if it has an identity), or (`None`) of a dump read page by
/// page.
pub fn header_line(snapshot: Option<Versionstamp>, database: Option<DatabaseId>) -> Json {
    match snapshot {
        Some(versionstamp) => {
            let mut header = json!({
                "format": FORMAT_NAME,
                "version": FORMAT_VERSION,
                "consistent": true,
                "versionstamp": versionstamp.to_string(),
            });
            if let (Some(database), Some(fields)) = (database, header.as_object_mut()) {
                fields.insert("database".into(), Json::from(database.to_string()));
            }
            header
        }
        None => json!({"format": FORMAT_NAME, "version": FORMAT_VERSION, "consistent": false}),
    }
}

/// The last line of a dump: how many entries and messages precede it.
pub fn end_line(entries: u64, messages: u64) -> Json {
    json!({"end": {"entries": entries, "messages": messages}})
}

/// Where a value read from a dump came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueSource {
    /// The stored bytes (`bytes`), or a value whose tagged form is exact (`u64`, `bytes`).
    Exact,
    /// A V8 value rebuilt from its tagged form alone, which may lack what the tagged form does
    /// not carry.
    Tagged,
}

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
            line.insert("expires_at".into(), time_json(at));
        }
        insert_value(&mut line, "value", &self.value)?;
        Ok(Json::Object(line))
    }

    /// Reads an entry line; `Err` holds the reason (the caller adds file and line number).
    fn parse(object: &Map<String, Json>) -> Result<(Self, ValueSource), String> {
        let key = key_from_typed_json(object.get("key").ok_or("no \"key\"")?)
            .map_err(|e| e.to_string())?;
        let encoding = match object.get("encoding") {
            None => None,
            Some(encoding) => {
                let name = encoding.as_str().ok_or("\"encoding\" must be a string")?;
                Some(
                    [ValueEncoding::V8, ValueEncoding::U64, ValueEncoding::Bytes]
                        .into_iter()
                        .find(|e| e.name() == name)
                        .ok_or_else(|| format!("unknown encoding {name:?} (v8, u64 or bytes)"))?,
                )
            }
        };
        let (value, source) = read_value(object, "value", encoding)?;
        if let Some(wanted) = encoding
            && wanted != value.encoding()
        {
            return Err(format!(
                "\"encoding\" is {} but the value is stored as {}",
                wanted.name(),
                value.encoding().name()
            ));
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
            Some(at) => Some(parse_time(at, "expires_at")?),
        };
        let entry = DumpEntry {
            key,
            value,
            versionstamp,
            expires_at,
        };
        Ok((entry, source))
    }
}

/// The dump line of a queued message.
pub fn message_json(message: &QueuedMessage) -> Result<Json, CliError> {
    let mut line = Map::new();
    insert_value(
        &mut line,
        "message",
        &KvValue::V8(message.payload.clone().into()),
    )?;
    line.insert("id".into(), Json::from(message.id.to_string()));
    line.insert("ready_at".into(), time_json(message.ready_at));
    let keys = message
        .keys_if_undelivered
        .iter()
        .map(|bytes| decode_key(bytes).map(|key| typed_json(&key)))
        .collect::<Result<Vec<_>, _>>()?;
    line.insert("keys_if_undelivered".into(), Json::Array(keys));
    line.insert(
        "backoff_schedule".into(),
        Json::from(message.backoff_schedule.clone()),
    );
    Ok(Json::Object(line))
}

/// A message line: the enqueue that recreates it (with the exact schedule left), and the
/// message's id where the line has one (format 3).
#[derive(Debug, Clone, PartialEq)]
pub struct DumpMessage {
    /// The message as an enqueue.
    pub enqueue: Enqueue,
    /// Its id in the dumped database.
    pub id: Option<Uuid>,
}

impl DumpMessage {
    /// The message as a store keeps it: its own id, or a new one for a line without.
    pub fn into_queued(self) -> QueuedMessage {
        let Enqueue {
            payload,
            ready_at,
            keys_if_undelivered,
            backoff_schedule,
        } = self.enqueue;
        QueuedMessage {
            id: self.id.unwrap_or_else(Uuid::new_v4),
            payload,
            ready_at,
            keys_if_undelivered,
            backoff_schedule: backoff_schedule.unwrap_or_default(),
        }
    }
}

/// Reads a message line.
fn parse_message(object: &Map<String, Json>) -> Result<(DumpMessage, ValueSource), String> {
    let (payload, source) = read_value(object, "message", Some(ValueEncoding::V8))?;
    let payload = open_deno_kv::v8::to_v8_bytes(&payload).map_err(|e| format!("message: {e}"))?;
    let ready_at = parse_time(object.get("ready_at").ok_or("no \"ready_at\"")?, "ready_at")?;
    let keys_if_undelivered = match object.get("keys_if_undelivered") {
        None | Some(Json::Null) => Vec::new(),
        Some(keys) => keys
            .as_array()
            .ok_or("\"keys_if_undelivered\" must be a list of keys")?
            .iter()
            .map(|key| {
                key_from_typed_json(key)
                    .and_then(|key| Ok(encode_key(&key)?))
                    .map_err(|e| format!("keys_if_undelivered: {e}"))
            })
            .collect::<Result<_, _>>()?,
    };
    let backoff_schedule = object
        .get("backoff_schedule")
        .ok_or("no \"backoff_schedule\"")?
        .as_array()
        .ok_or("\"backoff_schedule\" must be a list of milliseconds")?
        .iter()
        .map(|ms| {
            ms.as_u64()
                .and_then(|ms| u32::try_from(ms).ok())
                .ok_or_else(|| format!("backoff_schedule: {ms} is not a u32 of milliseconds"))
        })
        .collect::<Result<_, _>>()?;
    let id = match object.get("id") {
        None | Some(Json::Null) => None,
        Some(id) => Some(
            id.as_str()
                .and_then(|text| Uuid::parse_str(text).ok())
                .ok_or("\"id\" must be a message id (a UUID)")?,
        ),
    };
    let enqueue = Enqueue {
        payload,
        ready_at,
        keys_if_undelivered,
        backoff_schedule: Some(backoff_schedule),
    };
    Ok((DumpMessage { enqueue, id }, source))
}

/// Writes `value` under `field` in its tagged form, and its stored bytes under `bytes` where
/// the tagged form may not hold all of them (V8 values).
fn insert_value(
    line: &mut Map<String, Json>,
    field: &str,
    value: &KvValue,
) -> Result<(), CliError> {
    line.insert(
        field.into(),
        open_deno_kv::v8::to_tagged_json(value).map_err(open_deno_kv::Error::from)?,
    );
    if let KvValue::V8(bytes) = value {
        line.insert("bytes".into(), Json::from(hex::encode(bytes)));
    }
    Ok(())
}

/// Reads the value under `field` and, when present, its stored `bytes` (which need the
/// `encoding`); see the module documentation for which one wins.
fn read_value(
    object: &Map<String, Json>,
    field: &str,
    encoding: Option<ValueEncoding>,
) -> Result<(KvValue, ValueSource), String> {
    let tagged = object.get(field).ok_or_else(|| format!("no {field:?}"))?;
    let Some(bytes) = object.get("bytes") else {
        let value =
            open_deno_kv::v8::from_tagged_json(tagged).map_err(|e| format!("{field}: {e}"))?;
        let source = match value {
            KvValue::V8(_) => ValueSource::Tagged,
            KvValue::U64(_) | KvValue::Bytes(_) => ValueSource::Exact,
        };
        return Ok((value, source));
    };
    let encoding = encoding.ok_or("\"bytes\" needs an \"encoding\" to say how to read them")?;
    let bytes = bytes
        .as_str()
        .and_then(|text| hex::decode(text).ok())
        .ok_or("\"bytes\" must be the stored bytes in hex")?;
    let stored = KvValue::decode(bytes, encoding.id()).map_err(|e| format!("bytes: {e}"))?;
    let described = open_deno_kv::v8::to_tagged_json(&stored)
        .map_err(|e| format!("bytes do not parse: {e}"))?;
    if described != *tagged {
        // Another spelling of the same value (`"1e21"` for `"1e+21"`) still describes them.
        let respelled = open_deno_kv::v8::from_tagged_json(tagged)
            .and_then(|value| open_deno_kv::v8::to_tagged_json(&value))
            .map_err(|e| format!("{field}: {e}"))?;
        if respelled != described {
            return Err(format!(
                "{field:?} does not describe \"bytes\" (was one of them edited?): to store an \
                 edited {field}, delete \"bytes\" from the line; to store the bytes, restore \
                 {field:?}"
            ));
        }
    }
    Ok((stored, ValueSource::Exact))
}

/// A time as a dump writes it: Unix milliseconds, or RFC 3339 when finer than a millisecond.
fn time_json(at: DateTime<Utc>) -> Json {
    if at.timestamp_subsec_nanos().is_multiple_of(1_000_000) {
        Json::from(at.timestamp_millis())
    } else {
        Json::from(at.to_rfc3339_opts(SecondsFormat::Nanos, true))
    }
}

/// Reads a time written by [`time_json`].
fn parse_time(json: &Json, field: &str) -> Result<DateTime<Utc>, String> {
    if let Some(text) = json.as_str() {
        return DateTime::parse_from_rfc3339(text)
            .map(|at| at.with_timezone(&Utc))
            .map_err(|e| format!("{field} {text:?}: {e}"));
    }
    let ms = json
        .as_i64()
        .ok_or_else(|| format!("{field:?} must be Unix milliseconds or an RFC 3339 time"))?;
    open_deno_kv_model::ms_to_datetime(ms).ok_or_else(|| format!("{field} {ms} is out of range"))
}

/// What a dump line holds.
#[derive(Debug, Clone, PartialEq)]
pub enum DumpItem {
    /// An entry to set.
    Entry(DumpEntry, ValueSource),
    /// A queued message to enqueue again.
    Message(DumpMessage, ValueSource),
}

/// Reads a dump line by line, checking its header, version and end line.
#[derive(Debug, Default)]
pub struct DumpReader {
    /// The version, once the first line has been read.
    version: Option<u64>,
    /// The header's snapshot versionstamp, for a consistent format 3 dump.
    snapshot: Option<Versionstamp>,
    /// The database the header names, if any.
    database: Option<DatabaseId>,
    entries: u64,
    messages: u64,
    ended: bool,
}

impl DumpReader {
    /// A reader at the start of a dump.
    pub fn new() -> Self {
        Self::default()
    }

    /// The dump's format version (1 until a header says otherwise).
    pub fn version(&self) -> u64 {
        self.version.unwrap_or(1)
    }

    /// The last commit of the snapshot, when the header says the dump is one consistent
    /// snapshot (format 3, `"consistent": true`).
    pub fn snapshot(&self) -> Option<Versionstamp> {
        self.snapshot
    }

    /// The database the header names (a consistent dump of a database with an identity).
    pub fn database(&self) -> Option<DatabaseId> {
        self.database
    }

    /// Reads one non-empty line: an entry or message, or `None` for the header and end lines.
    /// `Err` holds the reason (the caller adds file and line number).
    pub fn read_line(&mut self, line: &str) -> Result<Option<DumpItem>, String> {
        let json: Json = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let object = json.as_object().ok_or("a dump line is a JSON object")?;
        if self.ended {
            return Err("a line after the end line".into());
        }
        let first = self.version.is_none();
        if object.contains_key("format") {
            if !first {
                return Err("a header line after the first line".into());
            }
            let (version, snapshot, database) = parse_header(object)?;
            self.version = Some(version);
            self.snapshot = snapshot;
            self.database = database;
            return Ok(None);
        }
        if first {
            self.version = Some(1);
        }
        if let Some(end) = object.get("end") {
            self.check_end(end)?;
            self.ended = true;
            return Ok(None);
        }
        if object.contains_key("message") {
            let (message, source) = parse_message(object)?;
            self.messages += 1;
            return Ok(Some(DumpItem::Message(message, source)));
        }
        let (entry, source) = DumpEntry::parse(object)?;
        self.entries += 1;
        Ok(Some(DumpItem::Entry(entry, source)))
    }

    /// Checks that the dump was complete: from format 2 on, it ends with its end line.
    pub fn finish(&self) -> Result<(), String> {
        if self.version() >= 2 && !self.ended {
            return Err("the dump stops before its end line: it is incomplete".into());
        }
        Ok(())
    }

    fn check_end(&self, end: &Json) -> Result<(), String> {
        let count = |field: &str| end.get(field).and_then(Json::as_u64);
        let (Some(entries), Some(messages)) = (count("entries"), count("messages")) else {
            return Err("the end line must count \"entries\" and \"messages\"".into());
        };
        if (entries, messages) != (self.entries, self.messages) {
            return Err(format!(
                "the end line counts {entries} entries and {messages} messages, but the dump \
                 holds {} and {}: lines are missing or added",
                self.entries, self.messages
            ));
        }
        Ok(())
    }
}

/// The version a header line announces, if this program reads it, its snapshot's versionstamp
/// if it says it is consistent, and the database it names.
type Header = (u64, Option<Versionstamp>, Option<DatabaseId>);

fn parse_header(object: &Map<String, Json>) -> Result<Header, String> {
    let name = object.get("format").and_then(Json::as_str);
    if name != Some(FORMAT_NAME) {
        return Err(format!(
            "not a kv dump header (\"format\" is not {FORMAT_NAME:?})"
        ));
    }
    let version = object
        .get("version")
        .and_then(Json::as_u64)
        .ok_or("the header has no \"version\"")?;
    if version == 0 || version > FORMAT_VERSION {
        return Err(format!(
            "this dump is format version {version}; this kv reads versions 1 to {FORMAT_VERSION}"
        ));
    }
    let consistent = match object.get("consistent") {
        None | Some(Json::Null) => false,
        Some(flag) => flag
            .as_bool()
            .ok_or("the header's \"consistent\" must be true or false")?,
    };
    if !consistent {
        return Ok((version, None, None));
    }
    let versionstamp = object
        .get("versionstamp")
        .and_then(Json::as_str)
        .ok_or("a consistent dump's header needs its \"versionstamp\"")?
        .parse::<Versionstamp>()
        .map_err(|e| format!("the header's versionstamp: {e}"))?;
    let database = match object.get("database") {
        None | Some(Json::Null) => None,
        Some(database) => Some(
            database
                .as_str()
                .ok_or("the header's \"database\" must be a string")?
                .parse::<DatabaseId>()
                .map_err(|e| format!("the header's database: {e}"))?,
        ),
    };
    Ok((version, Some(versionstamp), database))
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn a_consistent_header_carries_its_versionstamp_and_others_do_not() {
        let stamp = Versionstamp::from_version(42, 0);
        let mut reader = DumpReader::new();
        reader
            .read_line(&header_line(Some(stamp), None).to_string())
            .unwrap();
        assert_eq!((reader.version(), reader.snapshot()), (3, Some(stamp)));
        let mut reader = DumpReader::new();
        reader
            .read_line(&header_line(None, None).to_string())
            .unwrap();
        assert_eq!((reader.version(), reader.snapshot()), (3, None));
        let mut reader = DumpReader::new();
        reader
            .read_line(r#"{"format":"kv-dump","version":2}"#)
            .unwrap();
        assert_eq!((reader.version(), reader.snapshot()), (2, None));
        let missing = DumpReader::new()
            .read_line(r#"{"format":"kv-dump","version":3,"consistent":true}"#)
            .unwrap_err();
        assert!(missing.contains("versionstamp"), "{missing}");
        let too_new = DumpReader::new()
            .read_line(r#"{"format":"kv-dump","version":4}"#)
            .unwrap_err();
        assert!(too_new.contains("versions 1 to 3"), "{too_new}");
    }

    #[test]
    fn times_keep_every_nanosecond_and_whole_milliseconds_stay_numbers() {
        let whole = open_deno_kv_model::ms_to_datetime(1_795_416_615_502).unwrap();
        assert_eq!(time_json(whole), json!(1_795_416_615_502_i64));
        let fine = whole + TimeDelta::nanoseconds(123_456);
        assert_eq!(time_json(fine), json!("2026-11-23T06:50:15.502123456Z"));
        for at in [whole, fine] {
            assert_eq!(parse_time(&time_json(at), "t").unwrap(), at);
        }
    }

    #[test]
    fn a_message_line_reads_back_as_the_enqueue_that_recreates_it() {
        let key = encode_key(&open_deno_kv::key!["failed", 1]).unwrap();
        let payload = open_deno_kv::v8::from_json(&json!({"job": 1})).unwrap();
        let KvValue::V8(payload) = payload else {
            panic!("JSON is stored as V8")
        };
        let ready_at = open_deno_kv_model::ms_to_datetime(1_795_416_615_502).unwrap();
        let message = QueuedMessage::new(payload.to_vec(), ready_at, vec![key.clone()], vec![]);
        let line = message_json(&message).unwrap();
        let mut reader = DumpReader::new();
        let read = reader.read_line(&line.to_string()).unwrap();
        let expected = Enqueue {
            payload: payload.to_vec(),
            ready_at,
            keys_if_undelivered: vec![key],
            // An empty schedule (never retry) stays empty, not Deno's default.
            backoff_schedule: Some(vec![]),
        };
        let expected = DumpMessage {
            enqueue: expected,
            id: Some(message.id),
        };
        let Some(DumpItem::Message(read, ValueSource::Exact)) = read else {
            panic!("a message line reads as a message: {read:?}")
        };
        assert_eq!(read, expected);
        assert_eq!(read.into_queued(), message, "the same message, id included");
        assert!(reader.finish().is_ok(), "a headerless dump is format 1");
    }
}

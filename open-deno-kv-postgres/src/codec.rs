//! Rows to open-deno-kv-model's types and back: entries, queue messages, times.

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{KvEntry, KvError, KvValue, StoredEntry, Versionstamp};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;
use uuid::Uuid;

/// Milliseconds since the Unix epoch, as the tables store times.
pub(crate) fn ms(time: DateTime<Utc>) -> i64 {
    time.timestamp_millis()
}

/// `time` as the tables keep it: cut to the whole millisecond (what a read of it returns).
pub(crate) fn as_stored(time: DateTime<Utc>) -> DateTime<Utc> {
    open_deno_kv_engine_kit::ms_to_datetime(ms(time)).unwrap_or(time)
}

/// A stored time back as a time; out of range is corruption.
pub(crate) fn time(ms: i64) -> Result<DateTime<Utc>, KvError> {
    open_deno_kv_engine_kit::ms_to_datetime(ms)
        .ok_or_else(|| corrupt(format!("time {ms} ms is out of range")))
}

fn corrupt(message: String) -> KvError {
    KvError::Corrupt { message }
}

/// Column `index` of `row`; a column of another type is corruption.
fn column<'a, T: FromSql<'a>>(row: &'a Row, index: usize) -> Result<T, KvError> {
    row.try_get(index)
        .map_err(|e| corrupt(format!("column {index} of a row: {e}")))
}

/// An entry row (`k, v, v_encoding, vs, expires_at`): its key and what is stored.
pub(crate) fn stored_entry(row: &Row) -> Result<(Vec<u8>, StoredEntry), KvError> {
    let key: Vec<u8> = column(row, 0)?;
    let bytes: Vec<u8> = column(row, 1)?;
    let encoding: i16 = column(row, 2)?;
    let stamp: Vec<u8> = column(row, 3)?;
    let expires_at: Option<i64> = column(row, 4)?;
    let stamp: [u8; 10] = stamp.try_into().map_err(|s: Vec<u8>| {
        corrupt(format!(
            "versionstamp of {} bytes instead of 10 at key {}",
            s.len(),
            hex_key(&key)
        ))
    })?;
    let value = KvValue::decode(bytes, i64::from(encoding))
        .map_err(|e| corrupt(format!("value at key {}: {e}", hex_key(&key))))?;
    let entry = StoredEntry {
        value,
        versionstamp: Versionstamp::from_bytes(stamp),
        expires_at: expires_at.map(time).transpose()?,
    };
    Ok((key, entry))
}

/// An entry row as a read returns it.
pub(crate) fn entry(row: &Row) -> Result<KvEntry, KvError> {
    let (key, stored) = stored_entry(row)?;
    Ok(KvEntry::from_stored(key, stored))
}

fn hex_key(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Entries to store, as the parallel arrays the upsert statement takes.
#[derive(Debug, Default)]
pub(crate) struct EntryColumns {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) values: Vec<Vec<u8>>,
    pub(crate) encodings: Vec<i16>,
    pub(crate) stamps: Vec<Vec<u8>>,
    pub(crate) expiries: Vec<Option<i64>>,
}

impl EntryColumns {
    /// Adds one entry.
    pub(crate) fn push(&mut self, key: &[u8], entry: &StoredEntry) {
        let (bytes, encoding) = entry.value.encode();
        self.keys.push(key.to_vec());
        self.values.push(bytes.to_vec());
        // Ids are 1, 2, 3 (open_deno_kv_engine_kit::ValueEncoding).
        self.encodings.push(encoding.id() as i16);
        self.stamps.push(entry.versionstamp.as_bytes().to_vec());
        self.expiries.push(entry.expires_at.map(ms));
    }

    /// Whether there is nothing to store.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A message row, with its lease if a consumer holds it.
#[derive(Debug, Clone)]
pub(crate) struct StoredMessage {
    pub(crate) message: QueuedMessage,
    /// The lease token and its end, while a consumer holds the message.
    pub(crate) lease: Option<(Uuid, DateTime<Utc>)>,
}

/// A message row (`id, ready_at, payload, keys_if_undelivered, backoff_ms, lease, deadline`).
pub(crate) fn message(row: &Row) -> Result<StoredMessage, KvError> {
    let id: Uuid = column(row, 0)?;
    let ready_at: i64 = column(row, 1)?;
    let payload: Vec<u8> = column(row, 2)?;
    let keys_if_undelivered: Vec<Vec<u8>> = column(row, 3)?;
    let backoff: Vec<i32> = column(row, 4)?;
    let lease: Option<Uuid> = column(row, 5)?;
    let deadline: Option<i64> = column(row, 6)?;
    let backoff_schedule = backoff
        .into_iter()
        .map(|ms| {
            u32::try_from(ms)
                .map_err(|_| corrupt(format!("negative back-off {ms} in message {id}")))
        })
        .collect::<Result<_, _>>()?;
    let lease = match (lease, deadline) {
        (Some(token), Some(deadline)) => Some((token, time(deadline)?)),
        _ => None,
    };
    Ok(StoredMessage {
        message: QueuedMessage {
            id,
            payload,
            ready_at: time(ready_at)?,
            keys_if_undelivered,
            backoff_schedule,
        },
        lease,
    })
}

/// A back-off schedule as the table stores it (`integer[]`); intervals are at most Deno's limit,
/// far below `i32::MAX`, and saturate if not.
pub(crate) fn backoff_column(schedule: &[u32]) -> Vec<i32> {
    schedule
        .iter()
        .map(|&ms| i32::try_from(ms).unwrap_or(i32::MAX))
        .collect()
}

//! The byte layouts of everything open-deno-kv-redb stores, in one place.
//!
//! All multi-byte integers are big-endian, so that byte order (what redb sorts `&[u8]` keys by)
//! is numeric order wherever an encoding is part of a key.
//!
//! | what | layout |
//! |---|---|
//! | time | 8 bytes of Unix seconds with the sign bit flipped, then 4 bytes of nanoseconds: sorts chronologically, exact to the nanosecond |
//! | entry record | encoding id (1 byte: 1 V8, 2 u64, 3 bytes), versionstamp (10), has-expiry (1: 0 or 1), expiry time (12, zeros when none), then the value bytes (a u64 as Deno stores it: 8 bytes little-endian) |
//! | expiry index key | expiry time (12), then the encoded key |
//! | ready queue key | ready time (12), then the message id (16) |
//! | running queue key | the message id (16) |
//! | message body | payload length (4), payload, interval count (4), each interval in ms (4), key count (4), each key as length (4) and bytes |
//! | running record | deadline (12), ready time (12), then the message body |
//!
//! Decoding never panics: anything that does not fit is reported as [`KvError::Corrupt`].

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{KvError, KvValue, PageBuilder, StoredEntry, Versionstamp};
use uuid::Uuid;

use crate::error::corrupt;

/// Bytes of an encoded time.
pub(crate) const TIME_LEN: usize = 12;
/// Bytes of a message id.
pub(crate) const ID_LEN: usize = 16;
/// Bytes of an entry record before the value.
const ENTRY_HEADER_LEN: usize = 1 + 10 + 1 + TIME_LEN;

/// Encodes a time so that byte order is chronological order.
pub(crate) fn encode_time(at: DateTime<Utc>) -> [u8; TIME_LEN] {
    let secs = at.timestamp().cast_unsigned() ^ (1 << 63);
    let mut out = [0u8; TIME_LEN];
    out[..8].copy_from_slice(&secs.to_be_bytes());
    out[8..].copy_from_slice(&at.timestamp_subsec_nanos().to_be_bytes());
    out
}

/// Decodes the time at the start of `bytes`.
pub(crate) fn decode_time(bytes: &[u8]) -> Result<DateTime<Utc>, KvError> {
    let (secs, rest) = split_array::<8>(bytes, "time")?;
    let (nanos, _) = split_array::<4>(rest, "time")?;
    let secs = (u64::from_be_bytes(secs) ^ (1 << 63)).cast_signed();
    let nanos = u32::from_be_bytes(nanos);
    DateTime::from_timestamp(secs, nanos)
        .ok_or_else(|| corrupt(format!("stored time {secs}s {nanos}ns is out of range")))
}

fn split_array<'a, const N: usize>(
    bytes: &'a [u8],
    what: &str,
) -> Result<([u8; N], &'a [u8]), KvError> {
    match bytes.split_first_chunk::<N>() {
        Some((head, rest)) => Ok((*head, rest)),
        None => Err(corrupt(format!(
            "{what}: expected {N} more bytes, found {}",
            bytes.len()
        ))),
    }
}

/// The stored form of an entry.
pub(crate) fn encode_entry(entry: &StoredEntry) -> Vec<u8> {
    let value: &[u8] = match &entry.value {
        KvValue::V8(bytes) | KvValue::Bytes(bytes) => bytes,
        KvValue::U64(_) => &[],
    };
    let mut out = Vec::with_capacity(ENTRY_HEADER_LEN + value.len().max(8));
    // Ids are 1, 2 and 3: they fit a byte.
    out.push(u8::try_from(entry.value.encoding().id()).unwrap_or(0));
    out.extend_from_slice(entry.versionstamp.as_bytes());
    match entry.expires_at {
        Some(at) => {
            out.push(1);
            out.extend_from_slice(&encode_time(at));
        }
        None => {
            out.push(0);
            out.extend_from_slice(&[0; TIME_LEN]);
        }
    }
    match &entry.value {
        KvValue::U64(n) => out.extend_from_slice(&n.to_le_bytes()),
        _ => out.extend_from_slice(value),
    }
    out
}

/// A stored entry record, decoded without copying its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRecord<'a> {
    encoding: u8,
    /// The versionstamp of the commit that wrote the entry.
    pub(crate) versionstamp: Versionstamp,
    /// When the entry expires, if ever.
    pub(crate) expires_at: Option<DateTime<Utc>>,
    value: &'a [u8],
}

impl<'a> EntryRecord<'a> {
    /// Reads a record's header; the value is decoded by [`EntryRecord::value`].
    pub(crate) fn decode(bytes: &'a [u8]) -> Result<Self, KvError> {
        let (header, value) = split_array::<ENTRY_HEADER_LEN>(bytes, "entry record")?;
        let mut stamp = [0u8; 10];
        stamp.copy_from_slice(&header[1..11]);
        let expires_at = match header[11] {
            0 => None,
            1 => Some(decode_time(&header[12..])?),
            other => return Err(corrupt(format!("entry record: expiry flag {other}"))),
        };
        Ok(EntryRecord {
            encoding: header[0],
            versionstamp: Versionstamp::from_bytes(stamp),
            expires_at,
            value,
        })
    }

    /// The length of the encoded value (what [`KvValue::encoded_len`] gives for it), without
    /// decoding or copying it.
    pub(crate) fn value_len(&self) -> usize {
        self.value.len()
    }

    /// The value, copied out of the record.
    pub(crate) fn value(&self) -> Result<KvValue, KvError> {
        Ok(KvValue::decode(
            self.value.to_vec(),
            i64::from(self.encoding),
        )?)
    }

    /// Adds the entry stored under `key` to a read's page, its bytes copied into the page.
    pub(crate) fn push_onto(&self, page: &mut PageBuilder, key: &[u8]) -> Result<(), KvError> {
        page.push(
            key,
            self.value,
            i64::from(self.encoding),
            self.versionstamp,
            self.expires_at,
        )?;
        Ok(())
    }

    /// The whole entry, as open-deno-kv-model's write path sees it.
    pub(crate) fn to_stored(self) -> Result<StoredEntry, KvError> {
        Ok(StoredEntry {
            value: self.value()?,
            versionstamp: self.versionstamp,
            expires_at: self.expires_at,
        })
    }
}

/// The expiry index key of `key` expiring at `at`.
pub(crate) fn expiry_key(at: DateTime<Utc>, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TIME_LEN + key.len());
    out.extend_from_slice(&encode_time(at));
    out.extend_from_slice(key);
    out
}

/// The ready-queue key of a message: due time, then id.
pub(crate) fn ready_key(at: DateTime<Utc>, id: Uuid) -> [u8; TIME_LEN + ID_LEN] {
    let mut out = [0u8; TIME_LEN + ID_LEN];
    out[..TIME_LEN].copy_from_slice(&encode_time(at));
    out[TIME_LEN..].copy_from_slice(id.as_bytes());
    out
}

/// Splits a ready-queue key into due time and id.
pub(crate) fn decode_ready_key(bytes: &[u8]) -> Result<(DateTime<Utc>, Uuid), KvError> {
    let at = decode_time(bytes)?;
    let id = decode_id(&bytes[TIME_LEN.min(bytes.len())..])?;
    Ok((at, id))
}

/// Reads a 16-byte message id.
pub(crate) fn decode_id(bytes: &[u8]) -> Result<Uuid, KvError> {
    let id: [u8; ID_LEN] = bytes
        .try_into()
        .map_err(|_| corrupt(format!("message id of {} bytes", bytes.len())))?;
    Ok(Uuid::from_bytes(id))
}

/// The stored body of a message: payload, remaining back-off intervals, dead-letter keys.
pub(crate) fn encode_message_body(message: &QueuedMessage) -> Vec<u8> {
    let keys_len: usize = message
        .keys_if_undelivered
        .iter()
        .map(|k| 4 + k.len())
        .sum();
    let mut out = Vec::with_capacity(
        12 + message.payload.len() + 4 * message.backoff_schedule.len() + keys_len,
    );
    push_bytes(&mut out, &message.payload);
    push_len(&mut out, message.backoff_schedule.len());
    for interval in &message.backoff_schedule {
        out.extend_from_slice(&interval.to_be_bytes());
    }
    push_len(&mut out, message.keys_if_undelivered.len());
    for key in &message.keys_if_undelivered {
        push_bytes(&mut out, key);
    }
    out
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    // Payloads, schedules and key lists are bounded by Deno's limits, far below 4 GiB.
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    push_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads a message body back into a message with the given id and ready time.
pub(crate) fn decode_message_body(
    bytes: &[u8],
    id: Uuid,
    ready_at: DateTime<Utc>,
) -> Result<QueuedMessage, KvError> {
    let mut reader = Reader { bytes };
    let payload = reader.bytes("payload")?.to_vec();
    let intervals = reader.len("backoff schedule")?;
    let mut backoff_schedule = Vec::with_capacity(intervals.min(64));
    for _ in 0..intervals {
        backoff_schedule.push(u32::from_be_bytes(reader.array::<4>("backoff interval")?));
    }
    let keys = reader.len("keys_if_undelivered")?;
    let mut keys_if_undelivered = Vec::with_capacity(keys.min(64));
    for _ in 0..keys {
        keys_if_undelivered.push(reader.bytes("undelivered key")?.to_vec());
    }
    if !reader.bytes.is_empty() {
        return Err(corrupt(format!(
            "message body: {} trailing bytes",
            reader.bytes.len()
        )));
    }
    Ok(QueuedMessage {
        id,
        payload,
        ready_at,
        keys_if_undelivered,
        backoff_schedule,
    })
}

/// The running-queue record of a message handed out until `deadline`.
pub(crate) fn encode_running(deadline: DateTime<Utc>, message: &QueuedMessage) -> Vec<u8> {
    let body = encode_message_body(message);
    let mut out = Vec::with_capacity(2 * TIME_LEN + body.len());
    out.extend_from_slice(&encode_time(deadline));
    out.extend_from_slice(&encode_time(message.ready_at));
    out.extend_from_slice(&body);
    out
}

/// Reads a running-queue record: the deadline and the message.
pub(crate) fn decode_running(
    bytes: &[u8],
    id: Uuid,
) -> Result<(DateTime<Utc>, QueuedMessage), KvError> {
    let deadline = decode_time(bytes)?;
    let rest = bytes.get(TIME_LEN..).unwrap_or_default();
    let ready_at = decode_time(rest)?;
    let body = rest.get(TIME_LEN..).unwrap_or_default();
    Ok((deadline, decode_message_body(body, id, ready_at)?))
}

/// Reads length-prefixed fields off the front of a byte slice.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], KvError> {
        let (head, rest) = split_array::<N>(self.bytes, what)?;
        self.bytes = rest;
        Ok(head)
    }

    fn len(&mut self, what: &str) -> Result<usize, KvError> {
        let n = u32::from_be_bytes(self.array::<4>(what)?);
        usize::try_from(n).map_err(|_| corrupt(format!("{what}: length {n}")))
    }

    fn bytes(&mut self, what: &str) -> Result<&'a [u8], KvError> {
        let n = self.len(what)?;
        if n > self.bytes.len() {
            return Err(corrupt(format!(
                "{what}: length {n} but only {} bytes left",
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, nanos: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, nanos).unwrap()
    }

    #[test]
    fn times_round_trip_and_sort_chronologically() {
        let times = [
            at(-86_400, 5),
            at(-1, 999_999_999),
            at(0, 0),
            at(0, 1),
            at(1_704_067_200, 500_000_000),
            at(4_102_444_800, 0),
        ];
        for pair in times.windows(2) {
            assert!(encode_time(pair[0]) < encode_time(pair[1]), "{pair:?}");
        }
        for t in times {
            assert_eq!(decode_time(&encode_time(t)).unwrap(), t);
        }
        assert!(decode_time(&[0; 5]).is_err());
    }

    #[test]
    fn entries_round_trip_with_and_without_expiry() {
        for (value, expires_at) in [
            (KvValue::U64(u64::MAX), None),
            (KvValue::Bytes(vec![].into()), Some(at(1_704_067_200, 1))),
            (KvValue::V8(vec![0xff, 0x0f, b'"', 1, b'x'].into()), None),
        ] {
            let entry = StoredEntry {
                value,
                versionstamp: Versionstamp::from_version(42, 0),
                expires_at,
            };
            let bytes = encode_entry(&entry);
            assert_eq!(
                EntryRecord::decode(&bytes).unwrap().to_stored().unwrap(),
                entry
            );
        }
        assert!(EntryRecord::decode(&[1; 10]).is_err());
        let mut bad_flag = encode_entry(&StoredEntry {
            value: KvValue::U64(1),
            versionstamp: Versionstamp::ZERO,
            expires_at: None,
        });
        bad_flag[11] = 7;
        assert!(EntryRecord::decode(&bad_flag).is_err());
    }

    #[test]
    fn messages_round_trip_and_truncation_is_corrupt() {
        let message = QueuedMessage::new(
            vec![1, 2, 3],
            at(1_704_067_200, 0),
            vec![vec![2, b'a', 0], vec![]],
            vec![100, 1_000],
        );
        let record = encode_running(at(1_704_067_205, 0), &message);
        let (deadline, back) = decode_running(&record, message.id).unwrap();
        assert_eq!(deadline, at(1_704_067_205, 0));
        assert_eq!(back, message);
        for cut in 0..record.len() {
            assert!(decode_running(&record[..cut], message.id).is_err(), "{cut}");
        }
        let key = ready_key(message.ready_at, message.id);
        assert_eq!(
            decode_ready_key(&key).unwrap(),
            (message.ready_at, message.id)
        );
    }
}

//! The bytes of a [`ChangeRecord`], as every engine stores them.
//!
//! One layout for all engines, so that a log is read the same way wherever it is kept. Integers
//! are little-endian; `bytes` is a `u32` length then that many bytes; `time` is an `i64` of
//! seconds since the Unix epoch then a `u32` of nanoseconds (exact, whatever the engine's own
//! precision):
//!
//! ```text
//! record  = 0x02 (layout version)  database[16]  versionstamp[10]  previous[10]  time
//!           u32 ranges    { bytes start  bytes end }
//!           u32 writes    { bytes key  0x00 (deleted) | 0x01 entry }
//!           u32 enqueued  { message }
//! entry   = u8 encoding (ValueEncoding::id)  bytes value  versionstamp[10]
//!           0x00 (no expiry) | 0x01 time
//! message = id[16]  bytes payload  time (ready at)
//!           u32 { bytes key }  (keys if undelivered)
//!           u32 { u32 ms }     (back-off schedule left)
//! ```
//!
//! `database` is the 16 bytes of the [`crate::DatabaseId`] the record was made in. Layout 1 is the
//! same without it: records written before databases had identities, still read (their database
//! is `None`), and written for a record without one, so that such a record keeps its bytes.
//!
//! A record that ends early, has bytes after its end, or holds an unknown tag, encoding or layout
//! version is refused as [`KvError::Corrupt`]: a log that does not decode is reported, never
//! replayed in part.
//!
//! A record's end is known from its own bytes, so records can also be stored back to back, as
//! an engine that keeps a commit group's records in one place does (`records = record
//! { record | continued }`, read by [`decode_all`]); one record stored alone is the same bytes
//! either way. A record that follows another of the same database and names it as its previous
//! commit may be stored *continued*, without what the one before it already says:
//!
//! ```text
//! continued = 0x03  versionstamp[10]  time  (ranges, writes and enqueued as in a record, with
//!             every count and length a varint instead of a u32, and an entry stored with the
//!             commit's own versionstamp as  0x02 entry-without-it)
//! entry-without-it = u8 encoding  bytes value  0x00 | 0x01 time
//! varint    = LEB128: 7 bits a byte, low first, the high bit set on all but the last
//! ```
//!
//! Its database is the record before it's, its previous commit that record's versionstamp. A
//! continued record cannot come first, nor be read alone ([`decode`] refuses layout 3).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::ChangeRecord;
use crate::queue::QueuedMessage;
use crate::{
    DatabaseId, KeyRange, KvError, KvValue, Mutation, MutationKind, StagedCommit, StoredEntry,
    Versionstamp,
};

/// The layout this module writes: with the record's database.
const LAYOUT: u8 = 2;

/// The layout of records without a database (written before identities).
const LAYOUT_WITHOUT_DATABASE: u8 = 1;

/// The layout of a record continuing the one before it (see the module documentation).
const LAYOUT_CONTINUED: u8 = 3;

/// The database and versionstamp of the record just appended: what a record continuing it
/// leaves out.
pub(super) type Before = (Option<DatabaseId>, Versionstamp);

pub(super) fn encode(record: &ChangeRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(80);
    encode_into(record, None, &mut out);
    out
}

/// Appends the record's bytes to `out`: continued when `before` is the record appended just before
/// it, of the same database, and its previous commit.
pub(super) fn encode_into(record: &ChangeRecord, before: Option<Before>, out: &mut Vec<u8>) {
    let continued = put_header(
        out,
        before,
        record.database,
        record.versionstamp,
        record.previous,
        record.at,
    );
    let changes = &record.changes;
    put_len(out, continued, changes.deleted_ranges.len());
    for range in &changes.deleted_ranges {
        put_bytes(out, continued, &range.start);
        put_bytes(out, continued, &range.end);
    }
    put_len(out, continued, changes.writes.len());
    for (key, state) in &changes.writes {
        put_bytes(out, continued, key);
        match state {
            None => out.push(0),
            Some(entry) => put_entry(out, entry, continued.then_some(record.versionstamp)),
        }
    }
    put_len(out, continued, changes.enqueued.len());
    for message in &changes.enqueued {
        put_message(out, continued, message);
    }
}

/// Appends the record of a committed write that only sets and deletes keys (see
/// [`super::PlainWrite`]), built from the write itself: the same bytes as [`encode_into`] of the
/// record whose changes the write staged. Keys in order, each once with its last mutation's
/// state, as a [`StagedCommit`] keeps them.
pub(super) fn encode_plain_into(
    out: &mut Vec<u8>,
    before: Option<Before>,
    database: Option<DatabaseId>,
    versionstamp: Versionstamp,
    previous: Versionstamp,
    at: DateTime<Utc>,
    mutations: &[Mutation],
) {
    let continued = put_header(out, before, database, versionstamp, previous, at);
    let own = continued.then_some(versionstamp);
    put_len(out, continued, 0); // no ranges deleted
    let put_write = |out: &mut Vec<u8>, mutation: &Mutation| {
        put_bytes(out, continued, &mutation.key);
        match &mutation.kind {
            MutationKind::Set(value) => {
                put_entry_parts(out, value, versionstamp, mutation.expire_at, own);
            }
            // Only sets and deletes reach here (`PlainWrite::of`).
            _ => out.push(0),
        }
    };
    if let [mutation] = mutations {
        put_len(out, continued, 1);
        put_write(out, mutation);
    } else {
        // A stable sort keeps a key's mutations in write order: the last of each run is its
        // final state.
        let mut ordered: Vec<&Mutation> = mutations.iter().collect();
        ordered.sort_by(|a, b| a.key.cmp(&b.key));
        let last_of_key = |i: usize| {
            ordered
                .get(i + 1)
                .is_none_or(|next| next.key != ordered[i].key)
        };
        let finals: Vec<&Mutation> = (0..ordered.len())
            .filter(|&i| last_of_key(i))
            .map(|i| ordered[i])
            .collect();
        put_len(out, continued, finals.len());
        for mutation in finals {
            put_write(out, mutation);
        }
    }
    put_len(out, continued, 0); // nothing enqueued
}

/// A record's header; continued (and `true`) when `before` is its database and previous commit.
fn put_header(
    out: &mut Vec<u8>,
    before: Option<Before>,
    database: Option<DatabaseId>,
    versionstamp: Versionstamp,
    previous: Versionstamp,
    at: DateTime<Utc>,
) -> bool {
    if before == Some((database, previous)) {
        out.push(LAYOUT_CONTINUED);
        out.extend_from_slice(versionstamp.as_bytes());
        put_time(out, at);
        return true;
    }
    match database {
        Some(database) => {
            out.push(LAYOUT);
            out.extend_from_slice(database.as_bytes());
        }
        None => out.push(LAYOUT_WITHOUT_DATABASE),
    }
    out.extend_from_slice(versionstamp.as_bytes());
    out.extend_from_slice(previous.as_bytes());
    put_time(out, at);
    false
}

pub(super) fn decode(bytes: &[u8]) -> Result<ChangeRecord, KvError> {
    let mut input = Reader {
        bytes,
        at: 0,
        varints: false,
    };
    let record = input.record(None)?;
    if input.at != bytes.len() {
        return Err(corrupt(format!(
            "{} bytes after the end",
            bytes.len() - input.at
        )));
    }
    Ok(record)
}

/// Records stored back to back, in their order; none is an error (there is nothing to read).
pub(super) fn decode_all(bytes: &[u8]) -> Result<Vec<ChangeRecord>, KvError> {
    if bytes.is_empty() {
        return Err(corrupt("it holds no record".to_owned()));
    }
    let mut input = Reader {
        bytes,
        at: 0,
        varints: false,
    };
    let mut records: Vec<ChangeRecord> = Vec::new();
    while input.at < bytes.len() {
        let before = records.last().map(|r| (r.database, r.versionstamp));
        records.push(input.record(before)?);
    }
    Ok(records)
}

impl Reader<'_> {
    /// One record, from where the reader stands to the record's end; `before`, the record read
    /// just before it in the same bytes, which a continued record continues.
    fn record(&mut self, before: Option<Before>) -> Result<ChangeRecord, KvError> {
        let layout = self.u8()?;
        let (database, versionstamp, previous) = match (layout, before) {
            (LAYOUT, _) => {
                let database = Some(DatabaseId::from_bytes(self.array()?));
                (database, self.versionstamp()?, self.versionstamp()?)
            }
            (LAYOUT_WITHOUT_DATABASE, _) => (None, self.versionstamp()?, self.versionstamp()?),
            (LAYOUT_CONTINUED, Some((database, previous))) => {
                (database, self.versionstamp()?, previous)
            }
            (LAYOUT_CONTINUED, None) => {
                return Err(corrupt(
                    "a continued record (layout 3) with no record before it".to_owned(),
                ));
            }
            (layout, _) => {
                return Err(corrupt(format!(
                    "unknown layout {layout} (this version reads {LAYOUT_WITHOUT_DATABASE}, \
                     {LAYOUT} and {LAYOUT_CONTINUED})"
                )));
            }
        };
        let own = (layout == LAYOUT_CONTINUED).then_some(versionstamp);
        self.varints = own.is_some();
        let at = self.time()?;
        let mut changes = StagedCommit::default();
        for _ in 0..self.len()? {
            let start = self.bytes()?;
            let end = self.bytes()?;
            changes.deleted_ranges.push(KeyRange::new(start, end));
        }
        let mut writes = BTreeMap::new();
        for _ in 0..self.len()? {
            let key = self.bytes()?;
            let state = match (self.u8()?, own) {
                (0, _) => None,
                (1, _) => Some(self.entry(None)?),
                (2, Some(own)) => Some(self.entry(Some(own))?),
                (tag, _) => return Err(corrupt(format!("unknown key state {tag}"))),
            };
            writes.insert(key, state);
        }
        changes.writes = writes;
        for _ in 0..self.len()? {
            changes.enqueued.push(self.message()?);
        }
        Ok(ChangeRecord {
            database,
            versionstamp,
            previous,
            at,
            changes,
        })
    }
}

fn corrupt(what: String) -> KvError {
    KvError::Corrupt {
        message: format!("a change log record does not decode: {what}"),
    }
}

/// A count or a length: a varint in a continued record, else a `u32`.
fn put_len(out: &mut Vec<u8>, varint: bool, len: usize) {
    if varint {
        let mut rest = len as u64;
        while rest >= 0x80 {
            out.push((rest & 0x7f) as u8 | 0x80);
            rest >>= 7;
        }
        out.push(rest as u8);
        return;
    }
    // Keys, values and payloads are bounded by Deno's limits far below 4 GiB, and so are the
    // counts of one commit; a longer one cannot be committed in the first place.
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, varint: bool, bytes: &[u8]) {
    put_len(out, varint, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_time(out: &mut Vec<u8>, at: DateTime<Utc>) {
    out.extend_from_slice(&at.timestamp().to_le_bytes());
    out.extend_from_slice(&at.timestamp_subsec_nanos().to_le_bytes());
}

/// An entry with its state tag: 2 and without its versionstamp when that is `own` (the
/// continued record's), else 1.
fn put_entry(out: &mut Vec<u8>, entry: &StoredEntry, own: Option<Versionstamp>) {
    put_entry_parts(out, &entry.value, entry.versionstamp, entry.expires_at, own);
}

fn put_entry_parts(
    out: &mut Vec<u8>,
    value: &KvValue,
    versionstamp: Versionstamp,
    expires_at: Option<DateTime<Utc>>,
    own: Option<Versionstamp>,
) {
    let stamped = own != Some(versionstamp);
    out.push(if stamped { 1 } else { 2 });
    // Encoding ids are 1 to 3 (see `ValueEncoding::id`).
    out.push(u8::try_from(value.encoding().id()).unwrap_or(u8::MAX));
    // The value's stored bytes, as `KvValue::encode` gives them, without a copy of them first.
    match value {
        KvValue::V8(bytes) | KvValue::Bytes(bytes) => put_bytes(out, own.is_some(), bytes),
        KvValue::U64(n) => put_bytes(out, own.is_some(), &n.to_le_bytes()),
    }
    if stamped {
        out.extend_from_slice(versionstamp.as_bytes());
    }
    match expires_at {
        None => out.push(0),
        Some(at) => {
            out.push(1);
            put_time(out, at);
        }
    }
}

fn put_message(out: &mut Vec<u8>, varint: bool, message: &QueuedMessage) {
    out.extend_from_slice(message.id.as_bytes());
    put_bytes(out, varint, &message.payload);
    put_time(out, message.ready_at);
    put_len(out, varint, message.keys_if_undelivered.len());
    for key in &message.keys_if_undelivered {
        put_bytes(out, varint, key);
    }
    put_len(out, varint, message.backoff_schedule.len());
    for ms in &message.backoff_schedule {
        out.extend_from_slice(&ms.to_le_bytes());
    }
}

/// Reads a record front to back, refusing to read past its end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Counts and lengths are varints (in a continued record).
    varints: bool,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], KvError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| corrupt(format!("it ends early, at byte {}", self.bytes.len())))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], KvError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn u8(&mut self) -> Result<u8, KvError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, KvError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A count or a length (see [`put_len`]).
    fn len(&mut self) -> Result<usize, KvError> {
        if !self.varints {
            return Ok(self.u32()? as usize);
        }
        let mut len: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds the 64th bit only: more would be bits lost, not a length.
            if shift == 63 && bits > 1 {
                break;
            }
            len |= bits << shift;
            if byte & 0x80 == 0 {
                return usize::try_from(len)
                    .map_err(|_| corrupt(format!("a length of {len} bytes")));
            }
        }
        Err(corrupt("a varint longer than 64 bits".to_owned()))
    }

    fn bytes(&mut self) -> Result<Vec<u8>, KvError> {
        let len = self.len()?;
        Ok(self.take(len)?.to_vec())
    }

    fn versionstamp(&mut self) -> Result<Versionstamp, KvError> {
        Ok(Versionstamp::from(self.array::<10>()?))
    }

    fn time(&mut self) -> Result<DateTime<Utc>, KvError> {
        let seconds = i64::from_le_bytes(self.array()?);
        let nanos = self.u32()?;
        DateTime::from_timestamp(seconds, nanos)
            .ok_or_else(|| corrupt(format!("time {seconds}s {nanos}ns is out of range")))
    }

    /// An entry; without its versionstamp when it is `own` (the continued record's, tag 2).
    fn entry(&mut self, own: Option<Versionstamp>) -> Result<StoredEntry, KvError> {
        let encoding = self.u8()?;
        let bytes = self.bytes()?;
        let value = KvValue::decode(bytes, i64::from(encoding))
            .map_err(|e| corrupt(format!("a value does not decode: {e}")))?;
        let versionstamp = match own {
            Some(own) => own,
            None => self.versionstamp()?,
        };
        let expires_at = match self.u8()? {
            0 => None,
            1 => Some(self.time()?),
            tag => return Err(corrupt(format!("unknown expiry tag {tag}"))),
        };
        Ok(StoredEntry {
            value,
            versionstamp,
            expires_at,
        })
    }

    fn message(&mut self) -> Result<QueuedMessage, KvError> {
        let id = Uuid::from_bytes(self.array()?);
        let payload = self.bytes()?;
        let ready_at = self.time()?;
        let keys_if_undelivered = (0..self.len()?)
            .map(|_| self.bytes())
            .collect::<Result<_, _>>()?;
        let backoff_schedule = (0..self.len()?)
            .map(|_| self.u32())
            .collect::<Result<_, _>>()?;
        Ok(QueuedMessage {
            id,
            payload,
            ready_at,
            keys_if_undelivered,
            backoff_schedule,
        })
    }
}

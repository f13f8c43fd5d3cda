//! The wire shapes of `snapshot/1` (export and import of a whole store) and `change-log/1`
//! (the change log's setting, status and records); the [parent module](super) describes the
//! protocol. Both sides use them.
//!
//! A snapshot travels as a stream of [`SnapshotFrame`]s, each inside the length prefix of
//! [`crate::frames`]: a header (the snapshot's versionstamp and database), batches of items, and an end frame
//! with the counts, so that a stream cut anywhere is an error, never a short snapshot. A batch's
//! items are carried in the change log's record layout ([`ChangeRecord::encode`]): the entries,
//! in key order, as the record's `writes` (never a deletion), then the messages as its
//! `enqueued`; its versionstamp is the snapshot's, its other fields are zero.
//!
//! Decoders take untrusted bytes and never panic: anything malformed is a [`ProtocolError`].
//!
//! ```
//! use open_deno_kv_connect::ext::{SnapshotReader, SnapshotWriter};
//! use open_deno_kv_model::{KvEntry, KvValue, SnapshotItem, Versionstamp};
//! let stamp = Versionstamp::from_version(9, 0);
//! let entry = SnapshotItem::Entry(KvEntry {
//!     key: vec![2, b'a', 0].into(),
//!     value: KvValue::U64(1),
//!     versionstamp: Versionstamp::from_version(3, 0),
//!     expires_at: None,
//! });
//! let mut writer = SnapshotWriter::new(stamp);
//! let database = open_deno_kv_model::DatabaseId::random();
//! writer.of_database(Some(database));
//! let mut frames = vec![writer.header()];
//! frames.extend(writer.push(entry.clone()));
//! frames.extend(writer.finish());
//! let mut reader = SnapshotReader::default();
//! let mut items = Vec::new();
//! for frame in frames {
//!     items.extend(reader.push(frame).unwrap());
//! }
//! assert!(reader.is_complete());
//! assert_eq!(reader.versionstamp(), Some(stamp));
//! assert_eq!(reader.database(), Some(database));
//! assert_eq!(items, vec![entry]);
//! ```

use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_model::change_log::{ChangeLogStatus, ChangeRecord, LogMark};
use open_deno_kv_model::{
    DatabaseId, ImportSummary, KvEntry, SnapshotItem, StagedCommit, StoredEntry, Versionstamp,
};
use prost::Message;

use crate::error::ProtocolError;

/// The encoded size of items a [`SnapshotWriter`] gathers in one batch before it sends it: far
/// below a server's request body limit (the most a receiver buffers for one frame), and one
/// item always fits (Deno's limits keep a key and value under 70 KiB, a message likewise).
pub const SNAPSHOT_BATCH_BYTES: usize = 256 * 1024;

/// The request of `snapshot/export` (an empty body asks for the whole snapshot).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportRequest {
    /// Leave the entries out: only the queued messages travel (what a client lists the queue
    /// with, [`open_deno_kv_model::Backend::queued_messages`]). The server lists its queue
    /// rather than reading a snapshot, so the header's versionstamp is zero.
    #[prost(bool, tag = "1")]
    pub messages_only: bool,
}

/// One frame of a `snapshot/1` stream (export answer, import request body).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotFrame {
    /// The header, always the first frame and only there: the snapshot's versionstamp (10
    /// bytes).
    #[prost(bytes = "vec", optional, tag = "1")]
    pub versionstamp: Option<Vec<u8>>,
    /// A batch of items, in snapshot order, in the change log's record layout (module docs).
    #[prost(bytes = "vec", tag = "2")]
    pub batch: Vec<u8>,
    /// The end frame: the snapshot is complete. Nothing may follow it.
    #[prost(bool, tag = "3")]
    pub end: bool,
    /// In the end frame: how many entries the stream carried.
    #[prost(uint64, tag = "4")]
    pub entries: u64,
    /// In the end frame: how many messages the stream carried.
    #[prost(uint64, tag = "5")]
    pub messages: u64,
    /// An export that failed on the server's side after it started answering: the reason. The
    /// stream ends here, and the snapshot is not complete.
    #[prost(string, optional, tag = "6")]
    pub error: Option<String>,
    /// In the header: the database the snapshot is of (16 bytes,
    /// [`open_deno_kv_model::DatabaseId`]); absent when it names none.
    #[prost(bytes = "vec", optional, tag = "7")]
    pub database: Option<Vec<u8>>,
}

/// A database identity from the wire: 16 bytes.
fn database_from_wire(bytes: Option<Vec<u8>>) -> Result<Option<DatabaseId>, ProtocolError> {
    bytes
        .map(|bytes| {
            <[u8; 16]>::try_from(bytes.as_slice())
                .map(DatabaseId::from_bytes)
                .map_err(|_| ProtocolError::new("a database identity that is not 16 bytes"))
        })
        .transpose()
}

impl SnapshotFrame {
    /// The frame with its length prefix ([`crate::frames::encode_payload`]).
    pub fn to_payload(&self) -> Vec<u8> {
        crate::framing::encode_payload(&self.encode_to_vec())
    }

    /// The frame that ends an export whose source failed: the reason travels to the client.
    pub fn failure(reason: impl Into<String>) -> Self {
        SnapshotFrame {
            error: Some(reason.into()),
            ..Default::default()
        }
    }
}

/// The sending side of a snapshot stream: gathers items into batches of about
/// [`SNAPSHOT_BATCH_BYTES`] and counts them. Memory: one batch.
#[derive(Debug)]
pub struct SnapshotWriter {
    database: Option<DatabaseId>,
    versionstamp: Versionstamp,
    batch: StagedCommit,
    size: usize,
    summary: ImportSummary,
}

impl SnapshotWriter {
    /// A writer for a snapshot as of `versionstamp`, of no named database (see
    /// [`SnapshotWriter::of_database`]).
    pub fn new(versionstamp: Versionstamp) -> Self {
        SnapshotWriter {
            database: None,
            versionstamp,
            batch: StagedCommit::default(),
            size: 0,
            summary: ImportSummary::default(),
        }
    }

    /// Names the database the snapshot is of, in the header.
    pub fn of_database(&mut self, database: Option<DatabaseId>) {
        self.database = database;
    }

    /// The first frame.
    pub fn header(&self) -> SnapshotFrame {
        SnapshotFrame {
            versionstamp: Some(self.versionstamp.as_bytes().to_vec()),
            database: self.database.map(|id| id.as_bytes().to_vec()),
            ..Default::default()
        }
    }

    /// Takes one item; returns the batch frames it completes (when the batch is full).
    ///
    /// A batch carries its entries in key order and before its messages: an item that would
    /// not keep that order (out of order, which a valid snapshot never is) starts a new batch,
    /// so the stream keeps the order it was given and the receiver's order check sees it.
    pub fn push(&mut self, item: SnapshotItem) -> Vec<SnapshotFrame> {
        let mut frames = Vec::new();
        let breaks_order = match &item {
            SnapshotItem::Entry(entry) => {
                !self.batch.enqueued.is_empty()
                    || self
                        .batch
                        .writes
                        .last_key_value()
                        .is_some_and(|(last, _)| *last >= entry.key)
            }
            SnapshotItem::Message(_) => false,
        };
        if breaks_order {
            frames.push(self.flush());
        }
        self.summary.count(&item);
        match item {
            SnapshotItem::Entry(entry) => {
                self.size += entry.key.len() + entry.value.encode().0.len() + 32;
                // Entries come in strictly increasing key order, and before every message, so
                // the record's key-ordered map and separate message list keep the order.
                self.batch.writes.insert(
                    entry.key.to_vec(),
                    Some(StoredEntry {
                        value: entry.value,
                        versionstamp: entry.versionstamp,
                        expires_at: entry.expires_at,
                    }),
                );
            }
            SnapshotItem::Message(message) => {
                self.size += message.payload.len()
                    + message
                        .keys_if_undelivered
                        .iter()
                        .map(|k| k.len() + 4)
                        .sum::<usize>()
                    + message.backoff_schedule.len() * 4
                    + 48;
                self.batch.enqueued.push(message);
            }
        }
        if self.size >= SNAPSHOT_BATCH_BYTES {
            frames.push(self.flush());
        }
        frames
    }

    /// The batch gathered so far as a frame (empty batch: nothing to send).
    fn flush(&mut self) -> SnapshotFrame {
        self.size = 0;
        let record = ChangeRecord {
            database: None,
            versionstamp: self.versionstamp,
            previous: Versionstamp::ZERO,
            at: DateTime::<Utc>::UNIX_EPOCH,
            changes: std::mem::take(&mut self.batch),
        };
        SnapshotFrame {
            batch: record.encode(),
            ..Default::default()
        }
    }

    /// The last frames: the batch left, if any, then the end frame with the counts.
    pub fn finish(mut self) -> Vec<SnapshotFrame> {
        let mut frames = Vec::with_capacity(2);
        if !self.batch.writes.is_empty() || !self.batch.enqueued.is_empty() {
            frames.push(self.flush());
        }
        frames.push(SnapshotFrame {
            end: true,
            entries: self.summary.entries,
            messages: self.summary.messages,
            ..Default::default()
        });
        frames
    }
}

/// The receiving side of a snapshot stream: checks the frames' order (header first, end last,
/// nothing after it, the end's counts equal to the items received) and turns batches back
/// into items.
#[derive(Debug, Default)]
pub struct SnapshotReader {
    versionstamp: Option<Versionstamp>,
    database: Option<DatabaseId>,
    summary: ImportSummary,
    complete: bool,
}

impl SnapshotReader {
    /// The snapshot's versionstamp, once the header was read.
    pub fn versionstamp(&self) -> Option<Versionstamp> {
        self.versionstamp
    }

    /// The database the snapshot is of, as its header named it (`None` before the header, or
    /// when it names none).
    pub fn database(&self) -> Option<DatabaseId> {
        self.database
    }

    /// Whether the end frame was read (with the right counts).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// What was received so far.
    pub fn summary(&self) -> ImportSummary {
        self.summary
    }

    /// Decodes one frame's bytes and takes it.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Result<Vec<SnapshotItem>, ProtocolError> {
        let frame = SnapshotFrame::decode(bytes)
            .map_err(|e| ProtocolError::new(format!("invalid snapshot frame: {e}")))?;
        self.push(frame)
    }

    /// Takes one frame; returns the items it carries (none for the header and the end).
    pub fn push(&mut self, frame: SnapshotFrame) -> Result<Vec<SnapshotItem>, ProtocolError> {
        let bad = |what: String| ProtocolError::new(format!("invalid snapshot stream: {what}"));
        if self.complete {
            return Err(bad("a frame after the end".into()));
        }
        if let Some(reason) = frame.error {
            return Err(ProtocolError::new(format!(
                "the server's export failed: {reason}"
            )));
        }
        if let Some(stamp) = frame.versionstamp {
            if self.versionstamp.is_some() {
                return Err(bad("a second header".into()));
            }
            let stamp: [u8; 10] = stamp
                .try_into()
                .map_err(|_| bad("a versionstamp that is not 10 bytes".into()))?;
            if !frame.batch.is_empty() || frame.end {
                return Err(bad("a header with items".into()));
            }
            self.database = database_from_wire(frame.database).map_err(|e| bad(e.to_string()))?;
            self.versionstamp = Some(Versionstamp::from(stamp));
            return Ok(Vec::new());
        }
        let Some(versionstamp) = self.versionstamp else {
            return Err(bad("the stream does not start with its header".into()));
        };
        if frame.end {
            if !frame.batch.is_empty() {
                return Err(bad("an end frame with items".into()));
            }
            if (frame.entries, frame.messages) != (self.summary.entries, self.summary.messages) {
                return Err(bad(format!(
                    "{} entries and {} messages sent, {} and {} received",
                    frame.entries, frame.messages, self.summary.entries, self.summary.messages
                )));
            }
            self.complete = true;
            return Ok(Vec::new());
        }
        let record = ChangeRecord::decode(&frame.batch).map_err(|e| bad(e.to_string()))?;
        if record.versionstamp != versionstamp || !record.changes.deleted_ranges.is_empty() {
            return Err(bad("a batch that is not a snapshot's".into()));
        }
        let mut items = Vec::with_capacity(record.changes.writes.len());
        for (key, state) in record.changes.writes {
            let entry = state.ok_or_else(|| bad("a deletion in a snapshot".into()))?;
            items.push(SnapshotItem::Entry(KvEntry {
                key: key.into(),
                value: entry.value,
                versionstamp: entry.versionstamp,
                expires_at: entry.expires_at,
            }));
        }
        items.extend(
            record
                .changes
                .enqueued
                .into_iter()
                .map(SnapshotItem::Message),
        );
        if items.is_empty() {
            return Err(bad("an empty batch".into()));
        }
        items.iter().for_each(|item| self.summary.count(item));
        Ok(items)
    }
}

/// The answer of `snapshot/import`: [`ImportSummary`] on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ImportResponse {
    /// Entries written.
    #[prost(uint64, tag = "1")]
    pub entries: u64,
    /// Messages queued.
    #[prost(uint64, tag = "2")]
    pub messages: u64,
}

impl From<ImportSummary> for ImportResponse {
    fn from(summary: ImportSummary) -> Self {
        ImportResponse {
            entries: summary.entries,
            messages: summary.messages,
        }
    }
}

impl From<ImportResponse> for ImportSummary {
    fn from(response: ImportResponse) -> Self {
        ImportSummary {
            entries: response.entries,
            messages: response.messages,
        }
    }
}

/// The request of `change_log/configure`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureChangeLogRequest {
    /// The retention in milliseconds; absent switches the log off.
    #[prost(uint64, optional, tag = "1")]
    pub retention_ms: Option<u64>,
}

impl ConfigureChangeLogRequest {
    /// The client side.
    pub fn of(retention: Option<Duration>) -> Self {
        ConfigureChangeLogRequest {
            retention_ms: retention.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// The server side: the retention asked for (the backend checks it).
    pub fn retention(&self) -> Option<Duration> {
        self.retention_ms.map(Duration::from_millis)
    }
}

/// A [`LogMark`] on the wire: the time exact to the nanosecond.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LogMarkPb {
    /// The commit's versionstamp (10 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub versionstamp: Vec<u8>,
    /// Seconds since the Unix epoch.
    #[prost(int64, tag = "2")]
    pub seconds: i64,
    /// Nanoseconds within the second.
    #[prost(uint32, tag = "3")]
    pub nanos: u32,
}

/// The answer of `change_log/status`: [`ChangeLogStatus`] on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ChangeLogStatusResponse {
    /// The retention in milliseconds; absent when the log is off.
    #[prost(uint64, optional, tag = "1")]
    pub retention_ms: Option<u64>,
    /// How many records the log holds.
    #[prost(uint64, tag = "2")]
    pub records: u64,
    /// Its oldest record.
    #[prost(message, optional, tag = "3")]
    pub first: Option<LogMarkPb>,
    /// Its newest record.
    #[prost(message, optional, tag = "4")]
    pub last: Option<LogMarkPb>,
    /// The database whose log it is (16 bytes, [`open_deno_kv_model::DatabaseId`]).
    #[prost(bytes = "vec", optional, tag = "5")]
    pub database: Option<Vec<u8>>,
}

fn mark_to_pb(mark: LogMark) -> LogMarkPb {
    LogMarkPb {
        versionstamp: mark.versionstamp.as_bytes().to_vec(),
        seconds: mark.at.timestamp(),
        nanos: mark.at.timestamp_subsec_nanos(),
    }
}

fn mark_from_pb(mark: LogMarkPb) -> Result<LogMark, ProtocolError> {
    let bad = || ProtocolError::new("invalid change log mark");
    let stamp: [u8; 10] = mark.versionstamp.try_into().map_err(|_| bad())?;
    let at = DateTime::from_timestamp(mark.seconds, mark.nanos).ok_or_else(bad)?;
    Ok(LogMark {
        versionstamp: Versionstamp::from(stamp),
        at,
    })
}

impl From<ChangeLogStatus> for ChangeLogStatusResponse {
    fn from(status: ChangeLogStatus) -> Self {
        ChangeLogStatusResponse {
            retention_ms: status
                .retention
                .map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
            records: status.records,
            first: status.first.map(mark_to_pb),
            last: status.last.map(mark_to_pb),
            database: status.database.map(|id| id.as_bytes().to_vec()),
        }
    }
}

impl ChangeLogStatusResponse {
    /// The client side: the status it carries.
    pub fn into_status(self) -> Result<ChangeLogStatus, ProtocolError> {
        Ok(ChangeLogStatus {
            database: database_from_wire(self.database)?,
            retention: self.retention_ms.map(Duration::from_millis),
            records: self.records,
            first: self.first.map(mark_from_pb).transpose()?,
            last: self.last.map(mark_from_pb).transpose()?,
        })
    }
}

/// The request of `change_log/read`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadChangeLogRequest {
    /// The records after this commit (10 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub after: Vec<u8>,
    /// At most this many.
    #[prost(uint32, tag = "2")]
    pub limit: u32,
}

impl ReadChangeLogRequest {
    /// The client side.
    pub fn of(after: Versionstamp, limit: usize) -> Self {
        ReadChangeLogRequest {
            after: after.as_bytes().to_vec(),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        }
    }

    /// The server side: `(after, limit)`.
    pub fn decode_request(body: &[u8]) -> Result<(Versionstamp, usize), ProtocolError> {
        let request = ReadChangeLogRequest::decode(body)
            .map_err(|e| ProtocolError::new(format!("Request protobuf is invalid: {e}")))?;
        let after: [u8; 10] = request
            .after
            .try_into()
            .map_err(|_| ProtocolError::new("Invalid versionstamp: expected 10 bytes."))?;
        Ok((Versionstamp::from(after), request.limit as usize))
    }
}

/// The most bytes of records one `change_log/read` answer carries: a server stops before the
/// record that would pass it (always sending at least one), so an answer stays bounded
/// whatever the commits' sizes. A reader asks again after the last record it got, as it does
/// for a full page.
pub const CHANGE_LOG_READ_BYTES: usize = 16 * 1024 * 1024;

/// The answer of `change_log/read`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadChangeLogResponse {
    /// The records, in commit order, each as [`ChangeRecord::encode`] gives it.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub records: Vec<Vec<u8>>,
}

impl ReadChangeLogResponse {
    /// The server side: the records, cut at [`CHANGE_LOG_READ_BYTES`] (at least one).
    pub fn of(records: &[ChangeRecord]) -> Self {
        let mut out = Vec::new();
        let mut size = 0;
        for record in records {
            let bytes = record.encode();
            if !out.is_empty() && size + bytes.len() > CHANGE_LOG_READ_BYTES {
                break;
            }
            size += bytes.len();
            out.push(bytes);
        }
        ReadChangeLogResponse { records: out }
    }

    /// The client side: the records, checked to follow `after` in strictly increasing order
    /// and to number no more than `limit`.
    pub fn into_records(
        self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, ProtocolError> {
        if self.records.len() > limit {
            return Err(ProtocolError::new("more change log records than asked for"));
        }
        let mut last = after;
        let mut records = Vec::with_capacity(self.records.len());
        for bytes in self.records {
            let record =
                ChangeRecord::decode(&bytes).map_err(|e| ProtocolError::new(e.to_string()))?;
            if record.versionstamp <= last {
                return Err(ProtocolError::new("change log records out of order"));
            }
            last = record.versionstamp;
            records.push(record);
        }
        Ok(records)
    }
}

/// Where a `snapshot/1` stream's items come from, a frame at a time: an export's answer on the
/// client, an import's request body on the server. [`snapshot_items`] turns it into the item
/// stream a [`open_deno_kv_model::Snapshot`] carries.
pub trait SnapshotBatches: Send + 'static {
    /// Whether the end frame was read ([`SnapshotReader::is_complete`]): the stream then ends.
    fn ended(&self) -> bool;

    /// The items of the next frame (none for a frame that carries none); an error ends the
    /// stream with it.
    fn next_batch(
        &mut self,
    ) -> impl std::future::Future<Output = Result<Vec<SnapshotItem>, open_deno_kv_model::KvError>> + Send;
}

/// The items of `batches`, one by one in order, until its end frame; after an error, nothing.
pub fn snapshot_items<B: SnapshotBatches>(batches: B) -> open_deno_kv_model::SnapshotStream {
    use futures::StreamExt;
    futures::stream::unfold(
        Some((batches, std::vec::IntoIter::default())),
        |state| async move {
            let (mut batches, mut pending): (B, std::vec::IntoIter<SnapshotItem>) = state?;
            loop {
                if let Some(item) = pending.next() {
                    return Some((Ok(item), Some((batches, pending))));
                }
                if batches.ended() {
                    return None;
                }
                match batches.next_batch().await {
                    Ok(items) => pending = items.into_iter(),
                    Err(err) => return Some((Err(err), None)),
                }
            }
        },
    )
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use open_deno_kv_model::{KvValue, QueuedMessage};

    fn entry(name: &str, size: usize) -> SnapshotItem {
        SnapshotItem::Entry(KvEntry {
            key: vec![2, name.as_bytes()[0], name.as_bytes()[1], 0].into(),
            value: KvValue::Bytes(vec![9; size].into()),
            versionstamp: Versionstamp::from_version(3, 0),
            expires_at: DateTime::from_timestamp(1_700_000_000, 123_456_789),
        })
    }

    fn message() -> SnapshotItem {
        SnapshotItem::Message(QueuedMessage::new(
            vec![1, 2, 3],
            DateTime::from_timestamp(1_700_000_000, 5).unwrap(),
            vec![vec![2, b'd', 0]],
            vec![100, 200],
        ))
    }

    fn frames_of(items: &[SnapshotItem]) -> Vec<SnapshotFrame> {
        let mut writer = SnapshotWriter::new(Versionstamp::from_version(9, 0));
        let mut frames = vec![writer.header()];
        for item in items {
            frames.extend(writer.push(item.clone()));
        }
        frames.extend(writer.finish());
        frames
    }

    fn items_of() -> Vec<SnapshotItem> {
        let mut items: Vec<SnapshotItem> = (0..40u8)
            .map(|i| entry(&format!("k{}", char::from(b'0' + i)), 20_000))
            .collect();
        items.extend([message(), message()]);
        items
    }

    #[test]
    fn items_round_trip_in_batches_in_order() {
        let items = items_of();
        let frames = frames_of(&items);
        assert!(frames.len() > 4, "800 KB of entries take several batches");
        let mut reader = SnapshotReader::default();
        let mut read = Vec::new();
        for frame in frames {
            let bytes = frame.encode_to_vec();
            read.extend(reader.push_bytes(&bytes).unwrap());
        }
        assert!(reader.is_complete());
        assert_eq!(read, items);
    }

    #[test]
    fn a_stream_cut_anywhere_is_never_complete() {
        let frames = frames_of(&items_of());
        for cut in 0..frames.len() {
            let mut reader = SnapshotReader::default();
            for frame in &frames[..cut] {
                reader.push(frame.clone()).unwrap();
            }
            assert!(!reader.is_complete(), "cut after {cut} frames");
        }
    }

    #[test]
    fn frames_out_of_place_are_refused() {
        let frames = frames_of(&items_of());
        // No header first.
        assert!(SnapshotReader::default().push(frames[1].clone()).is_err());
        // A batch dropped: the end's counts do not match.
        let mut reader = SnapshotReader::default();
        for frame in frames.iter().enumerate().filter(|(i, _)| *i != 1) {
            if let Err(err) = reader.push(frame.1.clone()) {
                assert!(err.message.contains("sent"), "{err}");
                return;
            }
        }
        panic!("a missing batch went unnoticed");
    }

    #[test]
    fn nothing_may_follow_the_end_and_a_failure_is_reported() {
        let frames = frames_of(&[]);
        let mut reader = SnapshotReader::default();
        for frame in &frames {
            reader.push(frame.clone()).unwrap();
        }
        assert!(reader.is_complete());
        assert!(reader.push(frames[0].clone()).is_err());
        let mut reader = SnapshotReader::default();
        reader.push(frames[0].clone()).unwrap();
        let err = reader
            .push(SnapshotFrame::failure("disk on fire"))
            .unwrap_err();
        assert!(err.message.contains("disk on fire"), "{err}");
    }

    /// The database named in the header and in a status travels; a wrong size is refused.
    #[test]
    fn the_database_travels_in_the_header_and_the_status() {
        let database = DatabaseId::random();
        let mut writer = SnapshotWriter::new(Versionstamp::from_version(1, 0));
        writer.of_database(Some(database));
        let mut reader = SnapshotReader::default();
        reader.push(writer.header()).unwrap();
        assert_eq!(reader.database(), Some(database));
        let mut header = writer.header();
        header.database = Some(vec![1; 15]);
        assert!(SnapshotReader::default().push(header).is_err());
        let status = ChangeLogStatus {
            database: Some(database),
            ..ChangeLogStatus::default()
        };
        let back = ChangeLogStatusResponse::from(status.clone())
            .into_status()
            .unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn change_log_reads_are_cut_by_size_and_checked_for_order() {
        let record = |version| ChangeRecord {
            database: Some(DatabaseId::from_bytes([3; 16])),
            versionstamp: Versionstamp::from_version(version, 0),
            previous: Versionstamp::from_version(version - 1, 0),
            at: DateTime::from_timestamp(1_700_000_000, 1).unwrap(),
            changes: StagedCommit::default(),
        };
        let records = vec![record(2), record(3)];
        let answer = ReadChangeLogResponse::of(&records);
        assert_eq!(
            answer
                .clone()
                .into_records(Versionstamp::from_version(1, 0), 10)
                .unwrap(),
            records
        );
        assert!(
            answer
                .clone()
                .into_records(Versionstamp::from_version(1, 0), 1)
                .is_err()
        );
        assert!(
            answer
                .into_records(Versionstamp::from_version(2, 0), 10)
                .is_err()
        );
    }
}

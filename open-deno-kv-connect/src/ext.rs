//! Protocol extensions spoken by this workspace's `open-deno-kv-server` and `open-deno-kv-remote` only.
//!
//! Deno's client, denokv and the Node client `@deno/kv` know nothing of them, and a client that
//! does not ask for an extension sees exactly the KV Connect protocol: extensions are **offered
//! only to a client that asks for them**.
//!
//! - **Negotiation**: a client sends the request header [`EXT_HEADER`] (`x-kv-extensions`,
//!   comma-separated names) on the metadata exchange. The server answers with one extra JSON field,
//!   [`METADATA_FIELD`] (`"kvExtensions"`), listing the extensions it offers among those asked for
//!   ([`Extensions::negotiate`]; read back with [`Extensions::from_metadata`]). Without the header
//!   the metadata has exactly the fields the protocol defines (`version`, `databaseId`,
//!   `endpoints`, `token`, `expiresAt`): stock clients validate it strictly (`@deno/kv` 0.14
//!   refuses any other field with "Bad DatabaseMetadata").
//! - **`expiry/1`**: a client that sends `x-kv-extensions: expiry/1` on a data-path request gets
//!   every entry's expiry time. The normal protobuf answer is followed by one extra field, number
//!   [`EXT_FIELD`], which protobuf merges into the message (unknown to other decoders, who skip
//!   it): for `snapshot_read` a [`SnapshotReadExpiry`] (one list of times per range, one time per
//!   entry), for each watch frame a [`WatchExpiry`] (one time per key). A time is Unix
//!   milliseconds; 0 means "no expiry" (or, in a watch frame, "no entry"). Without the header,
//!   answers and watch frames carry no extension bytes;
//! - **`enqueue-no-retry/1`**: the protocol cannot say "this message must never be retried" (an
//!   empty `backoff_schedule` means "the default"). An `atomic_write` body may carry field
//!   [`EXT_FIELD`] ([`AtomicWriteExt`]): the indexes of the enqueues whose schedule is explicitly
//!   empty. Other servers skip the field (and apply the default schedule);
//! - **`queue/1`**: queue consumption over the network: `POST <endpoint>/queue/dequeue`
//!   ([`DequeueRequest`] → [`DequeueResponse`] or 204), `queue/finish` ([`FinishRequest`] →
//!   [`FinishResponse`]) and `queue/keepalive` ([`KeepAliveRequest`] → [`KeepAliveResponse`]);
//!   open-deno-kv-server's `queue` module describes the delivery guarantees.
//! - **`range-delete/1`**: KV Connect has no range delete. A client sends one as a placeholder
//!   mutation of type [`RANGE_DELETE_MUTATION_TYPE`] (1002, outside the protocol's
//!   `MutationType` enum) keyed by the range's start, and adds to the same `atomic_write` body
//!   field [`RANGE_DELETE_FIELD`] (1002, next to the enqueue list of [`AtomicWriteExt`]): one
//!   [`RangeDeleteExt`] `{mutation: u32, end: bytes}` per range delete, naming the placeholder
//!   by its index in `mutations` and giving the range's exclusive end. The server turns each
//!   placeholder back into [`open_deno_kv_model::MutationKind::DeleteRange`] before the write
//!   reaches the backend ([`AtomicWriteExt::apply_to`]); an index out of range or named twice,
//!   one that is not a placeholder, or a placeholder left without an end is refused (400) and
//!   nothing is applied. A server that does not know the extension refuses the placeholder's
//!   unknown mutation type, so the write fails whole rather than doing something else; a client
//!   still sends such a body only to a server that **offered** `range-delete/1`;
//! - **`count/1`**: `POST <endpoint>/range/count` with a [`RangeRequest`] `{start, end}` answers
//!   a [`RangeCountResponse`] `{entries, key_bytes, value_bytes}`: the visible (unexpired)
//!   entries of `[start, end)` and their encoded sizes, from one snapshot;
//! - **`watch-range/1`**: `POST <endpoint>/range/watch` with a [`RangeRequest`] answers a stream
//!   framed as the KV Connect watch stream is (4-byte little-endian length, zero-length
//!   keep-alives; [`crate::frames`]), each frame a [`RangeWatchFrame`]: `reread = true`
//!   ("read the range again"; always the first frame of a stream), or `changes`, a list of
//!   [`RangeWatchChange`] `{key, entry (absent once deleted), expires_at_ms}` in key order, the
//!   entry in KV Connect's `KvEntry` encoding. A change list too large for one frame is split:
//!   every frame of it but the last has `continues = true`, and a client applies the event only
//!   once it has the whole list, so a consumer never sees half a snapshot. See
//!   [`open_deno_kv_model::RangeWatchEvent`] for what the events mean.
//! - **`snapshot/1`**: whole-store backups and restores ([`open_deno_kv_model::backup`]).
//!   `POST <endpoint>/snapshot/export` (empty body) answers the backend's `export_snapshot` as a
//!   stream framed as the watch streams are ([`crate::frames`]), each frame a
//!   [`SnapshotFrame`]: first a header holding the snapshot's versionstamp, then batches of
//!   items (about [`SNAPSHOT_BATCH_BYTES`] each), then an end frame with the number of entries
//!   and messages sent. A stream that stops before its end frame (or whose counts do not match)
//!   is an error for the reader, never a short snapshot; an export that fails on the server
//!   after the answer began ends with a frame holding `error`. A batch is the change log's
//!   record layout (`open-deno-kv-model`'s `change_log/codec.rs`, [`ChangeRecord::encode`]):
//!   its entries as the record's `writes` (key order, never a deletion) and its messages as
//!   `enqueued`; see [`SnapshotWriter`] and [`SnapshotReader`]. An [`ExportRequest`] with
//!   `messages_only` is how a client lists the queue: the same stream, holding only the
//!   backend's `queued_messages` (its header's versionstamp is zero: no snapshot is read).
//!   `POST <endpoint>/snapshot/import` takes the same stream as its request body and answers an
//!   [`ImportResponse`] `{entries, messages}` once the backend's `import_snapshot` committed.
//!   All or nothing: a body that breaks off, breaks the frame rules or lacks its end frame
//!   fails the import, and the engine rolls it back. Both sides hold one batch at a time.
//! - **`change-log/1`**: the change log ([`open_deno_kv_model::change_log`]).
//!   `POST <endpoint>/change_log/status` (empty body) → [`ChangeLogStatusResponse`];
//!   `/change_log/read` [`ReadChangeLogRequest`] `{after, limit}` → [`ReadChangeLogResponse`]
//!   `{records}`, each record as [`ChangeRecord::encode`] gives it, at most `limit` and cut at
//!   [`CHANGE_LOG_READ_BYTES`] (at least one: a reader asks again after the last it got);
//!   `/change_log/configure` [`ConfigureChangeLogRequest`] `{retention_ms}` (absent: off) →
//!   empty 200. Configure is a write: refused as writes are by a read-only server.
//!
//! A server offers `snapshot/1` only when its backend can both export and import, and
//! `change-log/1` only when it keeps a change log ([`open_deno_kv_model::Capabilities`]);
//! a server whose backend lacks them answers 400 "This database does not support ..." as it
//! does for the other capabilities.
//!
//! Appending a field to an encoded message is valid protobuf (a message is a sequence of fields,
//! and decoders merge them), so the standard messages are encoded by `open-deno-kv-connect` unchanged and
//! the extension travels after them.
//!
//! ```
//! use open_deno_kv_connect::ext::{Extensions, EXTENSIONS};
//! // What a stock client gets: nothing, because it asks for nothing.
//! assert_eq!(Extensions::negotiate(None, &EXTENSIONS), Vec::<&str>::new());
//! // open-deno-kv-remote asks for everything it speaks and gets what the server offers.
//! let asked = Extensions::all().header_value();
//! assert_eq!(Extensions::negotiate(Some(&asked), &EXTENSIONS), EXTENSIONS.to_vec());
//! ```

mod backup;
mod range;

use chrono::{DateTime, Utc};
#[cfg(doc)]
use open_deno_kv_model::change_log::ChangeRecord;
use open_deno_kv_model::{
    AtomicWrite, KvEntry, MutationKind, ReadRangeOutput, WatchKeyOutput, ms_to_datetime,
};

use crate::error::ProtocolError;

pub use backup::{
    CHANGE_LOG_READ_BYTES, ChangeLogStatusResponse, ConfigureChangeLogRequest, ExportRequest,
    ImportResponse, LogMarkPb, ReadChangeLogRequest, ReadChangeLogResponse, SNAPSHOT_BATCH_BYTES,
    SnapshotBatches, SnapshotFrame, SnapshotReader, SnapshotWriter, snapshot_items,
};
pub use range::{
    RANGE_WATCH_FRAME_BYTES, RangeCountResponse, RangeDeleteExt, RangeRequest, RangeWatchAssembler,
    RangeWatchChange, RangeWatchFrame, range_watch_frames,
};

/// The field number every extension uses inside a standard message: far above anything the
/// KV Connect schema uses, so it cannot collide with a future field.
pub const EXT_FIELD: u32 = 1001;

/// The request header by which a client asks for extensions (comma-separated names): on the
/// metadata exchange to have them offered, on a data-path request to have a response extension
/// (`expiry/1`) applied.
pub const EXT_HEADER: &str = "x-kv-extensions";

/// The extension name for entry expiry times in responses.
pub const EXPIRY: &str = "expiry/1";
/// The extension name for enqueues with an explicitly empty back-off schedule.
pub const ENQUEUE_NO_RETRY: &str = "enqueue-no-retry/1";
/// The extension name for the queue endpoints.
pub const QUEUE: &str = "queue/1";
/// The extension name for range deletes inside `atomic_write`.
pub const RANGE_DELETE: &str = "range-delete/1";
/// The extension name for the `range/count` endpoint.
pub const COUNT: &str = "count/1";
/// The extension name for the `range/watch` endpoint.
pub const WATCH_RANGE: &str = "watch-range/1";

/// The extension name for the `snapshot/export` and `snapshot/import` endpoints.
pub const SNAPSHOT: &str = "snapshot/1";
/// The extension name for the `change_log/*` endpoints.
pub const CHANGE_LOG: &str = "change-log/1";

/// The field number of the `range-delete/1` list inside an `atomic_write` body (next to
/// [`EXT_FIELD`], which holds the enqueue list of `enqueue-no-retry/1`).
pub const RANGE_DELETE_FIELD: u32 = 1002;

/// The `mutation_type` of a range delete's placeholder in an `atomic_write` body
/// (`range-delete/1`): a value outside KV Connect's `MutationType` enum, so a server that does
/// not know the extension (Deno Deploy, denokv, an older open-deno-kv-server) refuses the whole
/// write as invalid instead of applying the placeholder as something else. The placeholder's key
/// is the range's start; [`AtomicWriteExt::range_deletes`] carries its end.
pub const RANGE_DELETE_MUTATION_TYPE: i32 = 1002;

/// The metadata response's extra JSON field listing the extensions a server offers to a client
/// that asked for them with [`EXT_HEADER`]; absent otherwise.
pub const METADATA_FIELD: &str = "kvExtensions";

/// Every extension open-deno-kv-server offers (to a client that asks, see [`Extensions::negotiate`]).
pub const EXTENSIONS: [&str; 8] = [
    QUEUE,
    EXPIRY,
    ENQUEUE_NO_RETRY,
    RANGE_DELETE,
    COUNT,
    WATCH_RANGE,
    SNAPSHOT,
    CHANGE_LOG,
];

/// The expiry times of a `snapshot_read` answer (field [`EXT_FIELD`] of `SnapshotReadOutput`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotReadExpiry {
    /// One per range, in order.
    #[prost(message, repeated, tag = "1001")]
    pub ranges: Vec<RangeExpiry>,
}

/// The expiry times of one range's entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeExpiry {
    /// One per entry, in order; 0 = none.
    #[prost(int64, repeated, tag = "1")]
    pub expires_at_ms: Vec<i64>,
}

/// The expiry times in one watch frame (field [`EXT_FIELD`] of `WatchOutput`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchExpiry {
    /// One per watched key, in order; 0 = none or no entry.
    #[prost(int64, repeated, tag = "1001")]
    pub expires_at_ms: Vec<i64>,
}

/// An entry's expiry time as the `expiry/1` extension carries it: Unix milliseconds, 0 for none
/// (or no entry).
pub fn expiry_ms(entry: Option<&KvEntry>) -> i64 {
    entry
        .and_then(|e| e.expires_at)
        .map_or(0, |at| at.timestamp_millis())
}

/// An expiry time the `expiry/1` extension carried: 0 is none; a time beyond the calendar is a
/// protocol error.
pub fn expiry_from_ms(ms: i64) -> Result<Option<DateTime<Utc>>, ProtocolError> {
    if ms == 0 {
        return Ok(None);
    }
    ms_to_datetime(ms)
        .map(Some)
        .ok_or_else(|| ProtocolError::new(format!("invalid expiry time {ms}")))
}

impl SnapshotReadExpiry {
    /// The server side: the expiry times of `ranges`' entries.
    pub fn of(ranges: &[ReadRangeOutput]) -> Self {
        SnapshotReadExpiry {
            ranges: ranges
                .iter()
                .map(|range| RangeExpiry {
                    expires_at_ms: range.entries.iter().map(|e| expiry_ms(Some(e))).collect(),
                })
                .collect(),
        }
    }

    /// The client side: sets the expiry of every entry of `ranges` (decoded from the same
    /// answer) from these times, which must match them one for one.
    pub fn apply_to(self, ranges: &mut [ReadRangeOutput]) -> Result<(), ProtocolError> {
        if self.ranges.len() != ranges.len() {
            return Err(ProtocolError::new(
                "expiry extension: wrong number of ranges",
            ));
        }
        for (range, times) in ranges.iter_mut().zip(self.ranges) {
            if times.expires_at_ms.len() != range.entries.len() {
                return Err(ProtocolError::new(
                    "expiry extension: wrong number of entries",
                ));
            }
            for (entry, ms) in range.entries.iter_mut().zip(times.expires_at_ms) {
                entry.expires_at = expiry_from_ms(ms)?;
            }
        }
        Ok(())
    }
}

impl WatchExpiry {
    /// The server side: the expiry times of a watch frame's entries, one per key.
    pub fn of(entries: &[Option<KvEntry>]) -> Self {
        WatchExpiry {
            expires_at_ms: entries.iter().map(|e| expiry_ms(e.as_ref())).collect(),
        }
    }

    /// The client side: sets the expiry of every changed entry of `outputs` (decoded from the
    /// same frame) from these times, which must match them one for one.
    pub fn apply_to(self, outputs: &mut [WatchKeyOutput]) -> Result<(), ProtocolError> {
        if self.expires_at_ms.len() != outputs.len() {
            return Err(ProtocolError::new("expiry extension: wrong number of keys"));
        }
        for (output, ms) in outputs.iter_mut().zip(self.expires_at_ms) {
            if let WatchKeyOutput::Changed(Some(entry)) = output {
                entry.expires_at = expiry_from_ms(ms)?;
            }
        }
        Ok(())
    }
}

/// The extensions of an `atomic_write` body: decoded from the whole `AtomicWrite` bytes, whose
/// standard fields it skips. Built by [`AtomicWriteExt::of`] (client), applied by
/// [`AtomicWriteExt::apply_to`] (server).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWriteExt {
    /// `enqueue-no-retry/1` (field [`EXT_FIELD`]): indexes into `enqueues` of the messages that
    /// must never be retried.
    #[prost(uint32, repeated, tag = "1001")]
    pub enqueues_without_retries: Vec<u32>,
    /// `range-delete/1` (field [`RANGE_DELETE_FIELD`]): the ends of the range delete
    /// placeholders ([`RANGE_DELETE_MUTATION_TYPE`]) among the mutations, by index.
    #[prost(message, repeated, tag = "1002")]
    pub range_deletes: Vec<RangeDeleteExt>,
}

impl AtomicWriteExt {
    /// The client side: the extension fields `write` needs (its enqueues with an explicitly
    /// empty back-off schedule, its range deletes). Empty ([`AtomicWriteExt::is_empty`]) for a
    /// write KV Connect expresses alone: then nothing is appended to the body.
    pub fn of(write: &AtomicWrite) -> Self {
        // An index beyond u32 (far past any write the limits let through) travels as u32::MAX,
        // which the server refuses: never dropped, which would turn a range delete into a
        // single-key delete.
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let enqueues_without_retries = write
            .enqueues
            .iter()
            .enumerate()
            .filter(|(_, e)| e.backoff_schedule.as_ref().is_some_and(Vec::is_empty))
            .map(|(i, _)| index(i))
            .collect();
        let range_deletes = write
            .mutations
            .iter()
            .enumerate()
            .filter_map(|(i, m)| match &m.kind {
                MutationKind::DeleteRange { end } => Some(RangeDeleteExt {
                    mutation: index(i),
                    end: end.clone(),
                }),
                _ => None,
            })
            .collect();
        AtomicWriteExt {
            enqueues_without_retries,
            range_deletes,
        }
    }

    /// Whether no extension field is set.
    pub fn is_empty(&self) -> bool {
        self.enqueues_without_retries.is_empty() && self.range_deletes.is_empty()
    }

    /// The server side: applies the fields to `write`, decoded from the same body (where
    /// [`crate::convert::decode_atomic_write`] turned each placeholder into a range delete
    /// with no end yet). Strict: an enqueue index out of range, a range delete naming a mutation
    /// that does not exist, that is not a placeholder, or that another range delete already
    /// named, or a placeholder left without its end, is an error and `write` must not be
    /// applied. `range_deletes_offered` is whether the server offers `range-delete/1`: if not,
    /// a body carrying range deletes is refused.
    ///
    /// ```
    /// use open_deno_kv_connect::convert::{decode_atomic_write, encode_atomic_write};
    /// use open_deno_kv_connect::ext::{AtomicWriteExt, RangeDeleteExt};
    /// use open_deno_kv_model::{AtomicWrite, KeyRange, Mutation};
    /// use prost::Message;
    /// let range = KeyRange::new(vec![2, b'a', 0], vec![2, b'z', 0]);
    /// let sent = AtomicWrite { mutations: vec![Mutation::delete_range(range)], ..Default::default() };
    /// // On the wire: the standard message (with a placeholder), then the extension field.
    /// let mut body = encode_atomic_write(&sent).encode_to_vec();
    /// body.extend_from_slice(&AtomicWriteExt::of(&sent).encode_to_vec());
    /// let mut received = decode_atomic_write(&body).unwrap();
    /// AtomicWriteExt::decode(body.as_slice()).unwrap().apply_to(&mut received, true).unwrap();
    /// assert_eq!(received, sent);
    /// // Without its end, a placeholder is refused, never applied.
    /// let mut alone = decode_atomic_write(&encode_atomic_write(&sent).encode_to_vec()).unwrap();
    /// assert!(AtomicWriteExt::default().apply_to(&mut alone, true).is_err());
    /// let bad = AtomicWriteExt { range_deletes: vec![RangeDeleteExt { mutation: 5, end: vec![] }], ..Default::default() };
    /// assert!(bad.apply_to(&mut received, true).is_err());
    /// ```
    pub fn apply_to(
        self,
        write: &mut AtomicWrite,
        range_deletes_offered: bool,
    ) -> Result<(), ProtocolError> {
        for index in self.enqueues_without_retries {
            let enqueue = usize::try_from(index)
                .ok()
                .and_then(|i| write.enqueues.get_mut(i))
                .ok_or_else(|| ProtocolError::new("Invalid enqueue index in extension."))?;
            enqueue.backoff_schedule = Some(Vec::new());
        }
        let placeholders = write.mutations.iter().filter(|m| is_placeholder(m)).count();
        if (placeholders > 0 || !self.range_deletes.is_empty()) && !range_deletes_offered {
            return Err(ProtocolError::new(format!(
                "This server does not offer the {RANGE_DELETE} extension."
            )));
        }
        if placeholders != self.range_deletes.len() {
            return Err(ProtocolError::new(format!(
                "Invalid range delete: {placeholders} range delete(s) for {} end(s).",
                self.range_deletes.len()
            )));
        }
        let mut filled = std::collections::HashSet::new();
        for range in self.range_deletes {
            let index = range.mutation;
            let mutation = usize::try_from(index)
                .ok()
                .and_then(|i| write.mutations.get_mut(i))
                .ok_or_else(|| {
                    ProtocolError::new(format!(
                        "Invalid range delete: mutation index {index} is out of range."
                    ))
                })?;
            if !filled.insert(index) {
                return Err(ProtocolError::new(format!(
                    "Invalid range delete: mutation {index} is named twice."
                )));
            }
            if !is_placeholder(mutation) {
                return Err(ProtocolError::new(format!(
                    "Invalid range delete: mutation {index} is not a range delete."
                )));
            }
            mutation.kind = MutationKind::DeleteRange { end: range.end };
            mutation.expire_at = None;
        }
        Ok(())
    }
}

/// Whether `mutation` is a range delete placeholder as decoded, still without its end.
fn is_placeholder(mutation: &open_deno_kv_model::Mutation) -> bool {
    matches!(&mutation.kind, MutationKind::DeleteRange { end } if end.is_empty())
}

/// What a server offers, from its metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extensions {
    /// `queue/1`.
    pub queues: bool,
    /// `expiry/1`.
    pub expiry: bool,
    /// `enqueue-no-retry/1`.
    pub enqueue_no_retry: bool,
    /// `range-delete/1`.
    pub range_delete: bool,
    /// `count/1`.
    pub count: bool,
    /// `watch-range/1`.
    pub watch_range: bool,
    /// `snapshot/1`.
    pub snapshot: bool,
    /// `change-log/1`.
    pub change_log: bool,
}

impl Extensions {
    /// Every extension this crate knows: what open-deno-kv-remote asks for.
    pub fn all() -> Self {
        Extensions {
            queues: true,
            expiry: true,
            enqueue_no_retry: true,
            range_delete: true,
            count: true,
            watch_range: true,
            snapshot: true,
            change_log: true,
        }
    }

    /// The extension names, in [`EXTENSIONS`] order.
    pub fn names(&self) -> Vec<&'static str> {
        let wanted = [
            self.queues,
            self.expiry,
            self.enqueue_no_retry,
            self.range_delete,
            self.count,
            self.watch_range,
            self.snapshot,
            self.change_log,
        ];
        EXTENSIONS
            .into_iter()
            .zip(wanted)
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }

    /// The [`EXT_HEADER`] value asking for these extensions, e.g. `queue/1, expiry/1`.
    pub fn header_value(&self) -> String {
        self.names().join(", ")
    }

    /// Reads the `"kvExtensions"` field of a metadata response (absent: none).
    pub fn from_metadata(json: &serde_json::Value) -> Self {
        let names: Vec<&str> = json
            .get(METADATA_FIELD)
            .and_then(|v| v.as_array())
            .map(|list| list.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        Extensions {
            queues: names.contains(&QUEUE),
            expiry: names.contains(&EXPIRY),
            enqueue_no_retry: names.contains(&ENQUEUE_NO_RETRY),
            range_delete: names.contains(&RANGE_DELETE),
            count: names.contains(&COUNT),
            watch_range: names.contains(&WATCH_RANGE),
            snapshot: names.contains(&SNAPSHOT),
            change_log: names.contains(&CHANGE_LOG),
        }
    }

    /// The server side of the negotiation: the names of `offered` that the client asked for in
    /// its [`EXT_HEADER`] value(s) (`asked`, comma-separated; `None` when the header is absent),
    /// in `offered` order. Empty means the metadata must not carry [`METADATA_FIELD`] at all.
    pub fn negotiate(asked: Option<&str>, offered: &[&'static str]) -> Vec<&'static str> {
        let Some(asked) = asked else {
            return Vec::new();
        };
        let asked: Vec<&str> = asked.split(',').map(str::trim).collect();
        offered
            .iter()
            .copied()
            .filter(|name| asked.contains(name))
            .collect()
    }
}

/// `queue/dequeue` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DequeueRequest {
    /// How long the server may wait for a due message before answering 204, in milliseconds.
    #[prost(uint32, tag = "1")]
    pub wait_ms: u32,
}

/// `queue/dequeue` answer (status 200).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DequeueResponse {
    /// Names this delivery in `finish` and `keepalive`.
    #[prost(string, tag = "1")]
    pub delivery_token: String,
    /// The V8-serialized payload.
    #[prost(bytes = "vec", tag = "2")]
    pub payload: Vec<u8>,
    /// How long the delivery stays held without a `keepalive`, in milliseconds.
    #[prost(uint32, tag = "3")]
    pub lease_ms: u32,
}

/// `queue/finish` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FinishRequest {
    /// From the dequeue answer.
    #[prost(string, tag = "1")]
    pub delivery_token: String,
    /// `true`: handled, delete it. `false`: failed, retry per the back-off schedule.
    #[prost(bool, tag = "2")]
    pub success: bool,
}

/// `queue/finish` answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FinishResponse {
    /// `false`: the token was unknown (finished before, or its lease ran out).
    #[prost(bool, tag = "1")]
    pub settled: bool,
}

/// `queue/keepalive` request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeepAliveRequest {
    /// The deliveries whose lease to renew.
    #[prost(string, repeated, tag = "1")]
    pub delivery_tokens: Vec<String>,
}

/// `queue/keepalive` answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeepAliveResponse {
    /// Tokens the server no longer holds.
    #[prost(string, repeated, tag = "1")]
    pub unknown_tokens: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_only_what_was_asked_for() {
        assert!(Extensions::negotiate(None, &EXTENSIONS).is_empty());
        assert!(Extensions::negotiate(Some(""), &EXTENSIONS).is_empty());
        assert_eq!(
            Extensions::negotiate(Some(" expiry/1 ,unknown/9"), &EXTENSIONS),
            vec![EXPIRY]
        );
        // An older server that offers less answers with less.
        assert_eq!(
            Extensions::negotiate(Some(&Extensions::all().header_value()), &[QUEUE]),
            vec![QUEUE]
        );
    }

    #[test]
    fn names_round_trip_through_metadata() {
        let json = serde_json::json!({ METADATA_FIELD: Extensions::all().names() });
        assert_eq!(Extensions::from_metadata(&json), Extensions::all());
        assert_eq!(
            Extensions::from_metadata(&serde_json::json!({})),
            Extensions::default()
        );
    }

    #[test]
    fn snapshot_read_expiry_round_trips_and_must_match_the_entries() {
        let at = DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let entry = |expires_at| open_deno_kv_model::KvEntry {
            key: vec![2, b'k', 0].into(),
            value: open_deno_kv_model::KvValue::U64(1),
            versionstamp: open_deno_kv_model::Versionstamp::from_version(1, 0),
            expires_at,
        };
        let ranges = vec![
            ReadRangeOutput {
                entries: vec![entry(Some(at)), entry(None)],
            },
            ReadRangeOutput { entries: vec![] },
        ];
        let times = SnapshotReadExpiry::of(&ranges);
        let mut read = ranges.clone();
        for entry in read.iter_mut().flat_map(|r| r.entries.iter_mut()) {
            entry.expires_at = None;
        }
        times.clone().apply_to(&mut read).unwrap();
        assert_eq!(read, ranges);
        let err = times.apply_to(&mut read[..1]).unwrap_err();
        assert_eq!(err.message, "expiry extension: wrong number of ranges");
        assert_eq!(
            expiry_from_ms(i64::MAX).unwrap_err().message,
            format!("invalid expiry time {}", i64::MAX)
        );
    }
}

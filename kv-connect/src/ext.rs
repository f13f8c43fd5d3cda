//! Protocol extensions spoken by this workspace's `kv-server` and `kv-remote` only.
//!
//! Deno's client and denokv know nothing of them, and nothing here changes what they see:
//!
//! - the metadata response carries one extra JSON field, `"kvExtensions"`, listing the
//!   extensions the server offers ([`EXTENSIONS`], read back with [`Extensions::from_metadata`]); Deno ignores unknown fields;
//! - **`expiry/1`**: a client that sends `x-kv-extensions: expiry/1` on a data-path request gets
//!   every entry's expiry time. The normal protobuf answer is followed by one extra field, number
//!   [`EXT_FIELD`], which protobuf merges into the message (unknown to other decoders, who skip
//!   it): for `snapshot_read` a [`SnapshotReadExpiry`] (one list of times per range, one time per
//!   entry), for each watch frame a [`WatchExpiry`] (one time per key). A time is Unix
//!   milliseconds; 0 means "no expiry" (or, in a watch frame, "no entry");
//! - **`enqueue-no-retry/1`**: the protocol cannot say "this message must never be retried" (an
//!   empty `backoff_schedule` means "the default"). An `atomic_write` body may carry field
//!   [`EXT_FIELD`] ([`AtomicWriteExt`]): the indexes of the enqueues whose schedule is explicitly
//!   empty. Other servers skip the field (and apply the default schedule);
//! - **`queue/1`**: queue consumption over the network: `POST <endpoint>/queue/dequeue`
//!   ([`DequeueRequest`] → [`DequeueResponse`] or 204), `queue/finish` ([`FinishRequest`] →
//!   [`FinishResponse`]) and `queue/keepalive` ([`KeepAliveRequest`] → [`KeepAliveResponse`]);
//!   kv-server's `queue` module describes the delivery guarantees.
//!
//! Appending a field to an encoded message is valid protobuf (a message is a sequence of fields,
//! and decoders merge them), so the standard messages are encoded by `kv-connect` unchanged and
//! the extension travels after them.

/// The field number every extension uses inside a standard message: far above anything the
/// KV Connect schema uses, so it cannot collide with a future field.
pub const EXT_FIELD: u32 = 1001;

/// The request header by which a client opts into response extensions (comma-separated).
pub const EXT_HEADER: &str = "x-kv-extensions";

/// The extension name for entry expiry times in responses.
pub const EXPIRY: &str = "expiry/1";
/// The extension name for enqueues with an explicitly empty back-off schedule.
pub const ENQUEUE_NO_RETRY: &str = "enqueue-no-retry/1";
/// The extension name for the queue endpoints.
pub const QUEUE: &str = "queue/1";

/// The metadata response's extra JSON field listing the extensions a server offers.
pub const METADATA_FIELD: &str = "kvExtensions";

/// Every extension kv-server offers, as listed in the metadata's [`METADATA_FIELD`].
pub const EXTENSIONS: [&str; 3] = [QUEUE, EXPIRY, ENQUEUE_NO_RETRY];

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

/// The enqueue extension of an `atomic_write` body (field [`EXT_FIELD`] of `AtomicWrite`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWriteExt {
    /// Indexes into `enqueues` of the messages that must never be retried.
    #[prost(uint32, repeated, tag = "1001")]
    pub enqueues_without_retries: Vec<u32>,
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
}

impl Extensions {
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
        }
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

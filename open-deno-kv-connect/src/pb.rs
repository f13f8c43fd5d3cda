//! The protobuf messages of KV Connect (package `com.deno.kv.datapath`, proto3), with the field
//! numbers and types of the protocol. Written as plain Rust structs deriving [`prost::Message`],
//! so no `protoc` is needed.
//!
//! Proto3 rules apply: fields holding their default value are not on the wire, repeated scalars
//! are packed, unknown fields are skipped. Enum fields are kept as `i32` (an unknown number is not
//! a decoding error); the `*_enum()` style accessors prost derives give the named value.

/// Request body of `snapshot_read`: up to 10 ranges, answered in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotRead {
    /// The ranges.
    #[prost(message, repeated, tag = "1")]
    pub ranges: Vec<ReadRange>,
}

/// One range of a [`SnapshotRead`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadRange {
    /// First key, inclusive (encoded key bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub start: Vec<u8>,
    /// End key, exclusive.
    #[prost(bytes = "vec", tag = "2")]
    pub end: Vec<u8>,
    /// Most entries to return; must be at least 1.
    #[prost(int32, tag = "3")]
    pub limit: i32,
    /// Return entries from the end of the range backwards.
    #[prost(bool, tag = "4")]
    pub reverse: bool,
}

/// Response body of `snapshot_read`. Field numbers 3, 5, 6 and 7 are reserved.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SnapshotReadOutput {
    /// One output per requested range, same order.
    #[prost(message, repeated, tag = "1")]
    pub ranges: Vec<ReadRangeOutput>,
    /// v1/v2 signal that this endpoint cannot serve reads.
    #[prost(bool, tag = "2")]
    pub read_disabled: bool,
    /// Must be true for strong reads (Deno's default) to succeed.
    #[prost(bool, tag = "4")]
    pub read_is_strongly_consistent: bool,
    /// v3 status; must be [`SnapshotReadStatus::SrSuccess`].
    #[prost(enumeration = "SnapshotReadStatus", tag = "8")]
    pub status: i32,
}

/// The entries of one range.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReadRangeOutput {
    /// In key order, or reversed when the range was `reverse`.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<KvEntry>,
}

/// A stored entry on the wire.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KvEntry {
    /// Encoded key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Value bytes in `encoding`.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
    /// A [`ValueEncoding`].
    #[prost(enumeration = "ValueEncoding", tag = "3")]
    pub encoding: i32,
    /// Exactly 10 bytes.
    #[prost(bytes = "vec", tag = "4")]
    pub versionstamp: Vec<u8>,
}

/// Request body of `atomic_write`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWrite {
    /// All must hold, else nothing is applied.
    #[prost(message, repeated, tag = "1")]
    pub checks: Vec<Check>,
    /// Applied in order, in one commit.
    #[prost(message, repeated, tag = "2")]
    pub mutations: Vec<Mutation>,
    /// Queue messages (never sent by Deno 2.9.6).
    #[prost(message, repeated, tag = "3")]
    pub enqueues: Vec<Enqueue>,
}

/// A precondition of an [`AtomicWrite`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Check {
    /// Encoded key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Empty: the key must not exist; 10 bytes: its current versionstamp.
    #[prost(bytes = "vec", tag = "2")]
    pub versionstamp: Vec<u8>,
}

/// One mutation of an [`AtomicWrite`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mutation {
    /// Target key (for type 9, the prefix the versionstamp part is appended to).
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// Operand; required for every type except delete.
    #[prost(message, optional, tag = "2")]
    pub value: Option<KvValue>,
    /// A [`MutationType`].
    #[prost(enumeration = "MutationType", tag = "3")]
    pub mutation_type: i32,
    /// Absolute expiry in Unix milliseconds; 0 or −1 mean never.
    #[prost(int64, tag = "4")]
    pub expire_at_ms: i64,
    /// V8-encoded lower bound of a V8 sum (empty: none).
    #[prost(bytes = "vec", tag = "5")]
    pub sum_min: Vec<u8>,
    /// V8-encoded upper bound of a V8 sum (empty: none).
    #[prost(bytes = "vec", tag = "6")]
    pub sum_max: Vec<u8>,
    /// Clamp an out-of-range sum instead of failing.
    #[prost(bool, tag = "7")]
    pub sum_clamp: bool,
}

/// A value with its encoding.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KvValue {
    /// The bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    /// A [`ValueEncoding`].
    #[prost(enumeration = "ValueEncoding", tag = "2")]
    pub encoding: i32,
}

/// A queue message of an [`AtomicWrite`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Enqueue {
    /// V8-serialized message.
    #[prost(bytes = "vec", tag = "1")]
    pub payload: Vec<u8>,
    /// Absolute delivery time, Unix milliseconds.
    #[prost(int64, tag = "2")]
    pub deadline_ms: i64,
    /// Keys that receive the payload once retries run out.
    #[prost(bytes = "vec", repeated, tag = "3")]
    pub keys_if_undelivered: Vec<Vec<u8>>,
    /// Retry delays in milliseconds; empty means the server's default.
    #[prost(uint32, repeated, tag = "4")]
    pub backoff_schedule: Vec<u32>,
}

/// Response body of `atomic_write`. Field number 3 is reserved.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AtomicWriteOutput {
    /// An [`AtomicWriteStatus`].
    #[prost(enumeration = "AtomicWriteStatus", tag = "1")]
    pub status: i32,
    /// 10 bytes on success.
    #[prost(bytes = "vec", tag = "2")]
    pub versionstamp: Vec<u8>,
    /// Indexes of every failed check.
    #[prost(uint32, repeated, tag = "4")]
    pub failed_checks: Vec<u32>,
}

/// Request body of `watch`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Watch {
    /// The watched keys, in the user's order.
    #[prost(message, repeated, tag = "1")]
    pub keys: Vec<WatchKey>,
}

/// One watched key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchKey {
    /// Encoded key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// One frame of a watch stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchOutput {
    /// Must be [`SnapshotReadStatus::SrSuccess`].
    #[prost(enumeration = "SnapshotReadStatus", tag = "1")]
    pub status: i32,
    /// One per watched key, in request order.
    #[prost(message, repeated, tag = "2")]
    pub keys: Vec<WatchKeyOutput>,
}

/// One key of a [`WatchOutput`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchKeyOutput {
    /// Whether the key changed. Deno 2.9.6 reads `false` as "deleted", so servers always send true.
    #[prost(bool, tag = "1")]
    pub changed: bool,
    /// The current entry; absent when the key does not exist.
    #[prost(message, optional, tag = "2")]
    pub entry_if_changed: Option<KvEntry>,
}

/// Status of a read or watch frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum SnapshotReadStatus {
    /// Unset (an error for v3 clients).
    SrUnspecified = 0,
    /// Success.
    SrSuccess = 1,
    /// Reads are disabled on this endpoint.
    SrReadDisabled = 2,
}

/// Kind of a [`Mutation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MutationType {
    /// Unset (invalid).
    MUnspecified = 0,
    /// Set.
    MSet = 1,
    /// Delete.
    MDelete = 2,
    /// Sum.
    MSum = 3,
    /// Max.
    MMax = 4,
    /// Min.
    MMin = 5,
    /// Set at the key extended by the commit versionstamp.
    MSetSuffixVersionstampedKey = 9,
}

/// Encoding of a value on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ValueEncoding {
    /// Unset (invalid).
    VeUnspecified = 0,
    /// V8 ValueSerializer bytes.
    VeV8 = 1,
    /// 8 bytes little-endian u64.
    VeLe64 = 2,
    /// Raw bytes.
    VeBytes = 3,
}

/// Status of an [`AtomicWriteOutput`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum AtomicWriteStatus {
    /// Unset.
    AwUnspecified = 0,
    /// Committed.
    AwSuccess = 1,
    /// A check failed; nothing was applied.
    AwCheckFailure = 2,
    /// This endpoint cannot write.
    AwWriteDisabled = 5,
}

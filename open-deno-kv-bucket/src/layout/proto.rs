//! The protocol buffer messages of the layout, declared by hand with prost's derive (so no
//! `protoc` runs at build time). Field numbers, types and the enum's values are those of
//! `schema/backup.proto` of denokv_proto 0.14, package `com.deno.kv.backup`; see
//! [`crate::layout`] for what each holds.

/// A snapshot range object (`snapshots/….bin`): entries' values and their metadata, in two
/// parallel lists.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BackupSnapshotRange {
    /// `d` + key → the value's bytes.
    #[prost(message, repeated, tag = "1")]
    pub data_list: Vec<BackupKvPair>,
    /// `m` + key → [`crate::layout::KeyMetadata`] bytes, in the same order as `data_list`.
    #[prost(message, repeated, tag = "2")]
    pub metadata_list: Vec<BackupKvPair>,
}

/// A key and bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BackupKvPair {
    /// The key (with its one-byte `d` / `m` tag in a snapshot range).
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// A log segment object (`logs/….bin`): the key changes of consecutive commits.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BackupMutationRange {
    /// The changes, in versionstamp order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<BackupReplicationLogEntry>,
    /// When the segment was closed, in Unix milliseconds.
    #[prost(uint64, tag = "2")]
    pub timestamp_ms: u64,
}

/// One key's change in a commit.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BackupReplicationLogEntry {
    /// 12 bytes: the commit's 10-byte versionstamp, then the change's 2-byte position in the
    /// commit, `ffff` for the commit's last change.
    #[prost(bytes = "vec", tag = "1")]
    pub versionstamp: Vec<u8>,
    /// What the change is ([`BackupKvMutationKind`]).
    #[prost(enumeration = "BackupKvMutationKind", tag = "2")]
    pub kind: i32,
    /// The encoded key.
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// The value stored (empty for a clear).
    #[prost(bytes = "vec", tag = "4")]
    pub value: Vec<u8>,
    /// The value's encoding: 1 V8, 2 little-endian u64, 3 bytes.
    #[prost(int32, tag = "5")]
    pub value_encoding: i32,
    /// When the entry expires, in Unix milliseconds; 0 for never.
    #[prost(uint64, tag = "6")]
    pub expire_at_ms: u64,
}

/// The kinds of change. denokv treats every kind but [`BackupKvMutationKind::MkClear`] as
/// "store this value": a sum, min or max is logged as the value it stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BackupKvMutationKind {
    /// Unset.
    MkUnspecified = 0,
    /// Store the value.
    MkSet = 1,
    /// Delete the key.
    MkClear = 2,
    /// A sum's result.
    MkSum = 3,
    /// A max's result.
    MkMax = 4,
    /// A min's result.
    MkMin = 5,
}

//! Encoding and decoding the layout's objects: snapshot ranges, segments and their side
//! objects, snapshot manifests. Every decoder is strict: an object that does not decode, or whose
//! checksum (kept in the manifest or side object) does not match, is [`BucketError::Corrupt`]
//! naming it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use open_deno_kv_model::change_log::ChangeRecord;
use open_deno_kv_model::queue::QueuedMessage;
use open_deno_kv_model::{
    DatabaseId, KvEntry, KvValue, StagedCommit, StoredEntry, Versionstamp, ms_to_datetime,
};
use prost::Message;
use sha2::{Digest, Sha256};

use super::key_metadata::KeyMetadata;
use super::names::{SegmentName, change_stamp};
use super::proto::{
    BackupKvMutationKind, BackupKvPair, BackupMutationRange, BackupReplicationLogEntry,
    BackupSnapshotRange,
};
use crate::BucketError;

/// The version of this crate's own objects (manifests, side objects). Kept in their last field,
/// so an object cut short at a field boundary (which protocol buffers would otherwise read as
/// a shorter, valid message) lacks it and is refused.
const OURS_VERSION: u32 = 1;

/// The number a commit's last change carries in its 12-byte versionstamp.
const LAST_CHANGE: u16 = 0xffff;

fn corrupt(object: &str, detail: impl Into<String>) -> BucketError {
    BucketError::Corrupt {
        object: object.to_owned(),
        detail: detail.into(),
    }
}

/// The SHA-256 of an object's bytes, as manifests and side objects keep it.
pub(crate) fn checksum(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).to_vec()
}

/// Checks `bytes` of `object` against the length and checksum recorded for it.
pub(crate) fn verify(object: &str, bytes: &[u8], len: u64, sum: &[u8]) -> Result<(), BucketError> {
    if bytes.len() as u64 != len {
        return Err(corrupt(
            object,
            format!("it holds {} bytes, {len} were written", bytes.len()),
        ));
    }
    if checksum(bytes) != sum {
        return Err(corrupt(
            object,
            "its bytes are not those written (checksum)",
        ));
    }
    Ok(())
}

/// A snapshot range object holding `entries` (in key order): data and metadata lists.
pub fn encode_snapshot_range(entries: &[KvEntry]) -> Vec<u8> {
    let mut range = BackupSnapshotRange::default();
    for entry in entries {
        let (value, encoding) = entry.value.encode();
        let mut data_key = Vec::with_capacity(entry.key.len() + 1);
        data_key.push(b'd');
        data_key.extend_from_slice(&entry.key);
        let mut meta_key = Vec::with_capacity(entry.key.len() + 1);
        meta_key.push(b'm');
        meta_key.extend_from_slice(&entry.key);
        let metadata = KeyMetadata {
            versionstamp: entry.versionstamp,
            value_encoding: u8::try_from(encoding.id()).unwrap_or(0),
            expire_at_ms: entry.expires_at.map(|at| at.timestamp_millis()),
        };
        range.data_list.push(BackupKvPair {
            key: data_key,
            value: value.to_vec(),
        });
        range.metadata_list.push(BackupKvPair {
            key: meta_key,
            value: metadata.encode(),
        });
    }
    range.encode_to_vec()
}

/// The entries of the snapshot range `object`, in the order it holds them. Refused: bytes that
/// do not decode, data and metadata lists that do not pair up key for key, a key without its
/// `d` / `m` tag, metadata or a value that does not decode.
pub fn decode_snapshot_range(object: &str, bytes: &[u8]) -> Result<Vec<KvEntry>, BucketError> {
    let range = BackupSnapshotRange::decode(bytes)
        .map_err(|err| corrupt(object, format!("not a snapshot range: {err}")))?;
    if range.data_list.len() != range.metadata_list.len() {
        return Err(corrupt(
            object,
            format!(
                "{} values but {} metadata (cut short?)",
                range.data_list.len(),
                range.metadata_list.len()
            ),
        ));
    }
    let mut entries = Vec::with_capacity(range.data_list.len());
    for (data, meta) in range.data_list.into_iter().zip(range.metadata_list) {
        let (Some((b'd', key)), Some((b'm', meta_key))) =
            (data.key.split_first(), meta.key.split_first())
        else {
            return Err(corrupt(object, "a key without its `d` or `m` tag"));
        };
        if key != meta_key || key.is_empty() {
            return Err(corrupt(
                object,
                format!(
                    "value of key {} paired with metadata of key {}",
                    hex::encode(key),
                    hex::encode(meta_key)
                ),
            ));
        }
        let metadata = KeyMetadata::decode(&meta.value)
            .ok_or_else(|| corrupt(object, format!("bad metadata for key {}", hex::encode(key))))?;
        let value = KvValue::decode(data.value, i64::from(metadata.value_encoding))
            .map_err(|err| corrupt(object, format!("key {}: {err}", hex::encode(key))))?;
        let expires_at = match metadata.expire_at_ms {
            None => None,
            Some(ms) => Some(ms_to_datetime(ms).ok_or_else(|| {
                corrupt(
                    object,
                    format!("key {}: expiry out of range", hex::encode(key)),
                )
            })?),
        };
        entries.push(KvEntry {
            key: key.to_vec().into(),
            value,
            versionstamp: metadata.versionstamp,
            expires_at,
        });
    }
    Ok(entries)
}

#[derive(Clone, PartialEq, prost::Message)]
struct ManifestProto {
    #[prost(bytes = "vec", tag = "1")]
    database: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    versionstamp: Vec<u8>,
    #[prost(int64, tag = "3")]
    at_ms: i64,
    #[prost(message, repeated, tag = "4")]
    ranges: Vec<RangeProto>,
    #[prost(uint64, tag = "5")]
    entries: u64,
    /// A change record (its layout) whose enqueued messages are the snapshot's messages.
    #[prost(bytes = "vec", tag = "6")]
    messages: Vec<u8>,
    #[prost(uint32, tag = "15")]
    version: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RangeProto {
    #[prost(string, tag = "1")]
    file: String,
    #[prost(uint64, tag = "2")]
    len: u64,
    #[prost(bytes = "vec", tag = "3")]
    sha256: Vec<u8>,
}

/// One range object a manifest lists: its file name (in `snapshots/`), length and checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRecord {
    /// `<name>.bin`.
    pub file: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its SHA-256.
    pub sha256: Vec<u8>,
}

impl RangeRecord {
    /// The record of `bytes`, written as `file`.
    pub fn of(file: String, bytes: &[u8]) -> Self {
        RangeRecord {
            file,
            len: bytes.len() as u64,
            sha256: checksum(bytes),
        }
    }
}

/// A snapshot's manifest, `odkv/snapshots/<versionstamp>.bin` (see [`crate::layout`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotManifest {
    /// The database the snapshot is of.
    pub database: Option<DatabaseId>,
    /// The snapshot's versionstamp.
    pub versionstamp: Versionstamp,
    /// When the shipper wrote it.
    pub at: DateTime<Utc>,
    /// Its range objects, in order.
    pub ranges: Vec<RangeRecord>,
    /// How many entries they hold.
    pub entries: u64,
    /// The queued messages of the snapshot.
    pub messages: Vec<QueuedMessage>,
}

impl SnapshotManifest {
    /// The bytes of all its range objects.
    pub fn bytes(&self) -> u64 {
        self.ranges.iter().map(|range| range.len).sum()
    }

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let messages = ChangeRecord {
            database: self.database,
            versionstamp: self.versionstamp,
            previous: self.versionstamp,
            at: self.at,
            changes: StagedCommit {
                enqueued: self.messages.clone(),
                ..Default::default()
            },
        };
        ManifestProto {
            database: self
                .database
                .map(|id| id.as_bytes().to_vec())
                .unwrap_or_default(),
            versionstamp: self.versionstamp.as_bytes().to_vec(),
            at_ms: self.at.timestamp_millis(),
            ranges: self
                .ranges
                .iter()
                .map(|range| RangeProto {
                    file: range.file.clone(),
                    len: range.len,
                    sha256: range.sha256.clone(),
                })
                .collect(),
            entries: self.entries,
            messages: messages.encode(),
            version: OURS_VERSION,
        }
        .encode_to_vec()
    }

    /// The manifest in `object`'s `bytes`; [`BucketError::Corrupt`] if they do not decode.
    pub fn decode(object: &str, bytes: &[u8]) -> Result<SnapshotManifest, BucketError> {
        let proto = ManifestProto::decode(bytes)
            .map_err(|err| corrupt(object, format!("not a snapshot manifest: {err}")))?;
        if proto.version != OURS_VERSION {
            return Err(corrupt(
                object,
                format!(
                    "manifest version {} (this program reads {OURS_VERSION}; cut short?)",
                    proto.version
                ),
            ));
        }
        let database = database_of(object, &proto.database)?;
        let versionstamp = stamp_of(object, &proto.versionstamp)?;
        let at = ms_to_datetime(proto.at_ms).ok_or_else(|| corrupt(object, "time out of range"))?;
        let messages = ChangeRecord::decode(&proto.messages)
            .map_err(|err| corrupt(object, format!("its messages: {err}")))?
            .changes
            .enqueued;
        Ok(SnapshotManifest {
            database,
            versionstamp,
            at,
            ranges: proto
                .ranges
                .into_iter()
                .map(|range| RangeRecord {
                    file: range.file,
                    len: range.len,
                    sha256: range.sha256,
                })
                .collect(),
            entries: proto.entries,
            messages,
        })
    }
}

fn database_of(object: &str, bytes: &[u8]) -> Result<Option<DatabaseId>, BucketError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let bytes: [u8; 16] = bytes
        .try_into()
        .map_err(|_| corrupt(object, "a database identity is not 16 bytes"))?;
    Ok(Some(DatabaseId::from_bytes(bytes)))
}

fn stamp_of(object: &str, bytes: &[u8]) -> Result<Versionstamp, BucketError> {
    let bytes: [u8; 10] = bytes
        .try_into()
        .map_err(|_| corrupt(object, "a versionstamp is not 10 bytes"))?;
    Ok(Versionstamp::from_bytes(bytes))
}

#[derive(Clone, PartialEq, prost::Message)]
struct SideProto {
    #[prost(message, repeated, tag = "1")]
    commits: Vec<SideCommit>,
    #[prost(uint64, tag = "2")]
    segment_len: u64,
    #[prost(bytes = "vec", tag = "3")]
    segment_sha256: Vec<u8>,
    #[prost(uint32, tag = "15")]
    version: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SideCommit {
    /// The commit's change record without its writes.
    #[prost(bytes = "vec", tag = "1")]
    record: Vec<u8>,
    /// How many changes of the segment are this commit's.
    #[prost(uint32, tag = "2")]
    changes: u32,
}

/// A segment ready to upload: its name, the segment object (`logs/<name>.bin`) and its side
/// object (`odkv/logs/<name>.bin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedSegment {
    /// Its name.
    pub name: SegmentName,
    /// The `BackupMutationRange` bytes.
    pub segment: Vec<u8>,
    /// The side object's bytes.
    pub side: Vec<u8>,
}

/// Encodes consecutive commits (at least one, in commit order) as a segment closed at
/// `closed_at`. Refused (as [`BucketError::Corrupt`] of the segment, since nothing else can
/// make it) : no commit, or commits out of order, or a commit of more than 65,534 key changes
/// (the layout numbers a commit's changes in two bytes).
pub fn encode_segment(
    records: &[ChangeRecord],
    closed_at: DateTime<Utc>,
) -> Result<EncodedSegment, BucketError> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Err(corrupt(
            "(new segment)",
            "a segment needs at least one commit",
        ));
    };
    let name = SegmentName {
        format_version: 1,
        monoseq: first.versionstamp.version(),
        first: change_stamp(first.versionstamp, 0),
        last: change_stamp(last.versionstamp, LAST_CHANGE),
    };
    let mut segment = BackupMutationRange {
        entries: Vec::new(),
        timestamp_ms: u64::try_from(closed_at.timestamp_millis()).unwrap_or(0),
    };
    let mut side = SideProto::default();
    let mut previous: Option<Versionstamp> = None;
    for record in records {
        if previous.is_some_and(|previous| previous >= record.versionstamp) {
            return Err(corrupt(
                &name.file(),
                format!("commit {} out of order", record.versionstamp),
            ));
        }
        previous = Some(record.versionstamp);
        let writes = &record.changes.writes;
        if writes.len() >= usize::from(LAST_CHANGE) {
            return Err(corrupt(
                &name.file(),
                format!(
                    "commit {} changes {} keys, more than a segment numbers",
                    record.versionstamp,
                    writes.len()
                ),
            ));
        }
        for (index, (key, state)) in writes.iter().enumerate() {
            let number = if index + 1 == writes.len() {
                LAST_CHANGE
            } else {
                u16::try_from(index).unwrap_or(LAST_CHANGE)
            };
            let versionstamp = change_stamp(record.versionstamp, number).to_vec();
            segment.entries.push(match state {
                Some(entry) => {
                    let (value, encoding) = entry.value.encode();
                    BackupReplicationLogEntry {
                        versionstamp,
                        kind: BackupKvMutationKind::MkSet as i32,
                        key: key.clone(),
                        value: value.to_vec(),
                        value_encoding: i32::try_from(encoding.id()).unwrap_or(0),
                        expire_at_ms: entry
                            .expires_at
                            .and_then(|at| u64::try_from(at.timestamp_millis()).ok())
                            .unwrap_or(0),
                    }
                }
                None => BackupReplicationLogEntry {
                    versionstamp,
                    kind: BackupKvMutationKind::MkClear as i32,
                    key: key.clone(),
                    value: Vec::new(),
                    value_encoding: 0,
                    expire_at_ms: 0,
                },
            });
        }
        let without_writes = ChangeRecord {
            changes: StagedCommit {
                deleted_ranges: record.changes.deleted_ranges.clone(),
                writes: BTreeMap::new(),
                enqueued: record.changes.enqueued.clone(),
            },
            ..record.clone()
        };
        side.commits.push(SideCommit {
            record: without_writes.encode(),
            changes: u32::try_from(writes.len()).unwrap_or(u32::MAX),
        });
    }
    let segment = segment.encode_to_vec();
    side.segment_len = segment.len() as u64;
    side.segment_sha256 = checksum(&segment);
    side.version = OURS_VERSION;
    Ok(EncodedSegment {
        name,
        segment,
        side: side.encode_to_vec(),
    })
}

/// A commit read from a segment: its record, and the time its segment was closed.
struct Group {
    versionstamp: Versionstamp,
    writes: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    changes: u32,
}

/// The commits of the segment `name` (the object `object`), from its bytes and, for a bucket of
/// this crate, its side object's. Refused as [`BucketError::Corrupt`] naming the object: bytes
/// that do not decode or do not match the side object's checksum, changes out of order or
/// outside the name's range, a commit whose last change is not numbered `ffff`, a value that does
/// not decode, and a side object that does not match the segment.
///
/// Without a side object (a Deploy bucket) each record names no database, its `at` is the
/// segment's time, and its `previous` is the commit before it in the segment (the first's is the
/// name's first versionstamp: the reader links segments itself).
pub fn decode_segment(
    object: &str,
    name: &SegmentName,
    bytes: &[u8],
    side: Option<(&str, &[u8])>,
) -> Result<Vec<ChangeRecord>, BucketError> {
    let side = match side {
        Some((side_object, side_bytes)) => {
            let proto = side_proto(side_object, side_bytes)?;
            verify(object, bytes, proto.segment_len, &proto.segment_sha256)?;
            Some((side_object, proto))
        }
        None => None,
    };
    let segment = BackupMutationRange::decode(bytes)
        .map_err(|err| corrupt(object, format!("not a log segment: {err}")))?;
    let closed_at = i64::try_from(segment.timestamp_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .and_then(ms_to_datetime)
        .ok_or_else(|| corrupt(object, "no valid closing time (cut short?)"))?;
    let groups = group_changes(object, name, segment.entries)?;
    match side {
        Some((side_object, side)) => with_side(object, side_object, name, groups, side),
        None => {
            let mut previous = name.first_commit();
            Ok(groups
                .into_iter()
                .map(|group| {
                    let record = ChangeRecord {
                        database: None,
                        versionstamp: group.versionstamp,
                        previous,
                        at: closed_at,
                        changes: StagedCommit {
                            writes: group.writes,
                            ..Default::default()
                        },
                    };
                    previous = group.versionstamp;
                    record
                })
                .collect())
        }
    }
}

fn group_changes(
    object: &str,
    name: &SegmentName,
    entries: Vec<BackupReplicationLogEntry>,
) -> Result<Vec<Group>, BucketError> {
    let mut groups: Vec<Group> = Vec::new();
    let mut last12: Option<[u8; 12]> = None;
    let mut open = false;
    for entry in entries {
        let stamp12: [u8; 12] = entry.versionstamp.as_slice().try_into().map_err(|_| {
            corrupt(
                object,
                format!(
                    "a change versionstamp of {} bytes",
                    entry.versionstamp.len()
                ),
            )
        })?;
        if last12.is_some_and(|last| last >= stamp12) || stamp12 < name.first || stamp12 > name.last
        {
            return Err(corrupt(
                object,
                format!(
                    "change {} is out of order or outside the segment's range",
                    hex::encode(stamp12)
                ),
            ));
        }
        last12 = Some(stamp12);
        let commit = super::names::commit_of(&stamp12);
        if !open {
            groups.push(Group {
                versionstamp: commit,
                writes: BTreeMap::new(),
                changes: 0,
            });
            open = true;
        }
        let Some(group) = groups
            .last_mut()
            .filter(|group| group.versionstamp == commit)
        else {
            return Err(corrupt(
                object,
                format!(
                    "commit {commit} begins before the commit before it ended with a change \
                     numbered ffff"
                ),
            ));
        };
        let kind = BackupKvMutationKind::try_from(entry.kind).map_err(|_| {
            corrupt(
                object,
                format!(
                    "change {} of unknown kind {}",
                    hex::encode(stamp12),
                    entry.kind
                ),
            )
        })?;
        let state = match kind {
            BackupKvMutationKind::MkClear => None,
            BackupKvMutationKind::MkUnspecified => {
                return Err(corrupt(
                    object,
                    format!("change {} of no kind", hex::encode(stamp12)),
                ));
            }
            _ => {
                let value = KvValue::decode(entry.value, i64::from(entry.value_encoding)).map_err(
                    |err| corrupt(object, format!("change {}: {err}", hex::encode(stamp12))),
                )?;
                let expires_at = match entry.expire_at_ms {
                    0 => None,
                    ms => Some(
                        i64::try_from(ms)
                            .ok()
                            .and_then(ms_to_datetime)
                            .ok_or_else(|| corrupt(object, "an expiry out of range"))?,
                    ),
                };
                Some(StoredEntry {
                    value,
                    versionstamp: commit,
                    expires_at,
                })
            }
        };
        if group.writes.insert(entry.key, state).is_some() {
            return Err(corrupt(
                object,
                format!("commit {commit} changes one key twice"),
            ));
        }
        group.changes += 1;
        if stamp12[10..] == LAST_CHANGE.to_be_bytes() {
            open = false;
        }
    }
    if open {
        return Err(corrupt(
            object,
            "its last commit does not end with a change numbered ffff (cut short?)",
        ));
    }
    Ok(groups)
}

fn with_side(
    object: &str,
    side_object: &str,
    name: &SegmentName,
    groups: Vec<Group>,
    side: SideProto,
) -> Result<Vec<ChangeRecord>, BucketError> {
    let mut groups = groups.into_iter().peekable();
    let mut records = Vec::with_capacity(side.commits.len());
    for commit in side.commits {
        let mut record = ChangeRecord::decode(&commit.record)
            .map_err(|err| corrupt(side_object, err.to_string()))?;
        if commit.changes > 0 {
            let group = groups
                .next_if(|group| group.versionstamp == record.versionstamp)
                .ok_or_else(|| {
                    corrupt(
                        object,
                        format!("the changes of commit {} are missing", record.versionstamp),
                    )
                })?;
            if group.changes != commit.changes {
                return Err(corrupt(
                    object,
                    format!(
                        "commit {} has {} changes, {} were written",
                        record.versionstamp, group.changes, commit.changes
                    ),
                ));
            }
            record.changes.writes = group.writes;
        }
        records.push(record);
    }
    if let Some(extra) = groups.next() {
        return Err(corrupt(
            side_object,
            format!("commit {} of the segment is not listed", extra.versionstamp),
        ));
    }
    match (records.first(), records.last()) {
        (Some(first), Some(last))
            if first.versionstamp == name.first_commit()
                && last.versionstamp == name.last_commit() => {}
        _ => {
            return Err(corrupt(
                side_object,
                "its commits do not span the segment's name",
            ));
        }
    }
    Ok(records)
}

/// The commits a side object lists (each record without its key writes), for listing recovery
/// points without reading the segments.
pub(crate) fn decode_side(
    side_object: &str,
    bytes: &[u8],
) -> Result<Vec<ChangeRecord>, BucketError> {
    side_proto(side_object, bytes)?
        .commits
        .iter()
        .map(|commit| {
            ChangeRecord::decode(&commit.record)
                .map_err(|err| corrupt(side_object, err.to_string()))
        })
        .collect()
}

/// A segment's side object, decoded, of the version this program writes (a side object cut short
/// decodes as an older or unknown version).
fn side_proto(side_object: &str, bytes: &[u8]) -> Result<SideProto, BucketError> {
    let proto = SideProto::decode(bytes)
        .map_err(|err| corrupt(side_object, format!("not a segment side object: {err}")))?;
    if proto.version != OURS_VERSION {
        return Err(corrupt(
            side_object,
            format!(
                "side object version {} (this program reads {OURS_VERSION}; cut short?)",
                proto.version
            ),
        ));
    }
    Ok(proto)
}

#[cfg(test)]
mod tests;

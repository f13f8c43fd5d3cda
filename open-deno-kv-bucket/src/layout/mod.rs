//! The bucket layout: object names and encodings, as Deno Deploy writes them and denokv 0.14
//! reads them, plus this crate's own objects beside them.
//!
//! # The objects denokv reads
//!
//! All names are relative to the bucket prefix (`<prefix>` below, e.g. `kv/prod/`, ending in `/`
//! when not empty). denokv's `--sync-from-s3` and `pitr` read exactly three kinds of object:
//!
//! - **`<prefix>differential`**: 20 lowercase hex digits, the 10-byte versionstamp at which the
//!   snapshot is consistent. denokv waits until this object exists before it reads anything else,
//!   so it is written last, once a snapshot is complete.
//! - **`<prefix>snapshots/<name>.bin`**: the snapshot, split into ranges ([`SnapshotRangeName`]).
//!   denokv lists the whole folder and loads every range it finds, inserting or overwriting key
//!   by key; it never deletes a key while loading. Each object is a `BackupSnapshotRange`
//!   ([`proto`]): `data_list` pairs of `d` + encoded key → value bytes, and `metadata_list`
//!   pairs, in the same order, of `m` + the same key → [`KeyMetadata`] (versionstamp, value
//!   encoding, expiry). The two lists must pair up key for key.
//! - **`<prefix>logs/<name>.bin`**: log segments ([`SegmentName`]), each a `BackupMutationRange`:
//!   the key changes of consecutive commits and the time the segment was closed
//!   (`timestamp_ms`, Unix ms). Each change (`BackupReplicationLogEntry`) has a 12-byte
//!   versionstamp: the commit's 10 bytes, then two bytes that number the commit's changes, the
//!   commit's last change always numbered `ffff`. denokv keys its redo log by these 12 bytes
//!   (a repeated one is dropped) and can stop only after a change numbered `ffff`: those are
//!   its recovery points (`pitr list`), shown with their segment's time. A change is a clear
//!   (`MK_CLEAR`) or, whatever its kind, "store this value": value bytes, value encoding
//!   (1 V8, 2 little-endian u64, 3 bytes) and `expire_at_ms` (0: none). A commit's changes are
//!   the final state of each key it touched, in key order (a sum is its result).
//!
//! How denokv builds its first state: it loads every snapshot range, then replays every log
//! change from the first segment up to the differential versionstamp, then (on `sync`)
//! fetches later segments in name order and applies them commit by commit. Hence the two rules
//! this crate keeps for every bucket it writes:
//!
//! 1. segment names sort in commit order (format 1, `monoseq` = first commit's version), and
//! 2. the segments denokv can see, replayed from the first over the snapshots it can see, give
//!    the state at the differential: the visible log has no gap and no commit it cannot carry
//!    (below). When a gap or such a commit forces a new snapshot, the earlier generation's
//!    snapshots and segments are moved to `<prefix>odkv/archive/` ([`ARCHIVE`]), out of denokv's
//!    sight, where this crate's reader still finds them.
//!
//! denokv ignores expiry when it serves a bucket; this crate writes it anyway (both in the
//! metadata and the log), and restores it.
//!
//! # What the layout cannot carry, and this crate's own objects
//!
//! Under `<prefix>odkv/` ([`OURS`]), which denokv never lists:
//!
//! - **`odkv/snapshots/<versionstamp>.bin`**: a snapshot's manifest ([`SnapshotManifest`]):
//!   the database's identity, the snapshot's exact versionstamp and time, how many range objects
//!   and entries it has, and the queued messages. It is written after the ranges: a snapshot is
//!   complete only once its manifest exists, and range objects without one were left by an
//!   interrupted shipper (which deletes them when it resumes).
//! - **`odkv/logs/<segment name>.bin`**: a segment's side object: for each commit of the segment,
//!   its change record (`open_deno_kv_model::change_log::ChangeRecord`'s layout) *without* its key
//!   writes, which are in the segment itself. It carries what the layout has no place for: the
//!   database, the commit's predecessor (so a reader checks the chain across segments), the
//!   commit's own time, the ranges it deleted as a whole and the messages it enqueued. It is
//!   written before the segment, so a segment denokv can see always has it.
//!
//! A range delete cannot be carried to denokv (the layout has clears of single keys only, and the
//! log records the range, not the keys it held): it is shipped in its segment and side object
//! (this crate's reader replays it exactly), and followed by a new snapshot, so denokv's view
//! is exact again from that snapshot on.
//!
//! # Reading a Deno Deploy bucket
//!
//! A bucket without `odkv/` objects is read as Deploy writes it: one snapshot (all ranges,
//! which may be of format 0), consistent at the differential after replaying the segments up to
//! it; commits take their segment's time; no database is named; segments are checked to follow
//! each other in versionstamp order, which is all such a bucket lets a reader check.

pub(crate) mod codec;
mod key_metadata;
mod names;
pub mod proto;

pub use codec::{
    EncodedSegment, RangeRecord, SnapshotManifest, decode_segment, decode_snapshot_range,
    encode_segment, encode_snapshot_range,
};
pub use key_metadata::KeyMetadata;
pub use names::{
    ARCHIVE, DIFFERENTIAL, LOGS, MANIFESTS, OURS, SIDES, SNAPSHOTS, SegmentName, SnapshotRangeName,
    change_stamp, commit_of, manifest_file, parse_manifest_file,
};

//! Reading a bucket: its recovery points, and the store's state at any of them.
//!
//! A bucket written by this crate or by Deno Deploy (the same layout, see [`crate::layout`])
//! is read the same way: the snapshots, then the log segments after them, each segment checked
//! against the one before (a missing segment is a gap, refused), every object decoded strictly
//! (a truncated or damaged one is refused, naming it). A bucket of this crate also names its
//! database and every commit's predecessor and time (its `odkv/` objects); a Deploy bucket
//! names no database, and its commits take their segment's time.
//!
//! A restore yields only a state the database really had: the snapshot a point needs, then the
//! bucket's commits after it up to the point, in an unbroken chain. The result is an
//! [`open_deno_kv_model::Snapshot`] (entries with their versionstamps and expiry, then queued
//! messages) that any engine imports ([`open_deno_kv_model::Backend::import_snapshot`]); it
//! names the bucket's database, as a backup of it does.

use chrono::{DateTime, Utc};
use open_deno_kv_model::{Backend, DatabaseId, ImportSummary, Snapshot, Versionstamp};

use crate::{BucketError, Target};

/// Which state to restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreAt {
    /// The last commit the bucket holds.
    Latest,
    /// This commit, which must be a recovery point of the bucket.
    Commit(Versionstamp),
    /// The last recovery point at or before this time.
    Time(DateTime<Utc>),
}

/// Whether a recovery point is a snapshot's own commit or a commit of a log segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// A snapshot's versionstamp.
    Snapshot,
    /// A commit shipped in a segment.
    Commit,
}

/// One state the bucket can restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryPoint {
    /// The commit.
    pub versionstamp: Versionstamp,
    /// When it ran (a Deploy bucket: when its segment was closed), if known.
    pub at: Option<DateTime<Utc>>,
    /// What it is.
    pub kind: PointKind,
    /// The snapshot a restore to it starts from.
    pub snapshot: Versionstamp,
    /// The bytes of that snapshot's objects.
    pub snapshot_bytes: u64,
    /// The bytes of the segments replayed over the snapshot to reach this point.
    pub log_bytes: u64,
}

/// A bucket's contents, summarised: what `kv backups list` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSummary {
    /// The database the backups are of (`None`: a Deploy bucket, or no snapshot yet).
    pub database: Option<DatabaseId>,
    /// Complete snapshots, oldest first: versionstamp, time (if known), bytes.
    pub snapshots: Vec<SnapshotInfo>,
    /// Log segments after the oldest snapshot.
    pub segments: u64,
    /// Their bytes.
    pub segment_bytes: u64,
    /// The oldest recovery point.
    pub first: Option<Versionstamp>,
    /// The newest recovery point.
    pub last: Option<Versionstamp>,
}

/// One complete snapshot of a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its versionstamp.
    pub versionstamp: Versionstamp,
    /// When it was written, if known.
    pub at: Option<DateTime<Utc>>,
    /// Entries it holds, if known (a Deploy snapshot: counted only when read).
    pub entries: Option<u64>,
    /// The bytes of its objects.
    pub bytes: u64,
}

/// Reads one bucket (see the module documentation).
#[derive(Debug, Clone)]
pub struct BucketReader {
    target: Target,
}

impl BucketReader {
    /// A reader of `target`.
    pub fn new(target: Target) -> Self {
        BucketReader { target }
    }

    /// The target it reads.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The database the bucket's backups are of (`None`: a Deploy bucket, or an empty one).
    pub async fn database(&self) -> Result<Option<DatabaseId>, BucketError> {
        todo!("{self:?}")
    }

    /// Its snapshots and segments, without reading the segments.
    pub async fn summary(&self) -> Result<BucketSummary, BucketError> {
        todo!("{self:?}")
    }

    /// Every recovery point, oldest first: each snapshot's, and every commit of a segment after
    /// the oldest snapshot. Reads every segment's commit list (a bucket of this crate: its small
    /// `odkv/` side objects; a Deploy bucket: the segments themselves), checking the chain.
    pub async fn recovery_points(&self) -> Result<Vec<RecoveryPoint>, BucketError> {
        todo!("{self:?}")
    }

    /// The state at `at`, as a snapshot to import. Refused: a point the bucket does not hold
    /// ([`BucketError::NoSuchPoint`], naming the nearest ones), an empty bucket, a gap before the
    /// point, an object missing, truncated or corrupt (naming it).
    pub async fn restore(&self, at: RestoreAt) -> Result<Snapshot, BucketError> {
        todo!("{self:?} {at:?}")
    }

    /// [`BucketReader::restore`] imported into `target` (which must be empty): all or nothing.
    pub async fn restore_into(
        &self,
        at: RestoreAt,
        target: &dyn Backend,
    ) -> Result<ImportSummary, BucketError> {
        let snapshot = self.restore(at).await?;
        Ok(target.import_snapshot(snapshot).await?)
    }
}

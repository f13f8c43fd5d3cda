//! Retention: pruning old snapshots and segments without losing a point inside the retention.
//!
//! A point at time `t` is restorable from the newest snapshot at or before it and every segment
//! between. So pruning at `now` with retention `keep` keeps the newest snapshot written at or
//! before `now - keep` (the *floor*: every point inside the retention starts from it or a later
//! one), every later snapshot, and every segment whose last commit is after the floor's
//! versionstamp. Older snapshots (their manifests first, so a half-pruned snapshot is never
//! taken for complete) and segments (the segment first, then its side object) are deleted. When
//! no snapshot is old enough to be a floor, nothing is pruned.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::{BucketError, Target};

/// What a pruning deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Snapshots deleted (each with its range objects).
    pub snapshots: u64,
    /// Segments deleted (each with its side object).
    pub segments: u64,
}

/// Prunes `target` at `now`, keeping every point of the last `keep` restorable (see the module
/// documentation).
pub async fn prune(
    target: &Target,
    keep: Duration,
    now: DateTime<Utc>,
) -> Result<PruneReport, BucketError> {
    todo!("{target:?} {keep:?} {now}")
}

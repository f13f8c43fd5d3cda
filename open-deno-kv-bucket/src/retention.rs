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

use chrono::{DateTime, TimeDelta, Utc};

use crate::inventory::{Inventory, load_manifests};
use crate::layout::{ARCHIVE, LOGS, MANIFESTS, SIDES, SNAPSHOTS, manifest_file};

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
/// documentation). A bucket Deno Deploy wrote (no manifests) is left alone.
pub async fn prune(
    target: &Target,
    keep: Duration,
    now: DateTime<Utc>,
) -> Result<PruneReport, BucketError> {
    let mut report = PruneReport::default();
    let inventory = Inventory::read(target).await?;
    let manifests = load_manifests(target, &inventory).await?;
    let horizon = now - TimeDelta::from_std(keep).unwrap_or(TimeDelta::MAX);
    let Some(floor) = manifests
        .iter()
        .rev()
        .find(|manifest| manifest.at <= horizon)
    else {
        return Ok(report);
    };
    let floor_stamp = floor.versionstamp;
    let kept: std::collections::HashSet<&str> = manifests
        .iter()
        .filter(|manifest| manifest.versionstamp >= floor_stamp)
        .flat_map(|manifest| manifest.ranges.iter().map(|range| range.file.as_str()))
        .collect();
    for manifest in manifests
        .iter()
        .filter(|manifest| manifest.versionstamp < floor_stamp)
    {
        target
            .delete_object(&format!(
                "{MANIFESTS}{}",
                manifest_file(manifest.versionstamp)
            ))
            .await?;
        for range in &manifest.ranges {
            if kept.contains(range.file.as_str()) {
                continue;
            }
            target
                .delete_object(&format!("{SNAPSHOTS}{}", range.file))
                .await?;
            target
                .delete_object(&format!("{ARCHIVE}{SNAPSHOTS}{}", range.file))
                .await?;
        }
        report.snapshots += 1;
    }
    for segment in &inventory.segments {
        if segment.name.last_commit() > floor_stamp {
            continue;
        }
        let file = &segment.placed.file;
        target.delete_object(&format!("{LOGS}{file}")).await?;
        target
            .delete_object(&format!("{ARCHIVE}{LOGS}{file}"))
            .await?;
        target.delete_object(&format!("{SIDES}{file}")).await?;
        report.segments += 1;
    }
    Ok(report)
}

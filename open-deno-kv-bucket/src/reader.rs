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
use futures::{StreamExt, TryStreamExt};
use open_deno_kv_model::change_log::{ChangeRecord, Replay};
use open_deno_kv_model::{
    Backend, DatabaseId, ImportSummary, KvEntry, Snapshot, SnapshotItem, Versionstamp,
};

use crate::inventory::{Inventory, SegmentObject, differential, load_manifests};
use crate::layout::codec::{decode_side, verify};
use crate::layout::{SNAPSHOTS, SnapshotManifest, decode_segment, decode_snapshot_range};
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

/// How many objects a reader fetches at once.
const FETCH_CONCURRENCY: usize = 16;

/// Reads one bucket (see the module documentation).
#[derive(Debug, Clone)]
pub struct BucketReader {
    target: Target,
}

/// A snapshot a restore can start from.
#[derive(Debug, Clone)]
enum Base {
    /// This crate's: its manifest.
    Ours(SnapshotManifest),
    /// Deno Deploy's: every range in sight, consistent at the differential once the segments up
    /// to it are replayed over them.
    Deploy {
        versionstamp: Versionstamp,
        at: Option<DateTime<Utc>>,
        ranges: Vec<String>,
        bytes: u64,
    },
}

impl Base {
    fn versionstamp(&self) -> Versionstamp {
        match self {
            Base::Ours(manifest) => manifest.versionstamp,
            Base::Deploy { versionstamp, .. } => *versionstamp,
        }
    }

    fn at(&self) -> Option<DateTime<Utc>> {
        match self {
            Base::Ours(manifest) => Some(manifest.at),
            Base::Deploy { at, .. } => *at,
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Base::Ours(manifest) => manifest.bytes(),
            Base::Deploy { bytes, .. } => *bytes,
        }
    }
}

/// The bucket as a restore sees it.
#[derive(Debug)]
struct Plan {
    inventory: Inventory,
    database: Option<DatabaseId>,
    bases: Vec<Base>,
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

    async fn plan(&self) -> Result<Plan, BucketError> {
        let inventory = Inventory::read(&self.target).await?;
        if inventory.is_ours() {
            let manifests = load_manifests(&self.target, &inventory).await?;
            let database = manifests.first().and_then(|manifest| manifest.database);
            return Ok(Plan {
                inventory,
                database,
                bases: manifests.into_iter().map(Base::Ours).collect(),
            });
        }
        let mut bases = Vec::new();
        if let Some(versionstamp) = differential(&self.target).await? {
            let visible: Vec<_> = inventory
                .ranges
                .values()
                .filter(|placed| placed.visible)
                .collect();
            bases.push(Base::Deploy {
                versionstamp,
                at: visible.iter().map(|placed| placed.modified).max(),
                ranges: visible
                    .iter()
                    .map(|placed| placed.name(SNAPSHOTS))
                    .collect(),
                bytes: visible.iter().map(|placed| placed.size).sum(),
            });
        }
        Ok(Plan {
            inventory,
            database: None,
            bases,
        })
    }

    /// The database the bucket's backups are of (`None`: a Deploy bucket, or an empty one).
    pub async fn database(&self) -> Result<Option<DatabaseId>, BucketError> {
        Ok(self.plan().await?.database)
    }

    /// Its snapshots and segments, without reading the segments.
    pub async fn summary(&self) -> Result<BucketSummary, BucketError> {
        let plan = self.plan().await?;
        let oldest = plan.bases.first().map(Base::versionstamp);
        let segments: Vec<&SegmentObject> = plan
            .inventory
            .segments
            .iter()
            .filter(|segment| oldest.is_some_and(|oldest| segment.name.last_commit() > oldest))
            .collect();
        let last = plan
            .bases
            .iter()
            .map(Base::versionstamp)
            .chain(segments.iter().map(|segment| segment.name.last_commit()))
            .max();
        Ok(BucketSummary {
            database: plan.database,
            snapshots: plan
                .bases
                .iter()
                .map(|base| SnapshotInfo {
                    versionstamp: base.versionstamp(),
                    at: base.at(),
                    entries: match base {
                        Base::Ours(manifest) => Some(manifest.entries),
                        Base::Deploy { .. } => None,
                    },
                    bytes: base.bytes(),
                })
                .collect(),
            segments: segments.len() as u64,
            segment_bytes: segments.iter().map(|segment| segment.placed.size).sum(),
            first: oldest,
            last,
        })
    }

    /// Every recovery point, oldest first: each snapshot's, and every commit of a segment after
    /// the oldest snapshot. Reads every segment's commit list (a bucket of this crate: its small
    /// `odkv/` side objects; a Deploy bucket: the segments themselves), checking the chain.
    pub async fn recovery_points(&self) -> Result<Vec<RecoveryPoint>, BucketError> {
        let plan = self.plan().await?;
        self.points_of(&plan).await
    }

    async fn points_of(&self, plan: &Plan) -> Result<Vec<RecoveryPoint>, BucketError> {
        let Some(oldest) = plan.bases.first().map(Base::versionstamp) else {
            return Ok(Vec::new());
        };
        let mut points: Vec<RecoveryPoint> = plan
            .bases
            .iter()
            .map(|base| RecoveryPoint {
                versionstamp: base.versionstamp(),
                at: base.at(),
                kind: PointKind::Snapshot,
                snapshot: base.versionstamp(),
                snapshot_bytes: base.bytes(),
                log_bytes: 0,
            })
            .collect();
        let mut chain = Chain::new(plan);
        let segments: Vec<&SegmentObject> = plan
            .inventory
            .segments
            .iter()
            .filter(|segment| segment.name.last_commit() > oldest)
            .collect();
        // Only a snapshot's own point can meet a commit again: the commits are searched for
        // among those, not among every point listed so far.
        let snapshot_points = points.len();
        let mut reads = futures::stream::iter(segments)
            .map(|segment| async move { (segment, self.commits_of(plan, segment).await) })
            .buffered(FETCH_CONCURRENCY);
        while let Some((segment, commits)) = reads.next().await {
            for record in commits? {
                let Some(base) = chain.admit(&self.target, segment, &record)? else {
                    continue;
                };
                let log_bytes = chain.log_bytes(segment);
                match points[..snapshot_points]
                    .iter_mut()
                    .find(|point| point.versionstamp == record.versionstamp)
                {
                    // A snapshot's own commit, also shipped in a segment: its commit time is
                    // the better time for it.
                    Some(point) => point.at = Some(record.at),
                    None => points.push(RecoveryPoint {
                        versionstamp: record.versionstamp,
                        at: Some(record.at),
                        kind: PointKind::Commit,
                        snapshot: base.versionstamp(),
                        snapshot_bytes: base.bytes(),
                        log_bytes,
                    }),
                }
            }
        }
        points.sort_by_key(|point| point.versionstamp);
        Ok(points)
    }

    /// The commits of `segment` (without their writes, for a bucket of this crate).
    async fn commits_of(
        &self,
        plan: &Plan,
        segment: &SegmentObject,
    ) -> Result<Vec<ChangeRecord>, BucketError> {
        if plan.inventory.is_ours() {
            let side = segment.side();
            let bytes = self
                .target
                .get_required(&side, "every segment of this program's buckets has one")
                .await?;
            decode_side(&self.target.full_name(&side), &bytes)
        } else {
            self.read_segment(plan, segment).await
        }
    }

    /// The commits of `segment`, with their writes, checked against its side object.
    async fn read_segment(
        &self,
        plan: &Plan,
        segment: &SegmentObject,
    ) -> Result<Vec<ChangeRecord>, BucketError> {
        let object = segment.object();
        let bytes = self
            .target
            .get_required(&object, "it was listed a moment ago")
            .await?;
        let full = self.target.full_name(&object);
        if plan.inventory.is_ours() {
            let side = segment.side();
            let side_bytes = self
                .target
                .get_required(&side, "every segment of this program's buckets has one")
                .await?;
            let side_full = self.target.full_name(&side);
            decode_segment(
                &full,
                &segment.name,
                &bytes,
                Some((&side_full, &side_bytes)),
            )
        } else {
            decode_segment(&full, &segment.name, &bytes, None)
        }
    }

    /// The state at `at`, as a snapshot to import. Refused: a point the bucket does not hold
    /// ([`BucketError::NoSuchPoint`], naming the nearest ones), an empty bucket, a gap before the
    /// point, an object missing, truncated or corrupt (naming it).
    pub async fn restore(&self, at: RestoreAt) -> Result<Snapshot, BucketError> {
        let plan = self.plan().await?;
        let points = self.points_of(&plan).await?;
        let point = resolve(&self.target, &points, at)?;
        let base = plan
            .bases
            .iter()
            .rev()
            .find(|base| base.versionstamp() == point.snapshot)
            .ok_or_else(|| BucketError::Empty {
                url: self.target.url().to_owned(),
            })?
            .clone();
        let base_stamp = base.versionstamp();
        // The records to replay: for a Deploy snapshot, also those up to it (its ranges were
        // read while commits went on; the log up to the differential makes them consistent).
        let mut records = Vec::new();
        let mut chain = Chain::new(&plan);
        let from_start = matches!(base, Base::Deploy { .. });
        let segments: Vec<&SegmentObject> = plan
            .inventory
            .segments
            .iter()
            .filter(|segment| {
                (from_start || segment.name.last_commit() > base_stamp)
                    && segment.name.first_commit() <= point.versionstamp
            })
            .collect();
        let plan = &plan;
        let mut reads = futures::stream::iter(segments)
            .map(|segment| async move { (segment, self.read_segment(plan, segment).await) })
            .buffered(FETCH_CONCURRENCY);
        while let Some((segment, commits)) = reads.next().await {
            for record in commits? {
                if record.versionstamp > point.versionstamp {
                    break;
                }
                if !from_start && record.versionstamp <= base_stamp {
                    continue;
                }
                if from_start {
                    chain.deploy_order(&self.target, segment, &record)?;
                    records.push(record);
                } else if chain.admit(&self.target, segment, &record)?.is_some() {
                    records.push(record);
                }
            }
        }
        let snapshot = self.base_snapshot(plan, &base).await?;
        if records.is_empty() {
            return Ok(snapshot);
        }
        match base {
            Base::Ours(_) => {
                let database = plan.database.ok_or_else(|| BucketError::Corrupt {
                    object: self.target.full_name(crate::layout::MANIFESTS),
                    detail: "the snapshots name no database, yet the bucket has commits".into(),
                })?;
                let mut replay = Replay::after(database, base_stamp);
                for record in records {
                    replay.apply(record)?;
                }
                Ok(replay.over(snapshot)?)
            }
            Base::Deploy { .. } => {
                // A Deploy bucket names no database; the replay needs one to check records
                // against, so both sides get the same stand-in, and the result names none.
                let stand_in = DatabaseId::random();
                let mut replay = Replay::after(stand_in, base_stamp);
                let mut last = base_stamp;
                for mut record in records {
                    record.database = Some(stand_in);
                    record.previous = last;
                    last = record.versionstamp;
                    replay.apply(record)?;
                }
                let snapshot = snapshot.of_database(Some(stand_in));
                let mut restored = replay.over(snapshot)?;
                restored.database = None;
                // A commit up to the differential may be older than the snapshot: the restore
                // stands at the later of the two.
                restored.versionstamp = restored.versionstamp.max(base_stamp);
                Ok(restored)
            }
        }
    }

    /// The snapshot `base` as a stream of its entries, then its messages.
    async fn base_snapshot(&self, plan: &Plan, base: &Base) -> Result<Snapshot, BucketError> {
        match base {
            Base::Ours(manifest) => {
                let mut objects = Vec::with_capacity(manifest.ranges.len());
                for range in &manifest.ranges {
                    let placed = plan.inventory.ranges.get(&range.file).ok_or_else(|| {
                        BucketError::MissingObject {
                            object: self.target.full_name(&format!("{SNAPSHOTS}{}", range.file)),
                            detail: format!("the snapshot {} lists it", manifest.versionstamp),
                        }
                    })?;
                    objects.push((placed.name(SNAPSHOTS), range.clone()));
                }
                let target = self.target.clone();
                let entries = futures::stream::iter(objects)
                    .then(move |(name, range)| {
                        let target = target.clone();
                        async move {
                            let bytes = target
                                .get_required(&name, "its snapshot's manifest lists it")
                                .await?;
                            let full = target.full_name(&name);
                            verify(&full, &bytes, range.len, &range.sha256)?;
                            decode_snapshot_range(&full, &bytes)
                        }
                    })
                    .map_ok(|entries| futures::stream::iter(entries.into_iter().map(Ok)))
                    .try_flatten()
                    .map_ok(SnapshotItem::Entry);
                let messages = futures::stream::iter(
                    manifest
                        .messages
                        .clone()
                        .into_iter()
                        .map(|message| Ok(SnapshotItem::Message(message))),
                );
                let items = entries
                    .chain(messages)
                    .map_err(|err: BucketError| match err {
                        BucketError::Store(err) => err,
                        other => open_deno_kv_model::KvError::invalid_argument(other.to_string()),
                    })
                    .boxed();
                Ok(Snapshot {
                    database: manifest.database,
                    versionstamp: manifest.versionstamp,
                    items,
                })
            }
            Base::Deploy {
                versionstamp,
                ranges,
                ..
            } => {
                let mut entries: Vec<KvEntry> = Vec::new();
                for name in ranges {
                    let bytes = self
                        .target
                        .get_required(name, "it was listed a moment ago")
                        .await?;
                    entries.extend(decode_snapshot_range(&self.target.full_name(name), &bytes)?);
                }
                entries.sort_by(|a, b| a.key.cmp(&b.key));
                if let Some(pair) = entries.windows(2).find(|pair| pair[0].key == pair[1].key) {
                    return Err(BucketError::Corrupt {
                        object: self.target.full_name(SNAPSHOTS),
                        detail: format!("two ranges hold key {}", hex::encode(&pair[0].key)),
                    });
                }
                Ok(Snapshot::from_items(
                    *versionstamp,
                    entries.into_iter().map(SnapshotItem::Entry).collect(),
                ))
            }
        }
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

/// The chain check of a walk through the segments, in commit order: every commit must follow the
/// last one seen, or a snapshot at the commit before it. Snapshots reset the chain.
struct Chain<'a> {
    bases: &'a [Base],
    ours: bool,
    last: Option<Versionstamp>,
    /// Bytes of segments since the base of the last commit admitted.
    bytes_since_base: u64,
    counted: Option<String>,
    base: Option<Versionstamp>,
}

impl<'a> Chain<'a> {
    fn new(plan: &'a Plan) -> Self {
        Chain {
            bases: &plan.bases,
            ours: plan.inventory.is_ours(),
            last: None,
            bytes_since_base: 0,
            counted: None,
            base: None,
        }
    }

    /// The newest base at or before `stamp`.
    fn base_before(&self, stamp: Versionstamp) -> Option<&'a Base> {
        self.bases
            .iter()
            .rev()
            .find(|base| base.versionstamp() <= stamp)
    }

    /// Admits `record` of `segment`: `None` when it is at or before the oldest snapshot (not a
    /// recovery point), else the snapshot a restore to it starts from. A record that does not
    /// follow on is a gap, refused naming the segment.
    fn admit(
        &mut self,
        target: &Target,
        segment: &SegmentObject,
        record: &ChangeRecord,
    ) -> Result<Option<&'a Base>, BucketError> {
        let Some(base) = self.base_before(record.versionstamp) else {
            self.last = Some(record.versionstamp);
            return Ok(None);
        };
        if base.versionstamp() == record.versionstamp {
            // The snapshot's own commit: the chain restarts from it.
            self.last = Some(record.versionstamp);
            return Ok(None);
        }
        let expected = match self.last {
            Some(last) if last >= base.versionstamp() => last,
            _ => {
                if self.base != Some(base.versionstamp()) {
                    self.bytes_since_base = 0;
                    self.counted = None;
                    self.base = Some(base.versionstamp());
                }
                base.versionstamp()
            }
        };
        if self.ours && record.previous != expected {
            return Err(BucketError::Gap {
                object: target.full_name(&segment.object()),
                previous: record.previous,
                last: expected,
            });
        }
        if !self.ours && record.versionstamp <= expected {
            return Err(BucketError::Corrupt {
                object: target.full_name(&segment.object()),
                detail: format!(
                    "commit {} comes after commit {expected}",
                    record.versionstamp
                ),
            });
        }
        self.last = Some(record.versionstamp);
        Ok(Some(base))
    }

    /// For a Deploy snapshot's restore: records in increasing order from the first segment.
    fn deploy_order(
        &mut self,
        target: &Target,
        segment: &SegmentObject,
        record: &ChangeRecord,
    ) -> Result<(), BucketError> {
        if self.last.is_some_and(|last| last >= record.versionstamp) {
            return Err(BucketError::Corrupt {
                object: target.full_name(&segment.object()),
                detail: format!("commit {} overlaps the segment before", record.versionstamp),
            });
        }
        self.last = Some(record.versionstamp);
        Ok(())
    }

    /// The bytes of the segments replayed since the current base, counting `segment` once.
    fn log_bytes(&mut self, segment: &SegmentObject) -> u64 {
        if self.counted.as_deref() != Some(segment.placed.file.as_str()) {
            self.counted = Some(segment.placed.file.clone());
            self.bytes_since_base += segment.placed.size;
        }
        self.bytes_since_base
    }
}

/// The recovery point `at` asks for, or the refusal naming the nearest ones.
fn resolve(
    target: &Target,
    points: &[RecoveryPoint],
    at: RestoreAt,
) -> Result<RecoveryPoint, BucketError> {
    let empty = || BucketError::Empty {
        url: target.url().to_owned(),
    };
    let shown = |point: Option<&RecoveryPoint>| {
        point.map_or_else(
            || "none".to_owned(),
            |point| match point.at {
                Some(at) => format!("{} at {}", point.versionstamp, at.to_rfc3339()),
                None => point.versionstamp.to_string(),
            },
        )
    };
    match at {
        RestoreAt::Latest => points.last().cloned().ok_or_else(empty),
        RestoreAt::Commit(stamp) => {
            if points.is_empty() {
                return Err(empty());
            }
            let index = points.partition_point(|point| point.versionstamp < stamp);
            match points.get(index) {
                Some(point) if point.versionstamp == stamp => Ok(point.clone()),
                after => Err(BucketError::NoSuchPoint {
                    asked: format!("commit {stamp}"),
                    before: shown(index.checked_sub(1).and_then(|i| points.get(i))),
                    after: shown(after),
                }),
            }
        }
        RestoreAt::Time(time) => {
            if points.is_empty() {
                return Err(empty());
            }
            let before = points
                .iter()
                .filter(|point| point.at.is_some_and(|at| at <= time))
                .max_by_key(|point| point.versionstamp);
            match before {
                Some(point) => Ok(point.clone()),
                None => Err(BucketError::NoSuchPoint {
                    asked: format!("time {}", time.to_rfc3339()),
                    before: "none".to_owned(),
                    after: shown(points.iter().find(|point| point.at.is_some())),
                }),
            }
        }
    }
}

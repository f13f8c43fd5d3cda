//! The continuous shipper: a store's snapshot, then its change log, as segments in a bucket.
//!
//! A [`Shipper`] ships one store ([`open_deno_kv_model::Backend`]) to one [`Target`]:
//!
//! 1. **Resume.** It reads the bucket's end: the newest complete snapshot and the last shipped
//!    commit ([`crate::reader`]). A bucket of another database is refused
//!    ([`BucketError::OtherDatabase`]); objects an interrupted run left half-written (snapshot
//!    ranges without their manifest, a segment's side object without its segment) are deleted.
//! 2. **Snapshot** when the bucket has none, when the store's change log no longer holds the
//!    commits after the last shipped one (pruned, switched off for a while, or a commit it did
//!    not record: the chain of `previous` breaks), when a commit cannot be carried by the layout
//!    (a range delete), and every [`ShipperConfig::snapshot_interval`]. Each is reported
//!    ([`ShipperStatus::last_snapshot`]) and logged.
//! 3. **Tail the log.** Records after the last shipped commit are gathered into a segment, which
//!    is closed and uploaded at most every [`ShipperConfig::segment_interval`] while commits
//!    arrive; nothing is written while the store is idle.
//! 4. **Retention.** Snapshots and segments older than [`ShipperConfig::retention`] are pruned,
//!    keeping every point inside the retention restorable ([`crate::retention`]).
//!
//! **The change log.** The shipper reads the store's change log
//! ([`open_deno_kv_model::Backend::read_change_log`]). If the log is off it switches it on with
//! [`ShipperConfig::change_log_retention`] (one day by default), and again if someone switches it
//! off while it ships (the commits in between then make a new snapshot); a log already on keeps
//! its retention. The retention must cover the longest outage of the bucket to be bridged without a
//! new snapshot: commits pruned from the log before they were shipped are not lost (a new
//! snapshot holds them) but their own recovery points are.
//!
//! **Failures.** The shipper is not in the store's commit path: when the bucket is unreachable
//! or refuses writes, commits go on, and the shipper retries with back-off
//! ([`ShipperConfig::retry_initial`] doubling up to [`ShipperConfig::retry_max`], timed on the
//! injected clock), reporting its lag and last error in [`ShipperStatus`], and resumes by itself.
//!
//! **Cancel safety.** Every object is written whole (an object store's put is atomic) and a
//! segment is shipped only once its last object is written, so dropping [`Shipper::run`] or
//! [`Shipper::ship_until_caught_up`] at any await loses nothing the store acknowledged: the next
//! run resumes from the bucket's end, and re-ships what was not complete.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use open_deno_kv_model::change_log::{ChangeRecord, MAX_READ};
use open_deno_kv_model::{Backend, Clock, DatabaseId, KvEntry, SnapshotItem, Versionstamp};
use tokio::sync::watch;

use crate::inventory::{Inventory, load_manifests, shown};
use crate::layout::{
    ARCHIVE, DIFFERENTIAL, LOGS, MANIFESTS, RangeRecord, SNAPSHOTS, SnapshotManifest,
    SnapshotRangeName, encode_segment, encode_snapshot_range, manifest_file,
};
use crate::{BucketError, Target};

/// How a [`Shipper`] works. [`ShipperConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct ShipperConfig {
    /// The longest a commit waits in an open segment while commits arrive: 1 s by default. This
    /// bounds the loss window (recovery point objective) when the machine is lost.
    pub segment_interval: Duration,
    /// A new snapshot every this long (`None`: only when needed, see the module documentation).
    /// One day by default: a restore replays at most this much log.
    pub snapshot_interval: Option<Duration>,
    /// Snapshots and segments older than this are pruned, keeping every point inside it
    /// restorable (`None`: keep everything). Seven days by default. Pruning runs after each
    /// snapshot and when the shipper starts, and only ever removes what an older snapshot made
    /// unnecessary: without periodic snapshots, everything after the last one stays.
    pub retention: Option<Duration>,
    /// The change log retention the shipper switches on when the store's log is off: one day by
    /// default.
    pub change_log_retention: Duration,
    /// The first wait after a failure: 100 ms by default.
    pub retry_initial: Duration,
    /// The longest wait between two attempts: 30 s by default.
    pub retry_max: Duration,
    /// A snapshot is split into range objects of about this many bytes: 8 MiB by default.
    pub snapshot_range_bytes: usize,
    /// The clock segments, retention and back-off are timed on.
    pub clock: Arc<dyn Clock>,
}

impl ShipperConfig {
    /// The defaults, timed on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        ShipperConfig {
            segment_interval: Duration::from_secs(1),
            snapshot_interval: Some(Duration::from_secs(24 * 3600)),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            change_log_retention: Duration::from_secs(24 * 3600),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(30),
            snapshot_range_bytes: 8 << 20,
            clock,
        }
    }
}

/// Why the shipper took a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotReason {
    /// The bucket held none.
    First,
    /// The store's change log no longer holds the commits after the last shipped one.
    LogGap,
    /// A commit the layout cannot carry (a range delete) was shipped.
    Inexpressible,
    /// [`ShipperConfig::snapshot_interval`] passed.
    Periodic,
}

/// A snapshot the shipper wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotTaken {
    /// Its versionstamp.
    pub versionstamp: Versionstamp,
    /// When it was written (the shipper's clock).
    pub at: DateTime<Utc>,
    /// Why.
    pub reason: SnapshotReason,
}

/// Where a shipper stands: what [`Shipper::status`] publishes after every step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipperStatus {
    /// The database being shipped.
    pub database: Option<DatabaseId>,
    /// The last commit the bucket holds (`None` before the first snapshot).
    pub shipped: Option<Versionstamp>,
    /// The store's last logged commit, as last read.
    pub store_last: Option<Versionstamp>,
    /// Commits the store acknowledged that the bucket does not hold yet (counted from the
    /// store's log).
    pub commits_behind: u64,
    /// How long the oldest commit not yet shipped has waited (zero when caught up).
    pub behind: Duration,
    /// The last failure, while it lasts: cleared once a step succeeds.
    pub last_error: Option<String>,
    /// Since when the shipper has been failing, if it is.
    pub failing_since: Option<DateTime<Utc>>,
    /// The last snapshot written in this run.
    pub last_snapshot: Option<SnapshotTaken>,
    /// Segments written in this run.
    pub segments_written: u64,
    /// Commits shipped in this run.
    pub commits_shipped: u64,
}

/// What one [`Shipper::ship_until_caught_up`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShipReport {
    /// The last commit the bucket now holds.
    pub shipped: Option<Versionstamp>,
    /// Snapshots written.
    pub snapshots: Vec<SnapshotTaken>,
    /// Segments written.
    pub segments: u64,
    /// Commits shipped in them.
    pub commits: u64,
    /// Objects pruned by retention.
    pub pruned: u64,
}

/// Ships one store to one bucket (see the module documentation).
pub struct Shipper {
    backend: Arc<dyn Backend>,
    target: Target,
    config: ShipperConfig,
    status: watch::Sender<ShipperStatus>,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipper")
            .field("target", &self.target.url())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Shipper {
    /// A shipper of `backend` to `target`. Nothing happens until [`Shipper::run`] or
    /// [`Shipper::ship_until_caught_up`].
    pub fn new(backend: Arc<dyn Backend>, target: Target, config: ShipperConfig) -> Self {
        Shipper {
            backend,
            target,
            config,
            status: watch::Sender::new(ShipperStatus::default()),
        }
    }

    /// Its status, updated after every step (a segment, a snapshot, a failure, a retry).
    pub fn status(&self) -> watch::Receiver<ShipperStatus> {
        self.status.subscribe()
    }

    /// The target it ships to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Ships until dropped: resumes, snapshots when needed, then tails the change log, closing a
    /// segment at most every [`ShipperConfig::segment_interval`]. Transient failures
    /// ([`BucketError::is_transient`]) are retried with back-off and reported in the status;
    /// it returns only with an error that retrying cannot cure (another database's bucket, a
    /// store without an export or change log, a corrupt bucket). Cancel-safe.
    pub async fn run(&self) -> Result<(), BucketError> {
        let mut progress: Option<Progress> = None;
        let mut backoff = self.config.retry_initial;
        loop {
            let mut report = ShipReport::default();
            let result = match progress.as_mut() {
                Some(progress) => self.step(progress, &mut report).await,
                None => match self.resume(&mut report).await {
                    Ok(resumed) => {
                        let shipped = progress.insert(resumed);
                        self.step(shipped, &mut report).await
                    }
                    Err(err) => Err(err),
                },
            };
            match result {
                Ok(()) => {
                    backoff = self.config.retry_initial;
                    if let Some(progress) = &progress {
                        self.publish_ok(progress).await;
                    }
                    self.sleep(self.config.segment_interval).await;
                }
                Err(err) if err.is_transient() => {
                    // What the bucket holds is uncertain after a failed request (a put may have
                    // landed): the next attempt reads its end again.
                    let shipped = progress.take().and_then(|progress| progress.shipped);
                    self.publish_err(&err, shipped).await;
                    tracing::warn!(
                        target: "open_deno_kv_bucket",
                        url = self.target.url(),
                        retry_in_ms = backoff.as_millis() as u64,
                        "shipping failed: {err}"
                    );
                    self.sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_max);
                }
                Err(err) => {
                    self.publish_err(&err, progress.and_then(|progress| progress.shipped))
                        .await;
                    return Err(err);
                }
            }
        }
    }

    /// One pass, for tests and `kv replicate --once`: resumes (or snapshots), ships every commit
    /// the store's log holds now in segments, and prunes by retention. Fails on the first error,
    /// transient or not (no retry). Cancel-safe.
    pub async fn ship_until_caught_up(&self) -> Result<ShipReport, BucketError> {
        let mut report = ShipReport::default();
        let result = async {
            let mut progress = self.resume(&mut report).await?;
            self.step(&mut progress, &mut report).await?;
            Ok::<_, BucketError>(progress)
        }
        .await;
        match result {
            Ok(progress) => {
                self.publish_ok(&progress).await;
                report.shipped = progress.shipped;
                Ok(report)
            }
            Err(err) => {
                self.publish_err(&err, None).await;
                Err(err)
            }
        }
    }

    async fn sleep(&self, by: Duration) {
        let until = self.now() + TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
        self.config.clock.sleep_until(until).await;
    }

    fn now(&self) -> DateTime<Utc> {
        self.config.clock.now()
    }

    /// Reads the bucket's end, checks it is this store's, cleans what an interrupted run left,
    /// and takes a snapshot if the bucket has none or the log does not continue it.
    async fn resume(&self, report: &mut ShipReport) -> Result<Progress, BucketError> {
        let capabilities = self.backend.capabilities();
        if !capabilities.export {
            return Err(BucketError::Unsupported(
                "its engine offers no consistent export (snapshot)".into(),
            ));
        }
        if !capabilities.change_log {
            return Err(BucketError::Unsupported(
                "its engine keeps no change log".into(),
            ));
        }
        let mut status = self.backend.change_log_status().await?;
        if status.retention.is_none() {
            self.backend
                .configure_change_log(Some(self.config.change_log_retention))
                .await?;
            status = self.backend.change_log_status().await?;
        }
        let database = status.database;
        let inventory = Inventory::read(&self.target).await?;
        if !inventory.is_ours() && !inventory.is_empty() {
            return Err(BucketError::Unsupported(format!(
                "{} holds backups this program did not write (a Deno Deploy bucket?): ship to \
                 another bucket or prefix",
                self.target.url()
            )));
        }
        let manifests = load_manifests(&self.target, &inventory).await?;
        if let Some(manifest) = manifests.last()
            && manifest.database != database
        {
            return Err(match manifest.database {
                Some(bucket) => BucketError::OtherDatabase {
                    url: self.target.url().to_owned(),
                    bucket,
                    store: shown(database),
                },
                None => BucketError::Unsupported(format!(
                    "{} holds backups that name no database: ship to another bucket or prefix",
                    self.target.url()
                )),
            });
        }
        // Range objects no manifest lists are a snapshot an interrupted run did not finish;
        // side objects without their segment, a segment it did not finish.
        let listed: HashSet<&str> = manifests
            .iter()
            .flat_map(|manifest| manifest.ranges.iter().map(|range| range.file.as_str()))
            .collect();
        for placed in inventory.ranges.values() {
            if !listed.contains(placed.file.as_str()) {
                self.target
                    .delete_object(&format!("{SNAPSHOTS}{}", placed.file))
                    .await?;
                self.target
                    .delete_object(&format!("{ARCHIVE}{SNAPSHOTS}{}", placed.file))
                    .await?;
            }
        }
        for side in &inventory.orphan_sides {
            self.target
                .delete_object(&format!("{}{side}", crate::layout::SIDES))
                .await?;
        }
        let latest = manifests.last();
        let last_segment = inventory
            .segments
            .iter()
            .filter(|segment| segment.has_side)
            .map(|segment| segment.name.last_commit())
            .max();
        let mut progress = Progress {
            database,
            latest_snapshot: latest.map(|manifest| manifest.versionstamp),
            last_snapshot_at: latest.map(|manifest| manifest.at),
            shipped: latest
                .map(|manifest| manifest.versionstamp)
                .max(last_segment),
        };
        if let Some(latest) = latest {
            // An interrupted snapshot may have written its manifest but not yet `differential`
            // or the move of the generation before it.
            if crate::inventory::differential(&self.target).await? != Some(latest.versionstamp) {
                self.target
                    .put_bytes(DIFFERENTIAL, latest.versionstamp.to_string().into_bytes())
                    .await?;
            }
            self.archive_before(&inventory, latest).await?;
        }
        match progress.shipped {
            None => {
                self.snapshot(&mut progress, SnapshotReason::First, report)
                    .await?
            }
            Some(shipped) => {
                let next = self.backend.read_change_log(shipped, 1).await?;
                if next
                    .first()
                    .is_some_and(|record| record.previous != shipped)
                {
                    self.snapshot(&mut progress, SnapshotReason::LogGap, report)
                        .await?;
                }
            }
        }
        if let Some(retention) = self.config.retention {
            report.pruned += self.prune(retention).await?;
        }
        Ok(progress)
    }

    /// Moves what denokv must no longer replay out of its sight: snapshot ranges of older
    /// snapshots, and segments ending at or before `latest`.
    async fn archive_before(
        &self,
        inventory: &Inventory,
        latest: &SnapshotManifest,
    ) -> Result<(), BucketError> {
        let current: HashSet<&str> = latest
            .ranges
            .iter()
            .map(|range| range.file.as_str())
            .collect();
        for placed in inventory.ranges.values() {
            if placed.visible && !current.contains(placed.file.as_str()) {
                self.target
                    .move_object(
                        &format!("{SNAPSHOTS}{}", placed.file),
                        &format!("{ARCHIVE}{SNAPSHOTS}{}", placed.file),
                    )
                    .await?;
            }
        }
        for segment in &inventory.segments {
            if segment.placed.visible && segment.name.last_commit() <= latest.versionstamp {
                self.target
                    .move_object(
                        &format!("{LOGS}{}", segment.placed.file),
                        &format!("{ARCHIVE}{LOGS}{}", segment.placed.file),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn prune(&self, retention: Duration) -> Result<u64, BucketError> {
        let pruned = crate::retention::prune(&self.target, retention, self.now()).await?;
        Ok(pruned.snapshots + pruned.segments)
    }

    /// A periodic snapshot if one is due, then every commit the log holds after the last
    /// shipped one.
    async fn step(
        &self,
        progress: &mut Progress,
        report: &mut ShipReport,
    ) -> Result<(), BucketError> {
        if self.backend.change_log_status().await?.retention.is_none() {
            // Someone switched the log off (`kv log disable`): commits since are not logged, and
            // the next logged one will not follow the last shipped one, which makes a snapshot.
            tracing::warn!(
                target: "open_deno_kv_bucket",
                url = self.target.url(),
                "the store's change log was switched off while shipping; switching it on again"
            );
            self.backend
                .configure_change_log(Some(self.config.change_log_retention))
                .await?;
        }
        if let (Some(interval), Some(last)) =
            (self.config.snapshot_interval, progress.last_snapshot_at)
            && self.now() - last >= TimeDelta::from_std(interval).unwrap_or(TimeDelta::MAX)
        {
            self.snapshot(progress, SnapshotReason::Periodic, report)
                .await?;
            if let Some(retention) = self.config.retention {
                report.pruned += self.prune(retention).await?;
            }
        }
        loop {
            let Some(shipped) = progress.shipped else {
                self.snapshot(progress, SnapshotReason::First, report)
                    .await?;
                continue;
            };
            let page = self.backend.read_change_log(shipped, MAX_READ).await?;
            let full = page.len() >= MAX_READ;
            if page.is_empty() {
                return Ok(());
            }
            let mut batch: Vec<ChangeRecord> = Vec::new();
            let mut then = None;
            let mut last = shipped;
            for record in page {
                if record.previous != last {
                    then = Some(SnapshotReason::LogGap);
                    break;
                }
                last = record.versionstamp;
                let ranges = !record.changes.deleted_ranges.is_empty();
                batch.push(record);
                if ranges {
                    then = Some(SnapshotReason::Inexpressible);
                    break;
                }
            }
            // A page holds up to 1,000 commits of up to 800 KiB each: segments are cut by size
            // too, so no object (nor the memory to build it) grows past about SEGMENT_BYTES.
            let mut start = 0;
            let mut bytes = 0;
            for (index, record) in batch.iter().enumerate() {
                bytes += record_bytes(record);
                if bytes >= SEGMENT_BYTES || index + 1 == batch.len() {
                    self.ship_segment(progress, &batch[start..=index], report)
                        .await?;
                    start = index + 1;
                    bytes = 0;
                }
            }
            if let Some(reason) = then {
                self.snapshot(progress, reason, report).await?;
                continue;
            }
            if !full {
                return Ok(());
            }
        }
    }

    /// Uploads `batch` as one segment: its side object first, then the segment (the segment's
    /// appearance is what makes it shipped).
    async fn ship_segment(
        &self,
        progress: &mut Progress,
        batch: &[ChangeRecord],
        report: &mut ShipReport,
    ) -> Result<(), BucketError> {
        let encoded = encode_segment(batch, self.now())?;
        let file = encoded.name.file();
        self.target
            .put_bytes(&format!("{}{file}", crate::layout::SIDES), encoded.side)
            .await?;
        self.target
            .put_bytes(&format!("{LOGS}{file}"), encoded.segment)
            .await?;
        progress.shipped = Some(encoded.name.last_commit());
        report.segments += 1;
        report.commits += batch.len() as u64;
        self.status.send_modify(|status| {
            status.segments_written += 1;
            status.commits_shipped += batch.len() as u64;
            status.shipped = progress.shipped;
        });
        Ok(())
    }

    /// Exports the store and writes it: range objects, the manifest, then `differential`; then
    /// moves the older generation out of denokv's sight.
    async fn snapshot(
        &self,
        progress: &mut Progress,
        reason: SnapshotReason,
        report: &mut ShipReport,
    ) -> Result<(), BucketError> {
        let snapshot = self.backend.export_snapshot().await?;
        let versionstamp = snapshot.versionstamp;
        let at = self.now();
        if progress.latest_snapshot == Some(versionstamp) {
            // Nothing was committed since the last snapshot: it is still current.
            progress.last_snapshot_at = Some(at);
            return Ok(());
        }
        let mut items = snapshot.items;
        let mut ranges = Vec::new();
        let mut batch: Vec<KvEntry> = Vec::new();
        let mut batch_bytes = 0usize;
        let mut entries = 0u64;
        let mut messages = Vec::new();
        while let Some(item) = items.next().await {
            match item? {
                SnapshotItem::Entry(entry) => {
                    batch_bytes += entry.key.len() + entry.value.encoded_len() + 32;
                    entries += 1;
                    batch.push(entry);
                    if batch_bytes >= self.config.snapshot_range_bytes {
                        ranges.push(self.write_range(versionstamp, ranges.len(), &batch).await?);
                        batch.clear();
                        batch_bytes = 0;
                    }
                }
                SnapshotItem::Message(message) => messages.push(message),
            }
        }
        if !batch.is_empty() || ranges.is_empty() {
            ranges.push(self.write_range(versionstamp, ranges.len(), &batch).await?);
        }
        let manifest = SnapshotManifest {
            database: progress.database,
            versionstamp,
            at,
            ranges,
            entries,
            messages,
        };
        self.target
            .put_bytes(
                &format!("{MANIFESTS}{}", manifest_file(versionstamp)),
                manifest.encode(),
            )
            .await?;
        self.target
            .put_bytes(DIFFERENTIAL, versionstamp.to_string().into_bytes())
            .await?;
        let inventory = Inventory::read(&self.target).await?;
        self.archive_before(&inventory, &manifest).await?;
        progress.latest_snapshot = Some(versionstamp);
        progress.last_snapshot_at = Some(at);
        progress.shipped = Some(
            progress
                .shipped
                .map_or(versionstamp, |shipped| shipped.max(versionstamp)),
        );
        let taken = SnapshotTaken {
            versionstamp,
            at,
            reason,
        };
        report.snapshots.push(taken);
        self.status.send_modify(|status| {
            status.last_snapshot = Some(taken);
            status.shipped = progress.shipped;
        });
        match reason {
            SnapshotReason::First | SnapshotReason::Periodic => tracing::info!(
                target: "open_deno_kv_bucket",
                url = self.target.url(),
                "wrote snapshot {versionstamp} ({reason:?})"
            ),
            SnapshotReason::LogGap | SnapshotReason::Inexpressible => tracing::warn!(
                target: "open_deno_kv_bucket",
                url = self.target.url(),
                "wrote a new snapshot {versionstamp}: {}",
                match reason {
                    SnapshotReason::LogGap =>
                        "the store's change log no longer holds the commits after the last \
                         shipped one",
                    _ => "a commit deleted a key range, which the layout cannot carry",
                }
            ),
        }
        Ok(())
    }

    async fn write_range(
        &self,
        versionstamp: Versionstamp,
        seq: usize,
        entries: &[KvEntry],
    ) -> Result<RangeRecord, BucketError> {
        let name = SnapshotRangeName {
            format_version: 1,
            monoseq: versionstamp.version(),
            seq: seq as u64,
        };
        let bytes = encode_snapshot_range(entries);
        let record = RangeRecord::of(name.file(), &bytes);
        self.target
            .put_bytes(&format!("{SNAPSHOTS}{}", name.file()), bytes)
            .await?;
        Ok(record)
    }

    /// How far the bucket is behind the store's log.
    async fn lag(&self, shipped: Option<Versionstamp>) -> (Option<Versionstamp>, u64, Duration) {
        let Ok(status) = self.backend.change_log_status().await else {
            return (None, 0, Duration::ZERO);
        };
        let store_last = status.last.map(|mark| mark.versionstamp);
        let Some(shipped) = shipped else {
            return (store_last, status.records, Duration::ZERO);
        };
        if store_last.is_none_or(|last| last <= shipped) {
            return (store_last, 0, Duration::ZERO);
        }
        let mut count = 0u64;
        let mut oldest = None;
        let mut cursor = shipped;
        // Counted a page at a time, up to a bound: a status must stay cheap.
        for _ in 0..LAG_PAGES {
            let Ok(page) = self.backend.read_change_log(cursor, MAX_READ).await else {
                break;
            };
            let Some(last) = page.last() else { break };
            cursor = last.versionstamp;
            oldest = oldest.or(page.first().map(|record| record.at));
            count += page.len() as u64;
            if page.len() < MAX_READ {
                break;
            }
        }
        let behind = oldest
            .and_then(|oldest| (self.now() - oldest).to_std().ok())
            .unwrap_or(Duration::ZERO);
        (store_last, count, behind)
    }

    async fn publish_ok(&self, progress: &Progress) {
        let (store_last, commits_behind, behind) = self.lag(progress.shipped).await;
        self.status.send_modify(|status| {
            status.database = progress.database;
            status.shipped = progress.shipped;
            status.store_last = store_last;
            status.commits_behind = commits_behind;
            status.behind = behind;
            status.last_error = None;
            status.failing_since = None;
        });
    }

    async fn publish_err(&self, err: &BucketError, shipped: Option<Versionstamp>) {
        let shipped = shipped.or(self.status.borrow().shipped);
        let (store_last, commits_behind, behind) = self.lag(shipped).await;
        let now = self.now();
        self.status.send_modify(|status| {
            status.store_last = store_last.or(status.store_last);
            status.commits_behind = commits_behind;
            status.behind = behind;
            status.last_error = Some(err.to_string());
            status.failing_since = status.failing_since.or(Some(now));
        });
    }
}

/// About the most bytes of keys and values one segment holds (a single larger commit makes a
/// segment of its own): 16 MiB.
const SEGMENT_BYTES: usize = 16 << 20;

/// The bytes of keys and values a record carries, as a segment holds them.
fn record_bytes(record: &ChangeRecord) -> usize {
    record
        .changes
        .writes
        .iter()
        .map(|(key, state)| {
            key.len() + state.as_ref().map_or(0, |entry| entry.value.encoded_len()) + 32
        })
        .sum::<usize>()
        + 64
}

/// How many pages of the log a lag count reads at most (so at most 100,000 commits are
/// counted; beyond that the status says 100,000).
const LAG_PAGES: usize = 100;

/// Where a running shipper stands.
#[derive(Debug, Clone)]
struct Progress {
    database: Option<DatabaseId>,
    /// The last commit the bucket holds.
    shipped: Option<Versionstamp>,
    /// The newest snapshot's versionstamp.
    latest_snapshot: Option<Versionstamp>,
    /// When it was written.
    last_snapshot_at: Option<DateTime<Utc>>,
}

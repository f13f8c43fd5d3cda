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
//! [`ShipperConfig::change_log_retention`] (one day by default); a log already on keeps its
//! retention. The retention must cover the longest outage of the bucket to be bridged without a
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

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_model::{Backend, Clock, DatabaseId, Versionstamp};
use tokio::sync::watch;

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
    /// restorable (`None`: keep everything). Seven days by default.
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
        todo!("{self:?}")
    }

    /// One pass, for tests and `kv replicate --once`: resumes (or snapshots), ships every commit
    /// the store's log holds now in segments, and prunes by retention. Fails on the first error,
    /// transient or not (no retry). Cancel-safe.
    pub async fn ship_until_caught_up(&self) -> Result<ShipReport, BucketError> {
        todo!("{self:?}")
    }
}

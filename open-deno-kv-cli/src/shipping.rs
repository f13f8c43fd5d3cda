//! Shipping a store to a bucket, for `kv replicate` and `kv serve --backup-to`: the shipper of
//! open-deno-kv-bucket, run under a lock that lets one process at a time ship a store, with its
//! lag published (`kv serve`'s `/metrics`) and its failures summarised in the log.
//!
//! **One shipper per store.** Two processes shipping one store would write two interleaved
//! logs into one bucket. So a process ships only while it holds the store's shipping lock
//! ([`ShipLock`]): on PostgreSQL, where several `kv serve` share a store, the
//! [`ShippingLease`] (a session-level advisory lock the server drops when the holder's
//! connection ends, a `kill -9` included); on a SQLite or redb file, an exclusive lock on a file
//! beside it (`FILE.backup-lock`, which the operating system drops when the holder dies). A
//! process that finds the lock held waits and tries again every second, so it takes over within
//! about a second of the holder's end. The holder confirms a lease every second, and stops
//! shipping the moment it is lost.
//!
//! **Failures** (the bucket unreachable, refusing writes) are retried by the shipper with
//! back-off, and commits go on meanwhile. The lag is read from the store itself every second
//! (its change log after the last commit shipped), so it shows even while the shipper waits on
//! a bucket that does not answer; a shipper that ships nothing for ten segment intervals (at
//! least ten seconds) while commits wait counts as failing. The log gets the first failure at once, then at most
//! one summary line per warning interval while it lasts (how long, how many attempts, how far
//! behind, the last error), and one line when shipping works again: never a line per attempt.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_bucket::{
    BucketReader, ShipReport, Shipper, ShipperConfig, ShipperStatus, Target,
};
use open_deno_kv_model::change_log::MAX_READ;
use open_deno_kv_model::{Backend, Clock};
use open_deno_kv_postgres::ShippingLease;
use open_deno_kv_server::metrics::{ShippingGauges, ShippingReading};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cli::ShippingFlags;
use crate::duration::format_duration;
use crate::error::CliError;
use crate::store::parse_url;

/// How often a process that waits for the lock tries it again, and how often the holder
/// confirms a lease: a dead holder is replaced within about this long.
const LOCK_INTERVAL: Duration = Duration::from_secs(1);

/// A store, a bucket, and how to ship the one to the other.
pub struct Shipping {
    db: String,
    target: Target,
    config: ShipperConfig,
    warning_interval: Duration,
    gauges: Option<ShippingGauges>,
}

impl Shipping {
    /// Checks everything a shipper needs before it starts, so that bad input is refused at once
    /// with a non-zero exit: the bucket URL (scheme, credentials), the bucket (it exists and may
    /// be listed), that it holds no other database's backups, and that `db` can be shipped from
    /// here (not a KV Connect URL).
    pub async fn prepare(
        db: &str,
        url: &str,
        backend: &dyn Backend,
        flags: &ShippingFlags,
        warning_interval: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Shipping, CliError> {
        let scheme = parse_url(db)?.scheme();
        if matches!(scheme, "http" | "https") {
            return Err(CliError::CannotShip {
                db: db.to_owned(),
                reason: "a KV Connect server's store is shipped by the server that holds it \
                         (kv serve --backup-to)"
                    .to_owned(),
            });
        }
        let target = Target::parse(url)?;
        target.check().await?;
        let store = backend.change_log_status().await?.database;
        if let (Some(bucket), Some(store)) =
            (BucketReader::new(target.clone()).database().await?, store)
            && bucket != store
        {
            return Err(open_deno_kv_bucket::BucketError::OtherDatabase {
                url: url.to_owned(),
                bucket,
                store: store.to_string(),
            }
            .into());
        }
        let segment_interval = Duration::try_from_secs_f64(flags.backup_segment_interval)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                CliError::ServeRefused(
                    "--backup-segment-interval must be a positive number of seconds".into(),
                )
            })?;
        let mut config = ShipperConfig::new(clock);
        config.segment_interval = segment_interval;
        config.retention = Some(flags.backup_retention);
        config.snapshot_interval = Some(flags.backup_snapshot_interval);
        Ok(Shipping {
            db: db.to_owned(),
            target,
            config,
            warning_interval,
            gauges: None,
        })
    }

    /// Publishes the shipper's lag and state in `gauges` (`kv serve`'s `/metrics`).
    pub fn with_gauges(mut self, gauges: ShippingGauges) -> Self {
        self.gauges = Some(gauges);
        self
    }

    /// The bucket's URL.
    pub fn url(&self) -> &str {
        self.target.url()
    }

    /// Ships `backend` for as long as the future is polled: waits for the shipping lock, ships
    /// while it holds it, and waits again if it loses it. Returns only with an error that
    /// retrying cannot cure (another database's bucket, a corrupt bucket). Cancel-safe: the
    /// shipper is, and a dropped lock is released.
    pub async fn run(&self, backend: Arc<dyn Backend>) -> Result<(), CliError> {
        let mut waiting_told = false;
        loop {
            let lock = match ShipLock::try_take(&self.db).await {
                Ok(Some(lock)) => lock,
                Ok(None) => {
                    if !waiting_told {
                        tracing::info!(
                            "another process ships {} to {}; this one takes over when it stops",
                            self.db,
                            self.url()
                        );
                        waiting_told = true;
                    }
                    self.record(ShippingReading::default());
                    tokio::time::sleep(LOCK_INTERVAL).await;
                    continue;
                }
                Err(err) => {
                    tracing::warn!("cannot take the shipping lock ({err}); trying again");
                    tokio::time::sleep(LOCK_INTERVAL).await;
                    continue;
                }
            };
            waiting_told = false;
            tracing::info!(
                "shipping {} to {} (a log segment at most every {})",
                self.db,
                self.url(),
                format_duration(self.config.segment_interval)
            );
            let shipper = Shipper::new(backend.clone(), self.target.clone(), self.config.clone());
            let status = shipper.status();
            tokio::select! {
                result = shipper.run() => {
                    self.record(ShippingReading { failing: true, ..ShippingReading::default() });
                    result?;
                    return Ok(());
                }
                reason = lock.lost() => {
                    self.record(ShippingReading::default());
                    tracing::warn!(
                        "lost the shipping lock of {} ({reason}): stopped shipping to {}; \
                         another process may ship now, this one takes over when it is free",
                        self.db,
                        self.url()
                    );
                }
                () = self.report(&*backend, status) => {}
            }
        }
    }

    /// Ships every commit `backend` holds now, then returns what it did (`kv replicate
    /// --once`). Refused while another process ships the store.
    pub async fn once(&self, backend: Arc<dyn Backend>) -> Result<ShipReport, CliError> {
        let Some(_lock) = ShipLock::try_take(&self.db).await? else {
            return Err(CliError::ShippingLock {
                db: self.db.clone(),
                reason: "another process ships this database now; --once would interleave its \
                         segments with that one's (stop it, or let it ship)"
                    .to_owned(),
            });
        };
        let shipper = Shipper::new(backend, self.target.clone(), self.config.clone());
        Ok(shipper.ship_until_caught_up().await?)
    }

    fn record(&self, reading: ShippingReading) {
        if let Some(gauges) = &self.gauges {
            gauges.record(reading);
        }
    }

    /// Follows the shipper: its status after every step, and every [`PROBE_INTERVAL`] the
    /// store's change log after the last commit shipped (a shipper stuck in a request to a
    /// bucket that does not answer publishes nothing, but the commits waiting still show);
    /// the gauges and the failure summaries (see the module docs) follow. Returns when the
    /// shipper is gone.
    async fn report(&self, backend: &dyn Backend, mut status: watch::Receiver<ShipperStatus>) {
        let mut summary = FailureSummary::new(self.url(), self.warning_interval);
        let mut segments_seen = 0;
        let mut probe = tokio::time::interval(PROBE_INTERVAL);
        let mut tick = tokio::time::interval(self.warning_interval);
        let mut health = Health::default();
        loop {
            tokio::select! {
                changed = status.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let segments = status.borrow_and_update().segments_written;
                    if let Some(gauges) = &self.gauges {
                        gauges.segments_written(segments.saturating_sub(segments_seen));
                    }
                    segments_seen = segments_seen.max(segments);
                }
                _ = probe.tick() => {}
                _ = tick.tick() => {
                    summary.tick(&health, Instant::now());
                    continue;
                }
            }
            let current = status.borrow().clone();
            health = self.health(backend, &current).await;
            self.record(ShippingReading {
                shipping: true,
                lag: health.behind,
                commits_behind: health.commits_behind,
                failing: health.error.is_some(),
            });
            summary.step(&health, Instant::now());
        }
    }

    /// How the shipping stands: the shipper's status, with the commits waiting read from the
    /// store's log after the last one shipped, and a shipper that ships nothing for
    /// [`Shipping::stall_after`] while commits wait counted as failing.
    async fn health(&self, backend: &dyn Backend, status: &ShipperStatus) -> Health {
        let mut health = Health {
            error: status.last_error.clone(),
            commits_behind: status.commits_behind,
            behind: status.behind,
        };
        let Some(shipped) = status.shipped else {
            return health;
        };
        // A failed read leaves the shipper's own figures (it reads the same log and will say).
        if let Ok(waiting) = backend.read_change_log(shipped, MAX_READ).await
            && let Some(oldest) = waiting.first()
        {
            health.commits_behind = health.commits_behind.max(waiting.len() as u64);
            let waited = (self.config.clock.now() - oldest.at)
                .to_std()
                .unwrap_or_default();
            health.behind = health.behind.max(waited);
            if health.error.is_none() && health.behind >= self.stall_after() {
                health.error = Some(format!(
                    "no commit shipped for {} while {} wait{} (the bucket does not answer, or \
                     answers too slowly)",
                    format_duration(round(health.behind)),
                    health.commits_behind,
                    if waiting.len() == MAX_READ {
                        " or more"
                    } else {
                        ""
                    }
                ));
            }
        }
        health
    }

    /// How long the oldest waiting commit may wait before shipping counts as failing: ten
    /// segment intervals, and at least ten seconds (a snapshot of a large store takes a while).
    fn stall_after(&self) -> Duration {
        (self.config.segment_interval * 10).max(Duration::from_secs(10))
    }
}

/// How often the store's change log is read for the commits waiting to be shipped.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How the shipping stands (see [`Shipping::health`]).
#[derive(Debug, Clone, Default, PartialEq)]
struct Health {
    /// Why it fails, while it does.
    error: Option<String>,
    /// Commits acknowledged that the bucket does not hold.
    commits_behind: u64,
    /// How long the oldest of them has waited.
    behind: Duration,
}

/// The failure lines of one shipper: the first failure at once, a summary per interval while
/// failing, a line when it works again.
struct FailureSummary {
    url: String,
    interval: Duration,
    /// Since when it fails, and the readings that saw it failing since the last line.
    failing: Option<(Instant, u64)>,
    last_line: Option<Instant>,
    last_error: Option<String>,
}

impl FailureSummary {
    fn new(url: &str, interval: Duration) -> Self {
        FailureSummary {
            url: url.to_owned(),
            interval,
            failing: None,
            last_line: None,
            last_error: None,
        }
    }

    /// A new reading: failing, working again, or progress.
    fn step(&mut self, health: &Health, now: Instant) {
        match (&health.error, &mut self.failing) {
            (Some(error), None) => {
                tracing::warn!(
                    "shipping to {} failed: {error}; retrying with back-off (commits go on; \
                     further failures are summarised every {})",
                    self.url,
                    format_duration(self.interval)
                );
                self.failing = Some((now, 0));
                self.last_line = Some(now);
                self.last_error = Some(error.clone());
            }
            (Some(error), Some((_, readings))) => {
                *readings += 1;
                self.last_error = Some(error.clone());
            }
            (None, Some((since, _))) => {
                tracing::info!(
                    "shipping to {} works again after {} of failures; {} commit(s) behind",
                    self.url,
                    format_duration(round(now.saturating_duration_since(*since))),
                    health.commits_behind
                );
                self.failing = None;
                self.last_error = None;
            }
            (None, None) => {}
        }
    }

    /// The interval's summary, if failing and the last line is an interval old.
    fn tick(&mut self, health: &Health, now: Instant) {
        let Some((since, readings)) = &mut self.failing else {
            return;
        };
        if self
            .last_line
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            return;
        }
        tracing::warn!(
            "shipping to {} has failed for {} ({} failing reading(s) in the last {}); {} \
             commit(s) and {} behind; last error: {}",
            self.url,
            format_duration(round(now.saturating_duration_since(*since))),
            readings,
            format_duration(self.interval),
            health.commits_behind,
            format_duration(round(health.behind)),
            self.last_error.as_deref().unwrap_or("none")
        );
        *readings = 0;
        self.last_line = Some(now);
    }
}

/// `duration` to whole seconds (log lines need no more).
fn round(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs())
}

/// The right to ship one store (see the module docs).
enum ShipLock {
    /// A PostgreSQL store's lease.
    Lease(ShippingLease),
    /// An exclusive lock on `FILE.backup-lock`: held while the file is open, so the file is
    /// kept, never read.
    File(#[allow(dead_code)] std::fs::File),
    /// An in-memory store lives in this process alone.
    Process,
}

impl ShipLock {
    /// Takes the lock of `db`: `None` when another process holds it.
    async fn try_take(db: &str) -> Result<Option<ShipLock>, CliError> {
        let url = parse_url(db)?;
        let failed = |reason: String| CliError::ShippingLock {
            db: db.to_owned(),
            reason,
        };
        match url.scheme() {
            "postgres" => Ok(ShippingLease::try_acquire(db)
                .await
                .map_err(|e| failed(e.to_string()))?
                .map(ShipLock::Lease)),
            "memory" => Ok(Some(ShipLock::Process)),
            _ => {
                let Some(path) = url.path() else {
                    return Err(failed("it names no file to lock beside".to_owned()));
                };
                let mut name = path.as_os_str().to_os_string();
                name.push(".backup-lock");
                let lock_path = PathBuf::from(name);
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
                    .map_err(|e| failed(format!("{}: {e}", lock_path.display())))?;
                match file.try_lock() {
                    Ok(()) => Ok(Some(ShipLock::File(file))),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                    Err(std::fs::TryLockError::Error(e)) => {
                        Err(failed(format!("{}: {e}", lock_path.display())))
                    }
                }
            }
        }
    }

    /// Completes when the lock is lost, with why: a lease is confirmed every
    /// [`LOCK_INTERVAL`]; a file lock or a process's is never lost while held.
    async fn lost(&self) -> String {
        match self {
            ShipLock::Lease(lease) => loop {
                tokio::time::sleep(LOCK_INTERVAL).await;
                if let Err(err) = lease.confirm().await {
                    return err.to_string();
                }
            },
            ShipLock::File(_) | ShipLock::Process => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failing(error: &str) -> Health {
        Health {
            error: Some(error.to_owned()),
            commits_behind: 7,
            behind: Duration::from_secs(12),
        }
    }

    #[test]
    fn failures_are_told_once_then_summarised_per_interval_and_recovery_is_told() {
        let start = Instant::now();
        let mut summary = FailureSummary::new("s3://b/p", Duration::from_secs(10));
        summary.step(&failing("refused"), start);
        assert!(summary.failing.is_some());
        for second in 1..5 {
            summary.step(&failing("refused"), start + Duration::from_secs(second));
        }
        assert_eq!(summary.failing.map(|(_, n)| n), Some(4));
        // Within the interval: no line, the count stays.
        summary.tick(&failing("refused"), start + Duration::from_secs(5));
        assert_eq!(summary.failing.map(|(_, n)| n), Some(4));
        // At its end: one line, the count restarts.
        summary.tick(&failing("refused"), start + Duration::from_secs(10));
        assert_eq!(summary.failing.map(|(_, n)| n), Some(0));
        assert_eq!(summary.last_line, Some(start + Duration::from_secs(10)));
        summary.step(&Health::default(), start + Duration::from_secs(11));
        assert!(summary.failing.is_none());
        // Healthy: ticks say nothing.
        summary.tick(&Health::default(), start + Duration::from_secs(30));
        assert_eq!(summary.last_line, Some(start + Duration::from_secs(10)));
    }
}

//! The command line's face of continuous backup (open-deno-kv-bucket): `kv replicate`, `kv
//! backups list|status` and `kv restore --from`. `kv serve --backup-to` ships through the same
//! [`crate::shipping`].

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use open_deno_kv_bucket::{BucketReader, PointKind, RecoveryPoint, RestoreAt, ShipReport, Target};
use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::change_log::{MAX_READ, RestorePoint};
use open_deno_kv_model::{Clock, Versionstamp};
use serde_json::{Value as Json, json};

use crate::cli::{LogFormat, LogLevel, ReplicateArgs, ReportFormat};
use crate::duration::{format_duration, plural};
use crate::error::CliError;
use crate::shipping::Shipping;
use crate::store::{Access, Target as StoreTarget, open};

/// `kv replicate --to URL`: ships `db` until interrupted, or with `--once` until the bucket
/// holds every commit made so far.
pub async fn replicate(db: &str, args: ReplicateArgs) -> Result<(), CliError> {
    crate::logging::init(LogLevel::Info, LogFormat::Text)?;
    let warning_interval = Duration::try_from_secs_f64(args.warning_interval)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            CliError::ServeRefused("--warning-interval must be a positive number of seconds".into())
        })?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let kv = open(db, Access::Write)?;
    let backend = kv.backend().clone();
    let result = async {
        let shipping = Shipping::prepare(
            db,
            &args.to,
            &*backend,
            &args.shipping,
            warning_interval,
            clock,
        )
        .await?;
        if args.once {
            let report = shipping.once(backend.clone()).await?;
            eprintln!("{}", describe_report(&report, shipping.url()));
            Ok(())
        } else {
            tokio::select! {
                result = shipping.run(backend.clone()) => result,
                () = crate::serve::shutdown_signal() => {
                    tracing::info!("stopped shipping {db} to {}", shipping.url());
                    Ok(())
                }
            }
        }
    }
    .await;
    drop(backend);
    kv.close().await?;
    result
}

/// What `kv replicate --once` says it did.
fn describe_report(report: &ShipReport, url: &str) -> String {
    let mut text = match report.shipped {
        Some(last) => format!("{url} holds every commit up to versionstamp {last}"),
        None => format!("{url} holds nothing: the database has no commit to ship"),
    };
    text += &format!(
        " ({} and {} in {} shipped now",
        plural(report.snapshots.len() as u64, "snapshot", "snapshots"),
        plural(report.commits, "commit", "commits"),
        plural(report.segments, "segment", "segments"),
    );
    if report.pruned > 0 {
        text += &format!(
            "; {} pruned by retention",
            plural(report.pruned, "object", "objects")
        );
    }
    text + ")"
}

/// `kv restore --from URL [--at POINT]`: the bucket's state at `point` (its latest without one)
/// into the new or empty database `db`, all or nothing.
pub async fn restore_from(
    url: &str,
    point: Option<RestorePoint>,
    db: &str,
) -> Result<(), CliError> {
    let at = match point {
        None => RestoreAt::Latest,
        Some(RestorePoint::Commit(versionstamp)) => RestoreAt::Commit(versionstamp),
        Some(RestorePoint::Time(time)) => RestoreAt::Time(time),
    };
    let reader = BucketReader::new(Target::parse(url)?);
    let target = StoreTarget::create(db).await?;
    let backend = target.kv()?.backend().clone();
    if !backend.capabilities().import {
        return Err(CliError::NoImport { db: db.to_owned() });
    }
    let snapshot = reader.restore(at).await?;
    let versionstamp = snapshot.versionstamp;
    let summary = backend.import_snapshot(snapshot).await?;
    drop(backend);
    target.commit().await?;
    eprintln!(
        "restored {} and {} into {db} from {url}, as of versionstamp {versionstamp}",
        plural(summary.entries, "entry", "entries"),
        plural(summary.messages, "queued message", "queued messages"),
    );
    Ok(())
}

/// `kv backups list URL`: the bucket's database, snapshots and recovery points.
pub async fn list(url: &str, format: ReportFormat) -> Result<(), CliError> {
    let reader = BucketReader::new(Target::parse(url)?);
    let summary = reader.summary().await?;
    let points = reader.recovery_points().await?;
    match format {
        ReportFormat::Json => {
            let document = json!({
                "url": url,
                "database": summary.database.map(|d| d.to_string()),
                "snapshots": summary.snapshots.iter().map(|s| json!({
                    "versionstamp": s.versionstamp.to_string(),
                    "at": s.at.map(time),
                    "entries": s.entries,
                    "bytes": s.bytes,
                })).collect::<Vec<_>>(),
                "segments": summary.segments,
                "segment_bytes": summary.segment_bytes,
                "recovery_points": points.iter().map(point_json).collect::<Vec<_>>(),
            });
            println!("{document:#}");
        }
        ReportFormat::Text => {
            println!("bucket: {url}");
            println!(
                "database: {}",
                summary.database.map_or_else(
                    || "(not named: a Deno Deploy bucket)".to_owned(),
                    |d| d.to_string()
                )
            );
            println!(
                "snapshots: {}; log segments: {} ({} bytes)",
                summary.snapshots.len(),
                summary.segments,
                summary.segment_bytes
            );
            println!("recovery points: {}", points.len());
            println!("VERSIONSTAMP\tTIME\tKIND\tBYTES TO READ");
            for point in &points {
                println!(
                    "{}\t{}\t{}\t{}",
                    point.versionstamp,
                    point.at.map_or_else(|| "-".to_owned(), time),
                    kind(point.kind),
                    point.snapshot_bytes + point.log_bytes
                );
            }
        }
    }
    Ok(())
}

/// One recovery point in `kv backups list --format json`.
fn point_json(point: &RecoveryPoint) -> Json {
    json!({
        "versionstamp": point.versionstamp.to_string(),
        "at": point.at.map(time),
        "kind": kind(point.kind),
        "snapshot": point.snapshot.to_string(),
        "snapshot_bytes": point.snapshot_bytes,
        "log_bytes": point.log_bytes,
    })
}

fn kind(kind: PointKind) -> &'static str {
    match kind {
        PointKind::Snapshot => "snapshot",
        PointKind::Commit => "commit",
    }
}

fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `kv backups status URL` of `db`: the last commit the bucket holds, and the commits of
/// `db`'s change log after it (how many, and how long the oldest has waited).
pub async fn status(db: &str, url: &str, format: ReportFormat) -> Result<(), CliError> {
    let reader = BucketReader::new(Target::parse(url)?);
    let kv = open(db, Access::Read)?;
    let result = async {
        let summary = reader.summary().await?;
        let log = kv.backend().change_log_status().await?;
        let lag = match summary.last {
            Some(shipped) => Some(unshipped(&**kv.backend(), shipped).await?),
            None => None,
        };
        Ok::<_, CliError>((summary, log, lag))
    }
    .await;
    kv.close().await?;
    let (summary, log, lag) = result?;
    let now = Utc::now();
    let waited = |oldest: Option<DateTime<Utc>>| {
        oldest.map_or(Duration::ZERO, |at| {
            (now - at).to_std().unwrap_or(Duration::ZERO)
        })
    };
    match format {
        ReportFormat::Json => {
            let document = json!({
                "url": url,
                "database": db,
                "shipped": summary.last.map(|v| v.to_string()),
                "store_last": log.last.map(|m| m.versionstamp.to_string()),
                "commits_behind": lag.map(|l| l.commits),
                "lag_seconds": lag.map(|l| waited(l.oldest).as_secs_f64()),
            });
            println!("{document:#}");
        }
        ReportFormat::Text => {
            println!("bucket: {url}");
            match (summary.last, lag) {
                (None, _) | (_, None) => {
                    println!("shipped: nothing yet (the bucket holds no snapshot)")
                }
                (Some(shipped), Some(lag)) => {
                    println!("shipped: up to versionstamp {shipped}");
                    if lag.commits == 0 {
                        println!("behind: nothing, the bucket holds every commit of {db}");
                    } else {
                        println!(
                            "behind: {}{}, the oldest waiting {}",
                            plural(lag.commits, "commit", "commits"),
                            if lag.capped { " or more" } else { "" },
                            format_duration(Duration::from_secs(waited(lag.oldest).as_secs()))
                        );
                    }
                }
            }
            if let Some(last) = log.last {
                println!("store's last logged commit: {}", last.versionstamp);
            } else if log.retention.is_none() {
                println!(
                    "store's change log: off (the shipper switches it on; `kv log status` tells)"
                );
            }
        }
    }
    Ok(())
}

/// The commits of a store's log after the bucket's last one.
#[derive(Debug, Clone, Copy)]
struct Unshipped {
    commits: u64,
    /// When the oldest of them ran.
    oldest: Option<DateTime<Utc>>,
    /// Counting stopped at [`MAX_UNSHIPPED_COUNTED`].
    capped: bool,
}

/// Counting stops here: a status need not read a huge backlog whole.
const MAX_UNSHIPPED_COUNTED: u64 = 100_000;

async fn unshipped(
    backend: &dyn open_deno_kv_model::Backend,
    shipped: Versionstamp,
) -> Result<Unshipped, CliError> {
    let mut after = shipped;
    let mut lag = Unshipped {
        commits: 0,
        oldest: None,
        capped: false,
    };
    loop {
        let page = backend.read_change_log(after, MAX_READ).await?;
        let Some(last) = page.last() else {
            return Ok(lag);
        };
        after = last.versionstamp;
        if lag.oldest.is_none() {
            lag.oldest = page.first().map(|record| record.at);
        }
        lag.commits += page.len() as u64;
        if lag.commits >= MAX_UNSHIPPED_COUNTED {
            lag.capped = true;
            return Ok(lag);
        }
    }
}

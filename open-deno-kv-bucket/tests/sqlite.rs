//! A SQLite file shipped to a directory, restored at every recovery point into a new SQLite file.

// Helpers of a test binary outside `#[test]` functions: a failure is the test failing.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use open_deno_kv::{EnqueueOptions, Kv, key};
use open_deno_kv_bucket::{BucketReader, RestoreAt, Shipper, Target};
use open_deno_kv_engine_kit::{FileEngine, SystemClock};
use open_deno_kv_model::{Backend, Clock};
use open_deno_kv_sqlite::SqliteBackend;

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_store_restores_at_every_point_into_another_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let source: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open(dir.path().join("source.db")).unwrap());
    let kv = Kv::with_clock(source.clone(), clock.clone());
    let url = format!("file://{}/bucket/", dir.path().display());
    let shipper = Shipper::new(
        source.clone(),
        Target::parse(&url).unwrap(),
        config(clock.clone()),
    );
    kv.set(key!["seed"], 0u64).await.unwrap();
    shipper.ship_until_caught_up().await.unwrap();
    let mut history = History::default();
    history.record(&*source).await;
    for round in 0..3u64 {
        kv.set(key!["n", round], round).await.unwrap();
        history.record(&*source).await;
        kv.set_expiring(key!["e"], format!("v{round}"), Duration::from_secs(3600))
            .await
            .unwrap();
        history.record(&*source).await;
        let outcome = kv
            .atomic()
            .sum(key!["total"], round + 1)
            .delete(key!["seed"])
            .commit()
            .await
            .unwrap();
        assert!(outcome.is_committed());
        history.record(&*source).await;
        kv.enqueue(round, EnqueueOptions::default()).await.unwrap();
        history.record(&*source).await;
        shipper.ship_until_caught_up().await.unwrap();
    }
    let reader = BucketReader::new(Target::parse(&url).unwrap());
    let points = reader.recovery_points().await.unwrap();
    assert_eq!(points.len(), history.0.len());
    for (index, point) in points.iter().enumerate() {
        let target: Arc<dyn Backend> =
            Arc::new(SqliteBackend::open(dir.path().join(format!("restored-{index}.db"))).unwrap());
        reader
            .restore_into(RestoreAt::Commit(point.versionstamp), &*target)
            .await
            .unwrap();
        let (stamp, mut restored) = state(&*target).await;
        assert_eq!(stamp, point.versionstamp);
        let mut expected = history.0[&point.versionstamp].clone();
        // The messages in one order on both sides (ids are random; ready times may tie).
        for items in [&mut restored, &mut expected] {
            items.sort_by_key(|item| format!("{item:?}"));
        }
        assert_eq!(restored, expected, "at {}", point.versionstamp);
        target.close().await.unwrap();
    }
    source.close().await.unwrap();
}

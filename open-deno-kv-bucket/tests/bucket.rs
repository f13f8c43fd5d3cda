//! The shipper and the reader together, against memory and directory targets.
// Helpers of a test binary outside `#[test]` functions: a failure is the test failing.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use open_deno_kv::{EnqueueOptions, Selector, key};
use open_deno_kv_bucket::layout::{LOGS, SIDES};
use open_deno_kv_bucket::{BucketError, BucketReader, RestoreAt, Shipper, SnapshotReason, Target};
use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::{Clock, ManualClock};

/// Writes a few commits of every kind, recording the state after each.
async fn some_commits(kv: &open_deno_kv::Kv, history: &mut History, round: u64) {
    let backend = kv.backend().clone();
    kv.set(key!["a", round], round).await.unwrap();
    history.record(&*backend).await;
    kv.set_expiring(key!["exp", round], "soon", Duration::from_secs(3600))
        .await
        .unwrap();
    history.record(&*backend).await;
    kv.set(key!["bytes"], vec![1u8, 2, round as u8])
        .await
        .unwrap();
    history.record(&*backend).await;
    kv.delete(key!["a", round.wrapping_sub(1)]).await.unwrap();
    history.record(&*backend).await;
    kv.enqueue(format!("message {round}"), EnqueueOptions::default())
        .await
        .unwrap();
    history.record(&*backend).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_recovery_point_restores_the_state_the_store_had() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (backend, kv) = memory_store(clock.clone());
    let (target, _) = memory_target();
    let mut history = History::default();
    kv.set(key!["before"], 1u64).await.unwrap();
    let shipper = Shipper::new(backend.clone(), target.clone(), config(clock.clone()));
    let first = shipper.ship_until_caught_up().await.unwrap();
    assert_eq!(first.snapshots.len(), 1);
    assert_eq!(first.snapshots[0].reason, SnapshotReason::First);
    history.record(&*backend).await;
    for round in 1..4 {
        some_commits(&kv, &mut history, round).await;
        let report = shipper.ship_until_caught_up().await.unwrap();
        assert_eq!(report.commits, 5, "round {round}");
        assert!(report.snapshots.is_empty());
    }
    let reader = BucketReader::new(target);
    assert_eq!(
        reader.database().await.unwrap(),
        backend.change_log_status().await.unwrap().database
    );
    let points = reader.recovery_points().await.unwrap();
    assert_eq!(points.len(), history.0.len(), "{points:#?}");
    for point in &points {
        let expected = &history.0[&point.versionstamp];
        let restored = reader
            .restore(RestoreAt::Commit(point.versionstamp))
            .await
            .unwrap();
        assert_eq!(restored.versionstamp, point.versionstamp);
        assert_eq!(
            &items(restored).await,
            expected,
            "at {}",
            point.versionstamp
        );
    }
    // The latest, and into another store.
    let (target_backend, _) = memory_store(clock.clone());
    reader
        .restore_into(RestoreAt::Latest, &*target_backend)
        .await
        .unwrap();
    assert_eq!(state(&*target_backend).await.1, state(&*backend).await.1);
    // A point the bucket does not hold names its neighbours.
    let missing = open_deno_kv_model::Versionstamp::from_version(
        points.last().unwrap().versionstamp.version() + 5,
        0,
    );
    let err = reader
        .restore(RestoreAt::Commit(missing))
        .await
        .unwrap_err();
    assert!(matches!(err, BucketError::NoSuchPoint { .. }), "{err}");
    assert!(
        err.to_string()
            .contains(&points.last().unwrap().versionstamp.to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_shipper_resumes_where_the_bucket_ends() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (backend, kv) = memory_store(clock.clone());
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/bucket/", dir.path().display());
    let mut history = History::default();
    let shipper = Shipper::new(
        backend.clone(),
        Target::parse(&url).unwrap(),
        config(clock.clone()),
    );
    shipper.ship_until_caught_up().await.unwrap();
    some_commits(&kv, &mut history, 1).await;
    shipper.ship_until_caught_up().await.unwrap();
    drop(shipper);
    some_commits(&kv, &mut history, 2).await;
    let again = Shipper::new(
        backend.clone(),
        Target::parse(&url).unwrap(),
        config(clock.clone()),
    );
    let report = again.ship_until_caught_up().await.unwrap();
    assert!(report.snapshots.is_empty(), "{report:?}");
    assert_eq!(report.commits, 5);
    let reader = BucketReader::new(Target::parse(&url).unwrap());
    for (stamp, expected) in &history.0 {
        let restored = reader.restore(RestoreAt::Commit(*stamp)).await.unwrap();
        assert_eq!(&items(restored).await, expected);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_that_no_longer_continues_the_bucket_makes_a_new_snapshot() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (backend, kv) = memory_store(clock.clone());
    let (target, _) = memory_target();
    let shipper = Shipper::new(backend.clone(), target.clone(), config(clock.clone()));
    shipper.ship_until_caught_up().await.unwrap();
    kv.set(key!["logged"], 1u64).await.unwrap();
    shipper.ship_until_caught_up().await.unwrap();
    // Commits the log does not record: switched off, then on again.
    kv.disable_change_log().await.unwrap();
    kv.set(key!["unlogged"], 2u64).await.unwrap();
    kv.enable_change_log(Duration::from_secs(3600))
        .await
        .unwrap();
    kv.set(key!["after"], 3u64).await.unwrap();
    let report = shipper.ship_until_caught_up().await.unwrap();
    assert_eq!(report.snapshots.len(), 1, "{report:?}");
    assert_eq!(report.snapshots[0].reason, SnapshotReason::LogGap);
    let reader = BucketReader::new(target.clone());
    let restored = reader.restore(RestoreAt::Latest).await.unwrap();
    assert_eq!(items(restored).await, state(&*backend).await.1);
    // The older generation is out of denokv's sight.
    let visible = futures::StreamExt::count(target.store().list(Some(&target.path("logs")))).await;
    assert_eq!(visible, 0, "segments before the new snapshot stay visible");
    // A range delete, which denokv's layout cannot carry, is shipped and followed by a snapshot.
    kv.set(key!["r", 1], 1u64).await.unwrap();
    kv.delete_range(Selector::prefix(key!["r"])).await.unwrap();
    let report = shipper.ship_until_caught_up().await.unwrap();
    assert_eq!(report.snapshots.len(), 1, "{report:?}");
    assert_eq!(report.snapshots[0].reason, SnapshotReason::Inexpressible);
    let restored = reader.restore(RestoreAt::Latest).await.unwrap();
    assert_eq!(items(restored).await, state(&*backend).await.1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_bucket_reports_lag_then_catches_up_with_nothing_skipped() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (backend, kv) = memory_store(clock.clone());
    let flaky = Arc::new(Flaky::new(Arc::new(object_store::memory::InMemory::new())));
    let target = Target::from_store(flaky.clone(), "p", "memory://flaky/p/");
    let mut config = config(clock.clone());
    config.segment_interval = Duration::from_millis(20);
    config.retry_initial = Duration::from_millis(10);
    config.retry_max = Duration::from_millis(40);
    let shipper = Arc::new(Shipper::new(backend.clone(), target.clone(), config));
    let mut status = shipper.status();
    let running = tokio::spawn({
        let shipper = shipper.clone();
        async move { shipper.run().await }
    });
    let wait = Duration::from_secs(30);
    tokio::time::timeout(wait, status.wait_for(|s| s.shipped.is_some()))
        .await
        .expect("first snapshot (hang guard)")
        .unwrap();
    let mut history = History::default();
    some_commits(&kv, &mut history, 1).await;
    let last = state(&*backend).await.0;
    tokio::time::timeout(wait, status.wait_for(|s| s.shipped == Some(last)))
        .await
        .expect("caught up (hang guard)")
        .unwrap();
    flaky.set_failing(true);
    some_commits(&kv, &mut history, 2).await;
    let lagging = tokio::time::timeout(
        wait,
        status.wait_for(|s| s.last_error.is_some() && s.commits_behind == 5),
    )
    .await
    .expect("lag reported (hang guard)")
    .unwrap()
    .clone();
    assert!(lagging.failing_since.is_some());
    assert!(lagging.last_error.unwrap().contains("unreachable"));
    flaky.set_failing(false);
    let last = state(&*backend).await.0;
    tokio::time::timeout(
        wait,
        status.wait_for(|s| s.shipped == Some(last) && s.last_error.is_none()),
    )
    .await
    .expect("caught up again (hang guard)")
    .unwrap();
    running.abort();
    let reader = BucketReader::new(target);
    let points = reader.recovery_points().await.unwrap();
    for (stamp, expected) in &history.0 {
        assert!(
            points.iter().any(|p| p.versionstamp == *stamp),
            "{stamp} skipped"
        );
        let restored = reader.restore(RestoreAt::Commit(*stamp)).await.unwrap();
        assert_eq!(&items(restored).await, expected);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_keeps_every_point_inside_it_restorable() {
    let manual = Arc::new(ManualClock::at_test_epoch());
    let clock: Arc<dyn Clock> = manual.clone();
    let (backend, kv) = memory_store(clock.clone());
    let (target, _) = memory_target();
    let mut config = config(clock.clone());
    config.snapshot_interval = Some(Duration::from_secs(3600));
    config.retention = Some(Duration::from_secs(3 * 3600));
    let shipper = Shipper::new(backend.clone(), target.clone(), config);
    let mut history = History::default();
    let mut times = Vec::new();
    for round in 0..8u64 {
        some_commits(&kv, &mut history, round).await;
        shipper.ship_until_caught_up().await.unwrap();
        times.push((clock.now(), state(&*backend).await.0));
        manual.advance(Duration::from_secs(3600));
    }
    let reader = BucketReader::new(target);
    let summary = reader.summary().await.unwrap();
    assert!(summary.snapshots.len() < 8, "nothing pruned: {summary:?}");
    let horizon = clock.now() - chrono::TimeDelta::hours(3);
    for (at, stamp) in &times {
        if *at >= horizon {
            let restored = reader.restore(RestoreAt::Time(*at)).await.unwrap();
            assert_eq!(restored.versionstamp, *stamp);
            assert_eq!(&items(restored).await, &history.0[stamp]);
        }
    }
    let oldest = times.first().unwrap().1;
    assert!(reader.restore(RestoreAt::Commit(oldest)).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn damaged_and_missing_objects_are_refused_by_name() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (backend, kv) = memory_store(clock.clone());
    let (target, _) = memory_target();
    let shipper = Shipper::new(backend.clone(), target.clone(), config(clock.clone()));
    shipper.ship_until_caught_up().await.unwrap();
    let mut history = History::default();
    for round in 0..3 {
        some_commits(&kv, &mut history, round).await;
        shipper.ship_until_caught_up().await.unwrap();
    }
    let store = target.store().clone();
    let logs: Vec<_> = {
        use futures::TryStreamExt;
        let mut all: Vec<_> = store
            .list(Some(&target.path("logs")))
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        all.sort_by(|a, b| a.location.cmp(&b.location));
        all.into_iter().map(|meta| meta.location).collect()
    };
    assert_eq!(logs.len(), 3);
    let reader = BucketReader::new(target.clone());
    use object_store::ObjectStoreExt;
    let original = store.get(&logs[1]).await.unwrap().bytes().await.unwrap();
    // Truncated.
    store
        .put(&logs[1], original.slice(..original.len() - 3).into())
        .await
        .unwrap();
    let err = reader.restore(RestoreAt::Latest).await.unwrap_err();
    assert!(matches!(err, BucketError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains(logs[1].as_ref()), "{err}");
    // Damaged in place.
    let mut damaged = original.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    store.put(&logs[1], damaged.into()).await.unwrap();
    let err = reader.restore(RestoreAt::Latest).await.unwrap_err();
    assert!(err.to_string().contains(logs[1].as_ref()), "{err}");
    // Missing, with its side object: a gap named at the segment after it.
    store.delete(&logs[1]).await.unwrap();
    let side = target.path(&format!("{SIDES}{}", logs[1].filename().unwrap()));
    store.delete(&side).await.unwrap();
    let err = reader.restore(RestoreAt::Latest).await.unwrap_err();
    assert!(matches!(err, BucketError::Gap { .. }), "{err}");
    assert!(err.to_string().contains(logs[2].as_ref()), "{err}");
    // A segment without its side object.
    store.put(&logs[1], original.into()).await.unwrap();
    let err = reader.restore(RestoreAt::Latest).await.unwrap_err();
    assert!(err.to_string().contains(LOGS), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_of_another_database_is_refused() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (first, _) = memory_store(clock.clone());
    let (second, _) = memory_store(clock.clone());
    let (target, _) = memory_target();
    Shipper::new(first.clone(), target.clone(), config(clock.clone()))
        .ship_until_caught_up()
        .await
        .unwrap();
    let err = Shipper::new(second, target, config(clock))
        .ship_until_caught_up()
        .await
        .unwrap_err();
    assert!(matches!(err, BucketError::OtherDatabase { .. }), "{err}");
    let id = first.change_log_status().await.unwrap().database.unwrap();
    assert!(err.to_string().contains(&id.to_string()), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_without_this_programs_objects_is_read_as_deno_deploy_writes_it() {
    use futures::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt};
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let (backend, kv) = memory_store(clock.clone());
    let (target, store) = memory_target();
    let shipper = Shipper::new(backend.clone(), target.clone(), config(clock.clone()));
    kv.set(key!["x"], 1u64).await.unwrap();
    shipper.ship_until_caught_up().await.unwrap();
    let mut history = History::default();
    for round in 0..2 {
        kv.set(key!["a", round], round).await.unwrap();
        kv.set_expiring(key!["e"], "v", Duration::from_secs(60))
            .await
            .unwrap();
        kv.delete(key!["x"]).await.unwrap();
        history.record(&*backend).await;
        shipper.ship_until_caught_up().await.unwrap();
    }
    // Only what denokv reads: no odkv/ objects.
    let deploy = Arc::new(object_store::memory::InMemory::new());
    let all: Vec<_> = store.list(None).try_collect().await.unwrap();
    for meta in all {
        if !meta.location.as_ref().starts_with("db/odkv/") {
            let bytes = store
                .get(&meta.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            deploy.put(&meta.location, bytes.into()).await.unwrap();
        }
    }
    let reader = BucketReader::new(Target::from_store(deploy, "db", "memory://deploy/db/"));
    assert_eq!(reader.database().await.unwrap(), None);
    let restored = reader.restore(RestoreAt::Latest).await.unwrap();
    assert_eq!(restored.database, None);
    let (stamp, expected) = history.0.last_key_value().unwrap();
    assert_eq!(restored.versionstamp, *stamp);
    // The layout carries entries, versionstamps and expiry; messages are not in these commits.
    assert_eq!(&items(restored).await, expected);
}

#[test]
fn unknown_schemes_and_missing_credentials_are_refused_naming_the_url() {
    let err = Target::parse("ftp://host/dir").unwrap_err();
    assert!(matches!(err, BucketError::InvalidUrl { .. }), "{err}");
    assert!(err.to_string().contains("ftp://host/dir"), "{err}");
    // SAFETY of the test: no other test of this binary reads these variables.
    if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
        let err = Target::parse("s3://bucket/prefix/").unwrap_err();
        assert!(
            matches!(err, BucketError::MissingCredentials { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("s3://bucket/prefix/"), "{err}");
    }
    assert!(Target::parse("file://relative/dir").is_err());
}

#[tokio::test]
async fn a_directory_target_is_created_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b");
    let target = Target::parse(&format!("file://{}/", path.display())).unwrap();
    assert!(path.is_dir());
    target.check().await.unwrap();
    let flaky = Arc::new(Flaky::new(Arc::new(object_store::memory::InMemory::new())));
    flaky.set_failing(true);
    let err = Target::from_store(flaky, "x", "memory://down/x/")
        .check()
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("memory://down/x/"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shipper_stopped_between_any_two_writes_loses_nothing_on_the_next_start() {
    use futures::TryStreamExt;
    use object_store::ObjectStore;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::at_test_epoch());
    let mut config = config(clock.clone());
    // Several range objects per snapshot, so a snapshot can stop half-way.
    config.snapshot_range_bytes = 64;
    // Every number of writes a pass can get through before it stops, until one gets through all.
    for allowed in 0.. {
        let (backend, kv) = memory_store(clock.clone());
        let flaky = Arc::new(Flaky::new(Arc::new(object_store::memory::InMemory::new())));
        let target = Target::from_store(flaky.clone(), "p", "memory://crash/p/");
        let mut history = History::default();
        for i in 0..6u64 {
            kv.set(key!["k", i], i).await.unwrap();
        }
        let shipper = Shipper::new(backend.clone(), target.clone(), config.clone());
        shipper.ship_until_caught_up().await.unwrap();
        some_commits(&kv, &mut history, 1).await;
        kv.set(key!["r", 1], 1u64).await.unwrap();
        kv.delete_range(Selector::prefix(key!["r"])).await.unwrap();
        history.record(&*backend).await;
        some_commits(&kv, &mut history, 2).await;
        flaky.allow_puts(allowed);
        let stopped = shipper.ship_until_caught_up().await;
        flaky.allow_puts(-1);
        let again = Shipper::new(backend.clone(), target.clone(), config.clone());
        again.ship_until_caught_up().await.unwrap();
        let reader = BucketReader::new(target.clone());
        let points = reader.recovery_points().await.unwrap();
        let last = state(&*backend).await;
        assert_eq!(
            points.last().unwrap().versionstamp,
            last.0,
            "after {allowed} writes"
        );
        let restored = reader.restore(RestoreAt::Latest).await.unwrap();
        assert_eq!(items(restored).await, last.1, "after {allowed} writes");
        for point in &points {
            if let Some(expected) = history.0.get(&point.versionstamp) {
                let restored = reader
                    .restore(RestoreAt::Commit(point.versionstamp))
                    .await
                    .unwrap();
                assert_eq!(&items(restored).await, expected, "after {allowed} writes");
            }
        }
        // What denokv sees: only the newest snapshot's ranges.
        let visible: Vec<_> = flaky
            .list(Some(&target.path("snapshots")))
            .try_collect()
            .await
            .unwrap();
        let summary = reader.summary().await.unwrap();
        let newest = summary.snapshots.last().unwrap().versionstamp;
        for meta in &visible {
            let name = meta.location.filename().unwrap();
            assert!(
                name.starts_with(&format!("0001_{:016x}_", newest.version())),
                "{name} is not of the newest snapshot {newest} (after {allowed} writes)"
            );
        }
        // denokv starts from the newest snapshot.
        use object_store::ObjectStoreExt;
        let differential = flaky
            .get(&target.path("differential"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(
            differential,
            newest.to_string().as_bytes(),
            "after {allowed} writes"
        );
        if stopped.is_ok() {
            assert!(
                allowed > 3,
                "a pass that writes snapshots and segments writes more"
            );
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_switched_off_under_a_running_shipper_is_switched_on_and_bridged_by_a_snapshot() {
    // A manual clock: the shipper sleeps between passes until the test moves time, so the commit
    // made while the log is off cannot be raced by the shipper switching it on.
    let manual = Arc::new(ManualClock::at_test_epoch());
    let clock: Arc<dyn Clock> = manual.clone();
    let (backend, kv) = memory_store(clock.clone());
    let (target, _) = memory_target();
    let shipper = Arc::new(Shipper::new(
        backend.clone(),
        target.clone(),
        config(clock.clone()),
    ));
    let mut status = shipper.status();
    let running = tokio::spawn({
        let shipper = shipper.clone();
        async move { shipper.run().await }
    });
    let wait = Duration::from_secs(30);
    // `database` is published at the end of a pass, just before the shipper sleeps.
    tokio::time::timeout(wait, status.wait_for(|s| s.database.is_some()))
        .await
        .expect("first pass (hang guard)")
        .unwrap();
    kv.disable_change_log().await.unwrap();
    kv.set(key!["while off"], 1u64).await.unwrap();
    let ticking = tokio::spawn({
        let manual = manual.clone();
        async move {
            loop {
                manual.advance(Duration::from_secs(1));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    tokio::time::timeout(wait, async {
        while kv.change_log_status().await.unwrap().retention.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("switched on again (hang guard)");
    kv.set(key!["after"], 2u64).await.unwrap();
    let last = state(&*backend).await;
    let shipped = tokio::time::timeout(wait, status.wait_for(|s| s.shipped == Some(last.0)))
        .await
        .expect("shipped (hang guard)")
        .unwrap()
        .clone();
    assert_eq!(
        shipped.last_snapshot.map(|taken| taken.reason),
        Some(SnapshotReason::LogGap)
    );
    running.abort();
    ticking.abort();
    let restored = BucketReader::new(target)
        .restore(RestoreAt::Latest)
        .await
        .unwrap();
    assert_eq!(items(restored).await, last.1);
}

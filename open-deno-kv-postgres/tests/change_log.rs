//! The change log on PostgreSQL, beyond the conformance suite: its setting shared by every handle
//! (as every process would share it) and kept across reopening, its records' chain through group
//! commits, dead letters and pruning, a record that does not decode, and a version 1 store
//! migrated on open. Each test starts its own throwaway cluster.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use futures::StreamExt;
use open_deno_kv_engine_kit::change_log::{ChangeRecord, PRUNE_EVERY, Replay, prune_before};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Clock, Enqueue, KvError, KvValue, ManualClock, Mutation,
    SnapshotItem, Versionstamp,
};
use open_deno_kv_postgres::testing::TestCluster;

mod common;
use common::{cluster, get, k, open, open_at, set};

const HOUR: Duration = Duration::from_secs(3600);

/// Every record of the log, in order.
async fn records(kv: &dyn Backend) -> Vec<ChangeRecord> {
    let mut all = Vec::new();
    let mut after = Versionstamp::ZERO;
    loop {
        let page = kv.read_change_log(after, 1000).await.expect("read the log");
        let Some(last) = page.last() else {
            return all;
        };
        after = last.versionstamp;
        all.extend(page);
    }
}

/// The versionstamp an export reports now.
async fn exported_version(kv: &dyn Backend) -> Versionstamp {
    kv.export_snapshot().await.expect("export").versionstamp
}

/// Every item of an export, in order.
async fn export_items(kv: &dyn Backend) -> (Versionstamp, Vec<SnapshotItem>) {
    let snapshot = kv.export_snapshot().await.expect("export");
    let items = snapshot
        .items
        .map(|item| item.expect("export item"))
        .collect()
        .await;
    (snapshot.versionstamp, items)
}

/// Asserts that `records` follow each other from the commit `from`.
fn assert_chain(from: Versionstamp, records: &[ChangeRecord]) {
    let mut last = from;
    for record in records {
        assert_eq!(
            record.previous, last,
            "record {} does not follow {last}",
            record.versionstamp
        );
        assert!(record.versionstamp > last);
        last = record.versionstamp;
    }
}

fn count(cluster: &TestCluster, sql: &str) -> usize {
    let answer = cluster.psql("postgres", sql).expect("psql");
    answer.parse().expect("a count")
}

/// The setting is stored in the database: a handle opened before another switched the log on
/// logs its next commit, a reopened handle finds it on with its records, and switching off
/// deletes them and stops logging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setting_is_shared_and_kept_and_switching_off_deletes_the_records() {
    let Some(cluster) = cluster() else { return };
    let first = open(&cluster, "setting").await.unwrap();
    let second = open(&cluster, "setting").await.unwrap();
    set(&first, "before", 0).await;
    let status = first.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (None, 0));
    assert_eq!((status.first, status.last), (None, None));

    let start = exported_version(&first).await;
    second.configure_change_log(Some(HOUR)).await.unwrap();
    // `first` was open before the switch: its commits are logged from now on.
    let a = set(&first, "a", 1).await;
    let b = set(&second, "b", 2).await;
    let status = first.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (Some(HOUR), 2));
    assert_eq!(status.first.map(|m| m.versionstamp), Some(a));
    assert_eq!(status.last.map(|m| m.versionstamp), Some(b));
    let logged = records(&first).await;
    assert_chain(start, &logged);
    assert_eq!(
        logged[0].changes.writes[&k("a")].as_ref().unwrap().value,
        KvValue::U64(1)
    );
    assert_eq!(status.last.map(|m| m.at), Some(logged[1].at));

    first.close().await.unwrap();
    second.close().await.unwrap();
    let reopened = open(&cluster, "setting").await.unwrap();
    let status = reopened.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (Some(HOUR), 2));
    assert_eq!(records(&reopened).await, logged);
    let c = set(&reopened, "c", 3).await;
    let after_reopen = records(&reopened).await;
    assert_chain(start, &after_reopen);
    assert_eq!(after_reopen.last().map(|r| r.versionstamp), Some(c));

    // A new retention keeps the records.
    reopened.configure_change_log(Some(2 * HOUR)).await.unwrap();
    let status = reopened.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (Some(2 * HOUR), 3));

    reopened.configure_change_log(None).await.unwrap();
    let status = reopened.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (None, 0));
    set(&reopened, "d", 4).await;
    assert_eq!(reopened.change_log_status().await.unwrap().records, 0);
    assert_eq!(
        count(&cluster, "SELECT count(*) FROM setting.kv_change_log"),
        0
    );
    reopened.close().await.unwrap();
}

/// A write whose check fails stores no record, and the next commit follows the last logged one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_logs_nothing() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "failed").await.unwrap();
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    let start = exported_version(&kv).await;
    let a = set(&kv, "a", 1).await;
    let failed = kv
        .atomic_write(AtomicWrite {
            checks: vec![Check {
                key: k("a"),
                versionstamp: None,
            }],
            mutations: vec![Mutation::set(k("b"), KvValue::U64(2))],
            ..AtomicWrite::default()
        })
        .await
        .unwrap();
    assert!(failed.is_none());
    let logged = records(&kv).await;
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].versionstamp, a);
    set(&kv, "c", 3).await;
    assert_chain(start, &records(&kv).await);
    kv.close().await.unwrap();
}

/// Concurrent writes, half of them racing on one check, commit in groups: every committed
/// write has its record, the records follow each other from a backup taken before, the last
/// is the version an export reports after, and replaying them over that backup gives the
/// store's export.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_concurrent_writes_logs_each_write_in_a_chain() {
    let Some(cluster) = cluster() else { return };
    let kv = Arc::new(open(&cluster, "grouped").await.unwrap());
    set(&*kv, "seed", 0).await;
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    let (backup_version, backup_items) = export_items(&*kv).await;
    const WRITERS: usize = 96;
    for round in 0..3 {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|i| {
                let kv = kv.clone();
                tokio::spawn(async move {
                    let contended = k(&format!("contended {round}"));
                    let write = if i % 2 == 1 {
                        AtomicWrite {
                            checks: vec![Check {
                                key: contended.clone(),
                                versionstamp: None,
                            }],
                            mutations: vec![Mutation::set(contended, KvValue::U64(i as u64))],
                            ..AtomicWrite::default()
                        }
                    } else {
                        AtomicWrite {
                            mutations: vec![Mutation::set(
                                k(&format!("own {round} {i}")),
                                KvValue::U64(1),
                            )],
                            ..AtomicWrite::default()
                        }
                    };
                    kv.atomic_write(write).await.unwrap()
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    }
    let logged = records(&*kv).await;
    assert_eq!(logged.len(), 3 * (WRITERS / 2 + 1), "one record per commit");
    assert_chain(backup_version, &logged);
    let (now_version, now_items) = export_items(&*kv).await;
    assert_eq!(logged.last().map(|r| r.versionstamp), Some(now_version));
    let grouped = count(
        &cluster,
        "SELECT count(DISTINCT xmin::text) FROM grouped.kv_change_log",
    );
    assert!(grouped < logged.len(), "records were not written in groups");

    let identity = kv.change_log_status().await.unwrap().database.unwrap();
    let mut replay = Replay::after(identity, backup_version);
    for record in logged {
        replay.apply(record).unwrap();
    }
    let restored = replay
        .over(
            open_deno_kv_engine_kit::Snapshot::from_items(backup_version, backup_items)
                .of_database(Some(identity)),
        )
        .unwrap();
    assert_eq!(restored.versionstamp, now_version);
    let restored: Vec<SnapshotItem> = restored.items.map(|i| i.unwrap()).collect().await;
    assert_eq!(restored, now_items);
}

/// A message whose retries ran out is written to its dead-letter key by a commit, which is
/// logged like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_write_is_logged() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let kv = open_at(&cluster, "dead", &clock).await;
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    let start = exported_version(&kv).await;
    kv.atomic_write(AtomicWrite {
        enqueues: vec![Enqueue {
            payload: b"job".to_vec(),
            ready_at: clock.now(),
            keys_if_undelivered: vec![k("dead")],
            backoff_schedule: Some(vec![]),
        }],
        ..AtomicWrite::default()
    })
    .await
    .unwrap()
    .expect("committed");
    let message = tokio::time::timeout(Duration::from_secs(10), kv.dequeue_next_message())
        .await
        .expect("the message is due")
        .unwrap()
        .expect("open");
    message.finish(false).await.unwrap();
    assert!(
        get(&kv, "dead").await.is_some(),
        "the dead letter was written"
    );

    let logged = records(&kv).await;
    assert_eq!(logged.len(), 2);
    assert_chain(start, &logged);
    assert_eq!(logged[0].changes.enqueued.len(), 1);
    let dead = logged[1].changes.writes[&k("dead")].as_ref().expect("set");
    assert_eq!(dead.value, KvValue::V8(b"job".to_vec().into()));
    assert_eq!(logged[1].at, clock.now());
    kv.close().await.unwrap();
}

/// Records older than the retention go at the next pruning (every PRUNE_EVERY logged
/// commits), oldest first; newer ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_deletes_the_records_older_than_the_retention() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let kv = open_at(&cluster, "pruned", &clock).await;
    let retention = Duration::from_secs(60);
    kv.configure_change_log(Some(retention)).await.unwrap();
    const OLD: usize = 10;
    for i in 0..OLD {
        set(&kv, &format!("old {i}"), 1).await;
    }
    clock.advance(Duration::from_secs(90));
    let recent = set(&kv, "recent", 1).await;
    clock.advance(Duration::from_secs(30));
    // Up to the PRUNE_EVERY-th logged commit nothing is pruned...
    let fresh = PRUNE_EVERY as usize - OLD - 1;
    for i in 0..fresh - 1 {
        set(&kv, &format!("new {i}"), 1).await;
    }
    let status = kv.change_log_status().await.unwrap();
    assert_eq!(status.records, PRUNE_EVERY as u64 - 1);
    // ...and with it, the records older than the retention go: the old ones (120 s old), not
    // the recent one (30 s old) nor the new ones.
    set(&kv, "last", 1).await;
    let cutoff = prune_before(clock.now(), retention);
    let status = kv.change_log_status().await.unwrap();
    assert_eq!(status.records, (fresh + 1) as u64);
    assert_eq!(status.first.map(|m| m.versionstamp), Some(recent));
    let logged = records(&kv).await;
    assert!(logged.iter().all(|r| r.at >= cutoff));
    assert_eq!(
        count(&cluster, "SELECT count(*) FROM pruned.kv_change_log"),
        fresh + 1
    );
    kv.close().await.unwrap();
}

/// A record whose bytes do not decode is reported as corruption by the read and the status,
/// never skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_does_not_decode_is_corrupt() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "broken").await.unwrap();
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    set(&kv, "a", 1).await;
    set(&kv, "b", 2).await;
    cluster
        .psql(
            "postgres",
            "UPDATE broken.kv_change_log SET record = substring(record from 1 for 15) \
             WHERE vs = (SELECT vs FROM broken.kv_change_log ORDER BY vs LIMIT 1)",
        )
        .unwrap();
    let err = kv
        .read_change_log(Versionstamp::ZERO, 10)
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    let err = kv.change_log_status().await.unwrap_err();
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    let report = kv.check_integrity().await.unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].starts_with("table kv_change_log, row 0"),
        "{:?}",
        report.problems
    );
    kv.close().await.unwrap();
}

/// A store of schema version 1 (before the change log and identities) opens: it is migrated to
/// version 3, with its data and a new identity, and the log is off; its records then name the
/// identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_store_is_migrated_on_open() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "old").await.unwrap();
    let a = set(&kv, "a", 1).await;
    kv.close().await.unwrap();
    // Back to version 1 as that build created it.
    cluster
        .psql(
            "postgres",
            "DROP TABLE old.kv_change_log; DROP TABLE old.kv_commit_ids; \
             ALTER TABLE old.kv_meta DROP COLUMN change_log_ms; \
             ALTER TABLE old.kv_meta DROP COLUMN database_id; \
             UPDATE old.kv_meta SET schema_version = 1",
        )
        .unwrap();

    let kv = open(&cluster, "old").await.unwrap();
    assert_eq!(
        cluster
            .psql("postgres", "SELECT schema_version FROM old.kv_meta")
            .unwrap(),
        "3"
    );
    let status = kv.change_log_status().await.unwrap();
    assert_eq!((status.retention, status.records), (None, 0));
    let identity = status.database.expect("the migration made an identity");
    assert_eq!(get(&kv, "a").await, Some(KvValue::U64(1)));
    assert_eq!(exported_version(&kv).await, a);
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    let b = set(&kv, "b", 2).await;
    let logged = records(&kv).await;
    assert_eq!(logged.len(), 1);
    assert_eq!((logged[0].previous, logged[0].versionstamp), (a, b));
    assert_eq!(logged[0].database, Some(identity));
    kv.close().await.unwrap();
    let kv = open(&cluster, "old").await.unwrap();
    let status = kv.change_log_status().await.unwrap();
    assert_eq!(status.database, Some(identity), "kept by a later open");
    kv.close().await.unwrap();
}

/// A store of schema version 2 (the change log, no identity) is migrated to version 3: an
/// identity, and its records written before it still read (as naming no database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_store_gets_an_identity_on_open() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "two").await.unwrap();
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    set(&kv, "a", 1).await;
    kv.close().await.unwrap();
    cluster
        .psql(
            "postgres",
            "ALTER TABLE two.kv_meta DROP COLUMN database_id; DROP TABLE two.kv_commit_ids; \
             UPDATE two.kv_meta SET schema_version = 2",
        )
        .unwrap();
    let kv = open(&cluster, "two").await.unwrap();
    assert_eq!(
        cluster
            .psql("postgres", "SELECT schema_version FROM two.kv_meta")
            .unwrap(),
        "3"
    );
    assert!(kv.change_log_status().await.unwrap().database.is_some());
    assert_eq!(records(&kv).await.len(), 1);
    kv.close().await.unwrap();
}

/// An import is not logged. Into a store emptied after later commits than the snapshot's, it
/// takes one version more than the store had, so that a replay across it finds a gap instead
/// of passing the chain check without the imported data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_across_an_import_finds_a_gap() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "imported").await.unwrap();
    kv.configure_change_log(Some(HOUR)).await.unwrap();
    let start = exported_version(&kv).await;
    set(&kv, "a", 1).await;
    let (with_a, items) = export_items(&kv).await;
    let emptied =
        open_deno_kv_conformance::support::delete(&kv, &open_deno_kv_engine_kit::key!["a"]).await;
    kv.import_snapshot(open_deno_kv_engine_kit::Snapshot::from_items(with_a, items))
        .await
        .unwrap();
    let after_import = exported_version(&kv).await;
    assert!(after_import > emptied, "{after_import} after {emptied}");
    set(&kv, "b", 2).await;

    let logged = records(&kv).await;
    assert_eq!(logged.len(), 3);
    assert_chain(start, &logged[..2]);
    assert_eq!(logged[2].previous, after_import);
    let identity = kv.change_log_status().await.unwrap().database.unwrap();
    let mut replay = Replay::after(identity, start);
    replay.apply(logged[0].clone()).unwrap();
    replay.apply(logged[1].clone()).unwrap();
    let err = replay.apply(logged[2].clone()).unwrap_err();
    assert!(matches!(err, KvError::InvalidArgument { .. }), "{err}");
    kv.close().await.unwrap();
}

/// Pruning walks from the oldest record and stops at the first one that is not older than the
/// retention, even when older ones follow it (a clock set back): versionstamp order stands for
/// time order, and no record after a kept one is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_stops_at_the_first_record_it_keeps() {
    let Some(cluster) = cluster() else { return };
    let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let clock = ManualClock::new(t0);
    let kv = open_at(&cluster, "unordered", &clock).await;
    let retention = Duration::from_secs(60);
    kv.configure_change_log(Some(retention)).await.unwrap();
    set(&kv, "old", 1).await;
    clock.set(t0 + Duration::from_secs(100));
    let kept = set(&kv, "kept", 1).await;
    clock.set(t0);
    set(&kv, "set back", 1).await;
    clock.set(t0 + Duration::from_secs(130));
    for i in 0..PRUNE_EVERY as usize - 3 {
        set(&kv, &format!("new {i}"), 1).await;
    }
    // The pruning ran with the last commit: its cutoff is t0 + 70 s.
    let logged = records(&kv).await;
    assert_eq!(logged.len(), PRUNE_EVERY as usize - 1);
    assert_eq!(logged[0].versionstamp, kept);
    assert_eq!(
        logged[1].at, t0,
        "the record after the kept one stays, old as it is"
    );
    kv.close().await.unwrap();
}

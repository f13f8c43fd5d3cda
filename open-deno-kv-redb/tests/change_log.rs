//! The change log of a redb file (issue 18): its setting and records across handles, reopens and
//! read-only opens; what is logged (every acknowledged commit, dead letters too, nothing for a
//! failed check) and that the records chain; pruning; a record that does not decode; and what
//! the file holds with the log on and off.

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use open_deno_kv_engine_kit::change_log::{
    ChangeLogStatus, ChangeRecord, MAX_READ, PRUNE_EVERY, Replay, RestorePoint, replay_log,
};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Clock, Enqueue, KvError, KvValue, ManualClock, Mutation,
    SnapshotItem, Versionstamp, encode_key, key,
};
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

const LOG_TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("deno_kv.change_log");
const META: TableDefinition<&str, u64> = TableDefinition::new("deno_kv.meta");

fn options(clock: &ManualClock) -> RedbOptions {
    RedbOptions {
        clock: Arc::new(clock.clone()),
        ..Default::default()
    }
}

fn open(path: &std::path::Path, clock: &ManualClock) -> Arc<dyn Backend> {
    Arc::new(RedbBackend::open_with(path, options(clock)).expect("open"))
}

fn open_read_only(path: &std::path::Path, clock: &ManualClock) -> Arc<dyn Backend> {
    let options = RedbOptions {
        read_only: true,
        ..options(clock)
    };
    Arc::new(RedbBackend::open_with(path, options).expect("open read-only"))
}

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).expect("key")
}

fn set_write(name: &str, n: u64) -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(k(name), KvValue::U64(n))],
        ..Default::default()
    }
}

async fn set(kv: &dyn Backend, name: &str, n: u64) -> Versionstamp {
    kv.atomic_write(set_write(name, n))
        .await
        .expect("write")
        .expect("no checks")
        .versionstamp
}

const HOUR: Duration = Duration::from_secs(3600);

/// Every record of the log, a page at a time.
async fn all_records(kv: &dyn Backend) -> Vec<ChangeRecord> {
    let mut records: Vec<ChangeRecord> = Vec::new();
    loop {
        let after = records
            .last()
            .map_or(Versionstamp::ZERO, |last| last.versionstamp);
        let page = kv.read_change_log(after, MAX_READ).await.expect("read log");
        if page.is_empty() {
            return records;
        }
        records.extend(page);
    }
}

/// Each record names the one before it (the first names `start`).
fn assert_chained(start: Versionstamp, records: &[ChangeRecord]) {
    let mut previous = start;
    for record in records {
        assert_eq!(record.previous, previous, "{record:?}");
        assert!(record.versionstamp > previous);
        previous = record.versionstamp;
    }
}

async fn items(kv: &dyn Backend) -> Vec<SnapshotItem> {
    let snapshot = kv.export_snapshot().await.expect("export");
    snapshot.items.try_collect().await.expect("stream")
}

fn raw_tables(path: &std::path::Path) -> Vec<String> {
    let db = Database::open(path).expect("raw open");
    let txn = db.begin_read().expect("read");
    txn.list_tables()
        .expect("tables")
        .map(|t| t.name().to_owned())
        .collect()
}

fn raw_meta(path: &std::path::Path, row: &str) -> Option<u64> {
    let db = Database::open(path).expect("raw open");
    let txn = db.begin_read().expect("read");
    let meta = txn.open_table(META).expect("meta");
    meta.get(row).expect("get").map(|v| v.value())
}

/// The setting is stored in the file: a second handle, a reopen and a read-only open all see
/// it, and commits after a reopen are logged without switching again; records survive the
/// reopen. A read-only handle reads the log but cannot switch it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_setting_and_the_records_persist_across_reopens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&path, &clock);
    assert!(kv.capabilities().change_log);
    let off = kv.change_log_status().await.expect("status");
    assert_eq!((off.retention, off.records), (None, 0));
    let unlogged = set(&*kv, "before", 0).await;
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    let first = set(&*kv, "a", 1).await;
    let other = open(&path, &clock);
    assert_eq!(
        other.change_log_status().await.expect("status").retention,
        Some(HOUR)
    );
    other.close().await.expect("close other");
    kv.close().await.expect("close");

    clock.advance(Duration::from_secs(5));
    let kv = open(&path, &clock);
    let second = set(&*kv, "b", 2).await;
    let status = kv.change_log_status().await.expect("status");
    assert_eq!(status.retention, Some(HOUR));
    assert_eq!(status.records, 2);
    let first_mark = status.first.expect("first");
    let last_mark = status.last.expect("last");
    assert_eq!(first_mark.versionstamp, first);
    assert_eq!(last_mark.versionstamp, second);
    assert_eq!(last_mark.at, clock.now(), "a record's time is its commit's");
    let records = all_records(&*kv).await;
    assert_eq!(records.len(), 2);
    assert_chained(unlogged, &records);
    assert_eq!(
        records[1].changes.writes[&k("b")]
            .as_ref()
            .map(|e| &e.value),
        Some(&KvValue::U64(2))
    );
    kv.close().await.expect("close");

    let read_only = open_read_only(&path, &clock);
    assert!(read_only.capabilities().change_log);
    assert_eq!(read_only.change_log_status().await.expect("status"), status);
    assert_eq!(all_records(&*read_only).await, records);
    let refused = read_only.configure_change_log(None).await;
    assert!(matches!(refused, Err(KvError::ReadOnly)), "{refused:?}");
    read_only.close().await.expect("close");
}

/// Switching off deletes every record, the table and the setting: the file is again what
/// builds before the change log wrote. Switching on again starts an empty log; changing the
/// retention of a log that is on keeps its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_off_deletes_the_records_and_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&path, &clock);
    set(&*kv, "a", 1).await;
    kv.close().await.expect("close");
    assert!(
        !raw_tables(&path).iter().any(|t| t == "deno_kv.change_log"),
        "a file whose log was never on has no log table"
    );
    let read_only = open_read_only(&path, &clock);
    let status = read_only.change_log_status().await.expect("status");
    assert!(status.database.is_some(), "the file's identity");
    assert_eq!(
        ChangeLogStatus {
            database: None,
            ..status
        },
        Default::default(),
        "read-only, a file without the table reads as a log that is off"
    );
    assert!(all_records(&*read_only).await.is_empty());
    read_only.close().await.expect("close");

    let kv = open(&path, &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    set(&*kv, "b", 2).await;
    set(&*kv, "c", 3).await;
    kv.configure_change_log(Some(2 * HOUR))
        .await
        .expect("new retention");
    let status = kv.change_log_status().await.expect("status");
    assert_eq!((status.retention, status.records), (Some(2 * HOUR), 2));
    kv.close().await.expect("close");
    assert!(raw_tables(&path).iter().any(|t| t == "deno_kv.change_log"));
    assert_eq!(
        raw_meta(&path, "change_log_retention_ms"),
        Some(2 * 3_600_000)
    );

    let kv = open(&path, &clock);
    kv.configure_change_log(None).await.expect("off");
    let status = kv.change_log_status().await.expect("status");
    assert_eq!((status.retention, status.records), (None, 0));
    assert!(all_records(&*kv).await.is_empty());
    set(&*kv, "d", 4).await;
    assert!(all_records(&*kv).await.is_empty(), "off: nothing is logged");
    kv.close().await.expect("close");
    assert!(!raw_tables(&path).iter().any(|t| t == "deno_kv.change_log"));
    assert_eq!(raw_meta(&path, "change_log_retention_ms"), None);

    let kv = open(&path, &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on again");
    assert_eq!(kv.change_log_status().await.expect("status").records, 0);
    kv.close().await.expect("close");
}

/// A write whose check fails stores no record (and takes no versionstamp): the next record
/// follows the last commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_check_logs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&dir.path().join("kv.redb"), &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    let first = set(&*kv, "a", 1).await;
    let failing = AtomicWrite {
        checks: vec![Check {
            key: k("a"),
            versionstamp: None,
        }],
        ..set_write("b", 2)
    };
    assert_eq!(kv.atomic_write(failing).await.expect("write"), None);
    let records = all_records(&*kv).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].versionstamp, first);
    let second = set(&*kv, "c", 3).await;
    let records = all_records(&*kv).await;
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].previous, first);
    assert_eq!(records[1].versionstamp, second);
    kv.close().await.expect("close");
}

/// Many tasks writing at once (so the writer commits them in groups, some with failing checks):
/// every acknowledged commit has exactly one record, in commit order, each naming the one
/// before; a backup from before them plus the log gives exactly the store after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_are_logged_each_with_a_correct_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&dir.path().join("kv.redb"), &clock);
    set(&*kv, "seed", 0).await;
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    let backup = kv.export_snapshot().await.expect("export");
    let tasks: Vec<_> = (0..32u64)
        .map(|t| {
            let kv = kv.clone();
            tokio::spawn(async move {
                let mut committed = Vec::new();
                for i in 0..10u64 {
                    let mut write = set_write(&format!("k{}", (t * 7 + i) % 50), t * 100 + i);
                    if i % 3 == 0 {
                        // Fails whenever the key already exists.
                        write.checks.push(Check {
                            key: write.mutations[0].key.clone(),
                            versionstamp: None,
                        });
                    }
                    if let Some(result) = kv.atomic_write(write).await.expect("write") {
                        committed.push(result.versionstamp);
                    }
                }
                committed
            })
        })
        .collect();
    let mut committed = Vec::new();
    for task in tasks {
        committed.extend(task.await.expect("task"));
    }
    committed.sort();
    let records = all_records(&*kv).await;
    let logged: Vec<Versionstamp> = records.iter().map(|r| r.versionstamp).collect();
    assert_eq!(logged, committed, "one record per acknowledged commit");
    assert_chained(backup.versionstamp, &records);

    let identity = backup.database.expect("a redb file has an identity");
    let mut replay = Replay::after(identity, backup.versionstamp);
    for record in records {
        replay.apply(record).expect("chained");
    }
    let restored_snapshot = replay.over(backup).expect("same backup");
    let target_dir = tempfile::tempdir().expect("tempdir");
    let target = open(&target_dir.path().join("kv.redb"), &clock);
    target
        .import_snapshot(restored_snapshot)
        .await
        .expect("import");
    assert_eq!(items(&*target).await, items(&*kv).await);
    target.close().await.expect("close");
    kv.close().await.expect("close");
}

/// A message whose retries ran out writes its dead letters through the write path: that commit
/// is logged (the take and the settlement, queue bookkeeping, are not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_write_is_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&dir.path().join("kv.redb"), &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    let payload = vec![0xff, 0x0f, b'"', 1, b'x'];
    let enqueue = AtomicWrite {
        enqueues: vec![Enqueue {
            payload: payload.clone(),
            ready_at: clock.now(),
            keys_if_undelivered: vec![k("dead")],
            backoff_schedule: Some(vec![]),
        }],
        ..Default::default()
    };
    let enqueued = kv
        .atomic_write(enqueue)
        .await
        .expect("enqueue")
        .expect("no checks")
        .versionstamp;
    let handle = kv
        .dequeue_next_message()
        .await
        .expect("dequeue")
        .expect("a message");
    clock.advance(Duration::from_secs(1));
    handle.finish(false).await.expect("fail it");
    let records = all_records(&*kv).await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].versionstamp, enqueued);
    assert_eq!(records[0].changes.enqueued.len(), 1);
    let dead = &records[1];
    assert_eq!(dead.previous, enqueued);
    assert_eq!(dead.at, clock.now());
    let entry = dead.changes.writes[&k("dead")].as_ref().expect("written");
    assert_eq!(entry.value, KvValue::V8(payload.into()));
    assert_eq!(entry.versionstamp, dead.versionstamp);
    kv.close().await.expect("close");
}

/// Pruning: once records are older than the retention, the writer deletes them (oldest first)
/// when [`PRUNE_EVERY`] commits have been logged, and keeps every newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_older_than_the_retention_are_pruned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let options = RedbOptions {
        durability: Durability::Deferred,
        ..options(&clock)
    };
    let kv: Arc<dyn Backend> =
        Arc::new(RedbBackend::open_with(dir.path().join("kv.redb"), options).expect("open"));
    let retention = Duration::from_secs(60);
    kv.configure_change_log(Some(retention)).await.expect("on");
    let old: Vec<Versionstamp> = {
        let mut old = Vec::new();
        for n in 0..5 {
            old.push(set(&*kv, "old", n).await);
        }
        old
    };
    clock.advance(Duration::from_secs(30));
    let middle = set(&*kv, "middle", 0).await;
    clock.advance(Duration::from_secs(31));
    // Now `old` is 61 s old (past the retention), `middle` 31 s: only `old` goes.
    let newer = PRUNE_EVERY as u64 - 6;
    for n in 0..newer - 1 {
        set(&*kv, "new", n).await;
    }
    assert_eq!(
        kv.change_log_status().await.expect("status").records,
        5 + newer,
        "one commit before pruning is due, nothing is pruned"
    );
    let last = set(&*kv, "new", newer).await;
    let status = kv.change_log_status().await.expect("status");
    assert_eq!(status.records, 1 + newer, "the five old records are gone");
    assert_eq!(status.first.expect("first").versionstamp, middle);
    assert_eq!(status.last.expect("last").versionstamp, last);
    let records = all_records(&*kv).await;
    assert!(records.iter().all(|r| !old.contains(&r.versionstamp)));
    assert_chained(old[4], &records);
    kv.close().await.expect("close");
}

/// A record that does not decode is reported as corrupt, never skipped: by a read of the log,
/// by its status, and by the integrity check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&path, &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    let first = set(&*kv, "a", 1).await;
    let second = set(&*kv, "b", 2).await;
    kv.close().await.expect("close");
    {
        let db = Database::open(&path).expect("raw open");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn.open_table(LOG_TABLE).expect("log");
            let mut bytes = table
                .get(second.as_bytes().as_slice())
                .expect("get")
                .expect("record")
                .value()
                .to_vec();
            bytes.truncate(bytes.len() - 1);
            table
                .insert(second.as_bytes().as_slice(), bytes.as_slice())
                .expect("damage");
        }
        txn.commit().expect("commit");
    }
    let kv = open_read_only(&path, &clock);
    let read = kv.read_change_log(Versionstamp::ZERO, MAX_READ).await;
    assert!(matches!(read, Err(KvError::Corrupt { .. })), "{read:?}");
    let only_first = kv.read_change_log(Versionstamp::ZERO, 1).await;
    assert_eq!(
        only_first.expect("the first decodes")[0].versionstamp,
        first
    );
    let status = kv.change_log_status().await;
    assert!(matches!(status, Err(KvError::Corrupt { .. })), "{status:?}");
    let report = kv.check_integrity().await.expect("check");
    assert!(!report.is_ok(), "{report:?}");
    kv.close().await.expect("close");
}

/// A point-in-time restore through the seam's own function: a backup, then commits, then a
/// restore to one of them, imported into a new file: the store as of that commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_to_a_past_commit_gives_the_store_as_of_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&dir.path().join("kv.redb"), &clock);
    kv.configure_change_log(Some(HOUR)).await.expect("on");
    set(&*kv, "a", 1).await;
    let backup = kv.export_snapshot().await.expect("backup");
    let backup_origin = backup.origin();
    set(&*kv, "b", 2).await;
    set(&*kv, "a", 3).await;
    let expected = items(&*kv).await;
    let target = kv.export_snapshot().await.expect("export").versionstamp;
    set(&*kv, "c", 4).await;
    let delete = AtomicWrite {
        mutations: vec![Mutation::delete(k("a"))],
        ..Default::default()
    };
    kv.atomic_write(delete).await.expect("delete");

    let replay = replay_log(&*kv, backup_origin, RestorePoint::Commit(target))
        .await
        .expect("replay");
    let restored = replay.over(backup).expect("same backup");
    assert_eq!(restored.versionstamp, target);
    let other = tempfile::tempdir().expect("tempdir");
    let copy = open(&other.path().join("kv.redb"), &clock);
    copy.import_snapshot(restored).await.expect("import");
    assert_eq!(items(&*copy).await, expected);
    copy.close().await.expect("close");
    kv.close().await.expect("close");
}

/// The file's version is looked at before its tables: a newer layout that adds a table of its
/// own (as the change log added one) is refused as newer, untouched, not as a foreign file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_layout_with_a_new_table_is_refused_as_newer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    let kv = open(&path, &clock);
    set(&*kv, "a", 1).await;
    kv.close().await.expect("close");
    {
        let db = Database::create(&path).expect("raw open");
        let txn = db.begin_write().expect("txn");
        {
            let future: TableDefinition<&[u8], &[u8]> = TableDefinition::new("deno_kv.future");
            txn.open_table(future).expect("new table");
            let mut meta = txn.open_table(META).expect("meta");
            meta.insert("schema_version", open_deno_kv_redb::SCHEMA_VERSION + 1)
                .expect("version");
        }
        txn.commit().expect("commit");
    }
    let before = std::fs::read(&path).expect("read");
    let err = RedbBackend::open_with(&path, options(&clock)).expect_err("refused");
    assert!(matches!(err, KvError::Storage { .. }), "{err:?}");
    assert!(err.to_string().contains("is newer"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

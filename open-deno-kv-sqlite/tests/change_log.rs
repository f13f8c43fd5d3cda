//! The change log in a SQLite file, beyond what the conformance suite checks on every engine:
//!
//! - two handles on one file: a switch made through one is in effect for the other's next commit,
//!   both ways (the setting lives in the file, and each writer re-reads it once another
//!   connection committed);
//! - a commit made by a program that does not log (here a plain SQLite connection doing what
//!   Deno's own writer does to `data_version` and `kv`) breaks the chain, and a restore across it
//!   is refused instead of giving a state that never existed;
//! - a record that does not decode is reported as corrupt, never skipped, and the integrity
//!   check names it;
//! - a commit group's records share one row: reads, counts and the chain see every commit, and
//!   only committed writes have records;
//! - a log written a record per row without a `records` column (before rows held groups) is
//!   read and counted as it is, and upgraded when a writer next logs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use open_deno_kv_engine_kit::change_log::{RestorePoint, restore};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvError, KvValue, Mutation, Snapshot, SnapshotItem,
    Versionstamp, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};

const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

fn open(path: &Path) -> Checked<SqliteBackend> {
    SqliteBackend::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

async fn set(kv: &dyn Backend, name: &str, n: u64) -> Versionstamp {
    let key = encode_key(&key![name]).unwrap_or_else(|e| panic!("key: {e}"));
    let write = AtomicWrite {
        mutations: vec![Mutation::set(key, KvValue::U64(n))],
        ..Default::default()
    };
    kv.atomic_write(write)
        .await
        .unwrap_or_else(|e| panic!("write: {e}"))
        .unwrap_or_else(|| panic!("no checks, so it commits"))
        .versionstamp
}

async fn logged(kv: &dyn Backend) -> Vec<Versionstamp> {
    let records = kv
        .read_change_log(Versionstamp::ZERO, 1000)
        .await
        .unwrap_or_else(|e| panic!("read_change_log: {e}"));
    records.iter().map(|r| r.versionstamp).collect()
}

fn query(path: &Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap_or_else(|e| panic!("sqlite: {e}"));
    conn.query_row(sql, [], |row| row.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn sql(path: &Path, statements: &str) {
    let conn = rusqlite::Connection::open(path).unwrap_or_else(|e| panic!("sqlite: {e}"));
    conn.execute_batch(statements)
        .unwrap_or_else(|e| panic!("{statements}: {e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_switch_through_one_handle_holds_for_another() -> Result<(), KvError> {
    let dir = tempfile::tempdir().map_err(KvError::storage)?;
    let path = dir.path().join("kv.sqlite3");
    let (a, b) = (open(&path), open(&path));
    set(&b, "before", 0).await;
    a.configure_change_log(Some(WEEK)).await?;
    let from_b = set(&b, "b", 1).await;
    let from_a = set(&a, "a", 2).await;
    assert_eq!(logged(&a).await, vec![from_b, from_a], "both writers log");
    b.configure_change_log(None).await?;
    set(&a, "a", 3).await;
    assert!(
        logged(&a).await.is_empty(),
        "switched off for both, records gone"
    );
    assert_eq!(a.change_log_status().await?.retention, None);
    a.close().await?;
    b.close().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_the_log_did_not_see_is_a_gap() -> Result<(), KvError> {
    let dir = tempfile::tempdir().map_err(KvError::storage)?;
    let path = dir.path().join("kv.sqlite3");
    let kv = Arc::new(open(&path));
    kv.configure_change_log(Some(WEEK)).await?;
    let first = set(&*kv, "x", 1).await;
    let snapshot = kv.export_snapshot().await?;
    let backup = snapshot.origin();
    let items: Vec<SnapshotItem> = snapshot.items.try_collect().await?;
    let seen = set(&*kv, "x", 2).await;
    // What Deno's writer does for a set: bump the version, write the row under it.
    sql(
        &path,
        "update data_version set version = version + 1 where k = 0;
         insert or replace into kv (k, v, v_encoding, version, seq, expiration_ms)
           select x'0279', x'0300000000000000', 3, version, 0, -1 from data_version where k = 0;",
    );
    let after_gap = set(&*kv, "x", 4).await;
    assert_eq!(logged(&*kv).await, vec![first, seen, after_gap]);

    let target = open(&dir.path().join("restored.sqlite3"));
    let up_to_seen = restore(
        Snapshot::from_items(backup.versionstamp, items.clone()).of_database(backup.database),
        &*kv,
        RestorePoint::Commit(seen),
        &target,
    )
    .await?;
    assert_eq!(up_to_seen.commits, 1, "up to the gap, the log holds");
    target.close().await?;
    let other_target = open(&dir.path().join("target.sqlite3"));
    let err = restore(
        Snapshot::from_items(backup.versionstamp, items).of_database(backup.database),
        &*kv,
        RestorePoint::Commit(after_gap),
        &other_target,
    )
    .await
    .expect_err("across the foreign commit");
    assert!(err.to_string().contains("gap"), "{err}");
    assert_eq!(
        other_target
            .count_range(open_deno_kv_engine_kit::KeyRange::new(vec![], vec![0xff]))
            .await?
            .entries,
        0,
        "a refused restore writes nothing"
    );
    other_target.close().await?;
    kv.close().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_that_does_not_decode_is_reported() -> Result<(), KvError> {
    let dir = tempfile::tempdir().map_err(KvError::storage)?;
    let path = dir.path().join("kv.sqlite3");
    let kv = open(&path);
    kv.configure_change_log(Some(WEEK)).await?;
    set(&kv, "x", 1).await;
    sql(&path, "update odkv_change_log set record = x'01ff'");
    let err = kv
        .read_change_log(Versionstamp::ZERO, 10)
        .await
        .expect_err("corrupt");
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    let report = kv.check_integrity().await?;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("odkv_change_log") && p.contains("does not decode")),
        "the integrity check reports it: {:?}",
        report.problems
    );
    kv.close().await
}

/// Writes started together commit in groups, and a group's records share a row: every read, the
/// count and the chain still see each commit, in order, and none of the writes whose check
/// failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_groups_records_share_a_row_and_read_as_commits() -> Result<(), KvError> {
    let dir = tempfile::tempdir().map_err(KvError::storage)?;
    let path = dir.path().join("kv.sqlite3");
    let kv = Arc::new(open(&path));
    kv.configure_change_log(Some(WEEK)).await?;
    let counter = encode_key(&key!["counter"]).unwrap_or_else(|e| panic!("key: {e}"));
    let first = set(&*kv, "counter", 0).await;
    // 200 sets of their own keys, and 200 writes checking that the counter is still at the first
    // commit: one of those commits, the others fail their check.
    let writes = (0..400).map(|i| {
        let kv = kv.clone();
        let counter = counter.clone();
        tokio::spawn(async move {
            let write = if i % 2 == 0 {
                AtomicWrite {
                    mutations: vec![Mutation::set(
                        encode_key(&key!["k", i as i64]).expect("key"),
                        KvValue::U64(i),
                    )],
                    ..Default::default()
                }
            } else {
                AtomicWrite {
                    checks: vec![open_deno_kv_engine_kit::Check {
                        key: counter.clone(),
                        versionstamp: Some(first),
                    }],
                    mutations: vec![Mutation::set(counter, KvValue::U64(i))],
                    ..Default::default()
                }
            };
            kv.atomic_write(write).await
        })
    });
    let mut committed = vec![first];
    for write in futures::future::join_all(writes).await {
        let result = write.map_err(KvError::storage)??;
        committed.extend(result.map(|r| r.versionstamp));
    }
    committed.sort();
    assert_eq!(committed.len(), 202, "the first set, 200 sets, one check");

    let records = kv.read_change_log(Versionstamp::ZERO, 1000).await?;
    let stamps: Vec<Versionstamp> = records.iter().map(|r| r.versionstamp).collect();
    assert_eq!(
        stamps, committed,
        "every commit, in order, and nothing else"
    );
    for pair in records.windows(2) {
        assert_eq!(pair[1].previous, pair[0].versionstamp, "the chain holds");
    }
    let rows = query(&path, "select count(*) from odkv_change_log");
    assert!(
        rows < 202,
        "400 writes started together commit in fewer groups than commits ({rows} rows)"
    );
    assert_eq!(
        query(&path, "select sum(records) from odkv_change_log"),
        202
    );
    // Reads that start or stop inside a row.
    for after in [0, 1, 57, 100, 201] {
        let later = kv.read_change_log(committed[after], 1000).await?;
        let stamps: Vec<Versionstamp> = later.iter().map(|r| r.versionstamp).collect();
        assert_eq!(stamps, committed[after + 1..], "after commit {after}");
        let seven = kv.read_change_log(committed[after], 7).await?;
        assert_eq!(seven.len(), 7.min(201 - after), "at most the limit");
        assert_eq!(seven[..], later[..seven.len()]);
    }
    let status = kv.change_log_status().await?;
    assert_eq!(status.records, 202, "records, not rows");
    assert_eq!(status.first.map(|m| m.versionstamp), Some(committed[0]));
    assert_eq!(status.last.map(|m| m.versionstamp), Some(committed[201]));
    assert!(kv.check_integrity().await?.problems.is_empty());

    // A row that counts other than it holds is reported.
    sql(&path, "update odkv_change_log set records = records + 1");
    let report = kv.check_integrity().await?;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("odkv_change_log") && p.contains("counts")),
        "{:?}",
        report.problems
    );
    kv.close().await
}

/// A log from before rows held groups: a record per row, no `records` column. It is read and
/// counted as it stands, read-only included, and the next writer that logs adds the column;
/// old rows and new read as one log.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_of_a_record_per_row_is_read_and_upgraded() -> Result<(), KvError> {
    let dir = tempfile::tempdir().map_err(KvError::storage)?;
    let path = dir.path().join("kv.sqlite3");
    let kv = open(&path);
    kv.configure_change_log(Some(WEEK)).await?;
    let mut stamps = Vec::new();
    for n in 0..3 {
        stamps.push(set(&kv, "x", n).await);
    }
    kv.close().await?;
    assert_eq!(query(&path, "select count(*) from odkv_change_log"), 3);
    sql(&path, "alter table odkv_change_log drop column records");

    let options = SqliteOptions {
        read_only: true,
        ..SqliteOptions::default()
    };
    let read_only = SqliteBackend::open_with(&path, options)
        .unwrap_or_else(|e| panic!("open read-only {}: {e}", path.display()));
    assert_eq!(logged(&read_only).await, stamps);
    assert_eq!(read_only.change_log_status().await?.records, 3);
    assert!(read_only.check_integrity().await?.problems.is_empty());
    read_only.close().await?;

    let kv = open(&path);
    stamps.push(set(&kv, "x", 3).await);
    assert_eq!(
        query(&path, "select sum(records) from odkv_change_log"),
        4,
        "the column is back, old rows counting one each"
    );
    assert_eq!(logged(&kv).await, stamps);
    assert_eq!(kv.change_log_status().await?.records, 4);
    assert!(kv.check_integrity().await?.problems.is_empty());
    kv.close().await
}

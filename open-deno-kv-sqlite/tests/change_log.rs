//! The change log in a SQLite file, beyond what the conformance suite checks on every engine:
//!
//! - two handles on one file: a switch made through one is in effect for the other's next commit,
//!   both ways (the setting lives in the file, and each writer re-reads it once another
//!   connection committed);
//! - a commit made by a program that does not log (here a plain SQLite connection doing what
//!   Deno's own writer does to `data_version` and `kv`) breaks the chain, and a restore across it
//!   is refused instead of giving a state that never existed;
//! - a record that does not decode is reported as corrupt, never skipped, and the integrity
//!   check names it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use open_deno_kv_engine_kit::change_log::{RestorePoint, restore};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvError, KvValue, Mutation, Snapshot, SnapshotItem,
    Versionstamp, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend};

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
    let backup = snapshot.versionstamp;
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
        Snapshot::from_items(backup, items.clone()),
        &*kv,
        RestorePoint::Commit(seen),
        &target,
    )
    .await?;
    assert_eq!(up_to_seen.commits, 1, "up to the gap, the log holds");
    target.close().await?;
    let other_target = open(&dir.path().join("target.sqlite3"));
    let err = restore(
        Snapshot::from_items(backup, items),
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

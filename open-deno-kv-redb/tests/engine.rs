//! What open-deno-kv-redb promises beyond the conformance suite: files it refuses (untouched), durability
//! modes, and handles that share one open file.

use std::sync::Arc;

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, KvError, KvValue, ManualClock, Mutation, ReadRange, SnapshotRead,
    encode_key, key,
};
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};
use redb::{Database, TableDefinition};

fn options(clock: &ManualClock, durability: Durability) -> RedbOptions {
    RedbOptions {
        clock: Arc::new(clock.clone()),
        durability,
        ..Default::default()
    }
}

async fn set(kv: &dyn Backend, name: &str, n: u64) -> open_deno_kv_engine_kit::Versionstamp {
    let write = AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key![name]).expect("key"),
            KvValue::U64(n),
        )],
        ..Default::default()
    };
    kv.atomic_write(write)
        .await
        .expect("write")
        .expect("no checks")
        .versionstamp
}

async fn get(kv: &dyn Backend, name: &str) -> Option<KvValue> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_key(&key![name]).expect("key")],
        ..Default::default()
    };
    let mut out = kv.snapshot_read(read).await.expect("read");
    out.remove(0).entries.pop().map(|e| e.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_redb_is_corrupt_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notes.txt");
    let text = b"SQLite format 3\0 or anything that is not a redb file".repeat(100);
    std::fs::write(&path, &text).expect("write");
    let err = RedbBackend::open(&path).expect_err("must be refused");
    assert!(matches!(err, KvError::Corrupt { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).expect("read"), text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_redb_file_is_corrupt_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("other.redb");
    {
        let db = Database::create(&path).expect("create");
        let txn = db.begin_write().expect("txn");
        {
            let table: TableDefinition<&str, u64> = TableDefinition::new("someone_else");
            txn.open_table(table)
                .expect("table")
                .insert("x", 1)
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let before = std::fs::read(&path).expect("read");
    let err = RedbBackend::open(&path).expect_err("must be refused");
    assert!(matches!(err, KvError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("someone_else"), "{err}");
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_version_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let kv = RedbBackend::open(&path).expect("open");
    set(&kv, "a", 1).await;
    kv.close().await.expect("close");
    {
        // What a future version of the crate would leave.
        let db = Database::create(&path).expect("reopen raw");
        let txn = db.begin_write().expect("txn");
        {
            let meta: TableDefinition<&str, u64> = TableDefinition::new("deno_kv.meta");
            let mut table = txn.open_table(meta).expect("meta");
            table
                .insert("schema_version", open_deno_kv_redb::SCHEMA_VERSION + 1)
                .expect("insert");
        }
        txn.commit().expect("commit");
    }
    let before = std::fs::read(&path).expect("read");
    let err = RedbBackend::open(&path).expect_err("must be refused");
    assert!(matches!(err, KvError::Storage { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("schema version 2 is newer") && text.contains("refusing to modify"),
        "{text}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_commits_survive_a_clean_close_and_a_drop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    let kv = RedbBackend::open_with(&path, options(&clock, Durability::Deferred)).expect("open");
    let mut last = set(&kv, "a", 1).await;
    for n in 0..50 {
        last = set(&kv, "b", n).await;
    }
    kv.close().await.expect("close");

    let kv = RedbBackend::open_with(&path, options(&clock, Durability::Deferred)).expect("reopen");
    assert_eq!(get(&kv, "a").await, Some(KvValue::U64(1)));
    assert_eq!(get(&kv, "b").await, Some(KvValue::U64(49)));
    let after = set(&kv, "c", 3).await;
    assert!(after > last);
    // Dropped without close: the last handle still syncs and closes the file.
    drop(kv);

    let kv = RedbBackend::open_with(&path, options(&clock, Durability::Immediate)).expect("open");
    assert_eq!(get(&kv, "c").await, Some(KvValue::U64(3)));
    kv.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_share_the_file_until_the_last_one_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let first = RedbBackend::open(&path).expect("open");
    // The same file through another spelling of its path.
    let second = RedbBackend::open(dir.path().join(".").join("kv.redb")).expect("second");
    set(&first, "a", 1).await;
    assert_eq!(get(&second, "a").await, Some(KvValue::U64(1)));
    first.close().await.expect("close first");
    assert!(matches!(
        first
            .snapshot_read(SnapshotRead {
                ranges: vec![ReadRange::single_key(&key!["a"]).expect("key")],
                ..Default::default()
            })
            .await,
        Err(KvError::Closed)
    ));
    set(&second, "b", 2).await;
    second.close().await.expect("close second");
    // The file is closed now: redb itself can open it.
    let raw = Database::create(&path).expect("the file is free after the last close");
    drop(raw);
    let again = RedbBackend::open(&path).expect("reopen");
    assert_eq!(get(&again, "b").await, Some(KvValue::U64(2)));
    again.close().await.expect("close");
}

#[test]
fn reads_work_on_a_current_thread_runtime_and_outside_tokio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let kv = RedbBackend::open(&path).expect("open");
    runtime.block_on(async {
        set(&kv, "a", 7).await;
        assert_eq!(get(&kv, "a").await, Some(KvValue::U64(7)));
    });
    // Without any runtime, reads run inline; a write waits on a plain executor.
    let value = futures::executor::block_on(get(&kv, "a"));
    assert_eq!(value, Some(KvValue::U64(7)));
    futures::executor::block_on(kv.close()).expect("close");
}

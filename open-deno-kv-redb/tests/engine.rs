//! What open-deno-kv-redb promises beyond the conformance suite: files it refuses (untouched), durability
//! modes, and handles that share one open file.

use std::sync::Arc;

use futures::StreamExt;

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, KvError, KvValue, ManualClock, Mutation, ReadRange, SnapshotRead,
    encode_key, key,
};
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};
use redb::{Database, ReadableDatabase, TableDefinition};

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
        text.contains("schema version 3 is newer") && text.contains("refusing to modify"),
        "{text}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

/// Issue 29: a file of schema version 1 (before identities) reads as a database without an
/// identity when opened read-only (unchanged), and a writable open migrates it to version 2
/// with a new identity, which it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_gets_an_identity_on_its_first_writable_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let kv = RedbBackend::open(&path).expect("open");
    set(&kv, "a", 1).await;
    kv.close().await.expect("close");
    drop(kv);
    let meta: TableDefinition<&str, u64> = TableDefinition::new("deno_kv.meta");
    {
        // What a build before identities left.
        let db = Database::create(&path).expect("reopen raw");
        let txn = db.begin_write().expect("txn");
        {
            let mut table = txn.open_table(meta).expect("meta");
            table.remove("database_id_high").expect("remove");
            table.remove("database_id_low").expect("remove");
            table.insert("schema_version", 1).expect("insert");
        }
        txn.commit().expect("commit");
    }
    let before = std::fs::read(&path).expect("read");
    let options = RedbOptions {
        read_only: true,
        ..Default::default()
    };
    let reader = RedbBackend::open_with(&path, options).expect("a read-only open of version 1");
    assert_eq!(get(&reader, "a").await, Some(KvValue::U64(1)));
    let snapshot = reader.export_snapshot().await.expect("export");
    assert_eq!(snapshot.database, None, "version 1 names no database");
    drop(snapshot);
    reader.close().await.expect("close");
    drop(reader);
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "read-only: untouched"
    );

    let kv = RedbBackend::open(&path).expect("a writable open migrates");
    let identity = kv
        .export_snapshot()
        .await
        .expect("export")
        .database
        .expect("an identity after the migration");
    assert_eq!(get(&kv, "a").await, Some(KvValue::U64(1)));
    kv.close().await.expect("close");
    drop(kv);
    {
        let db = Database::create(&path).expect("reopen raw");
        let txn = db.begin_read().expect("txn");
        let table = txn.open_table(meta).expect("meta");
        let version = table.get("schema_version").expect("get").map(|v| v.value());
        assert_eq!(version, Some(open_deno_kv_redb::SCHEMA_VERSION));
        assert_eq!(open_deno_kv_redb::SCHEMA_VERSION, 2);
    }
    let kv = RedbBackend::open(&path).expect("reopen");
    let again = kv.export_snapshot().await.expect("export").database;
    assert_eq!(again, Some(identity), "kept by the file");
    kv.close().await.expect("close");
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

/// Writes `n` keys `k0`.. in one commit each batch of 100.
async fn fill(kv: &dyn Backend, n: u64) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let write = AtomicWrite {
            mutations: chunk
                .iter()
                .map(|i| {
                    Mutation::set(
                        encode_key(&key![format!("k{i}")]).expect("key"),
                        KvValue::U64(*i),
                    )
                })
                .collect(),
            ..Default::default()
        };
        kv.atomic_write(write)
            .await
            .expect("write")
            .expect("no checks");
    }
}

/// An export runs on a thread of its own and holds the file. Closing the last handle ends it,
/// whether its consumer dropped the stream a moment ago or still holds it without reading, and
/// returns only once the file is free: redb itself can open it right away. The consumer that
/// kept its stream reads what was sent and then an error, never an end that would pass for a
/// whole snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_running_exports_and_frees_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let kv = RedbBackend::open(&path).expect("open");
    fill(&kv, 1_000).await;
    for _ in 0..20 {
        // Dropped at once: its thread may still be between two items when the close comes.
        drop(kv.export_snapshot().await.expect("export"));
    }
    let kept = kv.export_snapshot().await.expect("export");
    kv.close().await.expect("close");
    drop(kv);
    drop(Database::create(&path).expect("the file is free once close returns"));
    let items: Vec<_> = kept.items.collect().await;
    let (last, sent) = items.split_last().expect("items");
    assert!(
        sent.len() < 1_000,
        "the export ended early: {} items",
        sent.len()
    );
    assert!(sent.iter().all(Result::is_ok));
    assert!(matches!(last, Err(KvError::Closed)), "{last:?}");

    // Read-only, the export holds the open file for its whole run: before this, a close
    // waited for it forever once its consumer stopped reading.
    let options = RedbOptions {
        read_only: true,
        ..Default::default()
    };
    let reader = RedbBackend::open_with(&path, options).expect("read-only");
    let kept = reader.export_snapshot().await.expect("export");
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), reader.close()).await;
    closed
        .expect("the close does not wait for a consumer that is not reading")
        .expect("close");
    drop(reader);
    let items: Vec<_> = kept.items.collect().await;
    assert!(matches!(items.last(), Some(Err(KvError::Closed))));
    drop(Database::create(&path).expect("free after the read-only close"));
}

/// A close while an import runs whose stream stalls (a slow download, a stuck producer): the
/// import is ended before its end was passed, so it rolls back and its caller gets `Closed`; the
/// close returns without waiting for the stream, and the file is free when it does. Reopened,
/// the store holds nothing of the import.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_a_running_import_and_frees_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = RedbBackend::open(dir.path().join("source.redb")).expect("open");
    fill(&source, 100).await;
    let exported = source.export_snapshot().await.expect("export");
    let pulled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = pulled.clone();
    let stalling = exported
        .items
        .take(10)
        .inspect(move |_| {
            counting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        })
        .chain(futures::stream::pending())
        .boxed();
    let snapshot = open_deno_kv_engine_kit::backup::Snapshot {
        database: exported.database,
        versionstamp: exported.versionstamp,
        items: stalling,
    };
    let path = dir.path().join("kv.redb");
    let kv = Arc::new(RedbBackend::open(&path).expect("open"));
    let import = tokio::spawn({
        let kv = kv.clone();
        async move { kv.import_snapshot(snapshot).await }
    });
    let pulling = async {
        while pulled.load(std::sync::atomic::Ordering::SeqCst) < 10 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), pulling)
        .await
        .expect("the import takes the stream's items");
    // Most likely inside its write transaction by now; either way the close must end it.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), kv.close()).await;
    closed
        .expect("the close does not wait for a stream that stalls")
        .expect("close");
    drop(Database::create(&path).expect("the file is free once close returns"));
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), import)
        .await
        .expect("the import's caller is answered")
        .expect("the import's task");
    assert!(matches!(outcome, Err(KvError::Closed)), "{outcome:?}");
    let reopened = RedbBackend::open(&path).expect("reopen");
    let everything = SnapshotRead {
        ranges: vec![ReadRange {
            start: vec![],
            end: vec![0xff],
            limit: 1_000,
            reverse: false,
        }],
        consistency: open_deno_kv_engine_kit::Consistency::Strong,
    };
    let read = reopened.snapshot_read(everything).await.expect("read");
    assert!(read[0].entries.is_empty(), "nothing of the import was kept");
}

//! A write whose check fails costs no durable commit: nothing reaches the write-ahead log, so no
//! fsync is paid for it (issue 17: "a failed check must not cost a durable commit").

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, KvValue, Mutation, Versionstamp, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend};

fn wal_len(path: &std::path::Path) -> u64 {
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    std::fs::metadata(wal).map(|meta| meta.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_fail_their_checks_leave_the_log_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv.sqlite3");
    let kv = SqliteBackend::open(&path).unwrap();
    let counter = encode_key(&key!["counter"]).unwrap();
    let set = |value: u64, checks: Vec<Check>| AtomicWrite {
        checks,
        mutations: vec![Mutation::set(counter.clone(), KvValue::U64(value))],
        enqueues: vec![],
    };
    let committed = kv.atomic_write(set(1, vec![])).await.unwrap().unwrap();
    let before = wal_len(&path);
    assert!(before > 0, "the first commit is in the log");

    // Checks against a versionstamp the key no longer has: every one fails, alone and together.
    let stale = Versionstamp::from_version(committed.versionstamp.version() + 100, 0);
    let failing = || {
        let check = Check {
            key: counter.clone(),
            versionstamp: Some(stale),
        };
        set(2, vec![check])
    };
    for _ in 0..5 {
        assert!(kv.atomic_write(failing()).await.unwrap().is_none());
    }
    let together = futures::future::join_all((0..8).map(|_| kv.atomic_write(failing()))).await;
    assert!(together.into_iter().all(|r| r.unwrap().is_none()));
    assert_eq!(
        wal_len(&path),
        before,
        "a failed check appended to the write-ahead log"
    );

    // A check that holds still commits, after the failed ones.
    let check = Check {
        key: counter.clone(),
        versionstamp: Some(committed.versionstamp),
    };
    assert!(
        kv.atomic_write(set(3, vec![check]))
            .await
            .unwrap()
            .is_some()
    );
    assert!(wal_len(&path) > before);
    kv.close().await.unwrap();
}

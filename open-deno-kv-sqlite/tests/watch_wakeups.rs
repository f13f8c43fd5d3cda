//! Many idle watches cost nothing per unrelated commit, and a commit that wakes them all does
//! not take a thread per watch (issue 14, defect 5: 2,000 watches on unrelated keys made every
//! commit wake and re-read all of them, and the server grew to ~500 threads).
//!
//! A binary of its own: it counts the threads of the whole test process.
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_engine_kit::{AtomicWrite, Backend, Key, KvValue, Mutation, encode_key, key};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend};

const WATCHES: usize = 400;

/// The threads of this process now.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

fn enc(key: &Key) -> Vec<u8> {
    encode_key(key).expect("a valid key")
}

async fn set(kv: &dyn Backend, key: Vec<u8>, n: u64) {
    let write = AtomicWrite {
        mutations: vec![Mutation::set(key, KvValue::U64(n))],
        ..Default::default()
    };
    kv.atomic_write(write)
        .await
        .expect("write")
        .expect("committed");
}

#[test]
fn unrelated_commits_wake_no_watch_and_a_shared_key_takes_no_thread_per_watch() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv: Arc<dyn Backend> =
            Arc::new(SqliteBackend::open(dir.path().join("kv.sqlite3")).expect("open"));
        let shared = enc(&key!["shared"]);
        let emissions = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..WATCHES {
            let own = enc(&key!["own", i]);
            let mut stream = kv.watch(vec![own, shared.clone()]).expect("watch");
            let emissions = emissions.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(Ok(_)) = stream.next().await {
                    emissions.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        wait_for(&emissions, WATCHES).await;
        // Let the first reads' threads settle before counting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = threads();

        let other = enc(&key!["other"]);
        for n in 0..100 {
            set(&*kv, other.clone(), n).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after_unrelated = threads();
        assert!(
            after_unrelated <= before + 4,
            "100 unrelated commits grew the process from {before} to {after_unrelated} threads"
        );

        set(&*kv, shared.clone(), 1).await;
        wait_for(&emissions, 2 * WATCHES).await;
        let after_shared = threads();
        assert!(
            after_shared <= before + 24,
            "one commit to a key {WATCHES} watches share grew the process from {before} to \
             {after_shared} threads"
        );
        kv.close().await.expect("close");
        for task in tasks {
            task.await.expect("watch task");
        }
    });
}

/// Waits (at most 30 s) until `count` reaches `target`.
async fn wait_for(count: &AtomicUsize, target: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while count.load(Ordering::SeqCst) < target {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {target} emissions came",
            count.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

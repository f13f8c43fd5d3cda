//! Eventual reads on a real streaming replica. Which server answered is proven by pausing the
//! replica's WAL replay: a paused replica answers with the past, the primary with the present.

use std::time::{Duration, Instant};

use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    Backend, Checked, Consistency, Key, KvValue, ReadRange, SnapshotRead, key,
};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};

mod common;
use common::{get, set};

async fn open(cluster: &TestCluster, read_your_writes: bool) -> Checked<PostgresBackend> {
    let options = PostgresOptions {
        replica_urls: cluster.replica_url().into_iter().collect(),
        read_your_writes,
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(&cluster.url(), options)
        .await
        .expect("open")
}

/// The value of `[name]` by an eventual read.
async fn get_eventual(kv: &dyn Backend, name: &str) -> Option<KvValue> {
    let key: Key = key![name];
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_key(&key).expect("a valid key")],
        consistency: Consistency::Eventual,
    };
    let mut outputs = kv.snapshot_read(read).await.expect("eventual read");
    outputs.remove(0).entries.pop().map(|entry| entry.value)
}

/// Waits (bounded) until the replica has replayed every commit the primary has now.
fn until_replayed(cluster: &TestCluster) {
    const VERSION: &str = "SELECT data_version FROM public.kv_meta";
    let primary: u64 = cluster
        .psql("postgres", VERSION)
        .expect("the primary's version")
        .parse()
        .expect("a number");
    let started = Instant::now();
    loop {
        // Before the tables themselves are replayed, the query fails.
        let replayed = cluster.replica_psql("postgres", VERSION).ok();
        if replayed.and_then(|v| v.parse::<u64>().ok()) >= Some(primary) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica did not replay version {primary} within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Pauses the replica's replay, and waits until it has paused (a pause is only requested at
/// first).
fn pause_replay(cluster: &TestCluster) {
    cluster
        .replica_psql("postgres", "SELECT pg_wal_replay_pause()")
        .expect("pause replay");
    let started = Instant::now();
    while cluster
        .replica_psql("postgres", "SELECT pg_get_wal_replay_pause_state()")
        .expect("replay state")
        != "paused"
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "replay did not pause"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn resume_replay(cluster: &TestCluster) {
    cluster
        .replica_psql("postgres", "SELECT pg_wal_replay_resume()")
        .expect("resume replay");
}

/// A primary with a streaming replica, or `None` when PostgreSQL tests are skipped.
fn replica_cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions {
        replica: true,
        ..ClusterOptions::default()
    })
}

/// `writer` sets `x` to 1, the replica replays it and is paused, `writer` sets `x` to 2; then
/// checks that an eventual read through `reader` shows 1: the replica answered.
async fn replica_holds_the_past(cluster: &TestCluster, writer: &dyn Backend, reader: &dyn Backend) {
    // The store's tables are created on the primary by the first open, then replayed.
    set(writer, "x", 1).await;
    until_replayed(cluster);
    pause_replay(cluster);
    set(writer, "x", 2).await;
    assert_eq!(get_eventual(reader, "x").await, Some(KvValue::U64(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eventual_reads_are_served_by_the_replica_and_strong_reads_by_the_primary() {
    let Some(cluster) = replica_cluster() else {
        return;
    };
    // Without read-your-writes, the paused replica answers: the past.
    let writer = open(&cluster, false).await;
    replica_holds_the_past(&cluster, &writer, &writer).await;
    assert_eq!(get(&writer, "x").await, Some(KvValue::U64(2)), "strong");
    // Several ranges come from one snapshot of the replica too.
    let read = SnapshotRead {
        ranges: vec![
            ReadRange::single_key(&key!["x"]).unwrap(),
            ReadRange::prefix(&key![], 10).unwrap(),
        ],
        consistency: Consistency::Eventual,
    };
    let outputs = writer.snapshot_read(read).await.unwrap();
    assert_eq!(outputs[0].entries[0].value, KvValue::U64(1));
    assert_eq!(outputs[1].entries.len(), 1);
    resume_replay(&cluster);
    until_replayed(&cluster);
    assert_eq!(get_eventual(&writer, "x").await, Some(KvValue::U64(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_your_writes_holds_on_a_lagging_replica_and_the_replica_serves_once_caught_up() {
    let Some(cluster) = replica_cluster() else {
        return;
    };
    let other = open(&cluster, false).await;
    let mine = open(&cluster, true).await;
    // Another handle's write may be missing from an eventual read: the replica answered.
    replica_holds_the_past(&cluster, &other, &mine).await;
    // This handle's own write is not: the replica is behind it, so the primary answers.
    let started = Instant::now();
    set(&mine, "y", 1).await;
    assert_eq!(get_eventual(&mine, "y").await, Some(KvValue::U64(1)));
    assert_eq!(get_eventual(&mine, "x").await, Some(KvValue::U64(2)));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the fallback to the primary does not hang"
    );

    resume_replay(&cluster);
    until_replayed(&cluster);
    // Caught up again, the replica serves this handle: paused once more, it shows the past of
    // writes made elsewhere.
    pause_replay(&cluster);
    set(&other, "x", 3).await;
    assert_eq!(get_eventual(&mine, "x").await, Some(KvValue::U64(2)));
    assert_eq!(
        support::get_value(&mine, &key!["x"]).await,
        Some(KvValue::U64(3))
    );
    resume_replay(&cluster);
}

//! Commits whose answer is lost: the connection-cutting proxy kills the committer's connection at
//! `COMMIT`, after forwarding it (the server commits, the answer never arrives) or instead of
//! forwarding it (the server rolls back). The store must find out which, and answer every write
//! with its true outcome; only when the server stays unreachable past the outcome wait does a
//! write get "unknown". Each test starts its own throwaway cluster.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, KvError, KvValue, Mutation, Versionstamp, key,
};
use open_deno_kv_postgres::testing::{ClusterOptions, CommitCut, SilentCutProxy, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};

mod common;
use common::{get, open, open_url, set};

/// A throwaway cluster with `fsync` off: nothing here kills the server, and cheaper commits keep
/// a thousand cuts quick on a loaded machine.
fn cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions {
        fsync: false,
        ..ClusterOptions::default()
    })
}

/// How many commits are cut.
const CUTS: u64 = 1000;
/// Writer tasks on the handle behind the proxy, and on a second handle (another "process")
/// that commits into the same store directly, taking versions in between.
const WRITERS_CUT: usize = 4;
const WRITERS_DIRECT: usize = 2;
/// How long the whole test may take before it counts as hung.
const BOUND: Duration = Duration::from_secs(600);

/// Write `i` of writer `n`: adds 1 to `["count"]` and sets `["w", n, i]`, in one atomic write.
fn counted_write(n: usize, i: u64) -> AtomicWrite {
    AtomicWrite {
        mutations: vec![
            Mutation::set(support::enc(&key!["w", n, i]), KvValue::U64(i)),
            Mutation::sum(support::enc(&key!["count"]), KvValue::U64(1)),
        ],
        ..AtomicWrite::default()
    }
}

/// The test: 1,000 commits cut at `COMMIT` (half after forwarding it, half instead),
/// while one handle writes through the proxy and another writes directly into the same store.
/// Every write is answered as committed (none fails, none is "unknown"), every `sum` counted
/// exactly once, and every write is there with the versionstamp it was answered with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_commits_cut_at_commit_each_get_their_true_outcome() {
    let Some(cluster) = cluster() else { return };
    let started = Instant::now();
    let proxy = Arc::new(SilentCutProxy::start(cluster.port()).await.unwrap());
    // The store's own role creates the schema; the proxy's URL names the superuser, who may use it.
    let direct = Arc::new(open(&cluster, "cuts").await.unwrap());
    let through_proxy = Arc::new(open_url(&proxy.url("postgres"), "cuts").await.unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeMap<(usize, u64), Versionstamp>>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();

    let writers: Vec<_> = (0..WRITERS_CUT + WRITERS_DIRECT)
        .map(|n| {
            let kv = if n < WRITERS_CUT {
                through_proxy.clone()
            } else {
                direct.clone()
            };
            let (stop, acked, failed) = (stop.clone(), acked.clone(), failed.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    match kv.atomic_write(counted_write(n, i)).await {
                        Ok(Some(done)) => {
                            acked.lock().unwrap().insert((n, i), done.versionstamp);
                        }
                        Ok(None) => panic!("write {n}/{i} has no checks"),
                        Err(err) => failed.lock().unwrap().push(format!("{n}/{i}: {err}")),
                    }
                    i += 1;
                }
            })
        })
        .collect();

    for cut in 0..CUTS {
        let how = if cut % 2 == 0 {
            CommitCut::AfterForwarding
        } else {
            CommitCut::InsteadOfForwarding
        };
        proxy.cut_at_next_commit(how);
        while proxy.commit_cuts() <= cut {
            assert!(
                started.elapsed() < BOUND,
                "only {cut} cuts within {BOUND:?}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // The writes of the last cut are answered, and a few more go through untouched.
    let acked_at_last_cut = acked.lock().unwrap().len();
    while acked.lock().unwrap().len() < acked_at_last_cut + 20 {
        assert!(started.elapsed() < BOUND, "no writes after the last cut");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Release);
    for writer in writers {
        writer.await.unwrap();
    }

    let failed = std::mem::take(&mut *failed.lock().unwrap());
    assert!(
        failed.is_empty(),
        "{} writes were not answered with their outcome, e.g. {:?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let count = match get(&*direct, "count").await {
        Some(KvValue::U64(count)) => count,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        count,
        acked.len() as u64,
        "each acknowledged sum counted exactly once"
    );
    let mut stored = 0;
    for ((n, i), stamp) in &acked {
        let entry = support::get(&*direct, &key!["w", *n, *i]).await;
        assert_eq!(
            entry.map(|e| e.versionstamp),
            Some(*stamp),
            "write {n}/{i} is there with its versionstamp"
        );
        stored += 1;
    }
    let through = acked.keys().filter(|(n, _)| *n < WRITERS_CUT).count();
    assert!(
        through as u64 > CUTS,
        "every cut hit a write of the proxied handle"
    );
    eprintln!(
        "{CUTS} commits cut in {:?}: {} writes answered ({through} through the proxy), {stored} \
         stored, counter {count}",
        started.elapsed(),
        acked.len(),
    );
    through_proxy.close().await.unwrap();
    direct.close().await.unwrap();
}

/// A handle through `proxy` that looks a lost commit up for one second only.
async fn open_with_short_wait(
    proxy: &SilentCutProxy,
) -> open_deno_kv_engine_kit::Checked<PostgresBackend> {
    let options = PostgresOptions {
        schema: "unreachable".to_owned(),
        commit_outcome_wait: Duration::from_secs(1),
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(&proxy.url("postgres"), options)
        .await
        .expect("open through the proxy")
}

/// When the server cannot be reached again within the outcome wait, the write is answered
/// "unknown" ([`KvError::OutcomeUnknown`], with [`PostgresError::OutcomeUnknown`] as its
/// source) — both when it landed and when it did not; once the server is back, the store
/// writes again by itself and shows which it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_outcome_cannot_be_learnt_in_time_is_answered_unknown() {
    let Some(cluster) = cluster() else { return };
    let proxy = SilentCutProxy::start(cluster.port()).await.unwrap();
    let kv = open_with_short_wait(&proxy).await;
    set(&kv, "warm", 1).await; // the committer has its connection

    for (how, name, landed) in [
        (CommitCut::AfterForwarding, "landed", true),
        (CommitCut::InsteadOfForwarding, "dropped", false),
    ] {
        proxy.refuse(true);
        proxy.cut_at_next_commit(how);
        let started = Instant::now();
        let err = kv
            .atomic_write(AtomicWrite {
                mutations: vec![Mutation::set(support::enc(&key![name]), KvValue::U64(7))],
                ..AtomicWrite::default()
            })
            .await
            .unwrap_err();
        let waited = started.elapsed();
        let KvError::OutcomeUnknown { source } = &err else {
            panic!("{how:?}: expected an unknown outcome, got {err:?}");
        };
        assert!(
            matches!(
                source.downcast_ref::<PostgresError>(),
                Some(PostgresError::OutcomeUnknown { .. })
            ),
            "{source:?}"
        );
        assert!(
            err.to_string()
                .contains("may or may not have been committed"),
            "{err}"
        );
        assert!(
            waited >= Duration::from_secs(1),
            "answered after the wait, not before ({waited:?})"
        );
        proxy.refuse(false);
        set(&kv, "after", 2).await; // the store writes again by itself
        let expected = landed.then_some(KvValue::U64(7));
        assert_eq!(get(&kv, name).await, expected, "{how:?}");
    }
    kv.close().await.unwrap();
}

/// The wait is bounded by how long commit records are kept: a longer one is refused at open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_wait_longer_than_the_records_are_kept_is_refused() {
    let Some(cluster) = cluster() else { return };
    let options = PostgresOptions {
        commit_outcome_wait: Duration::from_secs(3600),
        ..PostgresOptions::default()
    };
    let err = PostgresBackend::open_with(&cluster.url(), options)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("commit_outcome_wait"), "{err}");
}

/// A store of schema version 2 (before the commit records) opens: it gains the table, moves to
/// version 3 with its data, and commits write records from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_store_is_migrated_on_open() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "two").await.unwrap();
    set(&kv, "a", 1).await;
    kv.close().await.unwrap();
    cluster
        .psql(
            "postgres",
            "DROP TABLE two.kv_commit_ids; ALTER TABLE two.kv_meta DROP COLUMN database_id; \
             UPDATE two.kv_meta SET schema_version = 2",
        )
        .unwrap();

    let kv = open(&cluster, "two").await.unwrap();
    let version = |sql: &str| cluster.psql("postgres", sql).unwrap();
    assert_eq!(version("SELECT schema_version FROM two.kv_meta"), "3");
    assert_eq!(get(&kv, "a").await, Some(KvValue::U64(1)));
    set(&kv, "b", 2).await;
    assert_eq!(version("SELECT count(*) FROM two.kv_commit_ids"), "1");
    kv.close().await.unwrap();
}

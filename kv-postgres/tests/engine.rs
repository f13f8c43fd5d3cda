//! What kv-postgres adds beyond the conformance suite: its schema refusals, several handles (as
//! several processes would) sharing one store, batching, and surviving primary restarts. Each
//! test starts its own throwaway cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kv_conformance::support;
use kv_postgres::testing::{ClusterOptions, Shutdown, TestCluster};
use kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};
use kv_proto::{
    AtomicWrite, Backend, Check, Clock, Enqueue, KvError, KvValue, ManualClock, Mutation,
    Versionstamp, WatchKeyOutput, key,
};

fn cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions::default())
}

async fn open(cluster: &TestCluster, schema: &str) -> Result<PostgresBackend, KvError> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(&cluster.url(), options).await
}

/// A handle on `schema` whose time is `clock`.
async fn open_at(cluster: &TestCluster, schema: &str, clock: &ManualClock) -> PostgresBackend {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        clock: Arc::new(clock.clone()),
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(&cluster.url(), options)
        .await
        .expect("open")
}

/// A message due now on `clock`, with the default back-off schedule.
fn message_write(payload: &[u8], clock: &ManualClock) -> AtomicWrite {
    AtomicWrite {
        enqueues: vec![Enqueue {
            payload: payload.to_vec(),
            ready_at: clock.now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    }
}

fn k(name: &str) -> Vec<u8> {
    support::enc(&key![name])
}

async fn set(kv: &dyn Backend, name: &str, value: u64) -> Versionstamp {
    support::set(kv, &key![name], KvValue::U64(value)).await
}

async fn get(kv: &dyn Backend, name: &str) -> Option<KvValue> {
    support::get_value(kv, &key![name]).await
}

/// The PostgresError inside a KvError::Storage, if any.
fn postgres_error(err: &KvError) -> Option<&PostgresError> {
    match err {
        KvError::Storage { source } => source.downcast_ref::<PostgresError>(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_a_newer_schema_version_is_refused_untouched() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "newer").await.unwrap();
    set(&kv, "a", 1).await;
    kv.close().await.unwrap();
    cluster
        .psql("postgres", "UPDATE newer.kv_meta SET schema_version = 2")
        .unwrap();
    let before = cluster
        .psql(
            "postgres",
            "SELECT schema_version, data_version FROM newer.kv_meta",
        )
        .unwrap();

    let err = open(&cluster, "newer").await.unwrap_err();
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::SchemaTooNew {
                found: 2,
                supported: 1
            })
        ),
        "{err}"
    );
    let after = cluster
        .psql(
            "postgres",
            "SELECT schema_version, data_version FROM newer.kv_meta",
        )
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_with_our_names_and_another_shape_are_refused_untouched() {
    let Some(cluster) = cluster() else { return };
    cluster
        .psql(
            "postgres",
            "CREATE SCHEMA other; CREATE TABLE other.kv (k text PRIMARY KEY, v text); \
             INSERT INTO other.kv VALUES ('theirs', 'data')",
        )
        .unwrap();
    let err = open(&cluster, "other").await.unwrap_err();
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("not a Deno KV store"), "{err}");
    let tables = cluster
        .psql(
            "postgres",
            "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
             WHERE table_schema = 'other'",
        )
        .unwrap();
    assert_eq!(tables, "kv", "nothing was created beside the foreign table");
    assert_eq!(
        cluster.psql("postgres", "SELECT v FROM other.kv").unwrap(),
        "data"
    );

    // All three names, one of them with a column of another type.
    let kv = open(&cluster, "altered").await.unwrap();
    kv.close().await.unwrap();
    cluster
        .psql(
            "postgres",
            "ALTER TABLE altered.kv_queue ALTER COLUMN ready_at TYPE numeric",
        )
        .unwrap();
    let err = open(&cluster, "altered").await.unwrap_err();
    assert!(err.to_string().contains("kv_queue"), "{err}");
}

/// Two handles stand for two processes: one store, one order of versionstamps, watches and
/// queues across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_share_one_store_its_order_its_watches_and_its_queue() {
    let Some(cluster) = cluster() else { return };
    let a = Arc::new(open(&cluster, "public").await.unwrap());
    let b = Arc::new(open(&cluster, "public").await.unwrap());

    let mut watch = b.watch(vec![k("seen")]).unwrap();
    assert!(matches!(
        watch.next().await.unwrap().unwrap()[0],
        WatchKeyOutput::Changed(None)
    ));
    let stamp = set(&*a, "seen", 7).await;
    let emitted = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("B's watch sees A's commit")
        .unwrap()
        .unwrap();
    match &emitted[0] {
        WatchKeyOutput::Changed(Some(entry)) => assert_eq!(entry.versionstamp, stamp),
        other => panic!("{other:?}"),
    }

    // Writers on both handles at once: every versionstamp distinct, each handle's increasing.
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, kv)| {
            tokio::spawn(async move {
                let mut stamps = Vec::new();
                for i in 0..50 {
                    stamps.push(set(&*kv, &format!("w{n}-{i}"), i).await);
                }
                stamps
            })
        })
        .collect();
    let mut all = Vec::new();
    for writer in writers {
        let stamps = writer.await.unwrap();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
        all.extend(stamps);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 100);

    // A message enqueued through A is delivered through B.
    let write = AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![0xff, 0x0f, 0x49, 0x02],
            ready_at: chrono::Utc::now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    };
    let consumer = {
        let b = b.clone();
        tokio::spawn(async move { b.dequeue_next_message().await })
    };
    a.atomic_write(write).await.unwrap().unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), consumer)
        .await
        .expect("B's waiting consumer is woken by A's enqueue")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(message.payload(), &[0xff, 0x0f, 0x49, 0x02]);
    message.finish(true).await.unwrap();
    assert!(a.queued_messages().await.unwrap().is_empty());
}

/// Concurrent writes share transactions (rows written together share `xmin`), and a write whose
/// check fails inside a group fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_transactions_and_a_failed_check_fails_alone() {
    let Some(cluster) = cluster() else { return };
    let kv = Arc::new(open(&cluster, "batch").await.unwrap());
    const WRITERS: usize = 64;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|i| {
            let kv = kv.clone();
            tokio::spawn(async move {
                let write = if i % 2 == 0 {
                    // Everyone races to create the same key: exactly one may win.
                    AtomicWrite {
                        checks: vec![Check {
                            key: k("contended"),
                            versionstamp: None,
                        }],
                        mutations: vec![Mutation::set(k("contended"), KvValue::U64(i as u64))],
                        ..AtomicWrite::default()
                    }
                } else {
                    AtomicWrite {
                        mutations: vec![Mutation::set(k(&format!("own {i}")), KvValue::U64(1))],
                        ..AtomicWrite::default()
                    }
                };
                (i, kv.atomic_write(write).await.unwrap())
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if i % 2 == 0 {
            winners += usize::from(outcome.is_some());
        } else {
            assert!(outcome.is_some(), "write {i} has no check and must commit");
        }
    }
    assert_eq!(winners, 1);
    let transactions: usize = cluster
        .psql(
            "postgres",
            "SELECT count(DISTINCT xmin::text) FROM batch.kv",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        transactions <= WRITERS / 2,
        "{} rows came from {transactions} transactions: writes were not grouped",
        WRITERS / 2 + 1
    );
}

/// Restarting the primary (fast, then immediate) under load: writes go on by themselves, and
/// every acknowledged write is there; a write either committed, failed clearly, or reported an
/// unknown outcome — and only those may or may not be there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_primary_restarts_under_load() {
    let Some(cluster) = cluster() else { return };
    let cluster = Arc::new(cluster);
    let kv = Arc::new(open(&cluster, "public").await.unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    const WRITERS: usize = 4;
    let acked_after_restarts = Arc::new(AtomicU64::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|n| {
            let (kv, stop) = (kv.clone(), stop.clone());
            let (after, restarted) = (acked_after_restarts.clone(), restarted.clone());
            tokio::spawn(async move {
                let (mut acked, mut unknown, mut failed) = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::Acquire) {
                    let write = AtomicWrite {
                        mutations: vec![Mutation::sum(k(&format!("counter {n}")), KvValue::U64(1))],
                        ..AtomicWrite::default()
                    };
                    match kv.atomic_write(write).await {
                        Ok(Some(_)) => {
                            acked += 1;
                            if restarted.load(Ordering::Acquire) {
                                after.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(None) => unreachable!("no checks"),
                        Err(err) => match postgres_error(&err) {
                            Some(PostgresError::OutcomeUnknown { .. }) => unknown += 1,
                            _ => failed += 1,
                        },
                    }
                }
                (n, acked, unknown, failed)
            })
        })
        .collect();
    for how in [Shutdown::Fast, Shutdown::Immediate] {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Pooled read connections exist when the server goes away, and must be replaced.
        get(&*kv, "counter 0").await;
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.restart_primary(how))
            .await
            .unwrap()
            .unwrap();
    }
    restarted.store(true, Ordering::Release);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Release);
    for writer in writers {
        let (n, acked, unknown, failed) = writer.await.unwrap();
        eprintln!("writer {n}: {acked} acknowledged, {unknown} unknown, {failed} failed");
        let stored = match get(&*kv, &format!("counter {n}")).await {
            Some(KvValue::U64(v)) => v,
            None => 0,
            other => panic!("{other:?}"),
        };
        assert!(
            acked <= stored && stored <= acked + unknown,
            "writer {n}: {acked} acknowledged, {unknown} unknown, {stored} stored"
        );
    }
    assert!(
        acked_after_restarts.load(Ordering::Relaxed) > 0,
        "writes resumed after the restarts without reopening"
    );
}

/// Closing a handle gives back the messages it still holds as failed deliveries: another
/// consumer gets them after the first back-off interval (100 ms), long before the 5 s lease of
/// the closed handle would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_handle_gives_back_the_messages_it_holds() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::at_test_epoch();
    let first = open_at(&cluster, "closing", &clock).await;
    let second = open_at(&cluster, "closing", &clock).await;
    first
        .atomic_write(message_write(b"held at close", &clock))
        .await
        .unwrap()
        .unwrap();
    let held = first.dequeue_next_message().await.unwrap().unwrap();
    first.close().await.unwrap();

    // Past the back-off interval, well inside the lease.
    clock.advance(Duration::from_secs(1));
    let again = tokio::time::timeout(Duration::from_secs(5), second.dequeue_next_message())
        .await
        .expect("the message came back when its holder closed, not after its lease")
        .unwrap()
        .unwrap();
    assert_eq!(again.payload(), b"held at close");
    // The closed handle's late answer (an error or not) changes nothing.
    let _ = held.finish(true).await;
    assert_eq!(second.queued_messages().await.unwrap().len(), 1);
    again.finish(true).await.unwrap();
    assert!(second.queued_messages().await.unwrap().is_empty());
}

//! open-deno-kv-postgres when the connection or the server fails: pooled connections that died unnoticed,
//! and the primary restarting (fast and immediate shutdowns) under a load of writes and queue
//! traffic. Each test starts its own throwaway cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Enqueue, KvError, KvValue, Mutation, ReadRange, Versionstamp, key,
};
use open_deno_kv_postgres::testing::{Shutdown, SilentCutProxy};

mod common;
use common::{cluster, get, open, open_url, set};

/// A read on a pooled connection that died while idle (the pool still takes it for healthy) is
/// answered on a fresh connection instead of failing; so are a watch's re-read and the queue
/// listing, which go through the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_on_a_pooled_connection_that_died_unnoticed_is_retried_on_a_fresh_one() {
    let Some(cluster) = cluster() else { return };
    let proxy = SilentCutProxy::start(cluster.port()).await.unwrap();
    let kv = open_url(&proxy.url("postgres"), "public").await.unwrap();
    set(&kv, "kept", 1).await;
    // The read leaves its connection idle in the pool.
    assert_eq!(get(&kv, "kept").await, Some(KvValue::U64(1)));

    proxy.cut();
    assert_eq!(get(&kv, "kept").await, Some(KvValue::U64(1)));
    proxy.cut();
    assert!(kv.queued_messages().await.unwrap().is_empty());
}

/// The load of one writer task: write `i` sets `["w", n, i]`, adds 1 to `["count", n]` and
/// enqueues the message `w<n>-<i>`, in one atomic write.
fn load_write(n: usize, i: u64) -> AtomicWrite {
    AtomicWrite {
        mutations: vec![
            Mutation::set(written_key(n, i), KvValue::U64(i)),
            Mutation::sum(count_key(n), KvValue::U64(1)),
        ],
        enqueues: vec![Enqueue {
            payload: message_of(n, i),
            ready_at: chrono::Utc::now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    }
}

fn written_key(n: usize, i: u64) -> Vec<u8> {
    support::enc(&key!["w", n, i])
}

fn count_key(n: usize) -> Vec<u8> {
    support::enc(&key!["count", n])
}

fn message_of(n: usize, i: u64) -> Vec<u8> {
    format!("w{n}-{i}").into_bytes()
}

/// What the writers were told, logged client-side as the answers came.
#[derive(Default)]
struct WriteLog {
    /// Acknowledged: `(writer, i)` → versionstamp.
    acked: BTreeMap<(usize, u64), Versionstamp>,
    /// Answered "outcome unknown": may or may not have committed.
    unknown: BTreeSet<(usize, u64)>,
    /// Failed with another error: must not have committed.
    failed: BTreeSet<(usize, u64)>,
}

/// What the consumers saw.
#[derive(Default)]
struct DeliveryLog {
    /// How often each message was finished with success, and the finish returned `Ok`.
    successes: BTreeMap<Vec<u8>, usize>,
    /// Messages whose `finish(true)` failed: the server may or may not have removed them.
    finish_failed: BTreeSet<Vec<u8>>,
    /// Dequeues that failed (the server was away).
    dequeue_errors: usize,
}

const RESTARTS: usize = 10;
const WRITERS: usize = 6;
const CONSUMERS: usize = 2;
/// How long the whole test may take before it counts as hung.
const BOUND: Duration = Duration::from_secs(150);

/// The fault test: the primary restarts 10 times (fast and immediate shutdowns in turn)
/// while one handle writes and enqueues and another consumes, as two processes would. Afterwards:
///
/// - every acknowledged write is there, with its acknowledged versionstamp; every write that failed
///   with an ordinary error is absent; writes answered "outcome unknown" (the connection died at
///   `COMMIT`) are either there or not, and are counted;
/// - each counter equals the number of its writer's writes that are there (no sum counted twice);
/// - the message of every write that is there was finished with success exactly once (or its
///   `finish` failed and it was not seen again), and no message of an absent write was delivered:
///   zero lost, zero duplicated successes;
/// - the handles recovered by themselves (writes acknowledged after the last restart), all within
///   a bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_primary_restarts_under_load_lose_and_duplicate_nothing() {
    let Some(cluster) = cluster() else { return };
    let started = Instant::now();
    let cluster = Arc::new(cluster);
    let producer = Arc::new(open(&cluster, "shared").await.unwrap());
    let consumer = Arc::new(open(&cluster, "shared").await.unwrap());
    let stop_writing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(Mutex::new(WriteLog::default()));
    let deliveries = Arc::new(Mutex::new(DeliveryLog::default()));

    let writers: Vec<_> = (0..WRITERS)
        .map(|n| {
            let (kv, stop, log) = (producer.clone(), stop_writing.clone(), writes.clone());
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Acquire) {
                    let answer = kv.atomic_write(load_write(n, i)).await;
                    let mut log = log.lock().unwrap();
                    match answer {
                        Ok(Some(done)) => {
                            log.acked.insert((n, i), done.versionstamp);
                        }
                        Ok(None) => panic!("write {n}/{i} has no checks"),
                        Err(KvError::OutcomeUnknown { .. }) => {
                            log.unknown.insert((n, i));
                        }
                        Err(_) => {
                            log.failed.insert((n, i));
                        }
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (kv, stop, log) = (consumer.clone(), stop_consuming.clone(), deliveries.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    let wait = tokio::time::timeout(Duration::from_millis(200), async {
                        kv.dequeue_next_message().await
                    });
                    match wait.await {
                        Err(_) => {}
                        Ok(Ok(None)) => return,
                        Ok(Err(_)) => {
                            log.lock().unwrap().dequeue_errors += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        Ok(Ok(Some(message))) => {
                            let payload = message.payload().to_vec();
                            let finished = message.finish(true).await;
                            let mut log = log.lock().unwrap();
                            match finished {
                                Ok(()) => *log.successes.entry(payload).or_default() += 1,
                                Err(_) => {
                                    log.finish_failed.insert(payload);
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();

    for round in 0..RESTARTS {
        tokio::time::sleep(Duration::from_millis(250)).await;
        // Reads keep pooled connections around when the server goes away.
        get(&*producer, "anything").await;
        let how = if round % 2 == 0 {
            Shutdown::Fast
        } else {
            Shutdown::Immediate
        };
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.restart_primary(how))
            .await
            .unwrap()
            .unwrap();
    }
    let acked_before_last_restart = writes.lock().unwrap().acked.len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop_writing.store(true, Ordering::Release);
    for writer in writers {
        writer.await.unwrap();
    }
    let writes = std::mem::take(&mut *writes.lock().unwrap());
    assert!(
        writes.acked.len() > acked_before_last_restart,
        "writes were acknowledged after the last restart, without reopening"
    );

    // Every write, as stored (by encoded key).
    let mut stored: BTreeMap<Vec<u8>, Versionstamp> = BTreeMap::new();
    let mut page = ReadRange::prefix(&key!["w"], 1000).unwrap();
    loop {
        let entries = support::read(&*producer, vec![page.clone()])
            .await
            .remove(0);
        let Some(last) = entries.last() else { break };
        page.start = last.key.to_vec();
        page.start.push(0);
        stored.extend(
            entries
                .into_iter()
                .map(|e| (e.key.to_vec(), e.versionstamp)),
        );
    }
    for (&(n, i), stamp) in &writes.acked {
        assert_eq!(
            stored.get(&written_key(n, i)),
            Some(stamp),
            "acknowledged write {n}/{i} lost"
        );
    }
    for &(n, i) in &writes.failed {
        assert!(
            !stored.contains_key(&written_key(n, i)),
            "failed write {n}/{i} is there"
        );
    }
    let landed: BTreeSet<(usize, u64)> = writes
        .acked
        .keys()
        .chain(&writes.unknown)
        .copied()
        .filter(|&(n, i)| stored.contains_key(&written_key(n, i)))
        .collect();
    assert_eq!(
        landed.len(),
        stored.len(),
        "writes are there that were neither acknowledged nor answered 'unknown'"
    );
    for n in 0..WRITERS {
        let expected = landed.iter().filter(|(writer, _)| *writer == n).count() as u64;
        let count = match support::get_value(&*producer, &key!["count", n]).await {
            Some(KvValue::U64(count)) => count,
            None => 0,
            other => panic!("{other:?}"),
        };
        assert_eq!(count, expected, "writer {n}'s counter");
    }

    // Every landed write's message, delivered once; no other message.
    let expected: BTreeSet<Vec<u8>> = landed.iter().map(|&(n, i)| message_of(n, i)).collect();
    loop {
        let settled = {
            let log = deliveries.lock().unwrap();
            expected
                .iter()
                .all(|m| log.successes.contains_key(m) || log.finish_failed.contains(m))
        };
        if settled && consumer.queued_messages().await.unwrap().is_empty() {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "not every message was delivered within {BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Late duplicates would show up now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop_consuming.store(true, Ordering::Release);
    for task in consumers {
        task.await.unwrap();
    }
    let deliveries = std::mem::take(&mut *deliveries.lock().unwrap());
    let duplicated: Vec<_> = deliveries
        .successes
        .iter()
        .filter(|(_, n)| **n > 1)
        .collect();
    assert!(duplicated.is_empty(), "delivered twice: {duplicated:?}");
    for message in deliveries.successes.keys() {
        assert!(
            expected.contains(message),
            "{} was delivered, but its write is not there",
            String::from_utf8_lossy(message)
        );
    }
    let lost: Vec<_> = expected
        .iter()
        .filter(|m| {
            !deliveries.successes.contains_key(*m) && !deliveries.finish_failed.contains(*m)
        })
        .collect();
    assert!(lost.is_empty(), "lost: {lost:?}");
    let finished_unseen = expected
        .iter()
        .filter(|m| !deliveries.successes.contains_key(*m))
        .count();
    eprintln!(
        "{RESTARTS} restarts in {:?}: {} writes acknowledged, {} outcome unknown ({} of them \
         landed), {} failed; {} messages delivered once, {} finishes failed ({} never seen \
         again), {} dequeue errors",
        started.elapsed(),
        writes.acked.len(),
        writes.unknown.len(),
        writes.unknown.iter().filter(|w| landed.contains(w)).count(),
        writes.failed.len(),
        deliveries.successes.len(),
        deliveries.finish_failed.len(),
        finished_unseen,
        deliveries.dequeue_errors,
    );
    assert!(started.elapsed() < BOUND, "took {:?}", started.elapsed());
}

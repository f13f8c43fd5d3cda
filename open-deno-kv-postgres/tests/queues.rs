//! Queue consumers taking messages in batches must not starve each other. Each consumer here is
//! a handle of its own on one store — its own connection pool, committer, listener and
//! housekeeping, everything a second process would have — on one throwaway cluster per test.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use open_deno_kv_engine_kit::{AtomicWrite, Backend, Enqueue, ManualClock};

mod common;
use common::{cluster, message_write, open, open_at};

/// `count` messages, one atomic write each, payloads `0..count` (8 bytes, little-endian).
async fn enqueue(kv: &dyn Backend, range: std::ops::Range<u64>) {
    for i in range {
        let write = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: i.to_le_bytes().to_vec(),
                ready_at: chrono::Utc::now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..AtomicWrite::default()
        };
        kv.atomic_write(write)
            .await
            .expect("enqueue")
            .expect("an enqueue without checks commits");
    }
}

fn index(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload.try_into().expect("an 8-byte payload"))
}

/// Consumes until `until` says every message arrived (or `bound` passes), each taking `work`;
/// returns the payload indexes it finished, in order.
async fn consume(
    kv: Arc<dyn Backend>,
    work: Duration,
    seen: Arc<std::sync::Mutex<BTreeMap<u64, usize>>>,
    total: usize,
    bound: Duration,
) -> Vec<u64> {
    let started = Instant::now();
    let mut mine = Vec::new();
    while seen.lock().expect("not poisoned").len() < total && started.elapsed() < bound {
        let Ok(next) =
            tokio::time::timeout(Duration::from_millis(100), kv.dequeue_next_message()).await
        else {
            continue;
        };
        let message = next.expect("dequeue").expect("the handle is open");
        let i = index(message.payload());
        tokio::time::sleep(work).await;
        message.finish(true).await.expect("finish");
        *seen.lock().expect("not poisoned").entry(i).or_default() += 1;
        mine.push(i);
    }
    mine
}

/// Two consumers on two handles, started together on 100 waiting messages, each spending 5 ms
/// per message: each gets a fair share (at least 30 of the 100), every message arrives exactly
/// once. A consumer that leased a large batch up front (`LIMIT 100`) would take them all and
/// leave the other idle; taking as many as the consumer's recent pace handles in 20 ms keeps
/// the batches at a few messages here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_on_two_handles_each_get_a_share() {
    const TOTAL: usize = 100;
    let Some(cluster) = cluster() else { return };
    let a: Arc<dyn Backend> = Arc::new(open(&cluster, "fair").await.unwrap());
    let b: Arc<dyn Backend> = Arc::new(open(&cluster, "fair").await.unwrap());
    enqueue(&*a, 0..TOTAL as u64).await;

    let seen = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let bound = Duration::from_secs(60);
    let work = Duration::from_millis(5);
    let (got_a, got_b) = tokio::join!(
        tokio::spawn(consume(a.clone(), work, seen.clone(), TOTAL, bound)),
        tokio::spawn(consume(b.clone(), work, seen.clone(), TOTAL, bound)),
    );
    let (got_a, got_b) = (got_a.unwrap(), got_b.unwrap());

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), TOTAL, "every message arrived within {bound:?}");
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    eprintln!("shares: A {}, B {}", got_a.len(), got_b.len());
    for (name, got) in [("A", &got_a), ("B", &got_b)] {
        assert!(
            got.len() >= 30,
            "consumer {name} got {} of {TOTAL} (A {}, B {})",
            got.len(),
            got_a.len(),
            got_b.len()
        );
    }
    assert!(a.queued_messages().await.unwrap().is_empty());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A fast consumer takes messages ahead of its dequeues; when it stops asking (without closing:
/// its process lives on, renewing its leases), what it took ahead goes back within about a
/// second, and another consumer gets every message left — long before a lease could run out,
/// and although the first handle's leases are renewed all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_taken_ahead_by_a_consumer_that_stops_go_to_another() {
    const TOTAL: u64 = 400;
    const FIRST_TAKES: u64 = 200;
    let Some(cluster) = cluster() else { return };
    let fast = open(&cluster, "stopped").await.unwrap();
    let other = open(&cluster, "stopped").await.unwrap();
    enqueue(&fast, 0..TOTAL).await;

    let mut seen = BTreeMap::<u64, usize>::new();
    for _ in 0..FIRST_TAKES {
        let message = fast.dequeue_next_message().await.unwrap().unwrap();
        *seen.entry(index(message.payload())).or_default() += 1;
        message.finish(true).await.unwrap();
    }
    // The fast consumer stops here, with messages taken ahead (its pace was hundreds per
    // second at least). Its own successes stored, what is still leased was taken ahead.
    assert!(fast.queued_messages().await.unwrap().len() == (TOTAL - FIRST_TAKES) as usize);
    let started = Instant::now();
    let ahead: u64 = cluster
        .psql(
            "postgres",
            "SELECT count(*) FROM stopped.kv_queue WHERE lease IS NOT NULL",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(ahead > 0, "the fast consumer took no message ahead");
    // The other gets all the rest.
    let bound = Duration::from_secs(3);
    while seen.len() < TOTAL as usize {
        let message = tokio::time::timeout(bound, other.dequeue_next_message())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} messages stayed with the stopped consumer for {bound:?}",
                    TOTAL as usize - seen.len()
                )
            })
            .unwrap()
            .unwrap();
        *seen.entry(index(message.payload())).or_default() += 1;
        message.finish(true).await.unwrap();
    }
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert!(other.queued_messages().await.unwrap().is_empty());
    fast.close().await.unwrap();
    other.close().await.unwrap();
}

/// A success recorded just before its handle is dropped without `close` is still stored (the
/// finisher's work outlives the handle), so the message does not come back once its lease has
/// run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_just_before_the_handle_is_dropped_is_stored() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::at_test_epoch();
    let consumer = open_at(&cluster, "dropped", &clock).await;
    let other = open_at(&cluster, "dropped", &clock).await;
    consumer
        .atomic_write(message_write(b"done", &clock))
        .await
        .unwrap()
        .unwrap();
    let message = consumer.dequeue_next_message().await.unwrap().unwrap();
    message.finish(true).await.unwrap();
    drop(consumer);

    let stored = tokio::time::timeout(Duration::from_secs(5), async {
        while !other.queued_messages().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    stored
        .await
        .expect("the success recorded before the drop was stored");
    // Far past the lease: nothing comes back.
    clock.advance(Duration::from_secs(60));
    let again =
        tokio::time::timeout(Duration::from_millis(500), other.dequeue_next_message()).await;
    assert!(again.is_err(), "the finished message came back");
    other.close().await.unwrap();
}

//! Cancelled dequeues: a `dequeue_next_message` future dropped at any await point (a
//! `select!` with a timeout, a client that went away) must lose no message and park none.
//!
//! The engine may already have taken the message when the future is dropped; it must then put it
//! back, due at once, and — since no consumer ever saw it — without using up a retry of its
//! back-off schedule.
//!
//! Cancellation points are chosen at random: tiny timers, a count of polls (so engines whose
//! dequeue never waits on a timer are cut too), and now and then a generous wait so consumers make
//! progress. The seed is printed in every failure message; `KV_CANCEL_SEED` replays one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use open_deno_kv_model::{AtomicWrite, Backend, Enqueue, KvError, QueueMessageHandle, key};
use tokio::time::{Instant, timeout};

use super::{enqueue, finish, message, receive, shown};
use crate::cases::need;
use crate::support::*;
use crate::{Case, Env};

pub(super) fn cases() -> Vec<Case> {
    vec![
        need::QUEUES
            .case(
                "dequeues_cancelled_at_random_points_under_load_lose_no_message",
                dequeues_cancelled_at_random_points_under_load_lose_no_message,
            )
            .with_timeout(DELIVERY_BOUND + Duration::from_secs(30)),
        need::QUEUES
            .case(
                "cancelled_dequeues_use_up_no_retry",
                cancelled_dequeues_use_up_no_retry,
            )
            .with_timeout(DELIVERY_BOUND + Duration::from_secs(30)),
    ]
}

/// How many messages the producers enqueue under load.
const MESSAGES: usize = 200;
/// How many consumers cancel dequeues concurrently.
const CONSUMERS: usize = 3;
/// Every message must be finished within this much real time (the engines need well under a
/// second on an idle machine; this only proves that nothing is stuck).
const DELIVERY_BOUND: Duration = Duration::from_secs(20);

/// A small xorshift generator: the cases need cheap, replayable randomness, not quality.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The seed for this run: `KV_CANCEL_SEED` if set, otherwise taken from the time.
fn seed() -> u64 {
    if let Some(seed) = std::env::var("KV_CANCEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return seed;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u64::from(nanos) | 1
}

/// Where a dequeue is cut short.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// After this many polls of the dequeue (each followed by a yield to the runtime).
    AfterPolls(u32),
    /// When this timer fires.
    After(Duration),
}

impl Cut {
    fn random(rng: &mut Xorshift) -> Cut {
        match rng.below(10) {
            0..=3 => Cut::AfterPolls(u32::try_from(rng.below(6)).unwrap_or(0) + 1),
            4..=7 => Cut::After(Duration::from_micros(rng.below(3_000))),
            // Long enough for a dequeue to complete, so the consumers make progress.
            _ => Cut::After(Duration::from_millis(20 + rng.below(80))),
        }
    }
}

/// One dequeue, dropped at `cut` unless it completed first.
async fn dequeue_cut_at(
    kv: &dyn Backend,
    cut: Cut,
) -> Option<Result<Option<Box<dyn QueueMessageHandle>>, KvError>> {
    match cut {
        Cut::After(limit) => timeout(limit, kv.dequeue_next_message()).await.ok(),
        Cut::AfterPolls(polls) => {
            let dequeue = kv.dequeue_next_message();
            tokio::pin!(dequeue);
            let yields = async {
                for _ in 0..polls {
                    tokio::task::yield_now().await;
                }
            };
            tokio::select! {
                biased;
                got = &mut dequeue => Some(got),
                () = yields => None,
            }
        }
    }
}

/// Payload → how many times a consumer received it.
type Received = Arc<Mutex<BTreeMap<Vec<u8>, usize>>>;

fn count(received: &Received) -> usize {
    received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len()
}

/// Dequeues with random cuts until `done` is set, finishing every message it receives with
/// success. Returns how many dequeues it cut short.
async fn cancelling_consumer(
    kv: Arc<dyn Backend>,
    mut rng: Xorshift,
    received: Received,
    done: Arc<AtomicBool>,
    seed: u64,
) -> usize {
    let mut cut_short = 0;
    while !done.load(Ordering::Acquire) {
        match dequeue_cut_at(&*kv, Cut::random(&mut rng)).await {
            None => cut_short += 1,
            Some(Ok(Some(handle))) => {
                *received
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(handle.payload().to_vec())
                    .or_default() += 1;
                if let Err(e) = handle.finish(true).await {
                    panic!("finish(true) failed (seed {seed}): {e}");
                }
            }
            Some(Ok(None)) => panic!("dequeue returned None, as if the backend were closed"),
            Some(Err(e)) => panic!("dequeue failed (seed {seed}): {e}"),
        }
    }
    cut_short
}

/// Producers enqueue while consumers cut their dequeues short at random points, and a clock task
/// moves the manual clock so delayed messages fall due while dequeues wait on it. Every message
/// must be delivered within [`DELIVERY_BOUND`], to exactly one consumer (none failed, so none
/// may come back), and afterwards nothing is left in the queue: no message stays parked.
async fn dequeues_cancelled_at_random_points_under_load_lose_no_message(env: Env) {
    let seed = seed();
    let mut rng = Xorshift(seed);
    let received: Received = Arc::default();
    let done = Arc::new(AtomicBool::new(false));

    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let consumer = cancelling_consumer(
                env.kv.clone(),
                Xorshift(rng.next() | 1),
                received.clone(),
                done.clone(),
                seed,
            );
            tokio::spawn(consumer)
        })
        .collect();

    let clock_task = {
        let clock = env.clock().clone();
        let done = done.clone();
        tokio::spawn(async move {
            while !done.load(Ordering::Acquire) {
                clock.advance(Duration::from_millis(1));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };

    let mut expected = Vec::with_capacity(MESSAGES);
    let mut i = 0;
    while i < MESSAGES {
        // Writes of one to three messages, half of them due a few (manual) milliseconds later.
        let batch = usize::try_from(rng.below(3)).unwrap_or(0) + 1;
        let mut enqueues: Vec<Enqueue> = Vec::new();
        for _ in 0..batch.min(MESSAGES - i) {
            let text = format!("cancel-{i}");
            let mut m = message(&env, &text);
            if rng.below(2) == 0 {
                m.ready_at += chrono::TimeDelta::milliseconds(1 + rng.below(5).cast_signed());
            }
            expected.push(m.payload.clone());
            enqueues.push(m);
            i += 1;
        }
        commit(
            &*env.kv,
            AtomicWrite {
                enqueues,
                ..Default::default()
            },
        )
        .await;
        if rng.below(4) == 0 {
            tokio::time::sleep(Duration::from_micros(rng.below(2_000))).await;
        }
    }

    let started = Instant::now();
    while count(&received) < MESSAGES && started.elapsed() < DELIVERY_BOUND {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done.store(true, Ordering::Release);
    let mut cut_short = 0;
    for consumer in consumers {
        cut_short += consumer.await.expect("a consumer panicked");
    }
    clock_task.await.expect("the clock task");

    let received = received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let missing: Vec<String> = expected
        .iter()
        .filter(|p| !received.contains_key(*p))
        .map(|p| shown(p))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {MESSAGES} messages were not delivered within {DELIVERY_BOUND:?} \
         ({cut_short} dequeues cut short, seed {seed}), among them: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let twice: Vec<String> = received
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, n)| format!("{} ×{n}", shown(p)))
        .collect();
    assert!(
        twice.is_empty(),
        "messages finished with success came back (seed {seed}): {twice:?}"
    );
    assert_queue_is_empty(&env, seed).await;
}

/// After everything was finished, no message may remain, waiting or held. Listing the queue is
/// optional (a remote store may not offer it): without [`open_deno_kv_model::Capabilities::queue_inspection`]
/// only delivery, checked by the caller, is proved; with it, the listing must work.
async fn assert_queue_is_empty(env: &Env, seed: u64) {
    if !env.offered.capabilities.queue_inspection {
        return;
    }
    match env.kv.queued_messages().await {
        Ok(left) => assert!(
            left.is_empty(),
            "messages remain in the queue after all were finished (seed {seed}): {:?}",
            left.iter().map(|m| shown(&m.payload)).collect::<Vec<_>>()
        ),
        Err(e) => panic!("queued_messages failed although the backend reports it: {e}"),
    }
}

/// A message with no retry left (an empty back-off schedule) and a dead-letter key: dequeues
/// cut short many times must not count as failed deliveries — a consumer never saw the message —
/// so it is still delivered afterwards, and nothing is dead-lettered.
async fn cancelled_dequeues_use_up_no_retry(env: Env) {
    let seed = seed();
    let mut rng = Xorshift(seed);
    let dead_letter = key!["cancel", "dead letter"];
    let text = "no retries left";
    let mut m = message(&env, text);
    m.backoff_schedule = Some(Vec::new());
    m.keys_if_undelivered = vec![enc(&dead_letter)];
    let expected = m.payload.clone();
    // Writes in the background, so the engine's writer is busy and takes queue commands in
    // groups with other work, as under load.
    let stop_writing = Arc::new(AtomicBool::new(false));
    let writer = {
        let kv = env.kv.clone();
        let stop = stop_writing.clone();
        tokio::spawn(async move {
            let mut n = 0i64;
            while !stop.load(Ordering::Acquire) {
                set(
                    &*kv,
                    &key!["cancel", "load", n % 16],
                    open_deno_kv_model::KvValue::U64(0),
                )
                .await;
                n += 1;
            }
        })
    };

    let mut cut_short = 0;
    let mut delivered = None;
    // Cut dequeues short until one gets through; on an engine that takes the message on another
    // thread, many cuts land after the take, and each must put the message back untouched.
    for round in 0..400 {
        let cut = match rng.below(2) {
            0 => Cut::AfterPolls(u32::try_from(rng.below(4)).unwrap_or(0) + 1),
            _ => Cut::After(Duration::from_micros(rng.below(1_500))),
        };
        if round == 0 {
            enqueue(&*env.kv, m.clone()).await;
        }
        match dequeue_cut_at(&*env.kv, cut).await {
            None => cut_short += 1,
            Some(Ok(Some(handle))) => {
                delivered = Some(handle);
                break;
            }
            Some(Ok(None)) => panic!("dequeue returned None, as if the backend were closed"),
            Some(Err(e)) => panic!("dequeue failed (seed {seed}): {e}"),
        }
    }
    stop_writing.store(true, Ordering::Release);
    writer.await.expect("the background writer");
    let handle = match delivered {
        Some(handle) => handle,
        None => match timeout(DELIVERY_BOUND, env.kv.dequeue_next_message()).await {
            Ok(Ok(Some(handle))) => handle,
            Ok(Ok(None)) => panic!("dequeue returned None, as if the backend were closed"),
            Ok(Err(e)) => panic!("dequeue failed (seed {seed}): {e}"),
            Err(_) => {
                let parked = get(&*env.kv, &dead_letter).await;
                panic!(
                    "the message was not delivered within {DELIVERY_BOUND:?} after {cut_short} \
                     cancelled dequeues (seed {seed}); dead-lettered: {}",
                    parked.is_some()
                )
            }
        },
    };
    assert_eq!(
        shown(handle.payload()),
        shown(&expected),
        "the delivered payload (seed {seed}, {cut_short} cancelled dequeues)"
    );
    assert!(
        get(&*env.kv, &dead_letter).await.is_none(),
        "a cancelled dequeue was counted as a failed delivery: the message was dead-lettered \
         (seed {seed})"
    );
    finish(handle, true).await;
    // The message is gone for good once finished.
    enqueue(&*env.kv, message(&env, "after")).await;
    let next = receive(&*env.kv, &super::payload("after")).await;
    finish(next, true).await;
    assert_queue_is_empty(&env, seed).await;
}

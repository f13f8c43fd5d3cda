//! `GET /metrics` costs O(1) (issue 29, point 6): with 200,000 messages queued, 32 concurrent
//! scrapes each answer in milliseconds, report the depth exactly, and leave the process's memory
//! where it was. (A binary of its own, so that no other test's allocations move the memory
//! figures.) The bounds are generous: they only catch a scrape that reads every message (about
//! 0.5 s in a debug build here, 0.33 s of CPU and 240 MB in a release build with larger
//! payloads), where counting takes a few milliseconds.
//!
//! Run: `cargo test -p open-deno-kv-server --test metrics_cost -- --nocapture` (prints the
//! measured figures).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use common::*;
use open_deno_kv_model::{AtomicWrite, Enqueue};
use open_deno_kv_server::Databases;
use tokio::task::JoinSet;

const QUEUED: usize = 200_000;
/// Enqueues per atomic write (Deno's limit on mutations plus enqueues).
const PER_WRITE: usize = 1_000;
const SCRAPES: usize = 32;
const PAYLOAD_BYTES: usize = 256;

/// This process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// One scrape: (time to the whole answer, the queue depth it reports).
async fn scrape(running: &Running) -> (Duration, f64) {
    let started = Instant::now();
    let reply = send(
        &http1_client(),
        "GET",
        format!("http://{}/metrics", running.addr),
        &[],
        Vec::new(),
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(reply.status, 200, "{}", reply.text());
    let depth = reply
        .text()
        .lines()
        .find_map(|line| line.strip_prefix("kv_queue_depth{database=\"default\"} "))
        .unwrap_or_else(|| panic!("no queue depth in {}", reply.text()))
        .parse()
        .unwrap();
    (elapsed, depth)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapes_cost_the_same_with_200_000_messages_queued() {
    let mut config = config();
    config.metrics = true;
    // Scrapes carry no token, so each connection counts as unauthorized: let one address hold
    // all of them (32 by default, which the first scrape's connection would exceed).
    config.resources.max_unauthorized_per_address = 2 * SCRAPES;
    let running = start_with(config, Databases::new(memory())).await;
    let later = Utc::now() + chrono::Duration::days(1);
    for _ in 0..QUEUED / PER_WRITE {
        let write = AtomicWrite {
            enqueues: (0..PER_WRITE)
                .map(|_| Enqueue {
                    payload: vec![7; PAYLOAD_BYTES],
                    ready_at: later,
                    keys_if_undelivered: Vec::new(),
                    backoff_schedule: None,
                })
                .collect(),
            ..AtomicWrite::default()
        };
        running.backend.atomic_write(write).await.unwrap().unwrap();
    }
    // One scrape first, so that the server's own one-time allocations (the registry's series,
    // the connection pool) are not counted as the scrapes' memory.
    let (first, depth) = scrape(&running).await;
    assert_eq!(depth, QUEUED as f64);
    let before = resident_bytes();

    let mut scrapes = JoinSet::new();
    let running = std::sync::Arc::new(running);
    for _ in 0..SCRAPES {
        let running = running.clone();
        scrapes.spawn(async move { scrape(&running).await });
    }
    let mut times = Vec::new();
    while let Some(done) = scrapes.join_next().await {
        let (elapsed, depth) = done.unwrap();
        assert_eq!(depth, QUEUED as f64);
        times.push(elapsed);
    }
    let after = resident_bytes();
    times.sort();
    let grown_mb = after.saturating_sub(before) as f64 / 1e6;
    eprintln!(
        "metrics_cost: {QUEUED} messages queued; first scrape {first:?}; {SCRAPES} concurrent \
         scrapes: fastest {:?}, median {:?}, slowest {:?}; resident memory {:.1} MB before, \
         {:.1} MB after ({grown_mb:+.1} MB)",
        times[0],
        times[SCRAPES / 2],
        times[SCRAPES - 1],
        before as f64 / 1e6,
        after as f64 / 1e6,
    );
    for elapsed in [first, times[SCRAPES - 1]] {
        assert!(
            elapsed < Duration::from_millis(250),
            "a scrape took {elapsed:?} with {QUEUED} messages queued"
        );
    }
    assert!(
        grown_mb < 32.0,
        "{SCRAPES} scrapes grew resident memory by {grown_mb:.1} MB"
    );
    std::sync::Arc::into_inner(running)
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}

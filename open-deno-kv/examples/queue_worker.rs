//! A queue worker: jobs are enqueued (one with a delay, one atomically with a write), a listener
//! handles them with at-least-once delivery, and a job whose handler fails is retried after its
//! back-off. The worker stops when the store closes.
//!
//! ```text
//! cargo run -p open-deno-kv --example queue_worker
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use open_deno_kv::{EnqueueOptions, Json, Kv, ListenOptions, key};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u32,
    task: String,
}

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let dir = tempfile::tempdir().map_err(open_deno_kv::Error::storage)?;
    let kv = Kv::open(&dir.path().join("jobs.sqlite3").display().to_string()).await?;

    let job = |id, task: &str| {
        Json(Job {
            id,
            task: task.into(),
        })
    };
    let quick_retry = EnqueueOptions {
        backoff_schedule: Some(vec![200]),
        ..Default::default()
    };
    kv.enqueue(job(1, "send welcome email"), quick_retry.clone())
        .await?;
    kv.enqueue(job(2, "flaky: fails once"), quick_retry.clone())
        .await?;
    kv.enqueue(
        job(3, "delayed by 300 ms"),
        EnqueueOptions {
            delay: Duration::from_millis(300),
            ..Default::default()
        },
    )
    .await?;
    // Enqueued together with a write: the job exists only if the order does.
    let outcome = kv
        .atomic()
        .set(key!["orders", 4], 1u64)
        .enqueue(job(4, "ship order 4"), quick_retry)
        .commit()
        .await?;
    println!("order 4 and its job committed: {}", outcome.is_committed());

    let done = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(AtomicUsize::new(0));
    let flaky_failed = Arc::new(AtomicBool::new(false));
    let worker = {
        let (kv, done, attempts, flaky_failed) = (
            kv.clone(),
            done.clone(),
            attempts.clone(),
            flaky_failed.clone(),
        );
        tokio::spawn(async move {
            // One job at a time; a failed attempt is reported here (the default is a line on
            // standard error).
            let options = ListenOptions::default()
                .concurrency(1)
                .on_error(|failure| println!("{failure}; it will be retried"));
            kv.listen_queue_with(options, move |Json(job): Json<Job>| {
                let (done, attempts, flaky_failed) =
                    (done.clone(), attempts.clone(), flaky_failed.clone());
                async move {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    // The flaky job fails its first attempt; the queue delivers it again 200 ms
                    // later (its back-off schedule), and then it succeeds.
                    if job.task.starts_with("flaky") && !flaky_failed.swap(true, Ordering::SeqCst) {
                        return Err(open_deno_kv::Error::invalid_argument(format!(
                            "job {} failed",
                            job.id
                        )));
                    }
                    println!("job {} done: {}", job.id, job.task);
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), open_deno_kv::Error>(())
                }
            })
            .await
        })
    };

    for _ in 0..100 {
        if done.load(Ordering::SeqCst) == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kv.close().await?;
    worker.await.map_err(open_deno_kv::Error::storage)??;
    println!(
        "{} jobs done in {} attempts",
        done.load(Ordering::SeqCst),
        attempts.load(Ordering::SeqCst)
    );
    if done.load(Ordering::SeqCst) != 4 {
        return Err(open_deno_kv::Error::invalid_argument(
            "not every job was done",
        ));
    }
    Ok(())
}

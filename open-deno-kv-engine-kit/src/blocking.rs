//! Leaving the async executor for blocking storage work.

use crate::KvError;

/// Runs an engine's blocking work (a read, joining a writer thread) without stalling the async
/// executor. Every blocking engine (SQLite, redb) uses it, so they leave the executor alike.
///
/// - On tokio's multi-thread runtime: [`tokio::task::block_in_place`]. The current worker hands
///   its other tasks to another worker and runs the read itself, so a point get costs no thread
///   hop and no wake-up (a hop through `spawn_blocking` costs several times the read: see
///   open-deno-kv-sqlite's `examples/sqlite_bench.rs --diagnose`).
/// - On a current-thread runtime, where that is not allowed: tokio's blocking pool.
/// - Outside any tokio runtime (for example under `futures::executor::block_on`): inline, since
///   the caller is not on an async executor whose other tasks it could stall.
pub async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KvError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|handle| handle.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        Ok(_) => tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| KvError::internal(format!("the blocking task failed: {e}")))?,
        Err(_) => work(),
    }
}

/// The most entries a read may ask for and still run in place (see [`run_read`]): a scan of
/// Deno's default page (100) and a few point gets fit.
pub const IN_PLACE_READ_ENTRIES: usize = 256;

/// Runs an engine's blocking read of at most `max_entries` entries
/// ([`crate::SnapshotRead::max_entries`]) where it costs least.
///
/// A bounded read runs in place, on the caller's thread, whatever drives it: a point get or a
/// page from cached pages takes microseconds, less than any way of leaving the executor. On a
/// current-thread runtime the hop to tokio's blocking pool and back (two thread wake-ups) made
/// such reads several times slower than the storage itself; on a multi-thread runtime
/// [`tokio::task::block_in_place`] hands the worker's core to another thread at every call,
/// which under a server's load cost more in wake-ups than the reads (measured with `kv serve`,
/// see BENCHMARKS.md). The runtime's other tasks wait for that read, as they would for any
/// short computation. Larger reads go through [`run_blocking`], so a scan of thousands of
/// entries never stalls a worker. An engine should use this only for reads that do not wait on
/// locks in the common case (SQLite in WAL mode and redb readers never wait for the writer).
pub async fn run_read<T: Send + 'static>(
    max_entries: usize,
    work: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KvError> {
    if max_entries <= IN_PLACE_READ_ENTRIES {
        work()
    } else {
        run_blocking(work).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_id() -> Result<std::thread::ThreadId, KvError> {
        Ok(std::thread::current().id())
    }

    /// On a current-thread runtime a bounded read runs on the runtime's own thread (no hop to
    /// the blocking pool); a larger one goes to the pool, so it never stalls the runtime.
    #[test]
    fn a_bounded_read_runs_in_place_on_a_current_thread_runtime() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let here = std::thread::current().id();
        let (small, large) = runtime.block_on(async {
            let small = run_read(IN_PLACE_READ_ENTRIES, thread_id).await.unwrap();
            let large = run_read(IN_PLACE_READ_ENTRIES + 1, thread_id)
                .await
                .unwrap();
            (small, large)
        });
        assert_eq!(
            small, here,
            "a page of {IN_PLACE_READ_ENTRIES} entries runs in place"
        );
        assert_ne!(large, here, "a larger read goes to the blocking pool");
    }

    /// On a multi-thread runtime a bounded read runs in place too, without handing the worker
    /// to another thread (`block_in_place`): on a runtime of one worker, a task spawned just
    /// before cannot run until the read is over.
    #[test]
    fn a_bounded_read_keeps_its_worker_on_a_multi_thread_runtime() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::time::{Duration, Instant};

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let sibling_ran = Arc::new(AtomicBool::new(false));
        let seen = sibling_ran.clone();
        let during_read = runtime.block_on(async move {
            let reader = tokio::spawn(async move {
                let flag = seen.clone();
                let sibling = tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
                let during_read = run_read(1, move || {
                    // With the worker handed off, the sibling would run on another thread now.
                    let until = Instant::now() + Duration::from_secs(1);
                    while Instant::now() < until && !seen.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    Ok(seen.load(Ordering::SeqCst))
                })
                .await;
                sibling.await.unwrap();
                during_read
            });
            reader.await.unwrap().unwrap()
        });
        assert!(
            !during_read,
            "the sibling ran during the read: the worker was handed off"
        );
        assert!(sibling_ran.load(Ordering::SeqCst), "it runs after the read");
    }
}

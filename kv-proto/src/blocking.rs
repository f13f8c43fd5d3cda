//! Leaving the async executor for blocking storage work.

use crate::KvError;

/// Runs an engine's blocking work (a read, joining a writer thread) without stalling the async
/// executor. Every blocking engine (SQLite, redb) uses it, so they leave the executor alike.
///
/// - On tokio's multi-thread runtime: [`tokio::task::block_in_place`]. The current worker hands
///   its other tasks to another worker and runs the read itself, so a point get costs no thread
///   hop and no wake-up (a hop through `spawn_blocking` costs several times the read: see
///   kv-sqlite's `examples/sqlite_bench.rs --diagnose`).
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
            .map_err(|e| KvError::storage(std::io::Error::other(e.to_string())))?,
        Err(_) => work(),
    }
}

/// The most entries a read may ask for and still run in place on a current-thread runtime (see
/// [`run_read`]): a scan of Deno's default page (100) and a few point gets fit.
pub const IN_PLACE_READ_ENTRIES: usize = 256;

/// Runs an engine's blocking read of at most `max_entries` entries
/// ([`crate::SnapshotRead::max_entries`]) where it costs least.
///
/// As [`run_blocking`], except on a current-thread runtime (a Deno isolate, a small server, a
/// `flavor = "current_thread"` program), where a bounded read runs in place: a point get or a
/// page from cached pages takes microseconds, less than the hop to tokio's blocking pool and
/// back (two thread wake-ups), which made such reads several times slower than the storage
/// itself. The runtime's other tasks wait for that read, as they would for any short
/// computation. Larger reads still go to the blocking pool, so a scan of thousands of entries
/// never stalls the runtime. An engine should use this only for reads that do not wait on
/// locks in the common case (SQLite in WAL mode and redb readers never wait for the writer).
pub async fn run_read<T: Send + 'static>(
    max_entries: usize,
    work: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KvError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let current_thread = matches!(
        Handle::try_current().map(|handle| handle.runtime_flavor()),
        Ok(RuntimeFlavor::CurrentThread)
    );
    if current_thread && max_entries <= IN_PLACE_READ_ENTRIES {
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
}

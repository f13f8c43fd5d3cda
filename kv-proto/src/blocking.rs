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

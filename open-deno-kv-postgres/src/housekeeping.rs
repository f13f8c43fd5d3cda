//! The background work of a handle: the expiry sweep, the renewal of held messages' leases, the
//! return of prefetched messages nobody dequeued (see the `queue` module), and the pruning of
//! old commit records (see the `outcome` module).
//!
//! Expired entries are invisible to reads whether or not they were swept; the sweep only gives
//! their space back. It needs no version and no lock on the version row: it deletes rows that no
//! reader can see, `SKIP LOCKED` so that it never waits for a writer, and a writer that
//! meanwhile replaced an expired row keeps its row (the `DELETE` checks the expiry again).
//! Every handle sweeps; two sweeping at once skip each other's rows.

use std::sync::{Arc, Weak};
use std::time::Duration;

use deadpool_postgres::Pool;
use open_deno_kv_engine_kit::queue::MESSAGE_KEEPALIVE_INTERVAL;
use open_deno_kv_engine_kit::{Clock, KvError};
use tokio::task::JoinHandle;

use crate::codec;
use crate::error::pg;
use crate::outcome::{Pruner, SAMPLE_EVERY};
use crate::queue::{PREFETCH_HOLD, Queue};
use crate::reader::pooled;
use crate::sql::Sql;

/// How often expired entries are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The most rows one sweep statement deletes (the statement's `LIMIT`).
const SWEEP_BATCH: u64 = 1000;

/// Starts the housekeeping task of a handle; it stops when the queue is gone or when aborted.
pub(crate) fn start(
    pool: Pool,
    sql: Arc<Sql>,
    clock: Arc<dyn Clock>,
    queue: Weak<Queue>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut keepalive = tokio::time::interval(MESSAGE_KEEPALIVE_INTERVAL);
        let mut stale = tokio::time::interval(PREFETCH_HOLD / 2);
        let mut sample = tokio::time::interval(SAMPLE_EVERY);
        let mut pruner = Pruner::default();
        loop {
            // Failures are retried at the next tick: the sweep only reclaims space, and a lease
            // that could not be renewed is renewed at the next one, well before it runs out.
            tokio::select! {
                _ = sweep.tick() => {
                    let _ = sweep_expired(&pool, &sql, &*clock).await;
                }
                _ = sample.tick() => {
                    let _ = pruner.prune(&pool, &sql).await;
                }
                _ = keepalive.tick() => {
                    let Some(queue) = queue.upgrade() else { return };
                    let _ = queue.renew_leases().await;
                }
                _ = stale.tick() => {
                    let Some(queue) = queue.upgrade() else { return };
                    let _ = queue.release_stale().await;
                }
            }
        }
    })
}

/// Deletes every entry expired by now, a batch at a time.
pub(crate) async fn sweep_expired(
    pool: &Pool,
    sql: &Sql,
    clock: &dyn Clock,
) -> Result<(), KvError> {
    let client = pooled(pool).await?;
    let statement = client
        .prepare_cached(&sql.sweep_expired)
        .await
        .map_err(pg)?;
    loop {
        let now = codec::ms(clock.now());
        let deleted = client.execute(&statement, &[&now]).await.map_err(pg)?;
        if deleted < SWEEP_BATCH {
            return Ok(());
        }
    }
}

//! [`Checked`]: the one layer that turns any [`Engine`] into a [`Backend`].

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::watch;

use crate::change_log::{ChangeLogStatus, ChangeRecord};
use crate::optional::Optional;
use crate::queue::{QueueMessageHandle, QueuedMessage};
use crate::{
    AtomicWrite, Backend, Capabilities, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KeyRange, KvError, Limits, RangeCount, RangeWatchStream, ReadRangeOutput,
    Snapshot, SnapshotRead, Versionstamp, WatchStream,
};

/// An [`Engine`] behind the correctness layer: the [`Backend`] every engine of this workspace
/// hands out, as OpenDAL puts one correctness layer above all its services.
///
/// Every request crosses the layer in the same order, whatever the engine:
///
/// 1. **Closed?** After [`Backend::close`], reads, writes, watches, queue inspection and
///    integrity checks fail with [`KvError::Closed`] and dequeues return `Ok(None)` (a consumer
///    loop simply ends), all without calling the engine. A second close does nothing.
/// 2. **Offered?** An optional method whose [`Capabilities`] flag is off is refused with
///    [`KvError::Unsupported`]; on a handle reporting [`Capabilities::read_only`], writes and
///    dequeues are refused with [`KvError::ReadOnly`].
/// 3. **Within the limits?** [`Limits`] validate the request at the clock's `now` and hand the
///    engine a [`crate::Validated`] value, the only form it accepts.
///
/// The engine's own methods (a file path, a store) stay reachable through `Deref`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use open_deno_kv_engine_kit::{AtomicWrite, Backend, Checked, KvError};
/// # use open_deno_kv_engine_kit::{Capabilities, CommitResult, Engine, ReadRangeOutput};
/// # use open_deno_kv_engine_kit::{Limits, SystemClock, ValidatedRead, ValidatedWrite};
/// # struct Refuses;
/// # impl Engine for Refuses {
/// #     fn capabilities(&self) -> Capabilities { Capabilities::none() }
/// #     async fn snapshot_read(&self, _: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> { Ok(vec![]) }
/// #     async fn atomic_write(&self, _: ValidatedWrite) -> Result<Option<CommitResult>, KvError> { Ok(None) }
/// #     async fn close(&self) -> Result<(), KvError> { Ok(()) }
/// # }
/// # let engine = Refuses;
/// let kv = Checked::new(engine, Limits::deno(), std::sync::Arc::new(SystemClock));
/// kv.close().await.unwrap();
/// let write = kv.atomic_write(AtomicWrite::default()).await;
/// assert!(matches!(write, Err(KvError::Closed))); // the engine was not asked
/// assert!(matches!(kv.dequeue_next_message().await, Ok(None)));
/// # }
/// ```
pub struct Checked<E: Engine> {
    engine: E,
    limits: Limits,
    clock: Arc<dyn Clock>,
    closed: AtomicBool,
    /// Turns true at the close: the snapshot stream of every import still running through this
    /// handle then fails with [`KvError::Closed`], so the import rolls back instead of waiting
    /// for a stream that may never end.
    closing: watch::Sender<bool>,
}

impl<E: Engine> Checked<E> {
    /// Puts `engine` behind the layer, validating requests with `limits` at `clock`'s time.
    pub fn new(engine: E, limits: Limits, clock: Arc<dyn Clock>) -> Self {
        Checked {
            engine,
            limits,
            clock,
            closed: AtomicBool::new(false),
            closing: watch::Sender::new(false),
        }
    }

    /// The engine under the layer (also reachable through `Deref`).
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// The limits every request is validated against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether [`Backend::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn ensure_open(&self) -> Result<(), KvError> {
        if self.is_closed() {
            Err(KvError::Closed)
        } else {
            Ok(())
        }
    }

    /// Refuses `optional` when the engine does not offer it.
    fn ensure_offered(&self, optional: Optional) -> Result<(), KvError> {
        if optional.offered_by(self.engine.capabilities()) {
            Ok(())
        } else {
            Err(optional.refusal())
        }
    }

    fn ensure_writable(&self) -> Result<(), KvError> {
        if self.engine.capabilities().read_only {
            Err(KvError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

impl<E: Engine> Deref for Checked<E> {
    type Target = E;

    fn deref(&self) -> &E {
        &self.engine
    }
}

impl<E: Engine + fmt::Debug> fmt::Debug for Checked<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("engine", &self.engine)
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl<E: Engine> Drop for Checked<E> {
    /// A handle dropped without [`Backend::close`] lets its engine release what close would
    /// ([`Engine::close_on_drop`]); after a close (even one cancelled half-way) it does nothing.
    fn drop(&mut self) {
        if !*self.closed.get_mut() {
            self.engine.close_on_drop();
        }
    }
}

#[async_trait]
impl<E: Engine> Backend for Checked<E> {
    fn capabilities(&self) -> Capabilities {
        self.engine.capabilities()
    }

    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.ensure_open()?;
        let read = self.limits.accept_snapshot_read(read)?;
        self.engine.snapshot_read(read).await
    }

    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        self.ensure_open()?;
        self.ensure_writable()?;
        if write.mutations.iter().any(|m| m.range().is_some()) {
            self.ensure_offered(Optional::RangeDelete)?;
        }
        let write = self.limits.accept_atomic_write(write, self.clock.now())?;
        self.engine.atomic_write(write).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        if self.is_closed() {
            return Ok(None);
        }
        self.ensure_writable()?;
        self.ensure_offered(Optional::Queues)?;
        self.engine.dequeue_next_message().await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::QueueInspection)?;
        self.engine.queued_messages().await
    }

    async fn queue_depth(&self) -> Result<usize, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::QueueInspection)?;
        self.engine.queue_depth().await
    }

    fn watch(&self, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::Watch)?;
        let keys = self.limits.accept_watch(keys)?;
        self.engine.watch(keys)
    }

    async fn count_range(&self, range: KeyRange) -> Result<RangeCount, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::Count)?;
        let range = self.limits.accept_range(range)?;
        self.engine.count_range(range).await
    }

    fn watch_range(&self, range: KeyRange) -> Result<RangeWatchStream, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::WatchRange)?;
        let range = self.limits.accept_range(range)?;
        self.engine.watch_range(range)
    }

    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::Export)?;
        self.engine.export_snapshot().await
    }

    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        self.ensure_open()?;
        self.ensure_writable()?;
        self.ensure_offered(Optional::Import)?;
        crate::backup::check_version(snapshot.versionstamp)?;
        let snapshot = crate::backup::ordered_import(snapshot);
        let snapshot = cut_at_close(snapshot, self.closing.subscribe());
        self.engine.import_snapshot(snapshot).await
    }

    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        self.ensure_open()?;
        self.ensure_writable()?;
        self.ensure_offered(Optional::ChangeLog)?;
        let retention = retention
            .map(crate::change_log::check_retention)
            .transpose()?;
        self.engine.configure_change_log(retention).await
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::ChangeLog)?;
        self.engine.change_log_status().await
    }

    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::ChangeLog)?;
        let limit = limit.clamp(1, crate::change_log::MAX_READ);
        self.engine.read_change_log(after, limit).await
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        self.ensure_open()?;
        self.ensure_offered(Optional::IntegrityCheck)?;
        self.engine.check_integrity().await
    }

    /// Closes the engine once; later calls (and a second close) are answered by the layer.
    async fn close(&self) -> Result<(), KvError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.closing.send_replace(true);
        self.engine.close().await
    }
}

/// `snapshot` whose items end with [`KvError::Closed`] as soon as `closing` turns true (or its
/// handle is gone), even while the stream itself waits: an import cut so fails like one whose
/// stream failed, and commits nothing.
fn cut_at_close(snapshot: Snapshot, closing: watch::Receiver<bool>) -> Snapshot {
    let items = futures::stream::unfold(Some((snapshot.items, closing)), |state| async move {
        let (mut items, mut closing) = state?;
        let item = tokio::select! {
            biased;
            _ = closing.wait_for(|closed| *closed) => None,
            item = items.next() => Some(item),
        };
        match item {
            None => Some((Err(KvError::Closed), None)),
            Some(item) => item.map(|item| (item, Some((items, closing)))),
        }
    })
    .boxed();
    Snapshot { items, ..snapshot }
}

#[cfg(test)]
mod tests;

//! Snapshot export and import for engines whose storage blocks (SQLite, redb).
//!
//! An export holds a read transaction for as long as its stream is read, which may be minutes
//! for a large store: longer than any async task should block. So the blocking side runs on a
//! thread of its own and talks to the async side through a small bounded channel:
//!
//! - [`blocking_export`]: the thread opens the snapshot, reports its database and versionstamp
//!   ([`ExportSink::begin`]), and sends items ([`ExportSink::send`]) as the consumer takes them
//!   (at most [`CHANNEL_ITEMS`] wait in between, so memory stays bounded). When the consumer drops
//!   the stream, the next send fails with [`KvError::Closed`], the thread returns and its read
//!   transaction ends.
//! - [`Transfers`]: exports and imports as above, for an engine whose close must end them first
//!   (a file that can be opened by one handle at a time, which a running export or import would
//!   keep open): closing ends every export at its next send, even one waiting for a consumer
//!   that is not reading, and every import at its next item, even one waiting for the stream, and
//!   waits until their work has let go of the storage. An export's consumer then reads
//!   [`KvError::Closed`] after the items already sent, never a stream that looks complete; an
//!   import whose end had not been passed fails with [`KvError::Closed`] and commits nothing.
//! - [`blocking_import`]: the async side pumps the snapshot's stream into the channel, and the
//!   thread writes what it receives ([`ImportFeed`]) inside one write transaction. Only after the
//!   whole stream was passed does the feed report its end; if the async side is dropped before
//!   (or the stream fails), the feed yields an error, the thread's work fails and the engine rolls
//!   its transaction back. Dropping the import's future after the end was passed lets the thread
//!   finish its commit: the import then happened, whole.
//!
//! What a snapshot is (and the order rules of an import) is the model's, in
//! `open_deno_kv_model::backup`; it is named here too, so an engine finds every backup item under
//! one path.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};

mod import;

pub use import::{ImportRow, ImportWrites, import_each, import_each_async};
pub use open_deno_kv_model::backup::*;

use crate::{DatabaseId, KvError, Versionstamp};

/// Items in flight between the blocking thread and the async side.
pub const CHANNEL_ITEMS: usize = 256;

/// What [`ExportSink::begin`] reports: the database and the last commit of the snapshot.
type Header = (Option<DatabaseId>, Versionstamp);

/// Where the thread of [`blocking_export`] reports the snapshot's versionstamp and sends items.
pub struct ExportSink {
    versionstamp: Option<oneshot::Sender<Result<Header, KvError>>>,
    items: mpsc::Sender<Result<SnapshotItem, KvError>>,
    /// Turns true when the [`Transfers`] this export runs under close.
    stop: Option<watch::Receiver<bool>>,
}

impl ExportSink {
    /// Reports the snapshot's database (its identity, as read in the snapshot) and versionstamp,
    /// once the read snapshot is open: the export's future resolves with them. Call it before the
    /// first [`ExportSink::send`].
    pub fn begin(
        &mut self,
        database: Option<DatabaseId>,
        versionstamp: Versionstamp,
    ) -> Result<(), KvError> {
        let sender = self.versionstamp.take().ok_or_else(|| {
            KvError::invalid_argument("an export reported its versionstamp twice")
        })?;
        sender
            .send(Ok((database, versionstamp)))
            .map_err(|_| KvError::Closed)
    }

    /// Sends one item, waiting while the consumer is [`CHANNEL_ITEMS`] behind.
    /// [`KvError::Closed`] when the consumer dropped the stream, or when the [`Transfers`] this
    /// export runs under close (even while waiting): stop and return.
    pub fn send(&mut self, item: SnapshotItem) -> Result<(), KvError> {
        if self.versionstamp.is_some() {
            return Err(KvError::invalid_argument(
                "an export sent an item before its versionstamp",
            ));
        }
        let Some(stop) = self.stop.as_mut() else {
            return self
                .items
                .blocking_send(Ok(item))
                .map_err(|_| KvError::Closed);
        };
        if *stop.borrow() {
            return Err(KvError::Closed);
        }
        let item = match self.items.try_send(Ok(item)) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(KvError::Closed),
            Err(mpsc::error::TrySendError::Full(item)) => item,
        };
        // Wait for room, or for the close, whichever comes first. This thread is the export's
        // own, never a runtime's, so it may block on the wait.
        let items = &self.items;
        futures::executor::block_on(async move {
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => Err(KvError::Closed),
                permit = items.reserve() => match permit {
                    Ok(permit) => {
                        permit.send(item);
                        Ok(())
                    }
                    Err(_) => Err(KvError::Closed),
                },
            }
        })
    }

    /// Hands the work's failure to whoever waits: the export's future if it has not resolved
    /// yet, else the stream's consumer.
    fn fail(mut self, err: KvError) {
        match self.versionstamp.take() {
            Some(sender) => {
                let _ = sender.send(Err(err));
            }
            None => {
                let _ = self.items.blocking_send(Err(err));
            }
        }
    }
}

/// Runs `work` on a thread of its own and hands its snapshot out as a [`Snapshot`] (see the
/// module documentation). `work` opens one read snapshot, calls [`ExportSink::begin`] with its
/// versionstamp, then [`ExportSink::send`] for every entry in key order and every message; an
/// error it returns reaches the caller (before `begin`) or the stream's consumer (after).
///
/// Cancel-safe: dropping the future or the stream ends the thread at its next send.
pub async fn blocking_export<F>(work: F) -> Result<Snapshot, KvError>
where
    F: FnOnce(&mut ExportSink) -> Result<(), KvError> + Send + 'static,
{
    export_on_thread(work, None).await
}

/// The exports and imports of one open store, which its close ends (see the module
/// documentation): an engine runs each through [`Transfers::export`] or [`Transfers::import`] and
/// calls [`Transfers::close`] before it closes its storage. Clones share the same transfers.
#[derive(Clone)]
pub struct Transfers {
    inner: Arc<TransfersInner>,
}

struct TransfersInner {
    /// Transfers whose work still runs (holds the storage), and whether the store closed.
    state: Mutex<TransfersState>,
    /// Signalled when the last running transfer's work returns.
    idle: Condvar,
    /// Set to true by the close: every export's next send and every import's next item fail.
    stop: watch::Sender<bool>,
}

#[derive(Default)]
struct TransfersState {
    running: usize,
    closed: bool,
}

impl std::fmt::Debug for Transfers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("Transfers")
            .field("running", &state.running)
            .field("closed", &state.closed)
            .finish()
    }
}

impl Default for Transfers {
    fn default() -> Self {
        Transfers {
            inner: Arc::new(TransfersInner {
                state: Mutex::new(TransfersState::default()),
                idle: Condvar::new(),
                stop: watch::Sender::new(false),
            }),
        }
    }
}

impl Transfers {
    /// [`blocking_export`] that [`Transfers::close`] ends; [`KvError::Closed`] once it was called.
    pub async fn export<F>(&self, work: F) -> Result<Snapshot, KvError>
    where
        F: FnOnce(&mut ExportSink) -> Result<(), KvError> + Send + 'static,
    {
        let (running, stop) = self.begin()?;
        export_on_thread(
            move |sink| {
                let result = work(sink);
                // The work has let go of the storage; what is left is handing its end to the
                // consumer, which the close need not wait for.
                drop(running);
                result
            },
            Some(stop),
        )
        .await
    }

    /// [`blocking_import`] that [`Transfers::close`] ends: the feed then yields
    /// [`KvError::Closed`] (unless its end was already passed), so `work` commits nothing, and the
    /// close waits until `work` has returned. [`KvError::Closed`] once the close was called.
    pub async fn import<T, F>(&self, snapshot: Snapshot, work: F) -> Result<T, KvError>
    where
        T: Send + 'static,
        F: FnOnce(Versionstamp, &mut ImportFeed) -> Result<T, KvError> + Send + 'static,
    {
        let (running, stop) = self.begin()?;
        import_on_thread(
            snapshot,
            move |versionstamp, feed| {
                let result = work(versionstamp, feed);
                drop(running);
                result
            },
            Some(stop),
        )
        .await
    }

    /// Counts a transfer as running and subscribes it to the close, both under the lock: a close
    /// either refuses it or sees it running, and then its stop reaches it.
    fn begin(&self) -> Result<(RunningTransfer, watch::Receiver<bool>), KvError> {
        let mut state = self.state();
        if state.closed {
            return Err(KvError::Closed);
        }
        state.running += 1;
        let running = RunningTransfer {
            inner: self.inner.clone(),
        };
        Ok((running, self.inner.stop.subscribe()))
    }

    /// Ends every running export at its next send (one waiting for its consumer stops waiting)
    /// and every running import at its next item (one waiting for its stream stops waiting), and
    /// refuses later transfers, without waiting for their work to return (a `Drop` that must not
    /// block). Their work returns soon after: an import rolls back.
    pub fn stop(&self) {
        let mut state = self.state();
        state.closed = true;
        self.inner.stop.send_replace(true);
    }

    /// [`Transfers::stop`], then blocks until each running transfer's work has returned. Closing
    /// again is harmless.
    pub fn close(&self) {
        self.stop();
        let mut state = self.state();
        while state.running > 0 {
            state = self
                .inner
                .idle
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TransfersState> {
        // Two counters changed together under the lock: a panic cannot leave them half-set.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One transfer counted as running by its [`Transfers`] until dropped (also if its work panics).
struct RunningTransfer {
    inner: Arc<TransfersInner>,
}

impl Drop for RunningTransfer {
    fn drop(&mut self) {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.running -= 1;
        if state.running == 0 {
            self.inner.idle.notify_all();
        }
    }
}

/// [`blocking_export`], ended early once `stop` turns true.
async fn export_on_thread<F>(
    work: F,
    stop: Option<watch::Receiver<bool>>,
) -> Result<Snapshot, KvError>
where
    F: FnOnce(&mut ExportSink) -> Result<(), KvError> + Send + 'static,
{
    let (versionstamp_tx, versionstamp_rx) = oneshot::channel();
    let (items_tx, items_rx) = mpsc::channel(CHANNEL_ITEMS);
    let mut sink = ExportSink {
        versionstamp: Some(versionstamp_tx),
        items: items_tx,
        stop,
    };
    std::thread::Builder::new()
        .name("kv-export".into())
        .spawn(move || match work(&mut sink) {
            Ok(()) if sink.versionstamp.is_some() => sink.fail(KvError::invalid_argument(
                "an export ended without reporting its versionstamp",
            )),
            Ok(()) => {}
            Err(KvError::Closed) if sink.items.is_closed() => {}
            Err(err) => sink.fail(err),
        })
        .map_err(KvError::storage)?;
    let (database, versionstamp) = versionstamp_rx.await.map_err(|_| thread_gone("export"))??;
    Ok(snapshot_from_channel(
        SnapshotOrigin {
            database,
            versionstamp,
        },
        items_rx,
    ))
}

/// A snapshot of the database and commit `origin` names, whose items arrive on `items` (from an
/// export's thread or task), ending when its sender is dropped.
pub fn snapshot_from_channel(
    origin: SnapshotOrigin,
    items: mpsc::Receiver<Result<SnapshotItem, KvError>>,
) -> Snapshot {
    let items = futures::stream::unfold(items, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    Snapshot {
        database: origin.database,
        versionstamp: origin.versionstamp,
        items,
    }
}

/// A thread that ended without an answer (it panicked).
fn thread_gone(what: &str) -> KvError {
    KvError::internal(format!("the {what} thread stopped without an answer"))
}

/// What the async side of [`blocking_import`] passes to the thread.
enum Feed {
    Item(Result<SnapshotItem, KvError>),
    /// The whole stream was passed.
    End,
}

/// The items of an import, as the blocking thread of [`blocking_import`] receives them: an
/// iterator that yields each item, then `None` once the whole stream was passed, or an error if
/// the stream failed or the import was abandoned before its end (then the work must fail too, so
/// that nothing is committed).
pub struct ImportFeed {
    items: mpsc::Receiver<Feed>,
    ended: bool,
    /// Turns true when the [`Transfers`] this import runs under close.
    stop: Option<watch::Receiver<bool>>,
}

impl ImportFeed {
    /// The next message from the async side, or `Err(Closed)` once the [`Transfers`] this import
    /// runs under closed (also while waiting).
    fn receive(&mut self) -> Result<Option<Feed>, KvError> {
        let Some(stop) = self.stop.as_mut() else {
            return Ok(self.items.blocking_recv());
        };
        if *stop.borrow() {
            return Err(KvError::Closed);
        }
        // This thread is the import's own, never a runtime's, so it may block on the wait.
        let items = &mut self.items;
        futures::executor::block_on(async move {
            tokio::select! {
                biased;
                _ = stop.wait_for(|stopped| *stopped) => Err(KvError::Closed),
                feed = items.recv() => Ok(feed),
            }
        })
    }
}

impl Iterator for ImportFeed {
    type Item = Result<SnapshotItem, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        match self.receive() {
            Err(closed) => {
                self.ended = true;
                Some(Err(closed))
            }
            Ok(Some(Feed::Item(item))) => Some(item),
            Ok(Some(Feed::End)) => {
                self.ended = true;
                None
            }
            Ok(None) => {
                self.ended = true;
                Some(Err(KvError::invalid_argument(
                    "the import was abandoned before the end of its snapshot",
                )))
            }
        }
    }
}

/// Runs `work` on a thread of its own with the snapshot's versionstamp and its items (see the
/// module documentation): `work` writes them in one transaction, which it commits only after the
/// feed ended (`None`) and rolls back on any error the feed yields.
///
/// Cancel-safe: dropping the future before the whole stream was passed makes the feed fail, so
/// `work` commits nothing.
pub async fn blocking_import<T, F>(snapshot: Snapshot, work: F) -> Result<T, KvError>
where
    T: Send + 'static,
    F: FnOnce(Versionstamp, &mut ImportFeed) -> Result<T, KvError> + Send + 'static,
{
    import_on_thread(snapshot, work, None).await
}

/// [`blocking_import`], whose feed fails once `stop` turns true.
async fn import_on_thread<T, F>(
    snapshot: Snapshot,
    work: F,
    stop: Option<watch::Receiver<bool>>,
) -> Result<T, KvError>
where
    T: Send + 'static,
    F: FnOnce(Versionstamp, &mut ImportFeed) -> Result<T, KvError> + Send + 'static,
{
    let Snapshot {
        versionstamp,
        mut items,
        ..
    } = snapshot;
    let (feed_tx, feed_rx) = mpsc::channel(CHANNEL_ITEMS);
    let (done_tx, done_rx) = oneshot::channel();
    let mut feed = ImportFeed {
        items: feed_rx,
        ended: false,
        stop,
    };
    std::thread::Builder::new()
        .name("kv-import".into())
        .spawn(move || {
            let _ = done_tx.send(work(versionstamp, &mut feed));
        })
        .map_err(KvError::storage)?;
    let mut done_rx = done_rx;
    let mut passed_all = true;
    loop {
        let item = tokio::select! {
            biased;
            // The work ended before the stream did (it failed, or the close stopped it): its
            // answer, without waiting for a stream that may never yield again.
            done = &mut done_rx => return done.map_err(|_| thread_gone("import"))?,
            item = items.next() => item,
        };
        let Some(item) = item else { break };
        let failed = item.is_err();
        if feed_tx.send(Feed::Item(item)).await.is_err() || failed {
            // The thread stopped (its work failed), or the stream did and the thread is told.
            passed_all = false;
            break;
        }
    }
    if passed_all {
        // The thread may have stopped meanwhile; its answer below says why.
        let _ = feed_tx.send(Feed::End).await;
    }
    drop(feed_tx);
    done_rx.await.map_err(|_| thread_gone("import"))?
}

#[cfg(test)]
mod tests;

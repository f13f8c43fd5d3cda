//! Snapshot export and import for engines whose storage blocks (SQLite, redb).
//!
//! An export holds a read transaction for as long as its stream is read, which may be minutes
//! for a large store: longer than any async task should block. So the blocking side runs on a
//! thread of its own and talks to the async side through a small bounded channel:
//!
//! - [`blocking_export`]: the thread opens the snapshot, reports its versionstamp
//!   ([`ExportSink::begin`]), and sends items ([`ExportSink::send`]) as the consumer takes them
//!   (at most [`CHANNEL_ITEMS`] wait in between, so memory stays bounded). When the consumer drops
//!   the stream, the next send fails with [`KvError::Closed`], the thread returns and its read
//!   transaction ends.
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

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};

mod import;

pub use import::{ImportRow, ImportWrites, import_each, import_each_async};
pub use open_deno_kv_model::backup::*;

use crate::{KvError, Versionstamp};

/// Items in flight between the blocking thread and the async side.
pub const CHANNEL_ITEMS: usize = 256;

/// Where the thread of [`blocking_export`] reports the snapshot's versionstamp and sends items.
pub struct ExportSink {
    versionstamp: Option<oneshot::Sender<Result<Versionstamp, KvError>>>,
    items: mpsc::Sender<Result<SnapshotItem, KvError>>,
}

impl ExportSink {
    /// Reports the snapshot's versionstamp, once the read snapshot is open: the export's future
    /// resolves with it. Call it before the first [`ExportSink::send`].
    pub fn begin(&mut self, versionstamp: Versionstamp) -> Result<(), KvError> {
        let sender = self.versionstamp.take().ok_or_else(|| {
            KvError::invalid_argument("an export reported its versionstamp twice")
        })?;
        sender.send(Ok(versionstamp)).map_err(|_| KvError::Closed)
    }

    /// Sends one item, waiting while the consumer is [`CHANNEL_ITEMS`] behind.
    /// [`KvError::Closed`] when the consumer dropped the stream: stop and return.
    pub fn send(&mut self, item: SnapshotItem) -> Result<(), KvError> {
        if self.versionstamp.is_some() {
            return Err(KvError::invalid_argument(
                "an export sent an item before its versionstamp",
            ));
        }
        self.items
            .blocking_send(Ok(item))
            .map_err(|_| KvError::Closed)
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
    let (versionstamp_tx, versionstamp_rx) = oneshot::channel();
    let (items_tx, items_rx) = mpsc::channel(CHANNEL_ITEMS);
    let mut sink = ExportSink {
        versionstamp: Some(versionstamp_tx),
        items: items_tx,
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
    let versionstamp = versionstamp_rx.await.map_err(|_| thread_gone("export"))??;
    Ok(snapshot_from_channel(versionstamp, items_rx))
}

/// A snapshot whose items arrive on `items` (from an export's thread or task), ending when its
/// sender is dropped.
pub fn snapshot_from_channel(
    versionstamp: Versionstamp,
    items: mpsc::Receiver<Result<SnapshotItem, KvError>>,
) -> Snapshot {
    let items = futures::stream::unfold(items, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    Snapshot {
        versionstamp,
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
}

impl Iterator for ImportFeed {
    type Item = Result<SnapshotItem, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        match self.items.blocking_recv() {
            Some(Feed::Item(item)) => Some(item),
            Some(Feed::End) => {
                self.ended = true;
                None
            }
            None => {
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
    let Snapshot {
        versionstamp,
        mut items,
    } = snapshot;
    let (feed_tx, feed_rx) = mpsc::channel(CHANNEL_ITEMS);
    let (done_tx, done_rx) = oneshot::channel();
    let mut feed = ImportFeed {
        items: feed_rx,
        ended: false,
    };
    std::thread::Builder::new()
        .name("kv-import".into())
        .spawn(move || {
            let _ = done_tx.send(work(versionstamp, &mut feed));
        })
        .map_err(KvError::storage)?;
    let mut passed_all = true;
    while let Some(item) = items.next().await {
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

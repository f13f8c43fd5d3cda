//! The engine: a handle on one redb file (the file, its writer and its readers are shared by
//! every handle on it in the process), and what it answers to the [`Checked`] layer above it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};

use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KvError, QueueMessageHandle, QueuedMessage, RangeCount, RangeWatchStream,
    ReadRangeOutput, Snapshot, ValidatedRange, ValidatedRead, ValidatedWatch, ValidatedWrite,
    Versionstamp, WatchStream, blocking_range_watch_stream, blocking_watch_stream,
};
use open_deno_kv_engine_kit::{run_blocking, run_read};

use open_deno_kv_engine_kit::FileEngine;
use open_deno_kv_engine_kit::backup::Transfers;

use crate::file::{FileStorage, OpenStorage};
use crate::options::RedbOptions;
use crate::reader::ReadTime;
use crate::store::Shared;
use crate::{backup, change_log, consumer, integrity, reader, store};

/// A handle on a Deno KV redb file: the engine, handed out behind open-deno-kv-engine-kit's [`Checked`] layer
/// (which checks limits, the closed state and read-only refusals). Share it as
/// `Arc<dyn Backend>`; open more handles on the same path freely (they share the open file).
#[derive(Debug)]
pub struct RedbBackend {
    path: PathBuf,
    /// The clock of this handle's reads, writes and queue operations.
    clock: Arc<dyn Clock>,
    shared: Arc<Shared>,
    /// This handle's number: messages it hands out are failed when it closes.
    owner: u64,
    /// This handle's watchers and waiting dequeues; closed with the handle.
    signal: Arc<ChangeSignal>,
    /// This handle's running exports and imports, which hold the file: closing the handle ends
    /// them first.
    transfers: Transfers,
}

impl FileEngine for RedbBackend {
    type Options = RedbOptions;

    /// Opens (creating if needed) the database at `path`.
    ///
    /// A new file is initialized; an existing open-deno-kv-redb file is reopened with everything in it, and
    /// messages a previous process left in flight are requeued. A redb file written by something
    /// else ([`KvError::Corrupt`]), a file that is not a redb file at all ([`KvError::Corrupt`]),
    /// or one from a newer version of this crate ([`KvError::Storage`] with
    /// [`RedbError::SchemaTooNew`]) is refused without being modified. Blocks while the file is
    /// opened.
    fn open_at(path: &Path, options: RedbOptions) -> Result<Checked<Self>, KvError> {
        Self::open_with_storage(path, options, Arc::new(FileStorage))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl RedbBackend {
    /// [`FileEngine::open_with`], with the file opened (and reopened) through `storage`.
    pub(crate) fn open_with_storage(
        path: &Path,
        options: RedbOptions,
        storage: Arc<dyn OpenStorage>,
    ) -> Result<Checked<Self>, KvError> {
        let path = path.to_path_buf();
        let (shared, owner) = store::acquire(&path, &options, storage)?;
        let signal = Arc::new(ChangeSignal::new());
        shared.notifier.register(&signal);
        let engine = RedbBackend {
            path,
            clock: options.clock.clone(),
            shared,
            owner,
            signal,
            transfers: Transfers::default(),
        };
        Ok(Checked::new(engine, options.limits, options.clock))
    }
}

impl Engine for RedbBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::durable_store(self.shared.is_read_only()).with_change_log(true)
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let mut time = ReadTime::new(self.clock.clone());
        let shared = self.shared.clone();
        let max_entries = read.max_entries();
        let ranges = read.into_inner().ranges;
        run_read(max_entries, move || {
            shared.with_entries(|entries| reader::read_ranges(entries, ranges, &mut time))
        })
        .await
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        let now = self.clock.now();
        self.shared.writer()?.write(write, now).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        consumer::next_message(&self.shared, self.owner, &self.clock, &self.signal).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        let now = self.clock.now();
        let shared = self.shared.clone();
        run_blocking(move || shared.with_db(|db| reader::queued_messages(db, now))).await
    }

    /// The lengths redb keeps for the two queue tables: nothing is read.
    async fn queue_depth(&self) -> Result<usize, KvError> {
        let shared = self.shared.clone();
        run_blocking(move || shared.with_db(reader::queue_depth)).await
    }

    /// Every table read and every record decoded, from one snapshot (see the `integrity`
    /// module for what redb's page checksums add, and when).
    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        let shared = self.shared.clone();
        run_blocking(move || shared.with_db(integrity::check)).await
    }

    /// One read transaction holding a known commit (see the `backup` module). The stream is
    /// fused: polled again after its end it ends again (open-deno-kv-model's `Replay::over`
    /// polls a backup's stream once more after its last entry when it holds no message).
    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        let snapshot =
            backup::export(&self.transfers, self.shared.clone(), self.clock.now()).await?;
        Ok(Snapshot {
            items: snapshot.items.fuse().boxed(),
            ..snapshot
        })
    }

    /// One write transaction beside the writer, which continues numbering above the
    /// snapshot (see the `backup` module); then every watcher and consumer looks again.
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        let summary = backup::import(&self.transfers, self.shared.clone(), snapshot).await?;
        self.shared.notifier.notify_everything();
        Ok(summary)
    }

    /// A command of the file's writer (see the `change_log` module), so that it takes effect
    /// between two commits.
    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        self.shared.writer()?.configure_log(retention).await
    }

    /// One read transaction (see the `change_log` module).
    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        let shared = self.shared.clone();
        run_blocking(move || shared.with_db(change_log::status)).await
    }

    /// One read transaction (see the `change_log` module).
    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        let shared = self.shared.clone();
        run_blocking(move || shared.with_db(|db| change_log::read(db, after, limit))).await
    }

    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        let (shared, clock) = (self.shared.clone(), self.clock.clone());
        let read = move |keys: &[Vec<u8>]| {
            let mut time = ReadTime::new(clock.clone());
            shared.with_entries(|entries| reader::read_watched(entries, keys, &mut time))
        };
        let (keys, clock) = (keys.into_inner(), self.clock.clone());
        Ok(blocking_watch_stream(keys, &self.signal, clock, read))
    }

    async fn count_range(&self, range: ValidatedRange) -> Result<RangeCount, KvError> {
        let mut time = ReadTime::new(self.clock.clone());
        let shared = self.shared.clone();
        run_blocking(move || {
            shared.with_entries(|entries| reader::count_range(entries, &range, &mut time))
        })
        .await
    }

    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        let (shared, clock) = (self.shared.clone(), self.clock.clone());
        let read = move |keys: &[Vec<u8>]| {
            let mut time = ReadTime::new(clock.clone());
            shared.with_entries(|entries| reader::read_watched(entries, keys, &mut time))
        };
        Ok(blocking_range_watch_stream(range, &self.signal, read))
    }

    /// Closes this handle: its watch streams end, its waiting dequeues return `None`, and the
    /// messages it handed out and that are not finished count as failed deliveries (they are
    /// retried). The last handle on a file also syncs everything and closes the file.
    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
        // First: an import holds redb's one write transaction, which the release below waits for.
        let transfers = self.transfers.clone();
        run_blocking(move || {
            transfers.close();
            Ok(())
        })
        .await?;
        let released = match self.shared.writer() {
            Ok(writer) => match writer.release(self.owner, self.clock.now()).await {
                Err(KvError::Closed) => Ok(()),
                other => other,
            },
            Err(_) => Ok(()),
        };
        let shared = self.shared.clone();
        let closed = run_blocking(move || store::release(&shared)).await;
        released.and(closed)
    }

    /// A handle dropped without [`open_deno_kv_engine_kit::Backend::close`] is closed here (without waiting for
    /// the release of its messages; the last handle still waits for the file to close, so a
    /// reopen right after the drop finds it free).
    fn close_on_drop(&self) {
        self.signal.close();
        self.transfers.close();
        if let Ok(writer) = self.shared.writer() {
            writer.release_in_background(self.owner, self.clock.now());
        }
        let _ = store::release(&self.shared);
    }
}

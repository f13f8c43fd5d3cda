//! The engine: a handle on one SQLite file, its writer and its readers, and what it answers to
//! the [`Checked`] layer above it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::backup::Transfers;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::committer::SettleAtNow;
use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KvError, Notifier, QueueMessageHandle, QueuedMessage, RangeCount,
    RangeWatchStream, ReadRangeOutput, Snapshot, ValidatedRange, ValidatedRead, ValidatedWatch,
    ValidatedWrite, Versionstamp, WatchStream, blocking_range_watch_stream, blocking_watch_stream,
};

use crate::options::SqliteOptions;
use crate::reader::ReaderPool;
use crate::writer::Writer;
use crate::{backup, change_log, schema, store, writer};
use open_deno_kv_engine_kit::FileEngine;
use open_deno_kv_engine_kit::{run_blocking, run_read};

/// A handle on a Deno KV SQLite file: the engine, handed out behind open-deno-kv-engine-kit's [`Checked`]
/// layer (which checks limits, the closed state and read-only refusals). Several handles, in one
/// process or several, may share a file.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    read_only: bool,
    readers: Arc<ReaderPool>,
    writer: Option<Arc<Writer>>,
    /// Wakes this handle's watches and queue consumers after its writer's commits.
    notifier: Arc<Notifier>,
    signal: Arc<ChangeSignal>,
    /// This handle's running imports, which hold the database's write lock: closing the handle
    /// ends them first. (Its exports read on connections of their own, which hold no lock a
    /// writer or a reopen waits for, and outlive the close.)
    transfers: Transfers,
}

impl FileEngine for SqliteBackend {
    type Options = SqliteOptions;

    /// Opens the database at `path`. A writable open creates the file and migrates it to Deno's
    /// current layout; a file with a newer layout is refused untouched.
    fn open_at(path: &Path, options: SqliteOptions) -> Result<Checked<Self>, KvError> {
        let SqliteOptions {
            clock,
            limits,
            read_only,
            durability,
        } = options;
        let path = path.to_path_buf();
        let signal = Arc::new(ChangeSignal::new());
        let notifier = Arc::new(Notifier::new());
        notifier.register(&signal);
        let writer = if read_only {
            let conn = store::open_connection(&path, true)?;
            schema::check_readable(&conn)?;
            None
        } else {
            let writer = writer::start(&path, durability, clock.clone(), notifier.clone())?;
            Some(Arc::new(writer))
        };
        let readers = Arc::new(ReaderPool::new(path.clone(), read_only));
        let engine = SqliteBackend {
            path,
            clock: clock.clone(),
            read_only,
            readers,
            writer,
            notifier,
            signal,
            transfers: Transfers::default(),
        };
        Ok(Checked::new(engine, limits, clock))
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl SqliteBackend {
    /// The writer; a read-only handle has none (the layer refuses its writes before this).
    fn writer(&self) -> Result<&Arc<Writer>, KvError> {
        self.writer.as_ref().ok_or(KvError::ReadOnly)
    }
}

impl Engine for SqliteBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::durable_store(self.read_only).with_change_log(true)
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let now_ms = self.clock.now_ms();
        let readers = self.readers.clone();
        run_read(read.max_entries(), move || {
            readers.read(&read.ranges, now_ms)
        })
        .await
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        self.writer()?.write(write, self.clock.now()).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let (writer, clock) = (self.writer()?, &self.clock);
        let engine = Arc::new(SettleAtNow::new(writer.clone(), clock.clone()));
        (writer.next_delivery(0, engine, &self.notifier, &**clock, &self.signal)).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        let now_ms = self.clock.now_ms();
        let readers = self.readers.clone();
        run_blocking(move || readers.queued_messages(now_ms)).await
    }

    /// SQLite counts the rows of `queue` and `queue_running`; no message is read out.
    async fn queue_depth(&self) -> Result<usize, KvError> {
        let readers = self.readers.clone();
        run_blocking(move || readers.queue_depth()).await
    }

    /// SQLite's `integrity_check`, then every entry and queued message decoded.
    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        let readers = self.readers.clone();
        run_blocking(move || readers.check_integrity()).await
    }

    /// One read transaction on a connection of its own (see the `backup` module).
    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        backup::export(self.path.clone(), self.read_only, self.clock.now()).await
    }

    /// One write transaction on a connection of its own, then every watcher and consumer of
    /// this handle looks again (see the `backup` module).
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        let summary = backup::import(&self.transfers, self.path.clone(), snapshot).await?;
        self.notifier.notify_everything();
        Ok(summary)
    }

    /// On a connection of its own (see the `change_log` module); the writer sees the switch
    /// at its next group.
    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        let path = self.path.clone();
        run_blocking(move || change_log::configure(&path, retention)).await
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        let (path, read_only) = (self.path.clone(), self.read_only);
        run_blocking(move || change_log::status(&path, read_only)).await
    }

    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        let (path, read_only) = (self.path.clone(), self.read_only);
        run_blocking(move || change_log::read(&path, read_only, after, limit)).await
    }

    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        let (readers, clock) = (self.readers.clone(), self.clock.clone());
        let read = move |keys: &[Vec<u8>]| readers.read_watched(keys, clock.now_ms());
        let (keys, clock) = (keys.into_inner(), self.clock.clone());
        Ok(blocking_watch_stream(keys, &self.signal, clock, read))
    }

    async fn count_range(&self, range: ValidatedRange) -> Result<RangeCount, KvError> {
        let (readers, now_ms) = (self.readers.clone(), self.clock.now_ms());
        run_blocking(move || readers.count_range(&range, now_ms)).await
    }

    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        let (readers, clock) = (self.readers.clone(), self.clock.clone());
        let read = move |keys: &[Vec<u8>]| readers.read_watched(keys, clock.now_ms());
        Ok(blocking_range_watch_stream(range, &self.signal, read))
    }

    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
        let transfers = self.transfers.clone();
        let writer = self.writer.clone();
        run_blocking(move || {
            // An import holds the write lock: ended first, it rolls back and lets go of it.
            transfers.close();
            writer.map_or(Ok(()), |writer| writer.stop())
        })
        .await
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        self.signal.close();
        self.transfers.stop();
        if let Some(writer) = &self.writer {
            writer.stop_in_background();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Reads choose how to leave the executor by the runtime they run on (see `run_blocking`);
    //! the conformance suite covers the multi-thread runtime, these cover the other two.

    use open_deno_kv_engine_kit::{
        AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
    };

    use super::*;

    /// Writes one key, reads it back with a get and a list, and closes.
    async fn write_then_read(path: &Path) -> Result<(), KvError> {
        let kv = SqliteBackend::open(path)?;
        let k = encode_key(&key!["runtime", 1])?;
        let write = AtomicWrite {
            mutations: vec![Mutation::set(k.clone(), KvValue::U64(7))],
            ..Default::default()
        };
        assert!(kv.atomic_write(write).await?.is_some());
        let list = ReadRange::prefix(&key!["runtime"], 10)?;
        let read = SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(k.clone()), list],
            ..Default::default()
        };
        let out = kv.snapshot_read(read).await?;
        for range in &out {
            assert_eq!(range.entries.len(), 1);
            assert_eq!(range.entries[0].key, k);
            assert_eq!(range.entries[0].value, KvValue::U64(7));
        }
        kv.close().await
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_work_on_a_current_thread_runtime() -> Result<(), KvError> {
        let dir = tempfile::tempdir().map_err(KvError::storage)?;
        write_then_read(&dir.path().join("kv.sqlite3")).await
    }

    #[test]
    fn reads_work_outside_any_tokio_runtime() -> Result<(), KvError> {
        let dir = tempfile::tempdir().map_err(KvError::storage)?;
        futures::executor::block_on(write_then_read(&dir.path().join("kv.sqlite3")))
    }
}

//! # open-deno-kv-sqlite — the reference Deno KV backend, file-compatible with Deno
//!
//! Stores data in a SQLite file with exactly the layout Deno 2.9 writes (`Deno.openKv(path)`), so
//! Deno and this crate open each other's files: same tables, migrations, encodings, versionstamps,
//! expiry and queue rows, WAL journal.
//!
//! How it works ([`SqliteBackend`] is the engine; its constructors hand it out behind open-deno-kv-engine-kit's
//! [`Checked`] layer, which answers for the closed state, limits and read-only refusals):
//! - **Writes** go through one write connection per handle and open-deno-kv-engine-kit's group committer: a
//!   write that finds it idle commits on its caller's thread, and writes that arrive meanwhile
//!   share the next SQLite transaction and fsync (group commit, no fixed wait). Each write runs in
//!   its own savepoint, so a failed check or a bad mutation rolls back only that write. Deno's
//!   rules come from open-deno-kv-model's write path.
//! - **Reads** use a pool of read connections and, up to 256 entries, run on the caller's thread
//!   (open-deno-kv-engine-kit's `run_read`) rather than hopping to another thread; a get is an equality
//!   lookup. In WAL mode readers never block the writer and see a consistent
//!   snapshot.
//! - **Queues** use Deno's `queue` / `queue_running` tables: a delivered message holds a deadline
//!   renewed while its consumer lives; messages of a crashed consumer are requeued when the
//!   deadline passes and at open.
//! - **Across processes**: the writer notices other processes' commits (SQLite's data version) and
//!   wakes this handle's watches and queue consumers, which Deno's own backend does not do.
//! - **Busy**: another process holding the write lock is waited for with retries and back-off;
//!   "database is locked" never reaches the caller.
//!
//! Reads and writes work from any executor (or none); queue consumers and watches wait on tokio
//! timers and need a tokio runtime.
//!
//! Durability is explicit: [`Durability::Full`] (the default) syncs every commit group, so an
//! acknowledged commit survives a crash of the process and of the machine;
//! [`Durability::Process`] survives a process crash only, and is faster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_engine_kit::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation};
//! use open_deno_kv_sqlite::{FileEngine, SqliteBackend};
//! let kv = SqliteBackend::open("kv.sqlite3")?;
//! let write = AtomicWrite {
//!     mutations: vec![Mutation::set(encode_key(&key!["hello"])?, KvValue::Bytes(b"world".to_vec()))],
//!     ..Default::default()
//! };
//! kv.atomic_write(write).await?;
//! kv.close().await?;
//! # Ok(()) }
//! ```

mod backup;
mod change_log;
mod integrity;
mod messages;
mod reader;
mod schema;
mod store;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::committer::SettleAtNow;
use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KvError, Limits, Notifier, QueueMessageHandle, QueuedMessage, RangeCount,
    RangeWatchStream, ReadRangeOutput, Snapshot, SystemClock, ValidatedRange, ValidatedRead,
    ValidatedWatch, ValidatedWrite, Versionstamp, WatchStream, blocking_range_watch_stream,
    blocking_watch_stream,
};
use thiserror::Error;

use crate::reader::ReaderPool;
use crate::writer::Writer;
use open_deno_kv_engine_kit::{run_blocking, run_read};

/// The trait [`SqliteBackend`]'s `open`, `open_with` and `path` come from: bring it into scope
/// (`use open_deno_kv_sqlite::FileEngine;`) to call them.
pub use open_deno_kv_engine_kit::FileEngine;

/// Why a database could not be opened or used.
#[derive(Debug, Error)]
pub enum SqliteError {
    /// SQLite itself failed (I/O, corruption, locking after every retry).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file was written by a newer version of the layout; it is left untouched.
    #[error(transparent)]
    SchemaTooNew(#[from] open_deno_kv_engine_kit::SchemaTooNew),
    /// A read-only open of a file that has not been migrated to the current layout.
    #[error(
        "the database is at schema version {found} and needs migrating to {supported}; open it writable once"
    )]
    NeedsMigration {
        /// The file's migration version.
        found: i64,
        /// The version required.
        supported: i64,
    },
    /// The file is a SQLite database, but not a Deno KV one.
    #[error("not a Deno KV database: {reason}")]
    NotDenoKv {
        /// What gave it away.
        reason: String,
    },
    /// A read-only open of a WAL-mode file whose WAL holds commits, in a directory where SQLite
    /// cannot create the WAL index (`-shm`) it needs to read them.
    #[error(
        "cannot read {} read-only: its write-ahead log holds commits and SQLite cannot create the \
         log's index (-shm) beside it (read-only directory); open it once where it can be written \
         (or by a process that may write the directory) to checkpoint the log",
        path.display()
    )]
    WalNeedsWritableDirectory {
        /// The database file.
        path: PathBuf,
    },
    /// A read-only open that needs to name the file as an immutable SQLite URI and cannot.
    #[error("cannot open {} read-only as immutable: {reason}", path.display())]
    ImmutablePath {
        /// The database file.
        path: PathBuf,
        /// Why the path cannot be named.
        reason: String,
    },
    /// A background thread could not be started.
    #[error("cannot start the writer thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl From<SqliteError> for KvError {
    fn from(err: SqliteError) -> Self {
        match err {
            SqliteError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::NotADatabase
                    || e.code == rusqlite::ErrorCode::DatabaseCorrupt =>
            {
                KvError::Corrupt {
                    message: err.to_string(),
                }
            }
            SqliteError::NotDenoKv { .. } => KvError::Corrupt {
                message: err.to_string(),
            },
            other => KvError::storage(other),
        }
    }
}

/// How hard a commit is pushed to disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: every commit group with a write is synced; survives a machine
    /// crash. Queue bookkeeping (takes and settlements without a write) is committed with
    /// `synchronous = NORMAL` and synced by the next synced commit or within a second: a
    /// machine crash before then delivers the message again (`open_deno_kv_engine_kit::queue`, "Queue
    /// bookkeeping").
    #[default]
    Full,
    /// `synchronous = NORMAL` in WAL mode: survives a process crash; a machine crash may lose the
    /// last commits (never corrupts).
    Process,
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The clock expiry and queue times are read from.
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// Open without writing (no migration, no writer thread; writes fail with
    /// [`KvError::ReadOnly`]).
    pub read_only: bool,
    /// See [`Durability`].
    pub durability: Durability,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            read_only: false,
            durability: Durability::Full,
        }
    }
}

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
        let summary = backup::import(self.path.clone(), snapshot).await?;
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
        Ok(blocking_range_watch_stream(
            range.into_inner(),
            &self.signal,
            read,
        ))
    }

    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
        match &self.writer {
            Some(writer) => {
                let writer = writer.clone();
                run_blocking(move || writer.stop()).await
            }
            None => Ok(()),
        }
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        self.signal.close();
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

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

//! # open-deno-kv-redb — a pure-Rust, durable Deno KV backend on redb
//!
//! Stores Deno KV data in one [redb](https://www.redb.org) file: no C code, no SQLite. Every rule
//! of Deno KV comes from open-deno-kv-model ([`Limits`] validation, [`open_deno_kv_engine_kit::apply_atomic_write`], the
//! queue retry rule); this crate only stores, orders and commits.
//!
//! How it works:
//! - **Tables** (see the `schema` module): entries by encoded key (value, encoding, versionstamp,
//!   expiry); an expiry index by (expiry time, key) that sweeps walk in time order; the queue as
//!   ready messages by (ready time, id) and running messages by id, with their deadline; and a
//!   metadata table with the schema version and the last versionstamp. A file with a newer schema
//!   version, or one that is not a open-deno-kv-redb file, is refused untouched.
//! - **Writes** go through one writer per file, which commits every write waiting in one redb
//!   write transaction — one commit and, with [`Durability::Immediate`], one fsync for the group,
//!   with no timer to wait for (group commit). The writer has no thread of its own on the hot
//!   path: a write that finds it idle is committed by its caller's thread, and writes that arrive
//!   meanwhile are committed together by that leader or by a standby thread it hands over to
//!   (see the `writer` module). Each write is staged in an
//!   overlay and applied only if its checks pass and its mutations are valid, so a failed or
//!   refused write in a group leaves no trace and does not affect the others. Versionstamps are
//!   handed out in commit order and strictly increase, across reopens too.
//! - **Reads** are redb read transactions (MVCC snapshots): they never block the writer, and all
//!   ranges of one read come from one snapshot. Reads between two commits share one snapshot
//!   (the writer drops it after each commit, before answering), which saves a point read the
//!   cost of starting a transaction. A read of up to 256 entries runs in place on the
//!   caller's thread (open-deno-kv-engine-kit's `run_read`: no thread hop, no hand-off of the worker); a larger
//!   one leaves the executor.
//! - **Expiry** is never visible after its time: reads filter with the injected [`Clock`], and
//!   the writer also deletes due entries through the expiry index.
//! - **Queues** deliver at least once, in ready-time order, with open-deno-kv-model's back-off and
//!   dead-letter rule. A message handed out and not finished is retried when its handle is
//!   dropped or closed, and a message a crashed process held is requeued when the file is next
//!   opened.
//! - **Change log** (opt-in, for point-in-time restores; see `open_deno_kv_engine_kit::change_log`):
//!   switched on or off through the writer and stored in the file, so every later handle keeps
//!   it; while on, every commit stores its record in its own transaction, and the writer prunes
//!   records past the retention (see the `change_log` module for the layout).
//! - **Watch** uses open-deno-kv-engine-kit's [`ChangeSignal`] and [`watch_stream`].
//! - **One process, many handles.** redb lets one process at a time open a file. Handles opened
//!   in this process on the same path share one open file, one writer and one queue (they see
//!   each other's commits, watches and messages); the file is closed when the last handle closes.
//!   Another process opening the file gets an "already open in another process" error.
//!
//! Durability is explicit, see [`Durability`]: [`Durability::Immediate`] (the default) syncs
//! every commit group before acknowledging it; [`Durability::Deferred`] acknowledges commits
//! before they are synced and syncs at least once a second.
//!
//! ```no_run
//! # async fn demo() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_engine_kit::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead};
//! use open_deno_kv_redb::{FileEngine, RedbBackend};
//! let kv = RedbBackend::open("kv.redb")?;
//! let k = encode_key(&key!["hello"])?;
//! let write = AtomicWrite {
//!     mutations: vec![Mutation::set(k.clone(), KvValue::Bytes(b"world".to_vec()))],
//!     ..Default::default()
//! };
//! let committed = kv.atomic_write(write).await?.expect("no checks, so it commits");
//! let read = SnapshotRead { ranges: vec![ReadRange::single_encoded_key(k)], ..Default::default() };
//! let entry = &kv.snapshot_read(read).await?[0].entries[0];
//! assert_eq!(entry.versionstamp, committed.versionstamp);
//! kv.close().await?;
//! # Ok(()) }
//! ```

mod backup;
mod change_log;
mod codec;
mod consumer;
mod error;
mod file;
mod group;
mod integrity;
mod queue;
mod reader;
mod schema;
mod snapshot;
mod store;
mod txn;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};

use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KvError, Limits, QueueMessageHandle, QueuedMessage, RangeCount,
    RangeWatchStream, ReadRangeOutput, Snapshot, SystemClock, ValidatedRange, ValidatedRead,
    ValidatedWatch, ValidatedWrite, Versionstamp, WatchStream, blocking_range_watch_stream,
    blocking_watch_stream,
};
use open_deno_kv_engine_kit::{run_blocking, run_read};

pub use error::RedbError;
pub use group::DEFERRED_SYNC_INTERVAL;
/// The most commands (writes, queue takes and settlements) one redb transaction groups.
pub use open_deno_kv_engine_kit::committer::MAX_GROUP;
pub use schema::SCHEMA_VERSION;

/// The trait [`RedbBackend`]'s `open`, `open_with` and `path` come from: bring it into scope
/// (`use open_deno_kv_redb::FileEngine;`) to call them.
pub use open_deno_kv_engine_kit::FileEngine;

use crate::file::{FileStorage, OpenStorage};
use crate::reader::ReadTime;
use crate::store::Shared;

/// How hard a commit is pushed to disk before it is acknowledged.
///
/// Whatever the mode, a crash never corrupts the file: redb keeps two commit slots with
/// checksums and reopens at the last commit that was made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit group is committed with redb's `Durability::Immediate`: written and fsynced
    /// before any write in it is acknowledged. An acknowledged commit survives a crash of the
    /// process and of the machine (to the extent the disk honours fsync). A group of queue
    /// bookkeeping only (takes and settlements, no write) is committed unsynced and made durable
    /// by the next synced commit, or within [`DEFERRED_SYNC_INTERVAL`]: a crash before then
    /// delivers the message again (`open_deno_kv_engine_kit::queue`, "Queue bookkeeping").
    #[default]
    Immediate,
    /// Commit groups use redb's `Durability::None`: committed in memory, visible to every reader
    /// at once, and acknowledged without waiting for the disk; the writer makes them durable with
    /// an `Immediate` commit at least every [`DEFERRED_SYNC_INTERVAL`] (1 s), when it is idle,
    /// and when the last handle closes (or is dropped).
    ///
    /// - A clean close keeps every acknowledged commit.
    /// - A crash of the process or of the machine loses the commits acknowledged since the last
    ///   sync (at most about [`DEFERRED_SYNC_INTERVAL`] of them); the file reopens at the last
    ///   synced commit, and versionstamps of the lost commits may be handed out again.
    Deferred,
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct RedbOptions {
    /// The clock expiry and queue times are read from (the system clock by default; tests use a
    /// [`open_deno_kv_engine_kit::ManualClock`]).
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// See [`Durability`]. Handles on a file already open in this process share its writer, so
    /// the durability of the first open applies to all of them (as does its clock for the
    /// writer's own housekeeping: recovery at open and idle sweeps; each handle's reads, writes
    /// and queue operations use its own clock).
    pub durability: Durability,
    /// Verify every page's checksum when the file is opened (reads the whole file). Without it a
    /// file that was closed cleanly is trusted; a file left by a crash is always checked and
    /// repaired by redb.
    pub check_integrity_on_open: bool,
    /// Open without writing anything to the file: no recovery, no initialisation, no writer
    /// (writes and dequeues fail with [`KvError::ReadOnly`]). Several processes may read a file
    /// this way at once, but none may have it open writable meanwhile. A file that was not
    /// closed cleanly is refused ([`RedbError::NeedsRecovery`]), as is a file with no tables.
    pub read_only: bool,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            durability: Durability::Immediate,
            check_integrity_on_open: false,
            read_only: false,
        }
    }
}

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
        let snapshot = backup::export(self.shared.clone(), self.clock.now()).await?;
        Ok(Snapshot {
            versionstamp: snapshot.versionstamp,
            items: snapshot.items.fuse().boxed(),
        })
    }

    /// One write transaction beside the writer, which continues numbering above the
    /// snapshot (see the `backup` module); then every watcher and consumer looks again.
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        let summary = backup::import(self.shared.clone(), snapshot).await?;
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
        Ok(blocking_range_watch_stream(
            range.into_inner(),
            &self.signal,
            read,
        ))
    }

    /// Closes this handle: its watch streams end, its waiting dequeues return `None`, and the
    /// messages it handed out and that are not finished count as failed deliveries (they are
    /// retried). The last handle on a file also syncs everything and closes the file.
    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
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
        if let Ok(writer) = self.shared.writer() {
            writer.release_in_background(self.owner, self.clock.now());
        }
        let _ = store::release(&self.shared);
    }
}

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

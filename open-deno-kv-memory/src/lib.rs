//! # open-deno-kv-memory — an in-memory Deno KV backend
//!
//! A complete [`Engine`] (handed out as a [`Backend`](open_deno_kv_engine_kit::Backend) behind open-deno-kv-engine-kit's
//! [`Checked`] layer, which checks limits and the closed state): an ordered map of entries,
//! consistent snapshots, atomic writes with increasing versionstamps, expiry that is never
//! visible after its time, queues with delay, back-off, dead-letter keys and redelivery, and
//! watch. Everything time-based reads the injected [`Clock`], so tests move time instead of
//! sleeping.
//!
//! Data lives in a [`MemoryStore`]. Several [`MemoryBackend`] handles may share one store, as
//! several `Deno.openKv` calls share one file: they see each other's commits, watches and queue,
//! and closing a handle keeps the data for the next one. When the last handle and store are
//! dropped the data is gone: this backend is not durable.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_memory::MemoryBackend;
//! use open_deno_kv_engine_kit::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead};
//!
//! let kv = MemoryBackend::new();
//! let k = encode_key(&key!["greeting"])?;
//! let write = AtomicWrite { mutations: vec![Mutation::set(k.clone(), KvValue::Bytes(b"hi".to_vec().into()))], ..Default::default() };
//! let committed = kv.atomic_write(write).await?.expect("no checks, so it commits");
//!
//! let read = SnapshotRead { ranges: vec![ReadRange::single_encoded_key(k)], ..Default::default() };
//! let entries = &kv.snapshot_read(read).await?[0].entries;
//! assert_eq!(entries[0].value, KvValue::Bytes(b"hi".to_vec().into()));
//! assert_eq!(entries[0].versionstamp, committed.versionstamp);
//! # Ok(()) }
//! ```

mod queue;
mod store;

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Engine, ImportSummary,
    IntegrityReport, KvError, Limits, QueueMessageHandle, QueuedMessage, RangeCount,
    RangeWatchStream, ReadRangeOutput, Snapshot, SystemClock, ValidatedRange, ValidatedRead,
    ValidatedWatch, ValidatedWrite, Versionstamp, WatchReader, WatchStream, range_watch_stream,
    watch_stream,
};

pub use store::MemoryStore;

/// A handle on a [`MemoryStore`]: the engine, handed out behind the [`Checked`] layer. Cheap to
/// create; share it as `Arc<dyn open_deno_kv_engine_kit::Backend>`.
#[derive(Debug)]
pub struct MemoryBackend {
    store: MemoryStore,
    clock: Arc<dyn Clock>,
    /// This handle's watchers: notified on every commit to the store, closed with the handle.
    signal: Arc<ChangeSignal>,
    /// This handle's number in the store: messages it hands out die with it.
    id: u64,
}

impl MemoryBackend {
    /// A handle on a fresh, empty store, using the system clock and Deno's limits.
    pub fn new() -> Checked<Self> {
        Self::open(&MemoryStore::new(), Arc::new(SystemClock))
    }

    /// A handle on `store` with its time taken from `clock`.
    pub fn open(store: &MemoryStore, clock: Arc<dyn Clock>) -> Checked<Self> {
        Self::open_with_limits(store, clock, Limits::deno())
    }

    /// A handle with other limits than Deno's (a server may allow more or fewer).
    pub fn open_with_limits(
        store: &MemoryStore,
        clock: Arc<dyn Clock>,
        limits: Limits,
    ) -> Checked<Self> {
        let signal = Arc::new(ChangeSignal::new());
        store.register_watchers(&signal);
        let engine = MemoryBackend {
            store: store.clone(),
            clock: clock.clone(),
            signal,
            id: store.new_handle_id(),
        };
        Checked::new(engine, limits, clock)
    }

    /// The store this handle works on (to open more handles on the same data).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Reads watched keys' current entries, for key and range watches.
    fn watch_reader(&self) -> WatchReader {
        let store = self.store.clone();
        let clock = self.clock.clone();
        Arc::new(move |keys| {
            let current = store.read_watched(&keys, clock.now());
            Box::pin(async move { Ok(current) })
        })
    }
}

impl Engine for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::every_operation()
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        Ok(self.store.read(&read.ranges, self.clock.now()))
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        self.store.commit(&write, self.clock.now())
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let closed = self.signal.clone();
        queue::next_message(&self.store, self.clock.clone(), closed, self.id).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        Ok(self.store.queued_messages(self.clock.now()))
    }

    /// The lengths of the waiting and running maps: nothing is read.
    async fn queue_depth(&self) -> Result<usize, KvError> {
        Ok(self.store.queue_depth())
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        Ok(self.store.integrity_report())
    }

    /// A copy taken under the store's lock: see the `store::backup` module for its cost.
    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        Ok(self.store.export_snapshot(self.clock.now()))
    }

    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        self.store.import_snapshot(snapshot).await
    }

    /// In memory, beside the entries (see the `store::change_log` module).
    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        self.store.configure_change_log(retention);
        Ok(())
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        Ok(self.store.change_log_status())
    }

    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        self.store.read_change_log(after, limit)
    }

    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        Ok(watch_stream(
            keys.into_inner(),
            self.watch_reader(),
            &self.signal,
            self.clock.clone(),
        ))
    }

    async fn count_range(&self, range: ValidatedRange) -> Result<RangeCount, KvError> {
        Ok(self.store.count_range(&range, self.clock.now()))
    }

    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        Ok(range_watch_stream(
            range.into_inner(),
            self.watch_reader(),
            &self.signal,
        ))
    }

    /// Closes this handle. Messages it handed out and that are not finished count as failed
    /// deliveries and are retried (their consumers are gone with the handle).
    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
        self.store.abandon_deliveries(self.id, self.clock.now())
    }
}

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

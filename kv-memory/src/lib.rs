//! # kv-memory — an in-memory Deno KV backend
//!
//! A complete [`Backend`]: an ordered map of entries, consistent snapshots, atomic writes with
//! increasing versionstamps, expiry that is never visible after its time, queues with delay,
//! back-off, dead-letter keys and redelivery, and watch. Everything time-based reads the injected
//! [`Clock`], so tests move time instead of sleeping.
//!
//! Data lives in a [`MemoryStore`]. Several [`MemoryBackend`] handles may share one store, as
//! several `Deno.openKv` calls share one file: they see each other's commits, watches and queue,
//! and closing a handle keeps the data for the next one. When the last handle and store are
//! dropped the data is gone: this backend is not durable.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kv_proto::KvError> {
//! use kv_memory::MemoryBackend;
//! use kv_proto::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead};
//!
//! let kv = MemoryBackend::new();
//! let k = encode_key(&key!["greeting"])?;
//! let write = AtomicWrite { mutations: vec![Mutation::set(k.clone(), KvValue::Bytes(b"hi".to_vec()))], ..Default::default() };
//! let committed = kv.atomic_write(write).await?.expect("no checks, so it commits");
//!
//! let read = SnapshotRead { ranges: vec![ReadRange::single_encoded_key(k)], ..Default::default() };
//! let entries = &kv.snapshot_read(read).await?[0].entries;
//! assert_eq!(entries[0].value, KvValue::Bytes(b"hi".to_vec()));
//! assert_eq!(entries[0].versionstamp, committed.versionstamp);
//! # Ok(()) }
//! ```

mod queue;
mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use kv_proto::{
    AtomicWrite, Backend, Capabilities, ChangeSignal, Clock, CommitResult, IntegrityReport,
    KvError, Limits, QueueMessageHandle, QueuedMessage, ReadRangeOutput, SnapshotRead, SystemClock,
    WatchReader, WatchStream, watch_stream,
};

pub use store::MemoryStore;

/// A handle on a [`MemoryStore`]. Cheap to create; share it as `Arc<dyn Backend>`.
#[derive(Debug)]
pub struct MemoryBackend {
    store: MemoryStore,
    clock: Arc<dyn Clock>,
    limits: Limits,
    /// This handle's watchers: notified on every commit to the store, closed with the handle.
    signal: Arc<ChangeSignal>,
    closed: AtomicBool,
    /// This handle's number in the store: messages it hands out die with it.
    id: u64,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A handle on a fresh, empty store, using the system clock and Deno's limits.
    pub fn new() -> Self {
        Self::open(&MemoryStore::new(), Arc::new(SystemClock))
    }

    /// A handle on `store` with its time taken from `clock`.
    pub fn open(store: &MemoryStore, clock: Arc<dyn Clock>) -> Self {
        Self::open_with_limits(store, clock, Limits::deno())
    }

    /// A handle with other limits than Deno's (a server may allow more or fewer).
    pub fn open_with_limits(store: &MemoryStore, clock: Arc<dyn Clock>, limits: Limits) -> Self {
        let signal = Arc::new(ChangeSignal::new());
        store.register_watchers(&signal);
        MemoryBackend {
            store: store.clone(),
            clock,
            limits,
            signal,
            closed: AtomicBool::new(false),
            id: store.new_handle_id(),
        }
    }

    /// The store this handle works on (to open more handles on the same data).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    fn ensure_open(&self) -> Result<(), KvError> {
        if self.closed.load(Ordering::Acquire) {
            Err(KvError::Closed)
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_queues(true)
            .with_queue_inspection(true)
            .with_watch(true)
            .with_integrity_check(true)
    }

    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.ensure_open()?;
        self.limits.validate_snapshot_read(&read)?;
        Ok(self.store.read(&read.ranges, self.clock.now()))
    }

    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        self.ensure_open()?;
        let now = self.clock.now();
        self.limits.validate_atomic_write(&write, now)?;
        self.store.commit(&write, now)
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let closed = self.signal.clone();
        queue::next_message(&self.store, self.clock.clone(), closed, self.id).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        self.ensure_open()?;
        Ok(self.store.queued_messages(self.clock.now()))
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        self.ensure_open()?;
        Ok(self.store.integrity_report())
    }

    fn watch(&self, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
        self.ensure_open()?;
        self.limits.validate_watch(&keys)?;
        let store = self.store.clone();
        let clock = self.clock.clone();
        let reader: WatchReader = Arc::new(move |keys| {
            let current = store.read_watched(&keys, clock.now());
            Box::pin(async move { Ok(current) })
        });
        Ok(watch_stream(keys, reader, &self.signal, self.clock.clone()))
    }

    /// Closes this handle. Messages it handed out and that are not finished count as failed
    /// deliveries and are retried (their consumers are gone with the handle).
    async fn close(&self) -> Result<(), KvError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.signal.close();
        self.store.abandon_deliveries(self.id, self.clock.now())
    }
}

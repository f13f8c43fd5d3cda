//! The smallest real engine, and the one line that runs the whole suite on it.
//!
//! `TinyBackend` is an ordered map behind a mutex. It supports reads and atomic writes only, so
//! the suite shows its queue and watch cases as ignored. Everything Deno-specific — limits,
//! checks, sum/min/max, versionstamped keys, expiry on write — comes from kv-proto; the engine
//! only stores, orders and commits. kv-conformance/README.md walks through it.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use kv_conformance::TestContext;
use kv_proto::queue::QueuedMessage;
use kv_proto::{
    AtomicWrite, Backend, Capabilities, Clock, CommitResult, KvEntry, KvError, Limits,
    ReadRangeOutput, SnapshotRead, StoredEntry, Versionstamp, WriteOutcome, WriteTransaction,
    apply_atomic_write,
};

/// The engine's data: entries by encoded key, and the last commit version.
#[derive(Default, Clone)]
struct Data {
    entries: BTreeMap<Vec<u8>, StoredEntry>,
    version: u64,
}

struct TinyBackend {
    /// Shared with the test context, so reopening finds the same data.
    data: Arc<Mutex<Data>>,
    clock: Arc<dyn Clock>,
    closed: AtomicBool,
}

/// kv-proto applies a write through this view of the engine's transaction. Here a transaction is
/// a copy of the data, swapped in on commit: simple, and rollback is free.
impl WriteTransaction for Data {
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        Ok(self.entries.get(key).cloned())
    }
    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError> {
        self.entries.insert(key.to_vec(), entry);
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        self.entries.remove(key);
        Ok(())
    }
    fn enqueue(&mut self, _message: QueuedMessage) -> Result<(), KvError> {
        Err(KvError::Unsupported { feature: "queues" })
    }
}

impl TinyBackend {
    fn data(&self) -> Result<std::sync::MutexGuard<'_, Data>, KvError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(KvError::Closed);
        }
        Ok(self.data.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[async_trait]
impl Backend for TinyBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let data = self.data()?;
        Limits::deno().validate_snapshot_read(&read)?;
        let now = self.clock.now();
        let outputs = read.ranges.iter().map(|range| {
            let mut entries: Vec<KvEntry> = Vec::new();
            if range.start < range.end {
                let bounds = (
                    Bound::Included(range.start.as_slice()),
                    Bound::Excluded(range.end.as_slice()),
                );
                let found = data
                    .entries
                    .range::<[u8], _>(bounds)
                    .filter(|(_, e)| !e.is_expired(now));
                let take = range.limit as usize;
                let to_entry =
                    |(k, e): (&Vec<u8>, &StoredEntry)| KvEntry::from_stored(k.clone(), e.clone());
                entries = if range.reverse {
                    found.rev().take(take).map(to_entry).collect()
                } else {
                    found.take(take).map(to_entry).collect()
                };
            }
            ReadRangeOutput { entries }
        });
        Ok(outputs.collect())
    }

    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        let mut data = self.data()?;
        let now = self.clock.now();
        Limits::deno().validate_atomic_write(&write, now)?;
        if !write.enqueues.is_empty() {
            return Err(KvError::Unsupported { feature: "queues" });
        }
        let versionstamp = Versionstamp::from_version(data.version + 1, 0);
        let mut txn = data.clone();
        match apply_atomic_write(&mut txn, &write, versionstamp, now)? {
            WriteOutcome::CheckFailed => Ok(None),
            WriteOutcome::Committed { .. } => {
                txn.version += 1;
                *data = txn;
                Ok(Some(CommitResult { versionstamp }))
            }
        }
    }

    async fn close(&self) -> Result<(), KvError> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

// The one line. (`reopens(true)`: the data lives in the test context, so a reopen finds it.)
kv_conformance::conformance_main!(
    factory = kv_conformance::FnFactory::new(|ctx: &TestContext| {
        let backend = TinyBackend {
            data: ctx.slot(|| Mutex::new(Data::default())),
            clock: Arc::new(ctx.clock().clone()),
            closed: AtomicBool::new(false),
        };
        async move { Ok(Arc::new(backend) as Arc<dyn Backend>) }
    })
    .reopens(true)
);

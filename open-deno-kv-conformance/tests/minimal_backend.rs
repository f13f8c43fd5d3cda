//! The smallest real engine, and the one line that runs the whole suite on it.
//!
//! `TinyEngine` is an ordered map behind a mutex. It supports reads and atomic writes only, so
//! the suite shows its queue and watch cases as ignored. Everything Deno-specific comes from
//! open-deno-kv-engine-kit: the `Checked` layer it runs behind answers for limits, the closed state and the
//! optional methods it lacks; `stage_atomic_write` applies checks, sum/min/max, versionstamped
//! keys and expiry. The engine only stores, orders and commits. open-deno-kv-conformance/README.md walks
//! through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use open_deno_kv_conformance::TestContext;
use open_deno_kv_engine_kit::{
    Backend, Capabilities, Checked, Clock, CommitResult, Engine, KvEntry, KvError, Limits,
    ReadRangeOutput, StoredEntry, ValidatedRead, ValidatedWrite, Versionstamp, stage_atomic_write,
};

/// The engine's data: entries by encoded key, and the last commit version.
#[derive(Default)]
struct Data {
    entries: BTreeMap<Vec<u8>, StoredEntry>,
    version: u64,
}

struct TinyEngine {
    /// Shared with the test context, so reopening finds the same data.
    data: Arc<Mutex<Data>>,
    clock: Arc<dyn Clock>,
}

impl TinyEngine {
    fn data(&self) -> MutexGuard<'_, Data> {
        self.data.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Engine for TinyEngine {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let data = self.data();
        let now = self.clock.now();
        let answer = |range: &open_deno_kv_engine_kit::ReadRange| {
            if range.start >= range.end {
                return ReadRangeOutput::default();
            }
            let visible = |(k, e): (&Vec<u8>, &StoredEntry)| {
                (!e.is_expired(now)).then(|| KvEntry::from_stored(k.clone(), e.clone()))
            };
            let found = data.entries.range(range.start.clone()..range.end.clone());
            let take = range.limit as usize;
            let entries = if range.reverse {
                found.rev().filter_map(visible).take(take).collect()
            } else {
                found.filter_map(visible).take(take).collect()
            };
            ReadRangeOutput { entries }
        };
        Ok(read.ranges.iter().map(answer).collect())
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        if !write.enqueues.is_empty() {
            return Err(KvError::Unsupported { feature: "queues" });
        }
        let mut data = self.data();
        let versionstamp = Versionstamp::from_version(data.version + 1, 0);
        let stored = |key: &[u8]| Ok(data.entries.get(key).cloned());
        let Some(staged) = stage_atomic_write(stored, &write, versionstamp, self.clock.now())?
        else {
            return Ok(None); // a check failed: nothing was touched
        };
        for (key, entry) in staged.writes {
            match entry {
                Some(entry) => data.entries.insert(key, entry),
                None => data.entries.remove(&key),
            };
        }
        data.version += 1;
        Ok(Some(CommitResult { versionstamp }))
    }

    async fn close(&self) -> Result<(), KvError> {
        Ok(())
    }
}

// The one line. (`reopens(true)`: the data lives in the test context, so a reopen finds it.)
open_deno_kv_conformance::conformance_main!(
    factory = open_deno_kv_conformance::FnFactory::new(|ctx: &TestContext| {
        let clock: Arc<dyn Clock> = Arc::new(ctx.clock().clone());
        let data = ctx.slot(|| Mutex::new(Data::default()));
        let engine = TinyEngine {
            data,
            clock: clock.clone(),
        };
        let backend = Checked::new(engine, Limits::deno(), clock);
        async move { Ok(Arc::new(backend) as Arc<dyn Backend>) }
    })
    .reopens(true)
);

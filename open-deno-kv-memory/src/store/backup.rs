//! Snapshot export and import of a [`MemoryStore`] (see `open_deno_kv_engine_kit::backup`).
//!
//! **Export cost.** The store is one map behind one mutex, with no older versions to read from,
//! so an export copies what it exports while holding the lock: every visible entry and every
//! message, O(entries) time and memory, during which writers wait. The copy is a plain clone of
//! the map's contents (no encoding, no I/O), so the pause is the time to clone the data — a few
//! milliseconds per hundred thousand small entries — and the stream then hands the copy out
//! without the lock. A store this engine keeps fits in memory by definition; a second copy of it
//! is the price of a consistent export without versioned storage.
//!
//! **Import.** Items are gathered into new maps without the lock, then put in place under it only
//! if the store is still empty, so a failed or abandoned import leaves nothing behind.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::backup::{ImportWrites, import_each_async};
use open_deno_kv_engine_kit::change_log::version_after_import;
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    ImportSummary, KvEntry, KvError, Snapshot, SnapshotItem, StoredEntry, Versionstamp,
    backup::not_empty,
};
use uuid::Uuid;

use super::{MemEntry, MemoryStore};

impl MemoryStore {
    /// Copies every entry visible at `now` and every message under the lock (see the module
    /// documentation for the cost) and streams the copy.
    pub(crate) fn export_snapshot(&self, now: DateTime<Utc>) -> Snapshot {
        let (identity, version, entries, messages) = {
            let state = self.lock();
            let entries: Vec<KvEntry> = (state.entries.iter())
                .filter(|(_, stored)| !stored.is_expired(now))
                .map(|(key, stored)| stored.to_entry(key))
                .collect();
            (state.identity.0, state.version, entries, state.queued(now))
        };
        let items = entries
            .into_iter()
            .map(SnapshotItem::Entry)
            .chain(messages.into_iter().map(SnapshotItem::Message))
            .collect();
        Snapshot::from_items(Versionstamp::from_version(version, 0), items)
            .of_database(Some(identity))
    }

    /// Gathers `snapshot` off the lock, then installs it if the store is still empty.
    pub(crate) async fn import_snapshot(
        &self,
        snapshot: Snapshot,
    ) -> Result<ImportSummary, KvError> {
        if !self.lock().is_empty() {
            return Err(not_empty());
        }
        let Snapshot {
            versionstamp,
            items,
            ..
        } = snapshot;
        let mut gathered = Gathered::default();
        let summary = import_each_async(items, &mut gathered).await?;
        let Gathered {
            entries,
            expiries,
            ready,
        } = gathered;
        {
            let mut state = self.lock();
            if !state.is_empty() {
                return Err(not_empty());
            }
            state.entries = entries;
            state.expiries = expiries;
            state.ready = ready;
            // Never backwards, and a gap in the change log's chain.
            state.version =
                version_after_import(versionstamp.version(), state.version, state.log.is_some());
        }
        // Watchers of any key, and consumers waiting on an empty queue, look again.
        self.shared.notifier.notify_everything();
        Ok(summary)
    }
}

/// An import's items, gathered off the lock before they are installed.
#[derive(Default)]
struct Gathered {
    entries: BTreeMap<Vec<u8>, MemEntry>,
    expiries: BTreeSet<(DateTime<Utc>, Vec<u8>)>,
    ready: BTreeMap<(DateTime<Utc>, Uuid), QueuedMessage>,
}

impl ImportWrites for Gathered {
    async fn entry(&mut self, key: Vec<u8>, stored: StoredEntry) -> Result<(), KvError> {
        if let Some(at) = stored.expires_at {
            self.expiries.insert((at, key.clone()));
        }
        self.entries.insert(key, MemEntry::from(stored));
        Ok(())
    }

    async fn message(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        self.ready.insert((message.ready_at, message.id), message);
        Ok(())
    }
}

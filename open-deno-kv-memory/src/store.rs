//! The shared state of a [`MemoryStore`]: entries, the expiry index, the commit version and the
//! queue, behind one mutex. Every operation is short and never waits while holding it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::ChangeRecord;
use open_deno_kv_engine_kit::queue::{DeliveryOutcome, IdMap, Leases, QueuedMessage, Settlement};
use open_deno_kv_engine_kit::{
    ChangeSignal, CommitResult, DatabaseId, Effects, IntegrityReport, KeyRange, KvEntry, KvError,
    Notifier, PageBuilder, RangeCount, ReadRange, ReadRangeOutput, StoredEntry, ValidatedWrite,
    Versionstamp, WatchedEntry, is_expired, stage_atomic_write,
};
use tokio::sync::watch;
use uuid::Uuid;

mod backup;
mod change_log;
mod entry;

use entry::MemEntry;

/// The data behind one or more [`crate::MemoryBackend`] handles. Clones share the same data.
#[derive(Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes every open handle's watches and queue consumers.
    notifier: Notifier,
    /// Hands out backend handle ids.
    handles: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The store's identity, made with it.
    identity: Identity,
    entries: BTreeMap<Vec<u8>, MemEntry>,
    /// (expiry time, key) for every entry that has one, to purge expired entries in order.
    expiries: BTreeSet<(DateTime<Utc>, Vec<u8>)>,
    /// The last commit's version; the next commit gets `version + 1`.
    version: u64,
    /// Messages waiting for delivery, by (ready time, id).
    ready: BTreeMap<(DateTime<Utc>, Uuid), QueuedMessage>,
    /// Messages handed to a consumer and not finished yet.
    running: IdMap<QueuedMessage>,
    /// Who holds each running message, under which delivery token.
    leases: Leases,
    /// The change log, while it is on.
    log: Option<change_log::MemoryLog>,
}

/// A memory store's identity ([`open_deno_kv_engine_kit::identity`]): a new random one for every
/// store, kept as long as it lives.
struct Identity(DatabaseId);

impl Default for Identity {
    fn default() -> Self {
        Identity(DatabaseId::random())
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("MemoryStore")
            .field("entries", &state.entries.len())
            .field("version", &state.version)
            .field("queued", &state.ready.len())
            .field("running", &state.running.len())
            .finish()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held (commits are staged first and applied with plain
        // map inserts), so a poisoned lock still guards consistent data.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The store's identity ([`open_deno_kv_engine_kit::identity`]).
    pub fn identity(&self) -> DatabaseId {
        self.lock().identity.0
    }

    pub(crate) fn register_watchers(&self, signal: &Arc<ChangeSignal>) {
        self.shared.notifier.register(signal);
    }

    pub(crate) fn subscribe_queue(&self) -> watch::Receiver<u64> {
        self.shared.notifier.subscribe_queue()
    }

    /// The integrity check of a store that lives in memory: nothing can be damaged, so it only
    /// counts what it holds (entries expired but not yet removed included).
    pub(crate) fn integrity_report(&self) -> IntegrityReport {
        let state = self.lock();
        IntegrityReport {
            entries_checked: state.entries.len() as u64,
            messages_checked: (state.ready.len() + state.running.len()) as u64,
            problems: Vec::new(),
        }
    }

    /// Answers every range from one snapshot (the lock is held throughout).
    pub(crate) fn read(&self, ranges: &[ReadRange], now: DateTime<Utc>) -> Vec<ReadRangeOutput> {
        let state = self.lock();
        ranges
            .iter()
            .map(|range| ReadRangeOutput {
                entries: state.read_range(range, now),
            })
            .collect()
    }

    /// Counts `range` from one snapshot (the lock is held throughout).
    pub(crate) fn count_range(&self, range: &KeyRange, now: DateTime<Utc>) -> RangeCount {
        self.lock().count_range(range, now)
    }

    pub(crate) fn read_watched(&self, keys: &[Vec<u8>], now: DateTime<Utc>) -> Vec<WatchedEntry> {
        let state = self.lock();
        keys.iter()
            .map(|key| {
                let stored = state.entries.get(key).filter(|e| !e.is_expired(now));
                WatchedEntry::from(stored.map(|stored| stored.to_entry(key)))
            })
            .collect()
    }

    /// Validated write → committed (with its versionstamp), `None` for a failed check, or an error
    /// with nothing applied.
    pub(crate) fn commit(
        &self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<CommitResult>, KvError> {
        let outcome = {
            let mut state = self.lock();
            state.commit(write, now)?
        };
        let Some((result, effects)) = outcome else {
            return Ok(None);
        };
        self.shared.notifier.notify(&effects);
        Ok(Some(result))
    }

    /// A number for a new backend handle, unique within this store.
    pub(crate) fn new_handle_id(&self) -> u64 {
        self.shared.handles.fetch_add(1, Ordering::Relaxed)
    }

    /// Every message, waiting or running, by ready time (running ones as ready at `now`).
    pub(crate) fn queued_messages(&self, now: DateTime<Utc>) -> Vec<QueuedMessage> {
        self.lock().queued(now)
    }

    /// How many messages [`MemoryStore::queued_messages`] would list.
    pub(crate) fn queue_depth(&self) -> usize {
        let state = self.lock();
        state.ready.len() + state.running.len()
    }

    /// The first due message, moved to running for handle `owner` with a fresh delivery token; or
    /// else the time the next one is due.
    pub(crate) fn take_due_message(
        &self,
        now: DateTime<Utc>,
        owner: u64,
    ) -> Result<(QueuedMessage, u64), Option<DateTime<Utc>>> {
        let mut state = self.lock();
        let Some((&(ready_at, id), _)) = state.ready.first_key_value() else {
            return Err(None);
        };
        if ready_at > now {
            return Err(Some(ready_at));
        }
        let message = state.ready.remove(&(ready_at, id)).ok_or(None)?;
        let token = state.leases.grant(id, owner);
        state.running.insert(id, message.clone());
        Ok((message, token))
    }

    /// Ends delivery `token` of message `id` (see [`Settlement`]): success forgets the
    /// message; failure requeues it after the next back-off interval or, with none left, writes it
    /// to its dead-letter keys; a delivery nobody received puts it back as it was. A delivery that
    /// was already settled (or abandoned and handed out again) is left alone.
    pub(crate) fn finish_message(
        &self,
        id: Uuid,
        token: u64,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        let mut state = self.lock();
        if !state.leases.is_current(id, token) {
            return Ok(());
        }
        let effects = state.settle(id, outcome, now)?;
        drop(state);
        self.shared.notifier.notify(&effects);
        Ok(())
    }

    /// Treats every message handed out by handle `owner` and not finished as a failed delivery:
    /// a closed handle's consumers are gone, as a crashed process's are.
    pub(crate) fn abandon_deliveries(&self, owner: u64, now: DateTime<Utc>) -> Result<(), KvError> {
        let mut state = self.lock();
        let mut effects = Effects::default();
        for id in state.leases.close_owner(owner) {
            effects.merge(state.settle(id, DeliveryOutcome::Failed, now)?);
        }
        drop(state);
        self.shared.notifier.notify(&effects);
        Ok(())
    }
}

impl State {
    /// Every message, waiting or running, by ready time (running ones as ready at `now`).
    fn queued(&self, now: DateTime<Utc>) -> Vec<QueuedMessage> {
        let mut messages: Vec<QueuedMessage> = self.ready.values().cloned().collect();
        messages.extend(self.running.values().map(|message| QueuedMessage {
            ready_at: now,
            ..message.clone()
        }));
        messages.sort_by_key(|message| (message.ready_at, message.id));
        messages
    }

    /// Whether the store holds no entry (expired or not) and no message.
    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.ready.is_empty() && self.running.is_empty()
    }

    fn read_range(&self, range: &ReadRange, now: DateTime<Utc>) -> Vec<KvEntry> {
        if range.start >= range.end {
            return Vec::new();
        }
        // A get (`[k, k+00)`) is one lookup; a range search costs more comparisons.
        if let Some(key) = range.point_key() {
            return self
                .entries
                .get_key_value(key)
                .filter(|(_, stored)| !stored.is_expired(now))
                .map(|(key, stored)| stored.to_entry(key))
                .into_iter()
                .collect();
        }
        let bounds = (
            Bound::Included(range.start.as_slice()),
            Bound::Excluded(range.end.as_slice()),
        );
        let limit = range.limit as usize;
        // A page's small entries share one buffer (`PageBuilder`), as open-deno-kv-redb's do.
        let mut page = PageBuilder::for_limit(limit);
        let mut found = self.entries.range::<[u8], _>(bounds);
        let mut next = || {
            if range.reverse {
                found.next_back()
            } else {
                found.next()
            }
        };
        while page.len() < limit
            && let Some((key, stored)) = next()
        {
            if !stored.is_expired(now) {
                stored.push_onto(&mut page, key);
            }
        }
        page.finish()
    }

    /// Applies a write through open-deno-kv-model's write path on a staging overlay; only a successful
    /// write touches the state. Returns the result and the waiters to wake.
    fn commit(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<(CommitResult, Effects)>, KvError> {
        self.purge_expired(now);
        let versionstamp = Versionstamp::from_version(self.version + 1, 0);
        let entries = &self.entries;
        let read = |key: &[u8]| Ok(entries.get(key).map(MemEntry::to_stored));
        let Some(mut staged) = stage_atomic_write(read, write, versionstamp, now)? else {
            return Ok(None);
        };
        let mut effects = Effects {
            queue: !staged.enqueued.is_empty(),
            ..Effects::default()
        };
        effects.changed = staged.changed();
        if let Some(log) = &mut self.log {
            // The staged effects lent to the record (which the log keeps encoded), then taken
            // back: no copy.
            let record = ChangeRecord {
                database: Some(self.identity.0),
                versionstamp,
                previous: Versionstamp::from_version(self.version, 0),
                at: now,
                changes: staged,
            };
            log.append(&record);
            staged = record.changes;
        }
        for range in &staged.deleted_ranges {
            self.delete_range(range);
        }
        for (key, entry) in staged.writes {
            self.store(key, entry);
        }
        for message in staged.enqueued {
            self.ready.insert((message.ready_at, message.id), message);
        }
        self.version += 1;
        Ok(Some((CommitResult { versionstamp }, effects)))
    }

    fn store(&mut self, key: Vec<u8>, entry: Option<StoredEntry>) {
        let old = match entry {
            Some(entry) => {
                let entry = MemEntry::from(entry);
                if let Some(at) = entry.expires_at {
                    self.expiries.insert((at, key.clone()));
                }
                self.entries.insert(key.clone(), entry)
            }
            None => self.entries.remove(&key),
        };
        if let Some(at) = old.and_then(|old| old.expires_at) {
            // Re-inserting the same (time, key) above must survive: only drop a stale index entry.
            let still_indexed = self
                .entries
                .get(&key)
                .is_some_and(|e| e.expires_at == Some(at));
            if !still_indexed {
                self.expiries.remove(&(at, key));
            }
        }
    }

    /// Removes every entry in `range` by cutting the map twice and joining the ends again: the
    /// cost is the cuts plus the entries removed, not a lookup per key.
    fn delete_range(&mut self, range: &KeyRange) {
        if range.is_empty() {
            return;
        }
        let mut inside = self.entries.split_off(range.start.as_slice());
        let mut after = inside.split_off(range.end.as_slice());
        self.entries.append(&mut after);
        for (key, entry) in inside {
            if let Some(at) = entry.expires_at {
                self.expiries.remove(&(at, key));
            }
        }
    }

    /// Counts the visible entries of `range` and their sizes.
    fn count_range(&self, range: &KeyRange, now: DateTime<Utc>) -> RangeCount {
        let mut count = RangeCount::default();
        if range.is_empty() {
            return count;
        }
        let bounds = (
            Bound::Included(range.start.as_slice()),
            Bound::Excluded(range.end.as_slice()),
        );
        for (key, entry) in self.entries.range::<[u8], _>(bounds) {
            if !entry.is_expired(now) {
                count.add(key.len(), entry.value_len());
            }
        }
        count
    }

    /// Ends the delivery of running message `id` as `outcome` says: forgets it, requeues it, or
    /// writes its dead letters.
    fn settle(
        &mut self,
        id: Uuid,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<Effects, KvError> {
        self.leases.end(id);
        let Some(message) = self.running.remove(&id) else {
            return Ok(Effects::default());
        };
        Ok(match Settlement::of(&message, outcome, now) {
            Settlement::Forget => Effects::default(),
            Settlement::Requeue(next) => {
                self.ready.insert((next.ready_at, next.id), next);
                Effects {
                    queue: true,
                    ..Effects::default()
                }
            }
            // Dead-letter writes have no checks: they always commit.
            Settlement::DeadLetter(write) => self
                .commit(&write, now)?
                .map(|(_, effects)| effects)
                .unwrap_or_default(),
        })
    }

    /// Drops entries whose time has come (they are already invisible; this frees the memory).
    fn purge_expired(&mut self, now: DateTime<Utc>) {
        while let Some((at, _)) = self.expiries.first() {
            if !is_expired(Some(*at), now) {
                break;
            }
            if let Some((_, key)) = self.expiries.pop_first() {
                self.entries.remove(&key);
            }
        }
    }
}

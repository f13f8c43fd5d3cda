//! `BTreeEngine`: a complete in-memory Deno KV engine written against the published kit only.
//!
//! Everything Deno-specific comes from `open-deno-kv-engine-kit`: the `Checked` layer answers for limits, the
//! closed state and read-only refusals; `stage_atomic_write` applies checks, mutations,
//! versionstamped keys, expiry and enqueues; `queue::next_delivery`, `Delivery`, `Leases` and
//! `Settlement` run the queue's delivery, leases and retry rule; `Notifier`, `ChangeSignal` and
//! `watch_stream` wake watches and consumers. This crate only stores, orders and commits: one
//! `BTreeMap` of entries, a list of waiting messages and a list of held ones, behind a mutex.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use open_deno_kv_engine_kit::chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::queue::{
    Delivery, DeliveryEngine, DeliveryOutcome, Leases, QueuedMessage, Settlement, Taken,
    next_delivery,
};
use open_deno_kv_engine_kit::{
    Capabilities, ChangeSignal, Checked, Clock, CommitResult, Effects, Engine, IntegrityReport,
    KvEntry, KvError, Limits, Notifier, QueueMessageHandle, ReadRange, ReadRangeOutput,
    StoredEntry, ValidatedRead, ValidatedWatch, ValidatedWrite, Versionstamp, WatchReader,
    WatchStream, WatchedEntry, async_trait, stage_atomic_write, watch_stream,
};

/// The data several [`BTreeEngine`] handles share (clones share it too), as several
/// `Deno.openKv` calls on one path share a database.
#[derive(Clone, Default)]
pub struct BTreeStore {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    data: Mutex<Data>,
    /// Wakes every handle's watches and queue consumers after a commit.
    notifier: Notifier,
    /// Numbers handles, so that a closed handle's held messages can be found.
    handles: AtomicU64,
}

#[derive(Default)]
struct Data {
    /// Entries by encoded key: byte order is Deno's key order.
    entries: std::collections::BTreeMap<Vec<u8>, StoredEntry>,
    /// The last commit's version.
    version: u64,
    /// Messages waiting for their ready time.
    waiting: Vec<QueuedMessage>,
    /// Messages handed to a consumer, with the lease token of that hand-out.
    held: Vec<(QueuedMessage, u64)>,
    /// Who holds which message (open-deno-kv-engine-kit's lease book).
    leases: Leases,
}

impl BTreeStore {
    fn data(&self) -> MutexGuard<'_, Data> {
        // Nothing panics while the lock is held: a poisoned lock still guards whole data.
        self.shared
            .data
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits `write` if its checks pass, and wakes whoever it concerns.
    fn commit(
        &self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<CommitResult>, KvError> {
        let outcome = self.data().commit(write, now)?;
        Ok(outcome.map(|(result, effects)| {
            self.shared.notifier.notify(&effects);
            result
        }))
    }

    /// Ends the hand-out `token` as `outcome` says; a stale token (already settled) does nothing.
    fn settle(
        &self,
        token: u64,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        let effects = {
            let mut data = self.data();
            let Some(at) = data.held.iter().position(|(_, t)| *t == token) else {
                return Ok(());
            };
            let (message, _) = data.held.swap_remove(at);
            data.settle(message, outcome, now)?
        };
        self.shared.notifier.notify(&effects);
        Ok(())
    }
}

impl Data {
    fn commit(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<(CommitResult, Effects)>, KvError> {
        let versionstamp = Versionstamp::from_version(self.version + 1, 0);
        let entries = &self.entries;
        let stored = |key: &[u8]| Ok(entries.get(key).cloned());
        let Some(staged) = stage_atomic_write(stored, write, versionstamp, now)? else {
            return Ok(None); // a check failed: nothing changed
        };
        let mut effects = Effects {
            queue: !staged.enqueued.is_empty(),
            ..Effects::default()
        };
        effects.changed.extend(staged.writes.keys().cloned());
        for (key, entry) in staged.writes {
            match entry {
                Some(entry) => self.entries.insert(key, entry),
                None => self.entries.remove(&key),
            };
        }
        self.waiting.extend(staged.enqueued);
        self.version += 1;
        Ok(Some((CommitResult { versionstamp }, effects)))
    }

    /// Applies the queue rule to a message whose hand-out ended: forget, requeue or dead-letter.
    fn settle(
        &mut self,
        message: QueuedMessage,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<Effects, KvError> {
        self.leases.end(message.id);
        Ok(match Settlement::of(&message, outcome, now) {
            Settlement::Forget => Effects::default(),
            Settlement::Requeue(again) => {
                self.waiting.push(again);
                Effects {
                    queue: true,
                    ..Effects::default()
                }
            }
            Settlement::DeadLetter(write) => self
                .commit(&write, now)?
                .map(|(_, effects)| effects)
                .unwrap_or_default(),
        })
    }

    fn read_range(&self, range: &ReadRange, now: DateTime<Utc>) -> ReadRangeOutput {
        if range.start >= range.end {
            return ReadRangeOutput::default();
        }
        let visible = |(key, entry): (&Vec<u8>, &StoredEntry)| {
            (!entry.is_expired(now)).then(|| KvEntry::from_stored(key.clone(), entry.clone()))
        };
        let found = self.entries.range(range.start.clone()..range.end.clone());
        let limit = range.limit as usize;
        let entries = if range.reverse {
            found.rev().filter_map(visible).take(limit).collect()
        } else {
            found.filter_map(visible).take(limit).collect()
        };
        ReadRangeOutput { entries }
    }

    /// The waiting message with the earliest ready time (the first enqueued among equals).
    fn first_waiting(&self) -> Option<usize> {
        (0..self.waiting.len()).min_by_key(|&i| (self.waiting[i].ready_at, i))
    }
}

/// One handle on a [`BTreeStore`]: the [`Engine`], handed out behind open-deno-kv-engine-kit's [`Checked`].
pub struct BTreeEngine {
    store: BTreeStore,
    clock: Arc<dyn Clock>,
    /// This handle's watches and waiting consumers; closed with the handle.
    signal: Arc<ChangeSignal>,
    /// This handle's number: the messages it holds are given back when it closes.
    handle: u64,
}

impl BTreeEngine {
    /// A handle on `store`, with its time from `clock` and Deno's limits.
    pub fn open(store: &BTreeStore, clock: Arc<dyn Clock>) -> Checked<Self> {
        let signal = Arc::new(ChangeSignal::new());
        store.shared.notifier.register(&signal);
        let engine = BTreeEngine {
            store: store.clone(),
            clock: clock.clone(),
            signal,
            handle: store.shared.handles.fetch_add(1, Ordering::Relaxed),
        };
        Checked::new(engine, Limits::deno(), clock)
    }
}

/// Settles hand-outs of one store; the ticket is the lease token.
struct Settler {
    store: BTreeStore,
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl DeliveryEngine for Settler {
    type Ticket = u64;

    async fn settle(&self, token: u64, outcome: DeliveryOutcome) -> Result<(), KvError> {
        self.store.settle(token, outcome, self.clock.now())
    }

    fn settle_in_background(&self, token: u64, outcome: DeliveryOutcome) {
        // Settling never waits here, so doing it at once is "in the background" enough; it can
        // only fail on a dead-letter write, which has no checks and always commits.
        let _ = self.store.settle(token, outcome, self.clock.now());
    }
}

impl Engine for BTreeEngine {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
            .with_queues(true)
            .with_queue_inspection(true)
            .with_watch(true)
            .with_integrity_check(true)
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let now = self.clock.now();
        let data = self.store.data(); // one lock: every range from one snapshot
        Ok(read
            .ranges
            .iter()
            .map(|r| data.read_range(r, now))
            .collect())
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        self.store.commit(&write, self.clock.now())
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let settler = Arc::new(Settler {
            store: self.store.clone(),
            clock: self.clock.clone(),
        });
        let take = |now: DateTime<Utc>| {
            let mut data = self.store.data();
            let taken = match data.first_waiting() {
                Some(i) if data.waiting[i].ready_at <= now => {
                    let message = data.waiting.remove(i);
                    let token = data.leases.grant(message.id, self.handle);
                    let payload = message.payload.clone();
                    data.held.push((message, token));
                    Taken::Message(Delivery::new(settler.clone(), token, payload))
                }
                Some(i) => Taken::NextAt(Some(data.waiting[i].ready_at)),
                None => Taken::NextAt(None),
            };
            std::future::ready(Ok(taken))
        };
        let changes = self.store.shared.notifier.subscribe_queue();
        next_delivery(changes, &*self.clock, &self.signal, take).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        let now = self.clock.now();
        let data = self.store.data();
        let held = data.held.iter().map(|(message, _)| QueuedMessage {
            ready_at: now,
            ..message.clone()
        });
        let mut messages: Vec<QueuedMessage> = data.waiting.iter().cloned().chain(held).collect();
        messages.sort_by_key(|message| (message.ready_at, message.id));
        Ok(messages)
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        // Memory cannot be damaged: the report only counts what was looked at.
        let data = self.store.data();
        Ok(IntegrityReport {
            entries_checked: data.entries.len() as u64,
            messages_checked: (data.waiting.len() + data.held.len()) as u64,
            problems: Vec::new(),
        })
    }

    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        let store = self.store.clone();
        let clock = self.clock.clone();
        let reader: WatchReader = Arc::new(move |keys: Vec<Vec<u8>>| {
            let now = clock.now();
            let data = store.data();
            let current: Vec<WatchedEntry> = keys
                .iter()
                .map(|key| {
                    let entry = data.entries.get(key).filter(|e| !e.is_expired(now));
                    WatchedEntry::from(entry.map(|e| KvEntry::from_stored(key.clone(), e.clone())))
                })
                .collect();
            Box::pin(std::future::ready(Ok(current)))
        });
        Ok(watch_stream(
            keys.into_inner(),
            reader,
            &self.signal,
            self.clock.clone(),
        ))
    }

    /// Ends this handle's watches and waiting consumers, and gives back the messages it holds as
    /// failed deliveries (their consumers are gone with the handle).
    async fn close(&self) -> Result<(), KvError> {
        self.signal.close();
        let now = self.clock.now();
        let effects = {
            let mut data = self.store.data();
            let mut effects = Effects::default();
            for id in data.leases.close_owner(self.handle) {
                if let Some(at) = data.held.iter().position(|(m, _)| m.id == id) {
                    let (message, _) = data.held.swap_remove(at);
                    effects.merge(data.settle(message, DeliveryOutcome::Failed, now)?);
                }
            }
            effects
        };
        self.store.shared.notifier.notify(&effects);
        Ok(())
    }
}

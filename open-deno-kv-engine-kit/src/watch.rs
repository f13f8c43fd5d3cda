//! Watch, written once: a stream that re-reads the watched keys whenever a commit may have
//! changed one of them, or when a watched entry reaches its expiry time, and emits only when
//! something changed.
//!
//! A backend owns a [`ChangeSignal`] and builds each watch with [`watch_stream`], passing a
//! function that reads the keys' current entries. After every commit it names the keys the
//! commit wrote ([`ChangeSignal::notify_keys`], or [`ChangedKeys`] collected over a group of
//! commits and handed to [`ChangeSignal::notify_changed`]); only the watches of those keys wake
//! and re-read. When it cannot know the keys (SQLite learning of another process's commit), it
//! wakes them all ([`ChangeSignal::notify_all`]). [`ChangeSignal::close`] ends every stream.
//!
//! The cost of a commit is one map lookup per written key, whatever the number of watches on
//! other keys. Re-reads are bounded too: at most [`MAX_CONCURRENT_WATCH_READS`] watch re-reads
//! run at once in the process. A commit that wakes 2,000 watches on one key therefore does not
//! start 2,000 blocking reads together, each of which would take a thread (a blocking engine's
//! read leaves the executor through [`crate::run_blocking`], which on tokio's multi-thread
//! runtime hands the worker's other tasks to a fresh thread for the duration of the read).
//!
//! Rapid commits may be coalesced into one emission, as Deno allows; an emission never shows a
//! state older than the previous one.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tokio::sync::{Notify, Semaphore, watch};

use crate::{Clock, KeyRange, KvEntry, KvError, Versionstamp, WatchKeyOutput, WatchStream};

mod range;

use range::RangeWatcher;
pub use range::{blocking_range_watch_stream, range_watch_stream};

// The data of watching (what a range watch emits, what a commit changed) is the model's; named
// here too, so an engine finds every watch item under one path.
pub use open_deno_kv_model::watch::*;

/// How many watch re-reads may run at the same time in one process (across every signal). A
/// re-read of a blocking engine occupies a thread while it runs; this bounds those threads.
pub const MAX_CONCURRENT_WATCH_READS: usize = 8;

/// Taken by every watch re-read; see [`MAX_CONCURRENT_WATCH_READS`].
static WATCH_READS: Semaphore = Semaphore::const_new(MAX_CONCURRENT_WATCH_READS);

/// Tells watchers that a commit may have changed their keys, or that the backend closed.
#[derive(Debug)]
pub struct ChangeSignal {
    shared: Arc<SignalShared>,
}

#[derive(Debug, Default)]
struct SignalShared {
    registry: Mutex<Registry>,
    closed: AtomicBool,
    /// Completes [`ChangeSignal::wait_closed`].
    closed_sender: watch::Sender<bool>,
}

/// The live watchers, by id, by watched key, and (range watches) by watched range.
#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    /// Every watcher, key or range, by id.
    watchers: HashMap<u64, Arc<Notify>>,
    /// Key watchers by key, ordered so a deleted range finds its watchers without a scan.
    by_key: BTreeMap<Vec<u8>, HashMap<u64, Arc<Notify>>>,
    /// Range watchers by id, each with the changes it has not read yet. A commit's key is
    /// checked against every range: cheap while range watches are few, as they are meant to be.
    ranges: HashMap<u64, Arc<RangeWatcher>>,
}

impl SignalShared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Every update is a handful of map inserts or removals that cannot panic halfway.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

impl Default for ChangeSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeSignal {
    /// A signal with no watchers yet.
    pub fn new() -> Self {
        ChangeSignal {
            shared: Arc::new(SignalShared::default()),
        }
    }

    /// Wakes the watchers of these encoded keys: a commit wrote (set or deleted) them. Watchers
    /// of other keys stay asleep.
    pub fn notify_keys<K: AsRef<[u8]>>(&self, keys: impl IntoIterator<Item = K>) {
        let registry = self.shared.registry();
        if registry.watchers.is_empty() {
            return;
        }
        for key in keys {
            let key = key.as_ref();
            if let Some(watchers) = registry.by_key.get(key) {
                // A watcher woken twice still re-reads once: `notify_one` keeps one permit.
                watchers.values().for_each(|wake| wake.notify_one());
            }
            for watcher in registry.ranges.values() {
                if watcher.range.contains(key) {
                    watcher.note_key(key);
                }
            }
        }
    }

    /// Wakes the watchers of every key in these ranges: a commit deleted each range as a whole
    /// ([`crate::MutationKind::DeleteRange`]). A range watch overlapping one is told to read its
    /// range again ([`RangeWatchEvent::Reread`]): which of its keys existed is not known here.
    pub fn notify_ranges<'r>(&self, ranges: impl IntoIterator<Item = &'r KeyRange>) {
        let registry = self.shared.registry();
        if registry.watchers.is_empty() {
            return;
        }
        for range in ranges {
            if range.is_empty() {
                continue; // `BTreeMap::range` refuses an inverted range
            }
            for (_, watchers) in registry
                .by_key
                .range(range.start.clone()..range.end.clone())
            {
                watchers.values().for_each(|wake| wake.notify_one());
            }
            for watcher in registry.ranges.values() {
                if watcher.range.overlaps(range) {
                    watcher.note_reread();
                }
            }
        }
    }

    /// Wakes every watcher: something changed and the keys are unknown (for example another
    /// process committed to the same file). Range watches are told to read their ranges again.
    pub fn notify_all(&self) {
        let registry = self.shared.registry();
        registry.ranges.values().for_each(|w| w.note_reread());
        registry
            .watchers
            .values()
            .for_each(|wake| wake.notify_one());
    }

    /// Wakes the watchers `changed` names ([`ChangedKeys::all`] wakes every one).
    pub fn notify_changed(&self, changed: &ChangedKeys) {
        if changed.is_all() {
            self.notify_all();
        } else {
            self.notify_keys(changed.keys());
            self.notify_ranges(changed.ranges());
        }
    }

    /// Ends every watch stream (after one last read is not attempted).
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.closed_sender.send_replace(true);
        self.notify_all();
    }

    /// Whether [`ChangeSignal::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// Completes once [`ChangeSignal::close`] has been called (at once if it already was).
    pub async fn wait_closed(&self) {
        let mut receiver = self.shared.closed_sender.subscribe();
        // `wait_for` only fails if the sender is gone, and `self` holds it.
        let _ = receiver.wait_for(|closed| *closed).await;
    }

    /// How many watch streams are registered (alive and not dropped).
    pub fn watcher_count(&self) -> usize {
        self.shared.registry().watchers.len()
    }

    /// Registers a watcher of `keys`; it is removed when the returned value is dropped.
    fn register(&self, keys: &[Vec<u8>]) -> Registration {
        let wake = Arc::new(Notify::new());
        let mut registry = self.shared.registry();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.watchers.insert(id, wake.clone());
        for key in keys {
            registry
                .by_key
                .entry(key.clone())
                .or_default()
                .insert(id, wake.clone());
        }
        Registration {
            shared: self.shared.clone(),
            id,
            keys: keys.to_vec(),
            wake,
        }
    }

    /// Registers a watcher of `range`; it is removed when the returned registration is dropped.
    fn register_range(&self, range: KeyRange) -> (Registration, Arc<RangeWatcher>) {
        let wake = Arc::new(Notify::new());
        let watcher = Arc::new(RangeWatcher::new(range, wake.clone()));
        let mut registry = self.shared.registry();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.watchers.insert(id, wake.clone());
        registry.ranges.insert(id, watcher.clone());
        let registration = Registration {
            shared: self.shared.clone(),
            id,
            keys: Vec::new(),
            wake,
        };
        (registration, watcher)
    }
}

/// One watch stream's entry in the registry; unregisters on drop (the stream was dropped).
struct Registration {
    shared: Arc<SignalShared>,
    id: u64,
    keys: Vec<Vec<u8>>,
    wake: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.shared.registry();
        registry.watchers.remove(&self.id);
        registry.ranges.remove(&self.id);
        for key in &self.keys {
            if let Some(watchers) = registry.by_key.get_mut(key) {
                watchers.remove(&self.id);
                if watchers.is_empty() {
                    registry.by_key.remove(key);
                }
            }
        }
    }
}

/// One watched key's current state, as the backend's reader returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEntry {
    /// The visible entry, or `None` if absent or expired.
    pub entry: Option<KvEntry>,
    /// When that entry expires, so the stream can wake up and report it gone.
    pub expires_at: Option<DateTime<Utc>>,
}

impl From<Option<KvEntry>> for WatchedEntry {
    /// A watched key's state from its visible entry (`None`: absent or expired), which expires
    /// when the entry does.
    fn from(entry: Option<KvEntry>) -> Self {
        WatchedEntry {
            expires_at: entry.as_ref().and_then(|entry| entry.expires_at),
            entry,
        }
    }
}

/// Reads the current state of the watched keys, in order, from one snapshot.
pub type WatchReader = Arc<
    dyn Fn(Vec<Vec<u8>>) -> BoxFuture<'static, Result<Vec<WatchedEntry>, KvError>> + Send + Sync,
>;

struct WatchState {
    keys: Vec<Vec<u8>>,
    reader: WatchReader,
    clock: Arc<dyn Clock>,
    /// This stream's entry in the signal's registry (its wake-up permit inside).
    registration: Registration,
    /// Read at once on the first poll, without waiting for a commit.
    first: bool,
    /// What was last emitted, to emit only changes.
    diff: WatchDiff,
    /// Earliest expiry among the watched entries last read.
    next_expiry: Option<DateTime<Utc>>,
    done: bool,
}

/// [`watch_stream`] for a blocking engine: `read` reads the current entries of the watched keys
/// from one snapshot (blocking work, run through [`crate::run_blocking`] so it leaves the
/// executor as every read of the engine does).
pub fn blocking_watch_stream(
    keys: Vec<Vec<u8>>,
    signal: &ChangeSignal,
    clock: Arc<dyn Clock>,
    read: impl Fn(&[Vec<u8>]) -> Result<Vec<WatchedEntry>, KvError> + Send + Sync + 'static,
) -> WatchStream {
    watch_stream(keys, blocking_reader(read), signal, clock)
}

/// A [`WatchReader`] over a blocking read of the keys' entries (run through
/// [`crate::run_blocking`]).
fn blocking_reader(
    read: impl Fn(&[Vec<u8>]) -> Result<Vec<WatchedEntry>, KvError> + Send + Sync + 'static,
) -> WatchReader {
    let read = Arc::new(read);
    Arc::new(move |keys| {
        let read = read.clone();
        Box::pin(crate::run_blocking(move || read(&keys)))
    })
}

/// Builds the watch stream for `keys` over `reader`, woken by `signal` when a commit writes one
/// of `keys` and by `clock` at expiry times. Validate the keys (with
/// [`crate::Limits::validate_watch`]) before calling.
pub fn watch_stream(
    keys: Vec<Vec<u8>>,
    reader: WatchReader,
    signal: &ChangeSignal,
    clock: Arc<dyn Clock>,
) -> WatchStream {
    let state = WatchState {
        registration: signal.register(&keys),
        keys,
        reader,
        clock,
        first: true,
        diff: WatchDiff::new(),
        next_expiry: None,
        done: false,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if state.done || !wait_for_change(&mut state).await {
                return None;
            }
            let read = {
                // Only fails once closed, and the static semaphore never is.
                let _permit = WATCH_READS.acquire().await.ok()?;
                (state.reader)(state.keys.clone()).await
            };
            let current = match read {
                Ok(current) => current,
                Err(err) => {
                    state.done = true;
                    return Some((Err(err), state));
                }
            };
            if let Some(emission) = diff(&mut state, current) {
                return Some((Ok(emission), state));
            }
        }
    })
    .boxed()
}

/// Waits for a commit to one of the keys, or the next watched expiry (the first call returns
/// at once). `false` once the backend closed.
async fn wait_for_change(state: &mut WatchState) -> bool {
    if std::mem::take(&mut state.first) {
        return !state.registration.shared.is_closed();
    }
    let expiry = state.next_expiry.map(|at| state.clock.sleep_until(at));
    let woken = state.registration.wake.notified();
    match expiry {
        Some(expiry) => tokio::select! {
            () = woken => {}
            () = expiry => {}
        },
        None => woken.await,
    }
    !state.registration.shared.is_closed()
}

/// Compares the new read with the last emission; returns the emission if anything changed.
fn diff(state: &mut WatchState, current: Vec<WatchedEntry>) -> Option<Vec<WatchKeyOutput>> {
    let now = state.clock.now();
    state.next_expiry = current
        .iter()
        .filter_map(|w| w.expires_at)
        .filter(|at| *at > now)
        .min();
    state
        .diff
        .next(current.into_iter().map(|w| w.entry).collect())
}

/// What a watch emitted last, to turn each new state of the watched keys into the emission
/// Deno's `watch` makes: every key the first time, then only when a versionstamp moved, with
/// the keys that did not move as [`WatchKeyOutput::Unchanged`].
///
/// Used by [`watch_stream`] over a backend's reads, and by a client that receives the keys'
/// states from elsewhere (open-deno-kv-remote, from a KV Connect watch stream).
///
/// ```
/// use open_deno_kv_engine_kit::watch::WatchDiff;
/// use open_deno_kv_engine_kit::{KvEntry, KvValue, Versionstamp, WatchKeyOutput};
/// let entry = |version: u64| KvEntry {
///     key: vec![2, b'k', 0].into(),
///     value: KvValue::Bytes(vec![].into()),
///     versionstamp: Versionstamp::from_version(version, 0),
///     expires_at: None,
/// };
/// let mut diff = WatchDiff::new();
/// assert_eq!(diff.next(vec![None, Some(entry(1))]).map(|e| e.len()), Some(2));
/// assert_eq!(diff.next(vec![None, Some(entry(1))]), None); // nothing moved
/// assert_eq!(
///     diff.next(vec![Some(entry(2)), Some(entry(1))]),
///     Some(vec![WatchKeyOutput::Changed(Some(entry(2))), WatchKeyOutput::Unchanged]),
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchDiff {
    /// The versionstamp last emitted for each key (`None` inside = absent); `None` before the
    /// first emission.
    last: Option<Vec<Option<Versionstamp>>>,
}

impl WatchDiff {
    /// Nothing emitted yet: the next state is emitted whole.
    pub fn new() -> Self {
        Self::default()
    }

    /// The emission for `current` (every watched key's entry now, in order, `None` when
    /// absent), or `None` when no key's versionstamp moved since the last emission.
    pub fn next(&mut self, current: Vec<Option<KvEntry>>) -> Option<Vec<WatchKeyOutput>> {
        let stamps: Vec<Option<Versionstamp>> = current
            .iter()
            .map(|entry| entry.as_ref().map(|e| e.versionstamp))
            .collect();
        let emission = match &self.last {
            None => current.into_iter().map(WatchKeyOutput::Changed).collect(),
            Some(last) if *last == stamps => return None,
            Some(last) => current
                .into_iter()
                .zip(last)
                .zip(&stamps)
                .map(|((entry, before), now)| {
                    if now == before {
                        WatchKeyOutput::Unchanged
                    } else {
                        WatchKeyOutput::Changed(entry)
                    }
                })
                .collect(),
        };
        self.last = Some(stamps);
        Some(emission)
    }
}

#[cfg(test)]
mod tests;

//! What a watch reports, and what a commit tells the watchers: the data of watching, without the
//! machinery (the streams, the signal that wakes them and their registry are engine plumbing, in
//! open-deno-kv-engine-kit's `watch` module).
//!
//! A range watch ([`crate::Backend::watch_range`]) watches every key under a prefix (or between
//! two bounds). A range can hold millions of keys, so it is not re-read after each commit:
//! commits name the keys they wrote inside it, and the stream reads just those and emits their
//! current states. What it emits:
//!
//! 1. first, [`RangeWatchEvent::Reread`]: "read the range now" (a consumer lists it and builds
//!    its picture). Every commit from the moment the watch was created is reported after it.
//! 2. then [`RangeWatchEvent::Changed`] with the keys changed since the last event, each with its
//!    current entry (`None` once deleted). Several commits may be coalesced into one event, and a
//!    key reported once may be reported again with the same state, but an event never shows a
//!    key in a state older than the last one shown (every state is read after the commits it
//!    reports).
//! 3. [`RangeWatchEvent::Reread`] again whenever the watch cannot say which keys changed: a
//!    commit deleted a range overlapping the watched one (which keys existed is unknown), the
//!    engine learnt of commits it cannot name (another process's), or more than
//!    [`MAX_PENDING_RANGE_CHANGES`] keys changed before the consumer asked for the next event.
//!
//! Expiry is not a commit: an entry that reaches its expiry time is not reported. Every entry
//! carries its `expires_at`, so a consumer that mirrors the range drops it then.
//!
//! Applying the events in order to a copy of the range (replace it on `Reread`, set or remove
//! each changed key on `Changed`) keeps the copy equal to the range as of the last event.

use crate::{KeyRange, KvEntry};

/// The most changed keys a range watch holds for a consumer that has not asked for them yet;
/// one more and the watch forgets them and sends [`RangeWatchEvent::Reread`] instead. Also the
/// most changes one [`RangeWatchEvent::Changed`] carries.
pub const MAX_PENDING_RANGE_CHANGES: usize = 1000;

/// What a range watch emits; see the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeWatchEvent {
    /// The watch cannot say what changed (it just started, a range was deleted, the consumer
    /// fell behind, another process committed): read the range again.
    Reread,
    /// Keys of the range that changed since the last event, in key order, each with its current
    /// state.
    Changed(Vec<RangeChange>),
}

/// One changed key of a watched range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeChange {
    /// The encoded key.
    pub key: Vec<u8>,
    /// Its entry now, or `None` if it was deleted (or has expired).
    pub entry: Option<KvEntry>,
}

/// The keys a group of commits wrote, collected while the group runs and handed to
/// [`ChangeSignal::notify_changed`] once it is durable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangedKeys {
    keys: Vec<Vec<u8>>,
    ranges: Vec<KeyRange>,
    all: bool,
}

impl ChangedKeys {
    /// Nothing changed yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key may have changed (the keys are unknown).
    pub fn all() -> Self {
        ChangedKeys {
            keys: Vec::new(),
            ranges: Vec::new(),
            all: true,
        }
    }

    /// Adds keys a commit wrote.
    pub fn extend<K: Into<Vec<u8>>>(&mut self, keys: impl IntoIterator<Item = K>) {
        if !self.all {
            self.keys.extend(keys.into_iter().map(Into::into));
        }
    }

    /// Adds a range a commit deleted as a whole.
    pub fn extend_range(&mut self, range: KeyRange) {
        if !self.all && !range.is_empty() {
            self.ranges.push(range);
        }
    }

    /// Adds everything `other` names.
    pub fn merge(&mut self, other: ChangedKeys) {
        if other.all {
            *self = ChangedKeys::all();
        } else {
            self.extend(other.keys);
            other
                .ranges
                .into_iter()
                .for_each(|range| self.extend_range(range));
        }
    }

    /// Whether every key may have changed ([`ChangedKeys::all`]): every watcher must wake.
    pub fn is_all(&self) -> bool {
        self.all
    }

    /// The keys named one by one (empty when [`ChangedKeys::is_all`]).
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// The ranges deleted as a whole (empty when [`ChangedKeys::is_all`]).
    pub fn ranges(&self) -> &[KeyRange] {
        &self.ranges
    }

    /// Whether no watcher needs waking.
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty() && self.ranges.is_empty()
    }
}

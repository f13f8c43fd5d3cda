//! Who a commit wakes: the watches of the keys it wrote, and the queue's consumers.
//!
//! An engine collects the [`Effects`] of the commands it commits (the keys written, whether a
//! message became ready) and, once the commit is durable, hands them to its [`Notifier`], which
//! wakes the [`ChangeSignal`] of every open handle on the store and every waiting dequeue. Every
//! engine wakes its waiters this way.
//!
//! ```
//! use std::sync::Arc;
//! use open_deno_kv_engine_kit::{ChangeSignal, Effects, Notifier};
//!
//! let notifier = Notifier::new();
//! let handle_signal = Arc::new(ChangeSignal::new());
//! notifier.register(&handle_signal);
//! let mut consumers = notifier.subscribe_queue();
//!
//! let mut effects = Effects::default();
//! effects.changed.extend([b"\x02a\x00".to_vec()]);
//! effects.queue = true;
//! notifier.notify(&effects);
//! assert!(consumers.has_changed().unwrap());
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::watch;

use crate::{ChangeSignal, ChangedKeys, WriteOutcome};

/// What a commit (or a group of commits) changed, for the waiters it must wake.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Effects {
    /// The entries written (set or deleted): their watches wake.
    pub changed: ChangedKeys,
    /// A message became ready (an enqueue, a retry, a message given back): consumers wake.
    pub queue: bool,
}

impl Effects {
    /// Adds what a committed write changed (nothing for a failed check).
    pub fn record(&mut self, outcome: &WriteOutcome) {
        if let WriteOutcome::Committed {
            changed_keys,
            changed_ranges,
            enqueued,
        } = outcome
        {
            self.changed.extend(changed_keys.iter().cloned());
            changed_ranges
                .iter()
                .for_each(|range| self.changed.extend_range(range.clone()));
            self.queue |= enqueued;
        }
    }

    /// Adds `other`'s changes to these.
    pub fn merge(&mut self, other: Effects) {
        self.changed.merge(other.changed);
        self.queue |= other.queue;
    }
}

/// Wakes the waiters of every handle on one store after its commits.
#[derive(Debug)]
pub struct Notifier {
    /// One signal per handle; told the keys of every commit that changed entries.
    watchers: Mutex<Vec<Weak<ChangeSignal>>>,
    /// Bumped whenever a message may have become due.
    queue: watch::Sender<u64>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// A notifier with no handle registered.
    pub fn new() -> Self {
        Notifier {
            watchers: Mutex::new(Vec::new()),
            queue: watch::channel(0).0,
        }
    }

    fn watchers(&self) -> MutexGuard<'_, Vec<Weak<ChangeSignal>>> {
        // A list of weak pointers stays consistent whatever panicked while it was locked.
        self.watchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a handle's signal (dropped handles are forgotten on the way).
    pub fn register(&self, signal: &Arc<ChangeSignal>) {
        let mut watchers = self.watchers();
        watchers.retain(|w| w.strong_count() > 0);
        watchers.push(Arc::downgrade(signal));
    }

    /// Wakes whom `effects` concern.
    pub fn notify(&self, effects: &Effects) {
        self.notify_watchers(&effects.changed);
        if effects.queue {
            self.bump_queue();
        }
    }

    /// Wakes everyone: the store changed in ways nobody knows (another process committed, a file
    /// was reopened at an older commit).
    pub fn notify_everything(&self) {
        self.notify_watchers(&ChangedKeys::all());
        self.bump_queue();
    }

    /// Wakes the watch streams of the changed keys, on every handle.
    pub fn notify_watchers(&self, changed: &ChangedKeys) {
        if changed.is_empty() {
            return;
        }
        for signal in self.watchers().iter().filter_map(Weak::upgrade) {
            signal.notify_changed(changed);
        }
    }

    /// Wakes every waiting queue consumer.
    pub fn bump_queue(&self) {
        self.queue.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes when a message may have become due (for
    /// [`crate::queue::next_delivery`]).
    pub fn subscribe_queue(&self) -> watch::Receiver<u64> {
        self.queue.subscribe()
    }
}

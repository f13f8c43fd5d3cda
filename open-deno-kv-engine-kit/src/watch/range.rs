//! Range watches: every key under a prefix (or between two bounds), not at most ten named keys.
//!
//! Deno's `watch` re-reads its keys after each commit that touches one and compares. A range can
//! hold millions of keys, so a range watch cannot re-read it: instead the [`super::ChangeSignal`]
//! records, per range watcher, the keys that commits wrote inside the range, and the stream reads
//! just those keys, from one snapshot, and emits their current states. What it emits, and when it
//! asks for a whole re-read instead, is the model's (see [`RangeWatchEvent`]).
//!
//! A slow consumer is handled by that re-read: writers never wait for a watch, and what a watch
//! holds for its consumer is bounded (at most [`MAX_PENDING_RANGE_CHANGES`] keys; beyond, one
//! flag).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::stream::{self, StreamExt};
use tokio::sync::Notify;

use super::{ChangeSignal, Registration, WATCH_READS, WatchReader, WatchedEntry, blocking_reader};
use crate::{KeyRange, KvError, RangeWatchStream};
use open_deno_kv_model::ValidatedRange;
use open_deno_kv_model::watch::{MAX_PENDING_RANGE_CHANGES, RangeChange, RangeWatchEvent};

/// One range watcher as the signal's registry holds it: the range, and what commits noted for
/// the stream since it last looked.
#[derive(Debug)]
pub(crate) struct RangeWatcher {
    pub(crate) range: KeyRange,
    pending: Mutex<Pending>,
    wake: Arc<Notify>,
}

/// Changes noted for a range watcher and not yet read.
#[derive(Debug, Default)]
struct Pending {
    keys: BTreeSet<Vec<u8>>,
    reread: bool,
}

impl RangeWatcher {
    pub(crate) fn new(range: KeyRange, wake: Arc<Notify>) -> Self {
        RangeWatcher {
            range,
            pending: Mutex::new(Pending::default()),
            wake,
        }
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        // A set insert or a flag: nothing that can panic half-way.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A commit wrote `key` (inside the range).
    pub(crate) fn note_key(&self, key: &[u8]) {
        {
            let mut pending = self.pending();
            if !pending.reread {
                pending.keys.insert(key.to_vec());
                if pending.keys.len() > MAX_PENDING_RANGE_CHANGES {
                    pending.keys = BTreeSet::new();
                    pending.reread = true;
                }
            }
        }
        self.wake.notify_one();
    }

    /// Something changed in the range that cannot be named key by key.
    pub(crate) fn note_reread(&self) {
        {
            let mut pending = self.pending();
            pending.keys = BTreeSet::new();
            pending.reread = true;
        }
        self.wake.notify_one();
    }

    /// Takes what was noted.
    fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending())
    }
}

struct RangeWatchState {
    reader: WatchReader,
    watcher: Arc<RangeWatcher>,
    registration: Registration,
    first: bool,
    done: bool,
}

/// [`range_watch_stream`] for a blocking engine, over a range the checked layer validated:
/// `read` reads the current entries of the given keys from one snapshot (the same function the
/// engine's key watches use), run through [`crate::run_blocking`].
pub fn blocking_range_watch_stream(
    range: ValidatedRange,
    signal: &ChangeSignal,
    read: impl Fn(&[Vec<u8>]) -> Result<Vec<WatchedEntry>, KvError> + Send + Sync + 'static,
) -> RangeWatchStream {
    range_watch_stream(range.into_inner(), blocking_reader(read), signal)
}

/// Builds the watch of every key in `range`, woken by `signal` when commits write keys in it;
/// `reader` reads the current entries of given keys from one snapshot (the reader of the
/// engine's key watches). Validate the range (with [`crate::Limits::accept_range`]) before
/// calling. The stream ends when the signal closes.
pub fn range_watch_stream(
    range: KeyRange,
    reader: WatchReader,
    signal: &ChangeSignal,
) -> RangeWatchStream {
    let (registration, watcher) = signal.register_range(range);
    let state = RangeWatchState {
        reader,
        watcher,
        registration,
        first: true,
        done: false,
    };
    stream::unfold(state, |mut state| async move {
        if state.done || state.registration.shared.is_closed() {
            return None;
        }
        if std::mem::take(&mut state.first) {
            return Some((Ok(RangeWatchEvent::Reread), state));
        }
        loop {
            state.registration.wake.notified().await;
            if state.registration.shared.is_closed() {
                return None;
            }
            let pending = state.watcher.take();
            if pending.reread {
                return Some((Ok(RangeWatchEvent::Reread), state));
            }
            if pending.keys.is_empty() {
                continue;
            }
            let keys: Vec<Vec<u8>> = pending.keys.into_iter().collect();
            let read = {
                // Only fails once closed, and the static semaphore never is.
                let _permit = WATCH_READS.acquire().await.ok()?;
                (state.reader)(keys.clone()).await
            };
            return match read {
                Ok(current) => {
                    let changes = keys
                        .into_iter()
                        .zip(current)
                        .map(|(key, watched)| RangeChange {
                            key,
                            entry: watched.entry,
                        })
                        .collect();
                    Some((Ok(RangeWatchEvent::Changed(changes)), state))
                }
                Err(err) => {
                    state.done = true;
                    Some((Err(err), state))
                }
            };
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests;

//! Watch, written once: a stream that re-reads the watched keys whenever the backend signals a
//! commit, or when a watched entry reaches its expiry time, and emits only when something changed.
//!
//! A backend owns a [`ChangeSignal`], calls [`ChangeSignal::notify`] after every commit (and
//! [`ChangeSignal::close`] when it closes), and builds each watch with [`watch_stream`], passing a
//! function that reads the keys' current entries. Rapid commits may be coalesced into one
//! emission, as Deno allows; an emission never shows a state older than the previous one.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tokio::sync::watch;

use crate::{Clock, KvEntry, KvError, Versionstamp, WatchKeyOutput, WatchStream};

/// Tells watchers that something was committed, or that the backend closed.
#[derive(Debug)]
pub struct ChangeSignal {
    sender: watch::Sender<SignalState>,
}

#[derive(Debug, Clone, Copy, Default)]
struct SignalState {
    commits: u64,
    closed: bool,
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
            sender: watch::channel(SignalState::default()).0,
        }
    }

    /// Wakes every watcher: a commit may have changed its keys.
    pub fn notify(&self) {
        self.sender.send_modify(|state| state.commits += 1);
    }

    /// Ends every watch stream (after one last read is not attempted).
    pub fn close(&self) {
        self.sender.send_modify(|state| state.closed = true);
    }

    /// Whether [`ChangeSignal::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.sender.borrow().closed
    }

    /// Completes once [`ChangeSignal::close`] has been called (at once if it already was).
    pub async fn wait_closed(&self) {
        let mut receiver = self.sender.subscribe();
        // `wait_for` only fails if the sender is gone, and `self` holds it.
        let _ = receiver.wait_for(|state| state.closed).await;
    }

    fn subscribe(&self) -> watch::Receiver<SignalState> {
        self.sender.subscribe()
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

/// Reads the current state of the watched keys, in order, from one snapshot.
pub type WatchReader = Arc<
    dyn Fn(Vec<Vec<u8>>) -> BoxFuture<'static, Result<Vec<WatchedEntry>, KvError>> + Send + Sync,
>;

struct WatchState {
    keys: Vec<Vec<u8>>,
    reader: WatchReader,
    clock: Arc<dyn Clock>,
    changes: watch::Receiver<SignalState>,
    /// What was last emitted for each key (`None` inside = absent); `None` before the first.
    last: Option<Vec<Option<Versionstamp>>>,
    /// Earliest expiry among the watched entries last read.
    next_expiry: Option<DateTime<Utc>>,
    done: bool,
}

/// Builds the watch stream for `keys` over `reader`, woken by `signal` and by `clock` at expiry
/// times. Validate the keys (with [`crate::Limits::validate_watch`]) before calling.
pub fn watch_stream(
    keys: Vec<Vec<u8>>,
    reader: WatchReader,
    signal: &ChangeSignal,
    clock: Arc<dyn Clock>,
) -> WatchStream {
    let mut changes = signal.subscribe();
    changes.mark_changed(); // the first poll reads at once
    let state = WatchState {
        keys,
        reader,
        clock,
        changes,
        last: None,
        next_expiry: None,
        done: false,
    };
    stream::unfold(state, |mut state| async move {
        loop {
            if state.done || !wait_for_change(&mut state).await {
                return None;
            }
            let read = (state.reader)(state.keys.clone()).await;
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

/// Waits for a commit signal or the next watched expiry. `false` once the backend closed.
async fn wait_for_change(state: &mut WatchState) -> bool {
    let expiry = state.next_expiry.map(|at| state.clock.sleep_until(at));
    let changed = state.changes.changed();
    let outcome = match expiry {
        Some(expiry) => tokio::select! {
            changed = changed => changed.is_ok(),
            () = expiry => true,
        },
        None => changed.await.is_ok(),
    };
    outcome && !state.changes.borrow_and_update().closed
}

/// Compares the new read with the last emission; returns the emission if anything changed.
fn diff(state: &mut WatchState, current: Vec<WatchedEntry>) -> Option<Vec<WatchKeyOutput>> {
    let now = state.clock.now();
    state.next_expiry = current
        .iter()
        .filter_map(|w| w.expires_at)
        .filter(|at| *at > now)
        .min();
    let stamps: Vec<Option<Versionstamp>> = current
        .iter()
        .map(|w| w.entry.as_ref().map(|e| e.versionstamp))
        .collect();
    let emission = match &state.last {
        None => current
            .into_iter()
            .map(|w| WatchKeyOutput::Changed(w.entry))
            .collect(),
        Some(last) if *last == stamps => return None,
        Some(last) => current
            .into_iter()
            .zip(last)
            .map(|(w, before)| {
                if w.entry.as_ref().map(|e| e.versionstamp) == *before {
                    WatchKeyOutput::Unchanged
                } else {
                    WatchKeyOutput::Changed(w.entry)
                }
            })
            .collect(),
    };
    state.last = Some(stamps);
    Some(emission)
}

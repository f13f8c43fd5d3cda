//! What a handle tells its own waiters after a change: watches (through open-deno-kv-engine-kit's
//! [`ChangeSignal`]) and waiting queue consumers, both woken through the kit's [`Notifier`]; and
//! whether any of them waits at all ([`Interested`]), which decides whether the handle listens for
//! other processes' commits (the `listener` module).

use std::sync::Arc;

use open_deno_kv_engine_kit::{ChangeSignal, Notifier};
use tokio::sync::watch;

/// The wake-ups of one handle. Commits of this handle name the keys they wrote
/// ([`open_deno_kv_engine_kit::Effects`]); commits of other processes arrive through the listener, which cannot
/// name them and wakes every watch.
#[derive(Debug)]
pub(crate) struct Events {
    /// Watches, and the closed flag every waiter observes.
    pub(crate) signal: Arc<ChangeSignal>,
    /// Wakes the signal's watches and the waiting queue consumers.
    pub(crate) notifier: Notifier,
    /// How many watch streams and waiting dequeues need other processes' commits announced.
    interest: watch::Sender<usize>,
}

/// A watch stream or a waiting dequeue of the handle, as long as it lives: the handle listens
/// for other processes' commits while one exists ([`Events::interested`]).
#[derive(Debug)]
pub(crate) struct Interested(Arc<Events>);

impl Events {
    pub(crate) fn new() -> Self {
        let signal = Arc::new(ChangeSignal::new());
        let notifier = Notifier::new();
        notifier.register(&signal);
        Events {
            signal,
            notifier,
            interest: watch::channel(0).0,
        }
    }

    /// Counts a waiter that needs other processes' commits until the returned value is dropped.
    /// Take it before the waiter first reads (a watch registers with the signal when it is built):
    /// when the listener starts listening for it, it wakes every waiter once, so a commit made
    /// before the `LISTEN` took effect is not missed.
    pub(crate) fn interested(self: &Arc<Self>) -> Interested {
        self.interest.send_modify(|count| *count += 1);
        Interested(self.clone())
    }

    /// Follows the number of [`Interested`] waiters.
    pub(crate) fn interest(&self) -> watch::Receiver<usize> {
        self.interest.subscribe()
    }
}

impl Drop for Interested {
    fn drop(&mut self) {
        self.0
            .interest
            .send_modify(|count| *count = count.saturating_sub(1));
    }
}

/// The payload of this crate's notifications: who committed, and what changed (`k` entries, `q`
/// the queue).
pub(crate) fn payload(origin: &str, entries: bool, queue: bool) -> String {
    let mut text = String::with_capacity(origin.len() + 3);
    text.push_str(origin);
    text.push(' ');
    if entries {
        text.push('k');
    }
    if queue {
        text.push('q');
    }
    text
}

/// A notification's payload read back: `(origin, entries changed, queue changed)`. A payload of
/// another shape counts as "everything may have changed".
pub(crate) fn parse_payload(text: &str) -> (&str, bool, bool) {
    match text.split_once(' ') {
        Some((origin, what)) => (origin, what.contains('k'), what.contains('q')),
        None => ("", true, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_strangers_mean_everything() {
        assert_eq!(
            parse_payload(&payload("ab", true, false)),
            ("ab", true, false)
        );
        assert_eq!(
            parse_payload(&payload("ab", false, true)),
            ("ab", false, true)
        );
        assert_eq!(parse_payload("garbage"), ("", true, true));
    }
}

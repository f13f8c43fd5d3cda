//! What a handle tells its own waiters after a change: watches (through kv-proto's
//! [`ChangeSignal`]) and waiting queue consumers.

use kv_proto::ChangeSignal;
use tokio::sync::watch;

/// The wake-ups of one handle. Commits of this handle name the keys they wrote; commits of other
/// processes arrive through the listener, which cannot name them and wakes every watch.
#[derive(Debug)]
pub(crate) struct Events {
    /// Watches, and the closed flag every waiter observes.
    pub(crate) signal: ChangeSignal,
    /// Bumped whenever a message may have become due.
    queue: watch::Sender<u64>,
}

impl Events {
    pub(crate) fn new() -> Self {
        Events {
            signal: ChangeSignal::new(),
            queue: watch::Sender::new(0),
        }
    }

    /// A message may have become due: wake the waiting consumers.
    pub(crate) fn queue_changed(&self) {
        self.queue.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver for [`kv_proto::queue::next_delivery`].
    pub(crate) fn queue_changes(&self) -> watch::Receiver<u64> {
        self.queue.subscribe()
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

//! The signal wakes only the watches of the keys a commit wrote.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{FutureExt, StreamExt};

use super::*;
use crate::{ManualClock, WatchStream, ms_to_datetime};

/// A watch over `keys` whose reader counts its reads and always finds the keys absent.
fn counted_watch(signal: &ChangeSignal, keys: &[&[u8]]) -> (WatchStream, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let reader: WatchReader = Arc::new(move |keys: Vec<Vec<u8>>| {
        counter.fetch_add(1, Ordering::SeqCst);
        let absent = keys
            .iter()
            .map(|_| WatchedEntry {
                entry: None,
                expires_at: None,
            })
            .collect();
        futures::future::ready(Ok(absent)).boxed()
    });
    let clock = Arc::new(ManualClock::new(
        ms_to_datetime(1_000).expect("a valid time"),
    ));
    let keys = keys.iter().map(|k| k.to_vec()).collect();
    (watch_stream(keys, reader, signal, clock), reads)
}

/// Polls the stream once without waiting: an emission, or `None` while it sleeps.
fn poll_once(stream: &mut WatchStream) -> Option<Option<Result<Vec<WatchKeyOutput>, KvError>>> {
    stream.next().now_or_never()
}

#[test]
fn a_commit_wakes_only_the_watches_of_its_keys() {
    let signal = ChangeSignal::new();
    let (mut watch_ab, reads_ab) = counted_watch(&signal, &[b"a", b"b"]);
    let (mut watch_c, reads_c) = counted_watch(&signal, &[b"c"]);
    assert!(matches!(poll_once(&mut watch_ab), Some(Some(Ok(_)))));
    assert!(matches!(poll_once(&mut watch_c), Some(Some(Ok(_)))));
    assert_eq!(
        (
            reads_ab.load(Ordering::SeqCst),
            reads_c.load(Ordering::SeqCst)
        ),
        (1, 1)
    );

    signal.notify_keys([b"b".as_slice(), b"z".as_slice()]);
    // Nothing changed in the read, so neither stream emits; only `watch_ab` re-read.
    assert!(poll_once(&mut watch_ab).is_none());
    assert!(poll_once(&mut watch_c).is_none());
    assert_eq!(reads_ab.load(Ordering::SeqCst), 2);
    assert_eq!(
        reads_c.load(Ordering::SeqCst),
        1,
        "an unrelated commit woke the watch of c"
    );

    let mut changed = ChangedKeys::new();
    changed.extend([b"q".to_vec()]);
    signal.notify_changed(&changed);
    assert!(poll_once(&mut watch_ab).is_none());
    assert!(poll_once(&mut watch_c).is_none());
    assert_eq!(
        (
            reads_ab.load(Ordering::SeqCst),
            reads_c.load(Ordering::SeqCst)
        ),
        (2, 1)
    );
}

#[test]
fn notify_all_wakes_every_watch_and_close_ends_them() {
    let signal = ChangeSignal::new();
    let (mut watch_a, reads_a) = counted_watch(&signal, &[b"a"]);
    let (mut watch_b, reads_b) = counted_watch(&signal, &[b"b"]);
    assert!(poll_once(&mut watch_a).is_some());
    assert!(poll_once(&mut watch_b).is_some());

    signal.notify_changed(&ChangedKeys::all());
    assert!(poll_once(&mut watch_a).is_none());
    assert!(poll_once(&mut watch_b).is_none());
    assert_eq!(
        (
            reads_a.load(Ordering::SeqCst),
            reads_b.load(Ordering::SeqCst)
        ),
        (2, 2)
    );

    signal.close();
    assert!(matches!(poll_once(&mut watch_a), Some(None)));
    assert!(matches!(poll_once(&mut watch_b), Some(None)));
    assert_eq!(
        (
            reads_a.load(Ordering::SeqCst),
            reads_b.load(Ordering::SeqCst)
        ),
        (2, 2)
    );
}

#[test]
fn a_wake_while_reading_is_not_lost_and_dropped_watches_unregister() {
    let signal = ChangeSignal::new();
    let (mut watch_a, reads_a) = counted_watch(&signal, &[b"a", b"a2"]);
    // Woken before its first poll: the first read already covers it, and the permit it left
    // causes at most one more read.
    signal.notify_keys([b"a"]);
    assert!(poll_once(&mut watch_a).is_some());
    assert!(poll_once(&mut watch_a).is_none());
    assert!(reads_a.load(Ordering::SeqCst) <= 2);
    assert_eq!(signal.watcher_count(), 1);
    drop(watch_a);
    assert_eq!(signal.watcher_count(), 0);
    assert!(signal.shared.registry().by_key.is_empty());
}

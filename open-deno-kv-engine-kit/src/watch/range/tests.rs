//! Range watches: what the signal notes for them, and what their streams emit.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt};

use super::*;
use crate::{ChangedKeys, KvEntry, KvValue, Versionstamp};

/// A store the test writes to directly, and a reader of its keys (what an engine hands in).
#[derive(Clone, Default)]
struct Store(Arc<Mutex<BTreeMap<Vec<u8>, u64>>>);

impl Store {
    fn set(&self, key: &[u8], version: u64) {
        self.0.lock().expect("lock").insert(key.to_vec(), version);
    }

    fn delete(&self, key: &[u8]) {
        self.0.lock().expect("lock").remove(key);
    }

    fn reader(&self) -> WatchReader {
        let store = self.0.clone();
        Arc::new(move |keys: Vec<Vec<u8>>| {
            let data = store.lock().expect("lock");
            let current = keys
                .iter()
                .map(|key| {
                    let entry = data.get(key).map(|&version| KvEntry {
                        key: key.clone().into(),
                        value: KvValue::U64(version),
                        versionstamp: Versionstamp::from_version(version, 0),
                        expires_at: None,
                    });
                    WatchedEntry::from(entry)
                })
                .collect();
            futures::future::ready(Ok(current)).boxed()
        })
    }
}

fn range(start: &[u8], end: &[u8]) -> KeyRange {
    KeyRange::new(start.to_vec(), end.to_vec())
}

/// The next event if the stream has one ready; `None` while it sleeps.
fn next_ready(stream: &mut RangeWatchStream) -> Option<Option<RangeWatchEvent>> {
    stream
        .next()
        .now_or_never()
        .map(|event| event.map(|e| e.expect("the reader does not fail")))
}

fn changed(key: &[u8], version: Option<u64>) -> RangeChange {
    RangeChange {
        key: key.to_vec(),
        entry: version.map(|v| KvEntry {
            key: key.to_vec().into(),
            value: KvValue::U64(v),
            versionstamp: Versionstamp::from_version(v, 0),
            expires_at: None,
        }),
    }
}

#[test]
fn a_range_watch_starts_with_a_reread_then_reports_the_keys_written_inside_it() {
    let (signal, store) = (ChangeSignal::new(), Store::default());
    let mut watch = range_watch_stream(range(b"b", b"d"), store.reader(), &signal);
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));
    assert_eq!(next_ready(&mut watch), None, "nothing committed yet");

    store.set(b"a", 1); // outside
    signal.notify_keys([b"a".as_slice()]);
    assert_eq!(
        next_ready(&mut watch),
        None,
        "a key outside the range wakes nothing"
    );

    store.set(b"c", 2);
    store.set(b"b", 3);
    signal.notify_keys([b"c".as_slice(), b"b".as_slice(), b"d".as_slice()]);
    store.delete(b"c");
    signal.notify_keys([b"c".as_slice()]);
    // Coalesced, in key order, each key in its current state (`c` already deleted again).
    assert_eq!(
        next_ready(&mut watch),
        Some(Some(RangeWatchEvent::Changed(vec![
            changed(b"b", Some(3)),
            changed(b"c", None)
        ])))
    );
    assert_eq!(next_ready(&mut watch), None);
}

#[test]
fn a_deleted_range_overlapping_the_watch_or_unknown_changes_ask_for_a_reread() {
    let (signal, store) = (ChangeSignal::new(), Store::default());
    let mut watch = range_watch_stream(range(b"b", b"d"), store.reader(), &signal);
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));

    signal.notify_ranges([&range(b"d", b"f")]);
    assert_eq!(next_ready(&mut watch), None, "a range beside the watch");
    signal.notify_ranges([&range(b"a", b"bb")]);
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));

    let mut changes = ChangedKeys::new();
    changes.extend([b"c".to_vec()]);
    changes.extend_range(range(b"c", b"z"));
    signal.notify_changed(&changes);
    assert_eq!(
        next_ready(&mut watch),
        Some(Some(RangeWatchEvent::Reread)),
        "the reread covers the key noted with it"
    );

    signal.notify_all();
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));
    assert_eq!(next_ready(&mut watch), None);
}

#[test]
fn a_consumer_that_falls_behind_gets_one_reread_not_unbounded_changes() {
    let (signal, store) = (ChangeSignal::new(), Store::default());
    let mut watch = range_watch_stream(range(b"k", b"l"), store.reader(), &signal);
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));
    let keys: Vec<Vec<u8>> = (0..=MAX_PENDING_RANGE_CHANGES)
        .map(|i| format!("k{i:05}").into_bytes())
        .collect();
    signal.notify_keys(&keys[..MAX_PENDING_RANGE_CHANGES]);
    // At the bound, the keys are still held...
    let watcher = signal.shared.registry().ranges.values().next().cloned();
    let held = watcher.as_ref().map(|w| w.pending().keys.len());
    assert_eq!(held, Some(MAX_PENDING_RANGE_CHANGES));
    // ...one more and they are dropped for a flag.
    signal.notify_keys(&keys[MAX_PENDING_RANGE_CHANGES..]);
    let held = watcher.as_ref().map(|w| w.pending().keys.len());
    assert_eq!(held, Some(0));
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));
    assert_eq!(next_ready(&mut watch), None);
}

#[test]
fn key_watches_inside_a_deleted_range_wake_and_closing_ends_range_watches() {
    let signal = ChangeSignal::new();
    let store = Store::default();
    store.set(b"c", 1);
    let reader = store.reader();
    let clock = Arc::new(crate::ManualClock::new(
        crate::ms_to_datetime(1_000).expect("a valid time"),
    ));
    let mut key_watch = super::super::watch_stream(vec![b"c".to_vec()], reader, &signal, clock);
    assert!(matches!(key_watch.next().now_or_never(), Some(Some(Ok(_)))));
    store.delete(b"c");
    signal.notify_ranges([&range(b"a", b"z")]);
    let emission = key_watch.next().now_or_never();
    assert!(
        matches!(emission, Some(Some(Ok(ref e))) if e == &vec![crate::WatchKeyOutput::Changed(None)]),
        "{emission:?}"
    );

    let mut watch = range_watch_stream(range(b"a", b"z"), store.reader(), &signal);
    assert_eq!(next_ready(&mut watch), Some(Some(RangeWatchEvent::Reread)));
    assert_eq!(signal.watcher_count(), 2);
    signal.close();
    assert_eq!(next_ready(&mut watch), Some(None));
    drop(watch);
    assert_eq!(
        signal.watcher_count(),
        1,
        "a dropped range watch unregisters"
    );
}

//! Watch: the first emission, what later emissions report, when nothing is emitted, expiry,
//! ordering and coalescing, several watchers, and the end of the stream.

use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, Enqueue, Key, KvEntry, KvValue, Mutation, Versionstamp,
    WatchKeyOutput, WatchStream, key,
};
use tokio::time::timeout;

use super::cases;
use crate::cases::need;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    let mut all = cases![WATCH =>
        first_emission_is_the_current_state_of_every_key_in_order,
        set_emits_changed_for_that_key_and_unchanged_for_the_others,
        delete_emits_changed_none,
        sum_emits_the_new_total,
        commit_touching_no_watched_key_emits_nothing,
        every_key_of_a_commit_wakes_its_watches_and_no_other,
        write_whose_check_fails_emits_nothing,
        expiry_emits_changed_none_when_the_clock_reaches_it,
        emissions_follow_commit_order_and_end_at_the_final_state,
        rewriting_the_same_value_is_a_change,
        every_watch_on_a_key_sees_its_change,
        watching_ten_keys_reports_each_by_position,
        stream_ends_after_close,
    ];
    all.push(WATCH_REOPEN.case(
        "change_through_another_handle_is_seen",
        change_through_another_handle_is_seen,
    ));
    all.push(WATCH_QUEUES.case("dead_letter_write_is_seen", dead_letter_write_is_seen));
    all
}

/// Watch and a second handle on the same data.
const WATCH_REOPEN: need::Need = need::WATCH.and(need::REOPEN);

/// Watch and queues.
const WATCH_QUEUES: need::Need = need::WATCH.and(need::QUEUES);

/// How long to wait for an emission that must come.
const WAIT: Duration = Duration::from_secs(5);
/// How long to watch for an emission that must not come.
const QUIET: Duration = Duration::from_millis(200);

/// Starts a watch on `keys`; panics if the backend refuses.
fn watch(kv: &dyn Backend, keys: &[Key]) -> WatchStream {
    match kv.watch(keys.iter().map(enc).collect()) {
        Ok(stream) => stream,
        Err(e) => panic!("watch refused: {e}"),
    }
}

/// The next emission; panics if none comes within [`WAIT`].
async fn next_emission(stream: &mut WatchStream) -> Vec<WatchKeyOutput> {
    match timeout(WAIT, stream.next()).await {
        Ok(Some(Ok(emission))) => emission,
        Ok(Some(Err(e))) => panic!("the watch stream failed: {e}"),
        Ok(None) => panic!("the watch stream ended"),
        Err(_) => panic!("no emission within {WAIT:?}"),
    }
}

/// Asserts that nothing is emitted within [`QUIET`].
async fn assert_quiet(stream: &mut WatchStream, when: &str) {
    if let Ok(item) = timeout(QUIET, stream.next()).await {
        panic!("{when}: nothing should be emitted, got {item:?}");
    }
}

/// The entry a read returns for `key` now.
async fn current(kv: &dyn Backend, key: &Key) -> KvEntry {
    get(kv, key)
        .await
        .unwrap_or_else(|| panic!("{key} should exist"))
}

fn changed(entry: KvEntry) -> WatchKeyOutput {
    WatchKeyOutput::Changed(Some(entry))
}

fn entry(key: &Key, value: KvValue, versionstamp: Versionstamp) -> KvEntry {
    KvEntry {
        key: enc(key).into(),
        value,
        versionstamp,
        expires_at: None,
    }
}

async fn first_emission_is_the_current_state_of_every_key_in_order(env: Env) {
    let (a, b, c) = (key!["a"], key!["b"], key!["c"]);
    let stamp_c = set(&*env.kv, &c, KvValue::U64(3)).await;
    let stamp_a = set(&*env.kv, &a, v8_string("first")).await;
    // Neither the key order nor the commit order: the order the keys were given.
    let mut stream = watch(&*env.kv, &[c.clone(), b.clone(), a.clone()]);
    assert_eq!(
        next_emission(&mut stream).await,
        vec![
            changed(entry(&c, KvValue::U64(3), stamp_c)),
            WatchKeyOutput::Changed(None),
            changed(entry(&a, v8_string("first"), stamp_a)),
        ]
    );
    assert_quiet(&mut stream, "after the first emission, with no commit").await;
}

/// Unchanged covers both a present key and an absent one that stayed absent.
async fn set_emits_changed_for_that_key_and_unchanged_for_the_others(env: Env) {
    let (a, b, c) = (key!["a"], key!["b"], key!["c"]);
    set(&*env.kv, &a, KvValue::U64(1)).await;
    set(&*env.kv, &b, KvValue::U64(2)).await;
    let mut stream = watch(&*env.kv, &[a.clone(), b.clone(), c.clone()]);
    next_emission(&mut stream).await;

    let stamp = set(&*env.kv, &b, KvValue::Bytes(vec![0, 0xff].into())).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![
            WatchKeyOutput::Unchanged,
            changed(entry(&b, KvValue::Bytes(vec![0, 0xff].into()), stamp)),
            WatchKeyOutput::Unchanged,
        ]
    );

    let stamp = set(&*env.kv, &c, KvValue::U64(3)).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![
            WatchKeyOutput::Unchanged,
            WatchKeyOutput::Unchanged,
            changed(entry(&c, KvValue::U64(3), stamp)),
        ]
    );
}

async fn delete_emits_changed_none(env: Env) {
    let (a, b) = (key!["a"], key!["b"]);
    set(&*env.kv, &a, KvValue::U64(1)).await;
    set(&*env.kv, &b, KvValue::U64(2)).await;
    let mut stream = watch(&*env.kv, &[a.clone(), b.clone()]);
    next_emission(&mut stream).await;
    delete(&*env.kv, &a).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![WatchKeyOutput::Changed(None), WatchKeyOutput::Unchanged]
    );
    // Deleting it again changes nothing: absent stays absent.
    delete(&*env.kv, &a).await;
    assert_quiet(&mut stream, "after deleting an already absent key").await;
}

async fn sum_emits_the_new_total(env: Env) {
    let counter = key!["counter"];
    set(&*env.kv, &counter, KvValue::U64(40)).await;
    let mut stream = watch(&*env.kv, std::slice::from_ref(&counter));
    next_emission(&mut stream).await;
    let stamp = commit(
        &*env.kv,
        AtomicWrite {
            mutations: vec![Mutation::sum(enc(&counter), KvValue::U64(2))],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![changed(entry(&counter, KvValue::U64(42), stamp))]
    );
}

async fn commit_touching_no_watched_key_emits_nothing(env: Env) {
    let (watched, other) = (key!["watched"], key!["other"]);
    set(&*env.kv, &watched, KvValue::U64(1)).await;
    let mut stream = watch(&*env.kv, std::slice::from_ref(&watched));
    next_emission(&mut stream).await;

    set(&*env.kv, &other, KvValue::U64(2)).await;
    set(&*env.kv, &key!["watched", "child"], KvValue::U64(3)).await;
    delete(&*env.kv, &key!["never set"]).await;
    assert_quiet(&mut stream, "after commits to other keys").await;

    // The stream is still alive: a change to the watched key comes through.
    let stamp = set(&*env.kv, &watched, KvValue::U64(4)).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![changed(entry(&watched, KvValue::U64(4), stamp))]
    );
}

/// A commit wakes the watches of every key it writes (set, delete, sum alike), each watch
/// separately, and none of the watches of keys it did not write.
async fn every_key_of_a_commit_wakes_its_watches_and_no_other(env: Env) {
    let (a, b, c, d) = (key!["a"], key!["b"], key!["c"], key!["d"]);
    set(&*env.kv, &b, KvValue::U64(2)).await;
    set(&*env.kv, &c, KvValue::U64(40)).await;
    let mut streams: Vec<WatchStream> = [&a, &b, &c, &d]
        .into_iter()
        .map(|k| watch(&*env.kv, std::slice::from_ref(k)))
        .collect();
    for stream in &mut streams {
        next_emission(stream).await;
    }
    let stamp = commit(
        &*env.kv,
        AtomicWrite {
            mutations: vec![
                Mutation::set(enc(&a), KvValue::U64(1)),
                Mutation::delete(enc(&b)),
                Mutation::sum(enc(&c), KvValue::U64(2)),
            ],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        next_emission(&mut streams[0]).await,
        vec![changed(entry(&a, KvValue::U64(1), stamp))]
    );
    assert_eq!(
        next_emission(&mut streams[1]).await,
        vec![WatchKeyOutput::Changed(None)]
    );
    assert_eq!(
        next_emission(&mut streams[2]).await,
        vec![changed(entry(&c, KvValue::U64(42), stamp))]
    );
    assert_quiet(&mut streams[3], "after a commit that did not write d").await;
}

async fn write_whose_check_fails_emits_nothing(env: Env) {
    let k = key!["k"];
    set(&*env.kv, &k, KvValue::U64(1)).await;
    let mut stream = watch(&*env.kv, std::slice::from_ref(&k));
    next_emission(&mut stream).await;
    let outcome = env
        .kv
        .atomic_write(AtomicWrite {
            checks: vec![check(&k, None)],
            mutations: vec![Mutation::set(enc(&k), KvValue::U64(2))],
            enqueues: Vec::new(),
        })
        .await;
    assert!(
        matches!(outcome, Ok(None)),
        "the check must fail, got {outcome:?}"
    );
    assert_quiet(&mut stream, "after a write whose check failed").await;
}

/// Expiry is a change: when the (manual) clock reaches a watched entry's expiry time, the watch
/// reports it gone without any commit, and not a millisecond earlier.
async fn expiry_emits_changed_none_when_the_clock_reaches_it(env: Env) {
    let (short, lasting) = (key!["short"], key!["lasting"]);
    let now = env.clock().now();
    set_expiring(
        &*env.kv,
        &short,
        KvValue::U64(1),
        now,
        Duration::from_secs(10),
    )
    .await;
    set(&*env.kv, &lasting, KvValue::U64(2)).await;
    let mut stream = watch(&*env.kv, &[short.clone(), lasting.clone()]);
    let first = next_emission(&mut stream).await;
    assert_eq!(first[0], changed(current(&*env.kv, &short).await));

    env.advance(Duration::from_millis(9_999));
    assert_quiet(&mut stream, "1 ms before the expiry").await;
    env.advance(Duration::from_millis(1));
    assert_eq!(
        next_emission(&mut stream).await,
        vec![WatchKeyOutput::Changed(None), WatchKeyOutput::Unchanged]
    );

    // An expiry set after the watch started is followed too.
    set_expiring(
        &*env.kv,
        &short,
        KvValue::U64(3),
        env.clock().now(),
        Duration::from_secs(5),
    )
    .await;
    let back = current(&*env.kv, &short).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![changed(back), WatchKeyOutput::Unchanged]
    );
    env.advance(Duration::from_millis(4_999));
    assert_quiet(&mut stream, "1 ms before the second expiry").await;
    env.advance(Duration::from_millis(1));
    assert_eq!(
        next_emission(&mut stream).await,
        vec![WatchKeyOutput::Changed(None), WatchKeyOutput::Unchanged]
    );
}

/// Emissions never go back in time; after a burst of commits (which may be coalesced) the last
/// emission shows the final state, and nothing follows it.
async fn emissions_follow_commit_order_and_end_at_the_final_state(env: Env) {
    let k = key!["k"];
    set(&*env.kv, &k, KvValue::U64(0)).await;
    let mut stream = watch(&*env.kv, std::slice::from_ref(&k));
    next_emission(&mut stream).await;

    let mut last_stamp = None;
    for i in 1..=30 {
        last_stamp = Some(set(&*env.kv, &k, KvValue::U64(i)).await);
    }
    let mut seen: Vec<(u64, Versionstamp)> = Vec::new();
    while seen.last().map(|(v, _)| *v) != Some(30) {
        let emission = next_emission(&mut stream).await;
        let [WatchKeyOutput::Changed(Some(e))] = emission.as_slice() else {
            panic!("each emission should report the key changed and present, got {emission:?}");
        };
        let KvValue::U64(v) = e.value else {
            panic!("unexpected value {:?}", e.value);
        };
        seen.push((v, e.versionstamp));
    }
    for pair in seen.windows(2) {
        assert!(
            pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1,
            "emissions out of commit order: {seen:?}"
        );
    }
    assert_eq!(seen.last().map(|(_, s)| *s), last_stamp);
    assert_quiet(&mut stream, "after the final state was emitted").await;
}

/// A new versionstamp is a change even when the value is the same.
async fn rewriting_the_same_value_is_a_change(env: Env) {
    let (k, other) = (key!["k"], key!["other"]);
    set(&*env.kv, &k, v8_string("same")).await;
    set(&*env.kv, &other, v8_string("same")).await;
    let mut stream = watch(&*env.kv, &[k.clone(), other.clone()]);
    next_emission(&mut stream).await;
    let stamp = set(&*env.kv, &k, v8_string("same")).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![
            changed(entry(&k, v8_string("same"), stamp)),
            WatchKeyOutput::Unchanged
        ]
    );
}

async fn every_watch_on_a_key_sees_its_change(env: Env) {
    let k = key!["shared"];
    let mut streams: Vec<WatchStream> = (0..3)
        .map(|_| watch(&*env.kv, std::slice::from_ref(&k)))
        .collect();
    // One more watch that also covers another key.
    streams.push(watch(&*env.kv, &[key!["elsewhere"], k.clone()]));
    for stream in &mut streams {
        next_emission(stream).await;
    }
    let stamp = set(&*env.kv, &k, KvValue::U64(9)).await;
    let expected = changed(entry(&k, KvValue::U64(9), stamp));
    for stream in &mut streams[..3] {
        assert_eq!(next_emission(stream).await, vec![expected.clone()]);
    }
    assert_eq!(
        next_emission(&mut streams[3]).await,
        vec![WatchKeyOutput::Unchanged, expected]
    );
}

async fn watching_ten_keys_reports_each_by_position(env: Env) {
    let keys: Vec<Key> = (0..10).map(|i| key!["many", i]).collect();
    let mut stamps = Vec::new();
    for (i, k) in keys.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        stamps.push((i, set(&*env.kv, k, KvValue::U64(i as u64)).await));
    }
    let mut stream = watch(&*env.kv, &keys);
    let first = next_emission(&mut stream).await;
    let expected: Vec<WatchKeyOutput> = (0..10)
        .map(|i| match stamps.iter().find(|(j, _)| *j == i) {
            Some((_, stamp)) => changed(entry(&keys[i], KvValue::U64(i as u64), *stamp)),
            None => WatchKeyOutput::Changed(None),
        })
        .collect();
    assert_eq!(first, expected);

    let stamp = set(&*env.kv, &keys[7], v8_string("seven")).await;
    let mut expected = vec![WatchKeyOutput::Unchanged; 10];
    expected[7] = changed(entry(&keys[7], v8_string("seven"), stamp));
    assert_eq!(next_emission(&mut stream).await, expected);

    delete(&*env.kv, &keys[0]).await;
    let mut expected = vec![WatchKeyOutput::Unchanged; 10];
    expected[0] = WatchKeyOutput::Changed(None);
    assert_eq!(next_emission(&mut stream).await, expected);
}

async fn stream_ends_after_close(env: Env) {
    let k = key!["k"];
    let mut stream = watch(&*env.kv, std::slice::from_ref(&k));
    next_emission(&mut stream).await;
    if let Err(e) = env.kv.close().await {
        panic!("close failed: {e}");
    }
    match timeout(WAIT, stream.next()).await {
        Ok(None) => {}
        Ok(Some(item)) => panic!("the stream should end after close, got {item:?}"),
        Err(_) => panic!("the stream did not end within {WAIT:?} of close"),
    }
}

/// A commit made through a second handle on the same data reaches a watch on the first.
async fn change_through_another_handle_is_seen(env: Env) {
    let k = key!["k"];
    let other = match env.open_another().await {
        Ok(other) => other,
        Err(e) => panic!("opening a second handle failed: {e}"),
    };
    let mut stream = watch(&*env.kv, std::slice::from_ref(&k));
    assert_eq!(
        next_emission(&mut stream).await,
        vec![WatchKeyOutput::Changed(None)]
    );
    let stamp = set(&*other, &k, v8_string("from afar")).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![changed(entry(&k, v8_string("from afar"), stamp))]
    );
    delete(&*other, &k).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![WatchKeyOutput::Changed(None)]
    );
    // Closing the other handle ends only its own watches.
    if let Err(e) = other.close().await {
        panic!("closing the second handle failed: {e}");
    }
    let stamp = set(&*env.kv, &k, v8_string("at home")).await;
    assert_eq!(
        next_emission(&mut stream).await,
        vec![changed(entry(&k, v8_string("at home"), stamp))]
    );
}

/// The commit a queue makes when it writes an undeliverable message to its dead-letter key is a
/// change like any other.
async fn dead_letter_write_is_seen(env: Env) {
    let dead = key!["dead"];
    let KvValue::V8(payload) = v8_string("undelivered") else {
        panic!("v8_string builds V8 bytes");
    };
    let mut stream = watch(&*env.kv, std::slice::from_ref(&dead));
    next_emission(&mut stream).await;
    commit(
        &*env.kv,
        AtomicWrite {
            enqueues: vec![Enqueue {
                payload: payload.to_vec(),
                ready_at: env.clock().now(),
                keys_if_undelivered: vec![enc(&dead)],
                backoff_schedule: Some(Vec::new()),
            }],
            ..Default::default()
        },
    )
    .await;
    assert_quiet(&mut stream, "after the enqueue").await;
    let handle = match timeout(WAIT, env.kv.dequeue_next_message()).await {
        Ok(Ok(Some(handle))) => handle,
        other => panic!(
            "the message should be delivered, got {:?}",
            other.map(|r| r.map(|h| h.is_some()))
        ),
    };
    if let Err(e) = handle.finish(false).await {
        panic!("finish(false) failed: {e}");
    }
    let written = current(&*env.kv, &dead).await;
    assert_eq!(written.value, v8_string("undelivered"));
    assert_eq!(next_emission(&mut stream).await, vec![changed(written)]);
}

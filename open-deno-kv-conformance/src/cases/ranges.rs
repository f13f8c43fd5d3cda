//! Beyond Deno KV: deleting a range in one commit, counting a range, watching a range. Each
//! case runs only where the backend reports the capability ([`Capabilities::range_delete`](open_deno_kv_model::Capabilities::range_delete),
//! [`count`](open_deno_kv_model::Capabilities::count), [`watch_range`](open_deno_kv_model::Capabilities::watch_range)); a backend without it has them ignored, never
//! passed.

use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, Key, KeyRange, KvError, KvValue, Mutation, RangeChange,
    RangeCount, RangeWatchEvent, RangeWatchStream, key,
};
use tokio::time::timeout;

use super::cases;
use crate::cases::need;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    let mut all = cases![
        RANGE_DELETE =>
            range_delete_removes_everything_under_the_prefix_and_nothing_else,
            range_delete_between_keys_includes_the_start_and_excludes_the_end,
            range_delete_is_one_commit_ordered_with_the_other_mutations,
            range_delete_with_a_failed_check_deletes_nothing,
            range_delete_of_more_entries_than_one_write_may_hold,
            range_delete_takes_expiring_entries_and_they_stay_gone,
            an_empty_or_inverted_range_delete_commits_and_deletes_nothing,
            range_delete_bounds_are_limited_like_read_bounds;
        COUNT =>
            count_is_the_entries_and_their_sizes,
            count_skips_expired_entries,
            count_between_keys_includes_the_start_and_excludes_the_end,
            count_of_an_empty_or_inverted_range_is_zero
    ];
    all.push(WATCH_RANGE.case(
        "range_watch_starts_with_reread_then_reports_changes_inside_only",
        range_watch_starts_with_reread_then_reports_changes_inside_only,
    ));
    all.push(WATCH_RANGE.case(
        "range_watch_reports_deletions_and_skips_failed_writes",
        range_watch_reports_deletions_and_skips_failed_writes,
    ));
    all.push(WATCH_RANGE.case("range_watch_ends_after_close", range_watch_ends_after_close));
    all.push(need::RANGE_DELETE.and(need::WATCH).case(
        "range_delete_wakes_watches_of_the_keys_it_deleted",
        range_delete_wakes_watches_of_the_keys_it_deleted,
    ));
    all.push(need::RANGE_DELETE.and(WATCH_RANGE).case(
        "range_watch_asks_for_a_reread_after_an_overlapping_range_delete",
        range_watch_asks_for_a_reread_after_an_overlapping_range_delete,
    ));
    all.push(
        need::RANGE_DELETE
            .and(need::REOPEN)
            .case("range_delete_survives_reopen", range_delete_survives_reopen),
    );
    all
}

/// Range watches, and key watches for [`watch_range_settled`]'s barrier.
const WATCH_RANGE: need::Need = need::WATCH_RANGE.and(need::WATCH);

/// How long to wait for a range watch event that must come.
const WAIT: Duration = Duration::from_secs(5);
/// How long to watch for an event that must not come.
const QUIET: Duration = Duration::from_millis(200);

fn prefix(p: &Key) -> KeyRange {
    KeyRange::prefix(p).unwrap_or_else(|e| panic!("prefix {p}: {e}"))
}

fn between(start: &Key, end: &Key) -> KeyRange {
    KeyRange::between(start, end).unwrap_or_else(|e| panic!("range {start}..{end}: {e}"))
}

/// Deletes `range` in a write of its own; returns the commit's versionstamp.
async fn delete_range(kv: &dyn Backend, range: KeyRange) -> open_deno_kv_model::Versionstamp {
    commit(
        kv,
        AtomicWrite {
            mutations: vec![Mutation::delete_range(range)],
            ..Default::default()
        },
    )
    .await
}

/// Every key of the store, in order.
async fn all_keys(kv: &dyn Backend) -> Vec<Key> {
    let everything = open_deno_kv_model::ReadRange {
        start: vec![],
        end: vec![0xff],
        limit: 1000,
        reverse: false,
    };
    keys_of(&read(kv, vec![everything]).await.remove(0))
}

/// Sets every key with a u64 value, in one write.
async fn set_all(kv: &dyn Backend, keys: &[Key]) {
    let mutations = keys
        .iter()
        .map(|k| Mutation::set(enc(k), KvValue::U64(1)))
        .collect();
    commit(
        kv,
        AtomicWrite {
            mutations,
            ..Default::default()
        },
    )
    .await;
}

async fn count(kv: &dyn Backend, range: KeyRange) -> RangeCount {
    match kv.count_range(range).await {
        Ok(count) => count,
        Err(e) => panic!("count_range failed: {e}"),
    }
}

fn watch_range(kv: &dyn Backend, range: KeyRange) -> RangeWatchStream {
    match kv.watch_range(range) {
        Ok(stream) => stream,
        Err(e) => panic!("watch_range refused: {e}"),
    }
}

/// Starts a range watch once the watchers of every commit acknowledged so far have been woken.
///
/// An engine may answer a commit before it wakes watchers (open-deno-kv-redb does); a range
/// watch started in between is then told of that earlier commit too, and reports its keys in
/// their current state: allowed (a consumer's listing already shows that state), but not what
/// these cases look at. An engine wakes watchers in commit order, so once a key watch saw a
/// commit made now, every earlier commit's watchers have been woken.
async fn watch_range_settled(kv: &dyn Backend, range: KeyRange) -> RangeWatchStream {
    let sentinel = key!["~watchers woken"];
    let mut barrier = match kv.watch(vec![enc(&sentinel)]) {
        Ok(stream) => stream,
        Err(e) => panic!("watch refused: {e}"),
    };
    let first = timeout(WAIT, barrier.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "{first:?}");
    set(kv, &sentinel, KvValue::U64(0)).await;
    let woken = timeout(WAIT, barrier.next()).await;
    assert!(matches!(woken, Ok(Some(Ok(_)))), "{woken:?}");
    watch_range(kv, range)
}

async fn next_event(stream: &mut RangeWatchStream) -> RangeWatchEvent {
    match timeout(WAIT, stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("the range watch failed: {e}"),
        Ok(None) => panic!("the range watch ended"),
        Err(_) => panic!("no range watch event within {WAIT:?}"),
    }
}

async fn assert_quiet(stream: &mut RangeWatchStream, when: &str) {
    if let Ok(item) = timeout(QUIET, stream.next()).await {
        panic!("{when}: the range watch should stay quiet, got {item:?}");
    }
}

/// The changes of the next event, which must be `Changed`.
async fn next_changes(stream: &mut RangeWatchStream) -> Vec<RangeChange> {
    match next_event(stream).await {
        RangeWatchEvent::Changed(changes) => changes,
        RangeWatchEvent::Reread => panic!("expected changes, got Reread"),
    }
}

/// The changed keys (decoded) and whether each is present now.
fn summary(changes: &[RangeChange]) -> Vec<(Key, Option<KvValue>)> {
    changes
        .iter()
        .map(|c| {
            let key = open_deno_kv_model::decode_key(&c.key)
                .unwrap_or_else(|e| panic!("undecodable key in a change: {e}"));
            (key, c.entry.as_ref().map(|e| e.value.clone()))
        })
        .collect()
}

// ----- range delete -----

async fn range_delete_removes_everything_under_the_prefix_and_nothing_else(env: Env) {
    let kv = &*env.kv;
    set_all(
        kv,
        &[
            key!["users"],
            key!["users", 1],
            key!["users", 2, "posts"],
            key!["users", "z"],
            key!["usersX"],
            key!["user"],
            key!["v"],
        ],
    )
    .await;
    delete_range(kv, prefix(&key!["users"])).await;
    // The prefix itself is not under it; neither are keys that merely share its bytes.
    assert_eq!(
        all_keys(kv).await,
        vec![key!["user"], key!["users"], key!["usersX"], key!["v"]]
    );
}

async fn range_delete_between_keys_includes_the_start_and_excludes_the_end(env: Env) {
    let kv = &*env.kv;
    set_all(
        kv,
        &[key!["k", 1], key!["k", 2], key!["k", 3], key!["k", 4]],
    )
    .await;
    delete_range(kv, between(&key!["k", 2], &key!["k", 4])).await;
    assert_eq!(all_keys(kv).await, vec![key!["k", 1], key!["k", 4]]);
}

/// One versionstamp for the whole write; a set before the range delete is taken by it, a set
/// after it stays, and a sum after it starts from nothing.
async fn range_delete_is_one_commit_ordered_with_the_other_mutations(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["p", 1], key!["p", 2]]).await;
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(enc(&key!["p", "before"]), KvValue::U64(7)),
            Mutation::delete_range(prefix(&key!["p"])),
            Mutation::set(enc(&key!["p", "after"]), KvValue::U64(8)),
            Mutation::sum(enc(&key!["p", 2]), KvValue::U64(5)),
        ],
        ..Default::default()
    };
    let stamp = commit(kv, write).await;
    let after = get(kv, &key!["p", "after"])
        .await
        .expect("set after the range");
    assert_eq!((after.value, after.versionstamp), (KvValue::U64(8), stamp));
    let summed = get(kv, &key!["p", 2])
        .await
        .expect("summed after the range");
    assert_eq!(summed.value, KvValue::U64(5), "the sum starts from nothing");
    assert_eq!(
        all_keys(kv).await,
        vec![key!["p", "after"], key!["p", 2]], // strings sort before numbers
        "the set before the range delete was taken by it"
    );
    let later = set(kv, &key!["q"], KvValue::U64(1)).await;
    assert!(later > stamp, "the next commit gets a later versionstamp");
}

async fn range_delete_with_a_failed_check_deletes_nothing(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["c", 1], key!["c", 2]]).await;
    let guard = set(kv, &key!["guard"], KvValue::U64(1)).await;
    let write = |expected| AtomicWrite {
        checks: vec![check(&key!["guard"], expected)],
        mutations: vec![Mutation::delete_range(prefix(&key!["c"]))],
        ..Default::default()
    };
    assert!(matches!(kv.atomic_write(write(None)).await, Ok(None)));
    assert_eq!(
        all_keys(kv).await,
        vec![key!["c", 1], key!["c", 2], key!["guard"]]
    );
    commit(kv, write(Some(guard))).await;
    assert_eq!(all_keys(kv).await, vec![key!["guard"]]);
}

/// One mutation covers any number of entries: more than one write may even create.
async fn range_delete_of_more_entries_than_one_write_may_hold(env: Env) {
    let kv = &*env.kv;
    for batch in 0..3i64 {
        let keys: Vec<Key> = (0..1000i64)
            .map(|i| key!["many", batch * 1000 + i])
            .collect();
        set_all(kv, &keys).await;
    }
    set_all(kv, &[key!["other"]]).await;
    assert_eq!(count_keys(kv, &key!["many"]).await, 3000);
    delete_range(kv, prefix(&key!["many"])).await;
    assert_eq!(count_keys(kv, &key!["many"]).await, 0);
    assert_eq!(all_keys(kv).await, vec![key!["other"]]);
}

/// Keys under `p`, counted by listing (so this case needs no count capability).
async fn count_keys(kv: &dyn Backend, p: &Key) -> usize {
    let mut total = 0;
    let mut range = open_deno_kv_model::ReadRange::prefix(p, 1000).expect("prefix");
    loop {
        let page = read(kv, vec![range.clone()]).await.remove(0);
        total += page.len();
        match page.last() {
            Some(last) if page.len() == 1000 => {
                range.start = last.key.to_vec();
                range.start.push(0);
            }
            _ => return total,
        }
    }
}

async fn range_delete_takes_expiring_entries_and_they_stay_gone(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    set_expiring(
        kv,
        &key!["e", 1],
        KvValue::U64(1),
        now,
        Duration::from_secs(60),
    )
    .await;
    set(kv, &key!["e", 2], KvValue::U64(2)).await;
    delete_range(kv, prefix(&key!["e"])).await;
    assert_eq!(all_keys(kv).await, Vec::<Key>::new());
    // Set again without expiry: the old expiry (and its sweep) must not take the new entry.
    set(kv, &key!["e", 1], KvValue::U64(3)).await;
    env.advance(Duration::from_secs(120));
    // A commit lets engines that sweep on commit do so.
    set(kv, &key!["tick"], KvValue::U64(0)).await;
    assert_eq!(get_value(kv, &key!["e", 1]).await, Some(KvValue::U64(3)));
}

async fn an_empty_or_inverted_range_delete_commits_and_deletes_nothing(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["a"], key!["b"]]).await;
    let write = AtomicWrite {
        mutations: vec![
            Mutation::delete_range(between(&key!["b"], &key!["a"])),
            Mutation::delete_range(between(&key!["a"], &key!["a"])),
        ],
        ..Default::default()
    };
    commit(kv, write).await;
    assert_eq!(all_keys(kv).await, vec![key!["a"], key!["b"]]);
}

/// A bound is sized like a read's range bound (2049 bytes), not like a key.
async fn range_delete_bounds_are_limited_like_read_bounds(env: Env) {
    let kv = &*env.kv;
    let long = |n: usize| {
        let mut bytes = enc(&key![vec![7u8; 2000]]);
        bytes.resize(n, 0x01);
        bytes
    };
    let ok = AtomicWrite {
        mutations: vec![Mutation::delete_range(KeyRange::new(
            long(2049),
            vec![0xff],
        ))],
        ..Default::default()
    };
    commit(kv, ok).await;
    let too_long = AtomicWrite {
        mutations: vec![Mutation::delete_range(KeyRange::new(
            vec![0x01],
            long(2050),
        ))],
        ..Default::default()
    };
    let err = write_error(kv, too_long).await;
    assert!(err.contains("Key too large"), "{err}");
}

async fn range_delete_wakes_watches_of_the_keys_it_deleted(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["w", 1], key!["x"]]).await;
    let mut inside = match kv.watch(vec![enc(&key!["w", 1])]) {
        Ok(stream) => stream,
        Err(e) => panic!("watch refused: {e}"),
    };
    let first = timeout(WAIT, inside.next()).await;
    assert!(matches!(first, Ok(Some(Ok(_)))), "{first:?}");
    delete_range(kv, prefix(&key!["w"])).await;
    let emission = timeout(WAIT, inside.next()).await;
    match emission {
        Ok(Some(Ok(outputs))) => assert_eq!(
            outputs,
            vec![open_deno_kv_model::WatchKeyOutput::Changed(None)]
        ),
        other => panic!("the watch of a deleted key should report it gone: {other:?}"),
    }
}

async fn range_delete_survives_reopen(mut env: Env) {
    set_all(&*env.kv, &[key!["r", 1], key!["r", 2], key!["s"]]).await;
    delete_range(&*env.kv, prefix(&key!["r"])).await;
    env.reopen().await.expect("reopen");
    assert_eq!(all_keys(&*env.kv).await, vec![key!["s"]]);
}

// ----- count -----

async fn count_is_the_entries_and_their_sizes(env: Env) {
    let kv = &*env.kv;
    let entries = [
        (key!["n", 1], KvValue::U64(9)),
        (key!["n", "long"], KvValue::Bytes(vec![1; 300].into())),
        (key!["n", 2, 3], v8_string("hello")),
    ];
    for (k, v) in &entries {
        set(kv, k, v.clone()).await;
    }
    set(kv, &key!["n"], KvValue::U64(0)).await; // the prefix itself: not under it
    set(kv, &key!["o"], KvValue::U64(0)).await;
    let expected = RangeCount {
        entries: 3,
        key_bytes: entries.iter().map(|(k, _)| enc(k).len() as u64).sum(),
        // A u64 is stored as 8 bytes; bytes and V8 values as they are.
        value_bytes: 8 + 300 + v8_string("hello").encoded_len() as u64,
    };
    assert_eq!(count(kv, prefix(&key!["n"])).await, expected);
    let all = count(kv, KeyRange::new(vec![], vec![0xff])).await;
    assert_eq!(all.entries, 5);
}

async fn count_skips_expired_entries(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    set_expiring(
        kv,
        &key!["t", 1],
        KvValue::U64(1),
        now,
        Duration::from_secs(10),
    )
    .await;
    set(kv, &key!["t", 2], KvValue::U64(2)).await;
    assert_eq!(count(kv, prefix(&key!["t"])).await.entries, 2);
    env.advance(Duration::from_secs(10));
    assert_eq!(
        count(kv, prefix(&key!["t"])).await,
        RangeCount {
            entries: 1,
            key_bytes: enc(&key!["t", 2]).len() as u64,
            value_bytes: 8,
        },
        "an entry is gone at its expiry time, swept or not"
    );
}

async fn count_between_keys_includes_the_start_and_excludes_the_end(env: Env) {
    let kv = &*env.kv;
    set_all(
        kv,
        &[key!["k", 1], key!["k", 2], key!["k", 3], key!["k", 4]],
    )
    .await;
    let counted = count(kv, between(&key!["k", 2], &key!["k", 4])).await;
    assert_eq!(counted.entries, 2, "[k2, k4) holds k2 and k3");
    assert_eq!(
        counted.key_bytes,
        (enc(&key!["k", 2]).len() + enc(&key!["k", 3]).len()) as u64
    );
}

async fn count_of_an_empty_or_inverted_range_is_zero(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["a"], key!["b"]]).await;
    assert_eq!(
        count(kv, between(&key!["b"], &key!["a"])).await,
        RangeCount::default()
    );
    assert_eq!(count(kv, prefix(&key!["zzz"])).await, RangeCount::default());
    let too_long = KeyRange::new(vec![0x02; 2050], vec![0xff]);
    match kv.count_range(too_long).await {
        Err(KvError::Limit(_)) => {}
        other => panic!("a bound beyond 2049 bytes must be refused, got {other:?}"),
    }
}

// ----- range watch -----

async fn range_watch_starts_with_reread_then_reports_changes_inside_only(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["m", 0], KvValue::U64(0)).await;
    let mut watch = watch_range_settled(kv, prefix(&key!["m"])).await;
    assert_eq!(next_event(&mut watch).await, RangeWatchEvent::Reread);
    assert_quiet(&mut watch, "before any commit").await;

    set(kv, &key!["mm"], KvValue::U64(1)).await;
    set(kv, &key!["m"], KvValue::U64(1)).await;
    assert_quiet(&mut watch, "after commits outside the range").await;

    let stamp = set(kv, &key!["m", 1], KvValue::U64(5)).await;
    let changes = next_changes(&mut watch).await;
    assert_eq!(
        summary(&changes),
        vec![(key!["m", 1], Some(KvValue::U64(5)))]
    );
    let entry = changes[0].entry.as_ref().expect("present");
    assert_eq!(entry.versionstamp, stamp);
    assert_eq!(entry.key, enc(&key!["m", 1]));
}

async fn range_watch_reports_deletions_and_skips_failed_writes(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["d", 1], KvValue::U64(1)).await;
    let mut watch = watch_range_settled(kv, prefix(&key!["d"])).await;
    assert_eq!(next_event(&mut watch).await, RangeWatchEvent::Reread);
    delete(kv, &key!["d", 1]).await;
    assert_eq!(
        summary(&next_changes(&mut watch).await),
        vec![(key!["d", 1], None)]
    );
    let failing = AtomicWrite {
        checks: vec![check(
            &key!["absent"],
            Some(open_deno_kv_model::Versionstamp::from_version(1, 0)),
        )],
        mutations: vec![Mutation::set(enc(&key!["d", 2]), KvValue::U64(2))],
        ..Default::default()
    };
    assert!(matches!(kv.atomic_write(failing).await, Ok(None)));
    assert_quiet(&mut watch, "after a write whose check failed").await;
}

async fn range_watch_asks_for_a_reread_after_an_overlapping_range_delete(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["o", 1], key!["o", 2]]).await;
    let mut watch = watch_range_settled(kv, prefix(&key!["o"])).await;
    assert_eq!(next_event(&mut watch).await, RangeWatchEvent::Reread);
    delete_range(kv, prefix(&key!["elsewhere"])).await;
    assert_quiet(&mut watch, "after a range delete beside the watched range").await;
    delete_range(kv, between(&key!["o", 2], &key!["p"])).await;
    assert_eq!(next_event(&mut watch).await, RangeWatchEvent::Reread);
}

async fn range_watch_ends_after_close(env: Env) {
    let mut watch = watch_range(&*env.kv, prefix(&key!["end"]));
    assert_eq!(next_event(&mut watch).await, RangeWatchEvent::Reread);
    env.kv.close().await.expect("close");
    match timeout(WAIT, watch.next()).await {
        Ok(None) => {}
        other => panic!("the range watch should end when the backend closes: {other:?}"),
    }
    assert!(matches!(
        env.kv.watch_range(prefix(&key!["end"])),
        Err(KvError::Closed)
    ));
}

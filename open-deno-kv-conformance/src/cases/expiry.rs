//! Expiry: an entry set with an expiry time is visible until that time and never after it.
//!
//! Every case moves the manual clock; none waits for real time.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use open_deno_kv_model::{AtomicWrite, Clock, Key, KvValue, Mutation, key};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        visible_until_one_ms_before_expiry,
        gone_at_and_after_expiry_time,
        never_removed_early,
        same_expiry_in_one_write_expires_together,
        earlier_expiry_goes_first,
        expired_key_counts_as_absent_for_a_check,
        sum_on_expired_u64_starts_from_the_operand,
        plain_set_removes_the_expiry,
        new_expiry_replaces_the_old_one,
        list_limit_is_filled_from_live_entries,
        deleting_an_expiring_key_removes_it_and_its_expiry,
        reads_report_each_entry_s_expiry;
        REOPEN =>
        expired_entries_stay_invisible_after_reopen,
    ]
}

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

/// The time `after` from the test clock's current time.
fn in_(env: &Env, after: Duration) -> DateTime<Utc> {
    env.clock().now() + TimeDelta::from_std(after).unwrap_or(TimeDelta::MAX)
}

/// A set of `value` at `key` that expires at `at`.
fn set_until(key: &Key, value: KvValue, at: DateTime<Utc>) -> Mutation {
    Mutation {
        expire_at: Some(at),
        ..Mutation::set(enc(key), value)
    }
}

/// The keys listed under `prefix` (forward, up to 100).
async fn listed(env: &Env, prefix: &Key) -> Vec<Key> {
    keys_of(&list_prefix(&*env.kv, prefix, 100, false).await)
}

async fn visible_until_one_ms_before_expiry(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e", "a"], KvValue::U64(1), now, HOUR).await;
    env.advance(HOUR - MS);
    assert_eq!(
        get_value(&*env.kv, &key!["e", "a"]).await,
        Some(KvValue::U64(1)),
        "1 ms before its expiry the entry is still there"
    );
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "a"]]);
}

async fn gone_at_and_after_expiry_time(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e", "a"], KvValue::U64(1), now, HOUR).await;
    set(&*env.kv, &key!["e", "b"], KvValue::U64(2)).await;
    env.advance(HOUR);
    assert_eq!(
        get(&*env.kv, &key!["e", "a"]).await,
        None,
        "at its expiry time the entry is gone"
    );
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "b"]]);
    env.advance(HOUR * 24);
    assert_eq!(get(&*env.kv, &key!["e", "a"]).await, None);
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "b"]]);
}

/// Time passing, other commits and reads (which may trigger a sweep) never remove an entry
/// before its expiry time.
async fn never_removed_early(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e", "soon"], KvValue::U64(1), now, HOUR).await;
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    set_expiring(
        &*env.kv,
        &key!["e", "late"],
        KvValue::U64(2),
        now,
        ten_years,
    )
    .await;
    for step in 1..=6u64 {
        env.advance(Duration::from_secs(599));
        set(&*env.kv, &key!["other", step], KvValue::U64(step)).await;
        assert_eq!(
            listed(&env, &key!["e"]).await,
            vec![key!["e", "late"], key!["e", "soon"]],
            "after {step} steps of 599 s (the entry expires at 3600 s)"
        );
    }
    // 3594 s have passed; go to 1 ms before the expiry, commit once more, and look again.
    env.advance(Duration::from_secs(6) - MS);
    delete(&*env.kv, &key!["other", 1]).await;
    assert_eq!(
        get_value(&*env.kv, &key!["e", "soon"]).await,
        Some(KvValue::U64(1))
    );
    env.advance(Duration::from_secs(365 * 24 * 3600));
    set(&*env.kv, &key!["other", 0], KvValue::U64(0)).await;
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "late"]]);
}

async fn same_expiry_in_one_write_expires_together(env: Env) {
    let at = in_(&env, Duration::from_secs(30));
    let keys = [key!["e", "a"], key!["e", "b"], key!["e", "c"]];
    commit(
        &*env.kv,
        AtomicWrite {
            mutations: keys
                .iter()
                .map(|k| set_until(k, KvValue::U64(7), at))
                .collect(),
            ..Default::default()
        },
    )
    .await;
    env.advance(Duration::from_secs(30) - MS);
    assert_eq!(listed(&env, &key!["e"]).await, keys.to_vec());
    env.advance(MS);
    assert_eq!(
        listed(&env, &key!["e"]).await,
        Vec::<Key>::new(),
        "all three share one expiry time"
    );
    for k in &keys {
        assert_eq!(get(&*env.kv, k).await, None, "{k}");
    }
}

/// Keys expire in the order of their expiry times, whatever their key order or write order.
async fn earlier_expiry_goes_first(env: Env) {
    let start = env.clock().now();
    let secs = |s: u64| start + TimeDelta::seconds(s as i64);
    // Written in an order that matches neither key order nor expiry order.
    for (k, at) in [
        (key!["e", "b"], secs(30)),
        (key!["e", "c"], secs(10)),
        (key!["e", "a"], secs(20)),
    ] {
        commit(
            &*env.kv,
            AtomicWrite {
                mutations: vec![set_until(&k, KvValue::U64(1), at)],
                ..Default::default()
            },
        )
        .await;
    }
    env.advance(Duration::from_secs(10));
    assert_eq!(
        listed(&env, &key!["e"]).await,
        vec![key!["e", "a"], key!["e", "b"]]
    );
    env.advance(Duration::from_secs(10));
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "b"]]);
    env.advance(Duration::from_secs(10));
    assert_eq!(listed(&env, &key!["e"]).await, Vec::<Key>::new());
}

/// Once expired, a key is absent for checks: `None` matches and its old versionstamp does not.
async fn expired_key_counts_as_absent_for_a_check(env: Env) {
    let now = env.clock().now();
    let stamp = set_expiring(&*env.kv, &key!["e"], KvValue::U64(1), now, HOUR).await;
    env.advance(HOUR);
    let old_stamp = AtomicWrite {
        checks: vec![check(&key!["e"], Some(stamp))],
        mutations: vec![Mutation::set(enc(&key!["e"]), KvValue::U64(2))],
        ..Default::default()
    };
    assert_eq!(
        env.kv
            .atomic_write(old_stamp)
            .await
            .map_err(|e| e.to_string()),
        Ok(None),
        "the expired entry's versionstamp no longer matches"
    );
    let absent = AtomicWrite {
        checks: vec![check(&key!["e"], None)],
        mutations: vec![Mutation::set(enc(&key!["e"]), KvValue::U64(3))],
        ..Default::default()
    };
    let new_stamp = commit(&*env.kv, absent).await;
    let entry = get(&*env.kv, &key!["e"]).await.expect("just set");
    assert_eq!(entry.value, KvValue::U64(3));
    assert_eq!(entry.versionstamp, new_stamp);
}

async fn sum_on_expired_u64_starts_from_the_operand(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["n"], KvValue::U64(100), now, HOUR).await;
    env.advance(HOUR);
    commit(
        &*env.kv,
        AtomicWrite {
            mutations: vec![Mutation::sum(enc(&key!["n"]), KvValue::U64(5))],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        get_value(&*env.kv, &key!["n"]).await,
        Some(KvValue::U64(5)),
        "the expired 100 is not added"
    );
    // The sum's result has no expiry of its own.
    env.advance(HOUR * 48);
    assert_eq!(get_value(&*env.kv, &key!["n"]).await, Some(KvValue::U64(5)));
}

async fn plain_set_removes_the_expiry(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e"], KvValue::U64(1), now, HOUR).await;
    set(&*env.kv, &key!["e"], KvValue::U64(2)).await;
    env.advance(HOUR * 2);
    // A commit after the old expiry time, in case the backend sweeps expired entries on write.
    set(&*env.kv, &key!["other"], KvValue::U64(0)).await;
    assert_eq!(
        get_value(&*env.kv, &key!["e"]).await,
        Some(KvValue::U64(2)),
        "the overwrite carried no expiry"
    );
}

/// A new expiry replaces the old one, whether it is later or earlier.
async fn new_expiry_replaces_the_old_one(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["later"], KvValue::U64(1), now, HOUR).await;
    set_expiring(&*env.kv, &key!["later"], KvValue::U64(2), now, HOUR * 3).await;
    set_expiring(&*env.kv, &key!["earlier"], KvValue::U64(3), now, HOUR * 3).await;
    set_expiring(&*env.kv, &key!["earlier"], KvValue::U64(4), now, HOUR).await;

    env.advance(HOUR - MS);
    assert_eq!(
        get_value(&*env.kv, &key!["earlier"]).await,
        Some(KvValue::U64(4))
    );
    env.advance(MS);
    assert_eq!(get(&*env.kv, &key!["earlier"]).await, None, "moved to 1 h");
    // A commit past the first expiry time, in case the backend sweeps expired entries on write.
    set(&*env.kv, &key!["other"], KvValue::U64(0)).await;
    assert_eq!(
        get_value(&*env.kv, &key!["later"]).await,
        Some(KvValue::U64(2)),
        "moved to 3 h"
    );
    env.advance(HOUR * 2 - MS);
    assert_eq!(
        get_value(&*env.kv, &key!["later"]).await,
        Some(KvValue::U64(2))
    );
    env.advance(MS);
    assert_eq!(get(&*env.kv, &key!["later"]).await, None);
}

/// Expired entries are skipped, not counted: a list with a limit still returns `limit` live
/// entries when there are that many, forward and in reverse.
async fn list_limit_is_filled_from_live_entries(env: Env) {
    let at = in_(&env, Duration::from_secs(1));
    let mut mutations = Vec::new();
    for (name, expiring) in [
        ("a", false),
        ("b", true),
        ("c", true),
        ("d", false),
        ("e", true),
        ("f", true),
        ("g", false),
    ] {
        let k = key!["l", name];
        mutations.push(if expiring {
            set_until(&k, KvValue::U64(0), at)
        } else {
            Mutation::set(enc(&k), KvValue::U64(1))
        });
    }
    commit(
        &*env.kv,
        AtomicWrite {
            mutations,
            ..Default::default()
        },
    )
    .await;
    env.advance(Duration::from_secs(1));
    assert_eq!(
        keys_of(&list_prefix(&*env.kv, &key!["l"], 2, false).await),
        vec![key!["l", "a"], key!["l", "d"]]
    );
    assert_eq!(
        keys_of(&list_prefix(&*env.kv, &key!["l"], 2, true).await),
        vec![key!["l", "g"], key!["l", "d"]]
    );
    assert_eq!(
        keys_of(&list_prefix(&*env.kv, &key!["l"], 3, false).await),
        vec![key!["l", "a"], key!["l", "d"], key!["l", "g"]]
    );
}

/// Deleting an expiring key removes it, and its old expiry does not reach a later plain set.
async fn deleting_an_expiring_key_removes_it_and_its_expiry(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e"], KvValue::U64(1), now, HOUR).await;
    set_expiring(&*env.kv, &key!["gone"], KvValue::U64(1), now, HOUR).await;
    delete(&*env.kv, &key!["e"]).await;
    assert_eq!(get(&*env.kv, &key!["e"]).await, None);
    set(&*env.kv, &key!["e"], KvValue::U64(2)).await;
    env.advance(HOUR * 2);
    set(&*env.kv, &key!["other"], KvValue::U64(0)).await;
    assert_eq!(
        get_value(&*env.kv, &key!["e"]).await,
        Some(KvValue::U64(2)),
        "the deleted entry's expiry must not remove the new one"
    );
    // Deleting a key whose expiry has already passed commits too, and it stays absent.
    delete(&*env.kv, &key!["gone"]).await;
    assert_eq!(get(&*env.kv, &key!["gone"]).await, None);
}

/// An entry that expired before a reopen stays invisible after it, and one that expires while
/// the data is reopened disappears on time.
async fn expired_entries_stay_invisible_after_reopen(mut env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["e", "a"], KvValue::U64(1), now, HOUR).await;
    set_expiring(&*env.kv, &key!["e", "b"], KvValue::U64(2), now, HOUR * 2).await;
    set(&*env.kv, &key!["e", "c"], KvValue::U64(3)).await;
    env.advance(HOUR);
    env.reopen().await.expect("reopen");
    assert_eq!(get(&*env.kv, &key!["e", "a"]).await, None);
    assert_eq!(
        listed(&env, &key!["e"]).await,
        vec![key!["e", "b"], key!["e", "c"]]
    );
    env.advance(HOUR);
    env.reopen().await.expect("second reopen");
    assert_eq!(listed(&env, &key!["e"]).await, vec![key!["e", "c"]]);
}

/// Reads return each entry's expiry time (to the millisecond) with the entry, through a get and a
/// list alike, and `None` once a plain set has removed it. Tools that copy a store rely on it.
async fn reads_report_each_entry_s_expiry(env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["x", "expiring"], KvValue::U64(1), now, HOUR).await;
    set(&*env.kv, &key!["x", "plain"], KvValue::U64(2)).await;
    let expected = Some(in_(&env, HOUR).timestamp_millis());
    let ms = |e: &open_deno_kv_model::KvEntry| e.expires_at.map(|at| at.timestamp_millis());

    let got = get(&*env.kv, &key!["x", "expiring"]).await;
    assert_eq!(
        got.as_ref().and_then(ms),
        expected,
        "a get reports the expiry"
    );
    let listed = list_prefix(&*env.kv, &key!["x"], 10, false).await;
    let expiries: Vec<_> = listed.iter().map(ms).collect();
    assert_eq!(
        expiries,
        vec![expected, None],
        "a list reports each entry's expiry"
    );

    set(&*env.kv, &key!["x", "expiring"], KvValue::U64(3)).await;
    let got = get(&*env.kv, &key!["x", "expiring"]).await;
    assert_eq!(
        got.as_ref().and_then(ms),
        None,
        "a plain set removes the expiry"
    );
}

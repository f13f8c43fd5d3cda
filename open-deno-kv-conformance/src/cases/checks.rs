//! Checks: preconditions on a key's versionstamp (or absence) that make a write all or nothing.

use std::time::Duration;

use open_deno_kv_model::{
    AtomicWrite, Backend, Check, Clock, Enqueue, Key, KvEntry, KvValue, Mutation, MutationKind, key,
};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        absence_check_passes_on_missing_key,
        absence_check_fails_on_present_key,
        check_with_current_versionstamp_passes,
        check_with_older_versionstamp_fails,
        failed_check_is_not_an_error_and_applies_nothing,
        failed_check_leaves_versionstamps_for_later_checks,
        one_failing_check_fails_the_whole_write,
        hundred_checks_pass_together,
        check_and_set_retry_loop_converges,
        check_on_deleted_key_expects_absence,
        check_with_versionstamp_of_another_commit_fails,
        passing_check_alone_leaves_the_key_untouched;
    QUEUES =>
        failed_check_enqueues_nothing,
    ]
}

/// Runs a write that must fail its checks (`Ok(None)`, not an error).
async fn rejected(kv: &dyn Backend, write: AtomicWrite) {
    match kv.atomic_write(write).await {
        Ok(None) => {}
        Ok(Some(result)) => panic!("a failing check must not commit, got {result:?}"),
        Err(e) => panic!("a failing check is an answer, not an error: {e}"),
    }
}

/// The V8 bytes of a short ASCII string.
fn v8_bytes(text: &str) -> Vec<u8> {
    match v8_string(text) {
        KvValue::V8(bytes) => bytes.to_vec(),
        other => panic!("v8_string gave {other:?}"),
    }
}

/// A write made of some checks and one set.
fn checked_set(checks: Vec<Check>, key: &Key, value: KvValue) -> AtomicWrite {
    AtomicWrite {
        checks,
        mutations: vec![Mutation::set(enc(key), value)],
        ..Default::default()
    }
}

/// Every entry under `prefix`.
async fn all_under(kv: &dyn Backend, prefix: &Key) -> Vec<KvEntry> {
    list_prefix(kv, prefix, 1000, false).await
}

async fn absence_check_passes_on_missing_key(env: Env) {
    let k = key!["a"];
    let write = checked_set(vec![check(&k, None)], &k, KvValue::U64(1));
    let stamp = commit(&*env.kv, write).await;
    let entry = get(&*env.kv, &k).await.expect("the write committed");
    assert_eq!(entry.value, KvValue::U64(1));
    assert_eq!(entry.versionstamp, stamp);
}

async fn absence_check_fails_on_present_key(env: Env) {
    let k = key!["a"];
    let stamp = set(&*env.kv, &k, KvValue::U64(1)).await;
    rejected(
        &*env.kv,
        checked_set(vec![check(&k, None)], &k, KvValue::U64(2)),
    )
    .await;
    let entry = get(&*env.kv, &k).await.expect("still there");
    assert_eq!(entry.value, KvValue::U64(1));
    assert_eq!(entry.versionstamp, stamp);
}

async fn check_with_current_versionstamp_passes(env: Env) {
    let k = key!["a"];
    let first = set(&*env.kv, &k, KvValue::U64(1)).await;
    let second = commit(
        &*env.kv,
        checked_set(vec![check(&k, Some(first))], &k, KvValue::U64(2)),
    )
    .await;
    assert!(second > first);
    let entry = get(&*env.kv, &k).await.expect("set");
    assert_eq!(entry.value, KvValue::U64(2));
    assert_eq!(entry.versionstamp, second);
}

async fn check_with_older_versionstamp_fails(env: Env) {
    let k = key!["a"];
    let old = set(&*env.kv, &k, KvValue::U64(1)).await;
    let current = set(&*env.kv, &k, KvValue::U64(2)).await;
    rejected(
        &*env.kv,
        checked_set(vec![check(&k, Some(old))], &k, KvValue::U64(3)),
    )
    .await;
    let entry = get(&*env.kv, &k).await.expect("set");
    assert_eq!(entry.value, KvValue::U64(2));
    assert_eq!(entry.versionstamp, current);
}

/// Every kind of mutation rides along a failing check; none of them may be applied.
async fn failed_check_is_not_an_error_and_applies_nothing(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["d", "kept"], v8_string("kept")).await;
    set(kv, &key!["d", "counter"], KvValue::U64(10)).await;
    set(kv, &key!["d", "low"], KvValue::U64(10)).await;
    let guard = set(kv, &key!["d", "guard"], KvValue::U64(0)).await;
    let before = all_under(kv, &key!["d"]).await;

    let write = AtomicWrite {
        // The guard exists, so a check for its absence fails.
        checks: vec![check(&key!["d", "guard"], None)],
        mutations: vec![
            mutation(&key!["d", "new"], MutationKind::Set(KvValue::U64(1))),
            mutation(&key!["d", "kept"], MutationKind::Delete),
            Mutation::sum(enc(&key!["d", "counter"]), KvValue::U64(5)),
            mutation(&key!["d", "low"], MutationKind::Min(KvValue::U64(1))),
            mutation(&key!["d", "high"], MutationKind::Max(KvValue::U64(99))),
            mutation(
                &key!["d", "log"],
                MutationKind::SetSuffixVersionstampedKey(KvValue::U64(1)),
            ),
        ],
        ..Default::default()
    };
    rejected(kv, write).await;

    assert_eq!(all_under(kv, &key!["d"]).await, before);
    let entry = get(kv, &key!["d", "guard"]).await.expect("untouched");
    assert_eq!(entry.versionstamp, guard);
}

/// A rejected write leaves every versionstamp as it was, so checks prepared before it still pass.
async fn failed_check_leaves_versionstamps_for_later_checks(env: Env) {
    let kv = &*env.kv;
    let a = set(kv, &key!["a"], KvValue::U64(1)).await;
    let b = set(kv, &key!["b"], KvValue::U64(1)).await;
    let write = AtomicWrite {
        checks: vec![check(&key!["b"], Some(a))],
        mutations: vec![
            Mutation::set(enc(&key!["a"]), KvValue::U64(2)),
            Mutation::set(enc(&key!["b"]), KvValue::U64(2)),
        ],
        ..Default::default()
    };
    rejected(kv, write).await;

    let later = commit(
        kv,
        AtomicWrite {
            checks: vec![check(&key!["a"], Some(a)), check(&key!["b"], Some(b))],
            mutations: vec![Mutation::set(enc(&key!["c"]), KvValue::U64(3))],
            ..Default::default()
        },
    )
    .await;
    assert!(later > b, "the next commit still comes after the last one");
    assert_eq!(get_value(kv, &key!["a"]).await, Some(KvValue::U64(1)));
    assert_eq!(get_value(kv, &key!["b"]).await, Some(KvValue::U64(1)));
}

async fn one_failing_check_fails_the_whole_write(env: Env) {
    let kv = &*env.kv;
    let a = set(kv, &key!["a"], KvValue::U64(1)).await;
    let b = set(kv, &key!["b"], KvValue::U64(1)).await;
    let target = key!["target"];
    let good = vec![
        check(&key!["a"], Some(a)),
        check(&key!["missing"], None),
        check(&key!["b"], Some(b)),
    ];
    // Put the wrong check first, in the middle and last: each position must sink the write.
    let bad = check(&key!["a"], None);
    for position in [0, 1, good.len()] {
        let mut checks = good.clone();
        checks.insert(position, bad.clone());
        rejected(kv, checked_set(checks, &target, KvValue::U64(9))).await;
        assert_eq!(get(kv, &target).await, None, "bad check at {position}");
    }
    commit(kv, checked_set(good, &target, KvValue::U64(9))).await;
    assert_eq!(get_value(kv, &target).await, Some(KvValue::U64(9)));
}

/// Deno allows 100 checks in one write; every one of them is compared.
async fn hundred_checks_pass_together(env: Env) {
    let kv = &*env.kv;
    let present = AtomicWrite {
        mutations: (0..50u32)
            .map(|i| Mutation::set(enc(&key!["k", i]), KvValue::U64(u64::from(i))))
            .collect(),
        ..Default::default()
    };
    let stamp = commit(kv, present).await;
    let checks: Vec<Check> = (0..100u32)
        .map(|i| check(&key!["k", i], (i < 50).then_some(stamp)))
        .collect();
    assert_eq!(checks.len(), 100);

    // The last absence check is wrong once key 99 exists.
    set(kv, &key!["k", 99u32], KvValue::U64(99)).await;
    rejected(
        kv,
        checked_set(checks.clone(), &key!["done"], KvValue::U64(1)),
    )
    .await;
    assert_eq!(get(kv, &key!["done"]).await, None);

    delete(kv, &key!["k", 99u32]).await;
    commit(kv, checked_set(checks, &key!["done"], KvValue::U64(1))).await;
    assert_eq!(get_value(kv, &key!["done"]).await, Some(KvValue::U64(1)));
}

/// The optimistic-concurrency loop Deno programs write: read, compute, commit with a check on
/// what was read, and start over when someone else got there first.
async fn check_and_set_retry_loop_converges(env: Env) {
    let kv = &*env.kv;
    let k = key!["counter"];
    let mut attempts = 0;
    loop {
        attempts += 1;
        let seen = get(kv, &k).await;
        let (current, stamp) = match &seen {
            Some(KvEntry {
                value: KvValue::U64(n),
                versionstamp,
                ..
            }) => (*n, Some(*versionstamp)),
            Some(other) => panic!("unexpected entry {other:?}"),
            None => (0, None),
        };
        if attempts == 1 {
            // Another writer slips in between our read and our commit.
            set(kv, &k, KvValue::U64(10)).await;
        }
        let write = checked_set(vec![check(&k, stamp)], &k, KvValue::U64(current + 1));
        if kv.atomic_write(write).await.expect("valid write").is_some() {
            break;
        }
        assert!(attempts < 5, "the loop should succeed on its second try");
    }
    assert_eq!(attempts, 2);
    assert_eq!(get_value(kv, &k).await, Some(KvValue::U64(11)));
}

async fn check_on_deleted_key_expects_absence(env: Env) {
    let kv = &*env.kv;
    let k = key!["a"];
    let stamp = set(kv, &k, KvValue::U64(1)).await;
    delete(kv, &k).await;
    rejected(
        kv,
        checked_set(vec![check(&k, Some(stamp))], &k, KvValue::U64(2)),
    )
    .await;
    assert_eq!(get(kv, &k).await, None);
    commit(kv, checked_set(vec![check(&k, None)], &k, KvValue::U64(3))).await;
    assert_eq!(get_value(kv, &k).await, Some(KvValue::U64(3)));
}

/// A key keeps the versionstamp of the commit that last wrote *it*, not of the latest commit.
async fn check_with_versionstamp_of_another_commit_fails(env: Env) {
    let kv = &*env.kv;
    let k = key!["a"];
    let own = set(kv, &k, KvValue::U64(1)).await;
    let other = set(kv, &key!["b"], KvValue::U64(2)).await;
    assert_ne!(own, other);
    rejected(
        kv,
        checked_set(vec![check(&k, Some(other))], &k, KvValue::U64(3)),
    )
    .await;
    assert_eq!(get_value(kv, &k).await, Some(KvValue::U64(1)));
    commit(
        kv,
        checked_set(vec![check(&k, Some(own))], &k, KvValue::U64(3)),
    )
    .await;
    assert_eq!(get_value(kv, &k).await, Some(KvValue::U64(3)));
}

/// A passing check only reads: the checked key keeps its value and versionstamp.
async fn passing_check_alone_leaves_the_key_untouched(env: Env) {
    let kv = &*env.kv;
    let k = key!["a"];
    let stamp = set(kv, &k, KvValue::U64(1)).await;
    let result = kv
        .atomic_write(AtomicWrite {
            checks: vec![check(&k, Some(stamp))],
            mutations: vec![Mutation::set(enc(&key!["b"]), KvValue::U64(2))],
            ..Default::default()
        })
        .await
        .expect("valid write")
        .expect("the check matches");
    assert!(result.versionstamp > stamp);
    let entry = get(kv, &k).await.expect("still there");
    assert_eq!(entry.value, KvValue::U64(1));
    assert_eq!(entry.versionstamp, stamp);
}

/// An enqueue riding a failing check is dropped with the rest of the write.
async fn failed_check_enqueues_nothing(env: Env) {
    let kv = &*env.kv;
    let now = env.clock().now();
    let message = |payload: &str| Enqueue {
        payload: v8_bytes(payload),
        ready_at: now,
        keys_if_undelivered: vec![enc(&key!["undelivered", payload])],
        backoff_schedule: Some(vec![]),
    };
    set(kv, &key!["guard"], KvValue::U64(0)).await;
    rejected(
        kv,
        AtomicWrite {
            checks: vec![check(&key!["guard"], None)],
            enqueues: vec![message("dropped")],
            ..Default::default()
        },
    )
    .await;
    commit(
        kv,
        AtomicWrite {
            enqueues: vec![message("sent")],
            ..Default::default()
        },
    )
    .await;

    let wait = Duration::from_secs(5);
    let first = tokio::time::timeout(wait, kv.dequeue_next_message())
        .await
        .expect("the committed message is due now")
        .expect("dequeue works")
        .expect("the backend is open");
    assert_eq!(
        KvValue::V8(first.payload().to_vec().into()),
        v8_string("sent")
    );
    first.finish(true).await.expect("finish");

    // Only the committed message exists: nothing else is due, now or later.
    env.advance(Duration::from_secs(3600));
    let second = tokio::time::timeout(Duration::from_millis(300), kv.dequeue_next_message()).await;
    if let Ok(Ok(Some(handle))) = second {
        panic!(
            "a message from a rejected write was delivered: {:?}",
            handle.payload()
        );
    }
    assert_eq!(get(kv, &key!["undelivered", "dropped"]).await, None);
}

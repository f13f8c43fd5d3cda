//! Closing, reopening, and several handles on the same data.

use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, Enqueue, KvEntry, KvError, KvValue, Mutation, MutationKind,
    QueueMessageHandle, ReadRange, SnapshotRead, key,
};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        reads_and_writes_fail_with_closed_after_close,
        close_is_idempotent,
        optional_methods_without_their_capability_refuse;
        WATCH =>
        watch_fails_with_closed_after_close,
        watch_stream_ends_after_close;
        QUEUES =>
        dequeue_after_close_hands_out_nothing,
        blocked_dequeue_returns_when_closed;
        QUEUE_INSPECTION =>
        queue_listing_fails_with_closed_after_close;
        INTEGRITY_CHECK =>
        integrity_check_fails_with_closed_after_close;
        REOPEN =>
        reopen_keeps_entries_values_and_versionstamps,
        reopen_keeps_expiry_times,
        versionstamps_keep_increasing_across_reopen,
        two_handles_see_each_others_commits,
        closing_one_handle_leaves_another_open;
        QUEUES_REOPEN =>
        queued_messages_survive_reopen,
        message_in_flight_at_close_is_delivered_after_reopen,
    ]
}

const WAIT: Duration = Duration::from_secs(5);
const HOUR: Duration = Duration::from_secs(3600);

type Dequeued = Result<Option<Box<dyn QueueMessageHandle>>, KvError>;

/// How a dequeue ended, for assertion messages (handles are not `Debug`).
fn describe(outcome: &Dequeued) -> String {
    match outcome {
        Ok(None) => "Ok(None)".to_owned(),
        Ok(Some(message)) => format!("a message with payload {:02x?}", message.payload()),
        Err(e) => format!("Err({e:?})"),
    }
}

/// A closed handle may answer a dequeue with `Ok(None)` or `Err(Closed)`, nothing else.
fn assert_closed_dequeue(outcome: &Dequeued) {
    assert!(
        matches!(outcome, Ok(None) | Err(KvError::Closed)),
        "a closed handle's dequeue must give Ok(None) or Err(Closed), got {}",
        describe(outcome)
    );
}

/// Dequeues the next message within 5 s; returns it.
async fn next_message(kv: &dyn Backend) -> Box<dyn QueueMessageHandle> {
    match tokio::time::timeout(WAIT, kv.dequeue_next_message()).await {
        Ok(Ok(Some(message))) => message,
        Ok(other) => panic!("expected a message, got {}", describe(&other)),
        Err(_) => panic!("no message delivered within {WAIT:?}"),
    }
}

/// A write enqueuing `payload`, due `after` from now.
fn enqueue_write(env: &Env, payload: &str, after: Duration) -> AtomicWrite {
    let KvValue::V8(payload) = v8_string(payload) else {
        unreachable!("v8_string gives V8 bytes")
    };
    let delay = chrono::TimeDelta::from_std(after).unwrap_or(chrono::TimeDelta::MAX);
    AtomicWrite {
        enqueues: vec![Enqueue {
            payload: payload.to_vec(),
            ready_at: env.clock().now() + delay,
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..Default::default()
    }
}

fn payload_of(text: &str) -> Vec<u8> {
    match v8_string(text) {
        KvValue::V8(bytes) => bytes.to_vec(),
        other => unreachable!("v8_string gave {other:?}"),
    }
}

/// `what` on a closed handle answered `Err(Closed)`.
fn assert_closed<T: std::fmt::Debug>(what: &str, answer: Result<T, KvError>) {
    assert!(
        matches!(answer, Err(KvError::Closed)),
        "{what} after close: expected Closed, got {answer:?}"
    );
}

/// Every entry in the store (up to 1000), in key order.
async fn everything(kv: &dyn Backend) -> Vec<KvEntry> {
    list_prefix(kv, &key![], 1000, false).await
}

async fn reads_and_writes_fail_with_closed_after_close(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    env.kv.close().await.expect("close");
    let read = env
        .kv
        .snapshot_read(SnapshotRead {
            ranges: vec![ReadRange::single_key(&key!["a"]).expect("key")],
            ..Default::default()
        })
        .await;
    assert_closed("snapshot_read", read);
    let write = env
        .kv
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(enc(&key!["b"]), KvValue::U64(2))],
            ..Default::default()
        })
        .await;
    assert_closed("atomic_write", write);
}

async fn close_is_idempotent(env: Env) {
    env.kv.close().await.expect("first close");
    env.kv
        .close()
        .await
        .expect("a second close succeeds as well");
    let read = env
        .kv
        .snapshot_read(SnapshotRead {
            ranges: vec![ReadRange::single_key(&key!["a"]).expect("key")],
            ..Default::default()
        })
        .await;
    assert!(
        matches!(read, Err(KvError::Closed)),
        "still closed: {read:?}"
    );
}

/// Every optional method whose capability the backend does not report answers
/// `Unsupported`, and the answer does not depend on anything stored. (On a backend offering every
/// capability there is nothing to refuse; the minimal engine and the masked memory engine of
/// `tests/capability_gating.rs` offer none, open-deno-kv-remote offers neither queue inspection nor the
/// integrity check.)
async fn optional_methods_without_their_capability_refuse(env: Env) {
    let caps = env.kv.capabilities();
    let refused = |what: &str, answer: Result<(), KvError>| {
        assert!(
            matches!(answer, Err(KvError::Unsupported { .. })),
            "{what} without its capability: expected Unsupported, got {answer:?}"
        );
    };
    if !caps.queues {
        let answer = env.kv.dequeue_next_message().await.map(|_| ());
        refused("dequeue_next_message", answer);
    }
    if !caps.queue_inspection {
        refused("queued_messages", env.kv.queued_messages().await.map(drop));
    }
    if !caps.watch {
        refused("watch", env.kv.watch(vec![enc(&key!["a"])]).map(drop));
    }
    if !caps.integrity_check {
        refused("check_integrity", env.kv.check_integrity().await.map(drop));
    }
}

async fn watch_fails_with_closed_after_close(env: Env) {
    env.kv.close().await.expect("close");
    match env.kv.watch(vec![enc(&key!["a"])]) {
        Err(KvError::Closed) => {}
        Err(e) => panic!("watch after close: expected Closed, got {e:?}"),
        Ok(_) => panic!("watch after close: expected Closed, got a stream"),
    }
}

/// A stream opened before the close ends (after at most `Err(Closed)` items) and emits no more
/// states.
async fn watch_stream_ends_after_close(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let mut stream = env.kv.watch(vec![enc(&key!["a"])]).expect("watch");
    let first = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("the first emission comes at once");
    assert!(matches!(first, Some(Ok(_))), "first emission: {first:?}");
    env.kv.close().await.expect("close");
    loop {
        match tokio::time::timeout(WAIT, stream.next()).await {
            Err(_) => panic!("the watch stream did not end within {WAIT:?} of the close"),
            Ok(None) => break,
            Ok(Some(Err(KvError::Closed))) => {}
            Ok(Some(other)) => panic!("after close the stream emitted {other:?}"),
        }
    }
}

/// A message already due when the handle closes is not handed out by the closed handle: the
/// dequeue answers `Ok(None)`, so a consumer loop simply ends.
async fn dequeue_after_close_hands_out_nothing(env: Env) {
    commit(&*env.kv, enqueue_write(&env, "due", Duration::ZERO)).await;
    env.kv.close().await.expect("close");
    let outcome = tokio::time::timeout(WAIT, env.kv.dequeue_next_message())
        .await
        .expect("a dequeue on a closed handle returns at once");
    assert!(
        matches!(outcome, Ok(None)),
        "a closed handle's dequeue must answer Ok(None), got {}",
        describe(&outcome)
    );
}

/// Listing the queue of a closed handle fails with `Closed`, even with a message waiting.
async fn queue_listing_fails_with_closed_after_close(env: Env) {
    commit(&*env.kv, enqueue_write(&env, "waiting", HOUR)).await;
    env.kv.close().await.expect("close");
    assert_closed("queued_messages", env.kv.queued_messages().await);
}

/// The integrity check of a closed handle fails with `Closed`.
async fn integrity_check_fails_with_closed_after_close(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    env.kv.close().await.expect("close");
    assert_closed("check_integrity", env.kv.check_integrity().await);
}

/// A dequeue waiting for a message (here one due in an hour) returns promptly when the handle
/// closes, without the message.
async fn blocked_dequeue_returns_when_closed(env: Env) {
    commit(&*env.kv, enqueue_write(&env, "later", HOUR)).await;
    let kv = env.kv.clone();
    let waiting = tokio::spawn(async move { kv.dequeue_next_message().await });
    // Give the dequeue a moment to start waiting (real time; nothing here depends on it).
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "nothing is due yet");
    env.kv.close().await.expect("close");
    let outcome = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the blocked dequeue returns after the close")
        .expect("the dequeue task does not panic");
    assert_closed_dequeue(&outcome);
}

async fn reopen_keeps_entries_values_and_versionstamps(mut env: Env) {
    set(&*env.kv, &key!["v8"], v8_string("hello")).await;
    set(
        &*env.kv,
        &key!["bytes"],
        KvValue::Bytes(vec![0, 1, 0xff].into()),
    )
    .await;
    set(&*env.kv, &key!["empty"], KvValue::Bytes(vec![].into())).await;
    set(&*env.kv, &key!["u64"], KvValue::U64(u64::MAX)).await;
    set(
        &*env.kv,
        &key!["deep", 1, 2.5, true, b"\x00"],
        KvValue::U64(3),
    )
    .await;
    set(&*env.kv, &key!["overwritten"], KvValue::U64(1)).await;
    set(&*env.kv, &key!["deleted"], KvValue::U64(1)).await;
    commit(
        &*env.kv,
        AtomicWrite {
            mutations: vec![
                Mutation::set(enc(&key!["pair", 1]), KvValue::U64(10)),
                Mutation::set(enc(&key!["pair", 2]), KvValue::U64(20)),
                Mutation::set(enc(&key!["overwritten"]), KvValue::U64(2)),
                Mutation::delete(enc(&key!["deleted"])),
                Mutation::sum(enc(&key!["counter"]), KvValue::U64(5)),
                mutation(
                    &key!["stamped"],
                    MutationKind::SetSuffixVersionstampedKey(KvValue::U64(6)),
                ),
            ],
            ..Default::default()
        },
    )
    .await;
    let before = everything(&*env.kv).await;
    assert_eq!(before.len(), 10, "{before:?}");

    env.reopen().await.expect("reopen");
    assert_eq!(
        everything(&*env.kv).await,
        before,
        "every key, value and versionstamp is kept"
    );
    assert_eq!(get(&*env.kv, &key!["deleted"]).await, None);
}

async fn reopen_keeps_expiry_times(mut env: Env) {
    let now = env.clock().now();
    set_expiring(&*env.kv, &key!["one hour"], KvValue::U64(1), now, HOUR).await;
    set_expiring(&*env.kv, &key!["two hours"], KvValue::U64(2), now, HOUR * 2).await;
    env.reopen().await.expect("reopen");
    assert_eq!(
        get_value(&*env.kv, &key!["one hour"]).await,
        Some(KvValue::U64(1))
    );
    env.advance(HOUR - Duration::from_millis(1));
    assert_eq!(
        get_value(&*env.kv, &key!["one hour"]).await,
        Some(KvValue::U64(1)),
        "not removed early"
    );
    env.advance(Duration::from_millis(1));
    assert_eq!(
        get(&*env.kv, &key!["one hour"]).await,
        None,
        "the expiry time survived the reopen"
    );
    env.reopen().await.expect("second reopen");
    assert_eq!(
        get_value(&*env.kv, &key!["two hours"]).await,
        Some(KvValue::U64(2))
    );
    env.advance(HOUR);
    assert_eq!(get(&*env.kv, &key!["two hours"]).await, None);
}

/// The commit after a reopen gets a larger versionstamp than every commit before it, including
/// a last commit that left no entry carrying its versionstamp (a delete).
async fn versionstamps_keep_increasing_across_reopen(mut env: Env) {
    let first = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let second = set(&*env.kv, &key!["b"], KvValue::U64(2)).await;
    let last = delete(&*env.kv, &key!["b"]).await;
    assert!(first < second && second < last);
    env.reopen().await.expect("reopen");
    let after = set(&*env.kv, &key!["c"], KvValue::U64(3)).await;
    assert!(
        after > last,
        "after reopen {after} must exceed the last commit's {last}"
    );
    env.reopen().await.expect("reopen without commits");
    let again = delete(&*env.kv, &key!["missing"]).await;
    assert!(again > after, "{again} must exceed {after}");
}

/// Two handles opened on the same data see each other's commits and versionstamps, and a check
/// on one handle sees writes made through the other.
async fn two_handles_see_each_others_commits(env: Env) {
    let other = env.open_another().await.expect("open a second handle");
    let from_first = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let seen = get(&*other, &key!["a"])
        .await
        .expect("visible to the other");
    assert_eq!(
        (seen.value, seen.versionstamp),
        (KvValue::U64(1), from_first)
    );

    let from_other = commit(
        &*other,
        AtomicWrite {
            checks: vec![check(&key!["a"], Some(from_first))],
            mutations: vec![Mutation::set(enc(&key!["a"]), KvValue::U64(2))],
            ..Default::default()
        },
    )
    .await;
    assert!(from_other > from_first);
    let seen = get(&*env.kv, &key!["a"])
        .await
        .expect("visible to the first");
    assert_eq!(
        (seen.value, seen.versionstamp),
        (KvValue::U64(2), from_other)
    );

    let stale = AtomicWrite {
        checks: vec![check(&key!["a"], Some(from_first))],
        mutations: vec![Mutation::set(enc(&key!["a"]), KvValue::U64(3))],
        ..Default::default()
    };
    let outcome = env.kv.atomic_write(stale).await.map_err(|e| e.to_string());
    assert_eq!(
        outcome,
        Ok(None),
        "the other handle's write changed the key"
    );
    other.close().await.expect("close the second handle");
}

async fn closing_one_handle_leaves_another_open(env: Env) {
    let other = env.open_another().await.expect("open a second handle");
    let stamp = set(&*other, &key!["from other"], KvValue::U64(1)).await;
    other.close().await.expect("close the second handle");
    let write = other
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(enc(&key!["x"]), KvValue::U64(0))],
            ..Default::default()
        })
        .await;
    assert!(matches!(write, Err(KvError::Closed)), "{write:?}");

    let entry = get(&*env.kv, &key!["from other"])
        .await
        .expect("the closed handle's commit is kept");
    assert_eq!(entry.versionstamp, stamp);
    let later = set(&*env.kv, &key!["from first"], KvValue::U64(2)).await;
    assert!(later > stamp);
}

/// Messages waiting when the data is closed are delivered after it is opened again, each once
/// its time comes.
async fn queued_messages_survive_reopen(mut env: Env) {
    commit(&*env.kv, enqueue_write(&env, "now", Duration::ZERO)).await;
    commit(
        &*env.kv,
        enqueue_write(&env, "in a minute", Duration::from_secs(60)),
    )
    .await;
    env.reopen().await.expect("reopen");

    let message = next_message(&*env.kv).await;
    assert_eq!(message.payload(), payload_of("now"));
    message.finish(true).await.expect("finish");

    env.advance(Duration::from_secs(60));
    let message = next_message(&*env.kv).await;
    assert_eq!(message.payload(), payload_of("in a minute"));
    message.finish(true).await.expect("finish");
}

/// A message handed out but not finished when the handle closes (as when a process dies) is not
/// lost: after a reopen, once its deadline and first retry interval have passed, it is
/// delivered again.
async fn message_in_flight_at_close_is_delivered_after_reopen(mut env: Env) {
    commit(&*env.kv, enqueue_write(&env, "in flight", Duration::ZERO)).await;
    let held = next_message(&*env.kv).await;
    assert_eq!(held.payload(), payload_of("in flight"));
    env.reopen().await.expect("reopen");
    env.advance(Duration::from_secs(60));

    let again = next_message(&*env.kv).await;
    assert_eq!(again.payload(), payload_of("in flight"));
    again.finish(true).await.expect("finish");
    // The first delivery's handle is only let go now, after the redelivery was seen.
    drop(held);
}

//! Queues: delivery, delay, ordering, at-least-once retries with back-off, dead-letter keys,
//! atomicity with the write that enqueues, and several consumers.
//!
//! Time-based behaviour (delays, back-off) is driven by the manual clock; only waiting for a
//! delivery that must (or must not) happen uses real time, with a timeout.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use open_deno_kv_model::queue::MESSAGE_DEADLINE;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, DEFAULT_BACKOFF_SCHEDULE, Enqueue, KvValue, Mutation,
    QueueMessageHandle, ReadRange, Versionstamp, key,
};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::cases;

mod cancel;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    let mut all = cases![
        QUEUES =>
            enqueued_message_is_delivered_with_its_exact_payload,
            finished_message_is_never_delivered_again,
            delayed_message_is_not_delivered_before_its_ready_time,
            messages_are_delivered_in_ready_time_order,
            failed_message_is_redelivered_after_the_first_default_backoff,
            default_schedule_is_followed_then_the_message_is_gone,
            custom_backoff_schedule_is_followed_interval_by_interval,
            exhausted_message_is_written_under_every_undelivered_key,
            empty_backoff_schedule_dead_letters_at_the_first_failure,
            exhausted_message_without_undelivered_keys_is_dropped,
            dropped_handle_counts_as_a_failed_delivery,
            enqueue_in_a_write_whose_check_fails_is_not_delivered,
            enqueue_in_a_refused_write_is_not_delivered,
            enqueue_commits_together_with_its_mutations,
            unfinished_message_is_not_handed_out_twice,
            message_waiting_for_retry_does_not_block_others,
            fifty_messages_all_arrive_exactly_once,
            waiting_dequeue_wakes_when_a_message_is_enqueued,
            waiting_dequeue_wakes_when_a_delayed_message_becomes_due;
        QUEUE_INSPECTION =>
            queued_messages_lists_waiting_and_delivered_messages_without_taking_them;
        QUEUES_REOPEN =>
            consumers_on_two_handles_together_get_each_message_once,
            message_held_by_a_crashed_consumer_is_redelivered_after_reopen,
    ];
    all.extend(cancel::cases());
    all
}

/// How long to wait for a delivery that must happen.
const WAIT: Duration = Duration::from_secs(5);
/// How long to watch for a delivery that must not happen.
const QUIET: Duration = Duration::from_millis(200);

/// The bytes of a V8-serialized string, used as a message payload.
fn payload(text: &str) -> Vec<u8> {
    let KvValue::V8(bytes) = v8_string(text) else {
        panic!("v8_string builds V8 bytes");
    };
    bytes.to_vec()
}

/// A message due now, with Deno's default schedule and no dead-letter keys.
fn message(env: &Env, text: &str) -> Enqueue {
    Enqueue {
        payload: payload(text),
        ready_at: env.clock().now(),
        keys_if_undelivered: Vec::new(),
        backoff_schedule: None,
    }
}

/// A message due `delay` from now.
fn delayed(env: &Env, text: &str, delay: Duration) -> Enqueue {
    let delay = TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX);
    Enqueue {
        ready_at: env.clock().now() + delay,
        ..message(env, text)
    }
}

/// A message due now with its own schedule and dead-letter keys.
fn with_retries(
    env: &Env,
    text: &str,
    schedule: &[u32],
    keys: &[open_deno_kv_model::Key],
) -> Enqueue {
    Enqueue {
        keys_if_undelivered: keys.iter().map(enc).collect(),
        backoff_schedule: Some(schedule.to_vec()),
        ..message(env, text)
    }
}

/// Commits one enqueue on its own.
async fn enqueue(kv: &dyn Backend, message: Enqueue) -> Versionstamp {
    commit(
        kv,
        AtomicWrite {
            enqueues: vec![message],
            ..Default::default()
        },
    )
    .await
}

fn ms(n: u32) -> Duration {
    Duration::from_millis(u64::from(n))
}

/// Payload bytes as readable text for failure messages.
fn shown(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

/// The next message; panics if none arrives within [`WAIT`].
async fn dequeue(kv: &dyn Backend) -> Box<dyn QueueMessageHandle> {
    match timeout(WAIT, kv.dequeue_next_message()).await {
        Ok(Ok(Some(handle))) => handle,
        Ok(Ok(None)) => panic!("dequeue returned None, as if the backend were closed"),
        Ok(Err(e)) => panic!("dequeue failed: {e}"),
        Err(_) => panic!("no message was delivered within {WAIT:?}"),
    }
}

/// The next message, which must carry `expected`.
async fn receive(kv: &dyn Backend, expected: &[u8]) -> Box<dyn QueueMessageHandle> {
    let handle = dequeue(kv).await;
    assert_eq!(
        shown(handle.payload()),
        shown(expected),
        "the delivered payload"
    );
    assert_eq!(handle.payload(), expected, "the delivered payload bytes");
    handle
}

/// Reports the outcome of a delivery; panics if the backend refuses.
async fn finish(handle: Box<dyn QueueMessageHandle>, success: bool) {
    if let Err(e) = handle.finish(success).await {
        panic!("finish({success}) failed: {e}");
    }
}

/// Asserts that no message is delivered within [`QUIET`].
async fn assert_no_message(kv: &dyn Backend, when: &str) {
    match timeout(QUIET, kv.dequeue_next_message()).await {
        Err(_) => {}
        Ok(Ok(Some(handle))) => panic!(
            "{when}: no message should be delivered, got {:?}",
            shown(handle.payload())
        ),
        Ok(Ok(None)) => panic!("{when}: dequeue returned None, as if the backend were closed"),
        Ok(Err(e)) => panic!("{when}: dequeue failed: {e}"),
    }
}

/// A dequeue running in the background.
fn spawn_dequeue(
    kv: &Arc<dyn Backend>,
) -> JoinHandle<Result<Option<Box<dyn QueueMessageHandle>>, open_deno_kv_model::KvError>> {
    let kv = kv.clone();
    tokio::spawn(async move { kv.dequeue_next_message().await })
}

/// Waits for a background dequeue to hand out a message.
async fn joined(
    task: JoinHandle<Result<Option<Box<dyn QueueMessageHandle>>, open_deno_kv_model::KvError>>,
) -> Box<dyn QueueMessageHandle> {
    match timeout(WAIT, task).await {
        Ok(Ok(Ok(Some(handle)))) => handle,
        Ok(Ok(Ok(None))) => panic!("dequeue returned None, as if the backend were closed"),
        Ok(Ok(Err(e))) => panic!("dequeue failed: {e}"),
        Ok(Err(e)) => panic!("the dequeue task failed: {e}"),
        Err(_) => panic!("the waiting dequeue was not woken within {WAIT:?}"),
    }
}

/// Moves the clock in small steps, up to twice a message deadline plus the first back-off
/// interval, until a waiting dequeue gets a message. For redeliveries a backend may schedule
/// either at once or only when the holder's deadline passes.
async fn advance_until_delivered(env: &Env) -> Box<dyn QueueMessageHandle> {
    let task = spawn_dequeue(&env.kv);
    let step = ms(50);
    let limit = 2 * (MESSAGE_DEADLINE + ms(DEFAULT_BACKOFF_SCHEDULE[0]));
    let mut advanced = Duration::ZERO;
    while !task.is_finished() && advanced < limit {
        env.advance(step);
        advanced += step;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match timeout(WAIT, task).await {
        Ok(Ok(Ok(Some(handle)))) => handle,
        Ok(Ok(Ok(None))) => panic!("dequeue returned None, as if the backend were closed"),
        Ok(Ok(Err(e))) => panic!("dequeue failed: {e}"),
        Ok(Err(e)) => panic!("the dequeue task failed: {e}"),
        Err(_) => panic!("the message was not redelivered, even with the clock moved {limit:?} on"),
    }
}

/// Every entry in the database (up to 1000).
async fn everything(kv: &dyn Backend) -> Vec<open_deno_kv_model::KvEntry> {
    let all = ReadRange {
        start: vec![0x00],
        end: vec![0xff],
        limit: 1000,
        reverse: false,
    };
    read(kv, vec![all]).await.remove(0)
}

/// A year: longer than any back-off, delay or message deadline.
const A_YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

async fn enqueued_message_is_delivered_with_its_exact_payload(env: Env) {
    // Bytes 00 and FF inside the payload must survive storage untouched.
    let odd = vec![0xff, 0x0f, 0x42, 0x03, 0x00, 0xff, 0x01];
    enqueue(
        &*env.kv,
        Enqueue {
            payload: odd.clone(),
            ..message(&env, "")
        },
    )
    .await;
    let handle = receive(&*env.kv, &odd).await;
    finish(handle, true).await;

    enqueue(&*env.kv, message(&env, "hello queue")).await;
    let handle = receive(&*env.kv, &payload("hello queue")).await;
    finish(handle, true).await;
}

/// Success is final: the message is never redelivered (not even after every back-off interval
/// and any consumer deadline) and its dead-letter keys are never written.
async fn finished_message_is_never_delivered_again(env: Env) {
    let text = "once";
    enqueue(
        &*env.kv,
        Enqueue {
            keys_if_undelivered: vec![enc(&key!["dead", "once"])],
            ..message(&env, text)
        },
    )
    .await;
    let handle = receive(&*env.kv, &payload(text)).await;
    finish(handle, true).await;
    assert_no_message(&*env.kv, "right after finish(true)").await;

    let every_backoff: u32 = DEFAULT_BACKOFF_SCHEDULE.iter().sum();
    env.advance(ms(every_backoff) + MESSAGE_DEADLINE + Duration::from_secs(60));
    assert_no_message(&*env.kv, "after every back-off interval").await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "a year later").await;
    assert_eq!(get(&*env.kv, &key!["dead", "once"]).await, None);
}

async fn delayed_message_is_not_delivered_before_its_ready_time(env: Env) {
    enqueue(&*env.kv, delayed(&env, "later", Duration::from_secs(10))).await;
    assert_no_message(&*env.kv, "at enqueue time").await;
    env.advance(Duration::from_millis(9_999));
    assert_no_message(&*env.kv, "1 ms before the ready time").await;
    env.advance(Duration::from_millis(1));
    let handle = receive(&*env.kv, &payload("later")).await;
    finish(handle, true).await;
}

/// Messages come out by ready time, not by enqueue order.
async fn messages_are_delivered_in_ready_time_order(env: Env) {
    enqueue(&*env.kv, delayed(&env, "third", ms(300))).await;
    enqueue(&*env.kv, delayed(&env, "first", ms(100))).await;
    enqueue(&*env.kv, message(&env, "now")).await;
    enqueue(&*env.kv, delayed(&env, "second", ms(200))).await;
    env.advance(ms(300));
    let mut order = Vec::new();
    for _ in 0..4 {
        let handle = dequeue(&*env.kv).await;
        order.push(shown(handle.payload()));
        finish(handle, true).await;
    }
    let expected: Vec<String> = ["now", "first", "second", "third"]
        .iter()
        .map(|t| shown(&payload(t)))
        .collect();
    assert_eq!(order, expected);
}

/// At least once: a failed delivery comes back after the first default interval (100 ms),
/// counted from the failure, not from the message's original ready time.
async fn failed_message_is_redelivered_after_the_first_default_backoff(env: Env) {
    enqueue(&*env.kv, message(&env, "retry me")).await;
    // The message sat in the queue for a while before a consumer took it.
    env.advance(Duration::from_secs(1));
    let handle = receive(&*env.kv, &payload("retry me")).await;
    finish(handle, false).await;
    assert_no_message(&*env.kv, "right after the failure").await;
    env.advance(ms(99));
    assert_no_message(&*env.kv, "99 ms after the failure").await;
    env.advance(ms(1));
    let handle = receive(&*env.kv, &payload("retry me")).await;
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the successful retry").await;
}

/// Fails every delivery of the one queued message carrying `text`, checking that each retry
/// comes exactly `interval` after the failure, then that the message is gone.
async fn fail_through_schedule(env: &Env, text: &str, schedule: &[u32]) {
    let handle = receive(&*env.kv, &payload(text)).await;
    finish(handle, false).await;
    for (retry, &interval) in schedule.iter().enumerate() {
        let retry = retry + 1;
        if interval > 0 {
            env.advance(ms(interval - 1));
            assert_no_message(
                &*env.kv,
                &format!("retry {retry}, 1 ms before its {interval} ms interval"),
            )
            .await;
            env.advance(ms(1));
        }
        let handle = receive(&*env.kv, &payload(text)).await;
        finish(handle, false).await;
    }
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the last retry failed").await;
}

/// With no schedule given, Deno's [100, 1000, 5000, 30000, 60000] applies: five retries, each
/// after its interval, then nothing more.
async fn default_schedule_is_followed_then_the_message_is_gone(env: Env) {
    enqueue(&*env.kv, message(&env, "default")).await;
    fail_through_schedule(&env, "default", &DEFAULT_BACKOFF_SCHEDULE).await;
}

async fn custom_backoff_schedule_is_followed_interval_by_interval(env: Env) {
    let schedule = [10, 2_500, 250, 3_600_000];
    enqueue(&*env.kv, with_retries(&env, "custom", &schedule, &[])).await;
    fail_through_schedule(&env, "custom", &schedule).await;
}

/// When retries run out the payload is set, V8-encoded and without expiry, under every key of
/// `keys_if_undelivered` (replacing what was there), in one commit; then the message is gone.
async fn exhausted_message_is_written_under_every_undelivered_key(env: Env) {
    let keys = [key!["dead"], key!["letters", 1, true]];
    set(&*env.kv, &keys[0], KvValue::U64(7)).await;
    enqueue(&*env.kv, with_retries(&env, "undeliverable", &[50], &keys)).await;

    let handle = receive(&*env.kv, &payload("undeliverable")).await;
    finish(handle, false).await;
    assert_eq!(
        get_value(&*env.kv, &keys[0]).await,
        Some(KvValue::U64(7)),
        "a retry is still due: nothing is written yet"
    );
    assert_eq!(get(&*env.kv, &keys[1]).await, None);
    env.advance(ms(50));
    let handle = receive(&*env.kv, &payload("undeliverable")).await;
    let before = set(&*env.kv, &key!["marker"], KvValue::U64(0)).await;
    finish(handle, false).await;

    let mut stamps = Vec::new();
    for k in &keys {
        let entry = get(&*env.kv, k)
            .await
            .unwrap_or_else(|| panic!("the payload should be written under {k}"));
        assert_eq!(
            entry.value,
            KvValue::V8(payload("undeliverable").into()),
            "at {k}"
        );
        assert!(
            entry.versionstamp > before,
            "{k} was written after the failure"
        );
        stamps.push(entry.versionstamp);
    }
    assert_eq!(
        stamps[0], stamps[1],
        "the dead-letter keys share one commit"
    );

    env.advance(A_YEAR);
    for k in &keys {
        assert_eq!(
            get_value(&*env.kv, k).await,
            Some(KvValue::V8(payload("undeliverable").into())),
            "{k} has no expiry"
        );
    }
    assert_no_message(&*env.kv, "after the message was dead-lettered").await;
}

async fn empty_backoff_schedule_dead_letters_at_the_first_failure(env: Env) {
    let dead = key!["dead"];
    enqueue(
        &*env.kv,
        with_retries(&env, "no retry", &[], std::slice::from_ref(&dead)),
    )
    .await;
    let handle = receive(&*env.kv, &payload("no retry")).await;
    finish(handle, false).await;
    assert_eq!(
        get_value(&*env.kv, &dead).await,
        Some(KvValue::V8(payload("no retry").into()))
    );
    assert_no_message(&*env.kv, "right after the only failure").await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "a year after the only failure").await;
}

async fn exhausted_message_without_undelivered_keys_is_dropped(env: Env) {
    set(&*env.kv, &key!["existing"], KvValue::U64(1)).await;
    let before = everything(&*env.kv).await;
    enqueue(&*env.kv, with_retries(&env, "dropped", &[], &[])).await;
    let handle = receive(&*env.kv, &payload("dropped")).await;
    finish(handle, false).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the message failed").await;
    assert_eq!(
        everything(&*env.kv).await,
        before,
        "dropping a message writes nothing"
    );
}

/// A consumer that lets go of a message without finishing it has failed it: it comes back after
/// the back-off interval (a backend may wait for the message's deadline first, but never
/// redelivers before the interval).
async fn dropped_handle_counts_as_a_failed_delivery(env: Env) {
    // Its retry is 100 ms away: only a frozen clock tells "not yet" from "too early".
    if !env.offered.manual_clock {
        crate::NotRunnable::stop("needs a manual clock: the retry it checks for is 100 ms away");
    }
    enqueue(&*env.kv, message(&env, "abandoned")).await;
    let handle = receive(&*env.kv, &payload("abandoned")).await;
    drop(handle);
    assert_no_message(&*env.kv, "right after the handle was dropped").await;
    env.advance(ms(99));
    assert_no_message(&*env.kv, "99 ms after the handle was dropped").await;

    let handle = advance_until_delivered(&env).await;
    assert_eq!(shown(handle.payload()), shown(&payload("abandoned")));
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the redelivery succeeded").await;
}

async fn enqueue_in_a_write_whose_check_fails_is_not_delivered(env: Env) {
    let guard = key!["guard"];
    set(&*env.kv, &guard, KvValue::U64(1)).await;
    let outcome = env
        .kv
        .atomic_write(AtomicWrite {
            checks: vec![check(&guard, None)],
            mutations: Vec::new(),
            enqueues: vec![message(&env, "lost")],
        })
        .await;
    assert!(
        matches!(outcome, Ok(None)),
        "the check must fail, got {outcome:?}"
    );
    enqueue(&*env.kv, message(&env, "kept")).await;
    let handle = receive(&*env.kv, &payload("kept")).await;
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the committed message").await;
}

/// A write refused by one of its mutations enqueues nothing either.
async fn enqueue_in_a_refused_write_is_not_delivered(env: Env) {
    let text_key = key!["text"];
    set(&*env.kv, &text_key, v8_string("not a number")).await;
    let error = write_error(
        &*env.kv,
        AtomicWrite {
            checks: Vec::new(),
            mutations: vec![Mutation::sum(enc(&text_key), KvValue::U64(1))],
            enqueues: vec![message(&env, "lost")],
        },
    )
    .await;
    assert_eq!(
        error,
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    enqueue(&*env.kv, message(&env, "kept")).await;
    let handle = receive(&*env.kv, &payload("kept")).await;
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the committed message").await;
}

/// An enqueue is part of its write's commit: when the message arrives, the write's mutations are
/// visible with that commit's versionstamp.
async fn enqueue_commits_together_with_its_mutations(env: Env) {
    let k = key!["job", 1];
    let stamp = commit(
        &*env.kv,
        AtomicWrite {
            checks: vec![check(&k, None)],
            mutations: vec![Mutation::set(enc(&k), v8_string("queued"))],
            enqueues: vec![message(&env, "job 1")],
        },
    )
    .await;
    let handle = receive(&*env.kv, &payload("job 1")).await;
    let entry = get(&*env.kv, &k).await.expect("the set of the same commit");
    assert_eq!(entry.value, v8_string("queued"));
    assert_eq!(entry.versionstamp, stamp);
    finish(handle, true).await;
}

/// While a consumer holds a message (before its deadline), no other dequeue gets it.
async fn unfinished_message_is_not_handed_out_twice(env: Env) {
    enqueue(&*env.kv, message(&env, "held")).await;
    let handle = receive(&*env.kv, &payload("held")).await;
    assert_no_message(&*env.kv, "while the first consumer holds the message").await;
    env.advance(ms(DEFAULT_BACKOFF_SCHEDULE[0]));
    assert_no_message(&*env.kv, "still held, 100 ms later").await;
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after it was finished").await;
}

/// A message waiting for its retry does not hold up messages that are due.
async fn message_waiting_for_retry_does_not_block_others(env: Env) {
    enqueue(&*env.kv, message(&env, "failing")).await;
    let handle = receive(&*env.kv, &payload("failing")).await;
    finish(handle, false).await;
    enqueue(&*env.kv, message(&env, "fine")).await;
    let handle = receive(&*env.kv, &payload("fine")).await;
    finish(handle, true).await;
    env.advance(ms(DEFAULT_BACKOFF_SCHEDULE[0]));
    let handle = receive(&*env.kv, &payload("failing")).await;
    finish(handle, true).await;
}

async fn fifty_messages_all_arrive_exactly_once(env: Env) {
    let texts: Vec<String> = (0..50).map(|i| format!("message {i}")).collect();
    // Half in one write, half one by one.
    commit(
        &*env.kv,
        AtomicWrite {
            enqueues: texts[..25].iter().map(|t| message(&env, t)).collect(),
            ..Default::default()
        },
    )
    .await;
    for text in &texts[25..] {
        enqueue(&*env.kv, message(&env, text)).await;
    }
    let mut received = Vec::new();
    for _ in 0..texts.len() {
        let handle = dequeue(&*env.kv).await;
        received.push(shown(handle.payload()));
        finish(handle, true).await;
    }
    let unique: BTreeSet<&String> = received.iter().collect();
    assert_eq!(unique.len(), received.len(), "a message arrived twice");
    let expected: BTreeSet<String> = texts.iter().map(|t| shown(&payload(t))).collect();
    assert_eq!(received.into_iter().collect::<BTreeSet<_>>(), expected);
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after all fifty").await;
}

async fn waiting_dequeue_wakes_when_a_message_is_enqueued(env: Env) {
    let task = spawn_dequeue(&env.kv);
    tokio::time::sleep(QUIET).await;
    assert!(!task.is_finished(), "dequeue returned on an empty queue");
    enqueue(&*env.kv, message(&env, "wake up")).await;
    let handle = joined(task).await;
    assert_eq!(shown(handle.payload()), shown(&payload("wake up")));
    finish(handle, true).await;
}

async fn waiting_dequeue_wakes_when_a_delayed_message_becomes_due(env: Env) {
    enqueue(&*env.kv, delayed(&env, "alarm", Duration::from_secs(60))).await;
    let task = spawn_dequeue(&env.kv);
    tokio::time::sleep(QUIET).await;
    assert!(!task.is_finished(), "dequeue returned before the delay");
    env.advance(Duration::from_secs(59));
    tokio::time::sleep(QUIET).await;
    assert!(!task.is_finished(), "dequeue returned 1 s before the delay");
    env.advance(Duration::from_secs(1));
    let handle = joined(task).await;
    assert_eq!(shown(handle.payload()), shown(&payload("alarm")));
    finish(handle, true).await;
}

/// Two consumers on two handles of the same database, each in its own loop, together receive
/// every message exactly once when every delivery succeeds, whichever handle enqueued it.
async fn consumers_on_two_handles_together_get_each_message_once(env: Env) {
    let other = match env.open_another().await {
        Ok(other) => other,
        Err(e) => panic!("opening a second handle failed: {e}"),
    };
    let (sender, mut inbox) = tokio::sync::mpsc::unbounded_channel::<String>();
    let consumers: Vec<JoinHandle<()>> = [env.kv.clone(), other.clone()]
        .into_iter()
        .map(|kv| {
            let sender = sender.clone();
            tokio::spawn(async move {
                while let Ok(Some(handle)) = kv.dequeue_next_message().await {
                    let text = shown(handle.payload());
                    if let Err(e) = handle.finish(true).await {
                        panic!("finish(true) failed: {e}");
                    }
                    if sender.send(text).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();

    let texts: Vec<String> = (0..40).map(|i| format!("shared {i}")).collect();
    for (i, text) in texts.iter().enumerate() {
        let via = if i % 2 == 0 { &env.kv } else { &other };
        enqueue(&**via, message(&env, text)).await;
    }
    let mut received = Vec::new();
    while received.len() < texts.len() {
        match timeout(WAIT, inbox.recv()).await {
            Ok(Some(text)) => received.push(text),
            Ok(None) => panic!("both consumers stopped after {} messages", received.len()),
            Err(_) => panic!(
                "only {} of {} messages arrived within {WAIT:?} of the last",
                received.len(),
                texts.len()
            ),
        }
    }
    // An engine may store successes in batches behind its consumers (see the engine kit's
    // `DeliveryEngine::settle`): each handle's own listing waits for the successes *it*
    // recorded, and may still show a message the other handle finished. So where the queue can
    // be listed, both handles list once (each storing its own successes), and then both
    // listings must be empty before a year passes.
    if env.offered.capabilities.queue_inspection {
        for kv in [&env.kv, &other] {
            if let Err(e) = kv.queued_messages().await {
                panic!("listing the queue failed: {e}");
            }
        }
        for kv in [&env.kv, &other] {
            match kv.queued_messages().await {
                Ok(left) => assert!(
                    left.is_empty(),
                    "messages left after every success: {left:?}"
                ),
                Err(e) => panic!("listing the queue failed: {e}"),
            }
        }
    }
    env.advance(A_YEAR);
    if let Ok(Some(extra)) = timeout(QUIET, inbox.recv()).await {
        panic!("a message was delivered again: {extra:?}");
    }
    for consumer in &consumers {
        consumer.abort();
    }
    let _ = other.close().await;

    let unique: BTreeSet<&String> = received.iter().collect();
    assert_eq!(unique.len(), received.len(), "a message arrived twice");
    let expected: BTreeSet<String> = texts.iter().map(|t| shown(&payload(t))).collect();
    assert_eq!(received.into_iter().collect::<BTreeSet<_>>(), expected);
}

/// A consumer that vanished holding a message (its handle neither finished nor dropped, as when
/// a process dies) does not lose it: the message is requeued when the database is opened again
/// (or its deadline passes) and delivered once more.
async fn message_held_by_a_crashed_consumer_is_redelivered_after_reopen(mut env: Env) {
    enqueue(&*env.kv, message(&env, "orphan")).await;
    let handle = receive(&*env.kv, &payload("orphan")).await;
    // The consumer disappears without a word: no finish, no drop.
    std::mem::forget(handle);
    if let Err(e) = env.reopen().await {
        panic!("reopening failed: {e}");
    }
    let handle = advance_until_delivered(&env).await;
    assert_eq!(shown(handle.payload()), shown(&payload("orphan")));
    finish(handle, true).await;
    env.advance(A_YEAR);
    assert_no_message(&*env.kv, "after the redelivery succeeded").await;
}

/// `queued_messages` (optional: runs only on backends reporting `queue_inspection`) shows every message —
/// waiting, delayed, and handed out but unfinished — with its payload, dead-letter keys and
/// remaining schedule, and takes nothing: the messages are still delivered afterwards.
/// `queue_depth` counts the same messages (waiting and being delivered) at every step.
async fn queued_messages_lists_waiting_and_delivered_messages_without_taking_them(env: Env) {
    let kv = env.kv.as_ref();
    let now = env.clock().now();
    enqueue(
        kv,
        with_retries(&env, "held", &[10, 20], &[key!["dead", "held"]]),
    )
    .await;
    enqueue(kv, delayed(&env, "later", Duration::from_secs(60))).await;
    let held = receive(kv, &payload("held")).await;

    let listed = kv.queued_messages().await.expect("queued_messages");
    assert_eq!(
        kv.queue_depth().await.expect("queue_depth"),
        2,
        "the depth counts the waiting message and the one being delivered"
    );
    let payloads: Vec<String> = listed.iter().map(|m| shown(&m.payload)).collect();
    assert_eq!(
        payloads,
        vec![shown(&payload("held")), shown(&payload("later"))],
        "every message, the one being delivered first (it counts as ready now)"
    );
    assert!(
        listed[0].ready_at <= env.clock().now(),
        "a delivered message is ready now"
    );
    assert_eq!(
        listed[0].keys_if_undelivered,
        vec![enc(&key!["dead", "held"])]
    );
    assert_eq!(listed[0].backoff_schedule, vec![10, 20]);
    assert_eq!(
        listed[1].ready_at,
        now + TimeDelta::seconds(60),
        "the delayed message keeps its ready time"
    );
    assert_eq!(
        listed[1].backoff_schedule,
        DEFAULT_BACKOFF_SCHEDULE.to_vec()
    );

    finish(held, true).await;
    let after = kv.queued_messages().await.expect("queued_messages");
    assert_eq!(
        after.len(),
        1,
        "a finished message is gone; the other is untouched"
    );
    assert_eq!(kv.queue_depth().await.expect("queue_depth"), 1);
    env.advance(Duration::from_secs(60));
    let later = receive(kv, &payload("later")).await;
    finish(later, true).await;
    assert_eq!(kv.queue_depth().await.expect("queue_depth"), 0);
}

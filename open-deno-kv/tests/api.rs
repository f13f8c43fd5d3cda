//! The `Kv` API end to end, on the in-memory backend with a manual clock (expiry and queue
//! back-off without sleeping) and on SQLite files (the same calls, plus reopening).
//!
//! The backends' own rules are proven by open-deno-kv-conformance; these tests cover what this crate adds:
//! key and value conversions, paging and cursors, the atomic builder, the queue listener and the
//! watch stream's full states.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::deno_value;
use futures::{StreamExt, TryStreamExt};
use num_bigint::BigInt;
use open_deno_kv::{
    CommitOutcome, DeliveryFailure, EnqueueOptions, Entry, Error, IntoValue, Json, Kv, KvError,
    KvValue, ListOptions, ListenOptions, Selector, key,
};
use open_deno_kv_memory::{MemoryBackend, MemoryStore};
use open_deno_kv_model::{Clock, ManualClock};
use serde::{Deserialize, Serialize};

fn memory_kv() -> (Kv, ManualClock) {
    let clock = ManualClock::at_test_epoch();
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let backend = MemoryBackend::open(&MemoryStore::new(), shared.clone());
    (Kv::with_clock(Arc::new(backend), shared), clock)
}

async fn collect(kv: &Kv, selector: Selector, options: ListOptions) -> Vec<Entry> {
    match kv.list(selector, options) {
        Ok(stream) => match stream.try_collect().await {
            Ok(entries) => entries,
            Err(err) => panic!("list failed: {err}"),
        },
        Err(err) => panic!("list refused: {err}"),
    }
}

fn keys_of(entries: &[Entry]) -> Vec<open_deno_kv::Key> {
    entries.iter().map(|e| e.key.clone()).collect()
}

#[tokio::test]
async fn set_get_delete_round_trip_every_value_kind() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    kv.set(key!["u64"], 7u64).await?;
    kv.set(key!["bytes"], vec![1u8, 2, 3]).await?;
    let json =
        open_deno_kv::v8::from_json(&serde_json::json!({"name": "Alice", "tags": ["a", "b"]}))?;
    kv.set(key!["json"], json).await?;

    assert_eq!(kv.get(key!["u64"]).await?.value, Some(KvValue::U64(7)));
    assert_eq!(
        kv.get(key!["bytes"]).await?.value,
        Some(KvValue::Bytes(vec![1, 2, 3].into()))
    );
    let stored = kv.get(key!["json"]).await?;
    let value = stored
        .value
        .as_ref()
        .map(open_deno_kv::v8::to_json)
        .transpose()?;
    assert_eq!(
        value,
        Some(serde_json::json!({"name": "Alice", "tags": ["a", "b"]}))
    );

    let missing = kv.get(key!["missing"]).await?;
    assert!(!missing.exists());
    assert_eq!(missing.versionstamp, None);
    assert_eq!(missing.key, key!["missing"]);

    kv.delete(key!["u64"]).await?;
    assert!(!kv.get(key!["u64"]).await?.exists());
    Ok(())
}

#[tokio::test]
async fn get_many_answers_in_order_and_refuses_more_than_ten() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    kv.set(key!["b"], 2u64).await?;
    let got = kv.get_many([key!["a"], key!["b"], key!["c"]]).await?;
    let values: Vec<_> = got.iter().map(|e| e.value.clone()).collect();
    assert_eq!(values, vec![None, Some(KvValue::U64(2)), None]);

    let eleven: Vec<open_deno_kv::Key> = (0..11).map(|i| key!["k", i]).collect();
    match kv.get_many(eleven).await {
        Err(Error::Kv(KvError::Limit(limit))) => {
            assert_eq!(limit.to_string(), "Too many ranges (max 10)")
        }
        other => panic!("expected Deno's range limit, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn list_pages_under_the_hood_and_resumes_from_its_cursor() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    for i in 0..25u64 {
        kv.set(key!["items", i], i).await?;
    }
    kv.set(key!["other"], 0u64).await?;

    // Pages of 4 give the same 25 entries, in order, as one big page.
    let small_pages = ListOptions {
        batch_size: Some(4),
        ..Default::default()
    };
    let all = collect(&kv, Selector::prefix(key!["items"]), small_pages).await;
    let expected: Vec<open_deno_kv::Key> = (0..25u64).map(|i| key!["items", i]).collect();
    assert_eq!(keys_of(&all), expected);

    // A limit stops early; the cursor resumes exactly after the last entry.
    let mut first = kv.list(
        Selector::prefix(key!["items"]),
        ListOptions {
            limit: Some(10),
            batch_size: Some(3),
            ..Default::default()
        },
    )?;
    let mut seen = Vec::new();
    while let Some(entry) = first.try_next().await? {
        seen.push(entry.key);
    }
    assert_eq!(seen, expected[..10]);
    let cursor = first.cursor();
    assert!(cursor.is_some());
    let rest = collect(
        &kv,
        Selector::prefix(key!["items"]),
        ListOptions {
            cursor,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(keys_of(&rest), expected[10..]);

    // Reverse, paged, with a limit.
    let newest = collect(
        &kv,
        Selector::prefix(key!["items"]),
        ListOptions {
            reverse: true,
            limit: Some(5),
            batch_size: Some(2),
            ..Default::default()
        },
    )
    .await;
    let expected_reverse: Vec<open_deno_kv::Key> =
        (20..25u64).rev().map(|i| key!["items", i]).collect();
    assert_eq!(keys_of(&newest), expected_reverse);

    // {prefix, start} and {start, end}.
    let tail = collect(
        &kv,
        Selector::prefix(key!["items"]).start(key!["items", 22u64]),
        ListOptions::default(),
    )
    .await;
    assert_eq!(tail.len(), 3);
    let window = collect(
        &kv,
        Selector::range(key!["items", 3u64], key!["items", 6u64]),
        ListOptions::default(),
    )
    .await;
    assert_eq!(keys_of(&window), expected[3..6]);
    Ok(())
}

#[tokio::test]
async fn list_errors_are_deno_s_and_come_before_any_read() {
    let (kv, _) = memory_kv();
    let bad_start = Selector::prefix(key!["a"]).start(key!["b"]);
    match kv.list(bad_start, ListOptions::default()) {
        Err(err) => assert_eq!(
            err.to_string(),
            "Start key is not in the keyspace defined by prefix"
        ),
        Ok(_) => panic!("a start outside the prefix must be refused"),
    }
    let bad_cursor = ListOptions {
        cursor: Some("%%%".into()),
        ..Default::default()
    };
    match kv.list(Selector::prefix(key!["a"]), bad_cursor) {
        Err(err) => assert_eq!(err.to_string(), "invalid cursor"),
        Ok(_) => panic!("a malformed cursor must be refused"),
    }
}

#[tokio::test]
async fn atomic_checks_decide_and_versionstamped_keys_follow_commit_order()
-> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    let first = kv.set(key!["balance"], 100u64).await?;
    let entry = kv.get(key!["balance"]).await?;
    assert_eq!(entry.versionstamp, Some(first.versionstamp));

    // A check on the current versionstamp commits; the same check again fails and writes nothing.
    let committed = kv
        .atomic()
        .check(&entry)
        .sum(key!["balance"], 5u64)
        .set_versionstamped(key!["log"], 5u64)
        .commit()
        .await?;
    let Some(commit_versionstamp) = committed.versionstamp() else {
        panic!("the check held, the commit must happen")
    };
    let stale = kv
        .atomic()
        .check((key!["balance"], entry.versionstamp))
        .set(key!["balance"], 0u64)
        .commit()
        .await?;
    assert_eq!(stale, CommitOutcome::CheckFailed);
    assert_eq!(
        kv.get(key!["balance"]).await?.value,
        Some(KvValue::U64(105))
    );

    // The versionstamped key ends with the commit's versionstamp.
    let log = collect(&kv, Selector::prefix(key!["log"]), ListOptions::default()).await;
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].key, key!["log", commit_versionstamp.to_string()]);

    // check(None): only if absent. min/max keep the smaller / larger.
    let created = kv
        .atomic()
        .check((key!["fresh"], None))
        .set(key!["fresh"], 10u64)
        .min(key!["fresh"], 3)
        .max(key!["high"], 9)
        .commit()
        .await?;
    assert!(created.is_committed());
    assert_eq!(kv.get(key!["fresh"]).await?.value, Some(KvValue::U64(3)));
    assert_eq!(kv.get(key!["high"]).await?.value, Some(KvValue::U64(9)));
    Ok(())
}

#[tokio::test]
async fn a_bad_key_in_an_atomic_operation_writes_nothing() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    let too_big = num_bigint::BigInt::from(2u8).pow(2048);
    let result = kv
        .atomic()
        .set(key!["ok"], 1u64)
        .set(key![too_big], 2u64)
        .commit()
        .await;
    assert!(matches!(result, Err(Error::Kv(KvError::InvalidKey { .. }))));
    assert!(!kv.get(key!["ok"]).await?.exists());
    Ok(())
}

#[tokio::test]
async fn expiring_entries_vanish_at_their_time() -> open_deno_kv::Result<()> {
    let (kv, clock) = memory_kv();
    kv.set_expiring(key!["session"], 1u64, Duration::from_secs(60))
        .await?;
    clock.advance(Duration::from_secs(59));
    assert!(kv.get(key!["session"]).await?.exists());
    clock.advance(Duration::from_secs(1));
    assert!(!kv.get(key!["session"]).await?.exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_queue_retries_a_failed_handler_until_it_succeeds() -> open_deno_kv::Result<()> {
    let (kv, clock) = memory_kv();
    let payload = open_deno_kv::v8::from_json(&serde_json::json!({"job": 1}))?;
    kv.enqueue(
        payload,
        EnqueueOptions {
            backoff_schedule: Some(vec![1_000, 1_000]),
            ..Default::default()
        },
    )
    .await?;

    let calls = Arc::new(AtomicUsize::new(0));
    let listener = {
        let kv = kv.clone();
        let calls = calls.clone();
        tokio::spawn(async move {
            kv.listen_queue(move |message: KvValue| {
                let calls = calls.clone();
                async move {
                    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                    assert_eq!(
                        open_deno_kv::v8::to_json(&message).ok(),
                        Some(serde_json::json!({"job": 1}))
                    );
                    if n == 1 {
                        return Err("first attempt fails");
                    }
                    if n == 2 {
                        panic!("second attempt panics");
                    }
                    Ok(())
                }
            })
            .await
        })
    };
    // Each failure waits one back-off interval (1 s on the manual clock): move the clock in
    // small steps until the next attempt comes.
    wait_until(|| calls.load(Ordering::SeqCst) >= 1).await;
    for expected in 2..=3 {
        advance_until(&clock, || calls.load(Ordering::SeqCst) >= expected).await;
    }
    // Delivered and acknowledged: nothing more arrives however long we wait.
    clock.advance(Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    kv.close().await?;
    match tokio::time::timeout(Duration::from_secs(10), listener).await {
        Ok(Ok(result)) => result?,
        other => panic!("the listener must end when the store closes: {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_message_lands_in_its_dead_letter_key() -> open_deno_kv::Result<()> {
    let (kv, clock) = memory_kv();
    kv.enqueue(
        7u64,
        EnqueueOptions {
            keys_if_undelivered: vec![key!["dead"]],
            backoff_schedule: Some(vec![]),
            ..Default::default()
        },
    )
    .await?;
    let listener = {
        let kv = kv.clone();
        tokio::spawn(async move {
            kv.listen_queue(|_: KvValue| async { Err::<(), _>("always fails") })
                .await
        })
    };
    wait_for_key(&kv, &clock, key!["dead"]).await?;
    // A u64 message travels as V8 `{value: 7n}`, as Deno's `enqueue(new Deno.KvU64(7n))`.
    let dead = kv.get(key!["dead"]).await?;
    assert!(matches!(dead.value, Some(KvValue::V8(_))));
    kv.close().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), listener).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_yields_every_key_s_full_state_after_each_change() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    kv.set(key!["a"], 1u64).await?;
    let mut watch = kv.watch([key!["a"], key!["b"]])?;

    let first = next_state(&mut watch).await?;
    assert_eq!(first[0].value, Some(KvValue::U64(1)));
    assert_eq!(first[1].value, None);

    kv.set(key!["b"], 2u64).await?;
    let second = next_state(&mut watch).await?;
    // "a" did not change, but its entry is still there: every item is the full state.
    assert_eq!(second[0].value, Some(KvValue::U64(1)));
    assert_eq!(second[1].value, Some(KvValue::U64(2)));
    assert_eq!(second[1].key, key!["b"]);

    kv.close().await?;
    let end = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert!(
        matches!(end, Ok(None)),
        "the watch ends when the store closes"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_urls_open_durable_files_that_reopen() -> open_deno_kv::Result<()> {
    let dir = tempfile::tempdir().map_err(Error::storage)?;
    let path = dir.path().join("data.sqlite3");
    let url = format!("sqlite:{}", path.display());
    let kv = Kv::open(&url).await?;
    let commit = kv.set(key!["kept"], 42u64).await?;
    kv.close().await?;

    let again = Kv::open(&path.display().to_string()).await?;
    let entry = again.get(key!["kept"]).await?;
    assert_eq!(entry.value, Some(KvValue::U64(42)));
    assert_eq!(entry.versionstamp, Some(commit.versionstamp));
    again.close().await?;

    let read_only = Kv::open(&format!("{url}?read_only")).await?;
    assert!(matches!(
        read_only.set(key!["x"], 1u64).await,
        Err(Error::Kv(KvError::ReadOnly))
    ));
    read_only.close().await?;

    assert!(matches!(
        Kv::open("nosuch:thing").await,
        Err(Error::BadUrl { .. })
    ));
    Ok(())
}

async fn next_state(
    watch: &mut open_deno_kv::WatchStream,
) -> open_deno_kv::Result<Vec<open_deno_kv::MaybeEntry>> {
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        Ok(Some(state)) => state,
        Ok(None) => panic!("the watch ended early"),
        Err(_) => panic!("no watch emission within 5 s"),
    }
}

async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached within 5 s");
}

/// Advances the manual clock 100 ms at a time (letting tasks run in between) until `done`.
async fn advance_until(clock: &ManualClock, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        clock.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached within 50 s of manual time");
}

/// Advances the manual clock in steps until `key` exists.
async fn wait_for_key(
    kv: &Kv,
    clock: &ManualClock,
    key: open_deno_kv::Key,
) -> open_deno_kv::Result<()> {
    for _ in 0..500 {
        if kv.get(key.clone()).await?.exists() {
            return Ok(());
        }
        clock.advance(Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key} was not written within 5 s");
}

/// The number of the fixture "number 3.14": the literal Deno stored, not an approximation of π.
#[allow(clippy::approx_constant)]
const FIXTURE_3_14: f64 = 3.14;

/// The Rust side of the fixture `{ a: 1, b: 2 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pair {
    a: i32,
    b: i32,
}

/// The Rust side of the fixture `{ a: { b: { c: { d: "deep" } } }, list: [ { x: 1 } ] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Nested {
    a: NestedB,
    list: Vec<X>,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NestedB {
    b: NestedC,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NestedC {
    c: NestedD,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NestedD {
    d: String,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct X {
    x: u8,
}

/// Sets `value` with the plain API and returns the stored value, to compare with Deno's bytes.
async fn stored(kv: &Kv, value: impl IntoValue) -> open_deno_kv::Result<KvValue> {
    kv.set(key!["plain"], value).await?;
    kv.get(key!["plain"])
        .await?
        .value
        .ok_or_else(|| Error::invalid_argument("the value just set is missing"))
}

#[tokio::test]
async fn plain_rust_values_are_stored_as_deno_stores_the_same_javascript()
-> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    let nested = Nested {
        a: NestedB {
            b: NestedC {
                c: NestedD { d: "deep".into() },
            },
        },
        list: vec![X { x: 1 }],
    };
    // Each Rust value beside the fixture Deno 2.9.6 wrote for the same JavaScript value.
    let cases: Vec<(&str, KvValue)> = vec![
        ("string ascii", stored(&kv, "hello").await?),
        ("string ascii", stored(&kv, String::from("hello")).await?),
        ("string latin1", stored(&kv, "café ÿ").await?),
        ("string two-byte", stored(&kv, "中文 😀").await?),
        ("string empty", stored(&kv, "").await?),
        ("number 42", stored(&kv, 42).await?),
        ("number 42", stored(&kv, 42u8).await?),
        ("number -1", stored(&kv, -1i64).await?),
        ("number 0", stored(&kv, 0usize).await?),
        ("number 3.14", stored(&kv, FIXTURE_3_14).await?),
        ("number 2^31", stored(&kv, 2_147_483_648i64).await?),
        (
            "number 2^53-1",
            stored(&kv, 9_007_199_254_740_991i64).await?,
        ),
        ("number NaN", stored(&kv, f64::NAN).await?),
        ("number -0", stored(&kv, -0.0).await?),
        ("bool true", stored(&kv, true).await?),
        ("bool false", stored(&kv, false).await?),
        ("bigint 42", stored(&kv, BigInt::from(42)).await?),
        ("bigint -42", stored(&kv, BigInt::from(-42)).await?),
        (
            "bigint 2^64",
            stored(&kv, BigInt::from(u64::MAX) + 1).await?,
        ),
        ("KvU64 1", stored(&kv, 1u64).await?),
        ("KvU64 max", stored(&kv, u64::MAX).await?),
        ("Uint8Array", stored(&kv, vec![1u8, 2, 3]).await?),
        ("Uint8Array", stored(&kv, &[1u8, 2, 3]).await?),
        ("Uint8Array empty", stored(&kv, &b""[..]).await?),
        ("object", stored(&kv, Json(Pair { a: 1, b: 2 })).await?),
        (
            "object",
            stored(&kv, serde_json::json!({"a": 1, "b": 2})).await?,
        ),
        ("object nested", stored(&kv, Json(&nested)).await?),
        ("array", stored(&kv, Json([1, 2, 3])).await?),
        ("null", stored(&kv, Json(None::<u8>)).await?),
    ];
    for (fixture, value) in cases {
        assert_eq!(value, deno_value(fixture), "{fixture}");
    }
    Ok(())
}

#[tokio::test]
async fn an_integer_a_javascript_number_would_round_is_refused_not_rounded()
-> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    for too_big in [1i64 << 53, -(1i64 << 53), i64::MAX] {
        match kv.set(key!["n"], too_big).await {
            Err(Error::Kv(KvError::InvalidArgument { message })) => {
                assert!(message.contains("BigInt"), "{message}")
            }
            other => panic!("{too_big}: expected a refusal, got {other:?}"),
        }
    }
    // In an atomic operation the refusal comes from commit, and nothing is written.
    let result = kv
        .atomic()
        .set(key!["first"], "written only with the rest")
        .set(key!["n"], usize::MAX)
        .commit()
        .await;
    assert!(
        matches!(result, Err(Error::Kv(KvError::InvalidArgument { .. }))),
        "{result:?}"
    );
    assert!(!kv.get(key!["first"]).await?.exists());
    Ok(())
}

#[tokio::test]
async fn entries_read_back_into_rust_types() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    // Values Deno wrote, read as the Rust types a program would ask for.
    let deno = |name: &'static str| {
        let kv = kv.clone();
        async move {
            kv.set(key!["deno", name], deno_value(name)).await?;
            kv.get(key!["deno", name]).await
        }
    };
    assert_eq!(
        deno("string ascii").await?.value_as::<String>()?.as_deref(),
        Some("hello")
    );
    assert_eq!(deno("number 42").await?.value_as::<i32>()?, Some(42));
    assert_eq!(
        deno("number 3.14").await?.value_as::<f64>()?,
        Some(FIXTURE_3_14)
    );
    assert_eq!(deno("bool true").await?.value_as::<bool>()?, Some(true));
    assert_eq!(deno("KvU64 max").await?.value_as::<u64>()?, Some(u64::MAX));
    assert_eq!(deno("bigint 42").await?.value_as::<i64>()?, Some(42));
    assert_eq!(
        deno("object").await?.value_as::<Pair>()?,
        Some(Pair { a: 1, b: 2 })
    );
    assert_eq!(
        deno("array").await?.value_as::<Vec<u32>>()?,
        Some(vec![1, 2, 3])
    );

    // An absent key is None; a value of another shape is a serialization error.
    assert_eq!(kv.get(key!["absent"]).await?.value_as::<Pair>()?, None);
    assert!(matches!(
        deno("string ascii").await?.value_as::<Pair>(),
        Err(Error::Serialization(_))
    ));

    // Entries from a list read the same way.
    kv.set(key!["pairs", 1], Json(Pair { a: 3, b: 4 })).await?;
    let listed = collect(&kv, Selector::prefix(key!["pairs"]), ListOptions::default()).await;
    let pairs = listed
        .iter()
        .map(Entry::value_as::<Pair>)
        .collect::<open_deno_kv::Result<Vec<_>>>()?;
    assert_eq!(pairs, vec![Pair { a: 3, b: 4 }]);
    Ok(())
}

#[tokio::test]
async fn check_takes_what_a_read_returned() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    // An absent key read with get: the check holds while it stays absent.
    let absent = kv.get(key!["config"]).await?;
    let created = kv
        .atomic()
        .check(&absent)
        .set(key!["config"], "v1")
        .commit()
        .await?;
    let CommitOutcome::Committed { versionstamp } = created else {
        panic!("the key was absent, the commit must happen")
    };
    assert_eq!(created.versionstamp(), Some(versionstamp));
    let again = kv
        .atomic()
        .check(&absent)
        .set(key!["config"], "v0")
        .commit()
        .await?;
    assert_eq!(again, CommitOutcome::CheckFailed);
    assert!(!again.is_committed());
    assert_eq!(again.versionstamp(), None);

    // An entry from a list: the check holds until the key changes.
    let mut listed = collect(
        &kv,
        Selector::range(key!["config"], key!["config", 0]),
        ListOptions::default(),
    )
    .await;
    let entry = listed
        .pop()
        .ok_or_else(|| Error::invalid_argument("config not listed"))?;
    assert_eq!(entry.versionstamp, versionstamp);
    let updated = kv
        .atomic()
        .check(&entry)
        .set(key!["config"], "v2")
        .commit()
        .await?;
    assert!(updated.is_committed());
    let stale = kv
        .atomic()
        .check(&entry)
        .set(key!["config"], "v3")
        .commit()
        .await?;
    assert_eq!(stale, CommitOutcome::CheckFailed);
    assert_eq!(
        kv.get(key!["config"])
            .await?
            .value_as::<String>()?
            .as_deref(),
        Some("v2")
    );
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Job {
    id: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_queue_hands_typed_payloads_and_reports_every_failed_delivery()
-> open_deno_kv::Result<()> {
    let (kv, clock) = memory_kv();
    let once = EnqueueOptions {
        backoff_schedule: Some(vec![1_000]),
        keys_if_undelivered: vec![key!["undelivered"]],
        ..Default::default()
    };
    kv.enqueue(Json(Job { id: 1 }), once.clone()).await?;
    // Not a Job: the handler never sees it; its one delivery fails and it lands in its dead
    // letter.
    let no_retry = EnqueueOptions {
        backoff_schedule: Some(vec![]),
        ..once.clone()
    };
    kv.enqueue("not a job", no_retry).await?;

    let failures = Arc::new(Mutex::new(Vec::new()));
    let jobs = Arc::new(Mutex::new(Vec::new()));
    let listener = {
        let (kv, failures, jobs) = (kv.clone(), failures.clone(), jobs.clone());
        let options = ListenOptions::default()
            .concurrency(1)
            .on_error(move |failure| {
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(failure.clone())
            });
        tokio::spawn(async move {
            kv.listen_queue_with(options, move |Json(job): Json<Job>| {
                let jobs = jobs.clone();
                async move {
                    let mut jobs = jobs.lock().unwrap_or_else(|e| e.into_inner());
                    jobs.push(job.clone());
                    if jobs.len() == 1 {
                        return Err(format!("job {} failed the first time", job.id));
                    }
                    Ok(())
                }
            })
            .await
        })
    };
    let jobs_seen = || jobs.lock().unwrap_or_else(|e| e.into_inner()).len();
    wait_until(|| jobs_seen() >= 1).await;
    advance_until(&clock, || jobs_seen() >= 2).await;
    wait_for_key(&kv, &clock, key!["undelivered"]).await?;
    assert_eq!(
        kv.get(key!["undelivered"])
            .await?
            .value_as::<String>()?
            .as_deref(),
        Some("not a job")
    );
    kv.close().await?;
    match tokio::time::timeout(Duration::from_secs(10), listener).await {
        Ok(Ok(result)) => result?,
        other => panic!("the listener must end when the store closes: {other:?}"),
    }

    assert_eq!(
        *jobs.lock().unwrap_or_else(|e| e.into_inner()),
        vec![Job { id: 1 }, Job { id: 1 }]
    );
    let failures = failures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures.contains(&DeliveryFailure::Handler(
        "job 1 failed the first time".into()
    )));
    assert!(
        failures
            .iter()
            .any(|f| matches!(f, DeliveryFailure::Payload(reason) if reason.contains("serde"))),
        "{failures:?}"
    );
    Ok(())
}

#[tokio::test]
async fn listen_options_default_to_deno_s_concurrency() {
    let options = format!("{:?}", ListenOptions::default());
    assert!(
        options.contains(&format!(
            "concurrency: {}",
            open_deno_kv::DEFAULT_QUEUE_CONCURRENCY
        )),
        "{options}"
    );
    let one = format!("{:?}", ListenOptions::default().concurrency(0));
    assert!(one.contains("concurrency: 1"), "{one}");
}

#[test]
fn kv_open_works_on_a_current_thread_runtime() -> open_deno_kv::Result<()> {
    // Kv::open leaves the executor for the file work (tokio's blocking pool on a current-thread
    // runtime); the same file then opens again without a runtime.
    let dir = tempfile::tempdir().map_err(Error::storage)?;
    let url = format!("sqlite:{}", dir.path().join("open.sqlite3").display());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::storage)?;
    runtime.block_on(async {
        let kv = Kv::open(&url).await?;
        kv.set(key!["opened"], "async").await?;
        kv.close().await
    })?;
    let kv = Kv::open_blocking(&url)?;
    let value = runtime.block_on(async { kv.get(key!["opened"]).await })?;
    assert_eq!(value.value_as::<String>()?.as_deref(), Some("async"));
    runtime.block_on(kv.close())
}

#[tokio::test]
async fn errors_are_matched_one_level_deep() -> open_deno_kv::Result<()> {
    let (kv, _) = memory_kv();
    match kv.set(key!["big"], vec![0u8; 70_000]).await {
        Err(Error::Kv(KvError::Limit(limit))) => {
            assert_eq!(limit.to_string(), "Value too large (max 65536 bytes)")
        }
        other => panic!("expected Deno's value limit, got {other:?}"),
    }
    let err = kv
        .list(
            Selector::prefix(key!["a"]),
            ListOptions {
                cursor: Some("not base64!".into()),
                ..Default::default()
            },
        )
        .err();
    assert!(
        matches!(err, Some(Error::Kv(KvError::InvalidArgument { .. }))),
        "{err:?}"
    );
    kv.close().await?;
    assert!(matches!(
        kv.get(key!["a"]).await,
        Err(Error::Kv(KvError::Closed))
    ));
    Ok(())
}

//! Deno's request limits, enforced by the backend itself: each limit is met exactly (the request
//! passes) and exceeded by one (refused with Deno's exact text, nothing applied).
//!
//! The enqueue limits need queues: their "at the limit" half commits an enqueue, so on a backend
//! without queues they show as ignored rather than passing on their refusal half alone.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::StreamExt;
use open_deno_kv_model::{
    AtomicWrite, Backend, Check, Clock, Enqueue, Key, KeyPart, KvEntry, KvError, KvValue, Mutation,
    ReadRange, key,
};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        key_size_on_write_is_2048_bytes,
        key_size_on_read_is_2049_bytes,
        value_size_is_65536_bytes,
        ranges_per_read_is_10,
        entries_per_read_is_1000,
        checks_per_write_is_100,
        mutations_per_write_is_1000,
        total_mutation_size_is_819200_bytes,
        total_mutation_size_counts_check_and_delete_keys,
        total_key_size_is_81920_bytes_of_keys_with_values,
        empty_key_is_refused_for_set_and_check,
        zero_read_limit_is_refused,
        malformed_key_is_refused_for_writes,
        refused_write_applies_nothing,
        invalid_write_is_refused_even_if_its_check_fails,
        count_limits_are_reported_before_key_and_value_sizes;
        QUEUES =>
        enqueue_payload_is_65536_bytes,
        enqueues_count_as_mutations,
        total_mutation_size_counts_enqueue_payload_and_backoff,
        queue_delay_is_at_most_30_days,
        backoff_schedule_has_at_most_5_intervals,
        backoff_interval_is_at_most_one_hour;
        WATCH =>
        watched_keys_are_at_most_10,
        watched_key_size_is_2049_bytes,
    ]
}

const MAX_WRITE_KEY: &str = "Key too large for write (max 2048 bytes)";
const MAX_READ_KEY: &str = "Key too large for read (max 2049 bytes)";
const MAX_VALUE: &str = "Value too large (max 65536 bytes)";
const MAX_MUTATIONS: &str = "Too many mutations (max 1000)";
const MAX_TOTAL_SIZE: &str = "Total mutation size too large (max 819200 bytes)";

/// A valid encoded key of exactly `len` bytes (one bytes part: tag, body, terminator); keys with
/// different `n` differ.
fn key_of_len(len: usize, n: u8) -> Vec<u8> {
    assert!(n < 255 && len >= 3);
    let mut body = vec![1u8; len - 3];
    body.push(n + 1);
    let key = enc(&Key::new(vec![KeyPart::Bytes(body)]));
    assert_eq!(key.len(), len);
    key
}

/// A small numbered key, `["m", i]`.
fn numbered(i: usize) -> Vec<u8> {
    enc(&key!["m", i])
}

/// A write made of these mutations only.
fn write_of(mutations: Vec<Mutation>) -> AtomicWrite {
    AtomicWrite {
        mutations,
        ..Default::default()
    }
}

/// An enqueue of `payload_len` bytes, due at `ready_at`.
fn enqueue(payload_len: usize, ready_at: DateTime<Utc>, schedule: Option<Vec<u32>>) -> Enqueue {
    Enqueue {
        payload: vec![0; payload_len],
        ready_at,
        keys_if_undelivered: vec![],
        backoff_schedule: schedule,
    }
}

/// A write holding one enqueue.
fn enqueue_write(enqueue: Enqueue) -> AtomicWrite {
    AtomicWrite {
        enqueues: vec![enqueue],
        ..Default::default()
    }
}

/// The error of a write expected to be refused.
async fn refused(kv: &dyn Backend, write: AtomicWrite) -> KvError {
    match kv.atomic_write(write).await {
        Err(e) => e,
        Ok(r) => panic!("write should have been refused, got {r:?}"),
    }
}

/// The entry stored at an encoded key.
async fn get_encoded(kv: &dyn Backend, key: &[u8]) -> Option<KvEntry> {
    let mut out = read(kv, vec![ReadRange::single_encoded_key(key.to_vec())]).await;
    out.remove(0).pop()
}

/// Every stored key (up to 1000).
async fn all_keys(kv: &dyn Backend) -> Vec<Vec<u8>> {
    let everything = ReadRange {
        start: vec![0x00],
        end: vec![0xff],
        limit: 1000,
        reverse: false,
    };
    let mut out = read(kv, vec![everything]).await;
    out.remove(0).into_iter().map(|e| e.key.to_vec()).collect()
}

async fn read_text(kv: &dyn Backend, ranges: Vec<ReadRange>) -> String {
    read_error(kv, ranges).await.to_string()
}

/// 13 sets of `["m", i]` whose values add up so the write's total mutation size is `total`.
fn sets_totalling(total: usize) -> AtomicWrite {
    let keys: Vec<Vec<u8>> = (0..13).map(numbered).collect();
    // Each key counts once as a mutation key, then again beside its value.
    let key_bytes: usize = keys.iter().map(|k| 2 * k.len()).sum();
    let mut left = total - key_bytes;
    let mutations = keys
        .into_iter()
        .map(|k| {
            let len = left.min(65_536);
            left -= len;
            Mutation::set(k, KvValue::Bytes(vec![7; len].into()))
        })
        .collect();
    assert_eq!(left, 0, "13 values of 64 KiB cover the total");
    write_of(mutations)
}

async fn key_size_on_write_is_2048_bytes(env: Env) {
    let ok = key_of_len(2048, 0);
    let stamp = commit(
        &*env.kv,
        write_of(vec![Mutation::set(ok.clone(), KvValue::U64(1))]),
    )
    .await;
    let entry = get_encoded(&*env.kv, &ok).await.expect("stored");
    assert_eq!(entry.versionstamp, stamp);

    let long = key_of_len(2049, 0);
    let set_long = write_of(vec![Mutation::set(long.clone(), KvValue::U64(1))]);
    assert_eq!(write_error(&*env.kv, set_long).await, MAX_WRITE_KEY);
    let delete_long = write_of(vec![Mutation::delete(long.clone())]);
    assert_eq!(write_error(&*env.kv, delete_long).await, MAX_WRITE_KEY);
    let check_long = AtomicWrite {
        checks: vec![Check {
            key: long,
            versionstamp: None,
        }],
        ..Default::default()
    };
    assert_eq!(write_error(&*env.kv, check_long).await, MAX_WRITE_KEY);
    assert_eq!(all_keys(&*env.kv).await, vec![ok]);
}

/// A read bound may be one byte longer than a written key: getting a 2048-byte key reads up to
/// that key plus `00`.
async fn key_size_on_read_is_2049_bytes(env: Env) {
    let ok = key_of_len(2048, 0);
    commit(
        &*env.kv,
        write_of(vec![Mutation::set(ok.clone(), KvValue::U64(1))]),
    )
    .await;
    let get = ReadRange::single_encoded_key(ok.clone());
    assert_eq!(get.end.len(), 2049);
    let found = read(&*env.kv, vec![get]).await;
    assert_eq!(found[0].len(), 1);
    let from_2049 = ReadRange {
        start: key_of_len(2049, 0),
        end: vec![0xff],
        limit: 10,
        reverse: false,
    };
    assert_eq!(read(&*env.kv, vec![from_2049]).await[0].len(), 0);

    let get_long = ReadRange::single_encoded_key(key_of_len(2049, 0));
    assert_eq!(read_text(&*env.kv, vec![get_long]).await, MAX_READ_KEY);
    let from_2050 = ReadRange {
        start: vec![0x01; 2050],
        end: vec![0xff],
        limit: 10,
        reverse: false,
    };
    assert_eq!(read_text(&*env.kv, vec![from_2050]).await, MAX_READ_KEY);
}

async fn value_size_is_65536_bytes(env: Env) {
    let full = KvValue::Bytes(vec![0xab; 65_536].into());
    commit(
        &*env.kv,
        write_of(vec![Mutation::set(numbered(0), full.clone())]),
    )
    .await;
    assert_eq!(
        get_encoded(&*env.kv, &numbered(0)).await.map(|e| e.value),
        Some(full)
    );
    let full_v8 = KvValue::V8(vec![0xff; 65_536].into());
    commit(
        &*env.kv,
        write_of(vec![Mutation::set(numbered(1), full_v8)]),
    )
    .await;

    for over in [
        KvValue::Bytes(vec![0; 65_537].into()),
        KvValue::V8(vec![0xff; 65_537].into()),
    ] {
        let write = write_of(vec![Mutation::set(numbered(2), over)]);
        assert_eq!(write_error(&*env.kv, write).await, MAX_VALUE);
    }
    assert_eq!(get_encoded(&*env.kv, &numbered(2)).await, None);
}

async fn enqueue_payload_is_65536_bytes(env: Env) {
    let now = env.clock().now();
    commit(&*env.kv, enqueue_write(enqueue(65_536, now, None))).await;
    let mut write = enqueue_write(enqueue(65_537, now, None));
    write
        .mutations
        .push(Mutation::set(numbered(0), KvValue::U64(1)));
    assert_eq!(
        write_error(&*env.kv, write).await,
        "enqueue payload too large (max 65536 bytes)"
    );
    assert_eq!(get_encoded(&*env.kv, &numbered(0)).await, None);
}

async fn ranges_per_read_is_10(env: Env) {
    let ranges = |n: usize| {
        (0..n)
            .map(|i| ReadRange::single_encoded_key(numbered(i)))
            .collect::<Vec<_>>()
    };
    assert_eq!(read(&*env.kv, ranges(10)).await.len(), 10);
    assert_eq!(
        read_text(&*env.kv, ranges(11)).await,
        "Too many ranges (max 10)"
    );
}

/// The limit counts the sum of the ranges' limits, not what they find.
async fn entries_per_read_is_1000(env: Env) {
    let prefix = |limit| ReadRange::prefix(&key!["m"], limit).expect("prefix");
    read(&*env.kv, vec![prefix(500), prefix(500)]).await;
    read(&*env.kv, vec![prefix(1000)]).await;
    assert_eq!(
        read_text(&*env.kv, vec![prefix(500), prefix(501)]).await,
        "Too many entries (max 1000)"
    );
    assert_eq!(
        read_text(&*env.kv, vec![prefix(1001)]).await,
        "Too many entries (max 1000)"
    );
}

async fn checks_per_write_is_100(env: Env) {
    let with_checks = |n: usize, marker: usize| AtomicWrite {
        checks: (0..n)
            .map(|i| Check {
                key: numbered(i),
                versionstamp: None,
            })
            .collect(),
        mutations: vec![Mutation::set(numbered(1000 + marker), KvValue::U64(1))],
        ..Default::default()
    };
    commit(&*env.kv, with_checks(100, 0)).await;
    assert_eq!(
        write_error(&*env.kv, with_checks(101, 1)).await,
        "Too many checks (max 100)"
    );
    assert_eq!(all_keys(&*env.kv).await, vec![numbered(1000)]);
}

async fn mutations_per_write_is_1000(env: Env) {
    let sets = |prefix: &str, n: usize| {
        write_of(
            (0..n)
                .map(|i| Mutation::set(enc(&key![prefix, i]), KvValue::U64(1)))
                .collect(),
        )
    };
    commit(&*env.kv, sets("ok", 1000)).await;
    assert!(
        get_encoded(&*env.kv, &enc(&key!["ok", 999usize]))
            .await
            .is_some()
    );
    assert_eq!(
        write_error(&*env.kv, sets("over", 1001)).await,
        MAX_MUTATIONS
    );
    assert_eq!(
        list_prefix(&*env.kv, &key!["over"], 10, false).await,
        vec![]
    );
    // Deletes count too.
    let deletes = write_of(
        (0..1001)
            .map(|i| Mutation::delete(enc(&key!["ok", i])))
            .collect(),
    );
    assert_eq!(write_error(&*env.kv, deletes).await, MAX_MUTATIONS);
    assert!(
        get_encoded(&*env.kv, &enc(&key!["ok", 0usize]))
            .await
            .is_some()
    );
}

async fn enqueues_count_as_mutations(env: Env) {
    let now = env.clock().now();
    let sets_and_enqueues = |sets: usize, enqueues: usize| AtomicWrite {
        mutations: (0..sets)
            .map(|i| Mutation::set(numbered(i), KvValue::U64(1)))
            .collect(),
        enqueues: (0..enqueues).map(|_| enqueue(1, now, None)).collect(),
        ..Default::default()
    };
    commit(&*env.kv, sets_and_enqueues(999, 1)).await;
    delete(&*env.kv, &key!["m", 0usize]).await;
    assert_eq!(
        write_error(&*env.kv, sets_and_enqueues(1000, 1)).await,
        MAX_MUTATIONS
    );
    assert_eq!(
        write_error(&*env.kv, sets_and_enqueues(999, 2)).await,
        MAX_MUTATIONS
    );
    assert_eq!(get_encoded(&*env.kv, &numbered(0)).await, None);
}

/// Each key counts once, then again with its value beside it.
async fn total_mutation_size_is_819200_bytes(env: Env) {
    commit(&*env.kv, sets_totalling(819_200)).await;
    delete(&*env.kv, &key!["m", 12usize]).await;
    assert_eq!(
        write_error(&*env.kv, sets_totalling(819_201)).await,
        MAX_TOTAL_SIZE
    );
    assert_eq!(get_encoded(&*env.kv, &numbered(12)).await, None);
}

/// Check keys and delete keys count once each towards the total mutation size.
async fn total_mutation_size_counts_check_and_delete_keys(env: Env) {
    let check_key = enc(&key!["check"]);
    let delete_key = enc(&key!["delete"]);
    let extra = check_key.len() + delete_key.len();
    let with_both = |total: usize| {
        let mut write = sets_totalling(total - extra);
        write.checks.push(Check {
            key: check_key.clone(),
            versionstamp: None,
        });
        write.mutations.push(Mutation::delete(delete_key.clone()));
        write
    };
    commit(&*env.kv, with_both(819_200)).await;
    delete(&*env.kv, &key!["m", 12usize]).await;
    assert_eq!(
        write_error(&*env.kv, with_both(819_201)).await,
        MAX_TOTAL_SIZE
    );
    assert_eq!(get_encoded(&*env.kv, &numbered(12)).await, None);
}

/// An enqueue adds its payload and 4 bytes per backoff interval to the total mutation size.
async fn total_mutation_size_counts_enqueue_payload_and_backoff(env: Env) {
    let now = env.clock().now();
    // 1 byte of payload + 5 intervals × 4 bytes.
    let with_enqueue = |total: usize| {
        let mut write = sets_totalling(total - 21);
        write.enqueues.push(enqueue(1, now, Some(vec![1; 5])));
        write
    };
    commit(&*env.kv, with_enqueue(819_200)).await;
    delete(&*env.kv, &key!["m", 12usize]).await;
    assert_eq!(
        write_error(&*env.kv, with_enqueue(819_201)).await,
        MAX_TOTAL_SIZE
    );
    assert_eq!(get_encoded(&*env.kv, &numbered(12)).await, None);
}

/// Only keys that receive a value count towards the total key size, not deletes.
async fn total_key_size_is_81920_bytes_of_keys_with_values(env: Env) {
    let mut write = write_of(
        (0..40u8)
            .map(|n| Mutation::set(key_of_len(2048, n), KvValue::Bytes(vec![].into())))
            .collect(),
    );
    write.mutations.push(Mutation::delete(enc(&key![false])));
    commit(&*env.kv, write.clone()).await;
    assert_eq!(all_keys(&*env.kv).await.len(), 40);

    write.mutations.push(Mutation::set(
        enc(&key![true]),
        KvValue::Bytes(vec![].into()),
    ));
    assert_eq!(
        write_error(&*env.kv, write).await,
        "Total key size too large (max 81920 bytes)"
    );
    assert_eq!(get(&*env.kv, &key![true]).await, None);
}

async fn queue_delay_is_at_most_30_days(env: Env) {
    let thirty_days = env.clock().now() + TimeDelta::days(30);
    commit(&*env.kv, enqueue_write(enqueue(1, thirty_days, None))).await;
    let late = thirty_days + TimeDelta::milliseconds(1);
    assert_eq!(
        write_error(&*env.kv, enqueue_write(enqueue(1, late, None))).await,
        "Delay cannot be greater than 30 days: received 2592000001"
    );
}

async fn backoff_schedule_has_at_most_5_intervals(env: Env) {
    let now = env.clock().now();
    commit(&*env.kv, enqueue_write(enqueue(1, now, Some(vec![10; 5])))).await;
    assert_eq!(
        write_error(&*env.kv, enqueue_write(enqueue(1, now, Some(vec![10; 6])))).await,
        "Invalid backoffSchedule, max 5 intervals allowed"
    );
}

async fn backoff_interval_is_at_most_one_hour(env: Env) {
    let now = env.clock().now();
    let hours = Some(vec![3_600_000; 5]);
    commit(&*env.kv, enqueue_write(enqueue(1, now, hours))).await;
    assert_eq!(
        write_error(
            &*env.kv,
            enqueue_write(enqueue(1, now, Some(vec![1, 3_600_001])))
        )
        .await,
        "Invalid backoffSchedule, interval at index 1 is invalid"
    );
}

async fn empty_key_is_refused_for_set_and_check(env: Env) {
    let set_empty = write_of(vec![Mutation::set(vec![], KvValue::U64(1))]);
    assert_eq!(
        write_error(&*env.kv, set_empty).await,
        "key cannot be empty"
    );
    let check_empty = AtomicWrite {
        checks: vec![Check {
            key: vec![],
            versionstamp: None,
        }],
        mutations: vec![Mutation::set(numbered(0), KvValue::U64(1))],
        ..Default::default()
    };
    assert_eq!(
        write_error(&*env.kv, check_empty).await,
        "key cannot be empty"
    );
    assert_eq!(all_keys(&*env.kv).await, Vec::<Vec<u8>>::new());
}

async fn zero_read_limit_is_refused(env: Env) {
    let mut zero = ReadRange::prefix(&key!["m"], 1).expect("prefix");
    zero.limit = 0;
    let fine = ReadRange::single_encoded_key(numbered(0));
    assert_eq!(
        read_text(&*env.kv, vec![fine, zero]).await,
        "limit must be greater than 0"
    );
}

/// Bytes that are not a well-formed key (unknown tag, truncated part, trailing garbage) must not
/// be written: a malformed key in storage would break later lists and decoding.
async fn malformed_key_is_refused_for_writes(env: Env) {
    let malformed: [Vec<u8>; 3] = [vec![0x99], vec![0x02, b'a'], vec![0x14, 0x99]];
    for bad in &malformed {
        let writes = [
            write_of(vec![Mutation::set(bad.clone(), KvValue::U64(1))]),
            write_of(vec![Mutation::delete(bad.clone())]),
            AtomicWrite {
                checks: vec![Check {
                    key: bad.clone(),
                    versionstamp: None,
                }],
                mutations: vec![Mutation::set(numbered(0), KvValue::U64(1))],
                ..Default::default()
            },
        ];
        for write in writes {
            let err = refused(&*env.kv, write).await;
            assert!(
                matches!(err, KvError::InvalidKey { .. }),
                "key {bad:02x?}: expected an invalid key error, got {err:?}"
            );
        }
    }
    assert_eq!(all_keys(&*env.kv).await, Vec::<Vec<u8>>::new());
}

/// A write refused by validation leaves every key as it was, even mutations before the bad one.
async fn refused_write_applies_nothing(env: Env) {
    let a = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let b = set(&*env.kv, &key!["b"], KvValue::U64(2)).await;
    let write = write_of(vec![
        Mutation::set(enc(&key!["a"]), KvValue::U64(10)),
        Mutation::delete(enc(&key!["b"])),
        Mutation::sum(enc(&key!["c"]), KvValue::U64(3)),
        Mutation::set(enc(&key!["d"]), KvValue::Bytes(vec![0; 65_537].into())),
    ]);
    assert_eq!(write_error(&*env.kv, write).await, MAX_VALUE);
    let entries = list_prefix(&*env.kv, &key![], 10, false).await;
    assert_eq!(keys_of(&entries), vec![key!["a"], key!["b"]]);
    assert_eq!(
        (entries[0].value.clone(), entries[0].versionstamp),
        (KvValue::U64(1), a)
    );
    assert_eq!(
        (entries[1].value.clone(), entries[1].versionstamp),
        (KvValue::U64(2), b)
    );
}

/// Validation comes before checks: an invalid write is an error, not a failed check.
async fn invalid_write_is_refused_even_if_its_check_fails(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let write = AtomicWrite {
        checks: vec![check(&key!["a"], None)],
        mutations: vec![Mutation::set(
            enc(&key!["b"]),
            KvValue::V8(vec![0xff; 65_537].into()),
        )],
        ..Default::default()
    };
    assert_eq!(write_error(&*env.kv, write).await, MAX_VALUE);
}

/// When a write breaks several limits, the error is the one Deno reports first: counts before
/// key sizes, key sizes before value sizes.
async fn count_limits_are_reported_before_key_and_value_sizes(env: Env) {
    let long_key = key_of_len(2049, 0);
    let big_value = KvValue::Bytes(vec![0; 65_537].into());
    let mut write = write_of(vec![Mutation::set(long_key, big_value)]);
    write.checks = (0..101)
        .map(|i| Check {
            key: numbered(i),
            versionstamp: None,
        })
        .collect();
    assert_eq!(
        write_error(&*env.kv, write.clone()).await,
        "Too many checks (max 100)"
    );
    write.checks.clear();
    assert_eq!(write_error(&*env.kv, write.clone()).await, MAX_WRITE_KEY);
    write
        .mutations
        .extend((0..1000).map(|i| Mutation::delete(numbered(i))));
    assert_eq!(write_error(&*env.kv, write).await, MAX_MUTATIONS);
}

/// The error text of a watch expected to be refused.
fn watch_error(kv: &dyn Backend, keys: Vec<Vec<u8>>) -> String {
    match kv.watch(keys) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("watch should have been refused"),
    }
}

/// Starts a watch that must be accepted and returns its first emission's length.
async fn first_emission_len(kv: &dyn Backend, keys: Vec<Vec<u8>>) -> usize {
    let mut stream = kv
        .watch(keys)
        .unwrap_or_else(|e| panic!("watch refused: {e}"));
    match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
        Ok(Some(Ok(emission))) => emission.len(),
        Ok(other) => panic!(
            "expected a first emission, got {:?}",
            other.map(|r| r.err())
        ),
        Err(_) => panic!("no first emission within 5 s"),
    }
}

async fn watched_keys_are_at_most_10(env: Env) {
    let keys: Vec<Vec<u8>> = (0..11).map(numbered).collect();
    assert_eq!(first_emission_len(&*env.kv, keys[..10].to_vec()).await, 10);
    assert_eq!(watch_error(&*env.kv, keys), "Too many keys (max 10)");
}

async fn watched_key_size_is_2049_bytes(env: Env) {
    assert_eq!(
        first_emission_len(&*env.kv, vec![key_of_len(2049, 0)]).await,
        1
    );
    assert_eq!(
        watch_error(&*env.kv, vec![numbered(0), key_of_len(2050, 0)]),
        MAX_READ_KEY
    );
}

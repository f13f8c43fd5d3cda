//! Concurrent clients: no lost update, strictly increasing versionstamps, consistent snapshots.

use std::collections::BTreeSet;
use std::sync::Arc;

use open_deno_kv_model::{
    AtomicWrite, Backend, Key, KvValue, Mutation, ReadRange, Versionstamp, key,
};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        check_and_set_increments_lose_no_update,
        concurrent_sums_are_exact,
        concurrent_writers_get_distinct_increasing_versionstamps,
        readers_always_see_a_consistent_snapshot,
        concurrent_writes_to_distinct_keys_all_land,
    ]
}

const TASKS: usize = 8;

/// Reads the counter, then writes counter + 1 guarded by a check on what was read, retrying when
/// the check fails: the classic optimistic increment. Returns how many retries it took.
async fn increment(kv: &dyn Backend, counter: &Key) -> usize {
    let mut retries = 0;
    loop {
        let current = get(kv, counter).await;
        let (value, stamp) = match &current {
            Some(entry) => match entry.value {
                KvValue::U64(n) => (n, Some(entry.versionstamp)),
                ref other => panic!("counter holds {other:?}"),
            },
            None => (0, None),
        };
        let write = AtomicWrite {
            checks: vec![check(counter, stamp)],
            mutations: vec![Mutation::set(enc(counter), KvValue::U64(value + 1))],
            enqueues: vec![],
        };
        match kv.atomic_write(write).await {
            Ok(Some(_)) => return retries,
            Ok(None) => retries += 1,
            Err(e) => panic!("increment failed: {e}"),
        }
    }
}

async fn check_and_set_increments_lose_no_update(env: Env) {
    const EACH: usize = 40;
    let counters = [key!["counter", 0], key!["counter", 1]];
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let kv = env.kv.clone();
        let counter = counters[t % counters.len()].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                increment(&*kv, &counter).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("increment task");
    }
    let per_counter = (TASKS / counters.len() * EACH) as u64;
    for counter in &counters {
        assert_eq!(
            get_value(&*env.kv, counter).await,
            Some(KvValue::U64(per_counter)),
            "{counter}"
        );
    }
}

async fn concurrent_sums_are_exact(env: Env) {
    const EACH: u64 = 50;
    let mut tasks = Vec::new();
    for t in 0..TASKS as u64 {
        let kv = env.kv.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                commit(
                    &*kv,
                    AtomicWrite {
                        mutations: vec![Mutation::sum(enc(&key!["sum"]), KvValue::U64(t + 1))],
                        ..Default::default()
                    },
                )
                .await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("sum task");
    }
    let expected: u64 = (1..=TASKS as u64).map(|t| t * EACH).sum();
    assert_eq!(
        get_value(&*env.kv, &key!["sum"]).await,
        Some(KvValue::U64(expected))
    );
}

async fn concurrent_writers_get_distinct_increasing_versionstamps(env: Env) {
    const EACH: usize = 30;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let kv = env.kv.clone();
        tasks.push(tokio::spawn(async move {
            let mut stamps = Vec::with_capacity(EACH);
            for i in 0..EACH {
                stamps.push(set(&*kv, &key!["w", t, i], KvValue::U64(1)).await);
            }
            stamps
        }));
    }
    let mut all = BTreeSet::new();
    for task in tasks {
        let stamps: Vec<Versionstamp> = task.await.expect("writer task");
        assert!(
            stamps.windows(2).all(|w| w[0] < w[1]),
            "one writer's commits increase"
        );
        for stamp in stamps {
            assert!(
                all.insert(stamp),
                "versionstamp {stamp} was given to two commits"
            );
        }
    }
    assert_eq!(all.len(), TASKS * EACH);
}

async fn readers_always_see_a_consistent_snapshot(env: Env) {
    // The writer keeps two keys and a prefix of ten keys equal, always in one commit; readers read
    // them in one snapshot and must never see a mix of two commits.
    const ROUNDS: u64 = 60;
    let pair = [key!["pair", "a"], key!["pair", "b"]];
    let group: Vec<Key> = (0..10).map(|i| key!["group", i]).collect();
    let write_round = |n: u64| AtomicWrite {
        mutations: pair
            .iter()
            .chain(&group)
            .map(|k| Mutation::set(enc(k), KvValue::U64(n)))
            .collect(),
        ..Default::default()
    };
    commit(&*env.kv, write_round(0)).await;

    let writer = {
        let kv = env.kv.clone();
        let rounds: Vec<AtomicWrite> = (1..=ROUNDS).map(write_round).collect();
        tokio::spawn(async move {
            for write in rounds {
                commit(&*kv, write).await;
            }
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let kv: Arc<dyn Backend> = env.kv.clone();
            let pair = pair.clone();
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let ranges = vec![
                        ReadRange::single_encoded_key(enc(&pair[0])),
                        ReadRange::single_encoded_key(enc(&pair[1])),
                        ReadRange::prefix(&key!["group"], 100).expect("prefix"),
                    ];
                    let out = read(&*kv, ranges).await;
                    let values: Vec<&KvValue> = out.iter().flatten().map(|e| &e.value).collect();
                    assert_eq!(values.len(), 12, "every key is always present");
                    assert!(
                        values.windows(2).all(|w| w[0] == w[1]),
                        "a snapshot mixed two commits: {values:?}"
                    );
                    let stamps: BTreeSet<_> =
                        out.iter().flatten().map(|e| e.versionstamp).collect();
                    assert_eq!(stamps.len(), 1, "one commit wrote them all");
                }
            })
        })
        .collect();
    writer.await.expect("writer");
    for reader in readers {
        reader.await.expect("reader");
    }
}

async fn concurrent_writes_to_distinct_keys_all_land(env: Env) {
    const EACH: usize = 25;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let kv = env.kv.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..EACH {
                set(
                    &*kv,
                    &key!["distinct", t, i],
                    KvValue::U64((t * EACH + i) as u64),
                )
                .await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task");
    }
    let listed = list_prefix(&*env.kv, &key!["distinct"], 1000, false).await;
    assert_eq!(listed.len(), TASKS * EACH);
    for (t, i) in (0..TASKS).flat_map(|t| (0..EACH).map(move |i| (t, i))) {
        let value = get_value(&*env.kv, &key!["distinct", t, i]).await;
        assert_eq!(value, Some(KvValue::U64((t * EACH + i) as u64)));
    }
}

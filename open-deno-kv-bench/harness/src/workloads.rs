//! The workloads, run against any backend through the `Backend` trait.
//!
//! Every workload checks what it did (values read back, exact counter and sum totals, every
//! message exactly once) and fails with an error when the check does not hold.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use open_deno_kv_model::chrono::Utc;
use open_deno_kv_model::{
    AtomicWrite, Backend, Check, Consistency, Enqueue, KvEntry, KvValue, Mutation, ReadRange,
    SnapshotRead, encode_key, key,
};
use serde_json::{Map, Value, json};

use crate::data::{KeyTable, Probes, Result, bench_value, check_value};
use crate::spec::Mode;
use crate::stats::{Chain, Measured, Rng, nanos};

/// Keys per preload commit (under Deno's 1000 mutations and 800 KiB per atomic write).
pub const PRELOAD_BATCH: usize = 500;
/// The most entries one range read returns (Deno's limit).
const MAX_READ_LIMIT: usize = 1_000;
/// How long W7 waits for one message before it declares it lost.
const DEQUEUE_TIMEOUT: Duration = Duration::from_secs(30);

/// A workload's measurement and what else it reports (retries, phase rates).
pub struct Outcome {
    /// The timed run.
    pub measured: Measured,
    /// Extra figures for the report.
    pub extra: Map<String, Value>,
}

impl From<Measured> for Outcome {
    fn from(measured: Measured) -> Self {
        Outcome {
            measured,
            extra: Map::new(),
        }
    }
}

/// A shared backend handle.
pub type Kv = Arc<dyn Backend>;

fn set_write(key: Vec<u8>, value: KvValue) -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(key, value)],
        ..Default::default()
    }
}

async fn commit(kv: &Kv, write: AtomicWrite) -> Result<()> {
    kv.atomic_write(write)
        .await?
        .ok_or("a write without checks was not committed")?;
    Ok(())
}

/// Writes key `i` = value `i` for every key, in commits of [`PRELOAD_BATCH`] (not timed).
pub async fn preload(kv: &Kv, keys: &KeyTable) -> Result<()> {
    for first in (0..keys.len()).step_by(PRELOAD_BATCH) {
        let mutations = (first..(first + PRELOAD_BATCH).min(keys.len()))
            .map(|i| Mutation::set(keys.get(i).to_vec(), bench_value(i)))
            .collect();
        commit(
            kv,
            AtomicWrite {
                mutations,
                ..Default::default()
            },
        )
        .await?;
    }
    Ok(())
}

/// Calls `each` on every entry in `[start, end)`, reading in pages.
async fn for_each_entry(
    kv: &Kv,
    start: Vec<u8>,
    end: Vec<u8>,
    mut each: impl FnMut(KvEntry),
) -> Result<()> {
    let mut from = start;
    loop {
        let read = SnapshotRead {
            ranges: vec![ReadRange {
                start: from.clone(),
                end: end.clone(),
                limit: MAX_READ_LIMIT as u32,
                reverse: false,
            }],
            ..Default::default()
        };
        let page = kv
            .snapshot_read(read)
            .await?
            .pop()
            .map(|out| out.entries)
            .unwrap_or_default();
        let full = page.len() == MAX_READ_LIMIT;
        if let Some(last) = page.last() {
            from = last.key.to_vec();
            from.push(0);
        }
        page.into_iter().for_each(&mut each);
        if !full {
            return Ok(());
        }
    }
}

/// Reads every entry in `[start, end)`.
async fn read_all(kv: &Kv, start: Vec<u8>, end: Vec<u8>) -> Result<Vec<KvEntry>> {
    let mut entries = Vec::new();
    for_each_entry(kv, start, end, |entry| entries.push(entry)).await?;
    Ok(entries)
}

/// Reads the whole preloaded data set once, in order (not timed), so the read workloads measure
/// a warm store — every page in the engine's own cache, as in a server whose working set fits
/// in memory — rather than the cost of filling caches.
pub async fn warm_up(kv: &Kv, keys: &KeyTable, end: &[u8]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut seen = 0;
    for_each_entry(kv, keys.get(0).to_vec(), end.to_vec(), |_| seen += 1).await?;
    if seen != keys.len() {
        return Err(format!("{} keys preloaded but {seen} read back", keys.len()).into());
    }
    Ok(())
}

/// Checks that key `i` holds value `i` for every key (after W1 and W2).
async fn verify_written(kv: &Kv, keys: &KeyTable, end: &[u8]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let entries = read_all(kv, keys.get(0).to_vec(), end.to_vec()).await?;
    if entries.len() != keys.len() {
        return Err(format!(
            "{} keys written but {} read back",
            keys.len(),
            entries.len()
        )
        .into());
    }
    for (i, (entry, key)) in entries.iter().zip(keys.iter()).enumerate() {
        match &entry.value {
            KvValue::Bytes(bytes) if entry.key == key => check_value(bytes, i)?,
            _ => return Err(format!("entry {i} read back is wrong").into()),
        }
    }
    Ok(())
}

/// W1: one set after the other from one task, each waiting for its commit.
pub async fn w1_sequential_sets(kv: Kv, keys: Arc<KeyTable>, end: Vec<u8>) -> Result<Outcome> {
    let mut chain = Chain::start(keys.len());
    for (i, key) in keys.iter().enumerate() {
        commit(&kv, set_write(key.to_vec(), bench_value(i))).await?;
        chain.tick();
    }
    let measured = chain.finish();
    verify_written(&kv, &keys, &end).await?;
    Ok(measured.into())
}

/// W2: the same sets, task `t` of `tasks` writing keys `t`, `t + tasks`, ...
pub async fn w2_concurrent_sets(
    kv: Kv,
    keys: Arc<KeyTable>,
    end: Vec<u8>,
    tasks: usize,
    mode: Mode,
) -> Result<Outcome> {
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let (kv, keys) = (kv.clone(), keys.clone());
        handles.push(async move {
            let mut latencies = Vec::with_capacity(keys.len() / tasks + 1);
            for i in (task..keys.len()).step_by(tasks) {
                let t0 = Instant::now();
                commit(&kv, set_write(keys.get(i).to_vec(), bench_value(i))).await?;
                latencies.push(nanos(t0.elapsed()));
            }
            Ok::<_, crate::data::BoxError>(latencies)
        });
    }
    let latencies_ns = run_concurrently(mode, handles).await?.concat();
    let elapsed = started.elapsed();
    verify_written(&kv, &keys, &end).await?;
    let mut outcome = Outcome::from(Measured {
        ops: latencies_ns.len(),
        elapsed,
        latencies_ns,
    });
    outcome.extra.insert("tasks".into(), json!(tasks));
    Ok(outcome)
}

/// One checked point get of `key`, the key of entry `i`.
async fn get_checked(kv: &Kv, i: usize, key: &[u8], consistency: Consistency) -> Result<()> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key.to_vec())],
        consistency,
    };
    let out = kv.snapshot_read(read).await?;
    match out.first().and_then(|range| range.entries.first()) {
        Some(KvEntry {
            key: found,
            value: KvValue::Bytes(bytes),
            ..
        }) if found == key => check_value(bytes, i),
        other => Err(format!("get of preloaded key {i} returned {other:?}").into()),
    }
}

/// W3: random point gets, one after the other, after a short untimed warm-up. `probes` holds
/// each get's entry number and key in the order they are asked for; every get asks for
/// `consistency`.
pub async fn w3_point_gets(
    kv: Kv,
    probes: Arc<Probes>,
    warmup: usize,
    consistency: Consistency,
) -> Result<Outcome> {
    for (i, key) in probes.iter().take(warmup) {
        get_checked(&kv, i, key, consistency).await?;
    }
    let mut chain = Chain::start(probes.len());
    for (i, key) in probes.iter() {
        get_checked(&kv, i, key, consistency).await?;
        chain.tick();
    }
    Ok(chain.finish().into())
}

/// One checked scan of `scan_len` entries from key `s`.
async fn scan_checked(
    kv: &Kv,
    keys: &KeyTable,
    s: usize,
    scan_len: usize,
    end: &[u8],
    consistency: Consistency,
) -> Result<()> {
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: keys.get(s).to_vec(),
            end: end.to_vec(),
            limit: u32::try_from(scan_len)?,
            reverse: false,
        }],
        consistency,
    };
    let out = kv.snapshot_read(read).await?;
    let entries = out.first().map(|range| &range.entries[..]).unwrap_or(&[]);
    if entries.len() != scan_len {
        return Err(format!(
            "scan from key {s} returned {} entries, expected {scan_len}",
            entries.len()
        )
        .into());
    }
    for (j, entry) in entries.iter().enumerate() {
        match &entry.value {
            KvValue::Bytes(bytes) if entry.key == keys.get(s + j) => check_value(bytes, s + j)?,
            _ => return Err(format!("scan from key {s}: entry {j} is wrong").into()),
        }
    }
    Ok(())
}

/// W4: scans of `scan_len` consecutive entries from random starts, asking for `consistency`.
pub async fn w4_scans(
    kv: Kv,
    keys: Arc<KeyTable>,
    starts: Arc<Vec<usize>>,
    scan_len: usize,
    end: Vec<u8>,
    warmup: usize,
    consistency: Consistency,
) -> Result<Outcome> {
    for &s in starts.iter().take(warmup) {
        scan_checked(&kv, &keys, s, scan_len, &end, consistency).await?;
    }
    let mut chain = Chain::start(starts.len());
    for &s in starts.iter() {
        scan_checked(&kv, &keys, s, scan_len, &end, consistency).await?;
        chain.tick();
    }
    let mut outcome = Outcome::from(chain.finish());
    outcome.extra.insert(
        "entries_per_sec".into(),
        json!(outcome.measured.ops_per_sec() * scan_len as f64),
    );
    Ok(outcome)
}

/// Reads a u64 entry: its value and versionstamp (`None` if absent).
async fn read_u64(kv: &Kv, key: &[u8]) -> Result<Option<(u64, open_deno_kv_model::Versionstamp)>> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key.to_vec())],
        ..Default::default()
    };
    let out = kv.snapshot_read(read).await?;
    match out.first().and_then(|range| range.entries.first()) {
        None => Ok(None),
        Some(KvEntry {
            value: KvValue::U64(n),
            versionstamp,
            ..
        }) => Ok(Some((*n, *versionstamp))),
        Some(other) => Err(format!("expected a u64, found {:?}", other.value).into()),
    }
}

/// W5: `tasks` tasks each increment one counter `per_task` times with check-and-set (read the
/// counter and its versionstamp, write +1 only if the versionstamp is unchanged, retry if not).
/// The final value must be exactly `tasks * per_task`.
pub async fn w5_check_and_set(
    kv: Kv,
    tasks: usize,
    per_task: usize,
    mode: Mode,
) -> Result<Outcome> {
    let counter = encode_key(&key!["counter"])?;
    commit(&kv, set_write(counter.clone(), KvValue::U64(0))).await?;
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (kv, counter, retries) = (kv.clone(), counter.clone(), retries.clone());
        handles.push(async move {
            let mut latencies = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let t0 = Instant::now();
                loop {
                    let (n, versionstamp) = read_u64(&kv, &counter)
                        .await?
                        .ok_or("the counter disappeared")?;
                    let write = AtomicWrite {
                        checks: vec![Check {
                            key: counter.clone(),
                            versionstamp: Some(versionstamp),
                        }],
                        mutations: vec![Mutation::set(counter.clone(), KvValue::U64(n + 1))],
                        enqueues: vec![],
                    };
                    if kv.atomic_write(write).await?.is_some() {
                        break;
                    }
                    retries.fetch_add(1, Ordering::Relaxed);
                }
                latencies.push(nanos(t0.elapsed()));
            }
            Ok::<_, crate::data::BoxError>(latencies)
        });
    }
    let latencies_ns = run_concurrently(mode, handles).await?.concat();
    let elapsed = started.elapsed();
    let expected = (tasks * per_task) as u64;
    let found = read_u64(&kv, &counter).await?.map(|(n, _)| n);
    if found != Some(expected) {
        return Err(format!(
            "W5 check-and-set is NOT exact: the counter is {found:?} after {expected} increments \
             (lost or doubled updates)"
        )
        .into());
    }
    let mut outcome = Outcome::from(Measured {
        ops: latencies_ns.len(),
        elapsed,
        latencies_ns,
    });
    let retries = retries.load(Ordering::Relaxed);
    outcome.extra.insert("retries".into(), json!(retries));
    outcome.extra.insert(
        "retries_per_increment".into(),
        json!(retries as f64 / expected.max(1) as f64),
    );
    outcome.extra.insert("final_value".into(), json!(expected));
    Ok(outcome)
}

/// W6: `sums` u64 sums spread over `tasks` tasks, each adding 1..=7 to one of `hot` keys chosen
/// at random; every key's total must equal what was added to it.
pub async fn w6_sums(kv: Kv, tasks: usize, sums: usize, hot: usize, mode: Mode) -> Result<Outcome> {
    let hot_keys = Arc::new(
        (0..hot)
            .map(|k| encode_key(&key!["hot", k as u64]))
            .collect::<std::result::Result<Vec<_>, _>>()?,
    );
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let (kv, hot_keys) = (kv.clone(), hot_keys.clone());
        let ops = (task..sums).step_by(tasks).count();
        handles.push(async move {
            let mut rng = Rng::new(0x5eed_0600 + task as u64);
            let mut added = vec![0u64; hot_keys.len()];
            let mut latencies = Vec::with_capacity(ops);
            for _ in 0..ops {
                let k = rng.below(hot_keys.len());
                let operand = rng.below(7) as u64 + 1;
                let t0 = Instant::now();
                commit(
                    &kv,
                    AtomicWrite {
                        mutations: vec![Mutation::sum(hot_keys[k].clone(), KvValue::U64(operand))],
                        ..Default::default()
                    },
                )
                .await?;
                latencies.push(nanos(t0.elapsed()));
                added[k] += operand;
            }
            Ok::<_, crate::data::BoxError>((latencies, added))
        });
    }
    let mut latencies_ns = Vec::with_capacity(sums);
    let mut expected = vec![0u64; hot];
    for (latencies, added) in run_concurrently(mode, handles).await? {
        latencies_ns.extend(latencies);
        for (total, add) in expected.iter_mut().zip(added) {
            *total += add;
        }
    }
    let elapsed = started.elapsed();
    let mut prefix_end = encode_key(&key!["hot"])?;
    let mut prefix_start = prefix_end.clone();
    prefix_start.push(0x00);
    prefix_end.push(0xff);
    let entries = read_all(&kv, prefix_start, prefix_end).await?;
    let found: BTreeMap<Vec<u8>, KvValue> = entries
        .into_iter()
        .map(|e| (e.key.to_vec(), e.value))
        .collect();
    for (k, want) in expected.iter().enumerate() {
        let got = found.get(&hot_keys[k]);
        let matches = match got {
            Some(KvValue::U64(n)) => n == want,
            None => *want == 0,
            Some(_) => false,
        };
        if !matches {
            return Err(format!(
                "W6 sums are NOT exact: hot key {k} holds {got:?}, expected {want}"
            )
            .into());
        }
    }
    let mut outcome = Outcome::from(Measured {
        ops: latencies_ns.len(),
        elapsed,
        latencies_ns,
    });
    outcome
        .extra
        .insert("total".into(), json!(expected.iter().sum::<u64>()));
    outcome.extra.insert("tasks".into(), json!(tasks));
    Ok(outcome)
}

/// W7: enqueue `messages` messages (one atomic write each, ready now), then consume them all
/// with `dequeue_next_message` + `finish(true)`; every message must arrive exactly once and the
/// queue must be empty afterwards. Throughput is end to end (first enqueue to last finish);
/// latencies are those of the consume step (dequeue + finish).
pub async fn w7_queue(kv: Kv, messages: usize) -> Result<Outcome> {
    let started = Instant::now();
    let mut enqueue = Chain::start(messages);
    for i in 0..messages {
        let write = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: (i as u64).to_le_bytes().to_vec(),
                ready_at: Utc::now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..Default::default()
        };
        commit(&kv, write).await?;
        enqueue.tick();
    }
    let enqueue = enqueue.finish();
    let mut seen = vec![false; messages];
    let mut consume = Chain::start(messages);
    for received in 0..messages {
        let message = tokio::time::timeout(DEQUEUE_TIMEOUT, kv.dequeue_next_message())
            .await
            .map_err(|_| {
                format!(
                    "W7: only {received} of {messages} messages arrived (waited {DEQUEUE_TIMEOUT:?})"
                )
            })??
            .ok_or("W7: the backend closed while messages were pending")?;
        let index = <[u8; 8]>::try_from(message.payload())
            .map(u64::from_le_bytes)
            .map_err(|_| "W7: a payload is not one of ours")?;
        let slot = usize::try_from(index)
            .ok()
            .and_then(|i| seen.get_mut(i))
            .ok_or("W7: a payload is not one of ours")?;
        if std::mem::replace(slot, true) {
            return Err(format!("W7: message {index} was delivered twice").into());
        }
        message.finish(true).await?;
        consume.tick();
    }
    let elapsed = started.elapsed();
    let consume = consume.finish();
    let left = kv.queued_messages().await?;
    if !left.is_empty() {
        return Err(format!(
            "W7: {} messages are still queued after all {messages} were consumed",
            left.len()
        )
        .into());
    }
    let (enqueue_p50, enqueue_p99) = enqueue.p50_p99_us();
    let mut outcome = Outcome::from(Measured {
        ops: messages,
        elapsed,
        latencies_ns: consume.latencies_ns.clone(),
    });
    outcome
        .extra
        .insert("enqueue_per_sec".into(), json!(enqueue.ops_per_sec()));
    outcome
        .extra
        .insert("consume_per_sec".into(), json!(consume.ops_per_sec()));
    outcome
        .extra
        .insert("enqueue_p50_us".into(), json!(enqueue_p50));
    outcome
        .extra
        .insert("enqueue_p99_us".into(), json!(enqueue_p99));
    Ok(outcome)
}

/// Runs `tasks` concurrently as `mode` drives a store: spawned on the runtime (`multi`,
/// `current`), or polled together on the calling thread (`joined`: the `block_on` thread of a
/// multi-thread runtime, as `#[tokio::main] async fn main` joining its writes does). Their
/// results come back in order.
async fn run_concurrently<T, F>(mode: Mode, tasks: Vec<F>) -> Result<Vec<T>>
where
    F: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    if mode == Mode::Joined {
        return futures::future::join_all(tasks).await.into_iter().collect();
    }
    let handles: Vec<_> = tasks.into_iter().map(tokio::spawn).collect();
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await??);
    }
    Ok(results)
}

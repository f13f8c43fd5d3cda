//! Model-based property tests: random sequences of atomic writes, reads, clock moves and reopens
//! run against the backend and against a reference model; every result, every read and the final
//! state must agree.
//!
//! Where the backend offers them, sequences also delete ranges (inside atomic writes, among the
//! other mutations), count ranges, and watch one range for the whole sequence: the watch's events
//! are applied to a mirror of the range as a consumer would (list the range on `Reread`, set or
//! remove each changed key), and once the sequence ends the mirror must equal the model's range.
//!
//! The model is written independently and naively — a plain list of entries scanned in full, its
//! own arithmetic for sum/min/max and its own expiry test. It shares open-deno-kv-model's *types*
//! (keys, values, versionstamps) but none of its rule code, so a bug in open-deno-kv-model's rules shows up
//! as a disagreement instead of being copied into the reference.
//!
//! Environment:
//! - `KV_MODEL_CASES`: sequences per run (default 64; use 10000+ for a deep run).
//! - `KV_MODEL_SEED`: 64 hex digits to replay a run; printed when a run fails.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::{FutureExt, StreamExt};
use open_deno_kv_model::{
    AtomicWrite, Check, Clock, Key, KeyRange, KvEntry, KvValue, Mutation, MutationKind, RangeCount,
    RangeWatchEvent, RangeWatchStream, ReadRange, SnapshotRead, Versionstamp, encode_key, key,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::cases::need;
use crate::{Case, Env};

/// The model-based cases.
pub fn cases() -> Vec<Case> {
    vec![
        need::NOTHING
            .case(
                "model::random_sequences_match_the_model",
                random_sequences_match_the_model,
            )
            .with_timeout(Duration::from_secs(6 * 3600)),
    ]
}

// ----- the operations -----

/// The keys sequences work on: few, so operations collide, and of mixed kinds, so ordering is
/// exercised. Index `VS_PREFIX` is the prefix of versionstamped sets.
fn key_pool() -> Vec<Key> {
    vec![
        key![b"\x00"],
        key!["a"],
        key!["a", 1],
        key!["a", 1.5],
        key!["a", "b"],
        key!["b"],
        key![-7],
        key![f64::NAN],
        key![true],
    ]
}
const POOL: usize = 9;
const VS_PREFIX: usize = 5;

/// A value a sequence stores.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ValueGen {
    U64(u64),
    Bytes(u8),
    Number(i32),
}

impl ValueGen {
    fn value(self) -> KvValue {
        match self {
            ValueGen::U64(n) => KvValue::U64(n),
            ValueGen::Bytes(b) => KvValue::Bytes(vec![b; usize::from(b % 4)].into()),
            ValueGen::Number(x) => KvValue::V8(number_bytes(f64::from(x)).into()),
        }
    }
}

/// What a check expects.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// The key's current versionstamp as the model knows it (absent → `None`).
    Current,
    /// Absence.
    Absent,
    /// A versionstamp no entry has.
    Stale,
}

#[derive(Debug, Clone, PartialEq)]
enum MutGen {
    Set(ValueGen, Option<u32>),
    Delete,
    /// Deletes a range as a whole (only where the backend offers range deletes).
    DeleteRange(RangeGen),
    SumU64(u64),
    SumNumber(i32),
    Min(u64),
    Max(u64),
    SetVersionstamped(ValueGen),
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Write {
        checks: Vec<(usize, Expect)>,
        mutations: Vec<(usize, MutGen)>,
    },
    Get(usize),
    /// Counts a range (only where the backend offers counts).
    Count(RangeGen),
    List {
        from: usize,
        to: usize,
        limit: u32,
        reverse: bool,
    },
    Advance(u32),
    Reopen,
}

fn value_gen() -> impl Strategy<Value = ValueGen> {
    prop_oneof![
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            Just(u64::MAX - 1),
            any::<u64>()
        ]
        .prop_map(ValueGen::U64),
        any::<u8>().prop_map(ValueGen::Bytes),
        (-1000i32..1000).prop_map(ValueGen::Number),
    ]
}

/// A range over the key pool: everything under one pool key, or from one pool key to another
/// (often inverted, so empty: a valid request that must do nothing).
#[derive(Debug, Clone, Copy, PartialEq)]
enum RangeGen {
    Prefix(usize),
    Between(usize, usize),
}

impl RangeGen {
    fn range(self, pool: &[Vec<u8>]) -> KeyRange {
        match self {
            RangeGen::Prefix(k) => {
                let mut start = pool[k].clone();
                let mut end = start.clone();
                start.push(0x00);
                end.push(0xff);
                KeyRange::new(start, end)
            }
            RangeGen::Between(from, to) => KeyRange::new(pool[from].clone(), pool[to].clone()),
        }
    }
}

fn range_gen() -> impl Strategy<Value = RangeGen> {
    prop_oneof![
        (0..POOL).prop_map(RangeGen::Prefix),
        (0..POOL, 0..POOL).prop_map(|(from, to)| RangeGen::Between(from, to)),
    ]
}

/// What the backend offers beyond Deno KV, so sequences use only that.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Beyond {
    range_delete: bool,
    count: bool,
    watch_range: bool,
}

fn mut_gen(beyond: Beyond) -> impl Strategy<Value = MutGen> {
    let small = prop_oneof![Just(0u64), Just(1), Just(u64::MAX), 0u64..1000];
    prop_oneof![
        (if beyond.range_delete { 1 } else { 0 }) => range_gen().prop_map(MutGen::DeleteRange),
        4 => (value_gen(), prop::option::weighted(0.3, 1u32..3000)).prop_map(|(v, e)| MutGen::Set(v, e)),
        2 => Just(MutGen::Delete),
        2 => small.clone().prop_map(MutGen::SumU64),
        1 => (-50i32..50).prop_map(MutGen::SumNumber),
        1 => small.clone().prop_map(MutGen::Min),
        1 => small.prop_map(MutGen::Max),
        1 => value_gen().prop_map(MutGen::SetVersionstamped),
    ]
}

fn op_gen(reopen: bool, beyond: Beyond) -> impl Strategy<Value = Op> {
    let expect = prop_oneof![
        Just(Expect::Current),
        Just(Expect::Absent),
        Just(Expect::Stale)
    ];
    let write = (
        prop::collection::vec((0..POOL, expect), 0..3),
        prop::collection::vec((0..POOL, mut_gen(beyond)), 1..5),
    )
        .prop_map(|(checks, mutations)| Op::Write { checks, mutations });
    let list = (0..POOL, 0..POOL, 1u32..6, any::<bool>()).prop_map(|(from, to, limit, reverse)| {
        Op::List {
            from,
            to,
            limit,
            reverse,
        }
    });
    prop_oneof![
        6 => write,
        2 => (0..POOL).prop_map(Op::Get),
        (if beyond.count { 1 } else { 0 }) => range_gen().prop_map(Op::Count),
        2 => list,
        2 => (1u32..2000).prop_map(Op::Advance),
        (if reopen { 1 } else { 0 }) => Just(Op::Reopen),
    ]
}

// ----- the reference model -----

/// JavaScript-number V8 bytes, written out by hand: header `FF 0F`, tag `N`, 8 bytes LE.
fn number_bytes(x: f64) -> Vec<u8> {
    let mut bytes = vec![0xff, 0x0f, b'N'];
    bytes.extend_from_slice(&x.to_le_bytes());
    bytes
}

/// Reads back what [`number_bytes`] writes (the only V8 values sequences create).
fn number_of(bytes: &[u8]) -> Option<f64> {
    let rest = bytes.strip_prefix(&[0xff, 0x0f, b'N'])?;
    Some(f64::from_le_bytes(rest.try_into().ok()?))
}

#[derive(Debug, Clone, PartialEq)]
struct ModelEntry {
    key: Vec<u8>,
    value: KvValue,
    stamp: Versionstamp,
    expires: Option<DateTime<Utc>>,
}

/// What a write did.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Committed,
    CheckFailed,
    Error(String),
}

/// The reference: an unsorted list of entries, searched and sorted in full every time.
#[derive(Debug, Clone, Default)]
struct Model {
    entries: Vec<ModelEntry>,
    last_stamp: Option<Versionstamp>,
}

impl Model {
    fn live(&self, now: DateTime<Utc>) -> Vec<&ModelEntry> {
        let mut live: Vec<&ModelEntry> = self
            .entries
            .iter()
            .filter(|e| e.expires.is_none_or(|at| now < at))
            .collect();
        live.sort_by(|a, b| a.key.cmp(&b.key));
        live
    }

    fn find(&self, key: &[u8], now: DateTime<Utc>) -> Option<&ModelEntry> {
        self.live(now).into_iter().find(|e| e.key == key)
    }

    /// Applies a write the backend committed with `stamp` (or, with `stamp` = None, predicts only
    /// whether it fails a check or errors).
    fn apply(&mut self, write: &AtomicWrite, stamp: Versionstamp, now: DateTime<Utc>) -> Outcome {
        for c in &write.checks {
            if self.find(&c.key, now).map(|e| e.stamp) != c.versionstamp {
                return Outcome::CheckFailed;
            }
        }
        let mut next = self.clone();
        next.entries.retain(|e| e.expires.is_none_or(|at| now < at));
        for m in &write.mutations {
            if let Err(message) = next.mutate(m, stamp) {
                return Outcome::Error(message);
            }
        }
        next.last_stamp = Some(stamp);
        *self = next;
        Outcome::Committed
    }

    fn put(
        &mut self,
        key: Vec<u8>,
        value: KvValue,
        stamp: Versionstamp,
        expires: Option<DateTime<Utc>>,
    ) {
        self.entries.retain(|e| e.key != key);
        self.entries.push(ModelEntry {
            key,
            value,
            stamp,
            expires,
        });
    }

    fn mutate(&mut self, m: &Mutation, stamp: Versionstamp) -> Result<(), String> {
        let current = self
            .entries
            .iter()
            .find(|e| e.key == m.key)
            .map(|e| e.value.clone());
        let non_u64 = |op: &str| {
            format!("Failed to perform '{op}' mutation on a non-U64 value in the database")
        };
        match &m.kind {
            MutationKind::Set(v) => self.put(m.key.clone(), v.clone(), stamp, m.expire_at),
            MutationKind::Delete => self.entries.retain(|e| e.key != m.key),
            MutationKind::DeleteRange { end } => {
                self.entries.retain(|e| !(m.key <= e.key && e.key < *end))
            }
            MutationKind::SetSuffixVersionstampedKey(v) => {
                let mut key = m.key.clone();
                key.push(0x02);
                key.extend(stamp.to_string().bytes());
                key.push(0x00);
                self.put(key, v.clone(), stamp, m.expire_at);
            }
            MutationKind::Sum {
                value: KvValue::U64(add),
                ..
            } => {
                let sum = match current {
                    None => *add,
                    Some(KvValue::U64(old)) => {
                        let wide = u128::from(old) + u128::from(*add);
                        (wide % (1u128 << 64)) as u64
                    }
                    Some(_) => return Err(non_u64("sum")),
                };
                self.put(m.key.clone(), KvValue::U64(sum), stamp, None);
            }
            MutationKind::Sum {
                value: KvValue::V8(bytes),
                ..
            } => {
                let add = number_of(bytes).ok_or("model only sums numbers")?;
                let sum = match current {
                    None => add,
                    Some(KvValue::V8(old)) => {
                        number_of(&old).ok_or("model only sums numbers")? + add
                    }
                    Some(KvValue::U64(_)) => return Err("Cannot sum KvU64 with Number".into()),
                    Some(KvValue::Bytes(_)) => return Err("unsupported value type".into()),
                };
                self.put(
                    m.key.clone(),
                    KvValue::V8(number_bytes(sum).into()),
                    stamp,
                    None,
                );
            }
            MutationKind::Min(KvValue::U64(x)) | MutationKind::Max(KvValue::U64(x)) => {
                let is_min = matches!(m.kind, MutationKind::Min(_));
                let op = if is_min { "min" } else { "max" };
                let result = match current {
                    None => *x,
                    Some(KvValue::U64(old)) => {
                        if (is_min && *x < old) || (!is_min && *x > old) {
                            *x
                        } else {
                            old
                        }
                    }
                    Some(_) => return Err(non_u64(op)),
                };
                self.put(m.key.clone(), KvValue::U64(result), stamp, None);
            }
            other => return Err(format!("the model does not generate {other:?}")),
        }
        Ok(())
    }

    /// The live entries in `range` and their sizes, summed here by the model's own reading of
    /// the encodings (a u64 is stored as 8 bytes, bytes and V8 values as they are).
    fn count(&self, range: &KeyRange, now: DateTime<Utc>) -> RangeCount {
        let mut count = RangeCount::default();
        for e in self.live(now) {
            if range.start <= e.key && e.key < range.end {
                let value_len = match &e.value {
                    KvValue::U64(_) => 8,
                    KvValue::Bytes(b) | KvValue::V8(b) => b.len(),
                };
                count.entries += 1;
                count.key_bytes += e.key.len() as u64;
                count.value_bytes += value_len as u64;
            }
        }
        count
    }

    fn read(
        &self,
        start: &[u8],
        end: &[u8],
        limit: u32,
        reverse: bool,
        now: DateTime<Utc>,
    ) -> Vec<KvEntry> {
        let mut found: Vec<KvEntry> = self
            .live(now)
            .into_iter()
            .filter(|e| e.key.as_slice() >= start && e.key.as_slice() < end)
            .map(|e| KvEntry {
                key: e.key.clone().into(),
                value: e.value.clone(),
                versionstamp: e.stamp,
                expires_at: e.expires,
            })
            .collect();
        if reverse {
            found.reverse();
        }
        found.truncate(limit as usize);
        found
    }
}

// ----- running a sequence -----

/// Why a sequence failed: shown with the shrunk sequence.
struct Mismatch(String);

impl fmt::Debug for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn build_write(
    ops_checks: &[(usize, Expect)],
    ops_mutations: &[(usize, MutGen)],
    model: &Model,
    pool: &[Vec<u8>],
    now: DateTime<Utc>,
) -> AtomicWrite {
    let checks = ops_checks
        .iter()
        .map(|(k, expect)| {
            let key = pool[*k].clone();
            let versionstamp = match expect {
                Expect::Current => model.find(&key, now).map(|e| e.stamp),
                Expect::Absent => None,
                Expect::Stale => Some(Versionstamp::from_bytes([0xfe; 10])),
            };
            Check { key, versionstamp }
        })
        .collect();
    let mutations = ops_mutations
        .iter()
        .map(|(k, m)| {
            let key = pool[*k].clone();
            let (kind, expire_at) = match m {
                MutGen::Set(v, expire) => (
                    MutationKind::Set(v.value()),
                    expire.map(|ms| now + TimeDelta::milliseconds(i64::from(ms))),
                ),
                MutGen::Delete => (MutationKind::Delete, None),
                MutGen::DeleteRange(range) => return Mutation::delete_range(range.range(pool)),
                MutGen::SumU64(n) => (sum_kind(KvValue::U64(*n)), None),
                MutGen::SumNumber(x) => (
                    sum_kind(KvValue::V8(number_bytes(f64::from(*x)).into())),
                    None,
                ),
                MutGen::Min(n) => (MutationKind::Min(KvValue::U64(*n)), None),
                MutGen::Max(n) => (MutationKind::Max(KvValue::U64(*n)), None),
                MutGen::SetVersionstamped(v) => {
                    return Mutation {
                        key: pool[VS_PREFIX].clone(),
                        kind: MutationKind::SetSuffixVersionstampedKey(v.value()),
                        expire_at: None,
                    };
                }
            };
            Mutation {
                key,
                kind,
                expire_at,
            }
        })
        .collect();
    AtomicWrite {
        checks,
        mutations,
        enqueues: vec![],
    }
}

fn sum_kind(value: KvValue) -> MutationKind {
    MutationKind::Sum {
        value,
        min_v8: vec![],
        max_v8: vec![],
        clamp: false,
    }
}

/// A consumer of one range watch: a copy of the range built from the watch's events alone (and
/// the listing a `Reread` asks for), and the checks the events must pass on the way.
struct Mirror {
    range: KeyRange,
    stream: RangeWatchStream,
    entries: std::collections::BTreeMap<Vec<u8>, KvEntry>,
    /// The newest versionstamp each key was emitted with: an event must never show an older one.
    emitted: std::collections::BTreeMap<Vec<u8>, Versionstamp>,
    /// Whether the first event (always `Reread`) has come.
    started: bool,
}

/// How long a mirror may take to catch up with the sequence's last commit.
const MIRROR_WAIT: Duration = Duration::from_secs(5);

/// The longest a failing run is shrunk, in milliseconds.
const SHRINK_TIME_MS: u32 = 60_000;

impl Mirror {
    fn open(env: &Env, range: KeyRange) -> Result<Self, String> {
        let stream = env
            .kv
            .watch_range(range.clone())
            .map_err(|e| format!("watch_range refused: {e}"))?;
        Ok(Mirror {
            range,
            stream,
            entries: Default::default(),
            emitted: Default::default(),
            started: false,
        })
    }

    async fn apply(&mut self, env: &Env, event: RangeWatchEvent) -> Result<(), String> {
        match event {
            RangeWatchEvent::Reread => {
                self.started = true;
                self.entries = list_all(env, &self.range).await?;
            }
            RangeWatchEvent::Changed(_) if !self.started => {
                return Err("the first event of a range watch must be Reread".into());
            }
            RangeWatchEvent::Changed(changes) => {
                for change in changes {
                    if !self.range.contains(&change.key) {
                        return Err(format!("change outside the watched range: {change:?}"));
                    }
                    match change.entry {
                        Some(entry) => {
                            let last = self
                                .emitted
                                .entry(change.key.clone())
                                .or_insert(entry.versionstamp);
                            if entry.versionstamp < *last {
                                return Err(format!(
                                    "key {:?} emitted at {} after {last}",
                                    change.key, entry.versionstamp
                                ));
                            }
                            *last = entry.versionstamp;
                            self.entries.insert(change.key, entry);
                        }
                        None => {
                            self.entries.remove(&change.key);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Applies every event already waiting, without waiting for more.
    async fn drain_ready(&mut self, env: &Env) -> Result<(), String> {
        loop {
            match self.stream.next().now_or_never() {
                Some(Some(Ok(event))) => self.apply(env, event).await?,
                Some(Some(Err(e))) => return Err(format!("the range watch failed: {e}")),
                Some(None) => return Err("the range watch ended while the backend is open".into()),
                None => return Ok(()),
            }
        }
    }

    /// The mirror as a consumer sees it at `now`: entries past their expiry are dropped.
    fn visible(&self, now: DateTime<Utc>) -> Vec<KvEntry> {
        self.entries
            .values()
            .filter(|e| e.expires_at.is_none_or(|at| now < at))
            .cloned()
            .collect()
    }

    /// Waits for events until the mirror equals `expected` (the model's range now).
    async fn settle(&mut self, env: &Env, expected: &[KvEntry]) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + MIRROR_WAIT;
        loop {
            self.drain_ready(env).await?;
            if self.visible(env.clock().now()) == expected {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(event))) => self.apply(env, event).await?,
                Ok(Some(Err(e))) => return Err(format!("the range watch failed: {e}")),
                Ok(None) => return Err("the range watch ended while the backend is open".into()),
                Err(_) => {
                    return Err(format!(
                        "the mirror of {:?} did not catch up within {MIRROR_WAIT:?}\n  model:  {expected:?}\n  mirror: {:?}",
                        self.range,
                        self.visible(env.clock().now())
                    ));
                }
            }
        }
    }
}

/// Every live entry of `range`, page by page (one snapshot per page: enough for a mirror, which
/// later events correct).
async fn list_all(
    env: &Env,
    range: &KeyRange,
) -> Result<std::collections::BTreeMap<Vec<u8>, KvEntry>, String> {
    let mut entries = std::collections::BTreeMap::new();
    let mut start = range.start.clone();
    loop {
        if start >= range.end {
            return Ok(entries);
        }
        let read = SnapshotRead {
            ranges: vec![ReadRange {
                start: start.clone(),
                end: range.end.clone(),
                limit: 1000,
                reverse: false,
            }],
            ..Default::default()
        };
        let mut out = env
            .kv
            .snapshot_read(read)
            .await
            .map_err(|e| format!("listing the watched range failed: {e}"))?;
        let page = out.pop().map(|r| r.entries).unwrap_or_default();
        let Some(last) = page.last() else {
            return Ok(entries);
        };
        start = last.key.to_vec();
        start.push(0);
        let full = page.len() == 1000;
        entries.extend(page.into_iter().map(|e| (e.key.to_vec(), e)));
        if !full {
            return Ok(entries);
        }
    }
}

async fn run_sequence(
    env: &mut Env,
    watched: Option<RangeGen>,
    ops: &[Op],
) -> Result<(), Mismatch> {
    let pool: Vec<Vec<u8>> = key_pool()
        .iter()
        .map(|k| encode_key(k).expect("pool keys encode"))
        .collect();
    let mut model = Model::default();
    let fail = |step: usize, what: String| Err(Mismatch(format!("step {step}: {what}")));
    let open_mirror = |env: &Env| match watched {
        Some(range) => Mirror::open(env, range.range(&pool)).map(Some),
        None => Ok(None),
    };
    let mut mirror = open_mirror(env).map_err(Mismatch)?;
    for (step, op) in ops.iter().enumerate() {
        let now = env.clock().now();
        if let Some(mirror) = &mut mirror {
            mirror
                .drain_ready(env)
                .await
                .map_err(|m| Mismatch(format!("step {step}: {m}")))?;
        }
        match op {
            Op::Write { checks, mutations } => {
                let write = build_write(checks, mutations, &model, &pool, now);
                let actual = env.kv.atomic_write(write.clone()).await;
                let expected = {
                    // The model needs the backend's versionstamp to stamp entries; predict with a
                    // placeholder first, then re-apply with the real one.
                    let mut probe = model.clone();
                    probe.apply(&write, Versionstamp::ZERO, now)
                };
                match (&expected, actual) {
                    (Outcome::Committed, Ok(Some(result))) => {
                        if let Some(last) = model.last_stamp
                            && result.versionstamp <= last
                        {
                            return fail(
                                step,
                                format!("versionstamp {} not after {last}", result.versionstamp),
                            );
                        }
                        model.apply(&write, result.versionstamp, now);
                    }
                    (Outcome::CheckFailed, Ok(None)) => {}
                    (Outcome::Error(want), Err(got)) if *want == got.to_string() => {}
                    (expected, actual) => {
                        return fail(
                            step,
                            format!(
                                "write {write:?}: model says {expected:?}, backend said {actual:?}"
                            ),
                        );
                    }
                }
            }
            Op::Count(range) => {
                let range = range.range(&pool);
                let expected = model.count(&range, now);
                match env.kv.count_range(range.clone()).await {
                    Ok(actual) if actual == expected => {}
                    other => {
                        return fail(
                            step,
                            format!(
                                "count {range:?}: model says {expected:?}, backend said {other:?}"
                            ),
                        );
                    }
                }
            }
            Op::Get(k) => {
                let range = ReadRange::single_encoded_key(pool[*k].clone());
                let expected = model.read(&range.start, &range.end, 1, false, now);
                compare_read(env, range, expected, step).await?;
            }
            Op::List {
                from,
                to,
                limit,
                reverse,
            } => {
                let (start, end) = (pool[*from].clone(), pool[*to].clone());
                let expected = model.read(&start, &end, *limit, *reverse, now);
                let range = ReadRange {
                    start,
                    end,
                    limit: *limit,
                    reverse: *reverse,
                };
                compare_read(env, range, expected, step).await?;
            }
            Op::Advance(ms) => env.advance(Duration::from_millis(u64::from(*ms))),
            Op::Reopen => {
                if let Err(e) = env.reopen().await {
                    return fail(step, format!("reopen failed: {e}"));
                }
                // The old handle's watch ended with it; a consumer watches again.
                mirror = open_mirror(env).map_err(|m| Mismatch(format!("step {step}: {m}")))?;
            }
        }
    }
    if let (Some(mirror), Some(range)) = (&mut mirror, watched) {
        let range = range.range(&pool);
        let expected = model.read(&range.start, &range.end, u32::MAX, false, env.clock().now());
        mirror
            .settle(env, &expected)
            .await
            .map_err(|m| Mismatch(format!("after step {}: {m}", ops.len())))?;
    }
    // The final state, everything at once.
    let everything = ReadRange {
        start: vec![],
        end: vec![0xff],
        limit: 1000,
        reverse: false,
    };
    let expected = model.read(
        &everything.start,
        &everything.end,
        1000,
        false,
        env.clock().now(),
    );
    compare_read(env, everything, expected, ops.len()).await
}

async fn compare_read(
    env: &Env,
    range: ReadRange,
    expected: Vec<KvEntry>,
    step: usize,
) -> Result<(), Mismatch> {
    let read = SnapshotRead {
        ranges: vec![range.clone()],
        ..Default::default()
    };
    match env.kv.snapshot_read(read).await {
        Ok(mut out) if out.len() == 1 => {
            let actual = out.remove(0).entries;
            if actual == expected {
                Ok(())
            } else {
                Err(Mismatch(format!(
                    "step {step}: read {range:?}\n  model:   {expected:?}\n  backend: {actual:?}"
                )))
            }
        }
        other => Err(Mismatch(format!(
            "step {step}: read {range:?} failed: {other:?}"
        ))),
    }
}

// ----- the case -----

fn env_number(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> [u8; 32] {
    if let Ok(hex_seed) = std::env::var("KV_MODEL_SEED") {
        let mut seed = [0u8; 32];
        let bytes: Vec<u8> = (0..hex_seed.len())
            .step_by(2)
            .filter_map(|i| {
                hex_seed
                    .get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect();
        if bytes.len() == 32 {
            seed.copy_from_slice(&bytes);
            return seed;
        }
        panic!("KV_MODEL_SEED must be 64 hex digits");
    }
    let mut seed = [0u8; 32];
    let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    // Mix in the time so unset runs explore new ground; the seed is printed on failure.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    for (i, byte) in seed.iter_mut().enumerate() {
        *byte = rng.random::<u8>() ^ (nanos >> ((i % 16) * 8)) as u8;
    }
    seed
}

async fn random_sequences_match_the_model(env: Env) {
    if !env.offered.manual_clock {
        crate::NotRunnable::stop(
            "needs a manual clock: its sequences move time forward and expire entries",
        );
    }
    let cases = env_number("KV_MODEL_CASES", 64);
    let seed = seed();
    let seed_hex: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    let reopen = env.offered.can_reopen;
    let beyond = Beyond {
        range_delete: env.offered.capabilities.range_delete,
        count: env.offered.capabilities.count,
        watch_range: env.offered.capabilities.watch_range,
    };
    let env = Arc::new(env);
    let handle = tokio::runtime::Handle::current();
    let outcome = tokio::task::spawn_blocking(move || {
        let config = Config {
            cases,
            failure_persistence: None,
            // A failing sequence is shrunk for at most this long: a mirror that never catches up
            // costs MIRROR_WAIT per attempt, and a seeded fault (tests/teeth.rs) must not turn
            // one failure into many minutes of shrinking.
            max_shrink_time: SHRINK_TIME_MS,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
        let watched = if beyond.watch_range {
            prop::option::weighted(0.7, range_gen()).boxed()
        } else {
            Just(None).boxed()
        };
        let strategy = (
            watched,
            prop::collection::vec(op_gen(reopen, beyond), 1..40),
        );
        runner.run(&strategy, |(watched, ops)| {
            handle.block_on(async {
                let mut fresh = env
                    .fresh()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("open: {e}")))?;
                let result = run_sequence(&mut fresh, watched, &ops).await;
                let _ = fresh.kv.close().await;
                result.map_err(|m| TestCaseError::fail(m.0))
            })
        })
    })
    .await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(TestError::Fail(reason, ops))) => panic!(
            "backend disagrees with the model: {reason}\nminimal sequence: {ops:#?}\nreplay with KV_MODEL_SEED={seed_hex} KV_MODEL_CASES={cases}"
        ),
        Ok(Err(TestError::Abort(reason))) => {
            panic!("model run aborted: {reason} (KV_MODEL_SEED={seed_hex})")
        }
        Err(join) => panic!("model run crashed: {join} (KV_MODEL_SEED={seed_hex})"),
    }
}

//! How fast open-deno-kv-redb is next to redb used directly, measured side by side in one run on fresh files.
//!
//! ```text
//! cargo run --release -p open-deno-kv-redb --example redb_bench -- [--writes N] [--reads N] [--keys N]
//!     [--tasks N] [--rounds N] [--deferred] [--dir PATH]
//! ```
//!
//! - (a) `--writes` sequential single-key sets (keys `["bench", i]` encoded with
//!   `open_deno_kv_engine_kit::encode_key`, 100-byte `Bytes` values) through `RedbBackend::atomic_write`, against
//!   raw redb doing the same sets as one write transaction and one commit each, into a table of
//!   the same key and value bytes, at the same durability (`Immediate`: one fsync per set on both
//!   sides). `--deferred` adds the same at `Durability::Deferred` against redb's
//!   `Durability::None`.
//! - (b) `--reads` random point gets over `--keys` preloaded keys through
//!   `RedbBackend::snapshot_read`, against raw redb `begin_read` + `open_table` + `get` with the
//!   value copied out; both from one task on a worker thread of a multi-thread runtime.
//! - (c) `--writes` sets through the backend from one task, then from `--tasks` (64) concurrent
//!   tasks: the writer groups the waiting writes into one transaction and one fsync, so the
//!   speed-up shows what group commit buys.
//!
//! This machine's fsync time varies several-fold from one second to the next, so the two sides
//! are interleaved — one set each in turn for (a), chunks of 1000 gets each in turn for (b) — and
//! each measurement runs `--rounds` times on fresh files; the round with the median ratio is
//! shown. The ratio is backend time over raw time: 1.00 is no overhead; the target is at most 1.3.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};
use redb::{Database, ReadableDatabase, TableDefinition};

const VALUE_SIZE: usize = 100;
/// Keys per preload commit (under Deno's 1000 mutations and 800 KiB per write).
const PRELOAD_BATCH: usize = 500;
/// Untimed gets before each timed read run.
const WARMUP_READS: usize = 2_000;
/// The raw baseline's table: the same key and value bytes the backend is given.
const RAW_TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    writes: usize,
    reads: usize,
    keys: usize,
    tasks: usize,
    rounds: usize,
    deferred: bool,
    dir: Option<PathBuf>,
}

const USAGE: &str = "usage: redb_bench [--writes N] [--reads N] [--keys N] [--tasks N] \
                     [--rounds N] [--deferred] [--dir PATH]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        writes: 1_000,
        reads: 200_000,
        keys: 100_000,
        tasks: 64,
        rounds: 3,
        deferred: false,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let text = it.next().ok_or_else(|| format!("{name} needs a value"))?;
            let n: usize = text
                .replace('_', "")
                .parse()
                .map_err(|_| format!("{name}: not a number: {text}"))?;
            if n == 0 {
                return Err(format!("{name} must be at least 1"));
            }
            Ok(n)
        };
        match flag.as_str() {
            "--writes" => args.writes = number("--writes")?,
            "--reads" => args.reads = number("--reads")?,
            "--keys" => args.keys = number("--keys")?,
            "--tasks" => args.tasks = number("--tasks")?,
            "--rounds" => args.rounds = number("--rounds")?,
            "--deferred" => args.deferred = true,
            "--dir" => args.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a value")?)),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if let Err(err) = run(&args) {
        eprintln!("redb_bench failed: {err}");
        std::process::exit(1);
    }
}

/// A directory for this run's files, removed at the end unless given with `--dir`.
struct Workspace {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
    files: usize,
}

impl Workspace {
    fn new(dir: Option<&Path>) -> Result<Self, BoxError> {
        Ok(match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Workspace {
                    path: dir.to_path_buf(),
                    _temp: None,
                    files: 0,
                }
            }
            None => {
                let temp = tempfile::Builder::new().prefix("redb-bench-").tempdir()?;
                Workspace {
                    path: temp.path().to_path_buf(),
                    _temp: Some(temp),
                    files: 0,
                }
            }
        })
    }

    /// A path for a new file that does not exist yet.
    fn fresh(&mut self, name: &str) -> Result<PathBuf, BoxError> {
        self.files += 1;
        let path = self.path.join(format!("{:03}-{name}.redb", self.files));
        if path.exists() {
            std::fs::remove_file(&path)?;
        }
        Ok(path)
    }
}

fn bench_key(i: usize) -> Result<Vec<u8>, BoxError> {
    Ok(encode_key(&key!["bench", i64::try_from(i)?])?)
}

fn value_bytes(i: usize) -> Vec<u8> {
    (0..VALUE_SIZE).map(|j| (i + j) as u8).collect()
}

fn run(args: &Args) -> Result<(), BoxError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut ws = Workspace::new(args.dir.as_deref())?;
    println!(
        "open-deno-kv-redb bench: {} writes, {} reads over {} keys, {} concurrent writers, {} rounds (median shown)",
        args.writes, args.reads, args.keys, args.tasks, args.rounds
    );
    println!("files in {}\n", ws.path.display());

    // (a) sequential sets, raw and backend interleaved one set at a time.
    let mut rounds = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds {
        let raw_path = ws.fresh("raw-sets")?;
        let backend_path = ws.fresh("backend-sets")?;
        rounds.push(runtime.block_on(interleaved_sets(
            &raw_path,
            &backend_path,
            args.writes,
            Durability::Immediate,
        ))?);
    }
    let (raw, backend) = median_round(rounds);
    report(
        "(a) sequential sets, Immediate (one fsync per set on both sides)",
        args.writes,
        raw,
        backend,
    );

    if args.deferred {
        let mut rounds = Vec::with_capacity(args.rounds);
        for _ in 0..args.rounds {
            let raw_path = ws.fresh("raw-sets-none")?;
            let backend_path = ws.fresh("backend-sets-deferred")?;
            rounds.push(runtime.block_on(interleaved_sets(
                &raw_path,
                &backend_path,
                args.writes,
                Durability::Deferred,
            ))?);
        }
        let (raw, backend) = median_round(rounds);
        report(
            "(a') sequential sets, Deferred vs raw redb Durability::None",
            args.writes,
            raw,
            backend,
        );
    }

    // (b) random point gets, raw and backend interleaved in chunks, from one task on a worker
    // thread of a multi-thread runtime (where `block_in_place` has a core to hand off, as in a
    // real server).
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..args.keys)
            .map(bench_key)
            .collect::<Result<Vec<_>, _>>()?,
    );
    let order: Arc<Vec<usize>> = Arc::new(random_indices(args.reads, args.keys));
    let raw_db = Arc::new(preload_raw(&ws.fresh("raw-reads")?, &keys)?);
    let kv = Arc::new(runtime.block_on(preload_backend(&ws.fresh("backend-reads")?, &keys))?);
    let mut rounds = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds {
        let (raw_db, kv, keys, order) = (raw_db.clone(), kv.clone(), keys.clone(), order.clone());
        rounds.push(runtime.block_on(async move {
            tokio::spawn(async move { interleaved_gets(&raw_db, &kv, &keys, &order).await }).await?
        })?);
    }
    let (raw, backend) = median_round(rounds);
    report("(b) random point gets", args.reads, raw, backend);
    runtime.block_on(kv.close())?;
    drop(raw_db);

    // (c) group commit.
    let (sequential, concurrent) = alternate(args.rounds, |round_sequential| {
        let path = ws.fresh("backend-group")?;
        if round_sequential {
            runtime.block_on(backend_sets(&path, args.writes))
        } else {
            runtime.block_on(concurrent_sets(&path, args.writes, args.tasks))
        }
    })?;
    println!(
        "(c) group commit: {} sets through open-deno-kv-redb, Immediate",
        args.writes
    );
    println!(
        "    1 writer        {:>12.0} ops/s",
        ops_per_sec(args.writes, sequential)
    );
    println!(
        "    {:<3} writers     {:>12.0} ops/s   {:.1}x the single writer",
        args.tasks,
        ops_per_sec(args.writes, concurrent),
        sequential.as_secs_f64() / concurrent.as_secs_f64()
    );
    Ok(())
}

/// The round whose backend/raw ratio is the median.
fn median_round(mut rounds: Vec<(Duration, Duration)>) -> (Duration, Duration) {
    rounds.sort_by(|a, b| {
        let ratio = |(raw, backend): &(Duration, Duration)| {
            backend.as_secs_f64() / raw.as_secs_f64().max(1e-9)
        };
        ratio(a).total_cmp(&ratio(b))
    });
    rounds.get(rounds.len() / 2).copied().unwrap_or_default()
}

/// Runs `measure(true)` (baseline) and `measure(false)` (backend) alternately, `rounds` times
/// each; returns the median of each.
fn alternate(
    rounds: usize,
    mut measure: impl FnMut(bool) -> Result<Duration, BoxError>,
) -> Result<(Duration, Duration), BoxError> {
    let mut first = Vec::with_capacity(rounds);
    let mut second = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        first.push(measure(true)?);
        second.push(measure(false)?);
    }
    Ok((median(first), median(second)))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn ops_per_sec(ops: usize, took: Duration) -> f64 {
    ops as f64 / took.as_secs_f64().max(1e-9)
}

fn report(title: &str, ops: usize, raw: Duration, backend: Duration) {
    let ratio = backend.as_secs_f64() / raw.as_secs_f64().max(1e-9);
    println!("{title}: {ops} ops");
    println!(
        "    raw redb        {:>12.0} ops/s   {:>8.2} us/op",
        ops_per_sec(ops, raw),
        raw.as_secs_f64() * 1e6 / ops as f64
    );
    println!(
        "    open-deno-kv-redb         {:>12.0} ops/s   {:>8.2} us/op",
        ops_per_sec(ops, backend),
        backend.as_secs_f64() * 1e6 / ops as f64
    );
    let verdict = if ratio <= 1.3 {
        "within 1.3x"
    } else {
        "OVER 1.3x"
    };
    println!("    backend/raw time {ratio:.2}  ({verdict})\n");
}

fn raw_set(
    db: &Database,
    key: &[u8],
    value: &[u8],
    durability: redb::Durability,
) -> Result<(), BoxError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(durability)?;
    {
        let mut table = txn.open_table(RAW_TABLE)?;
        table.insert(key, value)?;
    }
    txn.commit()?;
    Ok(())
}

/// `writes` sets on each side, alternating one raw set and one backend set, so both see the
/// same disk conditions (this machine's fsync time varies several-fold over seconds). Returns
/// the (raw, backend) total times.
async fn interleaved_sets(
    raw_path: &Path,
    backend_path: &Path,
    writes: usize,
    durability: Durability,
) -> Result<(Duration, Duration), BoxError> {
    let raw_durability = match durability {
        Durability::Immediate => redb::Durability::Immediate,
        Durability::Deferred => redb::Durability::None,
    };
    let db = Database::create(raw_path)?;
    let kv = open_backend(backend_path, durability)?;
    let keys = (0..writes).map(bench_key).collect::<Result<Vec<_>, _>>()?;
    let (mut raw, mut backend) = (Duration::ZERO, Duration::ZERO);
    for (i, key) in keys.into_iter().enumerate() {
        let value = value_bytes(i);
        let start = Instant::now();
        raw_set(&db, &key, &value, raw_durability)?;
        raw += start.elapsed();
        let write = AtomicWrite {
            mutations: vec![Mutation::set(key, KvValue::Bytes(value.into()))],
            ..Default::default()
        };
        let start = Instant::now();
        kv.atomic_write(write).await?;
        backend += start.elapsed();
    }
    kv.close().await?;
    db.close()?;
    Ok((raw, backend))
}

fn open_backend(path: &Path, durability: Durability) -> Result<Checked<RedbBackend>, BoxError> {
    Ok(RedbBackend::open_with(
        path,
        RedbOptions {
            durability,
            ..Default::default()
        },
    )?)
}

fn set_write(key: Vec<u8>, i: usize) -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(key, KvValue::Bytes(value_bytes(i).into()))],
        ..Default::default()
    }
}

async fn backend_sets(path: &Path, writes: usize) -> Result<Duration, BoxError> {
    let kv = open_backend(path, Durability::Immediate)?;
    let keys = (0..writes).map(bench_key).collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    for (i, key) in keys.into_iter().enumerate() {
        kv.atomic_write(set_write(key, i)).await?;
    }
    let took = start.elapsed();
    kv.close().await?;
    Ok(took)
}

async fn concurrent_sets(path: &Path, writes: usize, tasks: usize) -> Result<Duration, BoxError> {
    let kv = Arc::new(open_backend(path, Durability::Immediate)?);
    let per_task = writes.div_ceil(tasks);
    let start = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let kv = kv.clone();
        let range = (t * per_task)..((t + 1) * per_task).min(writes);
        handles.push(tokio::spawn(async move {
            for i in range {
                kv.atomic_write(set_write(bench_key(i)?, i)).await?;
            }
            Ok::<(), BoxError>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let took = start.elapsed();
    kv.close().await?;
    Ok(took)
}

/// A fixed pseudo-random sequence of key indices (xorshift), the same for both sides.
fn random_indices(count: usize, keys: usize) -> Vec<usize> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % keys as u64) as usize
        })
        .collect()
}

fn preload_raw(path: &Path, keys: &[Vec<u8>]) -> Result<Database, BoxError> {
    let db = Database::create(path)?;
    let txn = db.begin_write()?;
    {
        let mut table = txn.open_table(RAW_TABLE)?;
        for (i, key) in keys.iter().enumerate() {
            table.insert(key.as_slice(), value_bytes(i).as_slice())?;
        }
    }
    txn.commit()?;
    Ok(db)
}

async fn preload_backend(path: &Path, keys: &[Vec<u8>]) -> Result<Checked<RedbBackend>, BoxError> {
    let kv = open_backend(path, Durability::Immediate)?;
    for (batch, chunk) in keys.chunks(PRELOAD_BATCH).enumerate() {
        let mutations = chunk
            .iter()
            .enumerate()
            .map(|(j, key)| {
                let i = batch * PRELOAD_BATCH + j;
                Mutation::set(key.clone(), KvValue::Bytes(value_bytes(i).into()))
            })
            .collect();
        kv.atomic_write(AtomicWrite {
            mutations,
            ..Default::default()
        })
        .await?;
    }
    Ok(kv)
}

fn raw_get(db: &Database, key: &[u8]) -> Result<Vec<u8>, BoxError> {
    let txn = db.begin_read()?;
    let table = txn.open_table(RAW_TABLE)?;
    let value = table.get(key)?.ok_or("a preloaded key is missing")?;
    Ok(value.value().to_vec())
}

/// Chunks of gets alternate between raw redb and the backend, from the same task.
const READ_CHUNK: usize = 1_000;

async fn interleaved_gets(
    db: &Database,
    kv: &Checked<RedbBackend>,
    keys: &[Vec<u8>],
    order: &[usize],
) -> Result<(Duration, Duration), BoxError> {
    for &i in order.iter().take(WARMUP_READS) {
        std::hint::black_box(raw_get(db, &keys[i])?);
        std::hint::black_box(backend_get(kv, &keys[i]).await?);
    }
    let (mut raw, mut backend) = (Duration::ZERO, Duration::ZERO);
    for chunk in order.chunks(READ_CHUNK) {
        let start = Instant::now();
        for &i in chunk {
            std::hint::black_box(raw_get(db, &keys[i])?);
        }
        raw += start.elapsed();
        let start = Instant::now();
        for &i in chunk {
            std::hint::black_box(backend_get(kv, &keys[i]).await?);
        }
        backend += start.elapsed();
    }
    Ok((raw, backend))
}

async fn backend_get(kv: &Checked<RedbBackend>, key: &[u8]) -> Result<KvValue, BoxError> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key.to_vec())],
        ..Default::default()
    };
    let mut out = kv.snapshot_read(read).await?;
    let entry = out
        .pop()
        .and_then(|mut range| range.entries.pop())
        .ok_or("a preloaded key is missing")?;
    Ok(entry.value)
}

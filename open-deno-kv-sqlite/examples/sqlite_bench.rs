//! Throughput of open-deno-kv-sqlite on this machine, measured side by side in one run on fresh files.
//!
//! ```text
//! cargo run --release -p open-deno-kv-sqlite --example sqlite_bench -- [--writes N] [--reads N] [--keys N]
//!     [--tasks N] [--read-tasks N] [--process] [--diagnose] [--dir PATH]
//! ```
//!
//! - (a) one task doing `--writes` single-key sets (`["bench", i]`, a 100-byte `Bytes` value),
//!   one after the other;
//! - (b) the same number of sets from `--tasks` (64) concurrent tasks on a multi-thread runtime:
//!   the writer groups what is waiting into one transaction and one sync, so (b) / (a) shows what
//!   group commit buys;
//! - (c) `--reads` random point gets over `--keys` preloaded keys through
//!   `SqliteBackend::snapshot_read`, from one task, against the same gets done with a plain
//!   `rusqlite` prepared statement on its own connection to the same file;
//! - (d) the same gets through the backend from `--read-tasks` (8) concurrent tasks.
//!
//! Writes run at `Durability::Full` (a sync per commit group); `--process` adds a run at
//! `Durability::Process`. Every file is new, in a temporary directory (or under `--dir`).
//!
//! `--diagnose` adds rows that split the cost of a backend get: the backend's own range SQL run
//! raw (`limit ?` bound to 1, with and without SQLite's query-planner stability guarantee, and
//! with a literal `limit 1`), and the baseline get sent through `tokio::task::spawn_blocking`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_sqlite::{Durability, FileEngine, SqliteBackend, SqliteOptions};
use rusqlite::{Connection, OpenFlags, OptionalExtension};

const VALUE_SIZE: usize = 100;
/// Keys per preload commit (well under Deno's 1000 mutations and 800 KiB per write).
const PRELOAD_BATCH: usize = 500;
/// Untimed gets before each timed read run, to warm caches and prepared statements.
const WARMUP_READS: usize = 2_000;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    writes: usize,
    reads: usize,
    keys: usize,
    tasks: usize,
    read_tasks: usize,
    process: bool,
    diagnose: bool,
    dir: Option<PathBuf>,
}

const USAGE: &str = "usage: sqlite_bench [--writes N] [--reads N] [--keys N] [--tasks N] \
                     [--read-tasks N] [--process] [--diagnose] [--dir PATH]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        writes: 5_000,
        reads: 100_000,
        keys: 100_000,
        tasks: 64,
        read_tasks: 8,
        process: false,
        diagnose: false,
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
            "--read-tasks" => args.read_tasks = number("--read-tasks")?,
            "--process" => args.process = true,
            "--diagnose" => args.diagnose = true,
            "--dir" => {
                args.dir = Some(PathBuf::from(
                    it.next().ok_or("--dir needs a value".to_owned())?,
                ))
            }
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("cannot start the runtime: {err}");
            std::process::exit(1);
        }
    };
    if let Err(err) = runtime.block_on(run(args)) {
        eprintln!("sqlite_bench failed: {err}");
        std::process::exit(1);
    }
}

/// One measured line of the table.
struct Row {
    group: String,
    test: String,
    ops: usize,
    elapsed: Duration,
}

impl Row {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let temp = match &args.dir {
        Some(dir) => tempfile::tempdir_in(dir)?,
        None => tempfile::tempdir()?,
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "open-deno-kv-sqlite bench: writes={} reads={} keys={} write tasks={} read tasks={} cpus={} dir={}",
        args.writes,
        args.reads,
        args.keys,
        args.tasks,
        args.read_tasks,
        cpus,
        temp.path().display()
    );

    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    let mut durabilities = vec![("Full", Durability::Full)];
    if args.process {
        durabilities.push(("Process", Durability::Process));
    }
    for (name, durability) in durabilities {
        let seq_path = temp.path().join(format!("seq-{name}.sqlite3"));
        let seq = sequential_writes(&seq_path, durability, args.writes).await?;
        let conc_path = temp.path().join(format!("conc-{name}.sqlite3"));
        let conc = concurrent_writes(&conc_path, durability, args.writes, args.tasks).await?;
        let seq_row = Row {
            group: format!("writes, {name}"),
            test: "(a) sequential sets, 1 task".into(),
            ops: args.writes,
            elapsed: seq,
        };
        let conc_row = Row {
            group: format!("writes, {name}"),
            test: format!("(b) concurrent sets, {} tasks", args.tasks),
            ops: args.writes,
            elapsed: conc,
        };
        let ratio = conc_row.ops_per_sec() / seq_row.ops_per_sec();
        ratios.push(format!(
            "{name}: (b)/(a) = {ratio:.2}x  (target >= 6x: {})",
            verdict(ratio >= 6.0)
        ));
        rows.push(seq_row);
        rows.push(conc_row);
    }

    let read_path = temp.path().join("reads.sqlite3");
    preload(&read_path, args.keys).await?;
    let indices = random_indices(args.reads, args.keys);
    let kv = Arc::new(SqliteBackend::open_with(
        &read_path,
        SqliteOptions::default(),
    )?);
    backend_gets(&kv, &indices[..WARMUP_READS.min(indices.len())]).await?;
    let backend_one = backend_gets(&kv, &indices).await?;
    let raw = {
        let path = read_path.clone();
        let indices = indices.clone();
        tokio::task::spawn_blocking(move || raw_gets(&path, &indices, RawQuery::Point)).await??
    };
    let backend_many = concurrent_backend_gets(&kv, &indices, args.read_tasks).await?;
    let mut diagnostics = Vec::new();
    if args.diagnose {
        let blocking = tokio::task::spawn_blocking({
            let path = read_path.clone();
            let indices = indices.clone();
            move || -> Result<_, BoxError> {
                Ok((
                    raw_gets(&path, &indices, RawQuery::BackendRange)?,
                    raw_gets(&path, &indices, RawQuery::BackendRangeQpsg)?,
                    raw_gets(&path, &indices, RawQuery::RangeLiteralLimit)?,
                ))
            }
        });
        let (range_bound, range_qpsg, range_literal) = blocking.await??;
        let handoff = raw_gets_via_spawn_blocking(&read_path, &indices).await?;
        let in_place = raw_gets_via_block_in_place(&read_path, &indices).await?;
        for (test, elapsed) in [
            ("raw, backend's SQL, limit ?=1", range_bound),
            ("raw, backend's SQL, QPSG on", range_qpsg),
            ("raw, range SQL, literal limit 1", range_literal),
            ("raw point get via spawn_blocking", handoff),
            ("raw point get via block_in_place", in_place),
        ] {
            diagnostics.push(Row {
                group: "diagnostics".into(),
                test: test.into(),
                ops: args.reads,
                elapsed,
            });
        }
    }
    kv.close().await?;

    let backend_row = Row {
        group: "reads".into(),
        test: "(c) backend get, 1 task".into(),
        ops: args.reads,
        elapsed: backend_one,
    };
    let raw_row = Row {
        group: "reads".into(),
        test: "(c) raw rusqlite get, 1 thread".into(),
        ops: args.reads,
        elapsed: raw,
    };
    let many_row = Row {
        group: "reads".into(),
        test: format!("(d) backend get, {} tasks", args.read_tasks),
        ops: args.reads,
        elapsed: backend_many,
    };
    let ratio = backend_row.ops_per_sec() / raw_row.ops_per_sec();
    ratios.push(format!(
        "reads: (c) backend/raw = {ratio:.3}  (target >= 0.333: {})",
        verdict(ratio >= 1.0 / 3.0)
    ));
    ratios.push(format!(
        "reads: (d)/(c) backend = {:.2}x",
        many_row.ops_per_sec() / backend_row.ops_per_sec()
    ));
    rows.push(backend_row);
    rows.push(raw_row);
    rows.push(many_row);
    rows.extend(diagnostics);

    println!();
    println!(
        "{:<16} {:<32} {:>9} {:>9} {:>12} {:>10}",
        "group", "test", "ops", "secs", "ops/s", "us/op"
    );
    for row in &rows {
        println!(
            "{:<16} {:<32} {:>9} {:>9.3} {:>12.0} {:>10.2}",
            row.group,
            row.test,
            row.ops,
            row.elapsed.as_secs_f64(),
            row.ops_per_sec(),
            row.elapsed.as_secs_f64() * 1e6 / row.ops as f64
        );
    }
    println!();
    for line in ratios {
        println!("{line}");
    }
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn bench_value() -> KvValue {
    KvValue::Bytes(vec![0xa5; VALUE_SIZE].into())
}

fn set_one(i: usize) -> Result<AtomicWrite, BoxError> {
    Ok(AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key!["bench", i as u64])?,
            bench_value(),
        )],
        ..Default::default()
    })
}

fn open(path: &Path, durability: Durability) -> Result<Checked<SqliteBackend>, BoxError> {
    Ok(SqliteBackend::open_with(
        path,
        SqliteOptions {
            durability,
            ..Default::default()
        },
    )?)
}

/// (a): one write at a time, each waiting for its commit.
async fn sequential_writes(
    path: &Path,
    durability: Durability,
    writes: usize,
) -> Result<Duration, BoxError> {
    let kv = open(path, durability)?;
    let started = Instant::now();
    for i in 0..writes {
        kv.atomic_write(set_one(i)?)
            .await?
            .ok_or("a set without checks was not committed")?;
    }
    let elapsed = started.elapsed();
    kv.close().await?;
    Ok(elapsed)
}

/// (b): the same writes split over `tasks` concurrent tasks.
async fn concurrent_writes(
    path: &Path,
    durability: Durability,
    writes: usize,
    tasks: usize,
) -> Result<Duration, BoxError> {
    let kv = Arc::new(open(path, durability)?);
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let kv = kv.clone();
        handles.push(tokio::spawn(async move {
            // Task t writes keys t, t + tasks, t + 2 * tasks, ...
            for i in (task..writes).step_by(tasks) {
                kv.atomic_write(set_one(i)?)
                    .await?
                    .ok_or("a set without checks was not committed")?;
            }
            Ok::<(), BoxError>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let elapsed = started.elapsed();
    kv.close().await?;
    Ok(elapsed)
}

/// Writes `["bench", 0..keys]` in large commits (not timed).
async fn preload(path: &Path, keys: usize) -> Result<(), BoxError> {
    let started = Instant::now();
    let kv = open(path, Durability::Process)?;
    for first in (0..keys).step_by(PRELOAD_BATCH) {
        let mut mutations = Vec::with_capacity(PRELOAD_BATCH);
        for i in first..(first + PRELOAD_BATCH).min(keys) {
            mutations.push(Mutation::set(
                encode_key(&key!["bench", i as u64])?,
                bench_value(),
            ));
        }
        let write = AtomicWrite {
            mutations,
            ..Default::default()
        };
        kv.atomic_write(write)
            .await?
            .ok_or("a preload commit was refused")?;
    }
    kv.close().await?;
    println!(
        "preloaded {keys} keys in {:.2}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `count` indices in `0..keys` from a fixed-seed xorshift generator (the same every run).
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

fn check_value(found: Option<&KvValue>, i: usize) -> Result<(), BoxError> {
    match found {
        Some(KvValue::Bytes(bytes)) if bytes.len() == VALUE_SIZE => Ok(()),
        other => Err(format!("get [\"bench\", {i}]: unexpected {other:?}").into()),
    }
}

/// (c): point gets through the backend, one after the other.
async fn backend_gets(
    kv: &Checked<SqliteBackend>,
    indices: &[usize],
) -> Result<Duration, BoxError> {
    let started = Instant::now();
    for &i in indices {
        let read = SnapshotRead {
            ranges: vec![ReadRange::single_key(&key!["bench", i as u64])?],
            ..Default::default()
        };
        let outputs = kv.snapshot_read(read).await?;
        let entry = outputs.first().and_then(|o| o.entries.first());
        check_value(entry.map(|e| &e.value), i)?;
    }
    Ok(started.elapsed())
}

/// (d): the same gets split over `tasks` concurrent tasks.
async fn concurrent_backend_gets(
    kv: &Arc<Checked<SqliteBackend>>,
    indices: &[usize],
    tasks: usize,
) -> Result<Duration, BoxError> {
    let chunk = indices.len().div_ceil(tasks);
    let started = Instant::now();
    let mut handles = Vec::with_capacity(tasks);
    for part in indices.chunks(chunk) {
        let kv = kv.clone();
        let part = part.to_vec();
        handles.push(tokio::spawn(async move {
            backend_gets(&kv, &part).await.map(|_| ())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    Ok(started.elapsed())
}

/// How a raw get asks SQLite.
#[derive(Clone, Copy)]
enum RawQuery {
    /// The baseline: `where k = ?`.
    Point,
    /// The backend's single-key read: a range with the expiry filter and `limit ?4` bound to 1.
    BackendRange,
    /// The same, on a connection with the query planner stability guarantee on (no re-prepare
    /// when a bound value changes).
    BackendRangeQpsg,
    /// The same range query with `limit 1` written into the SQL.
    RangeLiteralLimit,
}

const POINT_SQL: &str = "select v, v_encoding, version from kv where k = ?";
const BACKEND_RANGE_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k asc limit ?4";
const LITERAL_LIMIT_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k asc limit 1";

fn open_raw(path: &Path) -> Result<Connection, BoxError> {
    Ok(Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?)
}

/// One raw get of `["bench", i]`, checked.
fn raw_get(conn: &Connection, query: RawQuery, i: usize) -> Result<(), BoxError> {
    let k = encode_key(&key!["bench", i as u64])?;
    let row = match query {
        RawQuery::Point => conn
            .prepare_cached(POINT_SQL)?
            .query_row([&k], |row| {
                let bytes: Vec<u8> = row.get(0)?;
                let encoding: i64 = row.get(1)?;
                let _version: i64 = row.get(2)?;
                Ok((bytes, encoding))
            })
            .optional()?,
        RawQuery::BackendRange | RawQuery::BackendRangeQpsg | RawQuery::RangeLiteralLimit => {
            let mut end = k.clone();
            end.push(0);
            let now_ms = open_deno_kv_engine_kit::chrono::Utc::now().timestamp_millis();
            let read = |row: &rusqlite::Row<'_>| {
                let _key: Vec<u8> = row.get(0)?;
                let bytes: Vec<u8> = row.get(1)?;
                let encoding: i64 = row.get(2)?;
                let _version: i64 = row.get(3)?;
                Ok((bytes, encoding))
            };
            if let RawQuery::BackendRange | RawQuery::BackendRangeQpsg = query {
                conn.prepare_cached(BACKEND_RANGE_SQL)?
                    .query_row(rusqlite::params![k, end, now_ms, 1i64], read)
                    .optional()?
            } else {
                conn.prepare_cached(LITERAL_LIMIT_SQL)?
                    .query_row(rusqlite::params![k, end, now_ms], read)
                    .optional()?
            }
        }
    };
    let value = match row {
        Some((bytes, encoding)) => Some(KvValue::decode(bytes, encoding)?),
        None => None,
    };
    check_value(value.as_ref(), i)
}

/// (c), the baseline: the same gets with one prepared statement on a plain connection, on this
/// thread. Other `query` kinds are diagnostics.
fn raw_gets(path: &Path, indices: &[usize], query: RawQuery) -> Result<Duration, BoxError> {
    let conn = open_raw(path)?;
    if let RawQuery::BackendRangeQpsg = query {
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
    }
    for &i in &indices[..WARMUP_READS.min(indices.len())] {
        raw_get(&conn, query, i)?;
    }
    let started = Instant::now();
    for &i in indices {
        raw_get(&conn, query, i)?;
    }
    Ok(started.elapsed())
}

/// Diagnostic: the baseline's gets, each run on the calling worker thread inside
/// `tokio::task::block_in_place` (no hand-off to another thread), from one task.
async fn raw_gets_via_block_in_place(path: &Path, indices: &[usize]) -> Result<Duration, BoxError> {
    let conn = open_raw(path)?;
    for &i in &indices[..WARMUP_READS.min(indices.len())] {
        tokio::task::block_in_place(|| raw_get(&conn, RawQuery::Point, i))?;
        tokio::task::yield_now().await;
    }
    let started = Instant::now();
    for &i in indices {
        tokio::task::block_in_place(|| raw_get(&conn, RawQuery::Point, i))?;
        // A real caller awaits between gets; give the scheduler the same chance.
        tokio::task::yield_now().await;
    }
    Ok(started.elapsed())
}

/// Diagnostic: the baseline's gets, each sent to tokio's blocking pool and awaited from one task
/// (the hand-off every backend read makes).
async fn raw_gets_via_spawn_blocking(path: &Path, indices: &[usize]) -> Result<Duration, BoxError> {
    let conn = Arc::new(std::sync::Mutex::new(open_raw(path)?));
    let get = |i: usize| {
        let conn = conn.clone();
        tokio::task::spawn_blocking(move || {
            let conn = conn.lock().map_err(|_| "poisoned")?;
            raw_get(&conn, RawQuery::Point, i)
        })
    };
    for &i in &indices[..WARMUP_READS.min(indices.len())] {
        get(i).await??;
    }
    let started = Instant::now();
    for &i in indices {
        get(i).await??;
    }
    Ok(started.elapsed())
}

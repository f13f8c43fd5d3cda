//! `open-deno-kv-bench diagnose-commits`: what one durable set costs open-deno-kv-sqlite, against two raw floors, and
//! which pages each commit writes. It is issue 17's account of W1 (sequential durable sets).
//!
//! Four ways to make the same sequential sets, each on a fresh file, alternating in every round:
//!
//! - **raw kv table**: the floor `open-deno-kv-bench` reports. It uses Deno's `kv` table alone, with one
//!   autocommit `insert or replace` per set.
//! - **raw Deno layout**: a file open-deno-kv-sqlite created, so it has Deno's whole layout (the
//!   `data_version` row, the `kv` table and its `kv_expiration_ms_idx` index, the queue tables).
//!   Each set is what any writer of that layout must do, with prepared statements and nothing
//!   else: `BEGIN IMMEDIATE`, bump `data_version`, `insert or replace` the row, `COMMIT`.
//! - **open-deno-kv-sqlite, worker**: the kit's write path, from a task on a multi-thread runtime's worker.
//!   The caller leads the group in place.
//! - **open-deno-kv-sqlite, current-thread**: the same from a current-thread runtime. The committer's
//!   standby thread leads, so every lone write costs a hop to that thread and back.
//!
//! All four use WAL and `synchronous = FULL`: one fsync of the log per commit.
//!
//! The page account comes from the log itself. After a `wal_checkpoint(truncate)`, a run of sets
//! is made, then the `-wal` file is read frame by frame. Each frame's page number is mapped to its
//! B-tree through SQLite's `dbstat` table. A commit's frames are every page it changed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use open_deno_kv_bench_harness::child::runtime;
use open_deno_kv_bench_harness::workloads::{Kv, w1_sequential_sets};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
use rusqlite::{Connection, params};

use crate::data::{KeyTable, Result, bench_prefix_end, value_bytes};
use crate::raw::RawSqlite;
use crate::spec::Durability;
use crate::stats::{Chain, median};

/// Sets in the page account: few enough that no checkpoint empties the log meanwhile (SQLite's,
/// and open-deno-kv-sqlite's, checkpoint at 1,000 pages).
const ACCOUNT_SETS: usize = 100;
/// A WAL file's header, and each frame's header before its page.
const WAL_HEADER: usize = 32;
const FRAME_HEADER: usize = 24;

/// The four ways to set, in report order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Way {
    RawKvTable,
    RawDenoLayout,
    KvSqliteWorker,
    KvSqliteCurrent,
}

impl Way {
    const ALL: [Way; 4] = [
        Way::RawKvTable,
        Way::RawDenoLayout,
        Way::KvSqliteWorker,
        Way::KvSqliteCurrent,
    ];

    fn name(self) -> &'static str {
        match self {
            Way::RawKvTable => "raw kv table",
            Way::RawDenoLayout => "raw Deno layout",
            Way::KvSqliteWorker => "open-deno-kv-sqlite, worker task",
            Way::KvSqliteCurrent => "open-deno-kv-sqlite, current-thread",
        }
    }
}

/// Runs `rounds` rounds of `sets` sets each way, then the page account, and prints both.
pub fn run(sets: usize, rounds: usize) -> Result<()> {
    let keys = Arc::new(KeyTable::bench(sets)?);
    let mut rates: BTreeMap<Way, Vec<f64>> = BTreeMap::new();
    for round in 1..=rounds {
        // Each round starts with the next way, so none is always first on a cold machine.
        let order = Way::ALL.iter().cycle().skip(round - 1).take(Way::ALL.len());
        for &way in order {
            let dir = tempdir()?;
            let elapsed = time_sets(way, &dir, &keys)?;
            let rate = sets as f64 / elapsed;
            eprintln!(
                "[round {round}/{rounds}] {:<26} {rate:>9.0} sets/s",
                way.name()
            );
            rates.entry(way).or_default().push(rate);
            std::fs::remove_dir_all(&dir)?;
        }
    }
    println!("### {sets} sequential durable sets, {rounds} round(s), WAL + synchronous=FULL");
    println!();
    println!("| way | sets/s (median, range) | us per set | / raw kv table | / raw Deno layout |");
    println!("|---|---:|---:|---:|---:|");
    let floor = |way: Way| rates.get(&way).map(|r| median(r)).unwrap_or(f64::NAN);
    let (table, layout) = (floor(Way::RawKvTable), floor(Way::RawDenoLayout));
    for (way, values) in &rates {
        let mid = median(values);
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(0.0, f64::max);
        println!(
            "| {} | {mid:.0} ({low:.0}-{high:.0}) | {:.1} | {:.2} | {:.2} |",
            way.name(),
            1e6 / mid,
            mid / table,
            mid / layout
        );
    }
    println!();
    println!("### Pages each commit writes ({ACCOUNT_SETS} sets, counted in the -wal file)");
    println!();
    println!("| way | frames per commit | by B-tree | log bytes per commit |");
    println!("|---|---:|---|---:|");
    for way in [Way::RawKvTable, Way::RawDenoLayout, Way::KvSqliteWorker] {
        let dir = tempdir()?;
        let account = account_pages(way, &dir)?;
        std::fs::remove_dir_all(&dir)?;
        let name = match way {
            Way::KvSqliteWorker => "open-deno-kv-sqlite (any caller)",
            other => other.name(),
        };
        println!("| {name} | {} |", account.row());
    }
    Ok(())
}

fn tempdir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-commits-{}-{}",
        std::process::id(),
        next_dir_number()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A name part unique within this process.
fn next_dir_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The seconds `keys.len()` sequential sets take `way`, on a fresh file in `dir`.
fn time_sets(way: Way, dir: &Path, keys: &Arc<KeyTable>) -> Result<f64> {
    let path = dir.join("kv.sqlite3");
    match way {
        Way::RawKvTable => {
            let raw = RawSqlite::create(&path, Durability::Full)?;
            Ok(raw.sets(keys)?.elapsed.as_secs_f64())
        }
        Way::RawDenoLayout => {
            let layout = DenoLayout::create(&path)?;
            let mut chain = Chain::start(keys.len());
            for (i, key) in keys.iter().enumerate() {
                layout.set(key, i)?;
                chain.tick();
            }
            Ok(chain.finish().elapsed.as_secs_f64())
        }
        Way::KvSqliteWorker | Way::KvSqliteCurrent => {
            let kv = open_kv_sqlite(&path)?;
            let runtime = runtime(way == Way::KvSqliteWorker)?;
            let sets = w1_sequential_sets(kv.clone(), keys.clone(), bench_prefix_end()?);
            let outcome = if way == Way::KvSqliteWorker {
                runtime.block_on(runtime.spawn(sets))??
            } else {
                runtime.block_on(sets)?
            };
            runtime.block_on(kv.close())?;
            Ok(outcome.measured.elapsed.as_secs_f64())
        }
    }
}

fn open_kv_sqlite(path: &Path) -> Result<Kv> {
    let options = SqliteOptions {
        durability: open_deno_kv_sqlite::Durability::Full,
        ..Default::default()
    };
    Ok(Arc::new(SqliteBackend::open_with(path, options)?))
}

/// Deno's layout written with prepared statements and nothing else (see the module docs).
struct DenoLayout {
    conn: Connection,
}

impl DenoLayout {
    /// Lets open-deno-kv-sqlite create the file (Deno's schema), then opens it raw.
    fn create(path: &Path) -> Result<Self> {
        let kv = open_kv_sqlite(path)?;
        runtime(false)?.block_on(kv.close())?;
        let conn = Connection::open(path)?;
        conn.execute_batch("pragma journal_mode = wal; pragma synchronous = full;")?;
        Ok(DenoLayout { conn })
    }

    /// One set in its own transaction: the version bump and the row.
    fn set(&self, key: &[u8], i: usize) -> Result<()> {
        self.conn.execute_batch("begin immediate")?;
        let version: i64 = self
            .conn
            .prepare_cached(
                "update data_version set version = version + 1 where k = 0 returning version",
            )?
            .query_row([], |row| row.get(0))?;
        self.conn
            .prepare_cached(
                "insert or replace into kv (k, v, v_encoding, version, seq, expiration_ms)
                 values (?1, ?2, 1, ?3, 0, -1)",
            )?
            .execute(params![key, value_bytes(i), version])?;
        self.conn.execute_batch("commit")?;
        Ok(())
    }
}

/// What the log held after [`ACCOUNT_SETS`] sets.
struct PageAccount {
    commits: usize,
    frames: usize,
    page_size: usize,
    by_tree: BTreeMap<String, usize>,
}

impl PageAccount {
    fn row(&self) -> String {
        let per = |n: usize| n as f64 / self.commits.max(1) as f64;
        let trees: Vec<String> = self
            .by_tree
            .iter()
            .map(|(tree, n)| format!("{tree} {:.2}", per(*n)))
            .collect();
        format!(
            "{:.2} | {} | {:.0}",
            per(self.frames),
            trees.join(", "),
            per(self.frames * (self.page_size + FRAME_HEADER))
        )
    }
}

/// Makes [`ACCOUNT_SETS`] sets `way` on a file in `dir` whose log was just emptied, and counts
/// the frames the log then holds, by B-tree.
fn account_pages(way: Way, dir: &Path) -> Result<PageAccount> {
    let path = dir.join("kv.sqlite3");
    let keys = KeyTable::bench(ACCOUNT_SETS * 2)?;
    let first = KeyTable::bench(ACCOUNT_SETS)?;
    let rest: Vec<&[u8]> = keys.iter().skip(ACCOUNT_SETS).collect();
    let truncate = |path: &Path| -> Result<()> {
        let conn = Connection::open(path)?;
        conn.query_row("pragma wal_checkpoint(truncate)", [], |_| Ok(()))?;
        Ok(())
    };
    // The first half fills the tables a little (so a set updates a page rather than creating
    // the first one), the second is counted; the file stays open meanwhile, since closing the
    // last connection checkpoints the log away.
    let account = match way {
        Way::RawKvTable => {
            let raw = RawSqlite::create(&path, Durability::Full)?;
            raw.sets(&first)?;
            truncate(&path)?;
            let mut counted = KeyTable::default();
            rest.iter().for_each(|key| counted.push(key));
            raw.sets(&counted)?;
            read_log(&path)?
        }
        Way::RawDenoLayout => {
            let layout = DenoLayout::create(&path)?;
            for i in 0..ACCOUNT_SETS {
                layout.set(first.get(i), i)?;
            }
            truncate(&path)?;
            for (i, key) in rest.iter().enumerate() {
                layout.set(key, i)?;
            }
            read_log(&path)?
        }
        Way::KvSqliteWorker | Way::KvSqliteCurrent => {
            let kv = open_kv_sqlite(&path)?;
            let runtime = runtime(false)?;
            let end = bench_prefix_end()?;
            runtime.block_on(w1_sequential_sets(kv.clone(), Arc::new(first), end.clone()))?;
            truncate(&path)?;
            let mut counted = KeyTable::default();
            rest.iter().for_each(|key| counted.push(key));
            runtime.block_on(w1_sequential_sets(kv.clone(), Arc::new(counted), end))?;
            let account = read_log(&path);
            runtime.block_on(kv.close())?;
            account?
        }
    };
    if account.commits != ACCOUNT_SETS {
        return Err(format!(
            "{}: the log holds {} commits, not {ACCOUNT_SETS} (a checkpoint emptied it?)",
            way.name(),
            account.commits
        )
        .into());
    }
    Ok(account)
}

/// Reads the `-wal` file beside `path`: its valid frames (salts matching the header), how many
/// of them end a commit, and which B-tree each frame's page belongs to now.
fn read_log(path: &Path) -> Result<PageAccount> {
    let mut wal_path = path.as_os_str().to_owned();
    wal_path.push("-wal");
    let log = std::fs::read(&wal_path)?;
    let be32 = |at: usize| -> Result<u32> {
        let bytes = log.get(at..at + 4).ok_or("the log ends inside a header")?;
        Ok(u32::from_be_bytes(bytes.try_into()?))
    };
    let page_size = usize::try_from(be32(8)?)?;
    let salts = (be32(16)?, be32(20)?);
    let conn = Connection::open(path)?;
    let mut tree_of: BTreeMap<u32, String> = BTreeMap::new();
    {
        let mut pages = conn.prepare("select name, pageno from dbstat")?;
        let rows = pages.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, u32>(1)?))
        })?;
        for row in rows {
            let (name, page) = row?;
            tree_of.insert(page, name);
        }
    }
    let mut account = PageAccount {
        commits: 0,
        frames: 0,
        page_size,
        by_tree: BTreeMap::new(),
    };
    let mut at = WAL_HEADER;
    while at + FRAME_HEADER + page_size <= log.len() {
        if (be32(at + 8)?, be32(at + 12)?) != salts {
            break;
        }
        let page = be32(at)?;
        let tree = tree_of
            .get(&page)
            .cloned()
            .unwrap_or_else(|| "free list".to_owned());
        *account.by_tree.entry(tree).or_default() += 1;
        account.frames += 1;
        if be32(at + 4)? != 0 {
            account.commits += 1;
        }
        at += FRAME_HEADER + page_size;
    }
    Ok(account)
}

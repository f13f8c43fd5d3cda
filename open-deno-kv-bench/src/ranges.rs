//! `open-deno-kv-bench diagnose-ranges`: what deleting and counting a whole prefix costs with the
//! operations beyond Deno KV, against what a Deno KV program must do without them.
//!
//! For each engine (memory, sqlite, redb; durable ones with full durability), on a fresh store
//! holding `entries` entries under one prefix (100-byte values) and as many under another:
//!
//! - **range delete**: one atomic write holding one `DeleteRange` of the prefix;
//! - **list and delete**: what a Deno program does, and what `kv` could only do before: list the
//!   prefix 1,000 entries at a time (Deno's most per read) and delete each page in one atomic
//!   write of 1,000 deletes (Deno's most mutations), until the list comes back empty;
//! - **count**: `count_range` of the prefix;
//! - **list to count**: listing the prefix page by page and counting what comes back.
//!
//! Each is timed on its own fresh store, the ways alternating in every round; medians and ranges
//! over the rounds are printed as a Markdown table, with the ratio of the naive way to the range
//! operation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use open_deno_kv_bench_harness::child::runtime;
use open_deno_kv_memory::MemoryBackend;
use open_deno_kv_model::{
    AtomicWrite, Backend, KeyRange, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_redb::{RedbBackend, RedbOptions};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};

use crate::data::Result;
use crate::stats::median;

/// Entries per page read and per write: Deno's limits.
const PAGE: usize = 1000;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Engine {
    Memory,
    Sqlite,
    Redb,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Way {
    RangeDelete,
    ListAndDelete,
    Count,
    ListToCount,
}

impl Way {
    const ALL: [Way; 4] = [
        Way::RangeDelete,
        Way::ListAndDelete,
        Way::Count,
        Way::ListToCount,
    ];
}

/// Runs the diagnostic (see the module docs).
pub fn run(entries: usize, rounds: usize) -> Result<()> {
    let runtime = runtime(true)?;
    let mut seconds: BTreeMap<(Engine, Way), Vec<f64>> = BTreeMap::new();
    for round in 1..=rounds {
        for engine in [Engine::Memory, Engine::Sqlite, Engine::Redb] {
            let order = Way::ALL.iter().cycle().skip(round - 1).take(Way::ALL.len());
            for &way in order {
                let dir = scratch_dir()?;
                let kv = open(engine, &dir)?;
                let elapsed =
                    runtime.block_on(runtime.spawn(time_way(kv.clone(), way, entries)))??;
                runtime.block_on(kv.close())?;
                drop(kv);
                std::fs::remove_dir_all(&dir)?;
                eprintln!(
                    "[round {round}/{rounds}] {:<7} {:<16} {:>10.1} ms",
                    engine_name(engine),
                    way_name(way),
                    elapsed * 1000.0
                );
                seconds.entry((engine, way)).or_default().push(elapsed);
            }
        }
    }
    println!("### {entries} entries under the prefix, {rounds} round(s), medians (range)");
    println!();
    println!(
        "| engine | range delete ms | list and delete ms | ratio | count ms | list to count ms | ratio |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for engine in [Engine::Memory, Engine::Sqlite, Engine::Redb] {
        let cell = |way: Way| {
            let values = seconds.get(&(engine, way)).cloned().unwrap_or_default();
            let low = values.iter().copied().fold(f64::INFINITY, f64::min);
            let high = values.iter().copied().fold(0.0, f64::max);
            let mid = median(&values);
            (
                mid,
                format!("{:.1} ({:.1}-{:.1})", mid * 1e3, low * 1e3, high * 1e3),
            )
        };
        let (delete, delete_cell) = cell(Way::RangeDelete);
        let (naive_delete, naive_delete_cell) = cell(Way::ListAndDelete);
        let (count, count_cell) = cell(Way::Count);
        let (naive_count, naive_count_cell) = cell(Way::ListToCount);
        println!(
            "| {} | {delete_cell} | {naive_delete_cell} | {:.1}x | {count_cell} | {naive_count_cell} | {:.1}x |",
            engine_name(engine),
            naive_delete / delete,
            naive_count / count,
        );
    }
    Ok(())
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Memory => "memory",
        Engine::Sqlite => "sqlite",
        Engine::Redb => "redb",
    }
}

fn way_name(way: Way) -> &'static str {
    match way {
        Way::RangeDelete => "range delete",
        Way::ListAndDelete => "list and delete",
        Way::Count => "count",
        Way::ListToCount => "list to count",
    }
}

fn open(engine: Engine, dir: &Path) -> Result<Arc<dyn Backend>> {
    Ok(match engine {
        Engine::Memory => Arc::new(MemoryBackend::new()),
        Engine::Sqlite => Arc::new(SqliteBackend::open_with(
            dir.join("kv.sqlite3"),
            SqliteOptions::default(),
        )?),
        Engine::Redb => Arc::new(RedbBackend::open_with(
            dir.join("kv.redb"),
            RedbOptions::default(),
        )?),
    })
}

/// Fills the store, then times `way` (the fill is not timed) and checks its result.
async fn time_way(kv: Arc<dyn Backend>, way: Way, entries: usize) -> Result<f64> {
    for name in ["doomed", "kept"] {
        for first in (0..entries).step_by(PAGE) {
            let mutations = (first..(first + PAGE).min(entries))
                .map(|i| {
                    let key = encode_key(&key![name, u64::try_from(i)?])?;
                    Ok(Mutation::set(key, KvValue::Bytes(vec![7; 100].into())))
                })
                .collect::<Result<Vec<_>>>()?;
            write(&kv, mutations).await?;
        }
    }
    let prefix = KeyRange::prefix(&key!["doomed"])?;
    let started = Instant::now();
    let found = match way {
        Way::RangeDelete => {
            write(&kv, vec![Mutation::delete_range(prefix.clone())]).await?;
            None
        }
        Way::ListAndDelete => {
            loop {
                let page = list_page(&kv, &prefix.start, &prefix).await?;
                if page.is_empty() {
                    break;
                }
                write(&kv, page.into_iter().map(Mutation::delete).collect()).await?;
            }
            None
        }
        Way::Count => Some(kv.count_range(prefix.clone()).await?.entries as usize),
        Way::ListToCount => {
            let mut counted = 0;
            let mut start = prefix.start.clone();
            loop {
                let page = list_page(&kv, &start, &prefix).await?;
                counted += page.len();
                match page.last() {
                    Some(last) if page.len() == PAGE => {
                        start = last.clone();
                        start.push(0);
                    }
                    _ => break,
                }
            }
            Some(counted)
        }
    };
    let elapsed = started.elapsed().as_secs_f64();
    let left = kv.count_range(prefix).await?.entries as usize;
    let expected_left = if found.is_some() { entries } else { 0 };
    if left != expected_left || found.is_some_and(|n| n != entries) {
        return Err(format!("wrong result: {found:?} counted, {left} left of {entries}").into());
    }
    Ok(elapsed)
}

async fn write(kv: &Arc<dyn Backend>, mutations: Vec<Mutation>) -> Result<()> {
    let write = AtomicWrite {
        mutations,
        ..Default::default()
    };
    match kv.atomic_write(write).await? {
        Some(_) => Ok(()),
        None => Err("a write without checks was not committed".into()),
    }
}

/// The keys of up to [`PAGE`] entries of `range` from `start` on.
async fn list_page(kv: &Arc<dyn Backend>, start: &[u8], range: &KeyRange) -> Result<Vec<Vec<u8>>> {
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: start.to_vec(),
            end: range.end.clone(),
            limit: PAGE as u32,
            reverse: false,
        }],
        ..Default::default()
    };
    let out = kv.snapshot_read(read).await?;
    Ok(out
        .into_iter()
        .flat_map(|r| r.entries)
        .map(|e| e.key.to_vec())
        .collect())
}

fn scratch_dir() -> Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-ranges-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

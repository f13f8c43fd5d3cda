//! `open-deno-kv-bench diagnose-scans`: where a W4 scan's time goes on open-deno-kv-redb,
//! against the raw redb floor.
//!
//! The floor ([`RawRedb::scans`]) copies each key and record out and drops them at once, so the
//! allocator hands the same two blocks back a hundred times per scan. A Deno KV read cannot do
//! that: it answers a page of owned entries, every key and value its own allocation, alive until
//! the caller is done with the page. This diagnostic times four ways on the same data (W4's
//! keys, values, scan starts and warm-up), alternating within every round, the first way rotated
//! from round to round:
//!
//! - **raw floor**: W4's raw redb floor, as the main run measures it;
//! - **raw page**: raw redb doing exactly what a read must return, with nothing else — a page of
//!   owned `KvEntry`s, each record's header decoded, checked after the scan and then dropped
//!   ([`RawScan::OwnedPage`]);
//! - **raw page, shared buffer**: the same page built as open-deno-kv-redb builds it, the keys and
//!   values copied into one buffer and handed out as slices of it
//!   (`open_deno_kv_engine_kit::PageBuilder`, [`RawScan::SharedPage`]);
//! - **kv-redb**: the backend, through `Backend::snapshot_read` from a task on a multi-thread
//!   runtime's worker, as W4 runs it.
//!
//! It prints each way's median scans per second and p50 over the rounds, and the ratios of the
//! rounds' own figures: kv-redb against each raw way, and each page against the floor. Run it
//! again with `GLIBC_TUNABLES=glibc.malloc.tcache_count=1000` to see what glibc's allocator
//! costs a page (BENCHMARKS.md, "W4").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use open_deno_kv_bench_harness::child::{runtime, w4_warmup};
use open_deno_kv_model::{Backend, Consistency};
use open_deno_kv_redb::{RedbBackend, RedbOptions};
use open_deno_kv_sqlite::FileEngine;

use crate::data::{KeyTable, Result, bench_prefix_end, scan_starts};
use crate::raw::{RawRedb, RawScan};
use crate::spec::Durability;
use crate::stats::{Measured, median};
use crate::workloads;

/// Entries per scan, W4's.
const SCAN_LEN: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Way {
    RawFloor,
    RawPage,
    RawShared,
    KvRedb,
}

impl Way {
    const ALL: [Way; 4] = [Way::RawFloor, Way::RawPage, Way::RawShared, Way::KvRedb];

    fn name(self) -> &'static str {
        match self {
            Way::RawFloor => "raw floor (copy, drop)",
            Way::RawPage => "raw page (owned entries)",
            Way::RawShared => "raw page (shared buffer)",
            Way::KvRedb => "open-deno-kv-redb",
        }
    }
}

/// One round's figures of one way: scans per second and p50 in microseconds.
#[derive(Clone, Copy)]
struct Figures {
    per_sec: f64,
    p50_us: f64,
}

impl From<&Measured> for Figures {
    fn from(measured: &Measured) -> Self {
        Figures {
            per_sec: measured.ops_per_sec(),
            p50_us: measured.p50_p99_us().0,
        }
    }
}

/// Runs the diagnostic (see the module docs): `keys` preloaded entries, `scans` timed scans per
/// way and round.
pub fn run(keys: usize, scans: usize, rounds: usize) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("open-deno-kv-bench-scans-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = measure(&dir, keys, scans, rounds);
    let removed = std::fs::remove_dir_all(&dir);
    outcome?;
    removed?;
    Ok(())
}

/// [`run`] in `dir`.
fn measure(dir: &Path, keys: usize, scans: usize, rounds: usize) -> Result<()> {
    let scan_len = SCAN_LEN.min(keys);
    let table = Arc::new(KeyTable::bench(keys)?);
    let starts = Arc::new(scan_starts(scans, keys, scan_len));
    let end = bench_prefix_end()?;
    let warmup = w4_warmup(scans);

    let raw = RawRedb::create(&dir.join("raw.redb"), Durability::Full)?;
    raw.preload(&table)?;
    raw.warm_up(&table)?;

    let runtime = runtime(true)?;
    let path: PathBuf = dir.join("kv.redb");
    let kv: Arc<dyn Backend> = Arc::new(RedbBackend::open_with(&path, RedbOptions::default())?);
    runtime.block_on(workloads::preload(&kv, &table))?;
    runtime.block_on(workloads::warm_up(&kv, &table, &end))?;

    let mut figures: BTreeMap<Way, Vec<Figures>> = BTreeMap::new();
    for round in 1..=rounds {
        let order = Way::ALL.iter().cycle().skip(round - 1).take(Way::ALL.len());
        for &way in order {
            let measured = match way {
                Way::RawFloor => raw.scans(&table, &starts, scan_len, &end, warmup)?,
                Way::RawPage | Way::RawShared => {
                    let how = if way == Way::RawPage {
                        RawScan::OwnedPage
                    } else {
                        RawScan::SharedPage
                    };
                    raw.scans_answering(how, &table, &starts, scan_len, &end, warmup)?
                }
                Way::KvRedb => {
                    let task = workloads::w4_scans(
                        kv.clone(),
                        table.clone(),
                        starts.clone(),
                        scan_len,
                        end.clone(),
                        warmup,
                        Consistency::Strong,
                    );
                    runtime.block_on(runtime.spawn(task))??.measured
                }
            };
            let got = Figures::from(&measured);
            eprintln!(
                "[round {round}/{rounds}] {:<26} {:>9.0} scans/s  p50 {:>7.2} us",
                way.name(),
                got.per_sec,
                got.p50_us
            );
            figures.entry(way).or_default().push(got);
        }
    }
    runtime.block_on(kv.close())?;
    print_report(&figures, keys, scans, rounds);
    Ok(())
}

/// The median of `f` over the rounds of `way`.
fn median_of(figures: &BTreeMap<Way, Vec<Figures>>, way: Way, f: fn(&Figures) -> f64) -> f64 {
    let values: Vec<f64> = figures.get(&way).into_iter().flatten().map(f).collect();
    median(&values)
}

/// The median and range over the rounds of `top`'s figure divided by `bottom`'s, by `f`.
fn ratio(
    figures: &BTreeMap<Way, Vec<Figures>>,
    top: Way,
    bottom: Way,
    f: fn(&Figures) -> f64,
) -> String {
    let pairs = figures.get(&top).into_iter().flatten();
    let ratios: Vec<f64> = pairs
        .zip(figures.get(&bottom).into_iter().flatten())
        .map(|(t, b)| f(t) / f(b))
        .collect();
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2}x ({low:.2}-{high:.2})", median(&ratios))
}

fn print_report(figures: &BTreeMap<Way, Vec<Figures>>, keys: usize, scans: usize, rounds: usize) {
    println!(
        "\n{scans} scans of {SCAN_LEN} over {keys} keys per way and round, {rounds} rounds \
         (medians; ratios are medians of the rounds' own ratios, range in brackets)\n"
    );
    println!("| way | scans/s | p50 us |");
    println!("|---|---:|---:|");
    for way in Way::ALL {
        println!(
            "| {} | {:.0} | {:.2} |",
            way.name(),
            median_of(figures, way, |f| f.per_sec),
            median_of(figures, way, |f| f.p50_us)
        );
    }
    let per_sec = |f: &Figures| f.per_sec;
    // Time per scan, inverted, so every ratio reads "x the floor's speed".
    let p50_speed = |f: &Figures| 1.0 / f.p50_us;
    println!("\n| ratio | by scans/s | by p50 |");
    println!("|---|---:|---:|");
    for (top, bottom) in [
        (Way::KvRedb, Way::RawFloor),
        (Way::KvRedb, Way::RawPage),
        (Way::KvRedb, Way::RawShared),
        (Way::RawPage, Way::RawFloor),
        (Way::RawShared, Way::RawFloor),
    ] {
        println!(
            "| {} / {} | {} | {} |",
            top.name(),
            bottom.name(),
            ratio(figures, top, bottom, per_sec),
            ratio(figures, top, bottom, p50_speed)
        );
    }
}

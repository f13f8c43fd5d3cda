//! `open-deno-kv-bench diagnose-shipping`: what continuous backup costs the writes it ships
//! (issue 30's target: W2 on SQLite with a shipper running within 1.1x of W2 without one, in one
//! run).
//!
//! W2 as the main bench runs it (`sets` single-key sets of [`KeyTable::bench`]'s keys and the
//! bench's 100-byte values over 64 tasks of a multi-thread runtime, each set waiting for its
//! commit, `synchronous=FULL`), on a fresh SQLite file, twice per round: *off*, the store as it
//! is without continuous backup (change log off, nothing shipped), and *on*, with an
//! open-deno-kv-bucket [`Shipper`] running beside the writers in the same process at the
//! default settings (it switches the change log on, writes a snapshot, then closes a log segment
//! at most every second) into a local directory (`file://`). The two alternate which goes
//! first from round to round. After each *on* run the shipper is stopped and the bucket checked
//! (untimed): one more pass must leave it holding the store's last commit.
//!
//! Medians and ranges (min-max) over the rounds are printed as a Markdown table, with each
//! round's on/off ratio (two runs back to back); the median ratio is held against the target.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_bench_harness::child::runtime;
use open_deno_kv_bench_harness::spec::Mode;
use open_deno_kv_bucket::{Shipper, ShipperConfig, Target};
use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::Clock;
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};

use crate::data::{KeyTable, Result, bench_prefix_end};
use crate::stats::{median, millis_summary as millis, span};
use crate::workloads::{Kv, w2_concurrent_sets};

/// The target of issue 30: W2 with a shipper takes at most this many times W2 without one.
const TARGET: f64 = 1.1;
/// W2's tasks, as the main bench.
const TASKS: usize = 64;

/// The usage line.
pub const USAGE: &str =
    "usage: open-deno-kv-bench diagnose-shipping [--sets N] [--rounds N] [--log-baseline]";

/// Runs the diagnostic (see the module docs): `sets` per run, `rounds` rounds; with
/// `log_baseline`, the runs without a shipper have the change log on.
pub fn run(sets: usize, rounds: usize, log_baseline: bool) -> Result<()> {
    let runtime = runtime(true)?;
    let mut off = Vec::new();
    let mut on = Vec::new();
    for round in 1..=rounds {
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for shipping in order {
            let seconds = runtime.block_on(w2(sets, shipping, log_baseline))?;
            eprintln!(
                "[round {round}/{rounds}] shipping {:<3} {:>9.1} ms ({:.0} sets/s)",
                if shipping { "on" } else { "off" },
                seconds * 1e3,
                sets as f64 / seconds
            );
            if shipping {
                on.push(seconds);
            } else {
                off.push(seconds);
            }
        }
    }
    let ratios: Vec<f64> = on.iter().zip(&off).map(|(on, off)| on / off).collect();
    let ratio = median(&ratios);
    let baseline = if log_baseline {
        "change log on, no shipper"
    } else {
        "continuous backup off"
    };
    println!(
        "### W2 on SQLite, {baseline} (off) and a shipper running (on): {sets} durable sets over {TASKS} tasks, {rounds} round(s), medians (range); on/off per round"
    );
    println!();
    println!("| shipping off ms | shipping on ms | on/off | on/off <= {TARGET}x |");
    println!("|---:|---:|---:|---|");
    println!(
        "| {} | {} | {ratio:.2}x ({:.2}-{:.2}) | {} |",
        millis(&off),
        millis(&on),
        span(&ratios).0,
        span(&ratios).1,
        if ratio <= TARGET { "MET" } else { "MISSED" }
    );
    Ok(())
}

/// One W2 run on a fresh SQLite file, with or without a shipper; its wall time in seconds.
async fn w2(sets: usize, shipping: bool, log_baseline: bool) -> Result<f64> {
    let dir = scratch_dir()?;
    let bucket = dir.join("bucket");
    std::fs::create_dir_all(&bucket)?;
    let kv: Kv = Arc::new(SqliteBackend::open_with(
        dir.join("kv.sqlite3"),
        SqliteOptions {
            durability: open_deno_kv_sqlite::Durability::Full,
            ..Default::default()
        },
    )?);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let target = Target::parse(&format!("file://{}", bucket.display()))?;
    let shipper = Arc::new(Shipper::new(kv.clone(), target, ShipperConfig::new(clock)));
    if log_baseline && !shipping {
        // The retention the shipper itself sets.
        kv.configure_change_log(Some(Duration::from_secs(86_400)))
            .await?;
    }
    let running = if shipping {
        let running = shipper.clone();
        let task = tokio::spawn(async move { running.run().await });
        // The first snapshot (of an empty store) and the log switched on: the writes start
        // once the shipper tails the log, as they would on a server that has shipped a while.
        let mut status = shipper.status();
        while status.borrow_and_update().shipped.is_none() {
            if tokio::time::timeout(Duration::from_secs(60), status.changed())
                .await
                .is_err()
            {
                return Err("the shipper wrote no first snapshot within 60 s".into());
            }
        }
        Some(task)
    } else {
        None
    };
    let keys = Arc::new(KeyTable::bench(sets)?);
    let end = bench_prefix_end()?;
    let outcome = tokio::spawn(w2_concurrent_sets(
        kv.clone(),
        keys,
        end,
        TASKS,
        Mode::Multi,
    ))
    .await??;
    if let Some(task) = running {
        task.abort();
        let _ = task.await;
        // Untimed: the bucket takes the rest and then holds the store's last commit.
        let report = shipper.ship_until_caught_up().await?;
        let last = kv
            .change_log_status()
            .await?
            .last
            .map(|mark| mark.versionstamp);
        if report.shipped != last || last.is_none() {
            return Err(format!(
                "the bucket holds {:?}, the store's last commit is {last:?}",
                report.shipped
            )
            .into());
        }
    }
    drop(shipper);
    kv.close().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(outcome.measured.elapsed.as_secs_f64())
}

fn scratch_dir() -> Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-shipping-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

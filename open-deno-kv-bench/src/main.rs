//! # open-deno-kv-bench — benchmarks to pick a Deno KV backend by
//!
//! Runs the same workloads on open-deno-kv-memory, open-deno-kv-sqlite and open-deno-kv-redb through the `Backend` trait, on
//! fresh databases on disk, next to raw rusqlite and raw redb doing the same sets, gets and scans
//! (the floors), and reports operations per second, p50/p99 latency, each figure's ratio to its
//! floor, the project's performance targets (MET / MISSED) and each backend's peak memory.
//! open-deno-kv-postgres runs when asked for (`--backends postgres,postgres-replica`), on a throwaway
//! PostgreSQL cluster the run starts (with a streaming replica for `postgres-replica`, whose W3
//! and W4 are eventual reads) or on the server of `--postgres-url`.
//!
//! ```text
//! cargo run --release -p open-deno-kv-bench -- [--scale F] [--workloads W1,..] [--backends memory,..]
//!     [--durability full|process] [--rounds N] [--scaling] [--no-floors] [--dir PATH] [--json]
//!     [--postgres-url URL [--postgres-replica-url URL]]
//! ```
//!
//! Workloads (at `--scale 1`):
//!
//! | id | what |
//! |---|---|
//! | W1 | 20,000 sequential single-key sets (`["bench", i]`, 100-byte `Bytes` values) |
//! | W2 | the same sets spread over 64 concurrent tasks |
//! | W3 | 100,000 random point gets over 100,000 preloaded keys (and, for memory, W3-1core: the same on a current-thread runtime) |
//! | W4 | 2,000 scans of 100 consecutive entries |
//! | W5 | 8 tasks x 500 check-and-set increments of one counter (final value must be exactly 4,000) |
//! | W6 | 20,000 u64 sums over 16 hot keys from 16 tasks (every total checked) |
//! | W7 | 5,000 messages enqueued, then consumed with dequeue + finish(true) (each exactly once) |
//!
//! Every workload verifies its result and the run fails loudly (exit 1) if a check does not hold.
//! Each target's workloads run in child processes of this binary (`open-deno-kv-bench child ...`), and
//! denokv's in the anchor's binary (`open-deno-kv-bench-anchor child ...`, built from `open-deno-kv-bench/anchor`);
//! see [`sysinfo`] for how peak memory is measured.

mod anchor;
mod args;
mod change_log;
mod child;
mod commits;
mod diag;
mod parent;
mod ranges;
mod raw;
mod scans;
mod shipping;

// The engine-free half — workloads, data, statistics, the child's protocol — is shared with the
// denokv anchor's binary (open-deno-kv-bench/anchor).
use open_deno_kv_bench_harness::{data, spec, stats, sysinfo, workloads};

use args::Command;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first().map(|(a, rest)| (a.as_str(), rest)) {
        Some(("child", rest)) => std::process::exit(child_main(rest)),
        Some(("diagnose-memory", rest)) => std::process::exit(diagnose_main(rest)),
        Some(("diagnose-commits", rest)) => std::process::exit(diagnose_commits_main(rest)),
        Some(("diagnose-ranges", rest)) => std::process::exit(diagnose_ranges_main(rest)),
        Some(("diagnose-scans", rest)) => std::process::exit(diagnose_scans_main(rest)),
        Some(("diagnose-change-log", rest)) => std::process::exit(diagnose_change_log_main(rest)),
        Some(("diagnose-shipping", rest)) => std::process::exit(diagnose_shipping_main(rest)),
        _ => {}
    }
    let code = match args::parse(&args) {
        Ok(Command::Help) => {
            println!("{}", args::USAGE);
            0
        }
        Ok(Command::Run(options)) => match parent::run(&options) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("open-deno-kv-bench: {err}");
                1
            }
        },
        Err(message) => {
            eprintln!("open-deno-kv-bench: {message}");
            2
        }
    };
    std::process::exit(code);
}

/// `diagnose-memory [--keys N] [--gets N]`: the cost of a point get in kv-memory's data
/// structure and in alternatives (see [`diag`]).
fn diagnose_main(args: &[String]) -> i32 {
    let usage = "usage: open-deno-kv-bench diagnose-memory [--keys N] [--gets N]";
    match counts(args, [("--keys", 100_000), ("--gets", 1_000_000)], usage) {
        Ok([keys, gets]) => report("diagnose-memory", diag::memory(keys, gets)),
        Err(code) => code,
    }
}

/// `diagnose-commits [--sets N] [--rounds N]`: what one durable set costs kv-sqlite against the
/// raw floors, and the pages each commit writes (see [`commits`]).
fn diagnose_commits_main(args: &[String]) -> i32 {
    let usage = "usage: open-deno-kv-bench diagnose-commits [--sets N] [--rounds N]";
    match counts(args, [("--sets", 5_000), ("--rounds", 3)], usage) {
        Ok([sets, rounds]) => report("diagnose-commits", commits::run(sets, rounds)),
        Err(code) => code,
    }
}

/// `diagnose-ranges [--entries N] [--rounds N]`: a prefix deleted and counted with the range
/// operations against listing it page by page (see [`ranges`]).
fn diagnose_ranges_main(args: &[String]) -> i32 {
    let usage = "usage: open-deno-kv-bench diagnose-ranges [--entries N] [--rounds N]";
    match counts(args, [("--entries", 100_000), ("--rounds", 3)], usage) {
        Ok([entries, rounds]) => report("diagnose-ranges", ranges::run(entries, rounds)),
        Err(code) => code,
    }
}

/// `diagnose-scans [--keys N] [--scans N] [--rounds N]`: a W4 scan on open-deno-kv-redb against
/// the raw redb floor and against raw redb answering a page of owned entries (see [`scans`]).
fn diagnose_scans_main(args: &[String]) -> i32 {
    let usage = "usage: open-deno-kv-bench diagnose-scans [--keys N] [--scans N] [--rounds N]";
    let flags = [("--keys", 100_000), ("--scans", 2_000), ("--rounds", 5)];
    match counts(args, flags, usage) {
        Ok([keys, scans, rounds]) => report("diagnose-scans", scans::run(keys, scans, rounds)),
        Err(code) => code,
    }
}

/// `diagnose-change-log [--sets N] [--rounds N] [--engines sqlite,redb,postgres]
/// [--postgres-url URL]`: W1 with the change log off and on, per engine (see [`change_log`]).
fn diagnose_change_log_main(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", change_log::USAGE);
        return 0;
    }
    match change_log::parse(args) {
        Ok(options) => report("diagnose-change-log", change_log::run(&options)),
        Err(message) => {
            eprintln!("open-deno-kv-bench diagnose-change-log: {message}");
            eprintln!("{}", change_log::USAGE);
            2
        }
    }
}

/// `diagnose-shipping [--sets N] [--rounds N]`: W2 on SQLite with continuous backup off and on
/// (see [`shipping`]).
fn diagnose_shipping_main(args: &[String]) -> i32 {
    // `--log-baseline`: the runs without a shipper keep the change log on, so the ratio is what
    // the shipper adds beyond the log it reads.
    let log_baseline = args.iter().any(|arg| arg == "--log-baseline");
    let rest: Vec<String> = args
        .iter()
        .filter(|arg| *arg != "--log-baseline")
        .cloned()
        .collect();
    match counts(
        &rest,
        [("--sets", 20_000), ("--rounds", 5)],
        shipping::USAGE,
    ) {
        Ok([sets, rounds]) => report(
            "diagnose-shipping",
            shipping::run(sets, rounds, log_baseline),
        ),
        Err(code) => code,
    }
}

/// A diagnostic's flags, each a positive count with its default; prints `usage` and gives exit
/// code 2 for anything else.
fn counts<const N: usize>(
    args: &[String],
    flags: [(&str, usize); N],
    usage: &str,
) -> Result<[usize; N], i32> {
    let mut values = flags.map(|(_, default)| default);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0);
        let slot = flags.iter().position(|(name, _)| name == flag);
        match (slot.and_then(|i| values.get_mut(i)), value) {
            (Some(slot), Some(n)) => *slot = n,
            _ => {
                eprintln!("{usage}");
                return Err(2);
            }
        }
    }
    Ok(values)
}

/// A diagnostic's exit code: 0, or 1 with its error on stderr.
fn report(name: &str, outcome: data::Result<()>) -> i32 {
    match outcome {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("open-deno-kv-bench {name}: {err}");
            1
        }
    }
}

/// The hidden `child` subcommand: run one target's workloads, print one JSON line.
fn child_main(args: &[String]) -> i32 {
    open_deno_kv_bench_harness::child::main(args, child::run)
}

//! `open-deno-kv-bench diagnose-change-log`: what keeping the change log costs a durable write
//! (issue 18's target: W1 with the log on within 1.3x of W1 with it off, in one run).
//!
//! For each engine (sqlite, redb, postgres), W1 exactly as the main bench runs it: `sets`
//! sequential single-key sets of [`KeyTable::bench`]'s keys and the bench's 100-byte values, one
//! set per atomic write, each waiting for its commit, with full durability (SQLite
//! `synchronous=FULL`, redb `Immediate`, PostgreSQL with `fsync` on), on a fresh store, spawned
//! on a multi-thread runtime's worker and checked afterwards (untimed) by reading every key back.
//! It runs once with the log off and once with it on (`configure_change_log(Some(7 days))` before
//! the timed part), the two alternating which goes first from round to round, each on its own
//! fresh store. After every run with the log on, the log must hold exactly `sets` records
//! (`change_log_status().records`); anything else fails the run. After every run with it off,
//! it must hold none.
//!
//! An engine whose `configure_change_log` answers [`KvError::Unsupported`] is reported as "log not
//! offered" and not timed. The log's size on disk per commit is the difference between the
//! store's files after the two runs (closed), divided by `sets`; for PostgreSQL, whose store is a
//! schema on a server, it is not measured.
//!
//! PostgreSQL runs on a throwaway cluster (fsync on) started for the run, unless `--postgres-url`
//! names a server; each store is then a schema `store_<hash>` of its own, left behind.
//!
//! Medians and ranges (min-max) over the rounds are printed as a Markdown table: the runs' wall
//! times and each run's median set latency (which a stall of the machine, another process's
//! writes, moves less than the wall time), and for both the on/off ratio of each round (two runs
//! made back to back), whose median is held against the 1.3x target.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_bench_harness::child::runtime;
use open_deno_kv_model::KvError;
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster, schema_for_path};
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};
use open_deno_kv_redb::{RedbBackend, RedbOptions};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
use tokio::runtime::Runtime;

use crate::data::{KeyTable, Result, bench_prefix_end};
use crate::stats::{median, millis_summary as millis, span};
use crate::workloads::{Kv, w1_sequential_sets};

/// The retention the runs with the log on switch it on with: long enough that nothing is pruned.
const RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The target of issue 18: W1 with the log on takes at most this many times W1 without it.
const TARGET: f64 = 1.3;

/// The usage line.
pub const USAGE: &str = "usage: open-deno-kv-bench diagnose-change-log [--sets N] [--rounds N] \
     [--engines sqlite,redb,postgres] [--postgres-url URL]";

/// The engines the diagnostic can run, in the order it reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Engine {
    Sqlite,
    Redb,
    Postgres,
}

impl Engine {
    const ALL: [Engine; 3] = [Engine::Sqlite, Engine::Redb, Engine::Postgres];

    fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Redb => "redb",
            Engine::Postgres => "postgres",
        }
    }

    fn parse(text: &str) -> Option<Engine> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name().eq_ignore_ascii_case(text.trim()))
    }
}

/// The diagnostic's command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Sets per W1 run.
    pub sets: usize,
    /// Rounds; each runs every engine with the log off and on.
    pub rounds: usize,
    /// The engines to measure, in [`Engine::ALL`] order.
    pub engines: Vec<Engine>,
    /// The PostgreSQL server to use instead of a throwaway cluster.
    pub postgres_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        // 70 runs of 5,000 durable sets: 3-4 minutes on two cores if a set takes 0.5-1 ms, under
        // two at this machine's 0.15-0.3 ms (SQLite, redb). The machine's other work moves one
        // run by up to 2x; seven pairs give a median ratio that holds still to about 0.1.
        Options {
            sets: 5_000,
            rounds: 7,
            engines: Engine::ALL.to_vec(),
            postgres_url: None,
        }
    }
}

/// Parses the diagnostic's flags (`--flag value` or `--flag=value`).
pub fn parse(args: &[String]) -> std::result::Result<Options, String> {
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let value = inline
            .or_else(|| it.next().cloned())
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let count = || {
            value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag}: a positive number, not {value}"))
        };
        match flag {
            "--sets" => options.sets = count()?,
            "--rounds" => options.rounds = count()?,
            "--engines" => {
                let mut chosen = Vec::new();
                for name in value.split(',').filter(|s| !s.trim().is_empty()) {
                    chosen.push(
                        Engine::parse(name)
                            .ok_or_else(|| format!("--engines: unknown engine {name}"))?,
                    );
                }
                if chosen.is_empty() {
                    return Err("--engines: name at least one".into());
                }
                options.engines = Engine::ALL
                    .into_iter()
                    .filter(|e| chosen.contains(e))
                    .collect();
            }
            "--postgres-url" => options.postgres_url = Some(value),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

/// One W1 run's figures.
struct Run {
    /// Wall time of the timed sets, in seconds.
    seconds: f64,
    /// The median set's latency, in microseconds.
    p50_us: f64,
    /// The store's files after it was closed, in bytes (`None` for PostgreSQL).
    bytes: Option<u64>,
}

/// What one engine measured over the rounds.
#[derive(Default)]
struct Figures {
    off: Vec<Run>,
    on: Vec<Run>,
}

/// Runs the diagnostic (see the module docs).
pub fn run(options: &Options) -> Result<()> {
    let runtime = runtime(true)?;
    let server = PostgresServer::start(options)?;
    let stores = Stores {
        postgres_url: server.url.clone(),
    };
    let sets = options.sets;
    let rounds = options.rounds;

    // Which engines keep a log at all: asked once, on a store of its own.
    let mut offered = BTreeMap::new();
    for &engine in &options.engines {
        let yes = stores.offers_log(&runtime, engine)?;
        if !yes {
            eprintln!(
                "{}: the change log is not offered (Unsupported); not timed",
                engine.name()
            );
        }
        offered.insert(engine, yes);
    }

    let mut figures: BTreeMap<Engine, Figures> = BTreeMap::new();
    for round in 1..=rounds {
        for &engine in &options.engines {
            if !offered[&engine] {
                continue;
            }
            // Odd rounds run the log off first, even rounds on first.
            let order = if round % 2 == 1 {
                [false, true]
            } else {
                [true, false]
            };
            for log in order {
                let run = stores.w1(&runtime, engine, log, sets)?;
                eprintln!(
                    "[round {round}/{rounds}] {:<8} log {:<3} {:>9.1} ms ({:.0} us per set, p50 {:.0} us)",
                    engine.name(),
                    if log { "on" } else { "off" },
                    run.seconds * 1e3,
                    run.seconds * 1e6 / sets as f64,
                    run.p50_us,
                );
                let entry = figures.entry(engine).or_default();
                if log {
                    entry.on.push(run);
                } else {
                    entry.off.push(run);
                }
            }
        }
    }

    println!(
        "### W1 with the change log off and on: {sets} sequential durable sets, {rounds} round(s), medians (range); on/off per round"
    );
    println!();
    println!(
        "| engine | log off ms | log on ms | on/off | p50 set off us | p50 set on us | p50 on/off | log on disk per commit | on/off <= {TARGET}x |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for &engine in &options.engines {
        let Some(f) = figures.get(&engine).filter(|_| offered[&engine]) else {
            println!(
                "| {} | log not offered | | | | | | | not measured |",
                engine.name()
            );
            continue;
        };
        let off: Vec<f64> = f.off.iter().map(|r| r.seconds).collect();
        let on: Vec<f64> = f.on.iter().map(|r| r.seconds).collect();
        // Each round's own ratio, of two runs made back to back: what the machine's other work
        // does to both cancels out better than in a ratio of medians taken apart.
        let (ratio, ratio_cell) = ratios(f, |r| r.seconds);
        let (_, p50_cell) = ratios(f, |r| r.p50_us);
        let per_commit: Vec<f64> =
            f.on.iter()
                .zip(&f.off)
                .filter_map(|(on, off)| Some((on.bytes? as f64 - off.bytes? as f64) / sets as f64))
                .collect();
        let disk = if per_commit.is_empty() {
            "not measured".to_owned()
        } else {
            let (low, high) = span(&per_commit);
            format!("{:.0} B ({:.0}-{:.0})", median(&per_commit), low, high)
        };
        println!(
            "| {} | {} | {} | {ratio_cell} | {} | {} | {p50_cell} | {disk} | {} |",
            engine.name(),
            millis(&off),
            millis(&on),
            micros(&f.off),
            micros(&f.on),
            if ratio <= TARGET { "MET" } else { "MISSED" },
        );
    }
    Ok(())
}

/// The median of the rounds' on/off ratios of `figure`, and "median (min-max)" of them.
fn ratios(figures: &Figures, figure: impl Fn(&Run) -> f64) -> (f64, String) {
    let ratios: Vec<f64> = figures
        .on
        .iter()
        .zip(&figures.off)
        .map(|(on, off)| figure(on) / figure(off))
        .collect();
    let (low, high) = span(&ratios);
    let mid = median(&ratios);
    (mid, format!("{mid:.2}x ({low:.2}-{high:.2})"))
}

/// "median (min-max)" of the runs' median set latencies, in microseconds.
fn micros(runs: &[Run]) -> String {
    let p50: Vec<f64> = runs.iter().map(|r| r.p50_us).collect();
    let (low, high) = span(&p50);
    format!("{:.0} ({:.0}-{:.0})", median(&p50), low, high)
}

/// Opens the engines' stores.
struct Stores {
    postgres_url: Option<String>,
}

impl Stores {
    /// A fresh store of `engine` in `dir`, with full durability (as the main bench's W1).
    async fn open(&self, engine: Engine, dir: &Path) -> Result<Kv> {
        Ok(match engine {
            Engine::Sqlite => Arc::new(SqliteBackend::open_with(
                dir.join("kv.sqlite3"),
                SqliteOptions {
                    durability: open_deno_kv_sqlite::Durability::Full,
                    ..Default::default()
                },
            )?),
            Engine::Redb => Arc::new(RedbBackend::open_with(
                dir.join("kv.redb"),
                RedbOptions {
                    durability: open_deno_kv_redb::Durability::Immediate,
                    ..Default::default()
                },
            )?),
            Engine::Postgres => {
                let url = self
                    .postgres_url
                    .as_deref()
                    .ok_or("postgres needs a server")?;
                let options = PostgresOptions {
                    schema: schema_for_path(dir),
                    ..PostgresOptions::default()
                };
                Arc::new(PostgresBackend::open_with(url, options).await?)
            }
        })
    }

    /// Whether `engine` keeps a change log: `configure_change_log` on a fresh store, `false` if
    /// it answers [`KvError::Unsupported`] (any other error fails the run).
    fn offers_log(&self, runtime: &Runtime, engine: Engine) -> Result<bool> {
        let dir = scratch_dir()?;
        let offered = runtime.block_on(async {
            let kv = self.open(engine, &dir).await?;
            let answer = match kv.configure_change_log(Some(RETENTION)).await {
                Ok(()) => true,
                Err(KvError::Unsupported { .. }) => false,
                Err(err) => return Err(err.into()),
            };
            kv.close().await?;
            Ok::<_, crate::data::BoxError>(answer)
        })?;
        std::fs::remove_dir_all(&dir)?;
        Ok(offered)
    }

    /// One W1 run of `sets` sets on a fresh store, with the log on or off; checks the log's
    /// record count afterwards.
    fn w1(&self, runtime: &Runtime, engine: Engine, log: bool, sets: usize) -> Result<Run> {
        let dir = scratch_dir()?;
        let name = engine.name();
        let measured = runtime.block_on(async {
            let kv = self.open(engine, &dir).await?;
            if log {
                kv.configure_change_log(Some(RETENTION)).await?;
            }
            let before = kv.change_log_status().await?;
            if before.records != 0 || before.retention != log.then_some(RETENTION) {
                return Err(format!(
                    "{name}: a fresh store's log holds {} records, retention {:?}",
                    before.records, before.retention
                )
                .into());
            }
            let keys = Arc::new(KeyTable::bench(sets)?);
            let end = bench_prefix_end()?;
            // As the main bench's multi mode: the workload runs as a task on a worker.
            let outcome = tokio::spawn(w1_sequential_sets(kv.clone(), keys, end)).await??;
            let after = kv.change_log_status().await?;
            let expected = if log { sets as u64 } else { 0 };
            if after.records != expected {
                return Err(format!(
                    "{name}: the log holds {} records after {sets} sets with the log {}; \
                     expected {expected}",
                    after.records,
                    if log { "on" } else { "off" }
                )
                .into());
            }
            kv.close().await?;
            Ok::<_, crate::data::BoxError>(outcome.measured)
        })?;
        let bytes = match engine {
            Engine::Postgres => None,
            Engine::Sqlite | Engine::Redb => Some(dir_bytes(&dir)?),
        };
        std::fs::remove_dir_all(&dir)?;
        Ok(Run {
            seconds: measured.elapsed.as_secs_f64(),
            p50_us: measured.p50_p99_us().0,
            bytes,
        })
    }
}

/// The total size of the files in `dir`.
fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

/// The PostgreSQL server of a run: `--postgres-url`, or a throwaway cluster (fsync on, stopped
/// and removed when this is dropped), or none when postgres is not asked for.
struct PostgresServer {
    url: Option<String>,
    _cluster: Option<TestCluster>,
}

impl PostgresServer {
    fn start(options: &Options) -> Result<Self> {
        if !options.engines.contains(&Engine::Postgres) {
            return Ok(PostgresServer {
                url: None,
                _cluster: None,
            });
        }
        if let Some(url) = &options.postgres_url {
            return Ok(PostgresServer {
                url: Some(url.clone()),
                _cluster: None,
            });
        }
        let cluster = TestCluster::start(ClusterOptions {
            fsync: true,
            ..ClusterOptions::default()
        })
        .map_err(|err| {
            format!("postgres: could not start a throwaway cluster ({err}); give --postgres-url or leave postgres out of --engines")
        })?;
        eprintln!(
            "open-deno-kv-bench: started a throwaway PostgreSQL cluster at {}",
            cluster.url()
        );
        Ok(PostgresServer {
            url: Some(cluster.url()),
            _cluster: Some(cluster),
        })
    }
}

fn scratch_dir() -> Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-change-log-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn flags_parse() {
        assert_eq!(parse(&[]), Ok(Options::default()));
        let o = parse(&args(
            "--sets 100 --rounds=2 --engines postgres,SQLITE --postgres-url postgres://a@h/db",
        ))
        .unwrap();
        assert_eq!(o.sets, 100);
        assert_eq!(o.rounds, 2);
        assert_eq!(o.engines, vec![Engine::Sqlite, Engine::Postgres]);
        assert_eq!(o.postgres_url.as_deref(), Some("postgres://a@h/db"));
    }

    #[test]
    fn bad_flags_are_errors() {
        for bad in [
            "--sets",
            "--sets 0",
            "--sets x",
            "--rounds -1",
            "--engines memory",
            "--engines ,",
            "--frobnicate 1",
        ] {
            assert!(parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }

    /// The whole diagnostic on the file engines, small: the log's record count is checked inside
    /// (postgres, on a cluster of its own, is in the smoke tests).
    #[test]
    fn file_engines_run_with_the_log_on_and_off() {
        let options = Options {
            sets: 20,
            rounds: 2,
            engines: vec![Engine::Sqlite, Engine::Redb],
            postgres_url: None,
        };
        run(&options).unwrap();
    }
}

//! One child process: runs some workloads on one target, on fresh files in its own directory,
//! and prints its results and its peak memory as one JSON line on stdout.
//!
//! The parent runs a child binary as `BINARY child --target T --workloads W,.. ...` for every
//! measurement — its own binary for its engines and floors, `open-deno-kv-bench-anchor` for denokv — so
//! each target's memory is measured alone and no run inherits another's caches or threads. The
//! subcommand also runs by hand (handy under `perf` or callgrind).
//!
//! This module is the part every child binary shares: the command line ([`ChildSpec`]), the
//! report ([`run`], [`report`]), and the driver of the workloads on a backend
//! ([`run_backend`]), which opens its stores through the binary's [`Stores`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::data::{
    BoxError, KeyTable, Probes, Result, bench_prefix_end, random_indices, scan_starts, warmup_len,
};
use crate::spec::{Counts, Durability, Mode, Target, Workload, parse_scale};
use crate::sysinfo::{peak_rss_kib, storage_write_bytes};
use crate::workloads::{self, Kv, Outcome};

/// What one child runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildSpec {
    /// The backend or raw floor.
    pub target: Target,
    /// The workloads, in order (read workloads share one preloaded data set).
    pub workloads: Vec<Workload>,
    /// The `--scale` of the run.
    pub scale: f64,
    /// The preloaded data set size, if not the scale's default.
    pub keys: Option<usize>,
    /// Write durability.
    pub durability: Durability,
    /// How the workloads drive the store.
    pub mode: Mode,
    /// A directory of its own for the child's files (created, and removed at the end); for
    /// open-deno-kv-postgres, each store's directory names its schema.
    pub dir: PathBuf,
    /// The PostgreSQL server of the postgres targets.
    pub postgres_url: Option<String>,
    /// Its streaming replica, for the postgres-replica target.
    pub postgres_replica_url: Option<String>,
}

impl ChildSpec {
    /// The command-line arguments after `child` that describe this spec.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec![
            "--target".to_owned(),
            self.target.name().to_owned(),
            "--workloads".to_owned(),
            self.workloads
                .iter()
                .map(|w| w.name())
                .collect::<Vec<_>>()
                .join(","),
            "--scale".to_owned(),
            self.scale.to_string(),
            "--durability".to_owned(),
            self.durability.name().to_owned(),
            "--mode".to_owned(),
            self.mode.name().to_owned(),
            "--dir".to_owned(),
            self.dir.display().to_string(),
        ];
        if let Some(keys) = self.keys {
            args.extend(["--keys".to_owned(), keys.to_string()]);
        }
        if let Some(url) = &self.postgres_url {
            args.extend(["--postgres-url".to_owned(), url.clone()]);
        }
        if let Some(url) = &self.postgres_replica_url {
            args.extend(["--postgres-replica-url".to_owned(), url.clone()]);
        }
        args
    }

    /// Parses the arguments after `child`.
    pub fn parse(args: &[String]) -> std::result::Result<Self, String> {
        let mut target = None;
        let mut workloads = None;
        let mut scale = 1.0;
        let mut keys = None;
        let mut durability = Durability::Full;
        let mut mode = Mode::Multi;
        let mut dir = None;
        let mut postgres_url = None;
        let mut postgres_replica_url = None;
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("{flag} needs a value"))
            };
            match flag.as_str() {
                "--target" => {
                    let v = value()?;
                    target = Some(Target::parse(&v).ok_or(format!("unknown target {v}"))?);
                }
                "--workloads" => {
                    let v = value()?;
                    workloads = Some(
                        v.split(',')
                            .map(|w| Workload::parse(w).ok_or(format!("unknown workload {w}")))
                            .collect::<std::result::Result<Vec<_>, _>>()?,
                    );
                }
                "--scale" => scale = parse_scale(&value()?)?,
                "--keys" => {
                    let v = value()?;
                    keys = Some(
                        v.parse::<usize>()
                            .ok()
                            .filter(|&k| k > 0)
                            .ok_or(format!("--keys: not a positive number: {v}"))?,
                    );
                }
                "--durability" => {
                    let v = value()?;
                    durability = Durability::parse(&v)
                        .ok_or(format!("--durability: full or process, not {v}"))?;
                }
                "--mode" => {
                    let v = value()?;
                    mode = Mode::parse(&v)
                        .ok_or(format!("--mode: multi, current or joined, not {v}"))?;
                }
                "--dir" => dir = Some(PathBuf::from(value()?)),
                "--postgres-url" => postgres_url = Some(value()?),
                "--postgres-replica-url" => postgres_replica_url = Some(value()?),
                other => return Err(format!("child: unknown argument {other}")),
            }
        }
        Ok(ChildSpec {
            target: target.ok_or("child: --target is required")?,
            workloads: workloads.ok_or("child: --workloads is required")?,
            scale,
            keys,
            durability,
            mode,
            dir: dir.ok_or("child: --dir is required")?,
            postgres_url,
            postgres_replica_url,
        })
    }
}

/// Runs a child's workloads with `results` (which returns one [`report`] per workload), in the
/// spec's directory (created first, removed after), and returns the child's report: the JSON
/// line the parent reads.
pub fn run(
    spec: &ChildSpec,
    results: impl FnOnce(&ChildSpec) -> Result<Vec<Value>>,
) -> Result<Value> {
    std::fs::create_dir_all(&spec.dir)?;
    let results = results(spec);
    // Best effort: the parent removes the whole run directory too.
    let _ = std::fs::remove_dir_all(&spec.dir);
    let results = results?;
    Ok(json!({
        "target": spec.target.name(),
        "keys": Counts::new(spec.scale, spec.keys).keys,
        "results": results,
        "peak_rss_kib": peak_rss_kib(),
    }))
}

/// The `child` subcommand of a child binary: parses `args` (those after `child`), runs them
/// with `run` (usually [`run`] around the binary's own runner), prints the report as one JSON
/// line and returns the exit code: 0, 1 when a workload failed (its error on stderr), 2 for a
/// bad command line.
pub fn main(args: &[String], run: impl FnOnce(&ChildSpec) -> Result<Value>) -> i32 {
    let spec = match ChildSpec::parse(args) {
        Ok(spec) => spec,
        Err(message) => {
            eprintln!("open-deno-kv-bench child: {message}");
            return 2;
        }
    };
    match run(&spec) {
        Ok(report) => {
            println!("{report}");
            0
        }
        Err(err) => {
            let names: Vec<&str> = spec.workloads.iter().map(|w| w.name()).collect();
            eprintln!(
                "open-deno-kv-bench: {} on {}: FAILED: {err}",
                names.join(","),
                spec.target
            );
            1
        }
    }
}

/// One workload's entry in the report: its measurement, its extras, and the bytes written to
/// storage per operation since `written_before` (for the workloads that write).
pub fn report(workload: Workload, outcome: Outcome, written_before: Option<u64>) -> Value {
    let Outcome {
        measured,
        mut extra,
    } = outcome;
    // Reads write nothing (the raw floors' window would include their preload).
    if !workload.reads_preloaded()
        && let (Some(before), Some(after)) = (written_before, storage_write_bytes())
    {
        let per_op = after.saturating_sub(before) as f64 / measured.ops.max(1) as f64;
        extra.insert("storage_bytes_written_per_op".into(), json!(per_op));
    }
    let (p50, p99) = measured.p50_p99_us();
    json!({
        "workload": workload.name(),
        "ops": measured.ops,
        "secs": measured.elapsed.as_secs_f64(),
        "ops_per_sec": measured.ops_per_sec(),
        "p50_us": p50,
        "p99_us": p99,
        "extra": extra,
        "peak_rss_kib_after": peak_rss_kib(),
    })
}

/// The preloaded data set of the read workloads, shared by W3 and W4.
pub struct ReadSet {
    /// The preloaded keys, in order.
    pub keys: Arc<KeyTable>,
    /// W3's gets.
    pub probes: Arc<Probes>,
    /// W4's scan starts.
    pub starts: Arc<Vec<usize>>,
    /// The exclusive end of every key.
    pub end: Vec<u8>,
}

impl ReadSet {
    /// The data set of `counts`.
    pub fn new(counts: &Counts) -> Result<Self> {
        let keys = KeyTable::bench(counts.keys)?;
        let probes = Probes::new(&keys, random_indices(counts.w3_gets, counts.keys));
        Ok(ReadSet {
            keys: Arc::new(keys),
            probes: Arc::new(probes),
            starts: Arc::new(scan_starts(counts.w4_scans, counts.keys, counts.scan_len())),
            end: bench_prefix_end()?,
        })
    }
}

/// Untimed scans before W4's timed ones.
pub fn w4_warmup(scans: usize) -> usize {
    scans.min(200)
}

/// How a child binary opens its backends: open-deno-kv-bench's engines, or the anchor's denokv.
pub trait Stores {
    /// Opens `spec.target` on a fresh store under `dir` (or reopens the one there) at
    /// `durability`.
    fn open(
        &self,
        spec: &ChildSpec,
        dir: &Path,
        durability: Durability,
    ) -> impl Future<Output = Result<Kv>>;
}

/// Runs `work` as the driving mode says: spawned on a worker thread of a multi-thread runtime (as
/// a server's request handler would), or in place on the thread that polls this future (the
/// current-thread runtime's, or the `block_on` thread of a multi-thread runtime).
async fn on_worker<F>(spawn: bool, work: F) -> Result<Outcome>
where
    F: Future<Output = Result<Outcome>> + Send + 'static,
{
    if spawn {
        tokio::spawn(work).await?
    } else {
        work.await
    }
}

/// Runs a backend target's workloads in the spec's driving mode, opening each store with
/// A tokio runtime with every driver: multi-thread (a worker per core) or current-thread.
pub fn runtime(multi_thread: bool) -> std::io::Result<tokio::runtime::Runtime> {
    if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
}

/// `stores`: the read workloads on one preloaded, reopened and warmed data set, every write
/// workload on a fresh store of its own. Returns one [`report`] per workload.
pub fn run_backend(spec: &ChildSpec, stores: &impl Stores) -> Result<Vec<Value>> {
    let counts = Counts::new(spec.scale, spec.keys);
    // W3-1core measures one core: a current-thread runtime, nothing else scheduled.
    let multi_thread = spec.mode != Mode::Current && spec.workloads != [Workload::W3Core];
    // Workloads run as a spawned task only in the multi mode; otherwise on the polling thread.
    let spawn = multi_thread && spec.mode == Mode::Multi;
    let mode = spec.mode;
    let runtime = runtime(multi_thread)?;
    runtime.block_on(async {
        let mut results = Vec::new();
        let mut reads: Option<(Kv, ReadSet)> = None;
        for &workload in &spec.workloads {
            if workload.reads_preloaded() && reads.is_none() {
                let set = ReadSet::new(&counts)?;
                let dir = spec.dir.join("reads");
                std::fs::create_dir_all(&dir)?;
                let kv = if spec.target.reopens_after_preload() {
                    // Preload fast, then reopen at the durability under test.
                    let kv = stores.open(spec, &dir, Durability::Process).await?;
                    workloads::preload(&kv, &set.keys).await?;
                    kv.close().await?;
                    drop(kv);
                    stores.open(spec, &dir, spec.durability).await?
                } else {
                    // The same handle: open-deno-kv-postgres's replica reads wait for its own preload.
                    let kv = stores.open(spec, &dir, spec.durability).await?;
                    workloads::preload(&kv, &set.keys).await?;
                    kv
                };
                workloads::warm_up(&kv, &set.keys, &set.end).await?;
                reads = Some((kv, set));
            }
            let written_before = storage_write_bytes();
            let outcome = match (workload, &reads) {
                (Workload::W3 | Workload::W3Core, Some((kv, set))) => {
                    let work = workloads::w3_point_gets(
                        kv.clone(),
                        set.probes.clone(),
                        warmup_len(set.probes.len()),
                        spec.target.read_consistency(),
                    );
                    on_worker(spawn, work).await?
                }
                (Workload::W4, Some((kv, set))) => {
                    let work = workloads::w4_scans(
                        kv.clone(),
                        set.keys.clone(),
                        set.starts.clone(),
                        counts.scan_len(),
                        set.end.clone(),
                        w4_warmup(set.starts.len()),
                        spec.target.read_consistency(),
                    );
                    on_worker(spawn, work).await?
                }
                (Workload::W3 | Workload::W3Core | Workload::W4, None) => {
                    return Err::<_, BoxError>("the read data set was not loaded".into());
                }
                (write, _) => {
                    let dir = spec.dir.join(write.name());
                    std::fs::create_dir_all(&dir)?;
                    let kv = stores.open(spec, &dir, spec.durability).await?;
                    let outcome = run_write(write, kv.clone(), &counts, spawn, mode).await;
                    kv.close().await?;
                    outcome?
                }
            };
            results.push(report(workload, outcome, written_before));
        }
        if let Some((kv, _)) = reads {
            kv.close().await?;
        }
        Ok(results)
    })
}

async fn run_write(
    workload: Workload,
    kv: Kv,
    counts: &Counts,
    spawn: bool,
    mode: Mode,
) -> Result<Outcome> {
    match workload {
        Workload::W1 | Workload::W2 => {
            let keys = Arc::new(KeyTable::bench(counts.w1_sets)?);
            let end = bench_prefix_end()?;
            if workload == Workload::W1 {
                on_worker(spawn, workloads::w1_sequential_sets(kv, keys, end)).await
            } else {
                let tasks = counts.w2_tasks();
                on_worker(
                    spawn,
                    workloads::w2_concurrent_sets(kv, keys, end, tasks, mode),
                )
                .await
            }
        }
        Workload::W5 => {
            on_worker(
                spawn,
                workloads::w5_check_and_set(kv, counts.w5_tasks, counts.w5_per_task, mode),
            )
            .await
        }
        Workload::W6 => {
            on_worker(
                spawn,
                workloads::w6_sums(kv, counts.w6_tasks(), counts.w6_sums, counts.w6_keys, mode),
            )
            .await
        }
        Workload::W7 => on_worker(spawn, workloads::w7_queue(kv, counts.w7_messages)).await,
        Workload::W3 | Workload::W3Core | Workload::W4 => {
            Err(format!("{workload} is a read workload").into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_round_trips_through_args() {
        let spec = ChildSpec {
            target: Target::RawRedb,
            workloads: vec![Workload::W3, Workload::W4],
            scale: 0.25,
            keys: Some(10_000),
            durability: Durability::Process,
            mode: Mode::Joined,
            dir: PathBuf::from("/tmp/x y"),
            postgres_url: None,
            postgres_replica_url: None,
        };
        assert_eq!(ChildSpec::parse(&spec.to_args()), Ok(spec.clone()));
        let on_postgres = ChildSpec {
            target: Target::PostgresReplica,
            postgres_url: Some("postgres://u@127.0.0.1:5/p".into()),
            postgres_replica_url: Some("postgres://u@127.0.0.1:6/p".into()),
            ..spec
        };
        assert_eq!(
            ChildSpec::parse(&on_postgres.to_args()),
            Ok(on_postgres.clone())
        );
        assert!(ChildSpec::parse(&["--target".into()]).is_err());
    }
}

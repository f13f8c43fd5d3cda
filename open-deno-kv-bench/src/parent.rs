//! The parent process: plans the children, runs them round after round, and reports medians,
//! ratios to the raw floors, the targets, peak memory and dataset scaling.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
use serde_json::{Map, Value};

use crate::anchor::Anchor;
use crate::args::Options;
use crate::data::Result;
use crate::spec::{Counts, Durability, Target, Workload};
use crate::stats::median;
use crate::sysinfo;
use open_deno_kv_bench_harness::child::ChildSpec;

mod report;

use report::*;

/// Every target in table order: each backend followed by its floor, then the anchor.
const TABLE_ORDER: [Target; 8] = [
    Target::Memory,
    Target::Sqlite,
    Target::RawSqlite,
    Target::Redb,
    Target::RawRedb,
    Target::Denokv,
    Target::Postgres,
    Target::PostgresReplica,
];

/// The targets of the dataset scaling phase, in table order: open-deno-kv-bench's engines and their
/// floors (not the anchor, which the main table compares at one size).
fn scaling_order() -> impl Iterator<Item = Target> {
    TABLE_ORDER.into_iter().filter(|t| !t.in_anchor())
}

/// One workload's figures from one child.
#[derive(Debug, Clone)]
struct Row {
    ops: u64,
    secs: f64,
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    extra: Map<String, Value>,
}

/// One child that ran.
#[derive(Debug, Clone)]
struct ChildRecord {
    scaling: bool,
    keys: usize,
    target: Target,
    workloads: Vec<Workload>,
    peak_rss_kib: Option<u64>,
}

/// Results by (data set size, target, workload), one row per round in round order.
#[derive(Default)]
struct Store {
    cells: BTreeMap<(usize, Target, Workload), Vec<Row>>,
    children: Vec<ChildRecord>,
}

/// The medians of a cell over its rounds.
struct Agg {
    ops: u64,
    secs: f64,
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    per_round: Vec<f64>,
    /// The extras of the round with the median throughput.
    extra: Map<String, Value>,
}

impl Store {
    fn agg(&self, keys: usize, target: Target, workload: Workload) -> Option<Agg> {
        let rows = self.cells.get(&(keys, target, workload))?;
        let first = rows.first()?;
        let per_round: Vec<f64> = rows.iter().map(|r| r.ops_per_sec).collect();
        let mut by_speed: Vec<&Row> = rows.iter().collect();
        by_speed.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        let middle = by_speed.get(by_speed.len() / 2).copied().unwrap_or(first);
        let pick = |f: fn(&Row) -> f64| median(&rows.iter().map(f).collect::<Vec<_>>());
        Some(Agg {
            ops: first.ops,
            secs: pick(|r| r.secs),
            ops_per_sec: median(&per_round),
            p50_us: pick(|r| r.p50_us),
            p99_us: pick(|r| r.p99_us),
            per_round,
            extra: middle.extra.clone(),
        })
    }

    /// `a`'s throughput divided by `b`'s, round by round.
    fn ratios(&self, keys: usize, a: (Target, Workload), b: (Target, Workload)) -> Vec<f64> {
        let (Some(a), Some(b)) = (
            self.cells.get(&(keys, a.0, a.1)),
            self.cells.get(&(keys, b.0, b.1)),
        ) else {
            return Vec::new();
        };
        a.iter()
            .zip(b)
            .map(|(a, b)| a.ops_per_sec / b.ops_per_sec.max(1e-12))
            .collect()
    }

    /// The median over rounds of `a`'s throughput divided by `b`'s, round by round.
    fn ratio(&self, keys: usize, a: (Target, Workload), b: (Target, Workload)) -> Option<f64> {
        let m = median(&self.ratios(keys, a, b));
        (!m.is_nan()).then_some(m)
    }

    /// A target's largest peak RSS over its main-phase children, per child group the median
    /// over rounds.
    fn peaks(&self, target: Target, scaling_keys: Option<usize>) -> Vec<(Vec<Workload>, u64)> {
        let mut groups: BTreeMap<Vec<Workload>, Vec<f64>> = BTreeMap::new();
        for child in &self.children {
            let wanted = match scaling_keys {
                None => !child.scaling,
                Some(keys) => child.scaling && child.keys == keys,
            };
            if wanted
                && child.target == target
                && let Some(kib) = child.peak_rss_kib
            {
                groups
                    .entry(child.workloads.clone())
                    .or_default()
                    .push(kib as f64);
            }
        }
        groups
            .into_iter()
            .map(|(w, kibs)| (w, median(&kibs) as u64))
            .collect()
    }
}

/// Removes the run's directory when the run ends, however it ends.
struct RunDir(PathBuf);

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The main phase's child groups: W3 and W4 share one preloaded data set; W3-1core (memory only)
/// comes with W3.
fn main_groups(options: &Options) -> Vec<Vec<Workload>> {
    let has = |w| options.workloads.contains(&w);
    let mut groups = Vec::new();
    for w in [Workload::W1, Workload::W2] {
        if has(w) {
            groups.push(vec![w]);
        }
    }
    let reads: Vec<Workload> = [Workload::W3, Workload::W4]
        .into_iter()
        .filter(|&w| has(w))
        .collect();
    if !reads.is_empty() {
        groups.push(reads);
    }
    if has(Workload::W3) && options.backends.contains(&Target::Memory) {
        groups.push(vec![Workload::W3Core]);
    }
    for w in [Workload::W5, Workload::W6, Workload::W7] {
        if has(w) {
            groups.push(vec![w]);
        }
    }
    groups
}

/// The targets that run a group, in table order.
fn targets_for(options: &Options, group: &[Workload]) -> Vec<Target> {
    TABLE_ORDER
        .into_iter()
        .filter(|t| {
            let selected = if t.is_raw() {
                options.floors
                    && Target::BACKENDS
                        .iter()
                        .any(|b| b.floor() == Some(*t) && options.backends.contains(b))
            } else {
                options.backends.contains(t)
            };
            selected && group.iter().all(|&w| t.runs(w))
        })
        .collect()
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Runs the benchmarks and prints the report. Returns the process exit code.
pub fn run(options: &Options) -> Result<i32> {
    let base = match &options.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir(),
    };
    let run_dir = RunDir(base.join(format!("open-deno-kv-bench-{}", std::process::id())));
    std::fs::create_dir_all(&run_dir.0)
        .map_err(|e| format!("cannot create {}: {e}", run_dir.0.display()))?;
    let counts = Counts::new(options.scale, None);
    let postgres = PostgresServer::for_run(options)?;
    let anchor = options
        .backends
        .contains(&Target::Denokv)
        .then(|| Anchor::find(options.anchor.as_deref()));
    if let Some(anchor) = &anchor {
        eprintln!("open-deno-kv-bench: {}", anchor.line());
    }
    let own_exe = std::env::current_exe()?;
    let load_at_start = sysinfo::load_average();
    let mut store = Store::default();
    let groups = main_groups(options);
    let mut child_number = 0usize;
    let mut spec_for = |target: Target, workloads: Vec<Workload>, keys: Option<usize>| {
        child_number += 1;
        ChildSpec {
            target,
            workloads,
            scale: options.scale,
            keys,
            durability: options.durability,
            mode: options.mode,
            dir: run_dir.0.join(format!("{child_number:03}-{target}")),
            postgres_url: postgres.url.clone(),
            postgres_replica_url: postgres.replica_url.clone(),
        }
    };
    eprintln!(
        "open-deno-kv-bench: scale {}, durability {}, mode {}, {} round(s); files under {}",
        options.scale,
        options.durability.name(),
        options.mode.name(),
        options.rounds,
        run_dir.0.display()
    );
    for round in 0..options.rounds {
        for group in &groups {
            let mut targets = targets_for(options, group);
            // Alternate the order so slow drift of the disk or the machine favours no one.
            if round % 2 == 1 {
                targets.reverse();
            }
            for target in targets {
                // The anchor runs in its own binary; without it, the report's line says so.
                let exe = if target.in_anchor() {
                    match anchor.as_ref().and_then(Anchor::exe) {
                        Some(exe) => exe,
                        None => continue,
                    }
                } else {
                    own_exe.as_path()
                };
                let spec = spec_for(target, group.clone(), None);
                let label = format!("[round {}/{}]", round + 1, options.rounds);
                run_child(exe, &spec, &label, false, &mut store)?;
            }
        }
    }

    let scaling_sizes: Vec<usize> = if options.scaling {
        [10_000, 100_000, 1_000_000]
            .into_iter()
            .map(|n| crate::spec::scaled(n, options.scale))
            .collect()
    } else {
        Vec::new()
    };
    let scaling_workloads: Vec<Workload> = {
        let chosen: Vec<Workload> = [Workload::W3, Workload::W4]
            .into_iter()
            .filter(|w| options.workloads.contains(w))
            .collect();
        if chosen.is_empty() {
            vec![Workload::W3, Workload::W4]
        } else {
            chosen
        }
    };
    for &keys in &scaling_sizes {
        // The scaling phase is open-deno-kv-bench's engines against their floors.
        for target in targets_for(options, &scaling_workloads)
            .into_iter()
            .filter(|t| !t.in_anchor())
        {
            // The main phase's data set already measured this size.
            let done = scaling_workloads
                .iter()
                .all(|&w| store.cells.contains_key(&(keys, target, w)));
            if done {
                continue;
            }
            let spec = spec_for(target, scaling_workloads.clone(), Some(keys));
            let label = format!("[scaling {keys} keys]");
            run_child(&own_exe, &spec, &label, true, &mut store)?;
        }
    }

    let report = Report {
        options,
        counts: &counts,
        store: &store,
        groups: &groups,
        scaling_sizes: &scaling_sizes,
        scaling_workloads: &scaling_workloads,
        load: (load_at_start, sysinfo::load_average()),
        anchor: anchor.as_ref(),
    };
    let json = serde_json::to_string_pretty(&report.json())?;
    if let Some(path) = &options.json_file {
        std::fs::write(path, &json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if options.json {
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
    Ok(0)
}

/// The PostgreSQL server the postgres targets use during a run: the one given on the command
/// line, or a throwaway cluster started for the run (stopped and removed when this is dropped).
struct PostgresServer {
    url: Option<String>,
    replica_url: Option<String>,
    _cluster: Option<TestCluster>,
}

impl PostgresServer {
    fn for_run(options: &Options) -> Result<Self> {
        let wanted = |t: Target| options.backends.contains(&t);
        if !options.backends.iter().any(|t| t.needs_postgres()) {
            return Ok(PostgresServer {
                url: None,
                replica_url: None,
                _cluster: None,
            });
        }
        if let Some(url) = &options.postgres_url {
            if wanted(Target::PostgresReplica) && options.postgres_replica_url.is_none() {
                return Err(
                    "postgres-replica with --postgres-url needs --postgres-replica-url".into(),
                );
            }
            return Ok(PostgresServer {
                url: Some(url.clone()),
                replica_url: options.postgres_replica_url.clone(),
                _cluster: None,
            });
        }
        let cluster = TestCluster::start(ClusterOptions {
            replica: wanted(Target::PostgresReplica),
            fsync: options.durability == Durability::Full,
            ..ClusterOptions::default()
        })?;
        eprintln!(
            "open-deno-kv-bench: started a throwaway PostgreSQL cluster at {}{}",
            cluster.url(),
            if cluster.replica_url().is_some() {
                " with a streaming replica"
            } else {
                ""
            }
        );
        Ok(PostgresServer {
            url: Some(cluster.url()),
            replica_url: cluster.replica_url(),
            _cluster: Some(cluster),
        })
    }
}

/// Runs one child (`exe child ...`: this binary, or the anchor's), records its rows, and prints
/// a progress line on stderr.
fn run_child(
    exe: &Path,
    spec: &ChildSpec,
    label: &str,
    scaling: bool,
    store: &mut Store,
) -> Result<()> {
    let names = spec
        .workloads
        .iter()
        .map(|w| w.name())
        .collect::<Vec<_>>()
        .join(",");
    let output = Command::new(exe)
        .arg("child")
        .args(spec.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "{names} on {} FAILED ({}); its error is above",
            spec.target, output.status
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| format!("{names} on {}: the child printed no report", spec.target))?;
    let report: Value = serde_json::from_str(line)?;
    let keys = report["keys"]
        .as_u64()
        .and_then(|k| usize::try_from(k).ok())
        .ok_or("a child report has no data set size")?;
    let peak = report["peak_rss_kib"].as_u64();
    for result in report["results"].as_array().into_iter().flatten() {
        let workload = result["workload"]
            .as_str()
            .and_then(Workload::parse)
            .ok_or("a child report names an unknown workload")?;
        let number = |field: &str| result[field].as_f64().unwrap_or(f64::NAN);
        let row = Row {
            ops: result["ops"].as_u64().unwrap_or(0),
            secs: number("secs"),
            ops_per_sec: number("ops_per_sec"),
            p50_us: number("p50_us"),
            p99_us: number("p99_us"),
            extra: result["extra"].as_object().cloned().unwrap_or_default(),
        };
        eprintln!(
            "{label} {:<9} {:<10} {:>12} ops/s  p50 {:>9} us  p99 {:>9} us",
            workload.name(),
            spec.target.name(),
            fmt_int(row.ops_per_sec),
            fmt_us(row.p50_us),
            fmt_us(row.p99_us),
        );
        store
            .cells
            .entry((keys, spec.target, workload))
            .or_default()
            .push(row);
    }
    store.children.push(ChildRecord {
        scaling,
        keys,
        target: spec.target,
        workloads: spec.workloads.clone(),
        peak_rss_kib: peak,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_int(1_234_567.4), "1,234,567");
        assert_eq!(fmt_int(999.0), "999");
        assert_eq!(fmt_int(1000.0), "1,000");
        assert_eq!(fmt_int(f64::NAN), "-");
        assert_eq!(fmt_us(1.234), "1.23");
        assert_eq!(fmt_us(123.44), "123.4");
        assert_eq!(fmt_us(12_345.0), "12,345");
    }

    #[test]
    fn spreads() {
        assert_eq!(fmt_spread(&[]), "-");
        assert_eq!(fmt_spread(&[1.5]), "1.50");
        assert_eq!(fmt_spread(&[2.0, 1.0, 4.0]), "2.00 (1.00-4.00)");
    }

    #[test]
    fn groups_and_targets() {
        let options = Options::default();
        let groups = main_groups(&options);
        assert_eq!(
            groups,
            vec![
                vec![Workload::W1],
                vec![Workload::W2],
                vec![Workload::W3, Workload::W4],
                vec![Workload::W3Core],
                vec![Workload::W5],
                vec![Workload::W6],
                vec![Workload::W7],
            ]
        );
        assert_eq!(
            targets_for(&options, &[Workload::W1]),
            TABLE_ORDER[..6].to_vec(),
            "the postgres targets need a server: only when asked for"
        );
        assert_eq!(
            targets_for(&options, &[Workload::W2]),
            vec![Target::Memory, Target::Sqlite, Target::Redb, Target::Denokv]
        );
        assert_eq!(
            targets_for(&options, &[Workload::W3Core]),
            vec![Target::Memory]
        );
        let no_floors = Options {
            floors: false,
            backends: vec![Target::Redb],
            ..Options::default()
        };
        assert_eq!(targets_for(&no_floors, &[Workload::W1]), vec![Target::Redb]);
        let postgres = Options {
            backends: vec![Target::Postgres, Target::PostgresReplica],
            ..Options::default()
        };
        assert_eq!(
            targets_for(&postgres, &[Workload::W2]),
            vec![Target::Postgres]
        );
        assert_eq!(
            targets_for(&postgres, &[Workload::W3, Workload::W4]),
            vec![Target::Postgres, Target::PostgresReplica]
        );
    }
}

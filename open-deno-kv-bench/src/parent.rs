//! The parent process: plans the children, runs them round after round, and reports medians,
//! ratios to the raw floors, the targets, peak memory and dataset scaling.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
use serde_json::{Map, Value, json};

use crate::anchor::Anchor;
use crate::args::Options;
use crate::data::Result;
use crate::spec::{Counts, Durability, Target, Workload};
use crate::stats::median;
use crate::sysinfo;
use open_deno_kv_bench_harness::child::ChildSpec;

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

/// `1234567.8` as `1,234,568`.
fn fmt_int(x: f64) -> String {
    if !x.is_finite() {
        return "-".to_owned();
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

/// Microseconds with sensible precision.
fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        "-".to_owned()
    } else if us < 10.0 {
        format!("{us:.2}")
    } else if us < 1_000.0 {
        format!("{us:.1}")
    } else {
        fmt_int(us)
    }
}

fn extra_f64(extra: &Map<String, Value>, name: &str) -> Option<f64> {
    extra.get(name).and_then(Value::as_f64)
}

/// One workload's row of the table against the anchor.
struct AgainstAnchor {
    workload: Workload,
    denokv_ops_per_sec: f64,
    /// open-deno-kv-sqlite's throughput / denokv's, one per round.
    sqlite: Vec<f64>,
    /// open-deno-kv-redb's, likewise.
    redb: Vec<f64>,
}

/// Per-round ratios as `median (lowest-highest)`, or `-` when there are none.
fn fmt_spread(ratios: &[f64]) -> String {
    let lowest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match ratios.len() {
        0 => "-".to_owned(),
        1 => format!("{:.2}", median(ratios)),
        _ => format!("{:.2} ({lowest:.2}-{highest:.2})", median(ratios)),
    }
}

/// A target the issue sets, evaluated.
struct Goal {
    name: &'static str,
    measured: Option<f64>,
    shown: String,
    needed: &'static str,
    met: Option<bool>,
}

struct Report<'a> {
    options: &'a Options,
    counts: &'a Counts,
    store: &'a Store,
    groups: &'a [Vec<Workload>],
    scaling_sizes: &'a [usize],
    scaling_workloads: &'a [Workload],
    /// Load averages when the run started and ended.
    load: (Option<String>, Option<String>),
    /// The anchor, when denokv was asked for.
    anchor: Option<&'a Anchor>,
}

impl Report<'_> {
    fn keys(&self) -> usize {
        self.counts.keys
    }

    /// The main table's rows: (workload, target), in order.
    fn main_rows(&self) -> Vec<(Workload, Target)> {
        let mut rows = Vec::new();
        for group in self.groups {
            for &workload in group {
                for target in TABLE_ORDER {
                    if self
                        .store
                        .cells
                        .contains_key(&(self.keys(), target, workload))
                    {
                        rows.push((workload, target));
                    }
                }
            }
        }
        rows
    }

    /// A backend's throughput over its floor's, for workloads that have one.
    fn vs_floor(&self, keys: usize, target: Target, workload: Workload) -> Option<f64> {
        let floor = target.floor()?;
        self.store
            .ratio(keys, (target, workload), (floor, workload))
    }

    fn notes(&self, workload: Workload, target: Target, agg: &Agg) -> String {
        let extra = &agg.extra;
        match workload {
            Workload::W1 => match extra_f64(extra, "storage_bytes_written_per_op") {
                // A PostgreSQL server writes from its own processes, not the child's.
                Some(bytes) if target != Target::Memory && !target.needs_postgres() => {
                    format!(
                        "read back; {:.1} KiB written to disk per set",
                        bytes / 1024.0
                    )
                }
                _ => "read back, all present".to_owned(),
            },
            Workload::W2 => {
                let tasks = extra.get("tasks").and_then(Value::as_u64).unwrap_or(0);
                match self
                    .store
                    .ratio(self.keys(), (target, Workload::W2), (target, Workload::W1))
                {
                    Some(r) => format!("{tasks} tasks; {r:.1}x its own W1"),
                    None => format!("{tasks} tasks"),
                }
            }
            Workload::W3 => "checked values".to_owned(),
            Workload::W3Core => "current-thread runtime, 1 task".to_owned(),
            Workload::W4 => format!(
                "{} entries/s",
                fmt_int(extra_f64(extra, "entries_per_sec").unwrap_or(f64::NAN))
            ),
            Workload::W5 => format!(
                "{} retries ({:.2}/increment); final value {} exact",
                fmt_int(extra_f64(extra, "retries").unwrap_or(f64::NAN)),
                extra_f64(extra, "retries_per_increment").unwrap_or(f64::NAN),
                fmt_int(extra_f64(extra, "final_value").unwrap_or(f64::NAN)),
            ),
            Workload::W6 => format!(
                "totals exact (sum {})",
                fmt_int(extra_f64(extra, "total").unwrap_or(f64::NAN))
            ),
            Workload::W7 => format!(
                "enqueue {}/s, dequeue+finish {}/s; each once",
                fmt_int(extra_f64(extra, "enqueue_per_sec").unwrap_or(f64::NAN)),
                fmt_int(extra_f64(extra, "consume_per_sec").unwrap_or(f64::NAN)),
            ),
        }
    }

    /// Per workload, open-deno-kv-sqlite's and open-deno-kv-redb's throughput over the anchor's, round by round.
    fn against_anchor(&self) -> Vec<AgainstAnchor> {
        let k = self.keys();
        Workload::SELECTABLE
            .into_iter()
            .filter_map(|workload| {
                let denokv = self.store.agg(k, Target::Denokv, workload)?;
                let vs = |t| {
                    self.store
                        .ratios(k, (t, workload), (Target::Denokv, workload))
                };
                Some(AgainstAnchor {
                    workload,
                    denokv_ops_per_sec: denokv.ops_per_sec,
                    sqlite: vs(Target::Sqlite),
                    redb: vs(Target::Redb),
                })
            })
            .collect()
    }

    fn goals(&self) -> Vec<Goal> {
        let k = self.keys();
        let s = self.store;
        let at_least =
            |name, measured: Option<f64>, min: f64, needed, fmt: fn(f64) -> String| Goal {
                name,
                measured,
                shown: measured.map_or_else(|| "not run".to_owned(), fmt),
                needed,
                met: measured.map(|m| m >= min),
            };
        let at_most =
            |name, measured: Option<f64>, max: f64, needed, fmt: fn(f64) -> String| Goal {
                name,
                measured,
                shown: measured.map_or_else(|| "not run".to_owned(), fmt),
                needed,
                met: measured.map(|m| m <= max),
            };
        let times = |r: f64| format!("{r:.2}x");
        let mut goals = vec![
            at_least(
                "open-deno-kv-sqlite W2 throughput / its own W1",
                s.ratio(
                    k,
                    (Target::Sqlite, Workload::W2),
                    (Target::Sqlite, Workload::W1),
                ),
                6.0,
                ">= 6x",
                times,
            ),
            at_least(
                "open-deno-kv-sqlite W3 gets/s / raw rusqlite",
                s.ratio(
                    k,
                    (Target::Sqlite, Workload::W3),
                    (Target::RawSqlite, Workload::W3),
                ),
                1.0 / 3.0,
                ">= 0.33x",
                times,
            ),
            at_least(
                "open-deno-kv-sqlite W4 scans/s / raw rusqlite",
                s.ratio(
                    k,
                    (Target::Sqlite, Workload::W4),
                    (Target::RawSqlite, Workload::W4),
                ),
                0.5,
                ">= 0.5x",
                times,
            ),
            at_most(
                "open-deno-kv-redb W1 time / raw redb time",
                s.ratio(
                    k,
                    (Target::RawRedb, Workload::W1),
                    (Target::Redb, Workload::W1),
                ),
                1.3,
                "<= 1.3x",
                times,
            ),
            at_most(
                "open-deno-kv-redb W3 time / raw redb time",
                s.ratio(
                    k,
                    (Target::RawRedb, Workload::W3),
                    (Target::Redb, Workload::W3),
                ),
                1.3,
                "<= 1.3x",
                times,
            ),
            at_least(
                "open-deno-kv-memory gets/s on one core (W3-1core)",
                s.agg(k, Target::Memory, Workload::W3Core)
                    .map(|a| a.ops_per_sec),
                1_000_000.0,
                ">= 1,000,000/s",
                |v| format!("{}/s", fmt_int(v)),
            ),
        ];
        // Only when it runs: it needs a PostgreSQL server.
        if self.options.backends.contains(&Target::Postgres) {
            goals.push(at_least(
                "open-deno-kv-postgres W2 throughput / its own W1 (batching)",
                s.ratio(
                    k,
                    (Target::Postgres, Workload::W2),
                    (Target::Postgres, Workload::W1),
                ),
                6.0,
                ">= 6x",
                times,
            ));
        }
        goals
    }

    fn verdict(met: Option<bool>) -> &'static str {
        match met {
            Some(true) => "MET",
            Some(false) => "MISSED",
            None => "not run",
        }
    }

    fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let machine = sysinfo::machine();
        let o = self.options;
        let _ = writeln!(
            out,
            "\nopen-deno-kv-bench: scale {}, durability {} ({}), mode {} ({}), {} round(s){}\nmachine: {} cpus, {}, kernel {}, {} GiB RAM; load average {} at the start, {} at the end\n",
            o.scale,
            o.durability.name(),
            o.durability.mapping(),
            o.mode.name(),
            o.mode.describe(),
            o.rounds,
            if o.rounds > 1 {
                ": each figure is the median over rounds, each ratio the median of per-round ratios"
            } else {
                ""
            },
            machine["cpus"],
            machine["cpu_model"].as_str().unwrap_or("?"),
            machine["kernel"].as_str().unwrap_or("?"),
            machine["memory_gib"],
            self.load.0.as_deref().unwrap_or("?"),
            self.load.1.as_deref().unwrap_or("?"),
        );
        if let Some(anchor) = self.anchor {
            let _ = writeln!(out, "{}\n", anchor.line());
        }
        let _ = writeln!(
            out,
            "| workload | backend | ops | ops/s | p50 us | p99 us | x floor | notes |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---|");
        for (workload, target) in self.main_rows() {
            let Some(agg) = self.store.agg(self.keys(), target, workload) else {
                continue;
            };
            let floor = if target.is_raw() {
                "floor".to_owned()
            } else {
                self.vs_floor(self.keys(), target, workload)
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
            };
            let notes = if target.is_raw() {
                let engine = if target == Target::RawSqlite {
                    "rusqlite"
                } else {
                    "redb"
                };
                match extra_f64(&agg.extra, "storage_bytes_written_per_op") {
                    Some(bytes) if workload == Workload::W1 => format!(
                        "raw {engine} floor; {:.1} KiB written to disk per set",
                        bytes / 1024.0
                    ),
                    _ => format!("raw {engine} floor"),
                }
            } else {
                self.notes(workload, target, &agg)
            };
            let _ = writeln!(
                out,
                "| {} {} | {} | {} | {} | {} | {} | {} | {} |",
                workload.name(),
                workload.describe(self.counts),
                target.name(),
                fmt_int(agg.ops as f64),
                fmt_int(agg.ops_per_sec),
                fmt_us(agg.p50_us),
                fmt_us(agg.p99_us),
                floor,
                notes
            );
        }
        let _ = writeln!(
            out,
            "\n\"x floor\" = the backend's throughput / its raw floor's (median of per-round ratios).\n"
        );
        let against = self.against_anchor();
        if !against.is_empty() {
            let _ = writeln!(
                out,
                "Against the anchor, denokv_sqlite (throughput / denokv's; median of per-round ratios, lowest-highest round in brackets):\n"
            );
            let _ = writeln!(
                out,
                "| workload | denokv ops/s | open-deno-kv-sqlite / denokv | open-deno-kv-redb / denokv |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|");
            for row in &against {
                let _ = writeln!(
                    out,
                    "| {} {} | {} | {} | {} |",
                    row.workload.name(),
                    row.workload.describe(self.counts),
                    fmt_int(row.denokv_ops_per_sec),
                    fmt_spread(&row.sqlite),
                    fmt_spread(&row.redb),
                );
            }
            let _ = writeln!(out);
        }

        let _ = writeln!(out, "| target | measured | needed | verdict |");
        let _ = writeln!(out, "|---|---:|---|---|");
        for goal in self.goals() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                goal.name,
                goal.shown,
                goal.needed,
                Self::verdict(goal.met)
            );
        }

        let _ = writeln!(
            out,
            "\nPeak memory (VmHWM of each child process; median over rounds):\n"
        );
        let _ = writeln!(out, "| backend | peak RSS | by child |");
        let _ = writeln!(out, "|---|---:|---|");
        for target in TABLE_ORDER {
            let peaks = self.store.peaks(target, None);
            if let Some(max) = peaks.iter().map(|(_, k)| *k).max() {
                let detail = peaks
                    .iter()
                    .map(|(w, k)| {
                        let names: Vec<&str> = w.iter().map(|w| w.name()).collect();
                        format!("{} {}", names.join("+"), mib(*k))
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let _ = writeln!(out, "| {} | {} | {} |", target.name(), mib(max), detail);
            }
        }

        if !self.scaling_sizes.is_empty() {
            let _ = writeln!(
                out,
                "\nDataset scaling (W3 {} gets, W4 {} scans of {}; 1 round each size beyond the main table's):\n",
                fmt_int(self.counts.w3_gets as f64),
                fmt_int(self.counts.w4_scans as f64),
                self.counts.scan_len()
            );
            let _ = writeln!(
                out,
                "| keys | backend | W3 gets/s | W3 p99 us | W4 scans/s | W4 p99 us | x floor W3 / W4 | peak RSS |"
            );
            let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|");
            for &keys in self.scaling_sizes {
                for target in scaling_order() {
                    let w3 = self.store.agg(keys, target, Workload::W3);
                    let w4 = self.store.agg(keys, target, Workload::W4);
                    if w3.is_none() && w4.is_none() {
                        continue;
                    }
                    let floor = |w| {
                        self.vs_floor(keys, target, w)
                            .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
                    };
                    let peak = self
                        .peak_for_size(target, keys)
                        .map_or_else(|| "-".to_owned(), mib);
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                        fmt_int(keys as f64),
                        target.name(),
                        w3.as_ref()
                            .map_or_else(|| "-".to_owned(), |a| fmt_int(a.ops_per_sec)),
                        w3.as_ref()
                            .map_or_else(|| "-".to_owned(), |a| fmt_us(a.p99_us)),
                        w4.as_ref()
                            .map_or_else(|| "-".to_owned(), |a| fmt_int(a.ops_per_sec)),
                        w4.as_ref()
                            .map_or_else(|| "-".to_owned(), |a| fmt_us(a.p99_us)),
                        if target.is_raw() {
                            "floor".to_owned()
                        } else {
                            floor(Workload::W3)
                        },
                        if target.is_raw() {
                            "floor".to_owned()
                        } else {
                            floor(Workload::W4)
                        },
                        peak
                    );
                }
            }
        }
        out
    }

    /// The peak RSS of the child that read a data set of `keys` keys.
    fn peak_for_size(&self, target: Target, keys: usize) -> Option<u64> {
        let read_group =
            |w: &Vec<Workload>| w.iter().any(|w| matches!(w, Workload::W3 | Workload::W4));
        if keys == self.keys()
            && let Some(peak) = self
                .store
                .peaks(target, None)
                .into_iter()
                .filter(|(w, _)| read_group(w))
                .map(|(_, k)| k)
                .max()
        {
            return Some(peak);
        }
        self.store
            .peaks(target, Some(keys))
            .into_iter()
            .map(|(_, k)| k)
            .max()
    }

    fn json(&self) -> Value {
        let o = self.options;
        let cell_json = |keys: usize, target: Target, workload: Workload| {
            self.store.agg(keys, target, workload).map(|agg| {
                json!({
                    "workload": workload.name(),
                    "description": workload.describe(&Counts::new(o.scale, Some(keys))),
                    "backend": target.name(),
                    "keys": keys,
                    "ops": agg.ops,
                    "secs": agg.secs,
                    "ops_per_sec": agg.ops_per_sec,
                    "p50_us": agg.p50_us,
                    "p99_us": agg.p99_us,
                    "vs_floor": self.vs_floor(keys, target, workload),
                    "ops_per_sec_by_round": agg.per_round,
                    "extra": agg.extra,
                })
            })
        };
        let results: Vec<Value> = self
            .main_rows()
            .into_iter()
            .filter_map(|(w, t)| cell_json(self.keys(), t, w))
            .collect();
        let goals: Vec<Value> = self
            .goals()
            .into_iter()
            .map(|g| {
                json!({
                    "target": g.name,
                    "measured": g.measured,
                    "needed": g.needed,
                    "verdict": Self::verdict(g.met),
                })
            })
            .collect();
        let mut peak = Map::new();
        let mut by_child = Vec::new();
        for target in TABLE_ORDER {
            let peaks = self.store.peaks(target, None);
            if let Some(max) = peaks.iter().map(|(_, k)| *k).max() {
                peak.insert(target.name().to_owned(), json!(max));
            }
            for (workloads, kib) in peaks {
                by_child.push(json!({
                    "backend": target.name(),
                    "workloads": workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
                    "peak_rss_kib": kib,
                }));
            }
        }
        let mut scaling = Vec::new();
        for &keys in self.scaling_sizes {
            for target in scaling_order() {
                for &w in self.scaling_workloads {
                    if let Some(mut cell) = cell_json(keys, target, w) {
                        cell["peak_rss_kib"] = json!(self.peak_for_size(target, keys));
                        scaling.push(cell);
                    }
                }
            }
        }
        json!({
            "machine": sysinfo::machine(),
            "config": {
                "scale": o.scale,
                "durability": o.durability.name(),
                "durability_mapping": o.durability.mapping(),
                "mode": o.mode.name(),
                "rounds": o.rounds,
                "floors": o.floors,
                "keys": self.keys(),
                "workloads": o.workloads.iter().map(|w| w.name()).collect::<Vec<_>>(),
                "backends": o.backends.iter().map(|t| t.name()).collect::<Vec<_>>(),
            },
            "load_average": { "start": self.load.0, "end": self.load.1 },
            "results": results,
            "targets": goals,
            "peak_rss_kib": peak,
            "peak_rss_kib_by_child": by_child,
            "scaling": scaling,
            "anchor": self.anchor.map(Anchor::json),
            "against_anchor": self.against_anchor().iter().map(|row| json!({
                "workload": row.workload.name(),
                "denokv_ops_per_sec": row.denokv_ops_per_sec,
                "sqlite_over_denokv": { "median": median(&row.sqlite), "by_round": row.sqlite },
                "redb_over_denokv": { "median": median(&row.redb), "by_round": row.redb },
            })).collect::<Vec<_>>(),
        })
    }
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

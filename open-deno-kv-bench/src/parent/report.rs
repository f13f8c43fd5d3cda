//! The parent's report: the tables of medians, ratios to the raw floors and to the anchor, the
//! targets, peak memory and dataset scaling, from the rows the runs recorded.

use serde_json::{Map, Value, json};

use crate::anchor::Anchor;
use crate::args::Options;
use crate::spec::{Counts, Target, Workload};
use crate::stats::median;
use crate::sysinfo;

use super::*;

/// `1234567.8` as `1,234,568`.
pub(super) fn fmt_int(x: f64) -> String {
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
pub(super) fn fmt_us(us: f64) -> String {
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

pub(super) fn extra_f64(extra: &Map<String, Value>, name: &str) -> Option<f64> {
    extra.get(name).and_then(Value::as_f64)
}

/// One workload's row of the table against the anchor.
pub(super) struct AgainstAnchor {
    workload: Workload,
    denokv_ops_per_sec: f64,
    /// open-deno-kv-sqlite's throughput / denokv's, one per round.
    sqlite: Vec<f64>,
    /// open-deno-kv-redb's, likewise.
    redb: Vec<f64>,
}

/// Per-round ratios as `median (lowest-highest)`, or `-` when there are none.
pub(super) fn fmt_spread(ratios: &[f64]) -> String {
    let lowest = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match ratios.len() {
        0 => "-".to_owned(),
        1 => format!("{:.2}", median(ratios)),
        _ => format!("{:.2} ({lowest:.2}-{highest:.2})", median(ratios)),
    }
}

/// A target the issue sets, evaluated.
pub(super) struct Goal {
    name: &'static str,
    measured: Option<f64>,
    shown: String,
    needed: &'static str,
    met: Option<bool>,
}

pub(super) struct Report<'a> {
    pub(super) options: &'a Options,
    pub(super) counts: &'a Counts,
    pub(super) store: &'a Store,
    pub(super) groups: &'a [Vec<Workload>],
    pub(super) scaling_sizes: &'a [usize],
    pub(super) scaling_workloads: &'a [Workload],
    /// Load averages when the run started and ended.
    pub(super) load: (Option<String>, Option<String>),
    /// The anchor, when denokv was asked for.
    pub(super) anchor: Option<&'a Anchor>,
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

    pub(super) fn text(&self) -> String {
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

    pub(super) fn json(&self) -> Value {
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

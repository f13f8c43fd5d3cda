//! Runs the whole harness at a tiny scale, so CI exercises every workload on every backend and
//! floor, the child processes and the reports. It asserts the workloads' correctness checks (a
//! failed check makes the binary exit non-zero) and the report's shape — never timings.

use std::process::Command;

use serde_json::Value;

fn open_deno_kv_bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_open-deno-kv-bench"))
        .args(args)
        .output()
        .expect("open-deno-kv-bench runs")
}

fn json_run(args: &[&str]) -> Value {
    let output = open_deno_kv_bench(args);
    assert!(
        output.status.success(),
        "open-deno-kv-bench {args:?} failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

fn result<'a>(report: &'a Value, backend: &str, workload: &str) -> &'a Value {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["backend"] == backend && r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {workload} result for {backend}"))
}

#[test]
fn every_workload_on_every_backend_at_a_tiny_scale() {
    let report = json_run(&["--scale", "0.01", "--json", "--scaling"]);

    for backend in ["memory", "sqlite", "redb"] {
        for workload in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
            let r = result(&report, backend, workload);
            assert!(r["ops"].as_u64().unwrap() > 0, "{backend} {workload}");
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
            assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
        }
        // W5: 8 tasks x 5 increments, exact.
        assert_eq!(result(&report, backend, "W5")["extra"]["final_value"], 40);
        assert_eq!(result(&report, backend, "W7")["ops"], 50);
        assert!(report["peak_rss_kib"][backend].as_u64().unwrap() > 0);
    }
    result(&report, "memory", "W3-1core");
    for floor in ["raw-sqlite", "raw-redb"] {
        for workload in ["W1", "W3", "W4"] {
            result(&report, floor, workload);
        }
    }
    // Backends with a floor carry a ratio to it.
    assert!(
        result(&report, "sqlite", "W3")["vs_floor"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert!(result(&report, "redb", "W1")["vs_floor"].as_f64().unwrap() > 0.0);

    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 6);
    for target in targets {
        let verdict = target["verdict"].as_str().unwrap();
        assert!(verdict == "MET" || verdict == "MISSED", "{target}");
    }

    // Scaling: 100, 1,000 and 10,000 keys at this scale, W3 and W4 on all five targets.
    let scaling = report["scaling"].as_array().unwrap();
    assert_eq!(scaling.len(), 3 * 5 * 2);
    assert!(scaling.iter().any(|r| r["keys"] == 10_000));
}

/// Without the anchor's binary (it is built in its own workspace, open-deno-kv-bench/anchor) the run goes
/// on and says so, in the report and in one line on stderr.
#[test]
fn a_missing_anchor_is_reported_and_the_rest_runs() {
    let missing = std::env::temp_dir().join("no-such-dir/open-deno-kv-bench-anchor");
    let missing = missing.to_str().unwrap();
    let args = [
        "--scale=0.01",
        "--json",
        "--no-floors",
        "--workloads",
        "W1",
        "--backends",
        "memory,denokv",
        "--anchor",
        missing,
    ];
    let output = open_deno_kv_bench(&args);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("NOT MEASURED"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(missing)
            && lines[0].contains("--manifest-path open-deno-kv-bench/anchor")
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["anchor"]["measured"], false);
    assert!(
        report["anchor"]["reason"]
            .as_str()
            .unwrap()
            .contains("NOT MEASURED")
    );
    result(&report, "memory", "W1");
    assert!(
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["backend"] != "denokv")
    );
    assert!(report["against_anchor"].as_array().unwrap().is_empty());
}

#[test]
fn process_durability_runs_the_floors_too() {
    let report = json_run(&[
        "--scale=0.01",
        "--json",
        "--durability",
        "process",
        "--workloads",
        "W1,W3,W4,W7",
        "--backends",
        "sqlite,redb",
    ]);
    assert_eq!(report["config"]["durability"], "process");
    for backend in ["sqlite", "raw-sqlite", "redb", "raw-redb"] {
        result(&report, backend, "W1");
    }
    result(&report, "redb", "W7");
}

/// The current-thread and joined driving modes run every write workload on every engine (the
/// ones whose concurrency is spawned tasks in the default mode are joined futures here).
#[test]
fn every_driving_mode_runs_every_engine() {
    for mode in ["current", "joined"] {
        let report = json_run(&[
            "--scale=0.01",
            "--json",
            "--no-floors",
            "--mode",
            mode,
            "--workloads",
            "W1,W2,W3,W4,W5,W6,W7",
            "--backends",
            "memory,sqlite,redb",
        ]);
        assert_eq!(report["config"]["mode"], mode);
        for backend in ["memory", "sqlite", "redb"] {
            for workload in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
                result(&report, backend, workload);
            }
        }
    }
}

#[test]
fn text_report_names_targets_and_memory() {
    let output = open_deno_kv_bench(&[
        "--scale",
        "0.005",
        "--workloads",
        "W3",
        "--backends",
        "memory",
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("| W3 "));
    assert!(text.contains("open-deno-kv-memory gets/s on one core"));
    assert!(text.contains("Peak memory"));
}

#[test]
fn bad_arguments_exit_2_without_panicking() {
    for args in [
        &["--scale", "0"][..],
        &["--workloads", "W8"],
        &["--durability", "sometimes"],
        &["--mode", "sideways"],
        &["--frobnicate"],
        &["child", "--target", "nothing"],
    ] {
        let output = open_deno_kv_bench(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));
    }
}

/// The postgres targets on a throwaway cluster the run starts itself (with a replica for
/// postgres-replica): every workload's own checks hold, and the batching goal is reported.
#[test]
fn postgres_targets_at_a_tiny_scale() {
    use open_deno_kv_postgres::testing::ServerBinaries;
    if ServerBinaries::find().is_err() && ServerBinaries::skip_requested() {
        eprintln!("\n*** SKIPPED: no PostgreSQL on this machine (KV_POSTGRES_TESTS=skip) ***\n");
        return;
    }
    let report = json_run(&[
        "--scale",
        "0.01",
        "--json",
        "--backends",
        "postgres,postgres-replica",
    ]);
    for workload in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
        let r = result(&report, "postgres", workload);
        assert!(r["ops"].as_u64().unwrap() > 0, "postgres {workload}");
    }
    assert_eq!(
        result(&report, "postgres", "W5")["extra"]["final_value"],
        40
    );
    for workload in ["W3", "W4"] {
        result(&report, "postgres-replica", workload);
    }
    let targets = report["targets"].as_array().unwrap();
    assert!(
        targets.iter().any(|t| t["target"]
            .as_str()
            .is_some_and(|n| n.starts_with("open-deno-kv-postgres W2"))),
        "{targets:?}"
    );
}

/// `diagnose-commits` runs every way of setting, and its page account finds that open-deno-kv-sqlite's
/// commit writes exactly the pages Deno's layout needs: the same frames per commit as the raw
/// Deno-layout writer, one of them `data_version`'s and one the expiry index's.
#[test]
fn diagnose_commits_accounts_for_every_page() {
    let output = open_deno_kv_bench(&["diagnose-commits", "--sets", "50", "--rounds", "1"]);
    assert!(
        output.status.success(),
        "diagnose-commits failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8_lossy(&output.stdout);
    let account = |way: &str| -> Vec<String> {
        let row = report
            .lines()
            // The page rows have four cells (five bars); the timing rows five.
            .find(|line| line.starts_with(&format!("| {way} |")) && line.matches('|').count() == 5)
            .unwrap_or_else(|| panic!("no page account for {way}:\n{report}"));
        row.split('|').map(|cell| cell.trim().to_owned()).collect()
    };
    let layout = account("raw Deno layout");
    let ours = account("open-deno-kv-sqlite (any caller)");
    assert_eq!(layout[2..], ours[2..], "{report}");
    assert!(ours[3].contains("data_version 1.00"), "{report}");
    assert!(ours[3].contains("kv_expiration_ms_idx 1.00"), "{report}");
    let table = account("raw kv table");
    assert!(!table[3].contains("data_version"), "{report}");
}

/// `diagnose-scans` times every way in every round (each checks every entry it scans) and
/// reports each way and every ratio.
#[test]
fn diagnose_scans_reports_every_way() {
    let output = open_deno_kv_bench(&[
        "diagnose-scans",
        "--keys",
        "500",
        "--scans",
        "20",
        "--rounds",
        "2",
    ]);
    assert!(
        output.status.success(),
        "diagnose-scans failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8_lossy(&output.stdout);
    for way in [
        "| raw floor (copy, drop) |",
        "| raw page (owned entries) |",
        "| raw page (shared buffer) |",
        "| open-deno-kv-redb |",
        "| open-deno-kv-redb / raw floor (copy, drop) |",
        "| open-deno-kv-redb / raw page (owned entries) |",
        "| open-deno-kv-redb / raw page (shared buffer) |",
        "| raw page (owned entries) / raw floor (copy, drop) |",
        "| raw page (shared buffer) / raw floor (copy, drop) |",
    ] {
        assert!(report.contains(way), "no row {way}:\n{report}");
    }
    // Four ways, two rounds.
    let progress = String::from_utf8_lossy(&output.stderr);
    assert_eq!(progress.matches("[round ").count(), 8, "{progress}");
}

/// `diagnose-change-log` on every engine (postgres on a throwaway cluster it starts): each one's
/// row is there, measured or "log not offered"; SQLite keeps a log, so its row is measured (the
/// record count after each run with the log on is checked by the command itself).
#[test]
fn diagnose_change_log_reports_every_engine() {
    use open_deno_kv_postgres::testing::ServerBinaries;
    let engines = if ServerBinaries::find().is_err() && ServerBinaries::skip_requested() {
        eprintln!(
            "\n*** postgres SKIPPED: no PostgreSQL on this machine (KV_POSTGRES_TESTS=skip) ***\n"
        );
        "sqlite,redb"
    } else {
        "sqlite,redb,postgres"
    };
    let output = open_deno_kv_bench(&[
        "diagnose-change-log",
        "--sets",
        "30",
        "--rounds",
        "2",
        "--engines",
        engines,
    ]);
    assert!(
        output.status.success(),
        "diagnose-change-log failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = String::from_utf8_lossy(&output.stdout);
    for engine in engines.split(',') {
        let row = report
            .lines()
            .find(|line| line.starts_with(&format!("| {engine} |")))
            .unwrap_or_else(|| panic!("no row for {engine}:\n{report}"));
        assert!(
            row.contains("log not offered") || row.contains("x ("),
            "{row}"
        );
    }
    assert!(
        !report
            .lines()
            .any(|line| line.starts_with("| sqlite |") && line.contains("not offered")),
        "{report}"
    );
    let bad = open_deno_kv_bench(&["diagnose-change-log", "--engines", "memory"]);
    assert_eq!(bad.status.code(), Some(2));
}

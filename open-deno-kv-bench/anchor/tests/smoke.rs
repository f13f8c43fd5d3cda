//! The anchor's binary runs every workload in every driving mode at a tiny scale, through the
//! harness open-deno-kv-bench uses, and each workload's own checks hold (a failed check exits non-zero):
//! the W5 counter exact, the W6 totals exact, every W7 message consumed once.

use std::process::Command;

use serde_json::Value;

fn child(mode: &str) -> Value {
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-anchor-smoke-{mode}-{}",
        std::process::id()
    ));
    let output = Command::new(env!("CARGO_BIN_EXE_open-deno-kv-bench-anchor"))
        .args([
            "child",
            "--target",
            "denokv",
            "--workloads",
            "W1,W2,W3,W4,W5,W6,W7",
        ])
        .args(["--scale", "0.01", "--mode", mode, "--dir"])
        .arg(&dir)
        .output()
        .expect("open-deno-kv-bench-anchor runs");
    assert!(
        output.status.success(),
        "{mode}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!dir.exists(), "the child removes its directory");
    serde_json::from_slice(&output.stdout).expect("one JSON line")
}

fn result<'a>(report: &'a Value, workload: &str) -> &'a Value {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["workload"] == workload)
        .unwrap_or_else(|| panic!("no {workload}"))
}

#[test]
fn every_workload_in_every_mode() {
    for mode in ["multi", "current", "joined"] {
        let report = child(mode);
        assert_eq!(report["target"], "denokv");
        assert_eq!(report["keys"], 1_000);
        for workload in ["W1", "W2", "W3", "W4", "W5", "W6", "W7"] {
            let r = result(&report, workload);
            assert!(
                r["ops_per_sec"].as_f64().expect("ops/s") > 0.0,
                "{mode} {workload}"
            );
            assert!(
                r["p99_us"].as_f64() >= r["p50_us"].as_f64(),
                "{mode} {workload}"
            );
        }
        assert_eq!(result(&report, "W1")["ops"], 200);
        assert_eq!(result(&report, "W2")["ops"], 200);
        assert_eq!(result(&report, "W3")["ops"], 1_000);
        // 8 tasks x 5 increments, each exactly once.
        assert_eq!(result(&report, "W5")["extra"]["final_value"], 40, "{mode}");
        assert_eq!(result(&report, "W6")["ops"], 200);
        assert!(result(&report, "W6")["extra"]["total"].as_u64() > Some(200));
        // Every message consumed once, and the queue empty afterwards (else the child fails).
        assert_eq!(result(&report, "W7")["ops"], 50, "{mode}");
        assert!(report["peak_rss_kib"].as_u64() > Some(0));
    }
}

#[test]
fn about_names_the_engine_and_its_durability() {
    let output = Command::new(env!("CARGO_BIN_EXE_open-deno-kv-bench-anchor"))
        .arg("about")
        .output()
        .expect("runs");
    assert!(output.status.success());
    let about: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(about["engine"], "denokv_sqlite 0.14");
    assert_eq!(about["journal_mode"], "wal");
    assert_eq!(about["synchronous"], 2);
}

#[test]
fn other_targets_and_bad_arguments_are_refused() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_open-deno-kv-bench-anchor"))
            .args(args)
            .output()
            .expect("runs")
            .status
            .code()
    };
    assert_eq!(run(&[]), Some(2));
    assert_eq!(run(&["child", "--target", "denokv"]), Some(2));
    let dir = std::env::temp_dir().join(format!(
        "open-deno-kv-bench-anchor-refuse-{}",
        std::process::id()
    ));
    let dir = dir.to_string_lossy();
    assert_eq!(
        run(&[
            "child",
            "--target",
            "sqlite",
            "--workloads",
            "W1",
            "--scale",
            "0.01",
            "--dir",
            &dir
        ]),
        Some(1)
    );
}

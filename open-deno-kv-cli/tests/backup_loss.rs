//! The loss window of continuous backup, measured: `kv serve --backup-to` on a SQLite file at
//! the default settings (a segment closed at most every second), eight KV Connect writers
//! committing without pause, then the server killed with SIGKILL and the machine taken as lost:
//! only the bucket is left, and the store is restored from it.
//!
//! Checked (each trial): the restore is exactly the store at one of its commits — every write
//! acknowledged at or before the restored versionstamp is there, none after it is — so the
//! acknowledged writes missing are those after the last segment shipped, a suffix of the commit
//! order; nothing in the middle is lost. Reported (not asserted: speed is the benchmarks' to
//! state): how many acknowledged commits are missing, and how long before the kill the oldest
//! of them was acknowledged — the recovery point objective, in commits and seconds.
//!
//! `KV_LOSS_TRIALS=N` runs N trials and prints their figures (BENCHMARKS.md's command:
//! `KV_LOSS_TRIALS=10 cargo test --release -p open-deno-kv-cli --test backup_loss -- --nocapture`).

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{TOKEN, free_port, healthy, kv_ok};
use open_deno_kv::{CommitOutcome, Kv, Versionstamp, key};

/// Concurrent writers.
const WRITERS: u64 = 8;
/// Load before the kill.
const LOAD: Duration = Duration::from_secs(4);

/// One acknowledged write: its number, its commit's versionstamp, and when it was acknowledged.
type Ack = (u64, Versionstamp, Instant);

/// What one trial measured.
struct Trial {
    acknowledged: usize,
    missing: usize,
    /// How long before the kill the oldest missing write was acknowledged.
    window: Duration,
}

fn trial() -> Trial {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = format!("file://{}", bucket.display());
    let port = free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--db", "sqlite:live.sqlite3", "serve", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--backup-to", &to])
        .current_dir(dir.path())
        .env_remove("KV_DB")
        .env("KV_ACCESS_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kv serve never became healthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let kv = runtime
        .block_on(Kv::open(&format!("http://127.0.0.1:{port}/?token={TOKEN}")))
        .unwrap();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (kv, stop) = (kv.clone(), stop.clone());
            runtime.spawn(async move {
                let mut acks: Vec<Ack> = Vec::new();
                let mut n = writer;
                while !stop.load(Ordering::Relaxed) {
                    let outcome = kv.atomic().set(key!["w", n], n).commit().await;
                    if let Ok(CommitOutcome::Committed { versionstamp }) = outcome {
                        acks.push((n, versionstamp, Instant::now()));
                    } else if outcome.is_err() {
                        // The server is gone (killed): nothing after this is acknowledged.
                        break;
                    }
                    n += WRITERS;
                }
                acks
            })
        })
        .collect();
    std::thread::sleep(LOAD);
    // The machine is lost: the server dies mid-stream, only the bucket remains.
    server.kill().unwrap();
    let killed = Instant::now();
    server.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    let acks: Vec<Ack> = writers
        .into_iter()
        .flat_map(|w| runtime.block_on(w).unwrap())
        .collect();
    drop(kv);
    std::fs::remove_file(dir.path().join("live.sqlite3")).unwrap();

    kv_ok(
        dir.path(),
        &["--db", "sqlite:restored.sqlite3", "restore", "--from", &to],
    );
    let present: BTreeSet<u64> = kv_ok(
        dir.path(),
        &[
            "--db",
            "sqlite:restored.sqlite3",
            "list",
            "[\"w\"]",
            "--format",
            "plain-json",
        ],
    )
    .lines()
    .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
    .filter_map(|line| {
        line["key"][1]
            .as_u64()
            .or_else(|| line["key"][1].as_str()?.parse().ok())
    })
    .collect();
    assert!(!acks.is_empty(), "no write was acknowledged");
    // The restored state's commit: the newest acknowledged write it holds.
    let restored_at = acks
        .iter()
        .filter(|(n, _, _)| present.contains(n))
        .map(|(_, v, _)| *v)
        .max();
    let mut missing = Vec::new();
    for (n, versionstamp, at) in &acks {
        let before_cut = restored_at.is_some_and(|cut| *versionstamp <= cut);
        assert_eq!(
            present.contains(n),
            before_cut,
            "write {n} ({versionstamp}) is {} though the restore is at {restored_at:?}: a write \
             in the middle of the log was lost or one after the cut restored",
            if before_cut { "missing" } else { "present" }
        );
        if !before_cut {
            missing.push(*at);
        }
    }
    let window = missing.iter().min().map_or(Duration::ZERO, |oldest| {
        killed.saturating_duration_since(*oldest)
    });
    Trial {
        acknowledged: acks.len(),
        missing: missing.len(),
        window,
    }
}

#[test]
fn a_killed_server_loses_only_the_writes_after_the_last_shipped_segment() {
    let trials: usize = std::env::var("KV_LOSS_TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut results = Vec::new();
    for number in 1..=trials {
        let trial = trial();
        eprintln!(
            "trial {number}: {} acknowledged, {} missing after the restore, the oldest \
             missing acknowledged {:.3} s before the kill",
            trial.acknowledged,
            trial.missing,
            trial.window.as_secs_f64()
        );
        results.push(trial);
    }
    let mut windows: Vec<f64> = results.iter().map(|t| t.window.as_secs_f64()).collect();
    windows.sort_by(f64::total_cmp);
    let mut missing: Vec<usize> = results.iter().map(|t| t.missing).collect();
    missing.sort_unstable();
    eprintln!(
        "loss window over {trials} trial(s): median {:.3} s, max {:.3} s; commits missing: \
         median {}, max {}",
        windows[windows.len() / 2],
        windows[windows.len() - 1],
        missing[missing.len() / 2],
        missing[missing.len() - 1]
    );
}

//! The layout, checked by its other reader: the real denokv 0.14, started with `--sync-from-s3`
//! against a bucket that `kv replicate` wrote into moto, serves the same entries as the source
//! store (keys, value bytes and encodings, versionstamps), read through our KV Connect client
//! (`kv list --format json` of `http://…`); and `denokv pitr list` shows the bucket's
//! recovery points (all but the log's first commit, which denokv 0.14 takes as its starting
//! state and does not list: see the test). Expiry travels in the bucket (and a restore from it keeps it, checked here
//! too), but denokv 0.14 drops it when it loads a snapshot: its loader writes no expiry, so its
//! replica serves an entry past its expiry. That is denokv's limit, not the layout's.
//!
//! denokv is found in `DENOKV_BIN` or where `.ci/install-denokv` builds it (the target
//! directory's `denokv-0.14.0/bin/denokv`); missing, the test fails with how to build it unless
//! `KV_DENOKV_TESTS=skip`. moto likewise, unless `KV_S3_TESTS=skip`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::free_port;
use open_deno_kv_test_services::{S3TestServer, denokv_or_skip};
use serde_json::Value as Json;

/// denokv's access token.
const DENOKV_TOKEN: &str = "denokv-interop-token";
/// Far above the seconds denokv takes to sync: only a hang fails.
const WITHIN: Duration = Duration::from_secs(120);

/// `kv ARGS` in `dir` with the S3 server's environment; stdout, the command must succeed.
fn kv(s3: &S3TestServer, dir: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(args)
        .current_dir(dir)
        .env_remove("KV_DB")
        .envs(s3.env())
        .output()
        .unwrap_or_else(|e| panic!("cannot run kv: {e}"));
    assert!(
        output.status.success(),
        "kv {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The entries of `kv list --format json`, as (key, typed value, value bytes, versionstamp):
/// what KV Connect carries, and so what can be compared between our store and denokv.
fn entries(listing: &str) -> Vec<(Json, Json, Json, Json)> {
    listing
        .lines()
        .filter_map(|line| serde_json::from_str::<Json>(line).ok())
        .filter(|line| line.get("key").is_some())
        .map(|line| {
            (
                line["key"].clone(),
                line["value"].clone(),
                line["bytes"].clone(),
                line["versionstamp"].clone(),
            )
        })
        .collect()
}

/// A denokv process; killed on drop.
struct Denokv(Child);

impl Drop for Denokv {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn denokv_serves_what_our_shipper_wrote_and_lists_its_recovery_points() {
    let Some(denokv) = denokv_or_skip() else {
        return;
    };
    let Some(s3) = S3TestServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = "interop/db/";
    let to = s3.url(prefix);
    let db = "sqlite:source.sqlite3";

    // A snapshot with every value encoding and an expiring entry, then log segments: sets,
    // overwrites, deletes, sums.
    kv(
        &s3,
        dir.path(),
        &["--db", db, "set", "[\"s\", \"text\"]", "\"hello\""],
    );
    kv(
        &s3,
        dir.path(),
        &[
            "--db",
            db,
            "set",
            "[\"s\", \"object\"]",
            "{\"a\": [1, 2.5, null]}",
        ],
    );
    kv(
        &s3,
        dir.path(),
        &[
            "--db",
            db,
            "set",
            "[\"s\", \"bytes\"]",
            "00ff10",
            "--type",
            "bytes",
        ],
    );
    kv(
        &s3,
        dir.path(),
        &["--db", db, "set", "[\"s\", \"u64\"]", "41", "--type", "u64"],
    );
    kv(
        &s3,
        dir.path(),
        &[
            "--db",
            db,
            "set",
            "[\"s\", \"later\"]",
            "1",
            "--expire-in",
            "1h",
        ],
    );
    kv(
        &s3,
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    for n in 0..10 {
        kv(
            &s3,
            dir.path(),
            &[
                "--db",
                db,
                "set",
                &format!("[\"log\", {n}n]"),
                &n.to_string(),
            ],
        );
    }
    kv(
        &s3,
        dir.path(),
        &["--db", db, "set", "[\"s\", \"text\"]", "\"changed\""],
    );
    kv(&s3, dir.path(), &["--db", db, "delete", "[\"log\", 3n]"]);
    kv(
        &s3,
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    let source = entries(&kv(
        &s3,
        dir.path(),
        &["--db", db, "list", "--format", "json"],
    ));
    assert!(source.len() >= 14, "{source:?}");

    // denokv follows the bucket as a read replica.
    let file = dir.path().join("denokv.sqlite3");
    let port = free_port();
    let log = dir.path().join("denokv.log");
    let _replica = Denokv(
        Command::new(&denokv)
            .arg("--sqlite-path")
            .arg(&file)
            .args(["serve", "--access-token", DENOKV_TOKEN, "--addr"])
            .arg(format!("127.0.0.1:{port}"))
            .args(s3.denokv_args(prefix))
            .envs(s3.env())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", denokv.display())),
    );
    let url = format!("http://127.0.0.1:{port}/?token={DENOKV_TOKEN}");
    let started = Instant::now();
    let served = loop {
        let output = Command::new(env!("CARGO_BIN_EXE_kv"))
            .args(["--db", &url, "list", "--format", "json"])
            .current_dir(dir.path())
            .env_remove("KV_DB")
            .output()
            .unwrap();
        let served = entries(&String::from_utf8_lossy(&output.stdout));
        if output.status.success() && served == source {
            break served;
        }
        assert!(
            started.elapsed() < WITHIN,
            "denokv never served the source's entries:\nsource: {source:?}\nserved: {served:?}\n{}\n--- denokv log ---\n{}",
            String::from_utf8_lossy(&output.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(served, source);

    // Expiry: the bucket carries it (each entry's metadata, in the layout's KeyMetadata), and
    // a restore from it keeps it; denokv 0.14 drops it when it loads a snapshot (its loader
    // fills no expiry column), so it can only be compared through our reader.
    let expiry = |db: &str| -> Json {
        kv(
            &s3,
            dir.path(),
            &["--db", db, "list", "[\"s\"]", "--format", "json"],
        )
        .lines()
        .filter_map(|line| serde_json::from_str::<Json>(line).ok())
        .find(|line| line["key"].to_string().contains("later"))
        .map(|line| line["expires_at"].clone())
        .unwrap_or_else(|| panic!("no expiring entry in {db}"))
    };
    kv(
        &s3,
        dir.path(),
        &["--db", "sqlite:restored.sqlite3", "restore", "--from", &to],
    );
    let source_expiry = expiry(db);
    assert!(!source_expiry.is_null(), "{source_expiry}");
    assert_eq!(expiry("sqlite:restored.sqlite3"), source_expiry);

    // `denokv pitr list` on the file it synced shows every commit shipped in a segment.
    let listed = Command::new(&denokv)
        .arg("--sqlite-path")
        .arg(&file)
        .args(["pitr", "list"])
        .output()
        .unwrap();
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let pitr: BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.split('\t').next().map(str::to_owned))
        .collect();
    let ours: Json = serde_json::from_str(&kv(
        &s3,
        dir.path(),
        &["backups", "list", &to, "--format", "json"],
    ))
    .unwrap();
    let commits: BTreeSet<String> = ours["recovery_points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|point| point["kind"] == "commit")
        .map(|point| point["versionstamp"].as_str().unwrap().to_owned())
        .collect();
    assert!(commits.len() >= 12, "{ours:#}");
    // denokv lists the states it can check out; every one is a recovery point of ours.
    let unknown: Vec<_> = pitr.difference(&commits).collect();
    assert!(
        unknown.is_empty(),
        "denokv lists points the bucket does not hold: {unknown:?}"
    );
    // It lists every commit of the log but the first after the snapshot. denokv 0.14's first
    // sync replays the fetched log "until the differential" by applying entries until one ends a
    // commit at or past it; a Deploy bucket's log overlaps its snapshot, so that is the
    // differential's own commit, but ours starts right after the snapshot, so denokv's first
    // state is the log's first commit, applied without an undo entry, and `pitr list` (the
    // redo and undo entries) never names it. `kv backups list` does.
    let first = commits.iter().next().cloned();
    let missing: Vec<_> = commits
        .difference(&pitr)
        .filter(|v| Some(*v) != first.as_ref())
        .collect();
    assert!(
        missing.is_empty(),
        "denokv pitr list lacks {missing:?}; it listed {pitr:?}"
    );
}

//! Continuous backup to a real S3-compatible server (moto, started on loopback by
//! open-deno-kv-test-services): `kv replicate --once` and `kv restore --from s3://…`, and `kv
//! serve --backup-to` shipping while it serves, its lag in `/metrics`, the bucket frozen
//! (commits go on, the failure is logged once and then summarised, the `failing` gauge says so),
//! then back (shipping resumes by itself and the bucket holds every commit).
//!
//! Without moto the tests fail with what to install, unless `KV_S3_TESTS=skip`.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TOKEN, free_port, healthy};
use open_deno_kv_test_services::S3TestServer;

/// The longest a state the test waits for may take: far above what it takes (a few seconds),
/// only a hang fails.
const WITHIN: Duration = Duration::from_secs(90);

/// `kv ARGS` in `dir` with the S3 server's environment; (success, stdout, stderr).
fn kv_s3(s3: &S3TestServer, dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(args)
        .current_dir(dir)
        .env_remove("KV_DB")
        .envs(s3.env())
        .output()
        .unwrap_or_else(|e| panic!("cannot run kv: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !stderr.contains("panicked"),
        "kv {args:?} panicked:\n{stderr}"
    );
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    )
}

fn kv_s3_ok(s3: &S3TestServer, dir: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = kv_s3(s3, dir, args);
    assert!(ok, "kv {args:?} failed:\n{stderr}");
    stdout
}

/// The dump of `db` without its header line.
fn entries(s3: &S3TestServer, dir: &Path, db: &str) -> Vec<String> {
    kv_s3_ok(s3, dir, &["dump", db])
        .lines()
        .filter(|line| !line.contains("\"format\""))
        .map(str::to_owned)
        .collect()
}

#[test]
fn replicate_once_to_s3_and_restore_from_it() {
    let Some(s3) = S3TestServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let to = s3.url("kv/once/");
    let db = "sqlite:source.sqlite3";
    for n in 0..20 {
        kv_s3_ok(
            &s3,
            dir.path(),
            &["--db", db, "set", &format!("[\"n\", {n}n]"), &n.to_string()],
        );
    }
    kv_s3_ok(
        &s3,
        dir.path(),
        &["--db", db, "set", "[\"soon\"]", "1", "--expire-in", "1h"],
    );
    kv_s3_ok(
        &s3,
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    let listed = kv_s3_ok(&s3, dir.path(), &["backups", "list", &to]);
    assert!(listed.contains("snapshot"), "{listed}");
    kv_s3_ok(
        &s3,
        dir.path(),
        &["--db", "redb:restored.redb", "restore", "--from", &to],
    );
    assert_eq!(
        entries(&s3, dir.path(), "redb:restored.redb"),
        entries(&s3, dir.path(), db)
    );

    // A bucket that does not exist is named.
    let (ok, _, err) = kv_s3(
        &s3,
        dir.path(),
        &[
            "--db",
            db,
            "replicate",
            "--to",
            "s3://no-such-bucket/kv/",
            "--once",
        ],
    );
    assert!(!ok && err.contains("no-such-bucket"), "{err}");
}

/// `GET /metrics` of the server on `port`: the body.
fn metrics(port: u16) -> String {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let request = "GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let mut answer = String::new();
    if stream.write_all(request.as_bytes()).is_err() || stream.read_to_string(&mut answer).is_err()
    {
        return String::new();
    }
    answer
}

/// The value of the sample `name` (without labels) in a metrics body.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.trim().parse().ok())
}

/// Waits until `what` holds of the metrics, or fails after [`WITHIN`] with them and the log.
fn wait_for_metrics(port: u16, log: &Path, what: &str, holds: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let body = metrics(port);
        if holds(&body) {
            return body;
        }
        assert!(
            started.elapsed() < WITHIN,
            "waited {WITHIN:?} for {what}:\n{body}\n--- log ---\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A `kv serve --backup-to` that ships to moto; killed on drop.
struct Shipping {
    child: Child,
    port: u16,
}

impl Drop for Shipping {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_shipping(s3: &S3TestServer, dir: &Path, db: &str, to: &str, log: &Path) -> Shipping {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args([
            "--db",
            db,
            "serve",
            "--metrics",
            "--warning-interval",
            "2",
            "--addr",
        ])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--backup-to", to])
        .current_dir(dir)
        .env_remove("KV_DB")
        .env("KV_ACCESS_TOKEN", TOKEN)
        .envs(s3.env())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let server = Shipping { child, port };
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < WITHIN,
            "kv serve never became healthy: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

#[test]
fn serve_ships_reports_its_lag_survives_a_frozen_bucket_and_catches_up() {
    let Some(s3) = S3TestServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let to = s3.url("kv/served/");
    let db = "sqlite:served.sqlite3";
    let log = dir.path().join("serve.log");
    let server = serve_shipping(&s3, dir.path(), db, &to, &log);
    let remote = format!("http://127.0.0.1:{}/?token={TOKEN}", server.port);
    for n in 0..5 {
        kv_s3_ok(
            &s3,
            dir.path(),
            &["--db", &remote, "set", &format!("[\"a\", {n}n]"), "1"],
        );
    }
    let body = wait_for_metrics(server.port, &log, "the bucket to catch up", |body| {
        sample(body, "kv_backup_shipping") == Some(1.0)
            && sample(body, "kv_backup_commits_behind") == Some(0.0)
            && sample(body, "kv_backup_segments_total").is_some_and(|n| n >= 1.0)
    });
    assert_eq!(sample(&body, "kv_backup_failing"), Some(0.0), "{body}");

    // The bucket freezes: commits go on, the lag grows, the failure is logged and summarised.
    s3.pause().unwrap();
    for n in 0..5 {
        kv_s3_ok(
            &s3,
            dir.path(),
            &["--db", &remote, "set", &format!("[\"b\", {n}n]"), "2"],
        );
    }
    wait_for_metrics(
        server.port,
        &log,
        "the shipper to report the failure",
        |body| {
            sample(body, "kv_backup_failing") == Some(1.0)
                && sample(body, "kv_backup_commits_behind").is_some_and(|n| n >= 5.0)
                && sample(body, "kv_backup_lag_seconds").is_some_and(|s| s > 0.0)
        },
    );
    s3.resume().unwrap();
    wait_for_metrics(
        server.port,
        &log,
        "shipping to resume and catch up",
        |body| {
            sample(body, "kv_backup_failing") == Some(0.0)
                && sample(body, "kv_backup_commits_behind") == Some(0.0)
        },
    );
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let failures = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("shipping to"))
        .count();
    assert!(failures >= 1, "no WARN line for the failure:\n{text}");
    assert!(
        failures <= 2 + (WITHIN.as_secs() / 2) as usize,
        "a WARN line per attempt rather than a summary:\n{text}"
    );

    kv_s3_ok(
        &s3,
        dir.path(),
        &["--db", "redb:restored.redb", "restore", "--from", &to],
    );
    assert_eq!(
        entries(&s3, dir.path(), "redb:restored.redb"),
        entries(&s3, dir.path(), db)
    );
}

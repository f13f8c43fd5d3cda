//! Continuous backup through the command line, to a local directory (`file://`, no service
//! needed): `kv replicate --once`, `kv backups list` and `status`, `kv restore --from` into
//! another engine at the latest state, at a commit and at a time; and every refusal the issue
//! names, each a clear message and a non-zero exit: an unknown URL scheme, missing credentials,
//! a bucket of another database, a truncated and a corrupt segment (named).

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{kv, kv_fails, kv_ok};

/// `file://` URL of `dir`.
fn file_url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// Sets `["k", n]` in `db` to `value`; returns the commit's versionstamp.
fn set(dir: &Path, db: &str, n: u32, value: &str) -> String {
    kv_ok(dir, &["--db", db, "set", &format!("[\"k\", {n}n]"), value]);
    let out = kv_ok(dir, &["--db", db, "get", &format!("[\"k\", {n}n]")]);
    // `KEY = VALUE  (VERSIONSTAMP)`.
    out.rsplit('(')
        .next()
        .and_then(|rest| rest.get(..20))
        .unwrap_or_else(|| panic!("no versionstamp in {out:?}"))
        .to_owned()
}

/// The dump of `db` without its header line (whose database identity differs per store).
fn entries(dir: &Path, db: &str) -> Vec<String> {
    kv_ok(dir, &["dump", db])
        .lines()
        .filter(|line| !line.contains("\"format\""))
        .map(str::to_owned)
        .collect()
}

#[test]
fn replicate_once_then_list_status_and_restore_at_every_kind_of_point() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = file_url(&bucket);
    let db = "sqlite:source.sqlite3";

    let first = set(dir.path(), db, 1, "\"one\"");
    kv_ok(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    let at_first = entries(dir.path(), db);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let between = chrono::Utc::now().to_rfc3339();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let second = set(dir.path(), db, 2, "\"two\"");
    kv_ok(dir.path(), &["--db", db, "set", "[\"k\", 1n]", "\"uno\""]);
    kv_ok(dir.path(), &["--db", db, "delete", "[\"k\", 2n]"]);

    // Behind: the three commits since the first shipping.
    let status = kv_ok(dir.path(), &["--db", db, "backups", "status", &to]);
    assert!(status.contains("behind: 3 commits"), "{status}");
    kv_ok(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    let status = kv_ok(dir.path(), &["--db", db, "backups", "status", &to]);
    assert!(status.contains("behind: nothing"), "{status}");

    let listed = kv_ok(dir.path(), &["backups", "list", &to]);
    assert!(
        listed.contains(&first) && listed.contains(&second),
        "{listed}"
    );
    let json: serde_json::Value = serde_json::from_str(&kv_ok(
        dir.path(),
        &["backups", "list", &to, "--format", "json"],
    ))
    .unwrap();
    let points = json["recovery_points"].as_array().unwrap();
    assert!(points.len() >= 4, "{json:#}");
    assert!(json["database"].is_string(), "{json:#}");
    for point in points {
        assert!(
            point["at"].is_string() && point["snapshot_bytes"].is_u64(),
            "{point}"
        );
    }

    // Latest, into redb: the store as it is.
    kv_ok(
        dir.path(),
        &["--db", "redb:latest.redb", "restore", "--from", &to],
    );
    assert_eq!(
        entries(dir.path(), "redb:latest.redb"),
        entries(dir.path(), db)
    );
    // At the first commit, by versionstamp.
    kv_ok(
        dir.path(),
        &[
            "--db",
            "sqlite:first.sqlite3",
            "restore",
            "--from",
            &to,
            "--at",
            &first,
        ],
    );
    assert_eq!(entries(dir.path(), "sqlite:first.sqlite3"), at_first);
    // At a time between the first and the second: the first's state.
    kv_ok(
        dir.path(),
        &[
            "--db",
            "sqlite:between.sqlite3",
            "restore",
            "--from",
            &to,
            "--at",
            &between,
        ],
    );
    assert_eq!(entries(dir.path(), "sqlite:between.sqlite3"), at_first);
    // A target that holds data is refused, and keeps it.
    let err = kv_fails(dir.path(), &["--db", db, "restore", "--from", &to]);
    assert!(err.contains("already holds data"), "{err}");
}

#[test]
fn bad_urls_and_missing_credentials_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = "sqlite:source.sqlite3";
    set(dir.path(), db, 1, "1");

    let err = kv_fails(
        dir.path(),
        &["--db", db, "replicate", "--to", "ftp://host/dir", "--once"],
    );
    assert!(
        err.contains("ftp://host/dir") && err.contains("scheme"),
        "{err}"
    );
    let err = kv_fails(dir.path(), &["backups", "list", "bucket-without-scheme"]);
    assert!(err.contains("bucket-without-scheme"), "{err}");

    // No credentials in the environment: refused before anything is sent.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kv"))
        .args([
            "--db",
            db,
            "replicate",
            "--to",
            "s3://some-bucket/kv/",
            "--once",
        ])
        .current_dir(dir.path())
        .env_remove("KV_DB")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{err}");
    assert!(
        err.contains("missing credentials") && err.contains("AWS_ACCESS_KEY_ID"),
        "{err}"
    );

    // A KV Connect URL is shipped by its server, not from here.
    let err = kv_fails(
        dir.path(),
        &[
            "--db",
            "http://127.0.0.1:9/",
            "replicate",
            "--to",
            &file_url(dir.path()),
            "--once",
        ],
    );
    assert!(err.contains("kv serve --backup-to"), "{err}");
    // --at on a file needs --log or --from.
    let err = kv_fails(
        dir.path(),
        &[
            "--db",
            "sqlite:x.sqlite3",
            "restore",
            "f.jsonl",
            "--at",
            "00000000000000010000",
        ],
    );
    assert!(err.contains("--log") && err.contains("--from"), "{err}");
}

#[test]
fn a_bucket_of_another_database_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = file_url(&bucket);
    set(dir.path(), "sqlite:a.sqlite3", 1, "1");
    set(dir.path(), "sqlite:b.sqlite3", 1, "1");
    kv_ok(
        dir.path(),
        &[
            "--db",
            "sqlite:a.sqlite3",
            "replicate",
            "--to",
            &to,
            "--once",
        ],
    );
    let before = kv_ok(dir.path(), &["backups", "list", &to]);

    let err = kv_fails(
        dir.path(),
        &[
            "--db",
            "sqlite:b.sqlite3",
            "replicate",
            "--to",
            &to,
            "--once",
        ],
    );
    assert!(err.contains("holds backups of database"), "{err}");
    assert_eq!(
        kv_ok(dir.path(), &["backups", "list", &to]),
        before,
        "the bucket changed"
    );
}

/// The segment objects (`logs/*.bin`, not this crate's side objects) under `bucket`.
fn segments(bucket: &Path) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(bucket.join("logs"))
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    found.sort();
    found
}

#[test]
fn a_truncated_or_corrupt_segment_is_refused_naming_it_and_nothing_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = file_url(&bucket);
    let db = "sqlite:source.sqlite3";
    set(dir.path(), db, 1, "1");
    kv_ok(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    for n in 2..5 {
        set(dir.path(), db, n, "\"a longer value, so that a cut shows\"");
    }
    kv_ok(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    let found = segments(&bucket);
    let segment = found
        .last()
        .unwrap_or_else(|| panic!("no segment in {}", bucket.display()));
    let name = segment.file_name().unwrap().to_string_lossy().into_owned();
    let whole = std::fs::read(segment).unwrap();

    // Truncated.
    std::fs::write(segment, &whole[..whole.len() / 2]).unwrap();
    let err = kv_fails(
        dir.path(),
        &["--db", "sqlite:cut.sqlite3", "restore", "--from", &to],
    );
    assert!(err.contains(&name), "the segment is not named: {err}");
    assert!(
        !dir.path().join("cut.sqlite3").exists(),
        "a target was left"
    );

    // Same length, damaged bytes.
    let mut damaged = whole.clone();
    for byte in damaged.iter_mut().skip(2) {
        *byte ^= 0x5a;
    }
    std::fs::write(segment, &damaged).unwrap();
    let err = kv_fails(
        dir.path(),
        &["--db", "sqlite:bad.sqlite3", "restore", "--from", &to],
    );
    assert!(err.contains(&name), "the segment is not named: {err}");
    assert!(
        !dir.path().join("bad.sqlite3").exists(),
        "a target was left"
    );

    // Whole again, it restores.
    std::fs::write(segment, &whole).unwrap();
    let out = kv(
        dir.path(),
        &["--db", "sqlite:good.sqlite3", "restore", "--from", &to],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_processes_do_not_ship_one_file_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = file_url(&bucket);
    let db = "sqlite:source.sqlite3";
    set(dir.path(), db, 1, "1");
    let log = dir.path().join("replicate.log");
    let mut shipping = std::process::Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--db", db, "replicate", "--to", &to])
        .current_dir(dir.path())
        .env_remove("KV_DB")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Once it ships (it says so), the file's lock is taken.
    let started = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("shipping sqlite:")
    {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "kv replicate never started shipping: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let err = kv_fails(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
    assert!(err.contains("another process ships"), "{err}");
    shipping.kill().unwrap();
    shipping.wait().unwrap();
    // Its end releases the lock.
    kv_ok(
        dir.path(),
        &["--db", db, "replicate", "--to", &to, "--once"],
    );
}

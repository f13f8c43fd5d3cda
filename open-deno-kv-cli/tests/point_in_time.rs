//! `kv log` and `kv restore --at`, run as a user runs them: the log switched on, a backup, more
//! commits (one of them a mistake), then the database restored into another engine as it was
//! just before the mistake, by versionstamp and by time; a point the log cannot reach is
//! refused and leaves the target absent.

mod common;

use std::path::Path;

use common::{kv, kv_fails, kv_ok};

/// The versionstamp `kv get --format json` prints for `key`.
fn versionstamp_of(dir: &Path, db: &str, key: &str) -> String {
    let out = kv_ok(dir, &["--db", db, "get", key, "--format", "json"]);
    let json: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    json["versionstamp"]
        .as_str()
        .unwrap_or_else(|| panic!("no versionstamp in {out}"))
        .to_owned()
}

fn list(dir: &Path, db: &str) -> String {
    kv_ok(dir, &["--db", db, "list"])
}

#[test]
fn a_database_is_restored_to_the_commit_before_a_mistake() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
    let dir = dir.path();
    let db = "sqlite:live.sqlite3";
    kv_ok(dir, &["--db", db, "set", r#"["users", 0]"#, r#""Root""#]);
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    assert_eq!(status, "change log: off\n");
    kv_ok(dir, &["--db", db, "log", "enable", "--keep", "7d"]);
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    assert!(
        status.starts_with("change log: on, records kept for 7 days\nrecords: 0\n"),
        "{status}"
    );

    kv_ok(dir, &["--db", db, "set", r#"["users", 1]"#, r#""Alice""#]);
    kv_ok(dir, &["--db", db, "set", r#"["users", 2]"#, r#""Bob""#]);
    kv_ok(dir, &["--db", db, "backup", "backup.jsonl"]);
    kv_ok(dir, &["--db", db, "set", r#"["users", 3]"#, r#""Carol""#]);
    let good = versionstamp_of(dir, db, r#"["users", 3]"#);
    let good_state = list(dir, db);
    // The mistake: everything under "users" deleted.
    kv_ok(
        dir,
        &["--db", db, "delete", "--prefix", r#"["users"]"#, "--yes"],
    );
    assert!(list(dir, db).trim().is_empty());
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    assert!(status.contains("records: 4\n"), "{status}");

    let restored = kv(
        dir,
        &[
            "--db",
            "redb:restored.redb",
            "restore",
            "backup.jsonl",
            "--at",
            &good,
            "--log",
            db,
        ],
    );
    let said = String::from_utf8_lossy(&restored.stderr);
    assert!(restored.status.success(), "{said}");
    assert!(said.contains("and 1 logged commit after it"), "{said}");
    assert_eq!(list(dir, "redb:restored.redb"), good_state);
    assert_eq!(
        versionstamp_of(dir, "redb:restored.redb", r#"["users", 3]"#),
        good
    );

    // By time: the clock of this test is the system's, so the time of the mistake is not
    // known; the last record's time restores the last commit, the mistake included.
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    let last_time = status
        .lines()
        .find_map(|line| line.strip_prefix("last: "))
        .and_then(|rest| rest.split(" at ").nth(1))
        .unwrap_or_else(|| panic!("no last record in {status}"))
        .to_owned();
    kv_ok(
        dir,
        &[
            "--db",
            "sqlite:by-time.sqlite3",
            "restore",
            "backup.jsonl",
            "--at",
            &last_time,
            "--log",
            db,
        ],
    );
    assert!(list(dir, "sqlite:by-time.sqlite3").trim().is_empty());

    // A point beyond the log is refused, and the target is not created.
    let err = kv_fails(
        dir,
        &[
            "--db",
            "sqlite:never.sqlite3",
            "restore",
            "backup.jsonl",
            "--at",
            "0000000000ffffff0000",
            "--log",
            db,
        ],
    );
    assert!(err.contains("the change log ends at commit"), "{err}");
    assert!(!dir.join("never.sqlite3").exists());
    // --at needs --log.
    let err = kv_fails(
        dir,
        &["--db", "memory:", "restore", "backup.jsonl", "--at", &good],
    );
    assert!(err.contains("--log"), "{err}");

    kv_ok(dir, &["--db", db, "log", "disable"]);
    assert_eq!(
        kv_ok(dir, &["--db", db, "log", "status"]),
        "change log: off\n"
    );
}

/// Issue 29, through the command: a sibling database that made the same commits has a change
/// log that chains from this database's backup; `--log` naming it is refused, naming both
/// identities, and no target is left. A time before the backup is refused as a versionstamp
/// before it is. A backup whose header versionstamp was edited to `fffffffffffffffe0000` is
/// refused by every engine (redb took it, and every write after the first then failed).
#[test]
fn a_restore_refuses_another_databases_log_an_earlier_time_and_a_doctored_header() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"));
    let dir = dir.path();
    let (live, sibling) = ("sqlite:live.sqlite3", "sqlite:sibling.sqlite3");
    for db in [live, sibling] {
        kv_ok(dir, &["--db", db, "log", "enable", "--keep", "7d"]);
        kv_ok(dir, &["--db", db, "set", r#"["a"]"#, "1"]);
    }
    kv_ok(dir, &["--db", live, "backup", "backup.jsonl"]);
    for db in [live, sibling] {
        kv_ok(dir, &["--db", db, "set", r#"["b"]"#, "2"]);
    }
    let point = versionstamp_of(dir, sibling, r#"["b"]"#);
    assert_eq!(
        point,
        versionstamp_of(dir, live, r#"["b"]"#),
        "the same numbering"
    );
    let header = std::fs::read_to_string(dir.join("backup.jsonl")).expect("backup");
    let header: serde_json::Value =
        serde_json::from_str(header.lines().next().expect("a header")).expect("JSON");
    let ours = header["database"]
        .as_str()
        .expect("the header names the database");

    let restore = |target: &str, file: &str, at: &str, log: &str| {
        kv(
            dir,
            &["--db", target, "restore", file, "--at", at, "--log", log],
        )
    };
    let refused = restore("sqlite:wrong.sqlite3", "backup.jsonl", &point, sibling);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "another database's log was spliced: {said}"
    );
    assert!(said.contains(ours) && said.contains("database"), "{said}");
    assert!(!dir.join("wrong.sqlite3").exists(), "no target left");
    let right = restore("sqlite:right.sqlite3", "backup.jsonl", &point, live);
    assert!(
        right.status.success(),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );

    let refused = restore(
        "sqlite:early.sqlite3",
        "backup.jsonl",
        "2000-01-01T00:00:00Z",
        live,
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a time before the backup restored"
    );
    assert!(said.contains("before the backup"), "{said}");
    assert!(!dir.join("early.sqlite3").exists());

    let backup = std::fs::read_to_string(dir.join("backup.jsonl")).expect("backup");
    let stamp = header["versionstamp"].as_str().expect("versionstamp");
    let doctored = backup.replacen(stamp, "fffffffffffffffe0000", 1);
    std::fs::write(dir.join("doctored.jsonl"), doctored).expect("write");
    for target in ["redb:doctored.redb", "sqlite:doctored.sqlite3"] {
        let err = kv_fails(dir, &["--db", target, "restore", "doctored.jsonl"]);
        assert!(err.contains("damaged or was edited"), "{target}: {err}");
    }
    assert!(!dir.join("doctored.redb").exists());
    assert!(!dir.join("doctored.sqlite3").exists());
}

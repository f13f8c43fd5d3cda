//! `kv backup` and `kv restore`, run as a user runs them:
//!
//! - a backup of a SQLite database restored into redb dumps identically, versionstamps, expiry
//!   and queued messages (ids included) too, and the restored database's next commit is later
//!   than the backup's versionstamp;
//! - a backup is one snapshot while writers commit: that is the conformance suite's case
//!   `backup::an_export_taken_during_writes_holds_whole_commits`, run on every engine;
//! - a truncated backup, or a target that holds data, is refused and leaves the target as it
//!   was (absent, or untouched);
//! - a database served by `kv serve` is backed up through KV Connect (`snapshot/1`) as it is
//!   locally.

mod common;

use std::path::Path;

use common::{kv_fails, kv_ok};
use serde_json::Value as Json;

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"))
}

fn lines(text: &str) -> Vec<Json> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// The lines of a dump, and the database its header names (taken out of the header): a restored
/// database is a database of its own, whose dumps name it, not the one it came from.
fn lines_and_database(text: &str) -> (Vec<Json>, String) {
    let mut lines = lines(text);
    let database = lines[0]
        .as_object_mut()
        .and_then(|header| header.remove("database"))
        .and_then(|database| database.as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("the header names no database: {}", lines[0]));
    (lines, database)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A SQLite database with entries of every encoding, an expiring one, a deleted and rewritten
/// one, and a queued message.
fn populate(dir: &Path, db: &str) {
    kv_ok(
        dir,
        &["--db", db, "set", r#"["users", 1n]"#, r#"{"name":"Alice"}"#],
    );
    kv_ok(
        dir,
        &["--db", db, "set", r#"["hits"]"#, "7", "--type", "u64"],
    );
    kv_ok(
        dir,
        &["--db", db, "set", r#"["raw"]"#, "00ff", "--type", "bytes"],
    );
    let far = "86400000";
    kv_ok(
        dir,
        &[
            "--db",
            db,
            "set",
            r#"["session"]"#,
            r#""s""#,
            "--expire-in",
            far,
        ],
    );
    kv_ok(dir, &["--db", db, "set", r#"["gone"]"#, "1"]);
    kv_ok(dir, &["--db", db, "delete", r#"["gone"]"#]);
    kv_ok(
        dir,
        &["--db", db, "enqueue", r#"{"job":1}"#, "--delay", "3600000"],
    );
}

#[test]
fn a_sqlite_backup_restored_into_redb_dumps_identically() {
    let dir = temp_dir();
    let path = dir.path();
    populate(path, "source.sqlite3");
    kv_ok(path, &["--db", "source.sqlite3", "backup", "backup.jsonl"]);
    let backup = lines(&read(&path.join("backup.jsonl")));
    let header = &backup[0];
    assert_eq!(header["version"], 3);
    assert_eq!(header["consistent"], true);
    let snapshot = header["versionstamp"]
        .as_str()
        .unwrap_or_else(|| panic!("no versionstamp in {header}"))
        .to_owned();
    // Seven commits: the snapshot is the last one.
    assert_eq!(snapshot, "00000000000000070000");
    assert_eq!(
        backup.len(),
        1 + 4 + 1 + 1,
        "header, 4 entries, 1 message, end"
    );
    assert!(backup[5]["id"].is_string(), "message lines keep their id");

    kv_ok(
        path,
        &["--db", "redb:restored.redb", "restore", "backup.jsonl"],
    );
    let (source, source_db) = lines_and_database(&kv_ok(path, &["--db", "source.sqlite3", "dump"]));
    let (restored, restored_db) =
        lines_and_database(&kv_ok(path, &["--db", "redb:restored.redb", "dump"]));
    assert_eq!(
        restored, source,
        "the same entries, versionstamps, expiry and messages"
    );
    let (backup, backup_db) = lines_and_database(&read(&path.join("backup.jsonl")));
    assert_eq!(restored, backup, "and exactly the backup");
    assert_eq!(backup_db, source_db, "the backup names its database");
    assert_ne!(
        restored_db, source_db,
        "a restored database has its own identity"
    );

    let next = kv_ok(
        path,
        &["--db", "redb:restored.redb", "set", r#"["after"]"#, "1"],
    );
    assert!(
        next.trim() > snapshot.as_str(),
        "the first commit after the restore ({}) follows the backup ({snapshot})",
        next.trim()
    );
}

#[test]
fn a_truncated_backup_is_refused_and_leaves_no_target() {
    let dir = temp_dir();
    let path = dir.path();
    populate(path, "source.sqlite3");
    kv_ok(path, &["--db", "source.sqlite3", "backup", "backup.jsonl"]);
    let whole = read(&path.join("backup.jsonl"));
    // Cut at a line boundary (the end line is missing) and in the middle of a line.
    let without_end: String = whole.lines().take(4).map(|l| format!("{l}\n")).collect();
    std::fs::write(path.join("cut.jsonl"), without_end).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(path.join("torn.jsonl"), &whole[..whole.len() / 2])
        .unwrap_or_else(|e| panic!("{e}"));
    for (file, target, why) in [
        ("cut.jsonl", "cut.sqlite3", "incomplete"),
        ("torn.jsonl", "redb:torn.redb", "line"),
    ] {
        let err = kv_fails(path, &["--db", target, "restore", file]);
        assert!(err.contains(why), "{file}: {err}");
    }
    let names: Vec<String> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("cut.sqlite3") || n.starts_with("torn.redb")),
        "no target, not even a partial one: {names:?}"
    );
}

#[test]
fn a_restore_into_a_database_that_holds_data_is_refused_and_changes_nothing() {
    let dir = temp_dir();
    let path = dir.path();
    populate(path, "source.sqlite3");
    kv_ok(path, &["--db", "source.sqlite3", "backup", "backup.jsonl"]);
    kv_ok(path, &["--db", "busy.sqlite3", "set", r#"["mine"]"#, "1"]);
    let before = kv_ok(path, &["--db", "busy.sqlite3", "dump"]);
    let err = kv_fails(path, &["--db", "busy.sqlite3", "restore", "backup.jsonl"]);
    assert!(err.contains("already holds data"), "{err}");
    assert_eq!(kv_ok(path, &["--db", "busy.sqlite3", "dump"]), before);
}

#[test]
fn a_dump_that_is_not_one_snapshot_is_not_restored() {
    let dir = temp_dir();
    let path = dir.path();
    let page_by_page =
        "{\"format\":\"kv-dump\",\"version\":2}\n{\"end\":{\"entries\":0,\"messages\":0}}\n";
    std::fs::write(path.join("old.jsonl"), page_by_page).unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["--db", "new.sqlite3", "restore", "old.jsonl"]);
    assert!(
        err.contains("not a backup") && err.contains("kv load"),
        "{err}"
    );
    assert!(!path.join("new.sqlite3").exists());
}

/// A database served by `kv serve` is backed up through KV Connect (the server's `snapshot/1`
/// extension) exactly as it is locally, and the backup restores.
#[test]
fn a_kv_connect_database_is_backed_up_through_the_server() {
    let dir = temp_dir();
    let path = dir.path();
    populate(path, "source.sqlite3");
    kv_ok(path, &["--db", "source.sqlite3", "backup", "local.jsonl"]);
    let server = common::Server::start(&path.join("source.sqlite3").display().to_string(), &[]);
    let url = format!("{}?token={}", server.url(), common::TOKEN);
    kv_ok(path, &["--db", &url, "backup", "remote.jsonl"]);
    drop(server);
    assert_eq!(
        lines(&read(&path.join("remote.jsonl"))),
        lines(&read(&path.join("local.jsonl")))
    );
    kv_ok(
        path,
        &["--db", "redb:restored.redb", "restore", "remote.jsonl"],
    );
    let (restored, restored_db) =
        lines_and_database(&kv_ok(path, &["--db", "redb:restored.redb", "dump"]));
    let (source, source_db) = lines_and_database(&kv_ok(path, &["--db", "source.sqlite3", "dump"]));
    assert_eq!(restored, source);
    assert_ne!(
        restored_db, source_db,
        "a restored database has its own identity"
    );
}

/// A KV Connect server that cannot be reached: the backup fails and writes no file.
#[test]
fn a_backup_of_an_unreachable_server_fails_and_writes_nothing() {
    let dir = temp_dir();
    kv_fails(
        dir.path(),
        &["--db", "http://127.0.0.1:9/", "backup", "backup.jsonl"],
    );
    assert!(!dir.path().join("backup.jsonl").exists());
}

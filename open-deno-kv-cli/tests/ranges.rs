//! `kv delete --prefix` / `--start --end` (with its confirmation), `kv stats --prefix` and
//! `kv watch --prefix`, run as a user runs them, on a SQLite file and on redb.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::kv;

/// Runs `kv` with `answer` on standard input (`None`: stdin closed at once).
fn kv_answering(dir: &Path, args: &[&str], answer: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(args)
        .current_dir(dir)
        .env_remove("KV_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run kv: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    if let Some(answer) = answer {
        stdin
            .write_all(answer.as_bytes())
            .unwrap_or_else(|e| panic!("cannot answer: {e}"));
    }
    drop(stdin);
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("kv did not finish: {e}"));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));
    output
}

fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "kv failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn keys(dir: &Path, db: &str) -> Vec<String> {
    ok(&kv(dir, &["--db", db, "list", "--format", "plain-json"]))
        .lines()
        .map(|line| {
            let json: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            json["key"].to_string()
        })
        .collect()
}

fn seed(dir: &Path, db: &str) {
    for key in [
        r#"["u",1]"#,
        r#"["u",2]"#,
        r#"["u",2,"x"]"#,
        r#"["u"]"#,
        r#"["v"]"#,
    ] {
        ok(&kv(dir, &["--db", db, "set", key, "1"]));
    }
}

#[test]
fn a_prefix_is_deleted_only_once_confirmed_and_in_one_commit() {
    for db in ["sqlite:t.sqlite3", "redb:t.redb"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let dir = dir.path();
        seed(dir, db);
        let delete = ["--db", db, "delete", "--prefix", r#"["u"]"#];
        for answer in [Some("n\n"), Some(""), None, Some("yes please\n")] {
            let refused = kv_answering(dir, &delete, answer);
            assert_eq!(refused.status.code(), Some(1), "{db} {answer:?}");
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert!(
                stderr.contains(r#"delete 3 entries under ["u"]? [y/N]"#),
                "{stderr}"
            );
            assert!(
                stderr.contains(
                    r#"not deleted: 3 entries under ["u"] stay (confirm with y, or pass --yes)"#
                ),
                "{stderr}"
            );
            assert_eq!(
                keys(dir, db).len(),
                5,
                "{db}: nothing deleted for {answer:?}"
            );
        }
        let stamp = ok(&kv_answering(dir, &delete, Some("y\n")));
        assert_eq!(stamp.trim().len(), 20, "one versionstamp: {stamp}");
        assert_eq!(keys(dir, db), vec![r#"["u"]"#, r#"["v"]"#], "{db}");

        ok(&kv(dir, &["--db", db, "set", r#"["a",1]"#, "1"]));
        ok(&kv(dir, &["--db", db, "set", r#"["a",5]"#, "1"]));
        let between = [
            "--db",
            db,
            "delete",
            "--yes",
            "--start",
            r#"["a",1]"#,
            "--end",
            r#"["a",5]"#,
        ];
        ok(&kv_answering(dir, &between, None));
        assert_eq!(
            keys(dir, db),
            vec![r#"["a",5]"#, r#"["u"]"#, r#"["v"]"#],
            "{db}"
        );
    }
}

#[test]
fn delete_takes_exactly_one_target() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    for args in [
        vec!["delete"],
        vec!["delete", r#"["a"]"#, "--prefix", r#"["b"]"#],
        vec!["delete", "--start", r#"["a"]"#],
        vec!["delete", "--prefix", r#"["a"]"#, "--end", r#"["b"]"#],
    ] {
        let output = kv(dir, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?} is a usage error");
    }
    let bad = kv(dir, &["delete", "--yes", "--prefix", "[nope"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad key"));
}

#[test]
fn stats_of_a_prefix_counts_its_entries_and_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    seed(dir, "t.sqlite3");
    let stats = ok(&kv(
        dir,
        &["--db", "t.sqlite3", "stats", "--prefix", r#"["u"]"#],
    ));
    let stats: serde_json::Value = serde_json::from_str(stats.trim()).expect("JSON");
    // Every value is the same (1, stored as V8): a fifth of the whole file's value bytes each.
    assert_eq!(stats["entries"], 3);
    let all = ok(&kv(dir, &["stats", "t.sqlite3"]));
    let all: serde_json::Value = serde_json::from_str(all.trim()).expect("JSON");
    assert_eq!(all["entries"], 5);
    let per_value = all["value_bytes"].as_u64().expect("number") / 5;
    assert_eq!(stats["value_bytes"].as_u64(), Some(per_value * 3));
    let key_bytes: u64 = [r#"["u",1]"#, r#"["u",2]"#, r#"["u",2,"x"]"#]
        .iter()
        .map(|key| {
            let hex = ok(&kv(dir, &["key", "encode", key]));
            hex.trim().len() as u64 / 2
        })
        .sum();
    assert_eq!(stats["key_bytes"].as_u64(), Some(key_bytes));
}

#[test]
fn watch_of_a_prefix_starts_with_reread_and_follows_another_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    seed(dir, "t.sqlite3");
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args([
            "--db",
            "t.sqlite3",
            "watch",
            "--prefix",
            r#"["w"]"#,
            "--count",
            "2",
            "--format",
            "json",
        ])
        .current_dir(dir)
        .env_remove("KV_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kv watch");
    // Commit from this process until the watcher reports it (it may start after a first one).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut n = 0;
    let output = loop {
        n += 1;
        ok(&kv(
            dir,
            &["--db", "t.sqlite3", "set", r#"["w",1]"#, &n.to_string()],
        ));
        std::thread::sleep(std::time::Duration::from_millis(200));
        let done = watcher.try_wait().expect("kv watch status").is_some();
        if done || std::time::Instant::now() > deadline {
            break watcher.wait_with_output().expect("kv watch output");
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let events: Vec<&str> = stdout.lines().collect();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Another process's commits cannot be named key by key: each is a reread.
    assert_eq!(events, vec![r#"{"reread":true}"#, r#"{"reread":true}"#]);
}

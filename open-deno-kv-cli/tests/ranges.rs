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

/// Issue 32: another process's commits to an SQLite file reach a range watch as "read the
/// range again", and `kv watch --prefix` printed only `reread`, never an entry. It now lists
/// the prefix on each reread and prints what is new, changed or deleted.
#[test]
fn watch_of_a_prefix_prints_what_another_process_changed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let db = "t.sqlite3";
    seed(dir, db);
    ok(&kv(dir, &["--db", db, "set", r#"["w",1]"#, r#""a""#]));
    ok(&kv(dir, &["--db", db, "set", r#"["w",2]"#, r#""b""#]));
    let mut watcher = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--db", db, "watch", "--prefix", r#"["w"]"#])
        .args(["--format", "plain-json"])
        .current_dir(dir)
        .env_remove("KV_DB")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kv watch");
    let stdout = watcher.stdout.take().expect("piped stdout");
    let (lines, events) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let next_event = |what: &str| -> Vec<(String, serde_json::Value)> {
        let line = events
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no event for {what}: {e}"));
        let event: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        event["changed"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: not a change event: {line}"))
            .iter()
            .map(|entry| (entry["key"].to_string(), entry["value"].clone()))
            .collect()
    };
    // The first event lists the prefix as it is.
    assert_eq!(
        next_event("the start"),
        vec![
            (r#"["w",1]"#.to_owned(), serde_json::json!("a")),
            (r#"["w",2]"#.to_owned(), serde_json::json!("b")),
        ]
    );
    // Another process changes one entry: only it is printed.
    ok(&kv(dir, &["--db", db, "set", r#"["w",2]"#, r#""c""#]));
    assert_eq!(
        next_event("a change"),
        vec![(r#"["w",2]"#.to_owned(), serde_json::json!("c"))]
    );
    // Another process deletes one and adds one (keys outside the prefix are not printed).
    ok(&kv(dir, &["--db", db, "delete", r#"["w",1]"#]));
    ok(&kv(dir, &["--db", db, "set", r#"["x"]"#, "1"]));
    ok(&kv(dir, &["--db", db, "set", r#"["w",3]"#, r#""d""#]));
    let mut changed = Vec::new();
    while changed.len() < 2 {
        changed.extend(next_event("a delete and an insert"));
    }
    assert_eq!(
        changed,
        vec![
            (r#"["w",1]"#.to_owned(), serde_json::Value::Null),
            (r#"["w",3]"#.to_owned(), serde_json::json!("d")),
        ]
    );
    // Nothing else was printed, and the watch ran without error until stopped.
    assert!(events.try_recv().is_err(), "an extra event");
    assert!(
        watcher.try_wait().expect("kv watch status").is_none(),
        "kv watch stopped early"
    );
    watcher.kill().expect("stop kv watch");
    let output = watcher.wait_with_output().expect("kv watch output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.is_empty(), "kv watch wrote on stderr: {stderr}");
}

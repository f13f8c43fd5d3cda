//! The habits of the `kv` command (issue 32), run as a user runs it:
//!
//! - `kv check FILE` takes the database as its argument, as `dump` and `stats` do;
//! - durations read the same everywhere: `--expire-in`, `--delay` and `log enable --keep` take
//!   units, and a plain number is milliseconds;
//! - summaries count in English ("1 entry", "7 days"), and a piped stderr gets the summary
//!   only: no progress bar;
//! - `kv set` prints a bare versionstamp into a pipe, and says what it is on a terminal;
//! - shell completions and the manual page come from the one clap definition;
//! - `kv --help` names every database URL form, `postgres://` included.

mod common;

use std::path::Path;
use std::process::Command;

use chrono::Utc;
use common::{kv, kv_fails, kv_ok};
use serde_json::Value as Json;

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"))
}

/// The one line `kv` wrote on stderr; anything else there (a progress bar's drawing, a second
/// line) fails.
fn only_stderr_line(dir: &Path, args: &[&str]) -> String {
    let output = kv(dir, args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "kv {args:?} failed: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "kv {args:?} wrote: {stderr:?}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "kv {args:?} drew on a piped stderr: {stderr:?}"
    );
    stderr.trim_end().to_owned()
}

/// The JSON lines of a dump of `db`, as values.
fn dump_lines(dir: &Path, db: &str) -> Vec<Json> {
    kv_ok(dir, &["dump", db])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

/// Milliseconds from now until the time a dump line holds under `field`.
fn millis_until(line: &Json, field: &str) -> i64 {
    let at = line[field]
        .as_i64()
        .unwrap_or_else(|| panic!("no {field} in {line}"));
    at - Utc::now().timestamp_millis()
}

#[test]
fn check_takes_the_database_as_its_argument_as_dump_and_stats_do() {
    let dir = temp_dir();
    let dir = dir.path();
    kv_ok(dir, &["--db", "app.sqlite3", "set", r#"["a"]"#, "1"]);
    for args in [
        vec!["check", "app.sqlite3"],
        vec!["--db", "app.sqlite3", "check"],
        vec!["--db", "app.sqlite3", "check", "app.sqlite3"],
    ] {
        let report: Json = serde_json::from_str(kv_ok(dir, &args).trim()).expect("JSON");
        assert_eq!(report["ok"], true, "{args:?}");
        assert_eq!(report["entries"], 1, "{args:?}");
    }
    let two = kv_fails(dir, &["--db", "other.sqlite3", "check", "app.sqlite3"]);
    assert!(
        two.contains("other.sqlite3") && two.contains("app.sqlite3"),
        "{two}"
    );
}

#[test]
fn durations_take_units_everywhere_and_plain_numbers_are_milliseconds() {
    let dir = temp_dir();
    let dir = dir.path();
    let db = "d.sqlite3";
    kv_ok(
        dir,
        &["--db", db, "set", r#"["units"]"#, "1", "--expire-in", "60s"],
    );
    kv_ok(
        dir,
        &[
            "--db",
            db,
            "set",
            r#"["plain"]"#,
            "1",
            "--expire-in",
            "60000",
        ],
    );
    kv_ok(
        dir,
        &[
            "--db",
            db,
            "set",
            r#"["long"]"#,
            "1",
            "--expire-in",
            "1h 30m",
        ],
    );
    kv_ok(dir, &["--db", db, "enqueue", "1", "--delay", "5min"]);
    kv_ok(dir, &["--db", db, "enqueue", "2", "--delay", "300000"]);
    let lines = dump_lines(dir, db);
    let entry = |name: &str| {
        lines
            .iter()
            .find(|line| line["key"][0]["string"] == name)
            .unwrap_or_else(|| panic!("no entry {name} in the dump"))
    };
    // Generous bounds: they catch a unit read as another (60 s vs 60 ms vs 60 min), not speed.
    for name in ["units", "plain"] {
        let left = millis_until(entry(name), "expires_at");
        assert!((30_000..=60_000).contains(&left), "{name}: {left} ms");
    }
    let left = millis_until(entry("long"), "expires_at");
    assert!((5_370_000..=5_400_000).contains(&left), "long: {left} ms");
    let messages: Vec<&Json> = lines
        .iter()
        .filter(|l| l.get("message").is_some())
        .collect();
    assert_eq!(messages.len(), 2);
    for message in messages {
        let left = millis_until(message, "ready_at");
        assert!((270_000..=300_000).contains(&left), "{message}: {left} ms");
    }
    kv_ok(dir, &["--db", db, "log", "enable", "--keep", "7d"]);
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    assert!(
        status.starts_with("change log: on, records kept for 7 days\n"),
        "{status}"
    );
    kv_ok(dir, &["--db", db, "log", "enable", "--keep", "90min"]);
    let status = kv_ok(dir, &["--db", db, "log", "status"]);
    assert!(
        status.starts_with("change log: on, records kept for 1 hour 30 minutes\n"),
        "{status}"
    );
    for (flag, command) in [
        ("--expire-in", vec!["set", r#"["x"]"#, "1"]),
        ("--delay", vec!["enqueue", "1"]),
    ] {
        let mut args = vec!["--db", db];
        args.extend(command);
        args.extend([flag, "5 parsecs"]);
        let output = kv(dir, &args);
        assert_eq!(output.status.code(), Some(2), "{args:?} is a usage error");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("60s") && stderr.contains("milliseconds"),
            "{stderr}"
        );
    }
}

/// "dumped 1 entries", "backed up 1 entries": every summary counts in English, and with stderr
/// piped it is the only thing written there (no progress bar drawn into a pipe or a log).
#[test]
fn summaries_count_in_english_and_a_piped_stderr_gets_no_progress_bar() {
    let dir = temp_dir();
    let dir = dir.path();
    let db = "one.sqlite3";
    kv_ok(dir, &["--db", db, "set", r#"["a"]"#, "1"]);
    kv_ok(dir, &["--db", db, "enqueue", "1", "--delay", "1h"]);
    assert_eq!(
        only_stderr_line(dir, &["dump", db, "-o", "one.jsonl"]),
        "dumped 1 entry and 1 queued message into one.jsonl"
    );
    assert!(
        only_stderr_line(dir, &["--db", db, "backup", "b.jsonl"])
            .starts_with("backed up 1 entry and 1 queued message as of versionstamp ")
    );
    assert!(
        only_stderr_line(dir, &["--db", "redb:r.redb", "restore", "b.jsonl"])
            .starts_with("restored 1 entry and 1 queued message into redb:r.redb;")
    );
    assert_eq!(
        only_stderr_line(dir, &["--db", "l.sqlite3", "load", "one.jsonl"]),
        "loaded 1 entry and 1 queued message into l.sqlite3 (0 already expired, skipped)"
    );
    assert_eq!(
        only_stderr_line(dir, &["--db", db, "migrate", "redb:m.redb"]),
        "migrated 1 entry and 1 queued message into redb:m.redb"
    );
    kv_ok(dir, &["--db", "two.sqlite3", "set", r#"["a"]"#, "1"]);
    kv_ok(dir, &["--db", "two.sqlite3", "set", r#"["b"]"#, "1"]);
    assert_eq!(
        only_stderr_line(dir, &["dump", "two.sqlite3", "-o", "two.jsonl"]),
        "dumped 2 entries and 0 queued messages into two.jsonl"
    );
    let refused = kv_fails(dir, &["--db", db, "delete", "--prefix", "[]"]);
    assert!(
        refused.contains("delete 1 entry under []? [y/N]")
            && refused.contains("not deleted: 1 entry under [] stays"),
        "{refused}"
    );
}

/// A versionstamp alone into a pipe (scripts keep `v=$(kv set ...)`); on a terminal, a line
/// that says what it is. The terminal is `script`'s pseudo-terminal (util-linux).
#[test]
fn set_prints_a_bare_versionstamp_into_a_pipe_and_says_what_it_is_on_a_terminal() {
    let dir = temp_dir();
    let dir = dir.path();
    let piped = kv_ok(dir, &["set", r#"["hello"]"#, r#""world""#]);
    assert!(
        piped.trim_end().len() == 20 && piped.trim_end().bytes().all(|b| b.is_ascii_hexdigit()),
        "{piped:?}"
    );
    let command = format!(
        "'{}' set '[\"hello\"]' '\"again\"'",
        env!("CARGO_BIN_EXE_kv")
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir)
        .env_remove("KV_DB")
        .output()
        .unwrap_or_else(|e| panic!("cannot run `script` (util-linux, for a terminal): {e}"));
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains(r#"set ["hello"]: committed at versionstamp "#),
        "{shown:?}"
    );
}

/// The subcommands `kv --help` lists.
fn subcommands(dir: &Path) -> Vec<String> {
    let help = kv_ok(dir, &["--help"]);
    let commands = help
        .split("Commands:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_else(|| panic!("no Commands: section in\n{help}"));
    let names: Vec<String> = commands
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .filter(|name| name != "help")
        .collect();
    assert!(names.len() > 15, "{names:?}");
    names
}

#[test]
fn completions_and_the_man_page_come_from_the_command_definition() {
    let dir = temp_dir();
    let dir = dir.path();
    let names = subcommands(dir);
    let bash = kv_ok(dir, &["completions", "bash"]);
    let script = dir.join("kv.bash");
    std::fs::write(&script, &bash).expect("write the bash script");
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    for shell in ["zsh", "fish"] {
        let text = kv_ok(dir, &["completions", shell]);
        for name in &names {
            assert!(text.contains(name.as_str()), "{shell} lacks {name}");
        }
    }
    for name in &names {
        assert!(bash.contains(name.as_str()), "bash lacks {name}");
    }
    let unknown = kv(dir, &["completions", "cmd.exe"]);
    assert_eq!(unknown.status.code(), Some(2));

    let man = kv_ok(dir, &["man"]);
    assert!(man.starts_with(".ie") || man.contains(".TH kv 1"), "{man}");
    let section = man
        .split(".SH SUBCOMMANDS")
        .nth(1)
        .unwrap_or_else(|| panic!("no SUBCOMMANDS section:\n{man}"));
    for name in &names {
        assert!(
            section.contains(&format!("kv\\-{}(1)", name.replace('-', "\\-"))),
            "the man page does not list {name}:\n{section}"
        );
        // The page it points to exists.
        let page = kv_ok(dir, &["man", name]);
        assert!(page.contains(&format!(".TH kv-{name} 1")), "{page}");
        assert!(page.contains(&format!("kv {name}")), "{page}");
    }
    let unknown = kv(dir, &["man", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn help_names_every_database_url_form() {
    let dir = temp_dir();
    let help = kv_ok(dir.path(), &["--help"]);
    for form in [
        "sqlite:PATH",
        "redb:PATH",
        "memory:",
        "postgres://",
        "http://",
        "https://",
    ] {
        assert!(help.contains(form), "kv --help lacks {form}:\n{help}");
    }
}

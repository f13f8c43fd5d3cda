//! The `kv` command as a new user meets it (issue 15):
//!
//! - reading commands take the database as their argument (`kv dump FILE`, `kv stats FILE`),
//!   and refuse one that disagrees with an explicit `--db`;
//! - `kv --help` lists every database URL form, `http://` included;
//! - a client takes its token from `KV_ACCESS_TOKEN` or Deno's `DENO_KV_ACCESS_TOKEN`, and so
//!   does `kv serve`; a missing token is reported as missing, not as invalid;
//! - a server that is not running fails at once with "connection refused";
//! - `kv serve` answers `/db/…` and `/ephemeral/…` it does not serve with a 404 naming the flag;
//! - `kv watch --format json` prints one JSON array per emission;
//! - `--format plain-json` prints entries as plain JSON, for `jq`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, TOKEN, free_port, run};
use serde_json::{Value as Json, json};

/// What a `kv` run left behind.
struct Outcome {
    args: Vec<String>,
    success: bool,
    stdout: String,
    stderr: String,
}

impl Outcome {
    /// The run's stdout; it must have succeeded.
    fn succeeded(self) -> String {
        assert!(self.success, "kv {:?} failed:\n{}", self.args, self.stderr);
        self.stdout
    }

    /// The run's stderr; it must have failed.
    fn failed(self) -> String {
        assert!(
            !self.success,
            "kv {:?} should have failed; it printed:\n{}",
            self.args, self.stdout
        );
        self.stderr
    }
}

/// Runs `kv ARGS` in `dir` with no `KV_DB` and no token variable but those in `env`.
fn kv(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kv"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("KV_DB")
        .env_remove("KV_ACCESS_TOKEN")
        .env_remove("DENO_KV_ACCESS_TOKEN")
        .envs(env.iter().copied());
    let (success, stdout, stderr) = run(command);
    assert!(
        !stderr.contains("panicked"),
        "kv {args:?} panicked:\n{stderr}"
    );
    Outcome {
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        success,
        stdout,
        stderr,
    }
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"))
}

fn json_lines(text: &str) -> Vec<Json> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

#[test]
fn reading_commands_take_the_database_as_their_argument() {
    let dir = temp_dir();
    let path = dir.path();
    let db = "sqlite:data.sqlite3";
    kv(path, &["--db", db, "set", r#"["a"]"#, "1"], &[]).succeeded();
    kv(path, &["--db", db, "enqueue", "2", "--delay", "60000"], &[]).succeeded();

    let with_flag = kv(path, &["--db", db, "stats"], &[]).succeeded();
    for database in ["data.sqlite3", db] {
        let stats = kv(path, &["stats", database], &[]).succeeded();
        assert_eq!(stats, with_flag, "kv stats {database}");
        let dump = kv(path, &["dump", database], &[]).succeeded();
        assert_eq!(
            dump,
            kv(path, &["--db", db, "dump"], &[]).succeeded(),
            "kv dump {database}"
        );
    }
    assert_eq!(json_lines(&with_flag)[0]["entries"], 1);
    assert_eq!(json_lines(&with_flag)[0]["queued_messages"], 1);

    // With -o, and with --db after the subcommand naming the same database.
    kv(path, &["dump", "data.sqlite3", "-o", "backup.jsonl"], &[]).succeeded();
    assert!(path.join("backup.jsonl").exists());
    kv(path, &["stats", "--db", db, db], &[]).succeeded();

    // The argument wins over KV_DB (a default), but not silently over an explicit --db.
    let stats = kv(path, &["stats", "data.sqlite3"], &[("KV_DB", "memory:")]).succeeded();
    assert_eq!(stats, with_flag);
    for args in [
        ["--db", "memory:", "stats", "data.sqlite3"],
        ["dump", "--db", "memory:", "data.sqlite3"],
    ] {
        let err = kv(path, &args, &[]).failed();
        assert!(
            err.contains("two databases given: --db memory: and the argument data.sqlite3"),
            "{err}"
        );
    }

    // A reading command never creates the file it is given.
    let err = kv(path, &["stats", "missing.sqlite3"], &[]).failed();
    assert!(err.contains("no database at missing.sqlite3"), "{err}");
    assert!(!path.join("missing.sqlite3").exists());
}

#[test]
fn help_lists_every_url_form_and_format() {
    let dir = temp_dir();
    let help = kv(dir.path(), &["--help"], &[]).succeeded();
    for form in [
        "sqlite:PATH",
        "?read_only",
        "?durability=process",
        "redb:PATH",
        "?durability=deferred",
        "memory:",
        "http://HOST:PORT/",
        "http://HOST:PORT/db/NAME",
        "?token=",
        "KV_ACCESS_TOKEN",
        "DENO_KV_ACCESS_TOKEN",
        "kv dump FILE",
    ] {
        assert!(
            help.contains(form),
            "kv --help does not mention {form}:\n{help}"
        );
    }
    let short = kv(dir.path(), &["-h"], &[]).succeeded();
    assert!(short.contains("http://HOST:PORT/PATH"), "{short}");
    for command in ["dump", "stats"] {
        let help = kv(dir.path(), &[command, "--help"], &[]).succeeded();
        assert!(help.contains("[DATABASE]"), "kv {command} --help:\n{help}");
    }
    for command in ["get", "list", "watch"] {
        let help = kv(dir.path(), &[command, "--help"], &[]).succeeded();
        assert!(help.contains("plain-json"), "kv {command} --help:\n{help}");
    }
    let help = kv(dir.path(), &["serve", "--help"], &[]).succeeded();
    assert!(help.contains("DENO_KV_ACCESS_TOKEN"), "{help}");
}

#[test]
fn a_server_that_is_not_running_fails_at_once_with_connection_refused() {
    let dir = temp_dir();
    let url = format!("http://127.0.0.1:{}/", free_port());
    for args in [
        vec!["--db", &url, "get", r#"["a"]"#],
        vec!["--db", &url, "set", r#"["a"]"#, "1"],
        vec!["stats", &url],
    ] {
        let started = Instant::now();
        let err = kv(dir.path(), &args, &[("KV_ACCESS_TOKEN", TOKEN)]).failed();
        let took = started.elapsed();
        assert!(err.to_lowercase().contains("connection refused"), "{err}");
        assert!(err.contains("is the server running?"), "{err}");
        // The issue asks for "within a second or two" instead of ~30 s of silent retries.
        assert!(took < Duration::from_secs(2), "kv {args:?} took {took:?}");
    }
}

#[test]
fn tokens_come_from_either_variable_and_a_missing_one_is_named() {
    let dir = temp_dir();
    for server_variable in ["KV_ACCESS_TOKEN", "DENO_KV_ACCESS_TOKEN"] {
        let server = Server::start_with_token_in("memory:", &[], server_variable);
        let url = server.url();
        kv(
            dir.path(),
            &["--db", &url, "set", r#"["a"]"#, "1"],
            &[("DENO_KV_ACCESS_TOKEN", TOKEN)],
        )
        .succeeded();
        let got = kv(
            dir.path(),
            &["--db", &url, "get", r#"["a"]"#],
            &[("KV_ACCESS_TOKEN", TOKEN)],
        )
        .succeeded();
        assert!(got.starts_with(r#"["a"] = 1"#), "{got}");

        let err = kv(dir.path(), &["--db", &url, "get", r#"["a"]"#], &[]).failed();
        assert!(err.contains("no access token"), "{err}");
        assert!(err.contains("DENO_KV_ACCESS_TOKEN"), "{err}");
        assert!(!err.contains("Invalid access token"), "{err}");

        let err = kv(
            dir.path(),
            &["--db", &url, "get", r#"["a"]"#],
            &[("DENO_KV_ACCESS_TOKEN", "not-the-token-at-all")],
        )
        .failed();
        assert!(err.contains("Invalid access token."), "{err}");
    }

    // A server with no token at all says where to put one.
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let err = kv(
        dir.path(),
        &["--db", "memory:", "serve", "--addr", &addr],
        &[],
    )
    .failed();
    assert!(
        err.contains("KV_ACCESS_TOKEN or DENO_KV_ACCESS_TOKEN"),
        "{err}"
    );
}

#[test]
fn serve_names_the_flag_for_paths_it_does_not_serve() {
    let dir = temp_dir();
    let server = Server::start("memory:", &[]);
    let token = [("KV_ACCESS_TOKEN", TOKEN)];
    let at = |path: &str| format!("{}{path}", server.url());
    let err = kv(
        dir.path(),
        &["--db", &at("db/app"), "get", r#"["a"]"#],
        &token,
    )
    .failed();
    assert!(err.contains("404"), "{err}");
    assert!(err.contains("--db-dir"), "{err}");
    for path in [
        "ephemeral",
        "ephemeral/",
        "ephemeral/:memory:",
        "ephemeral/shared",
    ] {
        let err = kv(dir.path(), &["--db", &at(path), "get", r#"["a"]"#], &token).failed();
        assert!(err.contains("404"), "{path}: {err}");
        assert!(err.contains("--ephemeral"), "{path}: {err}");
    }
    // Paths no flag would serve keep denokv's answer.
    let err = kv(
        dir.path(),
        &["--db", &at("nothing"), "get", r#"["a"]"#],
        &token,
    )
    .failed();
    assert!(err.contains("404 Not Found: Resource not found."), "{err}");

    // With the flags, the same paths are served.
    let dbs = dir.path().join("dbs");
    let server = Server::start(
        "memory:",
        &["--ephemeral".as_ref(), "--db-dir".as_ref(), dbs.as_ref()],
    );
    for path in ["db/app", "ephemeral/shared"] {
        let url = format!("{}{path}", server.url());
        kv(dir.path(), &["--db", &url, "set", r#"["a"]"#, "1"], &token).succeeded();
    }
}

#[test]
fn watch_with_a_json_format_prints_one_array_per_emission() {
    let dir = temp_dir();
    let path = dir.path();
    kv(path, &["set", r#"["a"]"#, "1"], &[]).succeeded();
    for format in ["json", "plain-json"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kv"))
            .args([
                "watch", "--count", "2", "--format", format, r#"["a"]"#, r#"["b"]"#,
            ])
            .current_dir(path)
            .env_remove("KV_DB")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start kv watch: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (lines, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let next = || {
            let line = received
                .recv_timeout(common::DEADLINE)
                .unwrap_or_else(|e| panic!("kv watch printed no emission: {e}"));
            serde_json::from_str::<Json>(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
        };
        let first = next();
        kv(path, &["set", r#"["b"]"#, r#""new""#], &[]).succeeded();
        let second = next();
        let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert!(status.success(), "kv watch --format {format}: {status}");
        kv(path, &["delete", r#"["b"]"#], &[]).succeeded();

        // Each emission is one array holding every watched key, in order.
        let (first, second) = (
            first.as_array().cloned().unwrap_or_default(),
            second.as_array().cloned().unwrap_or_default(),
        );
        assert_eq!(first.len(), 2, "{format}: {first:?}");
        assert_eq!(second.len(), 2, "{format}: {second:?}");
        assert_eq!(
            first[1]["value"],
            Json::Null,
            "{format}: b is absent at first"
        );
        let expected_b = if format == "json" {
            json!({"string": "new"})
        } else {
            json!("new")
        };
        assert_eq!(second[1]["value"], expected_b, "{format}: {second:?}");
        assert_eq!(first[0], second[0], "{format}: a did not change");
    }
}

#[test]
fn list_and_get_print_plain_json_for_jq() {
    let dir = temp_dir();
    let path = dir.path();
    kv(
        path,
        &[
            "set",
            r#"["users", 1n]"#,
            r#"{"name": "Alice", "tags": ["x"], "age": 30.5}"#,
        ],
        &[],
    )
    .succeeded();
    kv(
        path,
        &["set", r#"["users", 2n]"#, "Bob", "--type", "string"],
        &[],
    )
    .succeeded();
    kv(
        path,
        &["set", r#"["hits", true]"#, "41", "--type", "u64"],
        &[],
    )
    .succeeded();
    kv(
        path,
        &[
            "set",
            r#"["blob", b"00ff", 1.5]"#,
            "0102",
            "--type",
            "bytes",
            "--expire-in",
            "3600000",
        ],
        &[],
    )
    .succeeded();
    kv(
        path,
        &[
            "set",
            r#"["when"]"#,
            r#"{"date": "1700000000123"}"#,
            "--type",
            "tagged",
        ],
        &[],
    )
    .succeeded();

    let listed = json_lines(&kv(path, &["list", "--format", "plain-json"], &[]).succeeded());
    let without_stamps: Vec<Json> = listed
        .iter()
        .map(|entry| {
            let mut entry = entry.clone();
            let object = entry
                .as_object_mut()
                .unwrap_or_else(|| panic!("not an object"));
            let stamp = object.remove("versionstamp").unwrap_or_default();
            assert_eq!(stamp.as_str().map(str::len), Some(20), "{stamp}");
            if let Some(at) = object.remove("expires_at") {
                assert!(at.as_str().is_some_and(|at| at.ends_with('Z')), "{at}");
            }
            entry
        })
        .collect();
    assert_eq!(
        without_stamps,
        vec![
            json!({"key": ["blob", {"0": 0, "1": 255}, 1.5], "value": {"0": 1, "1": 2}}),
            json!({"key": ["hits", true], "value": 41}),
            json!({"key": ["users", 1], "value": {"name": "Alice", "tags": ["x"], "age": 30.5}}),
            json!({"key": ["users", 2], "value": "Bob"}),
            json!({"key": ["when"], "value": "2023-11-14T22:13:20.123Z"}),
        ]
    );

    let got = json_lines(
        &kv(
            path,
            &["get", "--format", "plain-json", r#"["users", 1n]"#],
            &[],
        )
        .succeeded(),
    );
    assert_eq!(got, vec![listed[2].clone()]);

    // The default stays JavaScript literals.
    let js = kv(path, &["get", r#"["users", 1n]"#], &[]).succeeded();
    assert!(
        js.starts_with(r#"["users", 1n] = { name: "Alice", tags: ["x"], age: 30.5 }"#),
        "{js}"
    );
}

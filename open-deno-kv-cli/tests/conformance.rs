//! `kv conformance URL` against `kv serve` (memory and SQLite): every case that runs passes,
//! the JSON report says so case by case; a server holding data is refused without
//! `--yes-write` and left intact with it; and a URL that is no KV Connect server (a closed port,
//! an HTML page, a wrong token) gets one line saying why, not a report of failed cases.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output};

use common::{Server, TOKEN, free_port};
use serde_json::Value;

/// Runs `kv conformance ARGS...` with no token in the environment.
fn conformance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kv"))
        .arg("conformance")
        .args(args)
        .env_remove("KV_ACCESS_TOKEN")
        .env_remove("DENO_KV_ACCESS_TOKEN")
        .output()
        .unwrap_or_else(|e| panic!("cannot run kv conformance: {e}"))
}

/// The JSON report on stdout.
fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn cases_with(report: &Value, outcome: &str) -> Vec<String> {
    report["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("no cases in {report}"))
        .iter()
        .filter(|case| case["outcome"] == outcome)
        .map(|case| format!("{}: {}", case["name"], case["detail"]))
        .collect()
}

/// The whole suite against a `kv serve` on `db`: nothing fails, most cases run, and what does
/// not run says why.
fn whole_suite_passes(db: &str) {
    let server = Server::start(db, &[]);
    let output = conformance(&[&server.url(), "--token", TOKEN, "--format", "json"]);
    let report = report(&output);
    let failed = cases_with(&report, "failed");
    assert!(
        failed.is_empty(),
        "failed against kv serve --db {db}:\n{}",
        failed.join("\n")
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = report["summary"]["passed"].as_u64().unwrap_or(0);
    assert!(passed >= 150, "only {passed} cases passed: {report}");
    // Queue cases ran (the server was empty, so its queue was the suite's).
    assert!(
        cases_with(&report, "passed")
            .iter()
            .any(|c| c.contains("queues::")),
        "no queue case ran"
    );
    let not_run = cases_with(&report, "not_run");
    assert!(
        not_run.iter().any(|c| c.contains("needs a manual clock")),
        "{not_run:?}"
    );
    assert!(
        not_run.iter().all(|c| !c.ends_with(": null")),
        "a case not run without a reason: {not_run:?}"
    );
    let offered: Vec<&str> = report["offered"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(offered.contains(&"queues (queue/1)"), "{offered:?}");
}

#[test]
fn kv_serve_on_memory_passes_every_case_that_runs() {
    whole_suite_passes("memory:");
}

#[test]
fn kv_serve_on_sqlite_passes_every_case_that_runs() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = format!("sqlite:{}", dir.path().join("kv.sqlite3").display());
    whole_suite_passes(&db);
}

#[test]
fn a_server_holding_data_needs_yes_write_and_keeps_its_data() {
    let server = Server::start("memory:", &[]);
    let kv = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kv"))
            .arg("--db")
            .arg(server.url())
            .args(args)
            .env("KV_ACCESS_TOKEN", TOKEN)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert!(
        kv(&["set", r#"["theirs"]"#, r#""keep me""#])
            .status
            .success()
    );

    let refused = conformance(&[&server.url(), "--token", TOKEN]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--yes-write"), "{stderr}");
    assert!(refused.stdout.is_empty());

    let output = conformance(&[
        &server.url(),
        "--token",
        TOKEN,
        "--yes-write",
        "--format",
        "json",
        "--filter",
        "basics::",
    ]);
    let report = report(&output);
    assert!(output.status.success(), "{report}");
    assert!(
        report["summary"]["passed"].as_u64().unwrap_or(0) >= 5,
        "{report}"
    );
    // The queue is not the suite's here: its cases do not run, and say why.
    let output = conformance(&[
        &server.url(),
        "--token",
        TOKEN,
        "--yes-write",
        "--format",
        "json",
        "--filter",
        "queues::enqueued_message_is_delivered_with_its_exact_payload",
    ]);
    let not_run = cases_with(&report_of(&output), "not_run");
    assert!(
        not_run.len() == 1 && not_run[0].contains("queue to itself"),
        "{not_run:?}"
    );

    // Their key is still there, and nothing of the suite's is.
    let listed = kv(&["list", "--format", "json"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("keep me"), "{listed}");
    assert_eq!(
        listed.trim().lines().count(),
        1,
        "the suite left keys behind: {listed}"
    );
}

fn report_of(output: &Output) -> Value {
    report(output)
}

/// Asserts that `output` is a failure with exactly one line on stderr containing `expected`,
/// and no report.
fn one_line_refusal(output: &Output, expected: &str) {
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.contains("is not a KV Connect server"), "{stderr}");
    assert!(
        stderr.to_lowercase().contains(expected),
        "{stderr} should say {expected}"
    );
    assert!(
        output.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn a_closed_port_gets_one_line() {
    let url = format!("http://127.0.0.1:{}/", free_port());
    one_line_refusal(&conformance(&[&url, "--token", TOKEN]), "reach");
}

#[test]
fn a_wrong_token_gets_one_line() {
    let server = Server::start("memory:", &[]);
    one_line_refusal(
        &conformance(&[&server.url(), "--token", "not-the-right-token"]),
        "401",
    );
}

#[test]
fn an_html_page_gets_one_line() {
    // A plain HTTP/1.1 web server answering every request with a page.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let port = listener
        .local_addr()
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = "<!DOCTYPE html>\n<html><head><title>Welcome</title></head>\n<body>hello</body></html>\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let url = format!("http://127.0.0.1:{port}/");
    one_line_refusal(&conformance(&[&url, "--token", TOKEN]), "");
}

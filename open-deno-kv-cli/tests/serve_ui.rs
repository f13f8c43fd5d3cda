//! `kv serve --ui` (issue 19) as a user starts it: the explorer's page is served, its JSON calls
//! need the token, and with `--log-format json --log-level debug` each call is logged once (as
//! endpoint `ui_api`) while the token, a wrong token, the keys and the values the calls carried
//! appear nowhere in the log. `--ui-write` alone serves the explorer read-write, and without
//! either flag the page is a 404 naming `--ui`.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{TOKEN, start_logging_memory_server, stop_child};

/// A key part and a value no log line has any reason to contain.
const SECRET_KEY_PART: &str = "ui-key-that-must-not-be-logged-5521";
const SECRET_VALUE: &str = "ui-value-that-must-not-be-logged-8830";
const WRONG_TOKEN: &str = "wrong-token-that-must-not-be-logged-1177";

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn request(port: u16, method: &str, path: &str, auth: Option<&str>, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    if let Some(token) = auth {
        head.push_str(&format!("authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {text:?}"));
    let status = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {text:?}"));
    (status, body.to_owned())
}

#[test]
fn explorer_calls_are_logged_without_token_key_or_value() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("serve.log");
    let (child, port) = start_logging_memory_server(
        &[
            "--ui",
            "--ui-write",
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ],
        &log,
    );
    let (status, page) = request(port, "GET", "/ui", None, "");
    assert_eq!(status, 200);
    assert!(page.contains("KV explorer"), "{page}");

    let key = format!("[\"{SECRET_KEY_PART}\", 1n]");
    let set = serde_json::json!({
        "key": key, "versionstamp": null, "type": "string", "text": SECRET_VALUE,
    });
    let (status, answer) = request(port, "POST", "/ui/api/set", Some(TOKEN), &set.to_string());
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(SECRET_VALUE), "{answer}");
    let list = serde_json::json!({ "prefix": format!("[\"{SECRET_KEY_PART}\"]") });
    let (status, answer) = request(port, "POST", "/ui/api/list", Some(TOKEN), &list.to_string());
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(SECRET_KEY_PART), "{answer}");
    let (status, _) = request(
        port,
        "POST",
        "/ui/api/stats",
        Some(TOKEN),
        &list.to_string(),
    );
    assert_eq!(status, 200);
    let (status, _) = request(
        port,
        "POST",
        "/ui/api/list",
        Some(WRONG_TOKEN),
        &list.to_string(),
    );
    assert_eq!(status, 401);
    let (status, _) = request(port, "POST", "/ui/api/list", None, &list.to_string());
    assert_eq!(status, 401);
    stop_child(child);

    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let calls: Vec<(u64, &str)> = lines
        .iter()
        .filter(|l| l["fields"]["endpoint"] == "ui_api")
        .map(|l| {
            assert_eq!(l["level"], "DEBUG", "{l}");
            assert_eq!(l["fields"]["method"], "POST", "{l}");
            (
                l["fields"]["status"].as_u64().unwrap_or(0),
                l["fields"]["message"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (200, "request"),
            (200, "request"),
            (200, "request"),
            (401, "request"),
            (401, "request")
        ],
        "one line per explorer call: {text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["endpoint"] == "ui" && l["fields"]["status"] == 200),
        "the page is logged too: {text}"
    );
    assert!(
        text.contains("explorer at /ui (read-write)"),
        "the start notice names the explorer: {text}"
    );
    for secret in [TOKEN, WRONG_TOKEN, SECRET_KEY_PART, SECRET_VALUE] {
        assert!(!text.contains(secret), "{secret:?} is in the log: {text}");
    }
}

#[test]
fn the_explorer_is_off_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("serve.log");
    let (child, port) = start_logging_memory_server(&[], &log);
    let (status, body) = request(port, "GET", "/ui", None, "");
    stop_child(child);
    assert_eq!(status, 404);
    assert!(body.contains("--ui"), "{body}");
}

/// Asking to edit asks for the page: `--ui-write` alone serves the explorer, read-write (it was
/// refused as needing `--ui`).
#[test]
fn ui_write_alone_turns_the_explorer_on_read_write() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("serve.log");
    let (child, port) = start_logging_memory_server(&["--ui-write"], &log);
    let (status, page) = request(port, "GET", "/ui", None, "");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("KV explorer"), "{page}");
    let set = serde_json::json!({
        "key": "[\"written\"]", "versionstamp": null, "type": "string", "text": "by the page",
    });
    let (status, answer) = request(port, "POST", "/ui/api/set", Some(TOKEN), &set.to_string());
    stop_child(child);
    assert_eq!(status, 200, "the explorer is read-only: {answer}");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("explorer at /ui (read-write)"), "{text}");
}

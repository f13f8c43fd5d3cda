//! `kv serve --metrics --log-format json --log-level debug` (issue 19): every line the server
//! writes on stderr is a JSON object; a request made with the token is logged once at debug
//! level with its method, endpoint, status and duration; the token, the written key and the
//! written value appear nowhere in the output; `/metrics` answers without the token and counts
//! the write. Without `--metrics`, `/metrics` is a 404.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{TOKEN, start_logging_memory_server, stop_child};
use open_deno_kv_connect::convert;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{AtomicWrite, KvValue, Mutation, encode_key, key};

/// A key and a value no log line has any reason to contain.
const SECRET_KEY_PART: &str = "key-that-must-not-be-logged-4821";
const SECRET_VALUE: &str = "value-that-must-not-be-logged-9137";

/// One HTTP/1.1 request on a fresh connection: (status, body).
fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .unwrap_or_else(|e| panic!("{e}"));
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head: {answer:?}"));
    let status = std::str::from_utf8(&answer[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer:?}"));
    (status, answer[end + 4..].to_vec())
}

#[test]
fn json_logs_carry_requests_but_no_token_key_or_value() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("serve.log");
    let (child, port) = start_logging_memory_server(
        &["--metrics", "--log-format", "json", "--log-level", "debug"],
        &log,
    );
    let bearer = format!("Bearer {TOKEN}");
    let write = AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key![SECRET_KEY_PART]).unwrap_or_else(|e| panic!("{e}")),
            KvValue::Bytes(SECRET_VALUE.as_bytes().to_vec().into()),
        )],
        ..Default::default()
    };
    let body = convert::encode_atomic_write(&write).encode_to_vec();
    let headers = [
        ("authorization", bearer.as_str()),
        ("content-type", "application/x-protobuf"),
        ("x-denokv-version", "3"),
        (
            "x-denokv-database-id",
            "00000000-0000-0000-0000-000000000000",
        ),
    ];
    let (status, answer) = request(port, "POST", "/v2/atomic_write", &headers, &body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));

    // /metrics with no token at all.
    let (status, metrics) = request(port, "GET", "/metrics", &[], &[]);
    assert_eq!(status, 200);
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    assert!(
        metrics.contains("kv_requests_total{endpoint=\"atomic_write\",status=\"200\"} 1\n"),
        "{metrics}"
    );
    assert!(metrics.contains("kv_commits_total 1\n"), "{metrics}");
    stop_child(child);

    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let writes: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"]["endpoint"] == "atomic_write")
        .collect();
    assert_eq!(writes.len(), 1, "one request line for the write: {text}");
    let line = writes[0];
    assert_eq!(line["level"], "DEBUG", "{line}");
    assert_eq!(line["fields"]["message"], "request", "{line}");
    assert_eq!(line["fields"]["method"], "POST", "{line}");
    assert_eq!(line["fields"]["status"], 200, "{line}");
    assert!(line["fields"]["duration_us"].is_u64(), "{line}");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["endpoint"] == "metrics" && l["fields"]["status"] == 200),
        "the scrape is logged too: {text}"
    );
    for secret in [TOKEN, SECRET_KEY_PART, SECRET_VALUE] {
        assert!(!text.contains(secret), "{secret:?} is in the log: {text}");
    }
}

#[test]
fn metrics_are_a_404_without_the_flag() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("serve.log");
    let (child, port) = start_logging_memory_server(&[], &log);
    let bearer = format!("Bearer {TOKEN}");
    let (without_token, _) = request(port, "GET", "/metrics", &[], &[]);
    let (with_token, body) = request(
        port,
        "GET",
        "/metrics",
        &[("authorization", bearer.as_str())],
        &[],
    );
    stop_child(child);
    assert_eq!(without_token, 404);
    assert_eq!(with_token, 404);
    assert!(
        String::from_utf8_lossy(&body).contains("--metrics"),
        "the refusal names the flag"
    );
    // The default text format at the default level: the start notice, no request lines.
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("serving memory:"), "{text}");
    assert!(!text.contains("endpoint"), "no debug lines at info: {text}");
}

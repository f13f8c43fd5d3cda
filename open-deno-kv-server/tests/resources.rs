//! The resource policy (issue 14, defects 3 and 9): idle and slow connections time out, the
//! connection, body-memory and watch caps refuse clearly, and `/db/NAME` databases are capped and
//! closed when idle. Raw HTTP/1.1 over TCP, to control every byte and pause.

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use common::*;
use open_deno_kv_connect::convert;
use open_deno_kv_connect::metadata::DatabaseMetadata;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{Backend, encode_key, key};
use open_deno_kv_server::{Databases, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;
/// Far longer than any timeout configured here: an answer that needs it never comes.
const PATIENCE: Duration = Duration::from_secs(10);

/// A request's head, for `body_len` bytes of body.
fn head(path: &str, headers: &[(&str, &str)], body_len: usize) -> String {
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {body_len}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Sends a whole request on a fresh connection.
async fn request(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(head(path, headers, body.len()).as_bytes())
        .await
        .unwrap();
    stream.write_all(body).await.unwrap();
    stream
}

/// `GET /health` on a fresh connection.
async fn health(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// Reads a response head and, if it has a content-length, its body: (status, body text).
async fn response(stream: &mut TcpStream) -> (u16, String) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok());
                if length.is_none_or(|len| bytes.len() >= end + 4 + len) {
                    let status = head[9..12].parse().unwrap();
                    let body = &bytes[end + 4..end + 4 + length.unwrap_or(0)];
                    return (status, String::from_utf8_lossy(body).into_owned());
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before a whole response: {bytes:?}");
            bytes.extend_from_slice(&buf[..n]);
        }
    };
    timeout(PATIENCE, read).await.expect("no response")
}

/// Whether the server closes `stream` (EOF or reset) within [`PATIENCE`], reading past any data.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

fn quick_config() -> ServerConfig {
    let mut config = config();
    config.resources.idle_timeout = Duration::from_millis(300);
    config.resources.header_timeout = Duration::from_millis(300);
    config.resources.body_timeout = Duration::from_millis(300);
    config
}

fn watch_body() -> Vec<u8> {
    convert::encode_watch(&[encode_key(&key!["w"]).unwrap()]).encode_to_vec()
}

#[tokio::test]
async fn silent_and_preface_only_connections_are_closed_when_idle() {
    let running = start_with(quick_config(), Databases::new(memory())).await;
    let mut silent = TcpStream::connect(running.addr).await.unwrap();
    let mut preface = TcpStream::connect(running.addr).await.unwrap();
    preface
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut kept_alive = health(running.addr).await;
    assert_eq!(response(&mut kept_alive).await.0, 200);
    assert!(
        closed_by_server(&mut silent).await,
        "a silent connection stayed open"
    );
    assert!(
        closed_by_server(&mut preface).await,
        "an HTTP/2 preface-only connection stayed open"
    );
    assert!(
        closed_by_server(&mut kept_alive).await,
        "an idle keep-alive connection stayed open"
    );
    running.shutdown().await.unwrap();
}

/// A peer that connects and never sends a byte gets the header timeout, not the (longer) idle
/// timeout: it must not hold a place under the connection cap for long.
#[tokio::test]
async fn a_silent_connection_gets_the_header_timeout() {
    let mut config = config();
    config.resources.header_timeout = Duration::from_millis(200);
    config.resources.idle_timeout = Duration::from_secs(3600);
    let running = start_with(config, Databases::new(memory())).await;
    let mut silent = TcpStream::connect(running.addr).await.unwrap();
    let mut http2 = TcpStream::connect(running.addr).await.unwrap();
    http2
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut silent).await,
        "a connection that never spoke was kept for the idle timeout"
    );
    // An HTTP/2 connection with no stream is idle, not slow: the idle timeout governs it.
    let mut buf = [0u8; 256];
    let stays_open = timeout(Duration::from_secs(1), async {
        loop {
            match http2.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {} // the server's SETTINGS and their acknowledgement
            }
        }
    })
    .await
    .is_err();
    assert!(
        stays_open,
        "an idle HTTP/2 connection was closed by the header timeout"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn slow_headers_and_slow_bodies_time_out() {
    let running = start_with(quick_config(), Databases::new(memory())).await;
    let mut slow_head = TcpStream::connect(running.addr).await.unwrap();
    slow_head
        .write_all(b"POST /v2/watch HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut slow_head).await,
        "half a request head kept the connection"
    );

    let body = watch_body();
    let mut slow_body = TcpStream::connect(running.addr).await.unwrap();
    let head = head("/v2/watch", &data_headers(), body.len());
    slow_body.write_all(head.as_bytes()).await.unwrap();
    slow_body.write_all(&body[..1]).await.unwrap();
    let (status, text) = response(&mut slow_body).await;
    assert_eq!(
        (status, text.as_str()),
        (408, "Request body not received within 0.3 seconds.")
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn connections_over_the_cap_get_a_clear_refusal() {
    let mut config = config();
    config.resources.max_connections = 2;
    let running = start_with(config, Databases::new(memory())).await;
    let mut first = health(running.addr).await;
    assert_eq!(response(&mut first).await.0, 200);
    let _second = TcpStream::connect(running.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut third = health(running.addr).await;
    assert_eq!(
        response(&mut third).await,
        (
            503,
            "Too many connections to this server (the cap is 2); try again later.\n".into()
        )
    );
    assert!(closed_by_server(&mut third).await);
    // A slot frees when a connection ends.
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fourth = health(running.addr).await;
    assert_eq!(response(&mut fourth).await.0, 200);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn request_bodies_share_a_memory_budget() {
    let mut config = config();
    config.resources.max_body_memory = 100;
    let running = start_with(config, Databases::new(memory())).await;
    // Holds 90 bytes of the budget while it stalls.
    let mut stalled = TcpStream::connect(running.addr).await.unwrap();
    let head_200 = head("/v2/snapshot_read", &data_headers(), 200);
    stalled.write_all(head_200.as_bytes()).await.unwrap();
    stalled.write_all(&[0u8; 90]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut next = request(running.addr, "/v2/watch", &data_headers(), &[0u8; 50]).await;
    assert_eq!(
        response(&mut next).await,
        (
            503,
            "The server is buffering too many request bodies at once (the cap is 100 bytes); \
             try again later."
                .into()
        )
    );
    // The budget comes back when the stalled request ends.
    drop(stalled);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut watch = request(running.addr, "/v2/watch", &data_headers(), &watch_body()).await;
    assert_eq!(response_status_line(&mut watch).await, 200);
    running.shutdown().await.unwrap();
}

/// The status of a streamed response (no content-length to wait for).
async fn response_status_line(stream: &mut TcpStream) -> u16 {
    let mut buf = [0u8; 12];
    timeout(PATIENCE, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buf[9..12]).parse().unwrap()
}

#[tokio::test]
async fn watches_over_the_cap_are_refused_with_a_4xx() {
    let mut config = config();
    config.resources.max_watches = 2;
    let running = start_with(config, Databases::new(memory())).await;
    let mut first = request(running.addr, "/v2/watch", &data_headers(), &watch_body()).await;
    let mut second = request(running.addr, "/v2/watch", &data_headers(), &watch_body()).await;
    assert_eq!(response_status_line(&mut first).await, 200);
    assert_eq!(response_status_line(&mut second).await, 200);
    let mut third = request(running.addr, "/v2/watch", &data_headers(), &watch_body()).await;
    assert_eq!(
        response(&mut third).await,
        (
            429,
            "Too many watches on this server (the cap is 2); close some and try again.".into()
        )
    );
    drop(first);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut fourth = request(running.addr, "/v2/watch", &data_headers(), &watch_body()).await;
    assert_eq!(response_status_line(&mut fourth).await, 200);
    running.shutdown().await.unwrap();
}

/// Counts the databases an opener opened and those closed again.
#[derive(Default)]
struct Census {
    opened: AtomicUsize,
}

#[tokio::test]
async fn named_databases_are_capped_closed_when_idle_and_reopened() {
    let census = Arc::new(Census::default());
    // Weak: the test must not keep the databases in use.
    let opened: Arc<std::sync::Mutex<Vec<Weak<dyn Backend>>>> = Arc::default();
    let opener = {
        let census = census.clone();
        let opened = opened.clone();
        Arc::new(move |_name: &str| {
            census.opened.fetch_add(1, Ordering::SeqCst);
            let backend = memory();
            opened.lock().unwrap().push(Arc::downgrade(&backend));
            Ok(backend)
        })
    };
    let mut config = config();
    config.resources.max_open_databases = 2;
    config.resources.database_idle_timeout = Duration::from_millis(300);
    // Keep-alive frames find out soon that a dropped watch's client is gone.
    config.keep_alive_interval = Duration::from_millis(100);
    let running = start_with(config, Databases::new(memory()).with_opener(opener)).await;
    let auth = [("authorization", BEARER)];

    let exchange = |name: &'static str| {
        let addr = running.addr;
        async move {
            let mut stream = request(addr, &format!("/db/{name}"), &auth, OFFER).await;
            response(&mut stream).await
        }
    };
    let watch_on = |id: String| {
        let addr = running.addr;
        async move {
            let mut headers = data_headers();
            headers.retain(|(name, _)| *name != "x-denokv-database-id");
            let id: &'static str = Box::leak(id.into_boxed_str());
            headers.push(("x-denokv-database-id", id));
            let mut stream = request(addr, "/v2/watch", &headers, &watch_body()).await;
            let status = response_status_line(&mut stream).await;
            (status, stream)
        }
    };
    let id_of = |(status, body): (u16, String)| {
        assert_eq!(status, 200, "{body}");
        DatabaseMetadata::parse(body.as_bytes())
            .unwrap()
            .database_id
            .to_string()
    };
    let a = id_of(exchange("a").await);
    let b = id_of(exchange("b").await);
    // Both held by a watch: a third cannot open.
    let (status_a, watch_a) = watch_on(a.clone()).await;
    let (status_b, watch_b) = watch_on(b.clone()).await;
    assert_eq!((status_a, status_b), (200, 200));
    assert_eq!(
        exchange("c").await,
        (
            503,
            "Too many databases open on this server (the cap is 2); try again later.".into()
        )
    );
    // Released and idle: closed by the sweeper.
    drop((watch_a, watch_b));
    let closed = || {
        opened
            .lock()
            .unwrap()
            .iter()
            .filter(|b| {
                b.upgrade()
                    .is_none_or(|b| b.watch(vec![encode_key(&key!["x"]).unwrap()]).is_err())
            })
            .count()
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while closed() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "idle databases were never closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Their ids still work: the database is opened again.
    let (status, _watch) = watch_on(a).await;
    assert_eq!(status, 200);
    assert_eq!(census.opened.load(Ordering::SeqCst), 3);
    let _c = id_of(exchange("c").await);
    running.shutdown().await.unwrap();
}

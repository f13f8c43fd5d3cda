//! `kv serve` against strangers who hold no token (issue 29, points 4 and 5): 5,000 hostile
//! connections (silent TCP, an HTTP/2 preface and SETTINGS only, request headers a byte at a
//! time), each reopened as soon as the server closes or refuses it, for 60 s, from 24 loopback
//! addresses (127.0.0.2 to 127.0.0.25; all of 127/8 is loopback on Linux), while a client with
//! the token asks every 10 ms: it sees no error and a p99 latency of at most 100 ms. The
//! server's log over the whole run stays a few summary lines per kind and interval.
//!
//! With 24 addresses of 32 unauthorized connections each (the per-address cap), the strangers
//! can fill the connection cap (512 under the descriptor limit below), so eviction at the cap,
//! the authorization deadline and the per-address cap are all at work.
//!
//! The server runs as a child process under `prlimit --nofile=1024:1024`, as `serve_load.rs`'s
//! does. Everything is bounded in count and time and uses loopback only. The hostile side sleeps
//! 2 to 2.5 s between a close and the next connect, to keep this test's own CPU modest on a
//! shared machine (the strangers still open about two thousand connections a second).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

const TOKEN: &str = "admission-test-token-0123456789";
const HOSTILE: usize = 5_000;
const HOSTILE_ADDRESSES: usize = 24;
const LOAD: Duration = Duration::from_secs(60);
const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds (user and system) process `pid` has used, from /proc.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

/// Waits (at most 30 s) until the server answers `/health`.
fn wait_until_healthy(addr: SocketAddr) {
    let started = Instant::now();
    loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(addr) {
            use std::io::{Read, Write};
            let mut answer = String::new();
            let asked =
                stream.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            if asked.is_ok()
                && stream.read_to_string(&mut answer).is_ok()
                && answer.starts_with("HTTP/1.1 200")
            {
                return;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kv serve never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the client with the token saw.
#[derive(Default)]
struct Seen {
    latencies: Vec<Duration>,
    /// Those of the requests on a new connection.
    fresh_latencies: Vec<Duration>,
    errors: Vec<String>,
}

/// The client with the token, a request every 10 ms until `done`: `GET /health` on a keep-alive
/// connection (reopened by the pool if the server closed it) and the metadata exchange on a new
/// connection each time (as a client arriving during the flood would), in turn, both with the
/// token.
fn authorized_client(addr: SocketAddr, done: &AtomicBool) -> Seen {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = |pooled: usize| -> Client<HttpConnector, Full<Bytes>> {
            let mut builder = Client::builder(TokioExecutor::new());
            builder.pool_max_idle_per_host(pooled);
            builder.build_http()
        };
        let (keep_alive, fresh) = (client(1), client(0));
        let mut seen = Seen::default();
        let mut round = 0usize;
        while !done.load(Ordering::SeqCst) {
            let (client, method, path, body) = if round.is_multiple_of(2) {
                (&keep_alive, "GET", "/health", Vec::new())
            } else {
                (&fresh, "POST", "/", OFFER.to_vec())
            };
            let request = Request::builder()
                .method(method)
                .uri(format!("http://{addr}{path}"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let started = Instant::now();
            let answer = tokio::time::timeout(Duration::from_secs(10), async {
                let response = client.request(request).await.map_err(|e| e.to_string())?;
                let status = response.status();
                response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(status)
            })
            .await;
            match answer {
                Ok(Ok(status)) if status == 200 => {
                    seen.latencies.push(started.elapsed());
                    if !round.is_multiple_of(2) {
                        seen.fresh_latencies.push(started.elapsed());
                    }
                }
                Ok(Ok(status)) => seen.errors.push(format!("round {round}: status {status}")),
                Ok(Err(err)) => seen.errors.push(format!("round {round}: {err}")),
                Err(_) => seen
                    .errors
                    .push(format!("round {round}: no answer in 10 s")),
            }
            round += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    })
}

/// What the strangers did, for the report.
#[derive(Default)]
struct Hostile {
    connections: AtomicU64,
    failed_connects: AtomicU64,
}

/// One stranger, until `until`: connects from `from`, behaves as `kind` says until the server
/// closes the connection, waits a moment, and again.
async fn stranger(
    index: usize,
    from: Ipv4Addr,
    addr: SocketAddr,
    until: Instant,
    count: Arc<Hostile>,
) {
    // 2 s, plus up to 0.5 s spread over the strangers, between a close and the next connect.
    let pause = Duration::from_millis(2_000 + (index as u64 * 7_919) % 500);
    let mut buf = [0u8; 1024];
    while Instant::now() < until {
        let socket = TcpSocket::new_v4().unwrap();
        let connected = match socket.bind(SocketAddr::from((from, 0))) {
            Ok(()) => tokio::time::timeout(Duration::from_secs(5), socket.connect(addr)).await,
            Err(_) => Ok(Err(std::io::Error::other("bind"))),
        };
        let Ok(Ok(mut stream)) = connected else {
            count.failed_connects.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(pause).await;
            continue;
        };
        count.connections.fetch_add(1, Ordering::Relaxed);
        let left = until.saturating_duration_since(Instant::now());
        let _ = tokio::time::timeout(left, behave(index % 3, &mut stream, &mut buf)).await;
        drop(stream);
        tokio::time::sleep(pause).await;
    }
}

/// Silent (0), an HTTP/2 preface and SETTINGS (1), or a request head a byte every 500 ms (2),
/// until the server closes the connection.
async fn behave(kind: usize, stream: &mut TcpStream, buf: &mut [u8]) {
    match kind {
        0 => {}
        1 => {
            if stream.write_all(H2_PREFACE).await.is_err() {
                return;
            }
        }
        _ => {
            let head =
                b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            for byte in head.chunks(1) {
                tokio::select! {
                    read = stream.read(buf) => if matches!(read, Ok(0) | Err(_)) { return },
                    () = tokio::time::sleep(Duration::from_millis(500)) => {
                        if stream.write_all(byte).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
    while matches!(stream.read(buf).await, Ok(n) if n > 0) {}
}

#[test]
fn a_client_with_the_token_is_served_while_strangers_flood_the_port() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("kv-serve.log");
    let server = Server(
        Command::new("prlimit")
            .arg("--nofile=1024:1024")
            .arg(env!("CARGO_BIN_EXE_kv"))
            .args(["--db", "memory:", "serve", "--addr"])
            .arg(addr.to_string())
            .env("KV_ACCESS_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("prlimit (util-linux) and the kv binary"),
    );
    wait_until_healthy(addr);
    // This process holds thousands of sockets at times.
    rlimit::increase_nofile_limit(u64::MAX).unwrap();

    // The client with the token has its own thread and runtime, so that the strangers' tasks
    // do not delay it; it connects (and authorizes) before the flood starts.
    let done = Arc::new(AtomicBool::new(false));
    let client = {
        let done = done.clone();
        std::thread::spawn(move || authorized_client(addr, &done))
    };
    std::thread::sleep(Duration::from_millis(200));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let count = Arc::new(Hostile::default());
    runtime.block_on(async {
        let until = Instant::now() + LOAD;
        let mut strangers = JoinSet::new();
        // 250 more every 50 ms, so that the flood builds up over the first second.
        for index in 0..HOSTILE {
            let from = Ipv4Addr::new(127, 0, 0, 2 + (index % HOSTILE_ADDRESSES) as u8);
            strangers.spawn(stranger(index, from, addr, until, count.clone()));
            if index % 250 == 249 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        while let Some(done) = strangers.join_next().await {
            done.unwrap();
        }
    });
    done.store(true, Ordering::SeqCst);
    let mut seen = client.join().unwrap();
    let (server_cpu, test_cpu) = (cpu_seconds(&server.0.id().to_string()), cpu_seconds("self"));
    drop(server);
    let log = std::fs::read_to_string(&log_path).unwrap();
    let log_lines = log.lines().count();

    seen.latencies.sort();
    seen.fresh_latencies.sort();
    let fresh_p99 = seen
        .fresh_latencies
        .get(seen.fresh_latencies.len() * 99 / 100)
        .copied()
        .unwrap_or_default();
    let n = seen.latencies.len();
    let p99 = seen
        .latencies
        .get(n * 99 / 100)
        .copied()
        .unwrap_or_default();
    let p50 = seen.latencies.get(n / 2).copied().unwrap_or_default();
    eprintln!(
        "serve_admission: {} hostile connections made ({} connects failed); the client with the \
         token: {n} answers, {} errors, p50 {p50:?}, p99 {p99:?} (on new connections {fresh_p99:?}), max {:?}; {log_lines} log lines; \
         CPU: server {server_cpu:.1} s, this test {test_cpu:.1} s",
        count.connections.load(Ordering::Relaxed),
        count.failed_connects.load(Ordering::Relaxed),
        seen.errors.len(),
        seen.latencies.last(),
    );
    assert!(
        seen.errors.is_empty(),
        "the client with the token saw {} errors: {:#?}",
        seen.errors.len(),
        &seen.errors[..seen.errors.len().min(20)]
    );
    assert!(n >= 1_000, "only {n} requests were answered in 60 s");
    assert!(
        p99 <= Duration::from_millis(100),
        "the client with the token had a p99 latency of {p99:?} over {n} requests (max {:?})",
        seen.latencies.last()
    );
    assert!(
        count.connections.load(Ordering::Relaxed) >= HOSTILE as u64 * 10,
        "the strangers made only {} connections: the flood did not happen",
        count.connections.load(Ordering::Relaxed)
    );
    // A few lines per kind and 10 s interval (8 kinds, 7 intervals), never a line per
    // connection.
    assert!(
        log_lines <= 150,
        "kv serve wrote {log_lines} log lines under the flood:\n{}",
        log.lines().take(40).collect::<Vec<_>>().join("\n")
    );
}

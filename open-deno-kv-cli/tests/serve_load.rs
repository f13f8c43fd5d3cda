//! `kv serve` under hostile load (issue 14, defects 3 and 5): with a hard descriptor limit of
//! 1024, 2,000 watches open and 5,000 idle connections arriving (the excess refused or closed),
//! a normal client that connected first keeps getting answers within 100 ms at p99.
//!
//! The server runs as a child process under `prlimit --nofile=1024:1024`. Everything is bounded
//! in count and time and uses 127.0.0.1 only. A binary of its own: it opens thousands of sockets.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use open_deno_kv_connect::frames::FrameDecoder;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{encode_key, key};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

const WATCHES: usize = 2_000;
/// Watches per HTTP/2 connection (the server allows 200 streams on one).
const WATCHES_PER_CONNECTION: usize = 100;
const IDLE_CONNECTIONS: usize = 5_000;
/// What `kv serve` lowers `--max-connections` to under a 1024-descriptor limit.
const CONNECTION_CAP: usize = 512;
const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;
const DEFAULT_DB: &str = "00000000-0000-0000-0000-000000000000";

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Server {
    /// The threads of the server process.
    fn threads(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client(http2: bool) -> HttpClient {
    let mut builder = Client::builder(TokioExecutor::new());
    builder.http2_only(http2).pool_max_idle_per_host(1);
    builder.build_http()
}

fn request(addr: SocketAddr, method: &str, path: &str, body: Vec<u8>) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("x-denokv-version", "3")
        .header("x-denokv-database-id", DEFAULT_DB)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// One request of the normal client; its latency.
async fn timed_request(client: &HttpClient, addr: SocketAddr, round: usize) -> Duration {
    let request = if round.is_multiple_of(2) {
        request(addr, "GET", "/health", Vec::new())
    } else {
        request(addr, "POST", "/", OFFER.to_vec())
    };
    let started = Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(10), client.request(request))
        .await
        .expect("the normal client got no answer within 10 s")
        .expect("the normal client's request failed");
    assert_eq!(response.status(), 200, "round {round}");
    response.into_body().collect().await.unwrap();
    started.elapsed()
}

/// Opens watch `index` and counts its first frame in `first_frames`; keeps reading until the
/// stream ends.
async fn watch(client: HttpClient, addr: SocketAddr, index: usize, first_frames: Arc<AtomicUsize>) {
    let keys = vec![encode_key(&key!["watched", index]).unwrap()];
    let body = open_deno_kv_connect::convert::encode_watch(&keys).encode_to_vec();
    let response = client
        .request(request(addr, "POST", "/v2/watch", body))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut decoder = FrameDecoder::default();
    let mut counted = false;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            decoder.push(&data);
        }
        if !counted && matches!(decoder.next_frame(), Ok(Some(_))) {
            counted = true;
            first_frames.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Connects and stays silent; `true` if the server refused or closed the connection within
/// `wait` (a connect that fails or times out counts as refused too).
async fn idle_connection(addr: SocketAddr, wait: Duration) -> (bool, Option<TcpStream>) {
    let Ok(Ok(mut stream)) = tokio::time::timeout(wait, TcpStream::connect(addr)).await else {
        return (true, None);
    };
    let mut buf = [0u8; 512];
    match tokio::time::timeout(wait, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    {
        Ok(()) => (true, None),
        Err(_) => (false, Some(stream)),
    }
}

#[test]
fn kv_serve_stays_responsive_under_idle_connections_and_watches() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let server = Server(
        Command::new("prlimit")
            .arg("--nofile=1024:1024")
            .arg(env!("CARGO_BIN_EXE_kv"))
            .args(["--db", "memory:", "serve", "--open-loopback", "--addr"])
            .arg(addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prlimit (util-linux) and the kv binary"),
    );
    wait_until_healthy(addr);
    // The normal client has its own thread and runtime, so the load generator's thousands of
    // tasks do not delay it; it connects before the load starts and asks every 10 ms.
    let load_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let normal = {
        let load_done = load_done.clone();
        std::thread::spawn(move || normal_client(addr, &load_done))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (refused, watches_started) = runtime.block_on(async {
        // 2,000 watches over 20 HTTP/2 connections, one connection of 100 streams every 100 ms.
        let first_frames = Arc::new(AtomicUsize::new(0));
        let mut watches = JoinSet::new();
        for wave in 0..WATCHES / WATCHES_PER_CONNECTION {
            let h2 = client(true);
            for i in 0..WATCHES_PER_CONNECTION {
                let index = wave * WATCHES_PER_CONNECTION + i;
                watches.spawn(watch(h2.clone(), addr, index, first_frames.clone()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while first_frames.load(Ordering::SeqCst) < WATCHES && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Then 5,000 idle connections, 250 every 100 ms; the cap refuses the excess.
        let mut idle = JoinSet::new();
        for _wave in 0..IDLE_CONNECTIONS / 250 {
            for _ in 0..250 {
                idle.spawn(idle_connection(addr, Duration::from_secs(20)));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut refused = 0;
        let mut still_open: Vec<TcpStream> = Vec::new();
        while let Some(outcome) = idle.join_next().await {
            match outcome.unwrap() {
                (true, _) => refused += 1,
                (false, stream) => still_open.extend(stream),
            }
        }
        // A second under the whole load: the watches and the connections the server kept.
        tokio::time::sleep(Duration::from_secs(1)).await;
        load_done.store(true, Ordering::SeqCst);
        let started = first_frames.load(Ordering::SeqCst);
        drop(still_open);
        watches.abort_all();
        (refused, started)
    });
    let mut latencies = normal.join().unwrap();
    let threads = server.threads();
    eprintln!(
        "serve_load: {refused} of {IDLE_CONNECTIONS} idle connections refused or closed, \
         {watches_started} watches started, {} timed requests, {threads} server threads",
        latencies.len()
    );
    drop(server);
    assert_eq!(
        watches_started, WATCHES,
        "not every watch started within 60 s"
    );
    // The server holds at most its cap (the watches' connections included), so at least the
    // excess of the idle connections was refused or closed.
    assert!(
        refused >= IDLE_CONNECTIONS - CONNECTION_CAP,
        "only {refused} of {IDLE_CONNECTIONS} idle connections were refused or closed"
    );
    latencies.sort();
    assert!(
        latencies.len() >= 100,
        "only {} requests were timed",
        latencies.len()
    );
    let p99 = latencies[latencies.len() * 99 / 100];
    assert!(
        p99 <= Duration::from_millis(100),
        "the normal client's p99 latency was {p99:?} over {} requests (max {:?})",
        latencies.len(),
        latencies.last()
    );
    assert!(threads <= 64, "the server ran {threads} threads");
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

/// The normal client: one keep-alive connection, a request every 10 ms until `load_done`;
/// returns each request's latency.
fn normal_client(addr: SocketAddr, load_done: &std::sync::atomic::AtomicBool) -> Vec<Duration> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let normal = client(false);
        let mut latencies = Vec::new();
        let mut round = 0;
        while !load_done.load(Ordering::SeqCst) {
            latencies.push(timed_request(&normal, addr, round).await);
            round += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies
    })
}

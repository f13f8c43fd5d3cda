//! open-deno-kv-remote against open-deno-kv-server in the same process: a SQLite-backed server, a wrong token, the
//! `open-deno-kv` crate's `http://` URLs, and validation of bad answers.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Enqueue, KvError, KvValue, Mutation, ReadRange, SnapshotRead,
};
use open_deno_kv_remote::{RemoteBackend, RemoteOptions};
use open_deno_kv_server::{Access, Databases, Server, ServerConfig};
use open_deno_kv_sqlite::FileEngine;

const TOKEN: &str = "remote-test-token-0123456789";

async fn start(backend: Arc<dyn Backend>) -> (String, tokio::sync::oneshot::Sender<()>) {
    let (url, stop, _served) = start_joinable(backend).await;
    (url, stop)
}

/// [`start`], with the server's task: it ends once the server has stopped and dropped every
/// connection.
async fn start_joinable(
    backend: Arc<dyn Backend>,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
    config.log_errors = false;
    config.shutdown_grace = Duration::from_millis(100);
    let server = Server::new(config, Databases::new(backend)).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    (format!("http://{addr}/"), stop, served)
}

fn key(name: &str) -> Vec<u8> {
    open_deno_kv_engine_kit::encode_key(&open_deno_kv_engine_kit::key![name]).unwrap()
}

async fn get(kv: &dyn Backend, name: &str) -> Option<open_deno_kv_engine_kit::KvEntry> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key(name))],
        ..Default::default()
    };
    kv.snapshot_read(read)
        .await
        .unwrap()
        .remove(0)
        .entries
        .pop()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_against_a_server_backed_by_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Backend> =
        Arc::new(open_deno_kv_sqlite::SqliteBackend::open(dir.path().join("kv.sqlite3")).unwrap());
    let (url, _stop) = start(sqlite.clone()).await;
    let kv = RemoteBackend::connect(&url, RemoteOptions::new(TOKEN))
        .await
        .unwrap();
    assert!(kv.capabilities().queues && kv.capabilities().watch);

    // Writes through the network are in the server's file, and the other way round.
    let expires = chrono::Utc::now() + chrono::TimeDelta::hours(1);
    let write = AtomicWrite {
        mutations: vec![Mutation {
            expire_at: Some(expires),
            ..Mutation::set(key("a"), KvValue::U64(7))
        }],
        ..Default::default()
    };
    let commit = kv.atomic_write(write).await.unwrap().unwrap();
    let local = get(&*sqlite, "a").await.unwrap();
    assert_eq!(local.versionstamp, commit.versionstamp);
    let remote = get(&kv, "a").await.unwrap();
    assert_eq!(remote.value, KvValue::U64(7));
    assert_eq!(
        remote.expires_at.map(|t| t.timestamp_millis()),
        Some(expires.timestamp_millis()),
        "the expiry extension carries expiry times"
    );
    // So do watch frames (open-deno-kv-connect's frame codec, on both sides).
    let mut watch = kv.watch(vec![key("a")]).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match &first[..] {
        [open_deno_kv_engine_kit::WatchKeyOutput::Changed(Some(entry))] => assert_eq!(
            entry.expires_at.map(|t| t.timestamp_millis()),
            Some(expires.timestamp_millis()),
            "watch frames carry expiry times"
        ),
        other => panic!("unexpected first emission {other:?}"),
    }
    drop(watch);

    // A server-side mutation error keeps its text.
    sqlite
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(key("text"), KvValue::Bytes(vec![1].into()))],
            ..Default::default()
        })
        .await
        .unwrap();
    let err = kv
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::sum(key("text"), KvValue::U64(1))],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );

    // Queues over the network, backed by SQLite's queue tables.
    kv.atomic_write(AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![0xff, 0x0f, 0x49, 0x02],
            ready_at: chrono::Utc::now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), kv.dequeue_next_message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(message.payload(), &[0xff, 0x0f, 0x49, 0x02]);
    message.finish(true).await.unwrap();

    // Watch sees a write made on the server side.
    let mut stream = kv.watch(vec![key("w")]).unwrap();
    use futures::StreamExt;
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(
        first,
        vec![open_deno_kv_engine_kit::WatchKeyOutput::Changed(None)]
    );
    sqlite
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(key("w"), KvValue::U64(1))],
            ..Default::default()
        })
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&next[0], open_deno_kv_engine_kit::WatchKeyOutput::Changed(Some(e)) if e.value == KvValue::U64(1))
    );

    kv.close().await.unwrap();
    assert!(matches!(get_err(&kv).await, KvError::Closed));
    sqlite.close().await.unwrap();
}

async fn get_err(kv: &dyn Backend) -> KvError {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key("a"))],
        ..Default::default()
    };
    kv.snapshot_read(read).await.unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_fails_at_open_with_the_server_s_reason() {
    let (url, _stop) = start(open_deno_kv_server::databases::new_memory_database()).await;
    let err = RemoteBackend::connect(&url, RemoteOptions::new("not-the-token"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("could not open KV Connect database"), "{err}");
    assert!(err.contains("401"), "{err}");
    assert!(err.contains("Invalid access token."), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_is_reported_as_missing_not_invalid() {
    let (url, _stop) = start(open_deno_kv_server::databases::new_memory_database()).await;
    let err = RemoteBackend::connect(&url, RemoteOptions::new(""))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no access token"), "{err}");
    assert!(err.contains("DENO_KV_ACCESS_TOKEN"), "{err}");
    assert!(!err.contains("Invalid access token"), "{err}");
}

/// A port nobody listens on (bound, then closed).
fn closed_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_running_fails_at_once_with_connection_refused() {
    // The default 30 s retry budget: the first contact must not spend it.
    let started = std::time::Instant::now();
    let err = RemoteBackend::connect(
        &format!("http://{}/", closed_port()),
        RemoteOptions::new(TOKEN),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("cannot reach a KV Connect server"), "{err}");
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
    // The issue asks for "within a second or two"; this bound only proves no retries ran.
    assert!(started.elapsed() < Duration::from_secs(2), "{err}");

    // Lazily opened, the first operation fails the same way.
    let lazy = RemoteBackend::connect_lazy(
        &format!("http://{}/", closed_port()),
        RemoteOptions::new(TOKEN),
    )
    .unwrap();
    let err = get_err(&lazy).await.to_string();
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answered_and_then_stopped_is_retried_within_the_budget() {
    let (url, stop, served) =
        start_joinable(open_deno_kv_server::databases::new_memory_database()).await;
    let mut options = RemoteOptions::new(TOKEN);
    options.retry_timeout = Duration::from_millis(500);
    let kv = RemoteBackend::connect(&url, options).await.unwrap();
    assert!(get(&kv, "a").await.is_none());
    stop.send(()).unwrap();
    // Wait until the server has stopped: the port closed and the client's connection gone (the
    // port closes a moment before open connections hear of the shutdown).
    served.await.unwrap().unwrap();
    let started = std::time::Instant::now();
    let err = get_err(&kv).await.to_string();
    assert!(err.contains("unavailable"), "{err}");
    // Back-offs of 100 ms and 200 ms ran before the 500 ms budget was spent.
    assert!(started.elapsed() >= Duration::from_millis(250), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kv_crate_opens_http_urls() {
    let (url, _stop) = start(open_deno_kv_server::databases::new_memory_database()).await;
    let kv = open_deno_kv::Kv::open(&format!("{url}?token={TOKEN}"))
        .await
        .unwrap();
    kv.set(open_deno_kv::key!["hello"], KvValue::U64(42))
        .await
        .unwrap();
    let entry = kv.get(open_deno_kv::key!["hello"]).await.unwrap();
    assert_eq!(entry.value, Some(KvValue::U64(42)));
    kv.close().await.unwrap();

    let wrong: open_deno_kv::BackendUrl = format!("{url}?token=wrong-token-123").parse().unwrap();
    let err = wrong
        .connect(Arc::new(open_deno_kv_engine_kit::SystemClock))
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("Invalid access token."), "{err}");
}

#[test]
fn garbage_urls_are_refused() {
    // https:// is accepted (tests/tls.rs drives it); nothing is sent until the first call.
    assert!(RemoteBackend::connect_lazy("https://h/", RemoteOptions::new("t")).is_ok());
    assert!(RemoteBackend::connect_lazy("ftp://h/", RemoteOptions::new("t")).is_err());
    assert!(RemoteBackend::connect_lazy("http:///x", RemoteOptions::new("t")).is_err());
}

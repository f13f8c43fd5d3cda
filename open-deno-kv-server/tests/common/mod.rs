//! Starting a server on an ephemeral loopback port, and a small HTTP client for the tests.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use open_deno_kv_model::Backend;
use open_deno_kv_server::{Access, Databases, Server, ServerConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A running server; dropping `stop` (or sending) shuts it down.
pub struct Running {
    pub addr: SocketAddr,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<std::io::Result<()>>,
    pub backend: Arc<dyn Backend>,
}

impl Running {
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("server task panicked")
    }
}

pub fn memory() -> Arc<dyn Backend> {
    open_deno_kv_server::databases::new_memory_database()
}

pub async fn start_with(config: ServerConfig, databases: Databases) -> Running {
    let backend = databases.default_database().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(config, databases).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        stop: Some(stop),
        task,
        backend,
    }
}

pub fn config() -> ServerConfig {
    let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
    config.ephemeral = true;
    config.log_errors = false;
    config
}

pub async fn start() -> Running {
    start_with(config(), Databases::new(memory())).await
}

pub fn http1_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn http2_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A response: status, a header or two, body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends a request and returns the response with its body still to read (a watch's stream).
pub async fn open(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: String,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> hyper::Response<hyper::body::Incoming> {
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    client
        .request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap()
}

/// Sends a request and reads the whole response.
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: String,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let response = open(client, method, url, headers, body).await;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

pub const BEARER: &str = "Bearer test-token-0123456789abcdef";

/// The data-path headers Deno sends, for the default database.
pub fn data_headers() -> Vec<(&'static str, &'static str)> {
    vec![
        ("authorization", BEARER),
        ("content-type", "application/x-protobuf"),
        ("x-denokv-version", "3"),
        (
            "x-denokv-database-id",
            "00000000-0000-0000-0000-000000000000",
        ),
    ]
}

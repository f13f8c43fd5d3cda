//! The whole conformance suite through the network: kv-remote → kv-server (h2c on 127.0.0.1) →
//! kv-memory, in one process.
//!
//! Each test context gets its own server with one in-memory store (kept in the context's slot,
//! so opening the backend again on the same context — a reopen — reaches the same data), and the
//! store reads time from the context's manual clock, so expiry and back-off cases move time on
//! the server side.

use std::sync::Arc;

use kv_conformance::{FnFactory, TestContext};
use kv_proto::Backend;
use kv_remote::{RemoteBackend, RemoteOptions};
use kv_server::{Access, Databases, Server, ServerConfig};

const TOKEN: &str = "conformance-token-0123456789";

/// One server per test context, stopped when the context is dropped.
struct Fixture {
    url: Result<String, String>,
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Fixture {
    /// Starts a server on the current runtime (the case's), serving a fresh memory store that
    /// reads time from the context's clock.
    fn start(ctx: &TestContext) -> Fixture {
        match Self::try_start(ctx) {
            Ok((url, stop)) => Fixture {
                url: Ok(url),
                _stop: Some(stop),
            },
            Err(e) => Fixture {
                url: Err(e),
                _stop: None,
            },
        }
    }

    fn try_start(ctx: &TestContext) -> Result<(String, tokio::sync::oneshot::Sender<()>), String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        let store = kv_memory::MemoryStore::new();
        let backend: Arc<dyn Backend> = Arc::new(kv_memory::MemoryBackend::open(
            &store,
            Arc::new(ctx.clock().clone()),
        ));
        let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
        config.log_errors = false;
        config.shutdown_grace = std::time::Duration::from_millis(100);
        let server = Server::new(config, Databases::new(backend)).map_err(|e| e.to_string())?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(listener, async {
            let _ = stopped.await;
        }));
        Ok((format!("http://{addr}/"), stop))
    }
}

kv_conformance::conformance_main!(
    factory = FnFactory::new(|ctx: &TestContext| {
        let fixture = ctx.slot(|| Fixture::start(ctx));
        let mut options = RemoteOptions::new(TOKEN);
        options.clock = Arc::new(ctx.clock().clone());
        async move {
            let url = fixture
                .url
                .clone()
                .map_err(|e| kv_proto::KvError::invalid_argument(format!("server: {e}")))?;
            let backend = RemoteBackend::connect(&url, options).await?;
            Ok(Arc::new(backend) as Arc<dyn Backend>)
        }
    })
    .reopens(true)
);

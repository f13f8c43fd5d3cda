//! The server the conformance runs talk to: one open-deno-kv-server (127.0.0.1) per test context, serving
//! one in-memory store (kept in the context's slot, so opening the backend again on the same
//! context — a reopen — reaches the same data) that reads time from the context's manual clock,
//! so expiry and back-off cases move time on the server side. Plaintext (`conformance.rs`) or
//! TLS (`conformance_tls.rs`).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use open_deno_kv_conformance::{FnFactory, TestContext};
use open_deno_kv_engine_kit::{Backend, KvError};
use open_deno_kv_remote::{RemoteBackend, RemoteOptions};
use open_deno_kv_server::{Access, Databases, Server, ServerConfig, Tls};

const TOKEN: &str = "conformance-token-0123456789";

/// Serving HTTPS: the server's certificate, and the CA file the client trusts.
#[derive(Clone)]
pub struct TlsSetup {
    /// The server's certificate and key.
    pub server: Tls,
    /// The PEM file of the CA that signed it.
    pub ca_file: PathBuf,
}

/// One server per test context, stopped when the context is dropped.
struct Fixture {
    url: Result<String, String>,
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Fixture {
    /// Starts a server on the current runtime (the case's).
    fn start(ctx: &TestContext, tls: Option<Tls>) -> Fixture {
        match Self::try_start(ctx, tls) {
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

    fn try_start(
        ctx: &TestContext,
        tls: Option<Tls>,
    ) -> Result<(String, tokio::sync::oneshot::Sender<()>), String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
        let store = open_deno_kv_memory::MemoryStore::new();
        let backend: Arc<dyn Backend> = Arc::new(open_deno_kv_memory::MemoryBackend::open(
            &store,
            Arc::new(ctx.clock().clone()),
        ));
        let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
        config.log_errors = false;
        config.shutdown_grace = std::time::Duration::from_millis(100);
        let url = match tls {
            // The certificate names localhost and 127.0.0.1.
            Some(_) => format!("https://localhost:{}/", addr.port()),
            None => format!("http://{addr}/"),
        };
        config.tls = tls;
        let server = Server::new(config, Databases::new(backend)).map_err(|e| e.to_string())?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(listener, async {
            let _ = stopped.await;
        }));
        Ok((url, stop))
    }
}

type Opening = Pin<Box<dyn Future<Output = Result<Arc<dyn Backend>, KvError>> + Send>>;

/// The conformance factory: open-deno-kv-remote → open-deno-kv-server (over TLS when `tls` is given) → open-deno-kv-memory.
pub fn factory(
    tls: Option<TlsSetup>,
) -> FnFactory<impl Fn(&TestContext) -> Opening + Send + Sync + 'static> {
    FnFactory::new(move |ctx: &TestContext| -> Opening {
        let server_tls = tls.as_ref().map(|t| t.server.clone());
        let fixture = ctx.slot(|| Fixture::start(ctx, server_tls));
        let mut options = RemoteOptions::new(TOKEN);
        options.clock = Arc::new(ctx.clock().clone());
        options.ca_file = tls.as_ref().map(|t| t.ca_file.clone());
        Box::pin(async move {
            let url = fixture
                .url
                .clone()
                .map_err(|e| KvError::invalid_argument(format!("server: {e}")))?;
            let backend = RemoteBackend::connect(&url, options).await?;
            Ok(Arc::new(backend) as Arc<dyn Backend>)
        })
    })
    .reopens(true)
}

//! # open-deno-kv-server — a KV Connect server for any [`Backend`]
//!
//! Serves Deno KV to `Deno.openKv("http://host:port/...")` (Deno 2.9.6) and to any other KV
//! Connect client, from any `Arc<dyn Backend>` of this workspace:
//!
//! - HTTPS when given a certificate ([`ServerConfig::tls`], [`Tls`]): HTTP/2 or HTTP/1.1
//!   negotiated by ALPN, with rustls, for `Deno.openKv("https://...")`; the certificate is
//!   reloaded by [`Tls::reload`] without dropping connections;
//! - without one, HTTP/2 without TLS (h2c with prior knowledge, which is all Deno speaks to
//!   `http://` URLs) and HTTP/1.1 on the same port. Each kind of port answers a client of the
//!   other kind at once and clearly: a plaintext request to the TLS port gets a plaintext
//!   `400 this port speaks HTTPS`, a TLS handshake to a plaintext port a TLS alert;
//! - `POST <database path>`: the metadata exchange (protocol 3 for Deno's `[1,2,3]`, 2 for
//!   `[1,2]`; see [`databases`] for the paths);
//! - `POST /v2/snapshot_read`, `/v2/atomic_write`, `/v2/watch`: the data path, the database chosen
//!   by `x-denokv-database-id`; watch answers with a never-ending stream of length-prefixed frames,
//!   keep-alives every [`ServerConfig::keep_alive_interval`], and every key in every frame with
//!   `changed = true` and its full entry (Deno 2.9.6 reads `changed = false` as "deleted");
//! - `GET /health`: `200 ok`, no token needed;
//! - `GET /metrics`: counters, gauges and latency histograms in the Prometheus text format, no
//!   token needed, served only when [`ServerConfig::metrics`] is set (404 otherwise; see
//!   [`metrics`] for the families);
//! - `GET /ui`: the web explorer, served only when [`ServerConfig::ui`] is set; its JSON calls
//!   under `/ui/api/` need the token (see [`ui`]);
//! - protocol extensions for this workspace's `open-deno-kv-remote` client, offered in the metadata's
//!   extra `"kvExtensions"` field only to a client that asks for them with the
//!   `x-kv-extensions` request header, so Deno, denokv's clients and Node's `@deno/kv` (which
//!   refuses unknown metadata fields) see the plain protocol ([`ext`]): entry expiry
//!   times in answers (`expiry/1`), "never retry" enqueues (`enqueue-no-retry/1`), and queue
//!   consumption over the network, `POST /v2/queue/dequeue|finish|keepalive` with at-least-once
//!   delivery through leases ([`queue`]), range deletes inside `atomic_write`
//!   (`range-delete/1`), `POST /v2/range/count` (`count/1`) and `POST /v2/range/watch`
//!   (`watch-range/1`, a frame stream like `watch`'s, under the same watch cap) ([`range`]),
//!   and backups and the change log ([`backup`]): `POST /v2/snapshot/export` streams the
//!   backend's consistent snapshot and `/v2/snapshot/import` restores one from a streamed body,
//!   all or nothing (`snapshot/1`; an import is the one body not read whole: it may be any
//!   size, but each frame is capped at [`ServerConfig::max_body_bytes`], it holds that much of
//!   the body memory budget, and each piece must arrive within the body timeout), and
//!   `POST /v2/change_log/status|read|configure` (`change-log/1`; configure is a write). Both
//!   are listed only for a database whose backend has the capability.
//!
//! Logs: [`tracing`] events, never a token, a key or a value: one per request at debug level
//! (method, endpoint, status, duration), internal and connection errors at warn or error with
//! their cause. The program that runs the server installs the subscriber (`kv serve` does).
//!
//! Access: a bearer token compared in constant time, never logged; without one the server only
//! starts when told to run open ([`Access::Open`]) on a loopback address. Request bodies larger
//! than [`MAX_BODY_BYTES`] get 413; malformed requests 400 with a plain-text reason; Deno's limits
//! ([`open_deno_kv_model::Limits`], 100 checks as Deno's client allows) are enforced with denokv's texts.
//!
//! Hostile clients: every resource a client can make the server hold — connections, time to send
//! headers and bodies, idle connections, body memory, watch streams, open `/db/NAME` databases —
//! is capped by [`ResourceLimits`] ([`ServerConfig::resources`]), with a clear refusal over the
//! cap; the [`resources`] module documents the policy and its defaults.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! use std::sync::Arc;
//! use open_deno_kv_server::{Access, Databases, Server, ServerConfig};
//! let backend = open_deno_kv_server::databases::new_memory_database();
//! let config = ServerConfig::new(Access::Token("a-long-secret-token".into()));
//! let server = Server::new(config, Databases::new(backend)).map_err(std::io::Error::other)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:4512").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

pub mod backup;
mod connection;
pub mod databases;
pub mod ext;
mod handler;
pub mod metrics;
pub mod queue;
mod quick_ack;
pub mod range;
mod range_watch;
pub mod resources;
mod response;
mod tls;
pub mod ui;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_model::Limits;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::JoinSet;

pub use connection::HTTP2_PING_INTERVAL;
pub use databases::{DatabaseOpener, Databases, Opened};
pub use resources::ResourceLimits;
pub use tls::Tls;
pub use ui::Explorer;

/// The largest request body accepted (413 above it): 1 MiB plus 64 KiB. The largest valid
/// request is an atomic write within Deno's limits: 819 200 bytes of keys and values (check keys
/// included) plus protobuf framing of at most ~30 bytes for each of 1000 mutations and ~15 for each
/// of 100 checks, about 0.85 MB, so valid requests always fit and the server never buffers more
/// than this per request.
pub const MAX_BODY_BYTES: usize = 1024 * 1024 + 64 * 1024;

/// The shortest access token accepted (denokv's minimum too).
pub const MIN_TOKEN_LEN: usize = 12;

/// Who may use the server.
#[derive(Clone, PartialEq, Eq)]
pub enum Access {
    /// Clients must send `authorization: Bearer <token>`.
    Token(String),
    /// Anyone; only allowed on a loopback address.
    Open,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Access::Token(_) => f.write_str("Token(<redacted>)"),
            Access::Open => f.write_str("Open"),
        }
    }
}

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Access control.
    pub access: Access,
    /// Limits enforced on every request ([`Limits::deno`] by default: 100 checks, as Deno's
    /// client allows, where denokv allows 10).
    pub limits: Limits,
    /// How far ahead the metadata's `expiresAt` lies (1 day, as denokv; must be well over 10 s or
    /// Deno refetches metadata in a busy loop).
    pub metadata_ttl: Duration,
    /// Interval of watch keep-alive frames (5 s, as denokv).
    pub keep_alive_interval: Duration,
    /// Largest request body ([`MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
    /// Serve the `/ephemeral/...` paths (fresh in-memory databases; see [`databases`]).
    pub ephemeral: bool,
    /// How long shutdown waits for in-flight requests before dropping connections.
    pub shutdown_grace: Duration,
    /// Emit internal and connection errors (never tokens or data) as `tracing` events at warn
    /// or error level (the per-request debug events are emitted either way).
    pub log_errors: bool,
    /// Serve `GET /metrics` ([`metrics`]), without the access token (off by default: turn it
    /// on only where the listener's reachability is what protects the counts).
    pub metrics: bool,
    /// How long a queue message handed out over the network (the `queue/1` extension, see
    /// [`queue`]) stays held without a keep-alive before it counts as a failed delivery (5 s,
    /// Deno's message deadline).
    pub queue_lease: Duration,
    /// The longest a `queue/dequeue` long poll waits before answering 204 (25 s).
    pub queue_max_wait: Duration,
    /// Caps and timeouts protecting the server from its clients ([`resources`]).
    pub resources: ResourceLimits,
    /// Serve HTTPS with this certificate (`None`: plaintext HTTP, the default). A TLS handshake
    /// must complete within [`ResourceLimits::header_timeout`].
    pub tls: Option<Tls>,
    /// The protocol extensions this server offers to clients that ask ([`ext::EXTENSIONS`],
    /// all of them, by default). One left out is not listed in the metadata, so
    /// open-deno-kv-remote does not use it. The range, snapshot and change log extensions are
    /// also refused when used anyway: a `range-delete/1` body is answered 400, and the
    /// `count/1`, `watch-range/1`, `snapshot/1` and `change-log/1` endpoints answer 404. (The
    /// older ones stay served: their requests are harmless to a server that has them.)
    pub extensions: Vec<&'static str>,
    /// Serve the web explorer at `/ui` ([`ui`]), read-only or read-write ([`Explorer::Off`] by
    /// default). Its data calls need the access token, as the API does.
    pub ui: Explorer,
}

impl ServerConfig {
    /// The defaults with this access control.
    pub fn new(access: Access) -> Self {
        ServerConfig {
            access,
            limits: Limits::deno(),
            metadata_ttl: Duration::from_secs(24 * 60 * 60),
            keep_alive_interval: Duration::from_secs(5),
            max_body_bytes: MAX_BODY_BYTES,
            ephemeral: false,
            shutdown_grace: Duration::from_secs(10),
            log_errors: true,
            metrics: false,
            queue_lease: open_deno_kv_model::queue::MESSAGE_DEADLINE,
            queue_max_wait: Duration::from_secs(25),
            resources: ResourceLimits::default(),
            tls: None,
            extensions: ext::EXTENSIONS.to_vec(),
            ui: Explorer::Off,
        }
    }
}

/// A configuration the server refuses to run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The token is too short.
    #[error("the access token must be at least {MIN_TOKEN_LEN} characters long")]
    TokenTooShort,
    /// The token cannot travel in an HTTP header.
    #[error("the access token may only contain visible ASCII characters (no spaces)")]
    TokenNotPrintable,
    /// Open access on an address other than loopback.
    #[error(
        "refusing to serve without an access token on {0}: give a token, or bind to a loopback \
         address (127.0.0.1 or ::1) to run open"
    )]
    OpenNotLoopback(std::net::SocketAddr),
    /// A TLS certificate or key file that cannot be read or holds nothing usable.
    #[error("TLS file {}: {reason}", path.display())]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificate and key (e.g. the key does not belong to the
    /// certificate, or its algorithm is not supported).
    #[error("TLS configuration refused: {0}")]
    TlsRefused(String),
}

/// Shared by every connection.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) databases: Databases,
    pub(crate) shutdown: signal::Receiver<bool>,
    /// Queue messages held by network consumers.
    pub(crate) deliveries: queue::Deliveries,
    /// What clients hold of the [`ResourceLimits`].
    pub(crate) budgets: resources::Budgets,
    /// What the server counts, for `GET /metrics`.
    pub(crate) metrics: metrics::Metrics,
}

/// A KV Connect server; see the [crate documentation](crate).
pub struct Server {
    config: ServerConfig,
    databases: Databases,
}

impl Server {
    /// Checks the configuration.
    pub fn new(config: ServerConfig, databases: Databases) -> Result<Self, ConfigError> {
        if let Access::Token(token) = &config.access {
            if token.chars().count() < MIN_TOKEN_LEN {
                return Err(ConfigError::TokenTooShort);
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::TokenNotPrintable);
            }
        }
        Ok(Server { config, databases })
    }

    /// Serves connections from `listener` until `shutdown` completes, then shuts down
    /// gracefully: stops accepting, ends watch streams, lets in-flight requests finish (for at
    /// most [`ServerConfig::shutdown_grace`]), and closes the databases it opened itself.
    /// Connections over [`ResourceLimits::max_connections`] are answered `503` and closed.
    ///
    /// Refuses to start ([`ConfigError::OpenNotLoopback`], as an I/O error of kind
    /// `PermissionDenied`) if access is open and the listener is not on a loopback address.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let local = listener.local_addr()?;
        if self.config.access == Access::Open && !local.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                ConfigError::OpenNotLoopback(local),
            ));
        }
        let (stop, stopped) = signal::channel(false);
        let mut databases = self.databases;
        databases.max_open = self.config.resources.max_open_databases;
        databases.idle_timeout = self.config.resources.database_idle_timeout;
        let shared = Arc::new(Shared {
            deliveries: queue::Deliveries::new(self.config.queue_lease),
            budgets: resources::Budgets::new(&self.config.resources),
            metrics: metrics::Metrics::new(),
            config: self.config,
            databases,
            shutdown: stopped,
        });
        let sweeper = tokio::spawn(queue::sweep(shared.clone()));
        let database_sweeper = tokio::spawn(databases::sweep_idle(shared.clone()));
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _peer)) => match shared.budgets.connection() {
                        Some(slot) => {
                            connections.spawn(connection::serve(shared.clone(), stream, slot));
                        }
                        None => {
                            connection::refuse(stream, &shared.config);
                        }
                    },
                    Err(err) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        if shared.config.log_errors {
                            tracing::error!(error = %err, "accept failed; retrying in 100 ms");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop.send(true);
        let drained = tokio::time::timeout(shared.config.shutdown_grace, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.abort_all();
            while connections.join_next().await.is_some() {}
        }
        let _ = sweeper.await;
        let _ = database_sweeper.await;
        shared.deliveries.release_all();
        shared.databases.close_opened().await;
        Ok(())
    }
}

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

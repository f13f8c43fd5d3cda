//! How the server behaves ([`ServerConfig`]) and who may use it ([`Access`]).

use std::time::Duration;

use open_deno_kv_model::Limits;

use crate::ext;
use crate::resources::ResourceLimits;
use crate::tls::Tls;

/// The largest request body accepted (413 above it): 1 MiB plus 64 KiB. The largest valid
/// request is an atomic write within Deno's limits: 819 200 bytes of keys and values (check keys
/// included) plus protobuf framing of at most ~30 bytes for each of 1000 mutations and ~15 for each
/// of 100 checks, about 0.85 MB, so valid requests always fit and the server never buffers more
/// than this per request.
pub const MAX_BODY_BYTES: usize = 1024 * 1024 + 64 * 1024;

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
    /// Serve the `/ephemeral/...` paths (fresh in-memory databases; see [`databases`](crate::databases)).
    pub ephemeral: bool,
    /// How long shutdown waits for in-flight requests before dropping connections.
    pub shutdown_grace: Duration,
    /// Emit internal and connection errors (never tokens or data) as `tracing` events at warn
    /// or error level (the per-request debug events are emitted either way).
    pub log_errors: bool,
    /// Serve `GET /metrics` ([`metrics`](crate::metrics)), without the access token (off by default: turn it
    /// on only where the listener's reachability is what protects the counts).
    pub metrics: bool,
    /// How long a queue message handed out over the network (the `queue/1` extension, see
    /// [`queue`](crate::queue)) stays held without a keep-alive before it counts as a failed delivery (5 s,
    /// Deno's message deadline).
    pub queue_lease: Duration,
    /// The longest a `queue/dequeue` long poll waits before answering 204 (25 s).
    pub queue_max_wait: Duration,
    /// Caps and timeouts protecting the server from its clients ([`resources`](crate::resources)).
    pub resources: ResourceLimits,
    /// Serve HTTPS with this certificate (`None`: plaintext HTTP, the default). A TLS handshake
    /// must complete within [`ResourceLimits::header_timeout`].
    pub tls: Option<Tls>,
    /// The protocol extensions this server offers to clients that ask ([`crate::ext::EXTENSIONS`],
    /// all of them, by default). One left out is not listed in the metadata, so
    /// open-deno-kv-remote does not use it. The range, snapshot and change log extensions are
    /// also refused when used anyway: a `range-delete/1` body is answered 400, and the
    /// `count/1`, `watch-range/1`, `snapshot/1` and `change-log/1` endpoints answer 404. (The
    /// older ones stay served: their requests are harmless to a server that has them.)
    pub extensions: Vec<&'static str>,
    /// Serve the web explorer at `/ui` ([`ui`](crate::ui)), read-only or read-write ([`Explorer::Off`] by
    /// default). Its data calls need the access token, as the API does.
    pub ui: Explorer,
    /// The continuous backup's gauges, reported by `GET /metrics` as the `kv_backup_` families
    /// (see [`metrics`](crate::metrics)); `None` (the default) when nothing ships.
    pub shipping: Option<crate::metrics::ShippingGauges>,
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
            shipping: None,
        }
    }
}

/// Whether and how the server serves the explorer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Explorer {
    /// No explorer: `/ui` is a 404 (the default).
    #[default]
    Off,
    /// The explorer lists, opens and follows entries; its writes answer 403 (`kv serve --ui`).
    ReadOnly,
    /// The explorer may also edit and delete entries (`kv serve --ui --ui-write`).
    ReadWrite,
}

impl Explorer {
    /// Whether `/ui` is served.
    pub fn enabled(self) -> bool {
        self != Explorer::Off
    }

    /// Whether the explorer's writes are allowed.
    pub fn writable(self) -> bool {
        self == Explorer::ReadWrite
    }
}

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
//! cap; the [`resources`] module documents the policy and its defaults. Connections that have not
//! passed the token check are admitted on trust only, so strangers cannot keep out the clients
//! that hold the token ([`admission`]), and the warnings they cause are logged as summaries
//! ([`log_summary`]).
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

pub mod admission;
pub mod backup;
mod config;
mod config_error;
mod connection;
pub mod databases;
mod deliveries;
pub mod ext;
mod handler;
pub mod log_summary;
pub mod metrics;
pub mod queue;
mod quick_ack;
pub mod range;
mod range_watch;
mod request;
pub mod resources;
mod response;
mod server;
mod shared;
mod tls;
pub mod ui;
mod watch;

pub use config::{Access, Explorer, MAX_BODY_BYTES, ServerConfig};
pub use config_error::{ConfigError, MIN_TOKEN_LEN};
pub use connection::HTTP2_PING_INTERVAL;
pub use databases::{DatabaseOpener, Databases, Opened};
pub use resources::ResourceLimits;
pub use server::Server;
pub use tls::{EXPIRY_WARNING, MAX_TLS_FILE_BYTES, Tls, Validity};

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

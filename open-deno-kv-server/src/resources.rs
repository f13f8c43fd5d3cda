//! The resource policy: what one server lets its clients hold, and how long.
//!
//! A server must survive hostile or broken clients: silent TCP connections, clients that send
//! headers or bodies a byte at a time, thousands of idle watches, a flood of `/db/NAME` names.
//! Every resource a client can make the server hold is bounded, and every refusal is an HTTP
//! answer with a plain-text reason (or, for a connection over the cap, that answer written once
//! and the connection closed), never a silent hang:
//!
//! | resource | limit ([`ResourceLimits`] field) | default | over the limit |
//! |---|---|---|---|
//! | open connections | `max_connections` | 1,000 | the oldest connection that has not authorized is closed to make room ([`crate::admission`]); when all have, `503` "Too many connections …" written once, connection closed |
//! | time for a new connection to make a request that passes the token check | `auth_timeout` | 5 s | connection closed ([`crate::admission`]) |
//! | connections that have not authorized yet, per address (an IPv6 /64) | `max_unauthorized_per_address` | 32 | `503` "Too many connections from your address …" written once, connection closed |
//! | time to send a request's headers (HTTP/1.1), and for a new connection to send its first byte (any protocol) | `header_timeout` | 10 s | connection closed (hyper answers `408` when it can) |
//! | time to send a request's body | `body_timeout` | 30 s | `408` "Request body not received within …" |
//! | a connection with no request in flight (HTTP/1.1 keep-alive, HTTP/2 with no streams) | `idle_timeout` | 60 s | closed (HTTP/2: `GOAWAY` first) |
//! | a dead HTTP/2 peer | `keep_alive_timeout` after a ping every `keep_alive_interval` of the [`crate::ServerConfig`] | 20 s | closed |
//! | request bodies buffered at once, all connections together | `max_body_memory` | 64 MiB | `503` "The server is buffering too many request bodies …" |
//! | one request body | [`crate::ServerConfig::max_body_bytes`] | 1.06 MiB | `413` |
//! | watch streams (key, range) and snapshot exports open at once | `max_watches` | 10,000 | `429` "Too many watches …" (Deno's client reports it as an error) |
//! | `/db/NAME` databases open at once (`kv serve --db-dir`) | `max_open_databases` | 64 | `503` "Too many databases open …" |
//! | an open `/db/NAME` database nobody uses (no request, watch or held queue message) | `database_idle_timeout` | 60 s | closed; reopened on next use |
//!
//! `GET /metrics` (no token) reads the queue depths of the open databases at most once per
//! `metrics_refresh` (5 s), answering the values last read in between ([`crate::metrics`]).
//!
//! Warnings clients can cause (failed handshakes, wrong protocols, evictions, refusals) are
//! logged as one summary per kind every `warning_interval` (10 s; [`crate::log_summary`]).
//!
//! A watch stream counts as a request in flight, so a connection carrying only a watch is not
//! idle (the watch's keep-alive frames also keep it alive for the client).
//!
//! `kv serve` raises its soft open-file limit to the hard limit at start, and lowers
//! `max_connections` to half the open-file limit when that is lower, so that refusing a
//! connection never itself fails for want of a descriptor.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of the [resource policy](self); part of [`crate::ServerConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Connections served at once; above it a connection gets a `503` text and is closed.
    pub max_connections: usize,
    /// How long an HTTP/1.1 client may take to send a request's headers.
    pub header_timeout: Duration,
    /// How long a client may take to send a request's whole body.
    pub body_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Bytes of request bodies buffered at once across all connections.
    pub max_body_memory: usize,
    /// Watch streams open at once across all connections.
    pub max_watches: usize,
    /// `/db/NAME` databases (those opened on first use) open at once.
    pub max_open_databases: usize,
    /// How long an unused `/db/NAME` database stays open.
    pub database_idle_timeout: Duration,
    /// How long a new connection has to make a request that passes the token check before it
    /// is closed ([`crate::admission`]).
    pub auth_timeout: Duration,
    /// Connections that have not authorized yet, open at once from one address (an IPv4
    /// address or an IPv6 /64); more are refused ([`crate::admission`]).
    pub max_unauthorized_per_address: usize,
    /// The interval over which warnings of one kind are counted and logged as one summary
    /// ([`crate::log_summary`]).
    pub warning_interval: Duration,
    /// How long the queue depths `GET /metrics` reports are reused before they are read again
    /// ([`crate::metrics`]); zero reads them at every scrape.
    pub metrics_refresh: Duration,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            max_connections: 1000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_body_memory: 64 * 1024 * 1024,
            max_watches: 10_000,
            max_open_databases: 64,
            database_idle_timeout: Duration::from_secs(60),
            auth_timeout: Duration::from_secs(5),
            max_unauthorized_per_address: 32,
            warning_interval: Duration::from_secs(10),
            metrics_refresh: Duration::from_secs(5),
        }
    }
}

/// The budgets of one running server (the counting side of [`ResourceLimits`]).
pub(crate) struct Budgets {
    connections: Arc<Semaphore>,
    body_bytes: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    /// The permits `connections` started with.
    connection_cap: usize,
    /// The permits `watches` started with.
    watch_cap: usize,
}

/// Permits never exceed what a tokio semaphore can count.
fn semaphore(permits: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS)))
}

impl Budgets {
    pub(crate) fn new(limits: &ResourceLimits) -> Self {
        let connections = semaphore(limits.max_connections);
        let watches = semaphore(limits.max_watches);
        Budgets {
            connection_cap: connections.available_permits(),
            watch_cap: watches.available_permits(),
            connections,
            body_bytes: semaphore(limits.max_body_memory),
            watches,
        }
    }

    /// A connection slot, or `None` when `max_connections` are open.
    pub(crate) fn connection(&self) -> Option<OwnedSemaphorePermit> {
        self.connections.clone().try_acquire_owned().ok()
    }

    /// `bytes` more of the body budget, or `None` when it is spent.
    pub(crate) fn body_bytes(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = u32::try_from(bytes).ok()?;
        self.body_bytes.clone().try_acquire_many_owned(bytes).ok()
    }

    /// How many connections hold a slot now.
    pub(crate) fn connections_open(&self) -> usize {
        self.connection_cap
            .saturating_sub(self.connections.available_permits())
    }

    /// How many watch streams hold a slot now.
    pub(crate) fn watches_open(&self) -> usize {
        self.watch_cap
            .saturating_sub(self.watches.available_permits())
    }

    /// A watch slot, or `None` when `max_watches` are open.
    pub(crate) fn watch(&self) -> Option<OwnedSemaphorePermit> {
        self.watches.clone().try_acquire_owned().ok()
    }
}

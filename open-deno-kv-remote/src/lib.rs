//! # open-deno-kv-remote — a [`Backend`] that talks KV Connect to a remote server
//!
//! [`RemoteBackend`] speaks the protocol `Deno.openKv("http://...")` speaks (see the
//! [`open_deno_kv_connect`] crate) to any compatible server: this workspace's
//! `open-deno-kv-server`, or denokv. Everything above it (the `open-deno-kv` crate's `Kv` handle, the conformance
//! suite, tools) works unchanged over the network.
//!
//! ```no_run
//! # async fn run() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_engine_kit::Backend;
//! use open_deno_kv_remote::{RemoteBackend, RemoteOptions};
//! let options = RemoteOptions::new("a-long-secret-token");
//! let kv = RemoteBackend::connect("http://127.0.0.1:4512/", options).await?;
//! println!("{:?}", kv.capabilities());
//! kv.close().await?;
//! # Ok(()) }
//! ```
//!
//! ## How it talks
//!
//! - **Transport:** HTTP/2 over TLS for `https://` URLs (rustls with its `ring` provider, ALPN
//!   `h2`), the server's certificate verified against the system's root certificates, or only
//!   against the CA certificates of [`RemoteOptions::ca_file`] (`KV_CA_FILE`); there is no
//!   option to skip verification. HTTP/2 with prior knowledge over plain TCP (h2c) for
//!   `http://` URLs, as Deno does. One connection per backend, shared by every call (HTTP/2
//!   streams), and opened again transparently when it breaks. A TLS failure (untrusted
//!   certificate, `https://` to a plaintext server, `http://` to a TLS one) fails the call at
//!   once with [`RemoteError::Tls`], never retried.
//! - **Metadata:** `POST <url>` with `authorization: Bearer <access token>` and
//!   `{"supportedVersions":[1,2,3]}`, done once by [`RemoteBackend::connect`] (so a wrong token
//!   or URL fails at open with the server's text). The answer's first `strong` endpoint and its
//!   token are used for the data path, with `x-denokv-version` / `x-denokv-database-id` (or
//!   `x-transaction-domain-id` for protocol 1). The metadata is fetched again before each call
//!   once due: 10 s before `expiresAt`, at most every 60 s, at least 1 s apart (no busy loop on
//!   short expiries), and at once when the server answers 401/403 (then the call is retried
//!   once).
//! - **Retries:** network errors and 5xx answers are retried with a back-off growing from
//!   100 ms to 2 s, for at most [`RemoteOptions::retry_timeout`] (30 s); then the call fails with
//!   [`RemoteError::Unavailable`]. Deno retries forever; a Rust program gets an error it can
//!   handle instead. Retries are for a server that answered and then failed: when the very first
//!   connection cannot be made (connection refused, no such host), nothing is running there to
//!   wait for, and the call fails at once with [`RemoteError::Unreachable`].
//! - **Access token:** [`RemoteOptions::from_env`] reads `KV_ACCESS_TOKEN`, else Deno's
//!   `DENO_KV_ACCESS_TOKEN`. A server that refuses a client which has no token is reported as
//!   a missing token ([`RemoteError::MissingToken`]), not as an invalid one.
//! - **Atomic writes are not replayed blindly.** A write is retried only when it surely did not
//!   run: the connection could not be made, or the server answered 5xx (KV Connect servers
//!   answer 5xx only when nothing was committed). If the connection fails *after* the request
//!   was sent, or no answer comes within [`RemoteOptions::request_timeout`], the outcome is
//!   unknown and the call fails with [`KvError::OutcomeUnknown`](open_deno_kv_engine_kit::KvError::OutcomeUnknown)
//!   (its source a [`RemoteError::OutcomeUnknown`]): replaying a `sum` could apply it twice.
//!   The same error comes back when the server itself answers that its store's outcome is
//!   unknown (this project's servers answer 409 then). The program can read its keys (or use a
//!   check) to find out.
//! - **Validation:** every answer is checked: versionstamps must be 10 bytes, LE64 values 8
//!   bytes, encodings known, one output range per requested range, no more entries than the
//!   limit, every key inside its range. A bad answer is an error, never a panic. Requests are
//!   checked against Deno's limits ([`open_deno_kv_engine_kit::Limits::deno`]) before they are sent, by the same
//!   [`open_deno_kv_engine_kit::Checked`] layer every local engine sits behind, so limit errors carry Deno's
//!   texts, as with a local backend; the server's refusals of bad input (400)
//!   become [`KvError::InvalidArgument`] with the server's text (e.g. `Failed to perform 'sum'
//!   mutation on a non-U64 value in the database`).
//! - **Watch:** `POST <endpoint>/watch`, then a stream of length-prefixed frames; keep-alives
//!   are skipped. When the stream ends, breaks, or stays silent longer than
//!   [`RemoteOptions::watch_idle_timeout`], the client reconnects (back-off 200 ms to 5 s) and
//!   sends the watch again; it compares versionstamps with what it last emitted, so a reconnect
//!   (or a server that marks every key `changed`, as Deno needs) never emits a spurious change,
//!   and unchanged keys are reported as [`open_deno_kv_engine_kit::WatchKeyOutput::Unchanged`]. Reconnecting
//!   goes on while the server answers; when it cannot be reached within the retry budget the
//!   stream yields the error and ends.
//! - **Expiry:** plain KV Connect does not carry expiry times, so entries read from denokv have
//!   [`open_deno_kv_engine_kit::KvEntry::expires_at`] = `None` (unknown). From `open-deno-kv-server` (extension
//!   `expiry/1`) they carry their real expiry.
//! - **Queues:** only with a server offering the `queue/1` extension (open-deno-kv-server; see
//!   [`mod@ext`] and `open-deno-kv-server`'s `queue` module): [`Backend::dequeue_next_message`] long-polls
//!   `<endpoint>/queue/dequeue`; each handed-out message is kept alive every 2 s while held, and
//!   finished with `<endpoint>/queue/finish`. Dropping a handle unfinished reports a failure;
//!   closing the backend reports a failure for every message still held; a client that dies
//!   simply stops renewing, and the server requeues after the 5 s lease. Enqueueing travels
//!   inside `atomic_write` as KV Connect defines. Against other servers
//!   `dequeue_next_message` fails with [`KvError::Unsupported`]. `queued_messages` is read
//!   from an export without its entries (`snapshot/1`), so it needs that extension.
//! - **Range deletes, counts, range watches:** only with a server offering `range-delete/1`,
//!   `count/1` and `watch-range/1` (see [`mod@ext`]); the capabilities say so once the metadata
//!   is known. Before a range delete, a count or a range watch is sent, the client makes sure the
//!   server offered its extension, and otherwise fails with
//!   [`open_deno_kv_engine_kit::KvError::Unsupported`] having sent nothing (a server that does not
//!   know the range delete placeholder's mutation type would refuse the write whole). A range
//!   watch reconnects as a key watch does, and every new stream starts with
//!   [`open_deno_kv_engine_kit::RangeWatchEvent::Reread`], so the consumer re-reads what it may
//!   have missed while disconnected.
//! - **Snapshot export and import (online backup and restore), the change log:** only with a
//!   server offering `snapshot/1` and `change-log/1` (open-deno-kv-server, for a database
//!   whose backend has them; see [`mod@ext`]). An export is the server's stream read lazily,
//!   one batch at a time; dropping it closes the request. An import streams the given snapshot
//!   as the request body, never retried; an error in that stream (or dropping the import)
//!   resets the request, so the server's import fails and rolls back. A stream that ends before
//!   its end frame is an error, never a short snapshot. Against other servers the calls fail
//!   with [`open_deno_kv_engine_kit::KvError::Unsupported`] having sent nothing.
//!
mod backend;
mod backup;
pub mod ext;
mod queue;
mod range;
mod stream;
mod tls;
mod transport;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::{Clock, Limits, SystemClock};

pub use backend::RemoteBackend;
pub use transport::RemoteError;

/// The environment variable [`RemoteOptions::from_env`] reads the access token from first.
pub const ACCESS_TOKEN_ENV: &str = "KV_ACCESS_TOKEN";
/// Deno's variable for the same token (`Deno.openKv("http://...")` reads it), read by
/// [`RemoteOptions::from_env`] when [`ACCESS_TOKEN_ENV`] is not set.
pub const DENO_ACCESS_TOKEN_ENV: &str = "DENO_KV_ACCESS_TOKEN";
/// The environment variable [`RemoteOptions::from_env`] reads [`RemoteOptions::ca_file`] from.
pub const CA_FILE_ENV: &str = "KV_CA_FILE";

/// How a [`RemoteBackend`] connects and retries.
#[derive(Clone)]
pub struct RemoteOptions {
    /// Sent as `authorization: Bearer <token>` in the metadata exchange.
    pub access_token: String,
    /// How long network errors and 5xx answers are retried before a call fails (30 s).
    pub retry_timeout: Duration,
    /// How long one request may wait for its answer (30 s). An atomic write that gets no answer
    /// in time fails with [`RemoteError::OutcomeUnknown`].
    pub request_timeout: Duration,
    /// A watch stream that receives nothing (not even a keep-alive) for this long is reopened
    /// (30 s; servers send keep-alives every 5 s).
    pub watch_idle_timeout: Duration,
    /// How long one queue long poll may wait on the server (20 s).
    pub dequeue_wait: Duration,
    /// Limits checked before sending ([`Limits::deno`]).
    pub limits: Limits,
    /// The time used to check enqueue delays before sending (the server's clock decides
    /// delivery).
    pub clock: Arc<dyn Clock>,
    /// For `https://`: trust only the CA certificates in this PEM file (a private CA, or a
    /// self-signed server certificate), instead of the system's root certificates (`None`).
    pub ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("access_token", &"<redacted>")
            .field("retry_timeout", &self.retry_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("watch_idle_timeout", &self.watch_idle_timeout)
            .field("dequeue_wait", &self.dequeue_wait)
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

impl RemoteOptions {
    /// The defaults with this access token.
    pub fn new(access_token: impl Into<String>) -> Self {
        RemoteOptions {
            access_token: access_token.into(),
            retry_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            watch_idle_timeout: Duration::from_secs(30),
            dequeue_wait: Duration::from_secs(20),
            limits: Limits::deno(),
            clock: Arc::new(SystemClock),
            ca_file: None,
        }
    }

    /// The defaults with the token from the `KV_ACCESS_TOKEN` environment variable, else from
    /// Deno's `DENO_KV_ACCESS_TOKEN` (empty if neither is set: servers running open accept any
    /// token, others answer with [`RemoteError::MissingToken`]), and the CA file from
    /// `KV_CA_FILE` if it is set.
    pub fn from_env() -> Self {
        let token = [ACCESS_TOKEN_ENV, DENO_ACCESS_TOKEN_ENV]
            .into_iter()
            .find_map(|name| std::env::var(name).ok())
            .unwrap_or_default();
        let mut options = Self::new(token);
        options.ca_file = ca_file_from_env();
        options
    }
}

/// The CA file named by `KV_CA_FILE`, if set and not empty.
pub fn ca_file_from_env() -> Option<PathBuf> {
    std::env::var_os(CA_FILE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

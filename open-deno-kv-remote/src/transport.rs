//! The HTTP side: one HTTP/2 connection (h2c, prior knowledge), the metadata exchange and its
//! refresh, and calls on the data path with bounded retries.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::tls::{Connector, LastFailure, WrongTransport};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use open_deno_kv_connect::convert::TEXT_OUTCOME_UNKNOWN;
use open_deno_kv_connect::metadata::DatabaseMetadata;
use open_deno_kv_engine_kit::KvError;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::RemoteOptions;
use crate::ext::{self, Extensions};

/// What went wrong talking to the server. Reaches callers inside [`KvError::Storage`], except
/// the server's own refusals of bad input (HTTP 400), which become [`KvError::InvalidArgument`]
/// with the server's text, and "read only", which becomes [`KvError::ReadOnly`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// The URL is not one this client can use.
    #[error("invalid KV Connect URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The metadata exchange was refused or answered with something that is not metadata.
    #[error("could not open KV Connect database {url:?}: {reason}")]
    Open {
        /// The metadata URL.
        url: String,
        /// Why (for a refusal: the status and the server's text).
        reason: String,
    },
    /// The server answered a data-path call with an error status.
    #[error("KV Connect call to {url:?} failed (status={status}): {text}")]
    Status {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The server's text.
        text: String,
    },
    /// Network errors or 5xx answers went on longer than the retry budget.
    #[error("KV Connect server unavailable: gave up calling {url:?} after {elapsed:?}: {last}")]
    Unavailable {
        /// The URL called.
        url: String,
        /// How long the client kept trying.
        elapsed: Duration,
        /// The last failure.
        last: String,
    },
    /// The server could not be reached at the first contact (connection refused, no such host):
    /// nothing answers there, so the call was not retried.
    #[error("cannot reach a KV Connect server at {url:?}: {reason} (is the server running?)")]
    Unreachable {
        /// The metadata URL.
        url: String,
        /// The connection error (e.g. `Connection refused (os error 111)`).
        reason: String,
    },
    /// The server refused a client that sent no access token.
    #[error(
        "no access token for KV Connect database {url:?}: the server requires one; set \
         KV_ACCESS_TOKEN or DENO_KV_ACCESS_TOKEN, or add ?token=... to the URL"
    )]
    MissingToken {
        /// The metadata URL.
        url: String,
    },
    /// An atomic write was sent but no answer came back: it may or may not have been committed.
    /// It is not replayed (a replay could apply it twice); read the written keys to find out.
    #[error(
        "the outcome of the atomic write is unknown (the connection failed after it was sent: \
         {0}); it was not retried, read the keys to find out whether it was committed"
    )]
    OutcomeUnknown(String),
    /// The server's answer does not follow the protocol.
    #[error("invalid KV Connect response: {0}")]
    Protocol(String),
    /// TLS cannot work with this server: the handshake failed (its certificate is not trusted
    /// for the URL's host name, or it speaks plaintext), a TLS server was addressed with
    /// `http://`, or the CA file is unusable. Never retried.
    #[error("TLS: cannot talk to the KV Connect server at {url:?}: {reason}")]
    Tls {
        /// The URL.
        url: String,
        /// What failed, and what to do about it.
        reason: String,
    },
    /// The client needs a tokio runtime with I/O and time enabled.
    #[error("open-deno-kv-remote needs a tokio runtime (with I/O and time enabled)")]
    NoRuntime,
}

impl From<RemoteError> for KvError {
    /// A write whose answer was lost is [`KvError::OutcomeUnknown`] (the error is its source);
    /// everything else is [`KvError::Storage`].
    fn from(err: RemoteError) -> Self {
        match err {
            RemoteError::OutcomeUnknown(_) => KvError::outcome_unknown(err),
            other => KvError::storage(other),
        }
    }
}

/// A response that does not follow the protocol, as a [`KvError`].
pub(crate) fn protocol(message: impl std::fmt::Display) -> KvError {
    RemoteError::Protocol(message.to_string()).into()
}

/// The largest response body read into memory (1000 entries of 64 KiB plus keys fit easily).
const MAX_RESPONSE_BYTES: usize = 128 * 1024 * 1024;

/// The first retry delay; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest delay between two retries.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The shortest time between two metadata fetches (a server handing out an `expiresAt` in the
/// past must not make us fetch in a busy loop, as it does Deno).
const MIN_REFRESH: Duration = Duration::from_secs(1);
/// The longest time metadata is used before it is fetched again (Deno: 60 s).
const MAX_REFRESH: Duration = Duration::from_secs(60);
/// Metadata is fetched again this long before it expires (Deno: 10 s).
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);

/// The current metadata: where and how to call the data path.
#[derive(Debug)]
pub(crate) struct Session {
    /// The data endpoint URL, without a trailing `/`.
    pub(crate) endpoint: String,
    authorization: HeaderValue,
    database_id: HeaderValue,
    version: u64,
    /// What the server offers beyond KV Connect.
    pub(crate) extensions: Extensions,
    refresh_at: Instant,
    expires_at: DateTime<Utc>,
}

/// How a call may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replay {
    /// Reads, watches, queue calls: sending twice is harmless.
    Safe,
    /// Atomic writes: only retried when the request surely did not reach the server (connection
    /// refused) or the server said nothing was done (5xx).
    OnlyIfNotDelivered,
}

/// A request body: a buffer, or the frames of a `snapshot/1` import, streamed.
pub(crate) type RequestBody = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// A buffer as a request body.
fn full(bytes: Bytes) -> RequestBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Shared by a backend and its tasks.
pub(crate) struct Inner {
    client: Client<Connector, RequestBody>,
    /// What the connector saw go wrong with TLS (see [`LastFailure`]).
    failures: LastFailure,
    /// The metadata URL as given (path and query included).
    pub(crate) url: String,
    pub(crate) options: RemoteOptions,
    session: Mutex<Option<Arc<Session>>>,
    refresh: tokio::sync::Mutex<()>,
    /// `true` once closed.
    pub(crate) closed: watch::Sender<bool>,
    /// Whether the server ever answered (anything, even an error status): until then a failed
    /// connection means nothing runs there, and is not retried.
    answered: std::sync::atomic::AtomicBool,
}

/// Locks `mutex`, also after a panic while it was held (every update under these locks is a
/// single step that cannot be left half done).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    /// Checks the URL and builds the client; nothing is sent yet.
    pub(crate) fn new(url: &str, options: RemoteOptions) -> Result<Self, RemoteError> {
        let bad = |reason: &str| RemoteError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(bad("expected an http:// or https:// URL"));
        }
        if uri.authority().is_none() {
            return Err(bad("no host"));
        }
        if HeaderValue::from_str(&format!("Bearer {}", options.access_token)).is_err() {
            return Err(bad("the access token cannot travel in an HTTP header"));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(options.request_timeout));
        connector.enforce_http(false);
        let connector =
            Connector::new(connector, options.ca_file.as_deref()).map_err(|reason| {
                RemoteError::Tls {
                    url: url.to_owned(),
                    reason,
                }
            })?;
        // Keep the one connection while idle: open-deno-kv-server's `/ephemeral/` databases live exactly
        // as long as the connection that created them.
        let failures = connector.failures.clone();
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .pool_idle_timeout(None)
            .build(connector);
        Ok(Inner {
            client,
            failures,
            url: url.to_owned(),
            options,
            session: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
            closed: watch::channel(false).0,
            answered: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the server has ever answered this client.
    fn has_answered(&self) -> bool {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Completes when the backend closes.
    pub(crate) async fn wait_closed(&self) {
        let mut closed = self.closed.subscribe();
        let _ = closed.wait_for(|c| *c).await;
    }

    /// The server's extensions, once the metadata is known.
    pub(crate) fn known_extensions(&self) -> Option<Extensions> {
        lock(&self.session).as_ref().map(|s| s.extensions)
    }

    /// The current metadata, fetched or refreshed if due. `force` refetches even if fresh
    /// (after the server refused our token), unless another task already did since `seen`.
    pub(crate) async fn session(
        &self,
        force: bool,
        seen: Option<&Arc<Session>>,
    ) -> Result<Arc<Session>, KvError> {
        let fresh = |s: &Arc<Session>| {
            if force {
                seen.is_some_and(|seen| !Arc::ptr_eq(seen, s))
            } else {
                Instant::now() < s.refresh_at
            }
        };
        if let Some(current) = lock(&self.session).clone()
            && fresh(&current)
        {
            return Ok(current);
        }
        let _one_at_a_time = self.refresh.lock().await;
        let current = lock(&self.session).clone();
        if let Some(current) = &current
            && fresh(current)
        {
            return Ok(current.clone());
        }
        match self.exchange().await {
            Ok(session) => {
                let session = Arc::new(session);
                *lock(&self.session) = Some(session.clone());
                Ok(session)
            }
            // A refresh that fails for a passing reason keeps the metadata that still holds.
            Err(err) => match current {
                Some(current)
                    if !force && current.expires_at > Utc::now() && !is_open_refusal(&err) =>
                {
                    Ok(current)
                }
                _ => Err(err),
            },
        }
    }

    /// The metadata exchange: `POST <url>` with the access token and the versions we speak.
    async fn exchange(&self) -> Result<Session, KvError> {
        let open_error = |reason: String| -> KvError {
            RemoteError::Open {
                url: self.url.clone(),
                reason,
            }
            .into()
        };
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let (status, body) = loop {
            let request = Request::post(&self.url)
                .header(
                    header::AUTHORIZATION,
                    format!("Bearer {}", self.options.access_token),
                )
                .header(header::CONTENT_TYPE, "application/json")
                // Extensions are offered only to a client that asks (denokv ignores the header).
                .header(ext::EXT_HEADER, Extensions::all().header_value())
                .body(full(Bytes::from_static(
                    br#"{"supportedVersions":[1,2,3]}"#,
                )))
                .map_err(|e| open_error(e.to_string()))?;
            let failure = match self.send(request, self.options.request_timeout).await {
                Ok(response) if response.status().is_server_error() => {
                    let status = response.status();
                    format!("status {status}: {}", read_text(response).await)
                }
                Ok(response) => {
                    let status = response.status();
                    let body = read_body(response).await?;
                    break (status, body);
                }
                Err(SendError {
                    tls: Some(reason), ..
                }) => {
                    return Err(RemoteError::Tls {
                        url: self.url.clone(),
                        reason,
                    }
                    .into());
                }
                Err(err) if err.not_delivered && !self.has_answered() => {
                    return Err(RemoteError::Unreachable {
                        url: self.url.clone(),
                        reason: err.text,
                    }
                    .into());
                }
                Err(err) => err.text,
            };
            if started.elapsed() + backoff > self.options.retry_timeout {
                return Err(RemoteError::Unavailable {
                    url: self.url.clone(),
                    elapsed: started.elapsed(),
                    last: failure,
                }
                .into());
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        if (status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN)
            && self.options.access_token.is_empty()
        {
            return Err(RemoteError::MissingToken {
                url: self.url.clone(),
            }
            .into());
        }
        if status != StatusCode::OK {
            let text = String::from_utf8_lossy(&body);
            let text: String = text.trim().chars().take(512).collect();
            return Err(open_error(format!(
                "the metadata endpoint responded with status {status}{}{text}",
                if text.is_empty() { "" } else { ": " }
            )));
        }
        let json: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| open_error(format!("not a valid KV Connect endpoint: {e}")))?;
        let version = json.get("version").and_then(|v| v.as_u64());
        let version = match version {
            Some(v @ 1..=3) => v,
            Some(v) => {
                return Err(open_error(format!(
                    "unsupported KV Connect metadata version {v}"
                )));
            }
            None => {
                return Err(open_error(
                    "not a valid KV Connect endpoint (no metadata version)".into(),
                ));
            }
        };
        let metadata = DatabaseMetadata::parse(&body)
            .map_err(|e| open_error(format!("not a valid KV Connect endpoint ({e})")))?;
        let endpoint = metadata
            .endpoints
            .iter()
            .find(|e| e.consistency == "strong")
            .ok_or_else(|| open_error("no strong consistency endpoint available".into()))?;
        if endpoint.url.ends_with('/') {
            return Err(open_error(format!(
                "endpoint URL must not end with '/': {}",
                endpoint.url
            )));
        }
        let endpoint = resolve(&self.url, &endpoint.url, version).map_err(open_error)?;
        let authorization = HeaderValue::from_str(&format!("Bearer {}", metadata.token))
            .map_err(|_| open_error("the token in the metadata is not a valid header".into()))?;
        let database_id = HeaderValue::from_str(&metadata.database_id.hyphenated().to_string())
            .map_err(|_| open_error("invalid database id".into()))?;
        let ttl = (metadata.expires_at - Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let refresh_in = ttl
            .saturating_sub(EXPIRY_MARGIN)
            .clamp(MIN_REFRESH, MAX_REFRESH);
        Ok(Session {
            endpoint,
            authorization,
            database_id,
            version,
            extensions: Extensions::from_metadata(&json),
            refresh_at: Instant::now() + refresh_in,
            expires_at: metadata.expires_at,
        })
    }

    /// Sends one request with a time limit on the answer's headers.
    async fn send(
        &self,
        request: Request<RequestBody>,
        limit: Duration,
    ) -> Result<Response<Incoming>, SendError> {
        match tokio::time::timeout(limit, self.client.request(request)).await {
            Ok(Ok(response)) => {
                self.answered
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(response)
            }
            Ok(Err(err)) => {
                let not_delivered = err.is_connect();
                let tls = WrongTransport::find(&err)
                    .or_else(|| self.failures.take())
                    .map(|w| w.0);
                let mut text = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(inner) = source {
                    text.push_str(": ");
                    text.push_str(&inner.to_string());
                    source = inner.source();
                }
                Err(SendError {
                    text,
                    not_delivered,
                    tls,
                })
            }
            Err(_) => Err(SendError {
                text: format!("no answer within {limit:?}"),
                not_delivered: false,
                tls: None,
            }),
        }
    }

    /// Calls `<endpoint>/<method>` with a protobuf body. Returns the response when its status is
    /// 200 (or 204), after retrying network errors and 5xx answers with a growing back-off for at
    /// most [`RemoteOptions::retry_timeout`] (within the `replay` rule), and refreshing the
    /// metadata once on 401/403.
    pub(crate) async fn call(
        &self,
        method: &str,
        body: Vec<u8>,
        replay: Replay,
        answer_within: Duration,
    ) -> Result<(Arc<Session>, Response<Incoming>), KvError> {
        let body = Bytes::from(body);
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut session = self.session(false, None).await?;
        let mut refreshed = false;
        loop {
            // Giving queue messages back is the one call still made while closing.
            if self.is_closed() && method != "queue/finish" {
                return Err(KvError::Closed);
            }
            let url = format!("{}/{method}", session.endpoint);
            let mut request = data_request(&session, &url, "application/x-protobuf");
            if session.extensions.expiry {
                request = request.header(ext::EXT_HEADER, ext::EXPIRY);
            }
            let request = request
                .body(full(body.clone()))
                .map_err(|e| RemoteError::BadUrl {
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
            let failure = match self.send(request, answer_within).await {
                Ok(response) => {
                    let status = response.status();
                    if status == StatusCode::OK || status == StatusCode::NO_CONTENT {
                        return Ok((session, response));
                    }
                    let text = read_text(response).await;
                    if (status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN)
                        && !refreshed
                    {
                        refreshed = true;
                        session = self.session(true, Some(&session)).await?;
                        continue;
                    }
                    if !status.is_server_error() {
                        return Err(status_error(url, status, text));
                    }
                    format!("status {status}: {text}")
                }
                Err(SendError {
                    tls: Some(reason), ..
                }) => {
                    return Err(RemoteError::Tls { url, reason }.into());
                }
                Err(err) => {
                    if replay == Replay::OnlyIfNotDelivered && !err.not_delivered {
                        return Err(RemoteError::OutcomeUnknown(err.text).into());
                    }
                    err.text
                }
            };
            if started.elapsed() + backoff > self.options.retry_timeout {
                return Err(RemoteError::Unavailable {
                    url,
                    elapsed: started.elapsed(),
                    last: failure,
                }
                .into());
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.wait_closed() => return Err(KvError::Closed),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            session = self.session(false, None).await?;
        }
    }

    /// Calls `<endpoint>/<method>` once with a streamed body (a `snapshot/1` import): never
    /// retried (the body cannot be sent again), with no time limit on the answer (the server
    /// answers once it consumed the whole body and committed), but ended when the backend
    /// closes. Dropping the future drops the request, which resets its stream: the server sees
    /// a body cut short. The status rules are [`Inner::call`]'s.
    pub(crate) async fn call_streaming(
        &self,
        method: &str,
        body: RequestBody,
    ) -> Result<Bytes, KvError> {
        if self.is_closed() {
            return Err(KvError::Closed);
        }
        let session = self.session(false, None).await?;
        let url = format!("{}/{method}", session.endpoint);
        let request = data_request(&session, &url, "application/octet-stream");
        let request = request.body(body).map_err(|e| RemoteError::BadUrl {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let answer = tokio::select! {
            answer = self.client.request(request) => answer,
            () = self.wait_closed() => return Err(KvError::Closed),
        };
        let response = answer.map_err(|err| {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(inner) = source {
                text.push_str(": ");
                text.push_str(&inner.to_string());
                source = inner.source();
            }
            KvError::from(RemoteError::Unavailable {
                url: url.clone(),
                elapsed: Duration::ZERO,
                last: text,
            })
        })?;
        self.answered
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let status = response.status();
        if status != StatusCode::OK {
            let text = read_text(response).await;
            return Err(status_error(url, status, text));
        }
        read_body(response).await
    }

    /// [`Inner::call`], then the whole body.
    pub(crate) async fn call_for_bytes(
        &self,
        method: &str,
        body: Vec<u8>,
        replay: Replay,
    ) -> Result<(Arc<Session>, Bytes), KvError> {
        let (session, response) = self
            .call(method, body, replay, self.options.request_timeout)
            .await?;
        Ok((session, read_body(response).await?))
    }
}

/// Whether an error is the server refusing the metadata exchange (4xx): stale metadata must then
/// not be used on.
fn is_open_refusal(err: &KvError) -> bool {
    let text = err.to_string();
    text.contains("the metadata endpoint responded with status 4")
        || text.contains("no access token for KV Connect database")
}

struct SendError {
    text: String,
    /// The connection could not be made: the request surely never reached the server.
    not_delivered: bool,
    /// TLS cannot work with this server ([`WrongTransport`]): fail at once, never retry.
    tls: Option<String>,
}

/// An error status as the error callers see: the server's texts for bad input are kept, so they
/// read as they would from a local backend.
fn status_error(url: String, status: StatusCode, text: String) -> KvError {
    match status {
        StatusCode::BAD_REQUEST if text == "This database is read only." => KvError::ReadOnly,
        StatusCode::BAD_REQUEST if text == KvError::NotEmpty.to_string() => KvError::NotEmpty,
        StatusCode::BAD_REQUEST => KvError::invalid_argument(text),
        StatusCode::NOT_IMPLEMENTED => KvError::Unsupported { feature: "queues" },
        StatusCode::CONFLICT if text == TEXT_OUTCOME_UNKNOWN => {
            KvError::outcome_unknown(RemoteError::Status {
                url,
                status: status.as_u16(),
                text,
            })
        }
        _ => RemoteError::Status {
            url,
            status: status.as_u16(),
            text,
        }
        .into(),
    }
}

/// Reads a whole (bounded) body; a broken one is a network failure.
pub(crate) async fn read_body(response: Response<Incoming>) -> Result<Bytes, KvError> {
    Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| protocol(format!("failed to read the response body: {e}")))
}

/// An error body as text (at most 4 KiB), empty if unreadable.
async fn read_text(response: Response<Incoming>) -> String {
    let body = Limited::new(response.into_body(), 4096)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    String::from_utf8_lossy(&body).trim().to_owned()
}

/// Resolves an endpoint URL against the metadata URL: absolute URLs as they are, `/path`
/// against the origin, other relative paths against the metadata URL's directory. Protocol 1
/// requires absolute URLs.
fn resolve(base: &str, endpoint: &str, version: u64) -> Result<String, String> {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        return Ok(endpoint.to_owned());
    }
    if version == 1 {
        return Err(format!(
            "invalid endpoint URL {endpoint:?}: relative URL without a base"
        ));
    }
    let uri: Uri = base
        .parse()
        .map_err(|_| "invalid metadata URL".to_owned())?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err("invalid metadata URL".to_owned());
    };
    let origin = format!("{scheme}://{authority}");
    if endpoint.starts_with('/') {
        return Ok(format!("{origin}{endpoint}"));
    }
    let path = uri.path();
    let directory = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    let directory = if directory.is_empty() { "/" } else { directory };
    Ok(format!("{origin}{directory}{endpoint}"))
}

/// A data-path request to `url` with the session's credentials and protocol headers (the
/// database id and version, or a version 1 server's transaction domain).
fn data_request(session: &Session, url: &str, content_type: &str) -> hyper::http::request::Builder {
    let request = Request::post(url)
        .header(header::AUTHORIZATION, session.authorization.clone())
        .header(header::CONTENT_TYPE, content_type);
    if session.version == 1 {
        request.header("x-transaction-domain-id", session.database_id.clone())
    } else {
        request
            .header("x-denokv-database-id", session.database_id.clone())
            .header(
                "x-denokv-version",
                if session.version == 2 { "2" } else { "3" },
            )
    }
}

#[cfg(test)]
mod tests {
    use super::{RemoteError, StatusCode, TEXT_OUTCOME_UNKNOWN, resolve, status_error};
    use open_deno_kv_engine_kit::KvError;

    #[test]
    fn a_server_that_could_not_learn_the_outcome_is_read_back_as_unknown() {
        let url = "http://h/v2/atomic_write".to_owned();
        let err = status_error(
            url.clone(),
            StatusCode::CONFLICT,
            TEXT_OUTCOME_UNKNOWN.into(),
        );
        assert!(matches!(err, KvError::OutcomeUnknown { .. }), "{err:?}");
        // Another 409 is another server's business.
        let other = status_error(url, StatusCode::CONFLICT, "conflict".into());
        assert!(matches!(other, KvError::Storage { .. }), "{other:?}");
        // A write whose answer the client itself lost is the same error.
        let lost: KvError = RemoteError::OutcomeUnknown("reset".into()).into();
        assert!(matches!(lost, KvError::OutcomeUnknown { .. }), "{lost:?}");
    }

    #[test]
    fn endpoints_resolve_like_urls() {
        assert_eq!(
            resolve("http://h:1/db/x?q=1", "/v2", 3).as_deref(),
            Ok("http://h:1/v2")
        );
        assert_eq!(
            resolve("http://h:1/db/x?q=1", "data2", 3).as_deref(),
            Ok("http://h:1/db/data2")
        );
        assert_eq!(
            resolve("http://h:1", "v2", 3).as_deref(),
            Ok("http://h:1/v2")
        );
        assert_eq!(
            resolve("http://h/", "http://o:2/e", 1).as_deref(),
            Ok("http://o:2/e")
        );
        assert!(resolve("http://h/", "/e", 1).is_err());
    }
}

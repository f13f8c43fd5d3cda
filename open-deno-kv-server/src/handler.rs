//! Routing and the request handlers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use open_deno_kv_connect::metadata::{
    DatabaseMetadata, EndpointInfo, MetadataExchangeRequest, TEXT_NO_COMMON_VERSION,
    negotiate_version,
};
use open_deno_kv_connect::{convert, prost::Message};
use open_deno_kv_model::{Backend, KvError};
use uuid::Uuid;

use crate::backup::BackupMethod;
use crate::config::Access;
use crate::databases::{ConnectionDatabases, DatabaseRef, Opened};
use crate::ext;
use crate::metrics::Endpoint;
use crate::queue::QueueMethod;
use crate::range::RangeMethod;
use crate::request::{authorize, read_body};
use crate::response::{
    Failure, PROTOBUF, ResponseBody, bytes_response, internal, kv_failure, method_not_allowed,
    text_response, too_many_streams,
};
use crate::shared::Shared;

/// The data-path prefix handed out as the one `strong` endpoint.
const ENDPOINT: &str = "/v2";

/// The data-path methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DataMethod {
    SnapshotRead,
    AtomicWrite,
    Watch,
    /// The `queue/1` extension ([`crate::queue`]).
    Queue(QueueMethod),
    /// The `count/1` and `watch-range/1` extensions ([`crate::range`]).
    Range(RangeMethod),
    /// The `snapshot/1` and `change-log/1` extensions ([`crate::backup`]).
    Backup(BackupMethod),
}

impl DataMethod {
    /// The endpoint it is counted under.
    fn endpoint(self) -> Endpoint {
        match self {
            DataMethod::SnapshotRead => Endpoint::SnapshotRead,
            DataMethod::AtomicWrite => Endpoint::AtomicWrite,
            DataMethod::Watch => Endpoint::Watch,
            DataMethod::Queue(QueueMethod::Dequeue) => Endpoint::QueueDequeue,
            DataMethod::Queue(QueueMethod::Finish) => Endpoint::QueueFinish,
            DataMethod::Queue(QueueMethod::KeepAlive) => Endpoint::QueueKeepAlive,
            DataMethod::Range(RangeMethod::Count) => Endpoint::RangeCount,
            DataMethod::Range(RangeMethod::Watch) => Endpoint::RangeWatch,
            DataMethod::Backup(method) => method.endpoint(),
        }
    }
}

/// Entry point for every request: routes it, then counts it ([`crate::metrics`]) and logs it
/// at debug level (method, endpoint, status, duration; never the path's query, a header or a
/// body).
pub(crate) async fn handle(
    request: Request<Incoming>,
    shared: Arc<Shared>,
    connection: Arc<ConnectionDatabases>,
) -> Result<Response<ResponseBody>, Infallible> {
    let started = Instant::now();
    let method = request.method().clone();
    let (endpoint, response) = route(request, &shared, &connection).await;
    let elapsed = started.elapsed();
    let status = response.status();
    shared.metrics.request(endpoint, status, elapsed);
    tracing::debug!(
        method = %method,
        endpoint = endpoint.label(),
        status = status.as_u16(),
        duration_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        "request"
    );
    Ok(response)
}

/// Answers `request`, and says which endpoint it was for.
async fn route(
    request: Request<Incoming>,
    shared: &Shared,
    connection: &ConnectionDatabases,
) -> (Endpoint, Response<ResponseBody>) {
    let path = request.uri().path().to_owned();
    let data_method = match path.strip_prefix(ENDPOINT) {
        Some("/snapshot_read") => Some(DataMethod::SnapshotRead),
        Some("/atomic_write") => Some(DataMethod::AtomicWrite),
        Some("/watch") => Some(DataMethod::Watch),
        Some(rest) => QueueMethod::parse(rest)
            .map(DataMethod::Queue)
            .or_else(|| RangeMethod::parse(rest).map(DataMethod::Range))
            .or_else(|| BackupMethod::parse(rest).map(DataMethod::Backup)),
        None => None,
    };
    if path == "/health" {
        let response = match *request.method() {
            Method::GET | Method::HEAD => text_response(StatusCode::OK, "ok\n".into()),
            _ => method_not_allowed("GET, HEAD"),
        };
        (Endpoint::Health, response)
    } else if path == "/metrics" && shared.config.metrics {
        let response = match *request.method() {
            Method::GET | Method::HEAD => metrics(shared).await,
            _ => method_not_allowed("GET, HEAD"),
        };
        (Endpoint::Metrics, response)
    } else if let Some(method) = data_method {
        let response = if request.method() != Method::POST {
            method_not_allowed("POST")
        } else {
            data_path(request, method, shared, connection)
                .await
                .unwrap_or_else(Failure::into_response)
        };
        (method.endpoint(), response)
    } else if let Some(database) = DatabaseRef::parse(&path, shared.config.ephemeral) {
        let response = if request.method() != Method::POST {
            method_not_allowed("POST")
        } else {
            metadata_exchange(request, database, shared, connection)
                .await
                .unwrap_or_else(Failure::into_response)
        };
        (Endpoint::Metadata, response)
    } else if shared.config.ui.enabled() && crate::ui::owns(&path) {
        (
            crate::ui::endpoint(&path),
            crate::ui::handle(request, shared).await,
        )
    } else {
        let response = text_response(StatusCode::NOT_FOUND, not_found_text(&path).into());
        (Endpoint::Other, response)
    }
}

/// `GET /metrics`: the exposition, or 500 if it could not be written.
async fn metrics(shared: &Shared) -> Response<ResponseBody> {
    let rendered = shared
        .metrics
        .render(
            &shared.budgets,
            shared.databases.open_databases(),
            shared.config.resources.metrics_refresh,
        )
        .await;
    match rendered {
        Ok(text) => bytes_response(crate::metrics::CONTENT_TYPE, text.into_bytes()),
        Err(err) => {
            tracing::error!(error = %err, "metrics: cannot encode the exposition");
            text_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "An internal server error occurred.".into(),
            )
        }
    }
}

/// The 404 text for a path that names no database: a path this server could serve when started
/// otherwise says which `kv serve` flag turns it on.
fn not_found_text(path: &str) -> &'static str {
    if path == "/ephemeral" || path.starts_with("/ephemeral/") {
        "Ephemeral databases are not served here: start the server with --ephemeral \
         (kv serve --ephemeral) to serve /ephemeral/..."
    } else if path == "/metrics" {
        "Metrics are not served here: start the server with --metrics (kv serve --metrics) \
         to serve GET /metrics."
    } else if crate::ui::owns(path) {
        "The explorer is not served here: start the server with --ui (kv serve --ui) to serve \
         it at /ui."
    } else {
        "Resource not found."
    }
}

/// The 404 text for `/db/NAME` when this server has no such database.
const NO_NAMED_DATABASE: &str = "No such database: /db/NAME is served only from a database \
                                 directory; start the server with --db-dir DIR \
                                 (kv serve --db-dir DIR)";

// ---- metadata exchange ------------------------------------------------------------------------------

async fn metadata_exchange(
    request: Request<Incoming>,
    database: DatabaseRef,
    shared: &Shared,
    connection: &ConnectionDatabases,
) -> Result<Response<ResponseBody>, Failure> {
    // Access first: a stranger learns nothing about versions or databases.
    authorize(request.headers(), &shared.config.access)?;
    let mut extensions = offered_extensions(request.headers(), &shared.config.extensions);
    let body = read_body(request, shared).await?;
    let exchange =
        MetadataExchangeRequest::parse(&body).map_err(|e| Failure::bad_request(e.message))?;
    let version = negotiate_version(&exchange.supported_versions)
        .ok_or_else(|| Failure::bad_request(TEXT_NO_COMMON_VERSION))?;
    let database_id = match database {
        DatabaseRef::Default => Uuid::nil(),
        DatabaseRef::Named(name) => opened(shared, shared.databases.named(&name), || {
            Failure::new(StatusCode::NOT_FOUND, NO_NAMED_DATABASE)
        })?,
        DatabaseRef::Ephemeral(key) => connection.ephemeral(&key),
        DatabaseRef::Scratch(rest) => shared.databases.scratch(&rest).ok_or_else(|| {
            Failure::new(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many scratch databases on this server.",
            )
        })?,
    };
    if !extensions.is_empty() {
        // The backup and change log extensions only for a database whose backend has them.
        let backend =
            connection
                .by_id(&database_id)
                .or_else(|| match shared.databases.by_id(&database_id) {
                    Ok(Opened::Ready(backend)) => Some(backend),
                    _ => None,
                });
        if let Some(backend) = backend {
            extensions.retain(|name| crate::backup::backend_serves(backend.as_ref(), name));
        }
    }
    let token = match &shared.config.access {
        Access::Token(token) => token.clone(),
        Access::Open => "open".to_owned(),
    };
    let ttl = chrono::TimeDelta::from_std(shared.config.metadata_ttl)
        .unwrap_or(chrono::TimeDelta::days(1));
    let metadata = DatabaseMetadata {
        version,
        database_id,
        endpoints: vec![EndpointInfo {
            url: ENDPOINT.to_owned(),
            consistency: "strong".to_owned(),
        }],
        token,
        expires_at: Utc::now() + ttl,
    };
    Ok(bytes_response(
        "application/json",
        with_extensions(metadata.to_json(), &extensions),
    ))
}

/// The extensions to offer in the metadata: those of `offered` (the server's configuration)
/// the client asked for in its [`ext::EXT_HEADER`] header(s), none for a client that did not
/// ask (every stock client).
fn offered_extensions(headers: &HeaderMap, offered: &[&'static str]) -> Vec<&'static str> {
    let asked: Vec<&str> = headers
        .get_all(ext::EXT_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if asked.is_empty() {
        return Vec::new();
    }
    ext::Extensions::negotiate(Some(&asked.join(",")), offered)
}

/// The metadata JSON, with the extra [`ext::METADATA_FIELD`] listing `extensions` when there
/// are any. With none it is exactly the protocol's fields: `@deno/kv` refuses anything more.
fn with_extensions(json: Vec<u8>, extensions: &[&'static str]) -> Vec<u8> {
    if extensions.is_empty() {
        return json;
    }
    match serde_json::from_slice::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(mut fields)) => {
            fields.insert(ext::METADATA_FIELD.to_owned(), extensions.to_vec().into());
            serde_json::to_vec(&fields).unwrap_or(json)
        }
        _ => json,
    }
}

// ---- data path --------------------------------------------------------------------------------------

async fn data_path(
    request: Request<Incoming>,
    method: DataMethod,
    shared: &Shared,
    connection: &ConnectionDatabases,
) -> Result<Response<ResponseBody>, Failure> {
    authorize(request.headers(), &shared.config.access)?;
    let headers = request.headers();
    let version = headers.get("x-denokv-version").map(HeaderValue::as_bytes);
    if !matches!(version, Some(b"2" | b"3")) {
        return Err(Failure::bad_request("Expected protocol version 2."));
    }
    let invalid_id = || Failure::bad_request("Invalid database id.");
    let database = headers
        .get("x-denokv-database-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| Uuid::parse_str(v).ok())
        .ok_or_else(invalid_id)?;
    let backend = match connection.by_id(&database) {
        Some(backend) => backend,
        None => opened(shared, shared.databases.by_id(&database), invalid_id)?,
    };
    let expiry = ext::requested(headers, ext::EXPIRY);
    if method == DataMethod::Backup(BackupMethod::Import) {
        // The one request whose body is streamed rather than read whole (see crate::backup).
        return crate::backup::import(request, backend, shared).await;
    }
    let body = read_body(request, shared).await?;
    match method {
        DataMethod::SnapshotRead => snapshot_read(&body, backend.as_ref(), shared, expiry).await,
        DataMethod::AtomicWrite => atomic_write(&body, backend.as_ref(), shared).await,
        DataMethod::Watch => watch(&body, backend, shared, expiry),
        DataMethod::Queue(method) => {
            crate::queue::handle(method, &body, backend, database, shared).await
        }
        DataMethod::Range(method) => crate::range::handle(method, &body, backend, shared).await,
        DataMethod::Backup(method) => crate::backup::handle(method, &body, backend, shared).await,
    }
}

async fn snapshot_read(
    body: &[u8],
    backend: &dyn Backend,
    shared: &Shared,
    expiry: bool,
) -> Result<Response<ResponseBody>, Failure> {
    let read = convert::decode_snapshot_read(body).map_err(|e| Failure::bad_request(e.message))?;
    shared
        .config
        .limits
        .validate_snapshot_read(&read)
        .map_err(|e| kv_failure(shared, &e))?;
    let ranges = backend
        .snapshot_read(read)
        .await
        .map_err(|e| kv_failure(shared, &e))?;
    let mut output = convert::snapshot_read_output(&ranges).encode_to_vec();
    if expiry {
        // The `expiry/1` extension: one more field after the standard message.
        let times = ext::SnapshotReadExpiry::of(&ranges);
        output.extend_from_slice(&times.encode_to_vec());
    }
    Ok(bytes_response(PROTOBUF, output))
}

async fn atomic_write(
    body: &[u8],
    backend: &dyn Backend,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    let mut write =
        convert::decode_atomic_write(body).map_err(|e| Failure::bad_request(e.message))?;
    // The `enqueue-no-retry/1` and `range-delete/1` extensions (absent in other clients'
    // bodies): applied strictly, so a body they do not fit is refused whole.
    let range_deletes = shared.config.extensions.contains(&ext::RANGE_DELETE);
    ext::AtomicWriteExt::decode(body)
        .map_err(|e| Failure::bad_request(format!("Request protobuf is invalid: {e}")))?
        .apply_to(&mut write, range_deletes)
        .map_err(|e| Failure::bad_request(e.message))?;
    shared
        .config
        .limits
        .validate_atomic_write(&write, Utc::now())
        .map_err(|e| kv_failure(shared, &e))?;
    let result = backend
        .atomic_write(write)
        .await
        .map_err(|e| kv_failure(shared, &e))?;
    shared.metrics.commit(result.is_some());
    // Backends do not say which check failed; the list stays empty (Deno ignores it).
    let output = convert::atomic_write_output(result, Vec::new());
    Ok(bytes_response(PROTOBUF, output.encode_to_vec()))
}

/// Starts a watch stream; it holds a slot under [`crate::ResourceLimits::max_watches`] (429
/// beyond: a 4xx, so Deno's client reports an error instead of retrying) and keeps `backend`
/// open while it runs.
fn watch(
    body: &[u8],
    backend: Arc<dyn Backend>,
    shared: &Shared,
    expiry: bool,
) -> Result<Response<ResponseBody>, Failure> {
    let keys = convert::decode_watch(body).map_err(|e| Failure::bad_request(e.message))?;
    shared
        .config
        .limits
        .validate_watch(&keys)
        .map_err(|e| kv_failure(shared, &e))?;
    let slot = shared
        .budgets
        .watch()
        .ok_or_else(|| too_many_streams(shared, "watches"))?;
    let stream = if keys.is_empty() {
        None
    } else {
        Some(
            backend
                .watch(keys.clone())
                .map_err(|e| kv_failure(shared, &e))?,
        )
    };
    let body = crate::watch::watch_body(
        stream,
        keys.len(),
        crate::watch::WatchOptions {
            keep_alive_every: shared.config.keep_alive_interval,
            shutdown: shared.shutdown.clone(),
            expiry,
            held: (slot, backend),
        },
    );
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(response)
}

// ---- database lookups ------------------------------------------------------------------------------

/// What a database lookup found, as the database or the answer to give instead: `unknown()`
/// when there is no such database, `503` naming the cap when too many are open.
fn opened<T>(
    shared: &Shared,
    lookup: Result<Opened<T>, KvError>,
    unknown: impl FnOnce() -> Failure,
) -> Result<T, Failure> {
    match lookup {
        Ok(Opened::Ready(found)) => Ok(found),
        Ok(Opened::Unknown) => Err(unknown()),
        Ok(Opened::TooManyOpen { cap }) => Err(Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Too many databases open on this server (the cap is {cap}); try again later."),
        )),
        Err(err) => Err(internal(shared, &err)),
    }
}

//! The `snapshot/1` and `change-log/1` protocol extensions: backups, restores and the change
//! log over the network (wire shapes in [`crate::ext`]).
//!
//! Endpoints next to the data path, with its headers and status rules, each offered only when
//! [`crate::ServerConfig::extensions`] lists its extension (404 otherwise):
//!
//! | endpoint | request | answer |
//! |---|---|---|
//! | `POST <endpoint>/snapshot/export` | empty, or [`crate::ext::ExportRequest`] `{messages_only}` | **200** and a stream of [`crate::ext::SnapshotFrame`]s (header, batches, end) |
//! | `POST <endpoint>/snapshot/import` | the same stream | **200** [`crate::ext::ImportResponse`] once the import committed |
//! | `POST <endpoint>/change_log/status` | empty | **200** [`crate::ext::ChangeLogStatusResponse`] |
//! | `POST <endpoint>/change_log/read` | [`crate::ext::ReadChangeLogRequest`] | **200** [`crate::ext::ReadChangeLogResponse`] |
//! | `POST <endpoint>/change_log/configure` | [`crate::ext::ConfigureChangeLogRequest`] | **200**, empty |
//!
//! A database whose backend cannot export, import or keep a change log answers 400 ("This
//! database does not support ..."), and the metadata does not offer the extension for it; a
//! read-only database refuses an import and `configure` as it refuses writes (400 "This
//! database is read only."). An import into a database that is not empty is answered 400 with
//! the text of [`open_deno_kv_model::KvError::NotEmpty`], which the client reads back as that
//! error.
//!
//! **What an export holds.** The backend's read snapshot, for as long as the answer streams:
//! the body asks the backend's stream for more items only when the connection took the last
//! batch, so a slow client holds one batch of memory (and the snapshot), never a copy of the
//! store. An export is a long-lived stream like a watch: it takes a slot under
//! [`crate::ResourceLimits::max_watches`] (429 beyond) and ends (without its end frame, which
//! the client reports as an error) when the server shuts down.
//!
//! **How an import is admitted.** A store can be far larger than
//! [`crate::ServerConfig::max_body_bytes`], so an import's body is the one body not read whole:
//! it is read frame by frame while the backend writes, and the caps apply per frame instead —
//! no frame may be larger than `max_body_bytes` (413), the import holds `max_body_bytes` of the
//! body memory budget ([`crate::ResourceLimits::max_body_memory`]) for its whole run (503 when
//! that is not free), and each piece of the body must arrive within
//! [`crate::ResourceLimits::body_timeout`] of the last one (the timeout bounds a silent client,
//! not the length of a restore). Whatever breaks the stream — a body cut short, a frame out of
//! place, a missing end frame, a timeout — fails the import, and the engine rolls it back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_model::{Backend, KvError, Snapshot, SnapshotItem, SnapshotStream, Versionstamp};
use prost::Message;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::watch as signal;

use crate::ext::{
    self, ChangeLogStatusResponse, ConfigureChangeLogRequest, ExportRequest, ImportResponse,
    ReadChangeLogRequest, ReadChangeLogResponse, SnapshotBatches, SnapshotFrame, SnapshotReader,
    SnapshotWriter, snapshot_items,
};
use crate::metrics::Endpoint;
use crate::response::{
    Failure, ResponseBody, bytes_response, kv_failure, protobuf_response, too_many_streams,
};
use crate::shared::Shared;

/// The backup and change log endpoints, after `<endpoint>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackupMethod {
    /// `/snapshot/export`.
    Export,
    /// `/snapshot/import`.
    Import,
    /// `/change_log/status`.
    LogStatus,
    /// `/change_log/read`.
    LogRead,
    /// `/change_log/configure`.
    LogConfigure,
}

impl BackupMethod {
    /// The method of a data-path suffix, if it is one of these.
    pub(crate) fn parse(rest: &str) -> Option<BackupMethod> {
        match rest {
            "/snapshot/export" => Some(BackupMethod::Export),
            "/snapshot/import" => Some(BackupMethod::Import),
            "/change_log/status" => Some(BackupMethod::LogStatus),
            "/change_log/read" => Some(BackupMethod::LogRead),
            "/change_log/configure" => Some(BackupMethod::LogConfigure),
            _ => None,
        }
    }

    /// The endpoint it is counted under.
    pub(crate) fn endpoint(self) -> Endpoint {
        match self {
            BackupMethod::Export => Endpoint::SnapshotExport,
            BackupMethod::Import => Endpoint::SnapshotImport,
            BackupMethod::LogStatus => Endpoint::ChangeLogStatus,
            BackupMethod::LogRead => Endpoint::ChangeLogRead,
            BackupMethod::LogConfigure => Endpoint::ChangeLogConfigure,
        }
    }

    /// The extension that offers it.
    fn extension(self) -> &'static str {
        match self {
            BackupMethod::Export | BackupMethod::Import => ext::SNAPSHOT,
            _ => ext::CHANGE_LOG,
        }
    }
}

/// Whether a backend with these capabilities can serve `extension` (the metadata leaves it
/// out otherwise). Other extensions are not this module's business: `true`.
pub(crate) fn backend_serves(backend: &dyn Backend, extension: &str) -> bool {
    let capabilities = backend.capabilities();
    match extension {
        ext::SNAPSHOT => capabilities.export,
        ext::CHANGE_LOG => capabilities.change_log,
        _ => true,
    }
}

/// 404 unless the server offers `method`'s extension.
fn check_offered(method: BackupMethod, shared: &Shared) -> Result<(), Failure> {
    if shared.config.extensions.contains(&method.extension()) {
        Ok(())
    } else {
        Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!(
                "This server does not offer the {} extension.",
                method.extension()
            ),
        ))
    }
}

/// Answers every method but the import (authorized, its database found, its body read).
pub(crate) async fn handle(
    method: BackupMethod,
    body: &[u8],
    backend: Arc<dyn Backend>,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    check_offered(method, shared)?;
    let failed = |e: KvError| kv_failure(shared, &e);
    let invalid =
        |e: prost::DecodeError| Failure::bad_request(format!("Request protobuf is invalid: {e}"));
    match method {
        BackupMethod::Export => {
            let request = ExportRequest::decode(body).map_err(invalid)?;
            export(backend, shared, request.messages_only).await
        }
        BackupMethod::Import => Err(Failure::bad_request("An import's body is streamed.")),
        BackupMethod::LogStatus => {
            let status = backend.change_log_status().await.map_err(failed)?;
            Ok(protobuf_response(
                ChangeLogStatusResponse::from(status).encode_to_vec(),
            ))
        }
        BackupMethod::LogRead => {
            let (after, limit) = ReadChangeLogRequest::decode_request(body)
                .map_err(|e| Failure::bad_request(e.message))?;
            let records = backend
                .read_change_log(after, limit)
                .await
                .map_err(failed)?;
            Ok(protobuf_response(
                ReadChangeLogResponse::of(&records).encode_to_vec(),
            ))
        }
        BackupMethod::LogConfigure => {
            let request = ConfigureChangeLogRequest::decode(body).map_err(invalid)?;
            backend
                .configure_change_log(request.retention())
                .await
                .map_err(failed)?;
            Ok(protobuf_response(Vec::new()))
        }
    }
}

// ---- export ---------------------------------------------------------------------------------------

/// Starts an export stream (a slot under the watch cap, held with the database until it ends).
async fn export(
    backend: Arc<dyn Backend>,
    shared: &Shared,
    messages_only: bool,
) -> Result<Response<ResponseBody>, Failure> {
    let slot = shared
        .budgets
        .watch()
        .ok_or_else(|| too_many_streams(shared, "watches and exports"))?;
    let snapshot = if messages_only {
        // The queue only: listed as such, not filtered out of a read of the whole store.
        let messages = backend
            .queued_messages()
            .await
            .map_err(|e| kv_failure(shared, &e))?;
        let items = messages.into_iter().map(SnapshotItem::Message).collect();
        Snapshot::from_items(Versionstamp::ZERO, items)
    } else {
        backend
            .export_snapshot()
            .await
            .map_err(|e| kv_failure(shared, &e))?
    };
    let items = snapshot.items;
    let state = ExportState {
        writer: Some(SnapshotWriter::new(snapshot.versionstamp)),
        header_sent: false,
        items,
        queued: Vec::new(),
        shutdown: shared.shutdown.clone(),
        _held: (slot, backend),
    };
    let frames = futures::stream::unfold(state, next_export_frame)
        .map(|bytes| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(bytes))));
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(response)
}

struct ExportState {
    /// `None` once the end (or a failure) was sent.
    writer: Option<SnapshotWriter>,
    header_sent: bool,
    items: SnapshotStream,
    /// Frames ready to go, in reverse order (popped from the back).
    queued: Vec<SnapshotFrame>,
    shutdown: signal::Receiver<bool>,
    _held: (OwnedSemaphorePermit, Arc<dyn Backend>),
}

async fn next_export_frame(mut state: ExportState) -> Option<(Vec<u8>, ExportState)> {
    loop {
        if *state.shutdown.borrow() {
            // Ended without its end frame: the client reports the export as cut.
            return None;
        }
        if let Some(frame) = state.queued.pop() {
            return Some((frame.to_payload(), state));
        }
        let writer = state.writer.as_mut()?;
        if !state.header_sent {
            state.header_sent = true;
            return Some((writer.header().to_payload(), state));
        }
        let shutdown = &mut state.shutdown;
        let item = tokio::select! {
            () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => return None,
            item = state.items.next() => item,
        };
        match item {
            Some(Ok(item)) => {
                let mut frames = writer.push(item);
                frames.reverse();
                state.queued = frames;
            }
            Some(Err(err)) => {
                state.writer = None;
                return Some((SnapshotFrame::failure(err.to_string()).to_payload(), state));
            }
            None => {
                let mut frames = state.writer.take()?.finish();
                frames.reverse();
                state.queued = frames;
            }
        }
    }
}

// ---- import ---------------------------------------------------------------------------------------

/// `POST <endpoint>/snapshot/import`: the body is read frame by frame while the backend imports
/// (see the module documentation for the caps).
pub(crate) async fn import(
    request: Request<Incoming>,
    backend: Arc<dyn Backend>,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    check_offered(BackupMethod::Import, shared)?;
    let capabilities = backend.capabilities();
    if capabilities.read_only {
        return Err(kv_failure(shared, &KvError::ReadOnly));
    }
    if !capabilities.import {
        return Err(kv_failure(
            shared,
            &KvError::Unsupported {
                feature: "importing a snapshot (restore)",
            },
        ));
    }
    let max = shared.config.max_body_bytes;
    let budget = shared.budgets.body_bytes(max).ok_or_else(|| {
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "The server is buffering too many request bodies at once (the cap is {} bytes); \
                 try again later.",
                shared.config.resources.max_body_memory
            ),
        )
    })?;
    let mut body = ImportBody {
        body: request.into_body(),
        decoder: FrameDecoder::with_max_frame(max),
        reader: SnapshotReader::default(),
        timeout: shared.config.resources.body_timeout,
        max,
        _budget: budget,
    };
    // The header first: the snapshot's versionstamp is needed before the import starts.
    let first = body.next_items().await.map_err(|e| e.failure(max))?;
    let Some(versionstamp) = body.reader.versionstamp() else {
        return Err(Failure::bad_request(
            "invalid snapshot stream: the stream does not start with its header",
        ));
    };
    debug_assert!(first.is_empty());
    let items = snapshot_items(body);
    let summary = backend
        .import_snapshot(Snapshot {
            versionstamp,
            items,
        })
        .await
        .map_err(|e| match e.body_failure() {
            Some(failure) => failure.failure(max),
            // The client reads this text back as the error.
            None if matches!(e, KvError::NotEmpty) => Failure::bad_request(e.to_string()),
            None => kv_failure(shared, &e),
        })?;
    Ok(bytes_response(
        crate::response::PROTOBUF,
        ImportResponse::from(summary).encode_to_vec(),
    ))
}

/// An import's request body, read frame by frame.
struct ImportBody {
    body: Incoming,
    decoder: FrameDecoder,
    reader: SnapshotReader,
    timeout: Duration,
    max: usize,
    _budget: OwnedSemaphorePermit,
}

/// What went wrong reading an import's body.
#[derive(Debug, Clone)]
enum BodyError {
    /// Malformed: 400 with this text.
    Invalid(String),
    /// A frame over the cap: 413.
    TooLarge,
    /// Nothing arrived within the body timeout: 408.
    Timeout(Duration),
    /// The body broke off or ended early: 400.
    Cut(String),
}

/// The text an import's stream error carries, to find the body's failure in the backend's
/// error again (the engine wraps the stream's error as it likes; it keeps its text).
const BODY_ERROR_TAG: &str = "snapshot import body: ";

impl BodyError {
    fn text(&self, max: usize) -> String {
        match self {
            BodyError::Invalid(text) | BodyError::Cut(text) => text.clone(),
            BodyError::TooLarge => format!("Request body frame too large (max {max} bytes)."),
            BodyError::Timeout(timeout) => format!(
                "Request body not received within {} seconds.",
                timeout.as_secs_f64()
            ),
        }
    }

    fn failure(&self, max: usize) -> Failure {
        let status = match self {
            BodyError::Invalid(_) | BodyError::Cut(_) => StatusCode::BAD_REQUEST,
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
        };
        Failure::new(status, self.text(max))
    }

    /// The error the import's item stream yields (the engine then rolls back).
    fn into_kv_error(self) -> KvError {
        let code = match &self {
            BodyError::Invalid(_) => "invalid",
            BodyError::TooLarge => "too-large",
            BodyError::Timeout(_) => "timeout",
            BodyError::Cut(_) => "cut",
        };
        let detail = match &self {
            BodyError::Invalid(text) | BodyError::Cut(text) => text.clone(),
            BodyError::Timeout(timeout) => timeout.as_millis().to_string(),
            BodyError::TooLarge => String::new(),
        };
        KvError::invalid_argument(format!("{BODY_ERROR_TAG}{code}: {detail}"))
    }
}

trait BodyFailure {
    /// The body's failure this error stands for, if it is one.
    fn body_failure(&self) -> Option<BodyError>;
}

impl BodyFailure for KvError {
    fn body_failure(&self) -> Option<BodyError> {
        let text = self.to_string();
        let rest = &text[text.find(BODY_ERROR_TAG)? + BODY_ERROR_TAG.len()..];
        let (code, detail) = rest.split_once(": ").unwrap_or((rest, ""));
        Some(match code {
            "invalid" => BodyError::Invalid(detail.to_owned()),
            "too-large" => BodyError::TooLarge,
            "timeout" => BodyError::Timeout(Duration::from_millis(detail.parse().unwrap_or(0))),
            _ => BodyError::Cut(detail.to_owned()),
        })
    }
}

impl SnapshotBatches for ImportBody {
    fn ended(&self) -> bool {
        self.reader.is_complete()
    }

    async fn next_batch(&mut self) -> Result<Vec<SnapshotItem>, KvError> {
        self.next_items().await.map_err(BodyError::into_kv_error)
    }
}

impl ImportBody {
    /// The items of the next frame that carries any (the header and the end carry none: an
    /// empty list then); waits for body bytes as needed.
    async fn next_items(&mut self) -> Result<Vec<SnapshotItem>, BodyError> {
        loop {
            match self.decoder.next_payload() {
                Err(_) => return Err(BodyError::TooLarge),
                Ok(Some(RawFrame::KeepAlive)) => continue,
                Ok(Some(RawFrame::Payload(bytes))) => {
                    return self
                        .reader
                        .push_bytes(&bytes)
                        .map_err(|e| BodyError::Invalid(e.message));
                }
                Ok(None) => {}
            }
            if self.decoder.pending() > self.max.saturating_add(4) {
                return Err(BodyError::TooLarge);
            }
            let frame = tokio::time::timeout(self.timeout, self.body.frame())
                .await
                .map_err(|_| BodyError::Timeout(self.timeout))?;
            match frame {
                None => {
                    return Err(BodyError::Cut(
                        "invalid snapshot stream: the body ended before its end frame".into(),
                    ));
                }
                Some(Err(_)) => {
                    return Err(BodyError::Cut(
                        "Failed to read the request body: it broke off.".into(),
                    ));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.push(&data);
                    }
                }
            }
        }
    }
}

//! Backups, restores and the change log over the network: the `snapshot/1` and `change-log/1`
//! extensions of open-deno-kv-server (see [`open_deno_kv_connect::ext`]). Each is used only
//! once the metadata says the server offers it; otherwise the call fails with
//! [`KvError::Unsupported`] and nothing is sent.
//!
//! An export is the server's answer read lazily: the [`Snapshot`]'s items come off the response
//! body one batch at a time, and dropping the stream drops the body, which resets the request
//! (the server then releases its read snapshot). A stream that ends before its end frame is an
//! error item, never a short snapshot. An import sends the given snapshot as the request body
//! while it is read, one batch at a time; an error in the given stream (or dropping the import)
//! resets the request, so the server's import fails and its engine rolls back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::{
    ImportSummary, KvError, QueuedMessage, Snapshot, SnapshotItem, SnapshotStream, Versionstamp,
};

use crate::ext::{
    ChangeLogStatusResponse, ConfigureChangeLogRequest, ExportRequest, ImportResponse,
    ReadChangeLogRequest, ReadChangeLogResponse, SnapshotBatches, SnapshotFrame, SnapshotReader,
    SnapshotWriter, snapshot_items,
};
use crate::transport::{Inner, Replay, RequestBody, lock, protocol};

const NO_EXPORT: &str = "exporting a snapshot (the server does not offer snapshot/1)";
const NO_IMPORT: &str = "importing a snapshot (the server does not offer snapshot/1)";
const NO_CHANGE_LOG: &str = "a change log (the server does not offer change-log/1)";

/// The server's "This database does not support ..." (400) as [`KvError::Unsupported`].
fn unsupported(err: KvError, feature: &'static str) -> KvError {
    if err.to_string().contains("This database does not support") {
        KvError::Unsupported { feature }
    } else {
        err
    }
}

/// Fails with `feature` unless the server offers the extension (`offered` reads it from the
/// metadata, fetched first if need be).
async fn require(
    inner: &Inner,
    offered: impl Fn(&crate::ext::Extensions) -> bool,
    feature: &'static str,
) -> Result<(), KvError> {
    if offered(&inner.session(false, None).await?.extensions) {
        Ok(())
    } else {
        Err(KvError::Unsupported { feature })
    }
}

// ---- export ---------------------------------------------------------------------------------------

/// `POST <endpoint>/snapshot/export`: reads the header, then hands out the rest as a stream.
pub(crate) async fn export(inner: Arc<Inner>, messages_only: bool) -> Result<Snapshot, KvError> {
    require(&inner, |e| e.snapshot, NO_EXPORT).await?;
    let (_, response) = inner
        .call(
            "snapshot/export",
            ExportRequest { messages_only }.encode_to_vec(),
            Replay::Safe,
            inner.options.request_timeout,
        )
        .await
        .map_err(|e| unsupported(e, NO_EXPORT))?;
    let mut body = ExportBody {
        body: response.into_body(),
        decoder: FrameDecoder::default(),
        reader: SnapshotReader::default(),
        idle: inner
            .options
            .request_timeout
            .max(inner.options.watch_idle_timeout),
        inner,
    };
    let header = body.next_items().await?;
    let Some(versionstamp) = body.reader.versionstamp() else {
        return Err(protocol("the export stream does not start with its header"));
    };
    debug_assert!(header.is_empty());
    let items = snapshot_items(body);
    Ok(Snapshot {
        versionstamp,
        items,
    })
}

/// An export's answer, read frame by frame.
struct ExportBody {
    body: Incoming,
    decoder: FrameDecoder,
    reader: SnapshotReader,
    /// The longest silence accepted between two pieces of the answer.
    idle: Duration,
    inner: Arc<Inner>,
}

impl SnapshotBatches for ExportBody {
    fn ended(&self) -> bool {
        self.reader.is_complete()
    }

    async fn next_batch(&mut self) -> Result<Vec<SnapshotItem>, KvError> {
        self.next_items().await
    }
}

impl ExportBody {
    /// The items of the next frame (none for the header and the end).
    async fn next_items(&mut self) -> Result<Vec<SnapshotItem>, KvError> {
        loop {
            match self.decoder.next_payload().map_err(protocol)? {
                Some(RawFrame::KeepAlive) => continue,
                Some(RawFrame::Payload(bytes)) => {
                    return self.reader.push_bytes(&bytes).map_err(protocol);
                }
                None => {}
            }
            let next = tokio::select! {
                () = self.inner.wait_closed() => return Err(KvError::Closed),
                next = tokio::time::timeout(self.idle, self.body.frame()) => next,
            };
            match next {
                Err(_) => {
                    return Err(protocol(format!(
                        "the export stream stayed silent for {:?}",
                        self.idle
                    )));
                }
                Ok(None) => {
                    return Err(protocol(
                        "the export stream ended before its end frame (the snapshot is \
                         incomplete)",
                    ));
                }
                Ok(Some(Err(e))) => {
                    return Err(protocol(format!("the export stream broke off: {e}")));
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.push(&data);
                    }
                }
            }
        }
    }
}

/// The queue, listed from an export without its entries (`messages_only`): every message,
/// waiting or being delivered (those as ready at the export's time), by ready time.
pub(crate) async fn queued_messages(inner: Arc<Inner>) -> Result<Vec<QueuedMessage>, KvError> {
    let snapshot = export(inner, true).await.map_err(|e| match e {
        KvError::Unsupported { .. } => KvError::Unsupported {
            feature: "queue inspection (the server does not offer snapshot/1)",
        },
        other => other,
    })?;
    let mut messages = Vec::new();
    let mut items = snapshot.items;
    while let Some(item) = items.next().await {
        match item? {
            SnapshotItem::Message(message) => messages.push(message),
            SnapshotItem::Entry(_) => return Err(protocol("an entry in a messages-only export")),
        }
    }
    Ok(messages)
}

// ---- import ---------------------------------------------------------------------------------------

/// The error of the given snapshot's stream, kept to report it rather than the reset request.
type SourceError = Arc<Mutex<Option<KvError>>>;

/// `POST <endpoint>/snapshot/import` with `snapshot` as the streamed body.
pub(crate) async fn import(inner: &Inner, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
    require(inner, |e| e.snapshot, NO_IMPORT).await?;
    let source_error: SourceError = Arc::default();
    let body = import_body(snapshot, source_error.clone());
    let answer = inner.call_streaming("snapshot/import", body).await;
    if let Some(err) = lock(&source_error).take() {
        return Err(err);
    }
    let bytes = answer.map_err(|e| unsupported(e, NO_IMPORT))?;
    let response = ImportResponse::decode(bytes.as_ref()).map_err(protocol)?;
    Ok(response.into())
}

struct ImportState {
    items: SnapshotStream,
    /// `None` once the end frame was queued.
    writer: Option<SnapshotWriter>,
    /// Frames to send, in reverse order.
    queued: Vec<SnapshotFrame>,
    source_error: SourceError,
}

/// The request body: the header, the batches as the items come, the end frame. An error item
/// ends the body with an error (the request is reset, so the server never sees an end frame).
fn import_body(snapshot: Snapshot, source_error: SourceError) -> RequestBody {
    let writer = SnapshotWriter::new(snapshot.versionstamp);
    let state = ImportState {
        items: snapshot.items,
        queued: vec![writer.header()],
        writer: Some(writer),
        source_error,
    };
    type Chunk = Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>;
    let frames = futures::stream::unfold(Some(state), |state| async move {
        let mut state = state?;
        loop {
            if let Some(frame) = state.queued.pop() {
                let chunk: Chunk = Ok(Frame::data(Bytes::from(frame.to_payload())));
                return Some((chunk, Some(state)));
            }
            let writer = state.writer.as_mut()?;
            match state.items.next().await {
                Some(Ok(item)) => {
                    let mut frames = writer.push(item);
                    frames.reverse();
                    state.queued = frames;
                }
                Some(Err(err)) => {
                    let text = err.to_string();
                    *lock(&state.source_error) = Some(err);
                    let chunk: Chunk = Err(text.into());
                    return Some((chunk, None));
                }
                None => {
                    let mut frames = state.writer.take()?.finish();
                    frames.reverse();
                    state.queued = frames;
                }
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

// ---- change log -----------------------------------------------------------------------------------

/// `POST <endpoint>/change_log/configure`.
pub(crate) async fn configure(inner: &Inner, retention: Option<Duration>) -> Result<(), KvError> {
    require(inner, |e| e.change_log, NO_CHANGE_LOG).await?;
    let body = ConfigureChangeLogRequest::of(retention).encode_to_vec();
    inner
        .call_for_bytes("change_log/configure", body, Replay::Safe)
        .await
        .map_err(|e| unsupported(e, NO_CHANGE_LOG))?;
    Ok(())
}

/// `POST <endpoint>/change_log/status`.
pub(crate) async fn status(inner: &Inner) -> Result<ChangeLogStatus, KvError> {
    require(inner, |e| e.change_log, NO_CHANGE_LOG).await?;
    let (_, bytes) = inner
        .call_for_bytes("change_log/status", Vec::new(), Replay::Safe)
        .await
        .map_err(|e| unsupported(e, NO_CHANGE_LOG))?;
    ChangeLogStatusResponse::decode(bytes.as_ref())
        .map_err(protocol)?
        .into_status()
        .map_err(protocol)
}

/// `POST <endpoint>/change_log/read`.
pub(crate) async fn read(
    inner: &Inner,
    after: Versionstamp,
    limit: usize,
) -> Result<Vec<ChangeRecord>, KvError> {
    require(inner, |e| e.change_log, NO_CHANGE_LOG).await?;
    let body = ReadChangeLogRequest::of(after, limit).encode_to_vec();
    let (_, bytes) = inner
        .call_for_bytes("change_log/read", body, Replay::Safe)
        .await
        .map_err(|e| unsupported(e, NO_CHANGE_LOG))?;
    ReadChangeLogResponse::decode(bytes.as_ref())
        .map_err(protocol)?
        .into_records(after, limit)
        .map_err(protocol)
}

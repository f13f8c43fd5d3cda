//! Answers: the response body type, the failures a handler returns (status and plain text,
//! denokv's texts where denokv has one), and the open-deno-kv-model errors mapped onto them. Shared by
//! the request handlers, the queue endpoints and the watch stream.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use open_deno_kv_connect::convert::TEXT_OUTCOME_UNKNOWN;
use open_deno_kv_model::{KvError, LimitKind};

use crate::shared::Shared;

/// Response bodies: a buffer or a watch stream.
pub(crate) type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// The content type of protobuf answers.
pub(crate) const PROTOBUF: &str = "application/x-protobuf";

/// A response that is not a success: status and a plain-text reason.
pub(crate) struct Failure {
    status: StatusCode,
    text: String,
}

impl Failure {
    /// A failure answered with `status` and `text`.
    pub(crate) fn new(status: StatusCode, text: impl Into<String>) -> Self {
        Failure {
            status,
            text: text.into(),
        }
    }

    /// A 400: the request is at fault; `text` says how.
    pub(crate) fn bad_request(text: impl Into<String>) -> Self {
        Failure::new(StatusCode::BAD_REQUEST, text)
    }

    /// The answer: the status, with the reason as plain text.
    pub(crate) fn into_response(self) -> Response<ResponseBody> {
        text_response(self.status, self.text)
    }
}

/// A body of these bytes.
fn full(body: impl Into<Bytes>) -> ResponseBody {
    Full::new(body.into()).boxed_unsync()
}

/// An answer with `status` and a plain-text body.
pub(crate) fn text_response(status: StatusCode, text: String) -> Response<ResponseBody> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A 200 answer with this body and content type.
pub(crate) fn bytes_response(content_type: &'static str, body: Vec<u8>) -> Response<ResponseBody> {
    let mut response = Response::new(full(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An empty body (204 answers).
pub(crate) fn empty_body() -> ResponseBody {
    full(Bytes::new())
}

/// A 200 answer carrying a protobuf message.
pub(crate) fn protobuf_response(body: Vec<u8>) -> Response<ResponseBody> {
    bytes_response(PROTOBUF, body)
}

/// A 405 naming the methods the path takes.
pub(crate) fn method_not_allowed(allow: &'static str) -> Response<ResponseBody> {
    let mut response = Response::new(empty_body());
    *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

/// An open-deno-kv-model error as the answer denokv gives (texts byte for byte where denokv has one).
pub(crate) fn kv_failure(shared: &Shared, err: &KvError) -> Failure {
    match err {
        KvError::Limit(limit) => Failure::bad_request(match limit.kind {
            LimitKind::KeySizeWrite | LimitKind::KeySizeRead => {
                "A key exceeds the key size limit.".to_owned()
            }
            LimitKind::ValueSize | LimitKind::EnqueuePayloadSize => {
                "A value exceeds the value size limit.".to_owned()
            }
            LimitKind::ReadRanges => {
                "Too many read ranges requested in one read request.".to_owned()
            }
            LimitKind::ReadEntries => "The total number of entries requested across read \
                                       ranges in the read request is too large."
                .to_owned(),
            LimitKind::Checks => "Too many checks included in atomic write.".to_owned(),
            LimitKind::Mutations => {
                "Too many mutations / enqueues included in atomic write.".to_owned()
            }
            LimitKind::TotalMutationSize => {
                "The total size of the atomic write is too large.".to_owned()
            }
            LimitKind::WatchKeys => "Too many keys watched in a single watch request.".to_owned(),
            // denokv has no such limit (nor any limit added later); Deno's own text.
            _ => limit.to_string(),
        }),
        KvError::InvalidKey { .. } | KvError::InvalidArgument { .. } | KvError::Mutation { .. } => {
            Failure::bad_request(err.to_string())
        }
        KvError::ReadOnly => Failure::bad_request("This database is read only."),
        KvError::Unsupported { feature } => {
            Failure::bad_request(format!("This database does not support {feature}."))
        }
        // 503: Deno retries; nothing was committed.
        KvError::Closed => Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The server is temporarially unavailable, try again later.",
        ),
        KvError::Storage { .. } | KvError::Corrupt { .. } => internal(shared, err),
        // 409, not 5xx: Deno's client replays a 5xx atomic write forever and `@deno/kv` up to 10
        // times, which would apply a write that did land a second time. Neither retries a 409.
        KvError::OutcomeUnknown { .. } => {
            shared.metrics.storage_error();
            if shared.config.log_errors {
                tracing::error!(error = %err, "commit outcome unknown: answered 409");
            }
            Failure::new(StatusCode::CONFLICT, TEXT_OUTCOME_UNKNOWN)
        }
        // A kind of error added to open-deno-kv-model later: the caller's fault or the store's, as it says.
        _ if err.is_invalid_input() => Failure::bad_request(err.to_string()),
        _ => internal(shared, err),
    }
}

/// The refusal of a stream over the cap of open watch streams
/// ([`crate::ResourceLimits::max_watches`]): 429, naming the cap. `what` names what holds the
/// slots ("watches", or "watches and exports" where an export takes one too).
pub(crate) fn too_many_streams(shared: &Shared, what: &str) -> Failure {
    Failure::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "Too many {what} on this server (the cap is {}); close some and try again.",
            shared.config.resources.max_watches
        ),
    )
}

/// A failure of the server's side: 500, counted as a storage error, and logged with its cause
/// when the server logs errors (the text says nothing of the cause to the client).
pub(crate) fn internal(shared: &Shared, err: &KvError) -> Failure {
    shared.metrics.storage_error();
    if shared.config.log_errors {
        tracing::error!(error = %err, "internal error: answered 500");
    }
    Failure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "An internal server error occurred.",
    )
}

//! The `count/1` and `watch-range/1` protocol extensions: counting and watching a whole key
//! range over the network (the third range extension, `range-delete/1`, travels inside
//! `atomic_write`; see [`crate::ext`]).
//!
//! Two endpoints next to the data path, with its headers (`authorization`, `x-denokv-version`,
//! `x-denokv-database-id`) and status rules (200 success, 4xx refusals with a plain-text reason,
//! 5xx "try again"), each offered only when [`crate::ServerConfig::extensions`] lists it (404
//! otherwise):
//!
//! | endpoint | request | answer |
//! |---|---|---|
//! | `POST <endpoint>/range/count` | [`RangeRequest`] `{start, end}` | **200** [`crate::ext::RangeCountResponse`] `{entries, key_bytes, value_bytes}` from one snapshot, expired entries left out |
//! | `POST <endpoint>/range/watch` | [`RangeRequest`] `{start, end}` | **200** and a stream of frames framed as `watch`'s (length prefix, keep-alives), each a [`crate::ext::RangeWatchFrame`]; the first is `reread` |
//!
//! The bounds are checked as a read's bounds are ([`open_deno_kv_model::Limits::accept_range`]:
//! 400 with the key size text when too long); an empty or inverted range is valid and holds
//! nothing. A database that cannot count or watch ranges answers 400 ("This database does not
//! support ...").
//!
//! A range watch is a watch for the server's resources: it takes a slot under
//! [`crate::ResourceLimits::max_watches`] (429 beyond, the same text as `watch`), is counted by
//! the `kv_watches_open` gauge, ends when the server shuts down, and keeps its database open
//! while it runs. A slow client cannot make it hold more: the response body asks the backend's
//! stream for the next event only when the connection has taken the last one, and the stream
//! itself bounds what it keeps for a consumer that lags (past
//! [`open_deno_kv_model::watch::MAX_PENDING_RANGE_CHANGES`] changed keys it forgets them and
//! sends `reread`).

use std::sync::Arc;

use hyper::Response;
use hyper::StatusCode;
use hyper::header::{self, HeaderValue};
use open_deno_kv_model::Backend;
use prost::Message;

use crate::ext::{self, RangeCountResponse, RangeRequest};
use crate::response::{Failure, ResponseBody, kv_failure, protobuf_response, too_many_streams};
use crate::shared::Shared;

/// The range endpoints, after `<endpoint>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeMethod {
    /// `/range/count`.
    Count,
    /// `/range/watch`.
    Watch,
}

impl RangeMethod {
    /// The method of a data-path suffix, if it is one of these.
    pub(crate) fn parse(rest: &str) -> Option<RangeMethod> {
        match rest {
            "/range/count" => Some(RangeMethod::Count),
            "/range/watch" => Some(RangeMethod::Watch),
            _ => None,
        }
    }

    /// The extension that offers it.
    fn extension(self) -> &'static str {
        match self {
            RangeMethod::Count => ext::COUNT,
            RangeMethod::Watch => ext::WATCH_RANGE,
        }
    }
}

/// Answers one range request (authorized, its database found, its body read).
pub(crate) async fn handle(
    method: RangeMethod,
    body: &[u8],
    backend: Arc<dyn Backend>,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    if !shared.config.extensions.contains(&method.extension()) {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!(
                "This server does not offer the {} extension.",
                method.extension()
            ),
        ));
    }
    let range = RangeRequest::decode_range(body).map_err(|e| Failure::bad_request(e.message))?;
    // Checked here too (the backend's layer checks again) so that a refused range takes no
    // watch slot.
    shared
        .config
        .limits
        .accept_range(range.clone())
        .map_err(|e| kv_failure(shared, &e))?;
    match method {
        RangeMethod::Count => {
            let count = backend
                .count_range(range)
                .await
                .map_err(|e| kv_failure(shared, &e))?;
            Ok(protobuf_response(
                RangeCountResponse::from(count).encode_to_vec(),
            ))
        }
        RangeMethod::Watch => {
            let slot = shared
                .budgets
                .watch()
                .ok_or_else(|| too_many_streams(shared, "watches"))?;
            let stream = backend
                .watch_range(range)
                .map_err(|e| kv_failure(shared, &e))?;
            let body = crate::range_watch::range_watch_body(
                stream,
                crate::range_watch::RangeWatchOptions {
                    keep_alive_every: shared.config.keep_alive_interval,
                    shutdown: shared.shutdown.clone(),
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
    }
}

//! What every endpoint does with a request before its own work: check the access token, and read
//! the body whole within the server's limits. Used by the KV Connect endpoints (`handler`) and the
//! explorer's API (`ui::api`) alike.

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap};
use hyper::{Request, StatusCode};
use subtle::ConstantTimeEq;
use tokio::sync::OwnedSemaphorePermit;

use crate::config::Access;
use crate::response::Failure;
use crate::shared::Shared;

// ---- access ---------------------------------------------------------------------------------------

/// Checks `authorization: Bearer <token>` (scheme case-insensitive, token in constant time).
pub(crate) fn authorize(headers: &HeaderMap, access: &Access) -> Result<(), Failure> {
    let Access::Token(expected) = access else {
        return Ok(());
    };
    let malformed = || Failure::new(StatusCode::UNAUTHORIZED, "Malformed authorization header.");
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(malformed)?
        .as_bytes();
    let space = value
        .iter()
        .position(|b| *b == b' ')
        .ok_or_else(malformed)?;
    let (scheme, token) = (&value[..space], &value[space + 1..]);
    let scheme_ok = scheme.eq_ignore_ascii_case(b"bearer");
    // ct_eq on slices of different lengths is false (the length is not secret).
    let token_ok: bool = token.ct_eq(expected.as_bytes()).into();
    if scheme_ok && token_ok {
        Ok(())
    } else {
        Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "Invalid access token.",
        ))
    }
}

// ---- bodies -----------------------------------------------------------------------------------------

/// A request body read whole, holding its share of the server's body memory budget
/// ([`crate::ResourceLimits::max_body_memory`]) until dropped.
pub(crate) struct ReadBody {
    bytes: Vec<u8>,
    _budget: OwnedSemaphorePermit,
}

impl std::ops::Deref for ReadBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads the whole body: at most [`crate::ServerConfig::max_body_bytes`] (413 beyond), within
/// [`crate::ResourceLimits::body_timeout`] (408 after), and only while the server's body memory
/// budget lasts (503 once it is spent: the bytes are counted as they arrive).
pub(crate) async fn read_body(
    request: Request<Incoming>,
    shared: &Shared,
) -> Result<ReadBody, Failure> {
    let limits = &shared.config.resources;
    let timeout = limits.body_timeout;
    let over_budget = || {
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "The server is buffering too many request bodies at once (the cap is {} bytes); \
                 try again later.",
                limits.max_body_memory
            ),
        )
    };
    let budget = shared.budgets.body_bytes(0).ok_or_else(over_budget)?;
    let read = read_body_within(request, shared.config.max_body_bytes, budget, |bytes| {
        shared.budgets.body_bytes(bytes).ok_or_else(over_budget)
    });
    tokio::time::timeout(timeout, read).await.map_err(|_| {
        Failure::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "Request body not received within {} seconds.",
                timeout.as_secs_f64()
            ),
        )
    })?
}

/// Reads frames into one buffer, at most `max` bytes, taking budget for each frame first.
async fn read_body_within(
    request: Request<Incoming>,
    max: usize,
    mut budget: OwnedSemaphorePermit,
    mut take_budget: impl FnMut(usize) -> Result<OwnedSemaphorePermit, Failure>,
) -> Result<ReadBody, Failure> {
    let too_large = || {
        Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request body too large (max {max} bytes)."),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64)
        || request
            .body()
            .size_hint()
            .exact()
            .is_some_and(|len| len > max as u64)
    {
        return Err(too_large());
    }
    let mut body = Limited::new(request.into_body(), max);
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(err) if err.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Err(_) => return Err(Failure::bad_request("Failed to read the request body.")),
        };
        if let Ok(data) = frame.into_data() {
            budget.merge(take_budget(data.len())?);
            bytes.extend_from_slice(&data);
        }
    }
    Ok(ReadBody {
        bytes,
        _budget: budget,
    })
}

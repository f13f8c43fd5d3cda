//! The explorer's JSON API: `POST /ui/api/OPERATION` with a JSON body, the access token in the
//! `authorization` header.
//!
//! | operation | body | answer |
//! |---|---|---|
//! | `info` | `{}` | `{"writable", "watch", "queueInspection"}` |
//! | `list` | `{"prefix": "[\"users\"]", "cursor"?, "limit"?, "reverse"?}` | `{"entries": [...], "cursor": next page's cursor or null}` |
//! | `get` | `{"id"}` or `{"key": "[...]"}` | `{"entry": ... or null}` |
//! | `set` | `{"id"}` or `{"key"}`, `"versionstamp"` (seen, or null: must not exist), `"type"`, `"text"`, `"expiresAt"`? | `{"entry"}`, or 409 `{"error", "current"}` |
//! | `delete` | `{"id", "versionstamp"}` | `{"deleted": true}`, or 409 `{"error", "current"}` |
//! | `stats` | `{"prefix"}` | `{"entries", "bytes", "complete", "cap", "queueDepth"}` |
//! | `watch` | `{"ids": [...]}` | a server-sent-events stream ([`super::live`]) |
//!
//! An entry is the JSON of [`super::entry::entry_json`]; `id` is its encoded key in hex, and a
//! list's `cursor` is the id of the last entry of the page. Failures other than 409 are plain
//! text, as everywhere on this server.

use chrono::{DateTime, Utc};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use open_deno_kv_model::{
    AtomicWrite, Backend, Check, KvEntry, Mutation, ReadRange, SnapshotRead, Versionstamp,
    encode_key, parse_key_literal,
};
use serde_json::{Value as Json, json};

use super::entry::{entry_json, parse_edit};
use super::stats::{COUNT_CAP, count_prefix};
use crate::request::{authorize, read_body};
use crate::response::{Failure, ResponseBody, bytes_response, kv_failure, method_not_allowed};
use crate::shared::Shared;

/// The default and the largest page of `list`.
const DEFAULT_PAGE: u64 = 50;
const MAX_PAGE: u64 = 500;

/// The answer to the read-only explorer's writes.
pub(super) const READ_ONLY: &str = "The explorer is read-only: start the server with \
    --ui-write (kv serve --ui --ui-write) to edit or delete entries.";

/// Answers `POST /ui/api/{operation}`.
pub(super) async fn handle(
    operation: &str,
    request: Request<Incoming>,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    const OPERATIONS: [&str; 7] = ["info", "list", "get", "set", "delete", "stats", "watch"];
    if !OPERATIONS.contains(&operation) {
        return Err(Failure::new(StatusCode::NOT_FOUND, "Resource not found."));
    }
    if request.method() != Method::POST {
        return Ok(method_not_allowed("POST"));
    }
    // The token first: a stranger learns nothing, not even whether writes are allowed.
    authorize(request.headers(), &shared.config.access)?;
    if matches!(operation, "set" | "delete") && !shared.config.ui.writable() {
        return Err(Failure::new(StatusCode::FORBIDDEN, READ_ONLY));
    }
    let body = read_body(request, shared).await?;
    let request: Json = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|err| Failure::bad_request(format!("The request body is not JSON: {err}")))?
    };
    let backend = shared.databases.default_database().clone();
    let backend = backend.as_ref();
    match operation {
        "info" => Ok(json_response(
            StatusCode::OK,
            &json!({
                "writable": shared.config.ui.writable(),
                "watch": backend.capabilities().watch,
                "queueInspection": backend.capabilities().queue_inspection,
            }),
        )),
        "list" => list(&request, backend, shared).await,
        "get" => {
            let id = entry_id(&request)?;
            let entry = read_one(backend, shared, &id).await?;
            Ok(json_response(
                StatusCode::OK,
                &json!({ "entry": entry.as_ref().map(entry_json) }),
            ))
        }
        "set" => set(&request, backend, shared).await,
        "delete" => delete(&request, backend, shared).await,
        "stats" => stats(&request, backend, shared).await,
        _ => {
            let ids = request
                .get("ids")
                .and_then(Json::as_array)
                .ok_or_else(|| Failure::bad_request("Expected {\"ids\": [...]}."))?
                .iter()
                .map(|id| id.as_str().map(decode_id).unwrap_or_else(|| Err(bad_id())))
                .collect::<Result<Vec<_>, _>>()?;
            super::live::watch(ids, shared.databases.default_database().clone(), shared)
        }
    }
}

/// A JSON answer with `status`, never cached.
pub(super) fn json_response(status: StatusCode, body: &Json) -> Response<ResponseBody> {
    let mut response = bytes_response("application/json", body.to_string().into_bytes());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn bad_id() -> Failure {
    Failure::bad_request("An entry id is the hex of an encoded key.")
}

/// An id (hex of an encoded key) as the key's bytes.
fn decode_id(id: &str) -> Result<Vec<u8>, Failure> {
    hex::decode(id)
        .ok()
        .filter(|key| !key.is_empty())
        .ok_or_else(bad_id)
}

/// A key written as a JavaScript literal, encoded.
fn literal_key(text: &str) -> Result<Vec<u8>, Failure> {
    let key = parse_key_literal(text).map_err(|err| Failure::bad_request(err.to_string()))?;
    encode_key(&key).map_err(|err| Failure::bad_request(err.to_string()))
}

/// The entry a request names: its `id`, else its `key` literal.
fn entry_id(request: &Json) -> Result<Vec<u8>, Failure> {
    if let Some(id) = request.get("id").and_then(Json::as_str) {
        return decode_id(id);
    }
    match request.get("key").and_then(Json::as_str) {
        Some(text) => {
            let key = literal_key(text)?;
            if key.is_empty() {
                return Err(Failure::bad_request("An entry's key cannot be empty."));
            }
            Ok(key)
        }
        None => Err(Failure::bad_request("Name the entry: \"id\" or \"key\".")),
    }
}

/// The prefix of a `list` or `stats` request, encoded (`[]`: every key).
fn prefix(request: &Json) -> Result<Vec<u8>, Failure> {
    let text = request.get("prefix").and_then(Json::as_str).unwrap_or("[]");
    literal_key(text)
}

/// Reads one range, within the server's limits.
async fn read(
    backend: &dyn Backend,
    shared: &Shared,
    range: ReadRange,
) -> Result<Vec<KvEntry>, Failure> {
    let read = SnapshotRead {
        ranges: vec![range],
        ..SnapshotRead::default()
    };
    shared
        .config
        .limits
        .validate_snapshot_read(&read)
        .map_err(|err| kv_failure(shared, &err))?;
    let output = backend
        .snapshot_read(read)
        .await
        .map_err(|err| kv_failure(shared, &err))?;
    Ok(output
        .into_iter()
        .next()
        .map(|range| range.entries)
        .unwrap_or_default())
}

async fn read_one(
    backend: &dyn Backend,
    shared: &Shared,
    key: &[u8],
) -> Result<Option<KvEntry>, Failure> {
    let entries = read(backend, shared, ReadRange::single_encoded_key(key.to_vec())).await?;
    Ok(entries.into_iter().next())
}

/// `list`: one page under a prefix, after (or, reversed, before) the cursor.
async fn list(
    request: &Json,
    backend: &dyn Backend,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    let prefix = prefix(request)?;
    let limit = match request.get("limit") {
        None | Some(Json::Null) => DEFAULT_PAGE,
        Some(limit) => limit
            .as_u64()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                Failure::bad_request(format!("\"limit\" is a number from 1 to {MAX_PAGE}."))
            })?,
    };
    let reverse = request
        .get("reverse")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    let mut start = prefix.clone();
    start.push(0x00);
    let mut end = prefix.clone();
    end.push(0xff);
    if let Some(cursor) = request.get("cursor").and_then(Json::as_str) {
        let cursor = decode_id(cursor)?;
        if !(cursor > start && cursor < end) {
            return Err(Failure::bad_request("The cursor is not under the prefix."));
        }
        if reverse {
            end = cursor;
        } else {
            start = cursor;
            start.push(0x00);
        }
    }
    // One more than the page: whether there is a next page.
    let range = ReadRange {
        start,
        end,
        limit: u32::try_from(limit + 1).unwrap_or(u32::MAX),
        reverse,
    };
    let mut entries = read(backend, shared, range).await?;
    let more = entries.len() as u64 > limit;
    entries.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let cursor = more
        .then(|| entries.last().map(|entry| hex::encode(&entry.key)))
        .flatten();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
            "cursor": cursor,
        }),
    ))
}

/// The versionstamp a write expects (`null`: the entry must not exist).
fn expected_versionstamp(request: &Json) -> Result<Option<Versionstamp>, Failure> {
    match request.get("versionstamp") {
        Some(Json::String(text)) => text.parse().map(Some).map_err(|_| {
            Failure::bad_request(format!("{text:?} is not a versionstamp (20 hex digits)."))
        }),
        Some(Json::Null) => Ok(None),
        _ => Err(Failure::bad_request(
            "Every write names the versionstamp the page saw (\"versionstamp\", or null for a new \
             entry): the explorer never overwrites blindly.",
        )),
    }
}

/// Commits `mutation` if the entry still has the versionstamp the page saw (`seen`): the entry
/// as it is after the commit, or the 409 answer saying what changed, with the current entry.
async fn checked_write(
    backend: &dyn Backend,
    shared: &Shared,
    key: Vec<u8>,
    seen: Option<Versionstamp>,
    mutation: Mutation,
) -> Result<Result<Option<KvEntry>, Json>, Failure> {
    let write = AtomicWrite {
        checks: vec![Check {
            key: key.clone(),
            versionstamp: seen,
        }],
        mutations: vec![mutation],
        enqueues: Vec::new(),
    };
    shared
        .config
        .limits
        .validate_atomic_write(&write, Utc::now())
        .map_err(|err| kv_failure(shared, &err))?;
    let committed = backend
        .atomic_write(write)
        .await
        .map_err(|err| kv_failure(shared, &err))?;
    shared.metrics.commit(committed.is_some());
    let current = read_one(backend, shared, &key).await?;
    if committed.is_some() {
        // The entry as it is now (another write may already have followed this one).
        return Ok(Ok(current));
    }
    let now = match &current {
        Some(entry) => format!("it now has versionstamp {}", entry.versionstamp),
        None => "it has been deleted".to_owned(),
    };
    let saw = match seen {
        Some(versionstamp) => format!("versionstamp {versionstamp}"),
        None => "no entry".to_owned(),
    };
    Ok(Err(json!({
        "error": format!(
            "Refused: this entry changed since the page read it (the page saw {saw}; {now}). \
             Nothing was written. Look at the current entry, then edit again if you still want to."
        ),
        "current": current.as_ref().map(entry_json),
    })))
}

/// `set`.
async fn set(
    request: &Json,
    backend: &dyn Backend,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    let key = entry_id(request)?;
    let seen = expected_versionstamp(request)?;
    let kind = request.get("type").and_then(Json::as_str).unwrap_or("json");
    let text = request
        .get("text")
        .and_then(Json::as_str)
        .ok_or_else(|| Failure::bad_request("Expected the value's \"text\"."))?;
    let value = parse_edit(kind, text)?;
    let expire_at = match request.get("expiresAt") {
        None | Some(Json::Null) => None,
        Some(ms) => {
            let at = ms
                .as_i64()
                .and_then(DateTime::<Utc>::from_timestamp_millis)
                .ok_or_else(|| {
                    Failure::bad_request("\"expiresAt\" is milliseconds since the epoch.")
                })?;
            if at <= Utc::now() {
                return Err(Failure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "The entry's expiry time has passed: clear it or set a later one.",
                ));
            }
            Some(at)
        }
    };
    let mut mutation = Mutation::set(key.clone(), value);
    mutation.expire_at = expire_at;
    Ok(
        match checked_write(backend, shared, key, seen, mutation).await? {
            Ok(entry) => json_response(
                StatusCode::OK,
                &json!({ "entry": entry.as_ref().map(entry_json) }),
            ),
            Err(conflict) => json_response(StatusCode::CONFLICT, &conflict),
        },
    )
}

/// `delete`.
async fn delete(
    request: &Json,
    backend: &dyn Backend,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    let key = entry_id(request)?;
    let seen = expected_versionstamp(request)?;
    if seen.is_none() {
        return Err(Failure::bad_request(
            "A delete names the versionstamp of the entry the page saw.",
        ));
    }
    let mutation = Mutation::delete(key.clone());
    Ok(
        match checked_write(backend, shared, key, seen, mutation).await? {
            Ok(_) => json_response(StatusCode::OK, &json!({ "deleted": true })),
            Err(conflict) => json_response(StatusCode::CONFLICT, &conflict),
        },
    )
}

/// `stats`: entries and bytes under the prefix (see [`count_prefix`]), and the queue's depth.
async fn stats(
    request: &Json,
    backend: &dyn Backend,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    let prefix = prefix(request)?;
    let count = count_prefix(backend, &prefix, COUNT_CAP)
        .await
        .map_err(|err| kv_failure(shared, &err))?;
    let queue_depth = if backend.capabilities().queue_inspection {
        let queued = backend
            .queued_messages()
            .await
            .map_err(|err| kv_failure(shared, &err))?;
        Some(queued.len())
    } else {
        None
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "entries": count.entries,
            "bytes": count.bytes,
            "complete": count.complete,
            "cap": COUNT_CAP,
            "queueDepth": queue_depth,
        }),
    ))
}

//! The `queue/1` protocol extension: consuming a database's queue over the network.
//!
//! KV Connect has no way to take messages out of a queue (Deno's client refuses queues; denokv
//! issues #55 and #57 ask for them). This server adds three endpoints next to the data path, with
//! the same headers (`authorization`, `x-denokv-version`, `x-denokv-database-id`), protobuf
//! bodies, and the status rules of the data path (200 success, 4xx refusals with a plain-text
//! reason, 5xx "nothing happened, try again"):
//!
//! | endpoint | request | answer |
//! |---|---|---|
//! | `POST <endpoint>/queue/dequeue` | [`DequeueRequest`] `{wait_ms}` | **200** [`DequeueResponse`] `{delivery_token, payload, lease_ms}`, or **204** (no body) when no message became due within `wait_ms` (capped by [`crate::ServerConfig::queue_max_wait`]): a long poll, the client simply asks again |
//! | `POST <endpoint>/queue/finish` | [`FinishRequest`] `{delivery_token, success}` | **200** [`FinishResponse`] `{settled}`; `settled = false` when the token is unknown (already finished, or its lease ran out and the message went back to the queue) |
//! | `POST <endpoint>/queue/keepalive` | [`KeepAliveRequest`] `{delivery_tokens}` | **200** [`KeepAliveResponse`] `{unknown_tokens}`: every known token's lease is renewed |
//!
//! A database without queues answers 501. Enqueueing needs no endpoint: `AtomicWrite.enqueues`
//! already travels inside `atomic_write` (and the `enqueue-no-retry/1` extension of
//! [`crate::ext`] carries "never retry").
//!
//! **Delivery guarantees (at least once, as a local backend).** When the long poll hands out a
//! message, the server keeps the local backend's message handle in a table under a fresh random
//! delivery token, with a lease of [`crate::ServerConfig::queue_lease`] (5 s, Deno's message
//! deadline). `finish` settles it through the handle (success deletes the message; failure
//! schedules the next back-off interval or dead-letters it). `keepalive` pushes the lease
//! forward; the `kv-remote` client renews every 2 s while it holds messages. A client that
//! disappears (crash, lost network) stops renewing: a sweeper drops the handle once its lease has
//! passed, which the backend counts as a failed delivery, so the message is retried per its
//! back-off schedule. A dequeue answer lost on the way (the client gave up, the connection
//! broke) is covered the same way. Shutting the server down drops every held handle (failed
//! deliveries, retried later).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hyper::StatusCode;
use kv_proto::{Backend, KvError, QueueMessageHandle};
use prost::Message;
use tokio::time::Instant;
use uuid::Uuid;

use crate::Shared;
use crate::ext::{
    DequeueRequest, DequeueResponse, FinishRequest, FinishResponse, KeepAliveRequest,
    KeepAliveResponse,
};
use crate::handler::{Failure, ResponseBody, kv_failure, protobuf_response};

/// The queue endpoints, after `<endpoint>/queue/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueMethod {
    Dequeue,
    Finish,
    KeepAlive,
}

impl QueueMethod {
    pub(crate) fn parse(rest: &str) -> Option<QueueMethod> {
        match rest {
            "/queue/dequeue" => Some(QueueMethod::Dequeue),
            "/queue/finish" => Some(QueueMethod::Finish),
            "/queue/keepalive" => Some(QueueMethod::KeepAlive),
            _ => None,
        }
    }
}

struct Held {
    database: Uuid,
    handle: Box<dyn QueueMessageHandle>,
    deadline: Instant,
    /// Keeps the database open while the message is held (see [`crate::databases`]).
    _backend: Arc<dyn Backend>,
}

/// Messages handed out over the network and not yet finished, by delivery token.
pub(crate) struct Deliveries {
    held: Mutex<HashMap<String, Held>>,
    lease: Duration,
}

impl Deliveries {
    pub(crate) fn new(lease: Duration) -> Self {
        Deliveries {
            held: Mutex::new(HashMap::new()),
            lease,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        // Single inserts and removals: a panic cannot leave the map half-updated.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hold(
        &self,
        database: Uuid,
        backend: Arc<dyn Backend>,
        handle: Box<dyn QueueMessageHandle>,
    ) -> String {
        let token = Uuid::new_v4().simple().to_string();
        let held = Held {
            database,
            handle,
            deadline: Instant::now() + self.lease,
            _backend: backend,
        };
        self.lock().insert(token.clone(), held);
        token
    }

    fn take(&self, database: Uuid, token: &str) -> Option<Box<dyn QueueMessageHandle>> {
        let mut held = self.lock();
        if held.get(token)?.database != database {
            return None;
        }
        held.remove(token).map(|h| h.handle)
    }

    fn renew(&self, database: Uuid, tokens: Vec<String>) -> Vec<String> {
        let deadline = Instant::now() + self.lease;
        let mut held = self.lock();
        tokens
            .into_iter()
            .filter(|token| match held.get_mut(token) {
                Some(h) if h.database == database => {
                    h.deadline = deadline;
                    false
                }
                _ => true,
            })
            .collect()
    }

    /// Removes the deliveries whose lease has passed (dropped by the caller, outside the lock:
    /// dropping a handle settles it as failed).
    fn expired(&self, now: Instant) -> Vec<Box<dyn QueueMessageHandle>> {
        let mut held = self.lock();
        let gone: Vec<String> = held
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(token, _)| token.clone())
            .collect();
        gone.iter()
            .filter_map(|token| held.remove(token).map(|h| h.handle))
            .collect()
    }

    /// Lets go of every delivery (server shutdown): each counts as failed and is retried.
    pub(crate) fn release_all(&self) {
        let all: Vec<Held> = self.lock().drain().map(|(_, h)| h).collect();
        drop(all);
    }
}

/// Drops deliveries whose lease ran out, until the server shuts down.
pub(crate) async fn sweep(shared: Arc<Shared>) {
    let every =
        (shared.config.queue_lease / 5).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let expired = shared.deliveries.expired(Instant::now());
        drop(expired);
    }
}

fn decode<M: Message + Default>(body: &[u8]) -> Result<M, Failure> {
    M::decode(body).map_err(|e| Failure::bad_request(format!("Request protobuf is invalid: {e}")))
}

fn unsupported_or(shared: &Shared, err: &KvError) -> Failure {
    match err {
        KvError::Unsupported { .. } => Failure::new(
            StatusCode::NOT_IMPLEMENTED,
            "This database does not support queues.",
        ),
        other => kv_failure(shared, other),
    }
}

/// Serves one queue endpoint for the database `database`.
pub(crate) async fn handle(
    method: QueueMethod,
    body: &[u8],
    backend: Arc<dyn Backend>,
    database: Uuid,
    shared: &Shared,
) -> Result<hyper::Response<ResponseBody>, Failure> {
    if !backend.capabilities().queues {
        return Err(unsupported_or(
            shared,
            &KvError::Unsupported { feature: "queues" },
        ));
    }
    match method {
        QueueMethod::Dequeue => {
            let request: DequeueRequest = decode(body)?;
            let wait =
                Duration::from_millis(u64::from(request.wait_ms)).min(shared.config.queue_max_wait);
            let mut shutdown = shared.shutdown.clone();
            let outcome = tokio::select! {
                got = backend.dequeue_next_message() => Some(got),
                () = tokio::time::sleep(wait) => None,
                _ = shutdown.wait_for(|stop| *stop) => None,
            };
            match outcome {
                None => {
                    let mut response = hyper::Response::new(crate::handler::empty_body());
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    Ok(response)
                }
                Some(Ok(Some(handle))) => {
                    let payload = handle.payload().to_vec();
                    let delivery_token = shared.deliveries.hold(database, backend.clone(), handle);
                    let lease_ms =
                        u32::try_from(shared.config.queue_lease.as_millis()).unwrap_or(u32::MAX);
                    Ok(protobuf_response(
                        DequeueResponse {
                            delivery_token,
                            payload,
                            lease_ms,
                        }
                        .encode_to_vec(),
                    ))
                }
                // The database was closed under us: 503, nothing was taken.
                Some(Ok(None)) => Err(kv_failure(shared, &KvError::Closed)),
                Some(Err(err)) => Err(unsupported_or(shared, &err)),
            }
        }
        QueueMethod::Finish => {
            let request: FinishRequest = decode(body)?;
            let settled = match shared.deliveries.take(database, &request.delivery_token) {
                Some(handle) => {
                    handle
                        .finish(request.success)
                        .await
                        .map_err(|e| kv_failure(shared, &e))?;
                    true
                }
                None => false,
            };
            Ok(protobuf_response(
                FinishResponse { settled }.encode_to_vec(),
            ))
        }
        QueueMethod::KeepAlive => {
            let request: KeepAliveRequest = decode(body)?;
            let unknown_tokens = shared.deliveries.renew(database, request.delivery_tokens);
            Ok(protobuf_response(
                KeepAliveResponse { unknown_tokens }.encode_to_vec(),
            ))
        }
    }
}

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
//! forward; the `open-deno-kv-remote` client renews every 2 s while it holds messages. A client that
//! disappears (crash, lost network) stops renewing: a sweeper drops the handle once its lease has
//! passed, which the backend counts as a failed delivery, so the message is retried per its
//! back-off schedule. Shutting the server down drops every held handle (failed deliveries,
//! retried later).
//!
//! **A long poll that ends without a message parks none.** The poll waits on the backend's
//! `dequeue_next_message` and drops that future when `wait_ms` runs out, the server shuts down,
//! or the client goes away; backends are cancel-safe, so a message taken just then goes back to
//! the queue at once, with no retry used. Once the long poll has a message, the answer's body is
//! a guard ([`DeliveryBody`]): dropped before the connection took its bytes (the client left
//! mid-response, the connection broke), it gives the message back the same way — released
//! through [`QueueMessageHandle::release`], as nobody saw it. Bytes the connection took but that
//! never reached the client cannot be told from delivered ones: that message comes back when its
//! lease runs out, as a failed delivery (one back-off interval used).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::StatusCode;
use hyper::body::{Body, Frame, SizeHint};
use open_deno_kv_model::{Backend, KvError};
use prost::Message;
use tokio::time::Instant;
use uuid::Uuid;

use crate::deliveries::Deliveries;
use crate::ext::{
    DequeueRequest, DequeueResponse, FinishRequest, FinishResponse, KeepAliveRequest,
    KeepAliveResponse,
};
use crate::metrics::Delivery;
use crate::response::{Failure, ResponseBody, kv_failure, protobuf_response};
use crate::shared::Shared;

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

/// The body of a dequeue answer: the encoded [`DequeueResponse`], and a guard that gives the
/// delivery back (released, as nobody saw it) if the body is dropped before the connection took
/// its bytes.
struct DeliveryBody {
    bytes: Option<Bytes>,
    /// Where the delivery is held, until the bytes are taken.
    unsent: Option<(Deliveries, Uuid, String)>,
}

impl Body for DeliveryBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        // Taken by the connection: from here on a lost answer is covered by the lease.
        self.unsent = None;
        Poll::Ready(self.bytes.take().map(|bytes| Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let len = self.bytes.as_ref().map_or(0, Bytes::len);
        SizeHint::with_exact(u64::try_from(len).unwrap_or(u64::MAX))
    }
}

impl Drop for DeliveryBody {
    fn drop(&mut self) {
        if let Some((deliveries, database, token)) = self.unsent.take()
            && let Some(handle) = deliveries.take(database, &token)
        {
            handle.release();
        }
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
        for _ in &expired {
            shared.metrics.delivery(Delivery::LeaseExpired);
        }
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
                    let mut response = hyper::Response::new(crate::response::empty_body());
                    *response.status_mut() = StatusCode::NO_CONTENT;
                    Ok(response)
                }
                Some(Ok(Some(handle))) => {
                    let payload = handle.payload().to_vec();
                    let delivery_token = shared.deliveries.hold(database, backend.clone(), handle);
                    let lease_ms =
                        u32::try_from(shared.config.queue_lease.as_millis()).unwrap_or(u32::MAX);
                    let answer = DequeueResponse {
                        delivery_token: delivery_token.clone(),
                        payload,
                        lease_ms,
                    }
                    .encode_to_vec();
                    let body = DeliveryBody {
                        bytes: Some(Bytes::from(answer)),
                        unsent: Some((shared.deliveries.clone(), database, delivery_token)),
                    };
                    let mut response = protobuf_response(Vec::new());
                    *response.body_mut() = body.boxed_unsync();
                    Ok(response)
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
                    shared.metrics.delivery(if request.success {
                        Delivery::Ok
                    } else {
                        Delivery::Failed
                    });
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

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use open_deno_kv_engine_kit::Checked;
    use open_deno_kv_memory::{MemoryBackend, MemoryStore};
    use open_deno_kv_model::{AtomicWrite, Clock, Enqueue, ManualClock};

    use super::*;

    /// A store with one message due now, a backend on it, and the message taken and held as the
    /// long poll holds it; returns the answer's body.
    async fn held_answer(
        deliveries: &Deliveries,
        database: Uuid,
    ) -> (Checked<MemoryBackend>, DeliveryBody) {
        let clock = ManualClock::at_test_epoch();
        let store = MemoryStore::new();
        let kv = MemoryBackend::open(&store, Arc::new(clock.clone()));
        // What a held message keeps open: a handle on its database.
        let database_handle: Arc<dyn Backend> =
            Arc::new(MemoryBackend::open(&store, Arc::new(clock.clone())));
        let write = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: vec![7],
                ready_at: clock.now(),
                keys_if_undelivered: vec![],
                backoff_schedule: Some(vec![1_000]),
            }],
            ..Default::default()
        };
        kv.atomic_write(write).await.unwrap().unwrap();
        let handle = kv.dequeue_next_message().await.unwrap().unwrap();
        let token = deliveries.hold(database, database_handle, handle);
        let body = DeliveryBody {
            bytes: Some(Bytes::from_static(b"answer")),
            unsent: Some((deliveries.clone(), database, token)),
        };
        (kv, body)
    }

    /// An answer dropped before the connection took it (the client left mid-response) gives the
    /// message back at once, its schedule untouched; one whose bytes were taken stays held under
    /// its lease.
    #[tokio::test]
    async fn an_answer_never_sent_releases_its_message() {
        let deliveries = Deliveries::new(Duration::from_secs(5));
        let database = Uuid::new_v4();

        let (kv, body) = held_answer(&deliveries, database).await;
        drop(body);
        assert!(deliveries.held() == 0, "the delivery is no longer held");
        let queued = kv.queued_messages().await.unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].backoff_schedule, vec![1_000], "no retry was used");
        let again = tokio::time::timeout(Duration::from_secs(5), kv.dequeue_next_message())
            .await
            .expect("due at once, without moving the clock")
            .unwrap()
            .unwrap();
        assert_eq!(again.payload(), [7]);

        let (_kv, mut body) = held_answer(&deliveries, database).await;
        let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(frame.is_some());
        drop(body);
        assert_eq!(deliveries.held(), 1, "sent: held until finished or lease");
    }
}

//! The client side of the `queue/1` extension: long-polled dequeues, keep-alives for held
//! messages, and finishing them.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::queue::{
    Delivery, DeliveryEngine, DeliveryOutcome, MESSAGE_KEEPALIVE_INTERVAL,
};
use open_deno_kv_engine_kit::{KvError, QueueMessageHandle};
use tokio::sync::Notify;

use crate::ext::{
    DequeueRequest, DequeueResponse, FinishRequest, FinishResponse, KeepAliveRequest,
};
use crate::transport::{Inner, Replay, lock, protocol, read_body};

/// Extra time allowed for a long poll's answer beyond the wait the server was given.
const POLL_MARGIN: Duration = Duration::from_secs(15);

/// This client's side of the server's queue: the poller, the messages it handed out and not
/// yet finished, and their keep-alive. Shared by a backend's clones and its background tasks.
pub(crate) struct RemoteQueue {
    inner: Arc<Inner>,
    /// Delivery tokens of queue messages handed to this client and not finished.
    held: Mutex<HashSet<String>>,
    /// Whether the keep-alive task runs.
    keepalive_started: AtomicBool,
    /// The poller's state.
    state: Mutex<PollState>,
    /// Wakes dequeues waiting for the poller.
    ready: Notify,
}

impl RemoteQueue {
    /// The queue of the database `inner` talks to; nothing is sent until the first dequeue.
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        RemoteQueue {
            inner,
            held: Mutex::new(HashSet::new()),
            keepalive_started: AtomicBool::new(false),
            state: Mutex::new(PollState::default()),
            ready: Notify::new(),
        }
    }

    fn held(&self) -> MutexGuard<'_, HashSet<String>> {
        lock(&self.held)
    }

    fn state(&self) -> MutexGuard<'_, PollState> {
        lock(&self.state)
    }
}

/// The poller's state.
///
/// Long polls are never cancelled half-way: a server may hand a message out just as a caller
/// gives up waiting (a `dequeue_next_message` future dropped by a timeout), and a message lost in
/// transit would only come back after its lease and one back-off interval. So one background
/// task per backend runs the polls while some dequeue waits, and puts what it receives in a
/// buffer; a message that arrives after its caller left waits there (kept alive like any held
/// message) for the next dequeue, or is given back as failed at close.
#[derive(Default)]
struct PollState {
    buffer: VecDeque<DequeueResponse>,
    /// Dequeue calls waiting now.
    waiting: usize,
    /// Whether the poller task runs.
    polling: bool,
    /// An error for the next waiting dequeue (the poller stopped on it).
    error: Option<KvError>,
}

/// Counts a waiting dequeue while it lives.
struct Waiting<'a>(&'a RemoteQueue);

impl<'a> Waiting<'a> {
    fn new(queue: &'a RemoteQueue) -> Self {
        queue.state().waiting += 1;
        Waiting(queue)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.waiting = state.waiting.saturating_sub(1);
    }
}

/// Waits for the next message, or `None` once the backend closes.
pub(crate) async fn dequeue(
    queue: &Arc<RemoteQueue>,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let inner = &queue.inner;
    let session = inner.session(false, None).await?;
    if !session.extensions.queues {
        return Err(KvError::Unsupported {
            feature: "queues (the server does not offer the queue/1 extension)",
        });
    }
    start_keepalive(queue);
    let _waiting = Waiting::new(queue);
    loop {
        // Registered before looking, so a message buffered in between still wakes us.
        let notified = queue.ready.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if inner.is_closed() {
            return Ok(None);
        }
        {
            let mut state = queue.state();
            if let Some(message) = state.buffer.pop_front() {
                let engine = Arc::new(RemoteDeliveries(Arc::downgrade(queue)));
                let delivery = Delivery::new(engine, message.delivery_token, message.payload);
                return Ok(Some(delivery.hand_over()));
            }
            if let Some(err) = state.error.take() {
                return Err(err);
            }
            if !state.polling {
                state.polling = true;
                tokio::spawn(poll(queue.clone()));
            }
        }
        tokio::select! {
            () = inner.wait_closed() => return Ok(None),
            () = &mut notified => {}
        }
    }
}

/// The poller: long polls while dequeues wait for more messages than the buffer holds.
async fn poll(queue: Arc<RemoteQueue>) {
    let inner = &queue.inner;
    let wait = inner.options.dequeue_wait;
    let body = DequeueRequest {
        wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
    }
    .encode_to_vec();
    loop {
        let outcome = match inner
            .call(
                "queue/dequeue",
                body.clone(),
                Replay::Safe,
                wait + POLL_MARGIN,
            )
            .await
        {
            Ok((_, response)) if response.status() == hyper::StatusCode::NO_CONTENT => Ok(None),
            Ok((_, response)) => match read_body(response).await {
                Ok(bytes) => DequeueResponse::decode(bytes.as_ref())
                    .map_err(protocol)
                    .and_then(|m| {
                        if m.delivery_token.is_empty() {
                            Err(protocol("a dequeue answer without a delivery token"))
                        } else {
                            Ok(Some(m))
                        }
                    }),
                Err(err) => Err(err),
            },
            Err(err) => Err(err),
        };
        if inner.is_closed() {
            // Closed while the poll ran: give a message straight back.
            if let Ok(Some(message)) = &outcome {
                let _ = finish_call(inner, &message.delivery_token, false).await;
            }
            queue.state().polling = false;
            queue.ready.notify_waiters();
            return;
        }
        let stop = {
            let mut state = queue.state();
            let stop = match outcome {
                Ok(Some(message)) => {
                    queue.held().insert(message.delivery_token.clone());
                    state.buffer.push_back(message);
                    false
                }
                Ok(None) => false,
                Err(KvError::Closed) => true,
                Err(err) => {
                    if state.waiting > 0 {
                        state.error = Some(err);
                    }
                    true
                }
            };
            let stop = stop || inner.is_closed() || state.waiting <= state.buffer.len();
            if stop {
                state.polling = false;
            }
            stop
        };
        queue.ready.notify_waiters();
        if stop {
            return;
        }
    }
}

/// Reports every held message as failed (at close), buffered ones included.
pub(crate) async fn release_all(queue: &RemoteQueue) {
    queue.state().buffer.clear();
    let tokens: Vec<String> = queue.held().drain().collect();
    let releases = tokens
        .iter()
        .map(|token| async move { finish_call(&queue.inner, token, false).await });
    // Best effort: a message we cannot give back is requeued when its lease runs out.
    let _ = futures::future::join_all(releases).await;
}

async fn finish_call(inner: &Inner, token: &str, success: bool) -> Result<bool, KvError> {
    let body = FinishRequest {
        delivery_token: token.to_owned(),
        success,
    }
    .encode_to_vec();
    let (_, bytes) = inner
        .call_for_bytes("queue/finish", body, Replay::Safe)
        .await?;
    Ok(FinishResponse::decode(bytes.as_ref())
        .map_err(protocol)?
        .settled)
}

/// Renews the leases of held messages every 2 s while the backend lives.
fn start_keepalive(queue: &Arc<RemoteQueue>) {
    if queue.keepalive_started.swap(true, Ordering::SeqCst) {
        return;
    }
    let weak = Arc::downgrade(queue);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(MESSAGE_KEEPALIVE_INTERVAL).await;
            let Some(queue) = weak.upgrade() else { return };
            if queue.inner.is_closed() {
                return;
            }
            let tokens: Vec<String> = queue.held().iter().cloned().collect();
            if tokens.is_empty() {
                continue;
            }
            let body = KeepAliveRequest {
                delivery_tokens: tokens,
            }
            .encode_to_vec();
            // A failed renewal is retried at the next tick; past the lease the server requeues.
            let _ = queue
                .inner
                .call_for_bytes("queue/keepalive", body, Replay::Safe)
                .await;
        }
    });
}

/// Settles this client's deliveries on the server; the ticket is the delivery token.
struct RemoteDeliveries(Weak<RemoteQueue>);

#[async_trait]
impl DeliveryEngine for RemoteDeliveries {
    type Ticket = String;

    /// Reports the outcome. If the server no longer held the message (its lease ran out, so it
    /// was already requeued), this is not an error: the message will be delivered again.
    async fn settle(&self, token: String, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let queue = self.0.upgrade().ok_or(KvError::Closed)?;
        if !queue.held().remove(&token) {
            // Released by close (reported as failed) or never ours.
            return Err(KvError::Closed);
        }
        let success = outcome == DeliveryOutcome::Succeeded;
        finish_call(&queue.inner, &token, success).await.map(|_| ())
    }

    /// A handle dropped unfinished: a failed delivery, reported in the background. (A delivery
    /// is handed over in the same step that takes it from the buffer, so it is never dropped
    /// undelivered here; the protocol has no "undelivered" answer, so it would count as failed.)
    fn settle_in_background(&self, token: String, _outcome: DeliveryOutcome) {
        let Some(queue) = self.0.upgrade() else {
            return;
        };
        if !queue.held().remove(&token) {
            return;
        }
        // Without a runtime to report from, the server requeues when the lease runs out.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = finish_call(&queue.inner, &token, false).await;
            });
        }
    }
}

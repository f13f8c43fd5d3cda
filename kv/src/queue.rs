//! Queues: enqueue options, and the listener loop that hands messages to a handler with
//! at-least-once delivery.
//!
//! A message is delivered to one handler call at a time. If the handler returns `Ok`, the message
//! is done. If it returns `Err`, panics, or the process dies before it returns, the message is
//! delivered again after the next interval of its back-off schedule; when the schedule is used up
//! it is written to its `keys_if_undelivered` (Deno's rules, from kv-proto). A handler must
//! therefore be idempotent: it may see a message more than once.
//!
//! ```no_run
//! # async fn demo(kv: kv::Kv) -> kv::Result<()> {
//! use kv::{EnqueueOptions, key};
//! use std::time::Duration;
//! kv.enqueue(kv::v8::from_json(&serde_json::json!({"email": "a@example.com"}))?, EnqueueOptions {
//!     delay: Duration::from_secs(5),
//!     keys_if_undelivered: vec![key!["failed-emails"]],
//!     ..Default::default()
//! }).await?;
//! kv.listen_queue(|message| async move {
//!     let job = kv::v8::to_json(&message)?;
//!     println!("sending {job}");
//!     Ok::<(), kv::Error>(())
//! }).await?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use kv_proto::{Backend, Enqueue, Key, KvValue, QueueMessageHandle, encode_key};

use crate::error::Result;

/// How many messages [`crate::Kv::listen_queue`] works on at once by default.
pub const DEFAULT_QUEUE_CONCURRENCY: usize = 16;

/// Options of `Deno.Kv.enqueue`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnqueueOptions {
    /// Deliver no earlier than this long from now (at most 30 days).
    pub delay: Duration,
    /// Where to write the message if every delivery attempt fails.
    pub keys_if_undelivered: Vec<Key>,
    /// Milliseconds to wait before each retry (at most 5 intervals of at most an hour); `None`
    /// is Deno's default `[100, 1000, 5000, 30000, 60000]`, an empty list means no retry.
    pub backoff_schedule: Option<Vec<u32>>,
}

impl EnqueueOptions {
    /// The enqueue as kv-proto carries it, ready at `now` + the delay.
    pub(crate) fn to_enqueue(&self, message: &KvValue, now: DateTime<Utc>) -> Result<Enqueue> {
        Ok(Enqueue {
            payload: message_payload(message)?,
            ready_at: crate::handle::expiry_time(now, self.delay)?,
            keys_if_undelivered: self
                .keys_if_undelivered
                .iter()
                .map(encode_key)
                .collect::<Result<_, _>>()?,
            backoff_schedule: self.backoff_schedule.clone(),
        })
    }
}

/// The V8 bytes a queue carries for `message`: queue messages are always V8 values, so a
/// `Uint8Array` or a `Deno.KvU64` is serialized as Deno's `enqueue` would.
fn message_payload(message: &KvValue) -> Result<Vec<u8>> {
    Ok(crate::v8::to_v8_bytes(message)?)
}

/// Runs `handler` on every message until the backend closes, at most `concurrency` at a time.
pub(crate) async fn listen<F, Fut, E>(
    backend: Arc<dyn Backend>,
    concurrency: usize,
    handler: F,
) -> Result<()>
where
    F: Fn(KvValue) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
{
    let concurrency = concurrency.max(1);
    let handler = Arc::new(handler);
    let mut working = FuturesUnordered::new();
    // The pending dequeue is kept across iterations, never dropped half-way: a dropped dequeue
    // could take a message out of the queue and lose its handle.
    let next_message =
        |backend: Arc<dyn Backend>| async move { backend.dequeue_next_message().await };
    let mut dequeue = Box::pin(next_message(backend.clone()));
    loop {
        tokio::select! {
            biased;
            Some(()) = working.next(), if !working.is_empty() => {}
            taken = &mut dequeue, if working.len() < concurrency => {
                match taken {
                    Ok(Some(message)) => {
                        working.push(deliver(message, handler.clone()));
                        dequeue = Box::pin(next_message(backend.clone()));
                    }
                    // Closed: finish what is being handled, then stop.
                    Ok(None) => {
                        while working.next().await.is_some() {}
                        return Ok(());
                    }
                    Err(err) => {
                        while working.next().await.is_some() {}
                        return Err(err.into());
                    }
                }
            }
        }
    }
}

/// Hands one message to the handler and reports the outcome; a handler error or panic is a
/// failed delivery (retried later).
async fn deliver<F, Fut, E>(message: Box<dyn QueueMessageHandle>, handler: Arc<F>)
where
    F: Fn(KvValue) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
{
    let value = KvValue::V8(message.payload().to_vec());
    let success = match AssertUnwindSafe(handler(value)).catch_unwind().await {
        Ok(Ok(())) => true,
        Ok(Err(_)) | Err(_) => false,
    };
    // A failure to record the outcome (a closed store) leaves the message to be redelivered.
    let _ = message.finish(success).await;
}

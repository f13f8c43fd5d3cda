//! Queues: enqueue options, and the listener loop that hands messages to a handler with
//! at-least-once delivery.
//!
//! A message is delivered to one handler call at a time. If the handler returns `Ok`, the message
//! is done. If it returns `Err`, panics, or the process dies before it returns, the message is
//! delivered again after the next interval of its back-off schedule; when the schedule is used up
//! it is written to its `keys_if_undelivered` (Deno's rules, from open-deno-kv-model). A handler must
//! therefore be idempotent: it may see a message more than once. Every failed delivery is
//! reported to [`ListenOptions::on_error`] (by default, one line on standard error).
//!
//! A handler takes any [`FromValue`]: the raw [`KvValue`], or [`Json`]`<T>` for a serde type (a
//! payload that does not deserialize is a failed delivery, reported like a handler error).
//!
//! ```no_run
//! # async fn demo(kv: open_deno_kv::Kv) -> open_deno_kv::Result<()> {
//! use open_deno_kv::{EnqueueOptions, Json, key};
//! use std::time::Duration;
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Email { to: String }
//!
//! kv.enqueue(Json(Email { to: "a@example.com".into() }), EnqueueOptions {
//!     delay: Duration::from_secs(5),
//!     keys_if_undelivered: vec![key!["failed-emails"]],
//!     ..Default::default()
//! }).await?;
//! kv.listen_queue(|Json(email): Json<Email>| async move {
//!     println!("sending to {}", email.to);
//!     Ok::<(), open_deno_kv::Error>(())
//! }).await?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use open_deno_kv_model::{Backend, Enqueue, Key, KvValue, QueueMessageHandle, encode_key};

use crate::error::Result;
use crate::value::FromValue;
#[cfg(doc)]
use crate::value::Json;

/// How many messages [`crate::Kv::listen_queue`] works on at once by default.
pub const DEFAULT_QUEUE_CONCURRENCY: usize = 16;

/// Why a delivery failed; the message will be delivered again after its back-off (or land in
/// its `keys_if_undelivered` once the schedule is used up).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryFailure {
    /// The payload did not convert to the type the handler takes (a [`Json`] whose type does
    /// not fit the message).
    Payload(String),
    /// The handler returned `Err`; its text.
    Handler(String),
    /// The handler panicked; the panic's message.
    Panic(String),
}

impl fmt::Display for DeliveryFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeliveryFailure::Payload(reason) => {
                write!(f, "queue message does not fit the handler's type: {reason}")
            }
            DeliveryFailure::Handler(reason) => write!(f, "queue handler failed: {reason}"),
            DeliveryFailure::Panic(reason) => write!(f, "queue handler panicked: {reason}"),
        }
    }
}

/// What [`ListenOptions`] calls for each failed delivery.
type FailureReporter = Arc<dyn Fn(&DeliveryFailure) + Send + Sync>;

/// Options of [`crate::Kv::listen_queue_with`]; `ListenOptions::default()` is what
/// [`crate::Kv::listen_queue`] uses.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// let failures = Arc::new(Mutex::new(Vec::new()));
/// let seen = failures.clone();
/// let options = open_deno_kv::ListenOptions::default()
///     .concurrency(1) // one message after the other
///     .on_error(move |failure| seen.lock().unwrap().push(failure.to_string()));
/// ```
#[derive(Clone)]
pub struct ListenOptions {
    concurrency: usize,
    on_error: FailureReporter,
}

impl Default for ListenOptions {
    /// [`DEFAULT_QUEUE_CONCURRENCY`] messages at a time; failures written to standard error.
    fn default() -> Self {
        ListenOptions {
            concurrency: DEFAULT_QUEUE_CONCURRENCY,
            on_error: Arc::new(|failure| eprintln!("kv: {failure} (it will be retried)")),
        }
    }
}

impl fmt::Debug for ListenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenOptions")
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl ListenOptions {
    /// Handles at most `concurrency` messages at a time (1: one after the other; 0 counts as 1).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// Calls `report` for every failed delivery (instead of writing it to standard error): to
    /// log it your way, count it, or alert.
    pub fn on_error(mut self, report: impl Fn(&DeliveryFailure) + Send + Sync + 'static) -> Self {
        self.on_error = Arc::new(report);
        self
    }
}

/// A queue handler: an async function that takes a message as any [`FromValue`] and returns
/// `Ok(())` once it is handled, or an error that fails this delivery (its text goes to
/// [`ListenOptions::on_error`], the message is retried). Every such closure is one:
/// `|message: KvValue| async move { ...; Ok::<(), open_deno_kv::Error>(()) }`.
pub trait QueueHandler<T>: Send + Sync + 'static {
    /// What a failed delivery returns; its text is reported.
    type Error: fmt::Display;
    /// One delivery's work.
    type Future: Future<Output = Result<(), Self::Error>> + Send + 'static;

    /// Starts handling `message`.
    fn handle(&self, message: T) -> Self::Future;
}

impl<T, F, Fut, E> QueueHandler<T> for F
where
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display,
{
    type Error = E;
    type Future = Fut;

    fn handle(&self, message: T) -> Fut {
        self(message)
    }
}

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
    /// The enqueue as open-deno-kv-model carries it, ready at `now` + the delay.
    pub(crate) fn to_enqueue(&self, message: &KvValue, now: DateTime<Utc>) -> Result<Enqueue> {
        Ok(Enqueue {
            payload: message_payload(message)?,
            ready_at: crate::time::time_after(now, self.delay)?,
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

/// Runs `handler` on every message until the backend closes, as `options` say.
pub(crate) async fn listen<T: FromValue>(
    backend: Arc<dyn Backend>,
    options: ListenOptions,
    handler: impl QueueHandler<T>,
) -> Result<()> {
    let concurrency = options.concurrency.max(1);
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
                        working.push(deliver(message, handler.clone(), options.on_error.clone()));
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

/// Hands one message to the handler and records the outcome; a payload that does not convert,
/// a handler error or a panic is a failed delivery (retried later), reported to `on_error`.
async fn deliver<T: FromValue, H: QueueHandler<T>>(
    message: Box<dyn QueueMessageHandle>,
    handler: Arc<H>,
    on_error: FailureReporter,
) {
    let failure = match T::from_value(KvValue::V8(message.payload().to_vec().into())) {
        Err(err) => Some(DeliveryFailure::Payload(err.to_string())),
        Ok(payload) => match AssertUnwindSafe(async { handler.handle(payload).await })
            .catch_unwind()
            .await
        {
            Ok(Ok(())) => None,
            Ok(Err(err)) => Some(DeliveryFailure::Handler(err.to_string())),
            Err(panic) => Some(DeliveryFailure::Panic(panic_message(panic.as_ref()))),
        },
    };
    if let Some(failure) = &failure {
        // A reporter that panics must not strand the message: it is still finished below.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| on_error(failure)));
    }
    // A failure to record the outcome (a closed store) leaves the message to be redelivered.
    let _ = message.finish(failure.is_none()).await;
}

/// The text of a panic's payload (`panic!("...")` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

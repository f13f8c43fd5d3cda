//! One delivery of a queue message, as every engine hands it out: the delivery state machine and
//! the one message handle type, [`Delivery`].
//!
//! ```text
//!   ready ──take──▶ held (deadline) ──hand_over──▶ with the consumer
//!     ▲               │                              │
//!     │               │ dropped before hand-over     │ finish(true)  → deleted
//!     └───────────────┘ (Undelivered: due at once,   │ finish(false) → retry / dead letter
//!                        no retry used)              │ dropped       → retry / dead letter
//! ```
//!
//! **Cancel safety.** The engine creates the [`Delivery`] in the same step that takes the message
//! (inside its commit, before the answer crosses any channel or await point). From then on the
//! delivery is a drop guard: if the `dequeue_next_message` future is dropped before it returns
//! — at any await point, or while the answer sits in a channel nobody reads — the guard is
//! dropped with it and gives the message back as [`DeliveryOutcome::Undelivered`]: due again at
//! once, its back-off schedule untouched, because no consumer ever saw it. Once
//! [`Delivery::hand_over`] has turned it into the consumer's handle, dropping it unfinished is a
//! failed delivery ([`DeliveryOutcome::Failed`]), as Deno counts a consumer that gave up.
//!
//! An engine implements [`DeliveryEngine`] (how to settle a delivery, waiting or in the
//! background) and lets [`next_delivery`](super::next_delivery) run its dequeue loop.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{DeliveryFailure, QueueMessageHandle, QueuedMessage, after_failed_delivery};
use crate::{KvError, ValidatedWrite};

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The consumer handled the message: it is deleted.
    Succeeded,
    /// The consumer failed it, or received it and let go without finishing: it is retried after
    /// the next back-off interval, or dead-lettered when none is left.
    Failed,
    /// No consumer ever saw it (the dequeue that took it was dropped before returning, or a relay
    /// could not pass it on): it is due again at once, and no retry is used up.
    Undelivered,
}

/// What happens to `message` when its delivery ends with `outcome` at `now`: `None` deletes it;
/// otherwise put it back as [`DeliveryFailure::Retry`] says (due at its `ready_at`), or write its
/// dead letters.
///
/// ```
/// use open_deno_kv_engine_kit::queue::{after_delivery, DeliveryFailure, DeliveryOutcome, QueuedMessage};
/// use open_deno_kv_engine_kit::{ManualClock, Clock};
///
/// let now = ManualClock::at_test_epoch().now();
/// let message = QueuedMessage::new(vec![1], now, vec![], vec![]);
/// // Never seen by a consumer: back at once, even with no retry left.
/// match after_delivery(&message, DeliveryOutcome::Undelivered, now) {
///     Some(DeliveryFailure::Retry(again)) => assert_eq!(again, message),
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(after_delivery(&message, DeliveryOutcome::Succeeded, now), None);
/// ```
pub fn after_delivery(
    message: &QueuedMessage,
    outcome: DeliveryOutcome,
    now: DateTime<Utc>,
) -> Option<DeliveryFailure> {
    match outcome {
        DeliveryOutcome::Succeeded => None,
        DeliveryOutcome::Failed => Some(after_failed_delivery(message, now)),
        DeliveryOutcome::Undelivered => {
            let mut again = message.clone();
            again.ready_at = again.ready_at.min(now);
            Some(DeliveryFailure::Retry(again))
        }
    }
}

/// What an engine stores when a delivery ends (see [`Settlement::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Nothing: the message is gone (handled, or out of retries with no dead-letter keys).
    Forget,
    /// Put the message back in the ready queue, due at its `ready_at`.
    Requeue(QueuedMessage),
    /// Out of retries: commit this write of the payload to its dead-letter keys.
    DeadLetter(ValidatedWrite),
}

impl Settlement {
    /// What to store for `message` when its delivery ends with `outcome` at `now` (the queue
    /// rule of [`after_delivery`], in the form an engine applies).
    ///
    /// ```
    /// use open_deno_kv_engine_kit::queue::{DeliveryOutcome, QueuedMessage, Settlement};
    /// use open_deno_kv_engine_kit::{ManualClock, Clock};
    ///
    /// let now = ManualClock::at_test_epoch().now();
    /// let no_retry_left = QueuedMessage::new(vec![1], now, vec![vec![2, b'k', 0]], vec![]);
    /// match Settlement::of(&no_retry_left, DeliveryOutcome::Failed, now) {
    ///     Settlement::DeadLetter(write) => assert_eq!(write.mutations.len(), 1),
    ///     other => panic!("{other:?}"),
    /// }
    /// ```
    pub fn of(message: &QueuedMessage, outcome: DeliveryOutcome, now: DateTime<Utc>) -> Self {
        match after_delivery(message, outcome, now) {
            None => Settlement::Forget,
            Some(DeliveryFailure::Retry(next)) => Settlement::Requeue(next),
            Some(DeliveryFailure::DeadLetter { write }) if write.mutations.is_empty() => {
                Settlement::Forget
            }
            Some(DeliveryFailure::DeadLetter { write }) => Settlement::DeadLetter(write),
        }
    }
}

/// The engine side of a delivery: how to settle one.
#[async_trait]
pub trait DeliveryEngine: Send + Sync + 'static {
    /// What tells one delivery from another in this engine (a message id, and usually a token
    /// that tells this hand-out from a later one of the same message, so a stale handle settles
    /// nothing).
    type Ticket: Send + Sync + 'static;

    /// Settles the delivery and returns once the outcome is stored (a consumer's `finish`), or
    /// recorded where the handle keeps it until it is stored: an engine may store successes in
    /// batches behind its consumers, provided its handle's own queue listing sees them and a
    /// failure to store one leaves the message held, never lost (open-deno-kv-postgres).
    async fn settle(&self, ticket: Self::Ticket, outcome: DeliveryOutcome) -> Result<(), KvError>;

    /// Settles the delivery without waiting (from `Drop`, which cannot wait). Must not block on
    /// the engine's writer: queue the work and return.
    fn settle_in_background(&self, ticket: Self::Ticket, outcome: DeliveryOutcome);
}

/// A message taken by an engine: a drop guard from the instant of the take (see the module
/// docs), and, once [handed over](Delivery::hand_over), the consumer's
/// [`QueueMessageHandle`].
pub struct Delivery<E: DeliveryEngine + ?Sized> {
    engine: Arc<E>,
    /// `None` once settled (or dismissed).
    ticket: Option<E::Ticket>,
    payload: Vec<u8>,
    /// Whether a consumer received it: decides what dropping it means.
    handed_over: bool,
}

impl<E: DeliveryEngine + ?Sized> std::fmt::Debug for Delivery<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("payload_len", &self.payload.len())
            .field("settled", &self.ticket.is_none())
            .field("handed_over", &self.handed_over)
            .finish()
    }
}

impl<E: DeliveryEngine + ?Sized> Delivery<E> {
    /// The guard for a message `engine` has just taken. Create it in the step that takes the
    /// message, before the answer waits anywhere.
    pub fn new(engine: Arc<E>, ticket: E::Ticket, payload: Vec<u8>) -> Self {
        Delivery {
            engine,
            ticket: Some(ticket),
            payload,
            handed_over: false,
        }
    }

    /// The ticket, while the delivery is not settled.
    pub fn ticket(&self) -> Option<&E::Ticket> {
        self.ticket.as_ref()
    }

    /// Gives the message to its consumer: from now on, dropping the handle unfinished is a
    /// failed delivery. Call it last, with no await point between it and the return of
    /// `dequeue_next_message`.
    pub fn hand_over(mut self) -> Box<dyn QueueMessageHandle>
    where
        E: 'static,
    {
        self.handed_over = true;
        Box::new(self)
    }

    /// Forgets a delivery whose take did not happen after all (its transaction was rolled back):
    /// there is nothing to give back.
    pub fn dismiss(mut self) {
        self.ticket = None;
    }
}

#[async_trait]
impl<E: DeliveryEngine + ?Sized> QueueMessageHandle for Delivery<E> {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(mut self: Box<Self>, success: bool) -> Result<(), KvError> {
        let Some(ticket) = self.ticket.take() else {
            return Ok(());
        };
        let outcome = if success {
            DeliveryOutcome::Succeeded
        } else {
            DeliveryOutcome::Failed
        };
        self.engine.settle(ticket, outcome).await
    }

    fn release(mut self: Box<Self>) {
        if let Some(ticket) = self.ticket.take() {
            self.engine
                .settle_in_background(ticket, DeliveryOutcome::Undelivered);
        }
    }
}

impl<E: DeliveryEngine + ?Sized> Drop for Delivery<E> {
    /// Not handed over: nobody saw the message, it is due again at once. Handed over and not
    /// finished: the consumer gave up, a failed delivery.
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let outcome = if self.handed_over {
                DeliveryOutcome::Failed
            } else {
                DeliveryOutcome::Undelivered
            };
            self.engine.settle_in_background(ticket, outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Records what it was asked to do.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(u32, DeliveryOutcome, bool)>>);

    #[async_trait]
    impl DeliveryEngine for Recorder {
        type Ticket = u32;
        async fn settle(&self, ticket: u32, outcome: DeliveryOutcome) -> Result<(), KvError> {
            self.0.lock().unwrap().push((ticket, outcome, true));
            Ok(())
        }
        fn settle_in_background(&self, ticket: u32, outcome: DeliveryOutcome) {
            self.0.lock().unwrap().push((ticket, outcome, false));
        }
    }

    #[tokio::test]
    async fn each_way_out_settles_once_with_its_outcome() {
        let engine = Arc::new(Recorder::default());
        drop(Delivery::new(engine.clone(), 1, vec![]));
        drop(Delivery::new(engine.clone(), 2, vec![]).hand_over());
        Delivery::new(engine.clone(), 3, vec![])
            .hand_over()
            .finish(true)
            .await
            .unwrap();
        Delivery::new(engine.clone(), 4, vec![])
            .hand_over()
            .finish(false)
            .await
            .unwrap();
        Delivery::new(engine.clone(), 5, vec![])
            .hand_over()
            .release();
        Delivery::new(engine.clone(), 6, vec![]).dismiss();
        use DeliveryOutcome::*;
        assert_eq!(
            *engine.0.lock().unwrap(),
            vec![
                (1, Undelivered, false),
                (2, Failed, false),
                (3, Succeeded, true),
                (4, Failed, true),
                (5, Undelivered, false),
            ]
        );
    }
}

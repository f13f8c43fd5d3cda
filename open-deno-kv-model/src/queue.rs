//! Queue messages and the retry rule.
//!
//! A message is delivered at least once, no earlier than its ready time. A handler that fails (or
//! a consumer that dies holding the message) causes a retry after the next interval of the
//! message's backoff schedule; each retry uses up one interval. When none are left, the payload is
//! written under every key of `keys_if_undelivered` (V8 encoding, no expiry) and the message is
//! dropped.
//!
//! ```
//! use open_deno_kv_model::queue::{after_failed_delivery, DeliveryFailure, QueuedMessage};
//! use open_deno_kv_model::{ManualClock, Clock};
//!
//! let clock = ManualClock::at_test_epoch();
//! let msg = QueuedMessage::new(vec![1], clock.now(), vec![], vec![100, 1000]);
//! match after_failed_delivery(&msg, clock.now()) {
//!     DeliveryFailure::Retry(next) => {
//!         assert_eq!((next.ready_at - clock.now()).num_milliseconds(), 100);
//!         assert_eq!(next.backoff_schedule, vec![1000]);
//!     }
//!     DeliveryFailure::DeadLetter { .. } => unreachable!(),
//! }
//! ```

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::{
    AtomicWrite, DEFAULT_BACKOFF_SCHEDULE, Enqueue, KvError, KvValue, Mutation, Validated,
    ValidatedWrite,
};

/// How long a consumer holds a message before it is presumed dead and the message requeued
/// (Deno: 5 s).
pub const MESSAGE_DEADLINE: Duration = Duration::from_secs(5);
/// How often a live consumer renews its deadline (Deno: every 2 s).
pub const MESSAGE_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// How many messages one handle may have in flight at once (Deno: 100).
pub const MAX_MESSAGES_IN_FLIGHT: usize = 100;

/// The deadline of a delivery handed out at `now`: when its consumer is presumed dead (see
/// [`MESSAGE_DEADLINE`]).
pub fn delivery_deadline(now: DateTime<Utc>) -> DateTime<Utc> {
    now + TimeDelta::from_std(MESSAGE_DEADLINE).unwrap_or(TimeDelta::seconds(5))
}

/// A message as a backend stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    /// Unique id (Deno stores it as a UUID string).
    pub id: Uuid,
    /// V8-serialized payload.
    pub payload: Vec<u8>,
    /// Earliest delivery time.
    pub ready_at: DateTime<Utc>,
    /// Encoded keys to write the payload to when retries run out.
    pub keys_if_undelivered: Vec<Vec<u8>>,
    /// The retry intervals still left, in milliseconds.
    pub backoff_schedule: Vec<u32>,
}

impl QueuedMessage {
    /// A message with a fresh random id.
    pub fn new(
        payload: Vec<u8>,
        ready_at: DateTime<Utc>,
        keys_if_undelivered: Vec<Vec<u8>>,
        backoff_schedule: Vec<u32>,
    ) -> Self {
        QueuedMessage {
            id: Uuid::new_v4(),
            payload,
            ready_at,
            keys_if_undelivered,
            backoff_schedule,
        }
    }

    /// The stored form of an enqueue: a fresh id, and Deno's default schedule when none was given.
    pub fn from_enqueue(enqueue: &Enqueue) -> Self {
        let schedule = enqueue
            .backoff_schedule
            .clone()
            .unwrap_or_else(|| DEFAULT_BACKOFF_SCHEDULE.to_vec());
        Self::new(
            enqueue.payload.clone(),
            enqueue.ready_at,
            enqueue.keys_if_undelivered.clone(),
            schedule,
        )
    }
}

/// What to do with a message whose delivery failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryFailure {
    /// Put it back, due at `ready_at`, with one interval fewer.
    Retry(QueuedMessage),
    /// Retries are used up: commit this write (possibly without mutations) and drop the message.
    DeadLetter {
        /// A V8 set of the payload for each of `keys_if_undelivered`, without expiry. It is a
        /// [`ValidatedWrite`] because its keys passed the limits when the message was enqueued,
        /// so the engine runs it through the same write path as any other write.
        write: ValidatedWrite,
    },
}

/// Decides what happens after a failed delivery at time `now` (also used for messages whose
/// consumer's deadline passed).
pub fn after_failed_delivery(message: &QueuedMessage, now: DateTime<Utc>) -> DeliveryFailure {
    match message.backoff_schedule.split_first() {
        Some((&first_ms, rest)) => {
            let mut next = message.clone();
            next.ready_at = now + TimeDelta::milliseconds(i64::from(first_ms));
            next.backoff_schedule = rest.to_vec();
            DeliveryFailure::Retry(next)
        }
        None => DeliveryFailure::DeadLetter {
            write: Validated::vouched(AtomicWrite {
                mutations: message
                    .keys_if_undelivered
                    .iter()
                    .map(|key| {
                        Mutation::set(key.clone(), KvValue::V8(message.payload.clone().into()))
                    })
                    .collect(),
                ..Default::default()
            }),
        },
    }
}

/// A message handed to a consumer. The consumer reads the payload, handles it, and must call
/// [`QueueMessageHandle::finish`]: `true` deletes it, `false` schedules a retry (or dead-letters
/// it). A handle dropped without finishing counts as a failed delivery (at once, or once its
/// deadline passes). Every engine's handle is open-deno-kv-engine-kit's `queue::Delivery`.
#[async_trait]
pub trait QueueMessageHandle: Send + Sync {
    /// The V8-serialized payload.
    fn payload(&self) -> &[u8];

    /// Reports the outcome. Consumes the handle, so a message cannot be finished twice.
    async fn finish(self: Box<Self>, success: bool) -> Result<(), KvError>;

    /// Gives the message back untouched, for a consumer that never looked at it — a relay (such
    /// as `kv serve`'s long poll) that could not pass it on: it is due again at once and no retry
    /// is used up (the kit's `DeliveryOutcome::Undelivered`). Does not wait. The default drops the
    /// handle, which counts as a failed delivery.
    fn release(self: Box<Self>) {
        drop(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MutationKind;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    #[test]
    fn retries_walk_the_schedule_then_dead_letter() {
        let keys = vec![vec![2, b'a', 0], vec![2, b'b', 0]];
        let mut msg = QueuedMessage::new(vec![9], at(0), keys.clone(), vec![100, 1000, 5000]);
        let mut now = at(1_000);
        for interval in [100, 1000, 5000] {
            match after_failed_delivery(&msg, now) {
                DeliveryFailure::Retry(next) => {
                    assert_eq!(next.ready_at, now + TimeDelta::milliseconds(interval));
                    assert_eq!(next.id, msg.id);
                    msg = next;
                    now = msg.ready_at;
                }
                other => panic!("expected a retry, got {other:?}"),
            }
        }
        let DeliveryFailure::DeadLetter { write } = after_failed_delivery(&msg, now) else {
            panic!("expected a dead letter");
        };
        assert!(write.checks.is_empty() && write.enqueues.is_empty());
        assert_eq!(write.mutations.len(), 2);
        for (m, key) in write.mutations.iter().zip(&keys) {
            assert_eq!(&m.key, key);
            assert_eq!(m.kind, MutationKind::Set(KvValue::V8(vec![9].into())));
            assert_eq!(m.expire_at, None);
        }
    }

    #[test]
    fn empty_schedule_never_retries_and_no_keys_drops() {
        let msg = QueuedMessage::new(vec![1], at(0), vec![], vec![]);
        let DeliveryFailure::DeadLetter { write } = after_failed_delivery(&msg, at(5)) else {
            panic!("expected a dead letter");
        };
        assert_eq!(write.into_inner(), AtomicWrite::default());
    }

    #[test]
    fn default_schedule_applies_when_none_given() {
        let enqueue = Enqueue {
            payload: vec![1],
            ready_at: at(0),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        };
        assert_eq!(
            QueuedMessage::from_enqueue(&enqueue).backoff_schedule,
            vec![100, 1000, 5000, 30000, 60000]
        );
        let explicit = Enqueue {
            backoff_schedule: Some(vec![]),
            ..enqueue
        };
        assert!(
            QueuedMessage::from_enqueue(&explicit)
                .backoff_schedule
                .is_empty()
        );
    }
}

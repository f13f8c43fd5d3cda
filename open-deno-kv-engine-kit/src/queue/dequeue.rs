//! The dequeue loop every engine runs, written once.

use std::future::Future;

use chrono::{DateTime, Utc};

use super::{Delivery, DeliveryEngine, QueueMessageHandle, QueueWake, wait_for_queue};
use crate::{ChangeSignal, Clock, KvError};

/// What one look at the queue found (an engine's answer to [`next_delivery`]'s `take`).
pub enum Taken<E: DeliveryEngine + ?Sized> {
    /// A message, taken and guarded (see [`Delivery`]).
    Message(Delivery<E>),
    /// Nothing due; the next message is due at this time, if there is one.
    NextAt(Option<DateTime<Utc>>),
    /// The asking handle is closed.
    Closed,
}

/// Waits for the next due message and hands it to the consumer; `Ok(None)` once the handle is
/// closed (`closed`, or `take` answering [`Taken::Closed`] or [`KvError::Closed`]).
///
/// `take(now)` looks for the first message due at `now` and, if there is one, takes it and
/// returns it guarded. `changes` is bumped by the engine whenever a message may have become due
/// (an enqueue, a retry, a release, another process's commit).
///
/// Cancel-safe: dropped while `take` runs, the [`Delivery`] it produces is dropped with it and
/// gives the message back untouched; dropped while waiting, nothing was taken. The delivery is
/// handed over with no await point before the return.
pub async fn next_delivery<E, F, Fut>(
    mut changes: tokio::sync::watch::Receiver<u64>,
    clock: &dyn Clock,
    closed: &ChangeSignal,
    mut take: F,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError>
where
    E: DeliveryEngine + ?Sized,
    F: FnMut(DateTime<Utc>) -> Fut,
    Fut: Future<Output = Result<Taken<E>, KvError>>,
{
    loop {
        if closed.is_closed() {
            return Ok(None);
        }
        // Marked seen before looking, so a change between the look and the wait still wakes us.
        changes.borrow_and_update();
        let next_due = match take(clock.now()).await {
            Ok(Taken::Message(delivery)) => return Ok(Some(delivery.hand_over())),
            Ok(Taken::NextAt(next_due)) => next_due,
            Ok(Taken::Closed) | Err(KvError::Closed) => return Ok(None),
            Err(err) => return Err(err),
        };
        if wait_for_queue(&mut changes, next_due, clock, closed).await == QueueWake::Closed {
            return Ok(None);
        }
    }
}

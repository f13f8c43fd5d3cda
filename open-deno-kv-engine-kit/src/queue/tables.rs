//! The queue's state machine over an engine's queue tables, written once.
//!
//! An engine stores a message in one of two places: *ready* (waiting, by ready time) or
//! *running* (handed to a consumer, with a deadline). It implements [`QueueTables`] — plain
//! access to those two tables inside its transaction — and the kit decides what happens:
//!
//! - [`take_due`]: the first message due moves from ready to running, held until the delivery
//!   deadline of [`delivery_deadline`] (a [`Hold`]); [`Due::into_taken`] guards it as a
//!   [`Delivery`] before the answer leaves the group;
//! - [`settle`]: a delivery ends as its [`DeliveryOutcome`] says — a success deletes the running
//!   row; otherwise this crate's rule ([`Settlement`]) puts the message back in ready (a retry after
//!   the next back-off interval, or at once for a message nobody saw) or writes its dead letters;
//! - [`fail_deliveries`]: the deliveries a consumer abandoned (its handle closed, its process
//!   died, its deadline passed) are failed deliveries.
//!
//! The engine keeps only what its storage needs to know: which row is the first due, how a row
//! is moved or deleted, and how a dead-letter write goes through its write path.
//!
//! ```
//! use std::collections::BTreeMap;
//! use chrono::{DateTime, Utc};
//! use open_deno_kv_engine_kit::queue::{self, Due, DeliveryOutcome, Hold, QueueTables, QueuedMessage};
//! use open_deno_kv_engine_kit::{Clock, Effects, KvError, ManualClock, ValidatedWrite};
//!
//! /// Two maps: ready by (ready time, id), running by id.
//! #[derive(Default)]
//! struct Maps {
//!     ready: BTreeMap<(DateTime<Utc>, u128), QueuedMessage>,
//!     running: BTreeMap<u128, QueuedMessage>,
//! }
//! impl QueueTables for Maps {
//!     type Id = u128;
//!     type Error = KvError;
//!     fn take_due(&mut self, hold: Hold) -> Result<Due<u128>, KvError> {
//!         let Some((&(at, id), _)) = self.ready.first_key_value() else {
//!             return Ok(Due::NextAt(None));
//!         };
//!         if at > hold.now() {
//!             return Ok(Due::NextAt(Some(at)));
//!         }
//!         let message = self.ready.remove(&(at, id)).expect("the first row");
//!         self.running.insert(id, message.clone());
//!         Ok(Due::Message(id, message))
//!     }
//!     fn delete_running(&mut self, id: &u128) -> Result<(), KvError> {
//!         self.running.remove(id);
//!         Ok(())
//!     }
//!     fn running(&mut self, id: &u128) -> Result<Option<QueuedMessage>, KvError> {
//!         Ok(self.running.get(id).cloned())
//!     }
//!     fn insert_ready(&mut self, id: &u128, message: &QueuedMessage) -> Result<(), KvError> {
//!         self.ready.insert((message.ready_at, *id), message.clone());
//!         Ok(())
//!     }
//!     fn write_dead_letters(&mut self, _: &ValidatedWrite, _: DateTime<Utc>, _: &mut Effects)
//!         -> Result<(), KvError> {
//!         Ok(())
//!     }
//! }
//!
//! let now = ManualClock::at_test_epoch().now();
//! let mut maps = Maps::default();
//! maps.insert_ready(&1, &QueuedMessage::new(vec![7], now, vec![], vec![100]))?;
//! let Due::Message(id, _) = queue::take_due(&mut maps, now)? else {
//!     panic!("due now");
//! };
//! let mut effects = Effects::default();
//! queue::settle(&mut maps, &id, DeliveryOutcome::Failed, now, &mut effects)?;
//! let retry = maps.ready.values().next().expect("requeued");
//! assert_eq!((retry.ready_at - now).num_milliseconds(), 100);
//! assert!(effects.queue, "consumers wake for the retry");
//! # Ok::<(), KvError>(())
//! ```

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{
    Delivery, DeliveryEngine, DeliveryOutcome, QueuedMessage, Settlement, Taken, delivery_deadline,
};
use crate::{Effects, ValidatedWrite};

/// What a look for the first due message found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due<Id> {
    /// This message (stored under this id) was due and is now running.
    Message(Id, QueuedMessage),
    /// Nothing due; the next message is due at this time, if there is one.
    NextAt(Option<DateTime<Utc>>),
}

/// A take's moment and the deadline its delivery is held to: the first message due at
/// [`Hold::now`] moves to running with [`Hold::deadline`], the rule's [`delivery_deadline`] of
/// that moment. The deadline comes with the moment, so no engine computes its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    now: DateTime<Utc>,
    deadline: DateTime<Utc>,
}

impl Hold {
    /// A take at `now`, held until [`delivery_deadline`]`(now)`.
    pub fn at(now: DateTime<Utc>) -> Hold {
        Hold {
            now,
            deadline: delivery_deadline(now),
        }
    }

    /// When the take happens: a message whose ready time is later is not due.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// When the consumer is presumed dead and the message requeued, unless it settles or renews
    /// first.
    pub fn deadline(&self) -> DateTime<Utc> {
        self.deadline
    }
}

/// An engine's queue tables, inside one of its transactions (see the module docs).
pub trait QueueTables {
    /// How the engine names a stored message (Deno's SQLite files keep it as text, open-deno-kv-redb as a
    /// UUID).
    type Id;
    /// The engine's failure (for most engines [`crate::KvError`]; one that must tell a failed
    /// command from a failed transaction has its own).
    type Error;

    /// Moves the first message due at [`Hold::now`] from ready to running, with
    /// [`Hold::deadline`]; returns it, or else when the next message is due.
    fn take_due(&mut self, hold: Hold) -> Result<Due<Self::Id>, Self::Error>;

    /// Deletes running message `id` (its delivery succeeded); nothing if it is not running.
    fn delete_running(&mut self, id: &Self::Id) -> Result<(), Self::Error>;

    /// Running message `id` as it was delivered (`None` if it is not running: already
    /// settled). Reads only: the kit deletes the row once what replaces it is stored, so an
    /// engine without per-command rollback loses nothing when a dead-letter write is refused.
    fn running(&mut self, id: &Self::Id) -> Result<Option<QueuedMessage>, Self::Error>;

    /// Stores `message` as ready under `id`, due at its `ready_at`.
    fn insert_ready(&mut self, id: &Self::Id, message: &QueuedMessage) -> Result<(), Self::Error>;

    /// Commits `write` (a message's dead letters) through the engine's write path at `now`,
    /// recording what it changed in `effects`.
    fn write_dead_letters(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), Self::Error>;
}

/// Moves the first message due at `now` into running, with the deadline of a delivery handed out
/// at `now` ([`delivery_deadline`]).
pub fn take_due<T: QueueTables + ?Sized>(
    tables: &mut T,
    now: DateTime<Utc>,
) -> Result<Due<T::Id>, T::Error> {
    tables.take_due(Hold::at(now))
}

impl<Id> Due<Id> {
    /// The answer to a take: a message guarded at once as a [`Delivery`] settled through
    /// `engine`, under the ticket `ticket` makes of its id (where an engine records the delivery:
    /// a lease, a held id), or when the next one is due.
    pub fn into_taken<E: DeliveryEngine + ?Sized>(
        self,
        engine: Arc<E>,
        ticket: impl FnOnce(Id) -> E::Ticket,
    ) -> Taken<E> {
        match self {
            Due::Message(id, message) => {
                Taken::Message(Delivery::new(engine, ticket(id), message.payload))
            }
            Due::NextAt(next) => Taken::NextAt(next),
        }
    }
}

/// Ends the delivery of running message `id` as `outcome` says at `now` (see [`Settlement`]).
/// A message that is not running (already settled, or requeued by someone else) is left alone.
pub fn settle<T: QueueTables + ?Sized>(
    tables: &mut T,
    id: &T::Id,
    outcome: DeliveryOutcome,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), T::Error> {
    if outcome == DeliveryOutcome::Succeeded {
        return tables.delete_running(id);
    }
    let Some(message) = tables.running(id)? else {
        return Ok(());
    };
    match Settlement::of(&message, outcome, now) {
        Settlement::Forget => {}
        Settlement::Requeue(next) => {
            tables.insert_ready(id, &next)?;
            effects.queue = true;
        }
        Settlement::DeadLetter(write) => tables.write_dead_letters(&write, now, effects)?,
    }
    tables.delete_running(id)
}

/// Fails the deliveries of `ids`, which their consumers abandoned (a handle closed, a process
/// died, a deadline passed): each is retried or dead-lettered. Stops at the first failure.
pub fn fail_deliveries<T: QueueTables + ?Sized>(
    tables: &mut T,
    ids: impl IntoIterator<Item = T::Id>,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), T::Error> {
    for id in ids {
        settle(tables, &id, DeliveryOutcome::Failed, now, effects)?;
    }
    Ok(())
}

//! The queue machinery of an engine: the delivery handle every engine hands out
//! ([`Delivery`]), the dequeue loop ([`next_delivery`]) and its wait ([`wait_for_queue`]), the
//! lease book ([`Leases`]) and the tables a store keeps its queue in ([`QueueTables`]).
//!
//! What a message is and what happens after a failed delivery (Deno's retry rule) are the
//! model's, in `open_deno_kv_model::queue`; they are named here too, so an engine finds every
//! queue item under one path.
//!
//! ## Queue bookkeeping
//!
//! What must survive a crash is what a caller was told was stored: an enqueue (it comes with an
//! atomic write) and a dead-letter write. The rest is bookkeeping: a take moves a message from
//! ready to running, a successful settlement deletes it, a failed one requeues it, a renewal
//! pushes its deadline. Undone by a crash of the machine, each of these leaves the message where
//! it was before, ready or running, and running messages are requeued when the store is opened
//! again: the message is delivered again, never lost. At-least-once delivery allows exactly that.
//!
//! So a durable engine need not sync bookkeeping on its own. open-deno-kv-sqlite (with
//! `Durability::Full`) and open-deno-kv-redb (with `Durability::Immediate`) commit a group that holds only
//! bookkeeping (no command for which `committer::Change::must_sync` holds) without an fsync; it
//! becomes durable with the next synced commit, or with the idle sync a second later. A consumer
//! that takes a message and finishes it pays for no fsync: before, every message cost three
//! (enqueue, take, finish). What a crash can undo differs by engine (open-deno-kv-sqlite's unsynced commits are in
//! the operating system and survive a crash of the process; open-deno-kv-redb's live in memory until
//! synced), but either way the message is delivered again, never lost.

use chrono::{DateTime, Utc};

mod delivery;
mod dequeue;
mod leases;
mod tables;

pub use delivery::{Delivery, DeliveryEngine, DeliveryOutcome, Settlement, after_delivery};
pub use dequeue::{Taken, next_delivery};
pub use leases::{IdMap, Lease, Leases};
pub use open_deno_kv_model::queue::*;
pub use tables::{Due, Hold, QueueTables, fail_deliveries, settle, take_due};

/// Why a consumer's wait for the queue ended (see [`wait_for_queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueWake {
    /// Something may now be due (a change, or the awaited time): look again.
    LookAgain,
    /// The handle closed: the dequeue returns `Ok(None)`.
    Closed,
}

/// The wait in the dequeue loop ([`next_delivery`]): after looking for a due message and
/// finding none, wait until the queue changes (`changes`, bumped on every enqueue or requeue),
/// the next message's ready time `next_due` arrives on `clock`, or the handle closes
/// (`closed`).
///
/// Call `changes.borrow_and_update()` *before* looking, so that a change between the look and
/// this wait still wakes it. A `changes` whose sender is gone counts as closed.
pub async fn wait_for_queue(
    changes: &mut tokio::sync::watch::Receiver<u64>,
    next_due: Option<DateTime<Utc>>,
    clock: &dyn crate::Clock,
    closed: &crate::ChangeSignal,
) -> QueueWake {
    let due = async {
        match next_due {
            Some(at) => clock.sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        changed = changes.changed() => match changed {
            Ok(()) => QueueWake::LookAgain,
            Err(_) => QueueWake::Closed,
        },
        () = due => QueueWake::LookAgain,
        () = closed.wait_closed() => QueueWake::Closed,
    }
}

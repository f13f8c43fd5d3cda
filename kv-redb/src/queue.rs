//! The queue tables, as the writer changes them inside a group transaction.
//!
//! A message lives in exactly one of two tables:
//!
//! - `queue_ready`, keyed by (ready time, id): waiting. The first row is the next message due.
//! - `queue_running`, keyed by id: handed to a consumer, with a deadline (hand-out time +
//!   [`MESSAGE_DEADLINE`]) and the message as it was delivered.
//!
//! Taking a message moves it from ready to running in the same transaction; finishing it deletes
//! the running row and, for a failure, applies kv-proto's rule
//! ([`Settlement`]): back to `queue_ready` after the next back-off interval, or — with
//! no interval left — its payload written under its dead-letter keys by an ordinary commit.
//!
//! **Who holds a running message.** redb locks the file for one process
//! ([`redb::ConcurrencyMode::ExclusiveWriter`]), and every handle of this process shares one open
//! file, so the writer knows every live consumer: it keeps them in memory (message id →
//! handle and delivery token). A running row that no live consumer holds can only be left by a
//! process that ended without finishing it (a crash, a kill): [`recover`] requeues every such
//! row, as a failed delivery, when the file is opened. A handle that closes (or is dropped)
//! fails the messages it still holds, so they are retried like any failed delivery. Since no
//! other process can see the file while this one has it open, the deadline is never needed to
//! detect a dead consumer while the file is open and there is nothing to keep alive; it is
//! recorded for inspection and for the format's sake.

use chrono::{DateTime, Utc};
use kv_proto::queue::{
    DeliveryEngine, DeliveryOutcome, QueuedMessage, Settlement, delivery_deadline,
};
use kv_proto::{Effects, KvError};
use redb::ReadableTable;
use uuid::Uuid;

use crate::codec;
use crate::error::storage;
use crate::txn::{Fatal, Step, Tables, commit_write, fatal};

/// One delivery of this engine: the message id, and `token` (its delivery number), which tells
/// it from a later delivery of the same message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) id: Uuid,
    pub(crate) token: u64,
}

/// What settles a handle's deliveries (see the `consumer` module).
pub(crate) type Engine = dyn DeliveryEngine<Ticket = Ticket>;

/// Moves the first message due at `now` from ready to running. Returns the message, or else the
/// time the next one is due.
pub(crate) fn take_due(
    tables: &mut Tables<'_>,
    now: DateTime<Utc>,
) -> Step<Result<QueuedMessage, Option<DateTime<Utc>>>> {
    let first = {
        let ready = match tables.ready() {
            Ok(ready) => ready,
            Err(err) => return Ok(Err(storage(err))),
        };
        match ready.first() {
            Ok(first) => first.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())),
            Err(err) => return Ok(Err(storage(err))),
        }
    };
    let Some((key, body)) = first else {
        return Ok(Ok(Err(None)));
    };
    let message = match decode_ready(&key, &body) {
        Ok(message) => message,
        Err(err) => return Ok(Err(err)),
    };
    if message.ready_at > now {
        return Ok(Ok(Err(Some(message.ready_at))));
    }
    let deadline = delivery_deadline(now);
    tables.dirty = true;
    tables
        .ready()
        .map_err(fatal)?
        .remove(key.as_slice())
        .map_err(fatal)?;
    tables
        .running()
        .map_err(fatal)?
        .insert(
            message.id.as_bytes().as_slice(),
            codec::encode_running(deadline, &message).as_slice(),
        )
        .map_err(fatal)?;
    Ok(Ok(Ok(message)))
}

fn decode_ready(key: &[u8], body: &[u8]) -> Result<QueuedMessage, KvError> {
    let (ready_at, id) = codec::decode_ready_key(key)?;
    codec::decode_message_body(body, id, ready_at)
}

/// Ends the delivery of running message `id` as `outcome` says (see [`Settlement`]): success
/// deletes it, failure retries it or dead-letters it, an undelivered message goes back to
/// `queue_ready` as it was. A message that is not running (already settled) is left alone.
pub(crate) fn settle(
    tables: &mut Tables<'_>,
    id: Uuid,
    outcome: DeliveryOutcome,
    now: DateTime<Utc>,
    last_version: &mut u64,
    effects: &mut Effects,
) -> Step<()> {
    let running = {
        let table = match tables.running() {
            Ok(table) => table,
            Err(err) => return Ok(Err(storage(err))),
        };
        match table.get(id.as_bytes().as_slice()) {
            Ok(row) => row.map(|guard| guard.value().to_vec()),
            Err(err) => return Ok(Err(storage(err))),
        }
    };
    let Some(record) = running else {
        return Ok(Ok(()));
    };
    if outcome != DeliveryOutcome::Succeeded {
        let message = match codec::decode_running(&record, id) {
            Ok((_deadline, message)) => message,
            Err(err) => return Ok(Err(err)),
        };
        let settlement = Settlement::of(&message, outcome, now);
        if let Err(err) = apply(tables, settlement, now, last_version, effects)? {
            return Ok(Err(err));
        }
    }
    tables.dirty = true;
    tables
        .running()
        .map_err(fatal)?
        .remove(id.as_bytes().as_slice())
        .map_err(fatal)?;
    Ok(Ok(()))
}

/// Stores what ending a delivery leaves: the message back in `queue_ready`, or its dead letters.
fn apply(
    tables: &mut Tables<'_>,
    settlement: Settlement,
    now: DateTime<Utc>,
    last_version: &mut u64,
    effects: &mut Effects,
) -> Step<()> {
    match settlement {
        Settlement::Forget => Ok(Ok(())),
        Settlement::Requeue(next) => {
            tables.insert_ready(&next)?;
            effects.queue = true;
            Ok(Ok(()))
        }
        Settlement::DeadLetter(write) => {
            Ok(commit_write(tables, &write, now, last_version, effects)?.map(|_| ()))
        }
    }
}

/// Requeues (as failed deliveries at `now`) every running message: at open, none of them has a
/// live consumer. Rows that do not decode are left in place and counted in the result's error
/// list rather than failing the open.
pub(crate) fn recover(
    tables: &mut Tables<'_>,
    now: DateTime<Utc>,
    last_version: &mut u64,
    effects: &mut Effects,
) -> Result<Vec<KvError>, Fatal> {
    let ids: Vec<Vec<u8>> = {
        let table = tables.running().map_err(fatal)?;
        let mut ids = Vec::new();
        for row in table.iter().map_err(fatal)? {
            let (key, _) = row.map_err(fatal)?;
            ids.push(key.value().to_vec());
        }
        ids
    };
    let mut problems = Vec::new();
    for raw in ids {
        let id = match codec::decode_id(&raw) {
            Ok(id) => id,
            Err(err) => {
                problems.push(err);
                continue;
            }
        };
        if let Err(err) = settle(
            tables,
            id,
            DeliveryOutcome::Failed,
            now,
            last_version,
            effects,
        )? {
            problems.push(err);
        }
    }
    Ok(problems)
}

/// A [`DeliveryEngine`] for tests of the writer alone: it settles nothing.
#[cfg(test)]
pub(crate) struct SettlesNothing;

#[cfg(test)]
#[async_trait::async_trait]
impl DeliveryEngine for SettlesNothing {
    type Ticket = Ticket;

    async fn settle(&self, _: Ticket, _: DeliveryOutcome) -> Result<(), KvError> {
        Ok(())
    }

    fn settle_in_background(&self, _: Ticket, _: DeliveryOutcome) {}
}

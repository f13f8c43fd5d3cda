//! The queue tables, as the writer changes them inside a group transaction.
//!
//! A message lives in exactly one of two tables:
//!
//! - `queue_ready`, keyed by (ready time, id): waiting. The first row is the next message due.
//! - `queue_running`, keyed by id: handed to a consumer, with a deadline (hand-out time +
//!   [`MESSAGE_DEADLINE`]) and the message as it was delivered.
//!
//! This module is table access only ([`RedbQueue`], open-deno-kv-engine-kit's [`QueueTables`]): open-deno-kv-engine-kit's queue
//! state machine moves a message from ready to running when it is taken, and decides what its
//! settlement leaves ([`open_deno_kv_engine_kit::queue::settle`]): nothing, the message back in `queue_ready`
//! after the next back-off interval, or its payload under its dead-letter keys (an ordinary
//! commit).
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
use open_deno_kv_engine_kit::queue::{
    DeliveryEngine, Due, Hold, QueueTables, QueuedMessage, fail_deliveries,
};
use open_deno_kv_engine_kit::{Effects, KvError, ValidatedWrite};
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

/// Why a queue step failed: before it modified the transaction (the command's own answer), or
/// after (the group is abandoned; see [`Fatal`]).
pub(crate) enum Failure {
    Command(KvError),
    Group(Fatal),
}

impl From<Fatal> for Failure {
    fn from(fatal: Fatal) -> Self {
        Failure::Group(fatal)
    }
}

/// A read that failed before anything was modified: the command's own failure.
fn own(err: impl Into<redb::Error>) -> Failure {
    Failure::Command(storage(err))
}

/// A queue step's result as a step of the group.
pub(crate) fn step<T>(result: Result<T, Failure>) -> Step<T> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(Failure::Command(err)) => Ok(Err(err)),
        Err(Failure::Group(fatal)) => Err(fatal),
    }
}

/// The queue tables of one group transaction, with the writer's version counter (a dead-letter
/// write takes a versionstamp): open-deno-kv-engine-kit's [`QueueTables`].
pub(crate) struct RedbQueue<'a, 't> {
    pub(crate) tables: &'a mut Tables<'t>,
    pub(crate) last_version: &'a mut u64,
}

impl QueueTables for RedbQueue<'_, '_> {
    type Id = Uuid;
    type Error = Failure;

    fn take_due(&mut self, hold: Hold) -> Result<Due<Uuid>, Failure> {
        let first = {
            let ready = self.tables.ready().map_err(own)?;
            let first = ready.first().map_err(own)?;
            first.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
        };
        let Some((key, body)) = first else {
            return Ok(Due::NextAt(None));
        };
        let (ready_at, id) = codec::decode_ready_key(&key).map_err(Failure::Command)?;
        let message = codec::decode_message_body(&body, id, ready_at).map_err(Failure::Command)?;
        if message.ready_at > hold.now() {
            return Ok(Due::NextAt(Some(message.ready_at)));
        }
        self.tables.dirty = true;
        let ready = self.tables.ready().map_err(fatal)?;
        ready.remove(key.as_slice()).map_err(fatal)?;
        let record = codec::encode_running(hold.deadline(), &message);
        let running = self.tables.running().map_err(fatal)?;
        (running.insert(id.as_bytes().as_slice(), record.as_slice())).map_err(fatal)?;
        Ok(Due::Message(id, message))
    }

    fn delete_running(&mut self, id: &Uuid) -> Result<(), Failure> {
        let running = self.tables.running().map_err(own)?;
        let removed = running
            .remove(id.as_bytes().as_slice())
            .map_err(fatal)?
            .is_some();
        self.tables.dirty |= removed;
        Ok(())
    }

    fn running(&mut self, id: &Uuid) -> Result<Option<QueuedMessage>, Failure> {
        let running = self.tables.running().map_err(own)?;
        let record = running.get(id.as_bytes().as_slice()).map_err(own)?;
        let Some(record) = record.map(|guard| guard.value().to_vec()) else {
            return Ok(None);
        };
        let (_deadline, message) = codec::decode_running(&record, *id).map_err(Failure::Command)?;
        Ok(Some(message))
    }

    fn insert_ready(&mut self, id: &Uuid, message: &QueuedMessage) -> Result<(), Failure> {
        debug_assert_eq!(
            *id, message.id,
            "open-deno-kv-redb keys a message by its own id"
        );
        Ok(self.tables.insert_ready(message)?)
    }

    fn write_dead_letters(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), Failure> {
        match commit_write(self.tables, write, now, self.last_version, effects)? {
            Ok(_) => Ok(()),
            Err(err) => Err(Failure::Command(err)),
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
    let mut queue = RedbQueue {
        tables,
        last_version,
    };
    let mut problems = Vec::new();
    for raw in ids {
        let failed = codec::decode_id(&raw)
            .map_err(Failure::Command)
            .and_then(|id| fail_deliveries(&mut queue, [id], now, effects));
        if let Err(err) = step(failed)? {
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

    async fn settle(
        &self,
        _: Ticket,
        _: open_deno_kv_engine_kit::queue::DeliveryOutcome,
    ) -> Result<(), KvError> {
        Ok(())
    }

    fn settle_in_background(&self, _: Ticket, _: open_deno_kv_engine_kit::queue::DeliveryOutcome) {}
}

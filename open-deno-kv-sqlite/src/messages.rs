//! Deno's queue tables, as the writer changes them inside its group transaction: the table
//! access of open-deno-kv-engine-kit's queue state machine ([`QueueTables`]).
//!
//! A message is in `queue` (waiting, by ready time `ts`) or in `queue_running` (handed to a
//! consumer, with a `deadline` its writer renews while the consumer lives). open-deno-kv-engine-kit moves it
//! between the two and decides what a settled delivery leaves ([`open_deno_kv_engine_kit::queue::settle`]).
//!
//! Several handles, in this process and in others, may share a file. A running row whose
//! deadline passed belongs to a dead consumer, unless a live consumer of this process holds it
//! (its writer may simply not have renewed it yet): the process-wide registry of held ids, per
//! file, tells them apart.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::queue::{Due, Hold, QueueTables, QueuedMessage, fail_deliveries};
use open_deno_kv_engine_kit::{Effects, KvError, ValidatedWrite, ms_to_datetime};
use rusqlite::{Connection, params};

use crate::pending_records::PendingRecords;
use crate::store::{commit_write, execute, first_row, insert_queue_row, queue_row, storage};

/// Message ids held by live consumers in this process, per database file: sweeps never requeue
/// them, whichever handle runs the sweep.
static HELD: LazyLock<Mutex<HashMap<PathBuf, HashSet<String>>>> = LazyLock::new(Default::default);

/// The held ids of every file (see [`HELD`]).
pub(crate) fn held_registry() -> MutexGuard<'static, HashMap<PathBuf, HashSet<String>>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

const SELECT_DUE: &str = "select ts, id, data, backoff_schedule, keys_if_undelivered from queue
    where ts <= ?1 order by ts limit 1";
const SELECT_DEAD: &str =
    "select id from queue_running where deadline <= ?1 order by deadline limit 100";
const SELECT_RUNNING: &str =
    "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running
    where id = ?1";

/// Deno's queue tables on a connection inside the writer's transaction (or savepoint).
pub(crate) struct SqlQueue<'a> {
    pub(crate) conn: &'a Connection,
    /// While the change log is on, the transaction's pending change records: dead-letter writes
    /// add theirs.
    pub(crate) log: Option<&'a mut PendingRecords>,
}

impl QueueTables for SqlQueue<'_> {
    type Id = String;
    type Error = KvError;

    fn take_due(&mut self, hold: Hold) -> Result<Due<String>, KvError> {
        let due = params![hold.now().timestamp_millis()];
        let Some((id, message)) = first_row(self.conn, SELECT_DUE, due, queue_row)? else {
            let next: Option<i64> = self
                .conn
                .query_row("select min(ts) from queue", [], |row| row.get(0))
                .map_err(storage)?;
            return Ok(Due::NextAt(next.and_then(ms_to_datetime)));
        };
        let ready = (message.ready_at.timestamp_millis(), &id);
        execute(
            self.conn,
            "delete from queue where ts = ?1 and id = ?2",
            ready,
        )?;
        let deadline_ms = hold.deadline().timestamp_millis();
        insert_queue_row(self.conn, "queue_running", deadline_ms, &id, &message)?;
        Ok(Due::Message(id, message))
    }

    fn delete_running(&mut self, id: &String) -> Result<(), KvError> {
        execute(self.conn, "delete from queue_running where id = ?1", [id])
    }

    /// `queue_running` does not keep a message's ready time: it comes back as its deadline,
    /// so a message given back untouched is due at once.
    fn running(&mut self, id: &String) -> Result<Option<QueuedMessage>, KvError> {
        let row = first_row(self.conn, SELECT_RUNNING, params![id], queue_row)?;
        Ok(row.map(|(_, message)| message))
    }

    fn insert_ready(&mut self, id: &String, message: &QueuedMessage) -> Result<(), KvError> {
        let ready_ms = message.ready_at.timestamp_millis();
        insert_queue_row(self.conn, "queue", ready_ms, id, message)
    }

    fn write_dead_letters(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), KvError> {
        commit_write(self.conn, write, now, effects, self.log.as_deref_mut()).map(|_| ())
    }
}

/// Requeues (or dead-letters) running messages whose deadline passed and that no live consumer
/// in this process holds. With `log`, their dead letters add change records to it.
pub(crate) fn requeue_dead(
    conn: &Connection,
    now: DateTime<Utc>,
    registry_key: &Path,
    effects: &mut Effects,
    log: Option<&mut PendingRecords>,
) -> Result<(), KvError> {
    let dead: Vec<String> = {
        let mut stmt = conn.prepare_cached(SELECT_DEAD).map_err(storage)?;
        let ids = stmt.query_map([now.timestamp_millis()], |row| row.get(0));
        ids.and_then(Iterator::collect).map_err(storage)?
    };
    let alive = held_registry()
        .get(registry_key)
        .cloned()
        .unwrap_or_default();
    let abandoned = dead.into_iter().filter(|id| !alive.contains(id));
    fail_deliveries(&mut SqlQueue { conn, log }, abandoned, now, effects)
}

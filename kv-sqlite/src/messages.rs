//! Deno's queue tables, as the writer changes them inside its group transaction.
//!
//! A message is in `queue` (waiting, by ready time `ts`) or in `queue_running` (handed to a
//! consumer, with a `deadline` its writer renews while the consumer lives). Taking one moves it
//! from `queue` to `queue_running`; settling it deletes the running row and stores what kv-proto's
//! rule says ([`Settlement`]): nothing, the message back in `queue`, or its dead letters.
//!
//! Several handles, in this process and in others, may share a file. A running row whose
//! deadline passed belongs to a dead consumer, unless a live consumer of this process holds it
//! (its writer may simply not have renewed it yet): the process-wide registry of held ids, per
//! file, tells them apart.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use kv_proto::queue::{DeliveryOutcome, Settlement, delivery_deadline};
use kv_proto::{Effects, KvError};
use rusqlite::{Connection, params};

use crate::store::{QueueRow, commit_write, insert_queue_row, storage};

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
    "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running
    where deadline <= ?1 order by deadline limit 100";
const SELECT_RUNNING: &str =
    "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running
    where id = ?1";

/// What a take found: the message taken (its id and payload), or else when the next one is due
/// (ms), if any.
pub(crate) type Found = Result<(String, Vec<u8>), Option<i64>>;

/// The deadline of a delivery handed out (or renewed) at `now`, as stored.
pub(crate) fn deadline_ms(now: DateTime<Utc>) -> i64 {
    delivery_deadline(now).timestamp_millis()
}

/// Takes the first message due at `now` (after requeueing dead consumers' messages).
pub(crate) fn take(
    conn: &Connection,
    now: DateTime<Utc>,
    registry_key: &Path,
    effects: &mut Effects,
) -> Result<Found, KvError> {
    requeue_dead(conn, now, registry_key, effects)?;
    let Some(row) = query_row(conn, SELECT_DUE, params![now.timestamp_millis()])? else {
        let next: Option<i64> = conn
            .query_row("select min(ts) from queue", [], |row| row.get(0))
            .map_err(storage)?;
        return Ok(Err(next));
    };
    conn.execute(
        "delete from queue where ts = ?1 and id = ?2",
        params![row.time_ms, row.id],
    )
    .map_err(storage)?;
    let message = row.to_message()?;
    insert_queue_row(conn, "queue_running", deadline_ms(now), &row.id, &message)?;
    Ok(Ok((row.id, row.data)))
}

/// Requeues (or dead-letters) running messages whose deadline passed and that no live consumer
/// in this process holds.
pub(crate) fn requeue_dead(
    conn: &Connection,
    now: DateTime<Utc>,
    registry_key: &Path,
    effects: &mut Effects,
) -> Result<(), KvError> {
    let dead: Vec<QueueRow> = {
        let mut stmt = conn.prepare_cached(SELECT_DEAD).map_err(storage)?;
        let mut rows = stmt.query([now.timestamp_millis()]).map_err(storage)?;
        let mut dead = Vec::new();
        while let Some(row) = rows.next().map_err(storage)? {
            dead.push(QueueRow::from_row(row)?);
        }
        dead
    };
    let alive: HashSet<String> = held_registry()
        .get(registry_key)
        .cloned()
        .unwrap_or_default();
    for row in dead.into_iter().filter(|row| !alive.contains(&row.id)) {
        conn.execute(
            "delete from queue_running where deadline = ?1 and id = ?2",
            params![row.time_ms, row.id],
        )
        .map_err(storage)?;
        let settlement = Settlement::of(&row.to_message()?, DeliveryOutcome::Failed, now);
        apply(conn, &row, settlement, now, effects)?;
    }
    Ok(())
}

/// Ends the delivery of running message `id` as `outcome` says. An undelivered message goes back
/// to `queue` due now (`queue_running` does not keep its ready time), its schedule untouched.
pub(crate) fn finish(
    conn: &Connection,
    id: &str,
    outcome: DeliveryOutcome,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), KvError> {
    // Already settled (or requeued by another process after our deadline passed): nothing to do.
    let Some(row) = query_row(conn, SELECT_RUNNING, params![id])? else {
        return Ok(());
    };
    conn.execute("delete from queue_running where id = ?1", [id])
        .map_err(storage)?;
    let settlement = Settlement::of(&row.to_message()?, outcome, now);
    apply(conn, &row, settlement, now, effects)
}

/// Stores what ending a delivery leaves: the message back in `queue`, or its dead letters.
fn apply(
    conn: &Connection,
    row: &QueueRow,
    settlement: Settlement,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), KvError> {
    match settlement {
        Settlement::Forget => {}
        Settlement::Requeue(next) => {
            let ready_ms = next.ready_at.timestamp_millis();
            insert_queue_row(conn, "queue", ready_ms, &row.id, &next)?;
            effects.queue = true;
        }
        Settlement::DeadLetter(write) => {
            commit_write(conn, &write, now, effects)?;
        }
    }
    Ok(())
}

/// The first row `sql` selects (as `<time>, id, data, backoff_schedule, keys_if_undelivered`).
fn query_row(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Option<QueueRow>, KvError> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let mut rows = stmt.query(params).map_err(storage)?;
    match rows.next().map_err(storage)? {
        Some(row) => QueueRow::from_row(row).map(Some),
        None => Ok(None),
    }
}

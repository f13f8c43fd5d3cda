//! The writer thread: every change to the file goes through it.
//!
//! Commands queue up on a channel. The thread takes everything waiting, runs it in one
//! `BEGIN IMMEDIATE` transaction — each command in its own savepoint, so one failed write does not
//! disturb the others — and commits once: one fsync for the whole group, with no timer to wait
//! for. Replies go out after the commit, so an acknowledged write is on disk.
//!
//! Between commands it notices other processes' commits (`PRAGMA data_version` changes), renews
//! the deadlines of the messages its consumers hold, and sweeps expired entries and messages
//! whose consumer died.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use kv_proto::next_group;
use kv_proto::queue::{
    Delivery, DeliveryEngine, DeliveryFailure, DeliveryOutcome, MESSAGE_DEADLINE,
    MESSAGE_KEEPALIVE_INTERVAL, Taken, after_delivery, after_failed_delivery,
};
use kv_proto::{
    ChangeSignal, ChangedKeys, Clock, CommitResult, KvError, ValidatedWrite, Versionstamp,
    WriteOutcome, apply_atomic_write, ms_to_datetime,
};
use rusqlite::{Connection, ErrorCode, params};
use tokio::sync::{oneshot, watch};

use crate::store::{QueueRow, SqlTransaction, insert_queue_row, open_connection, storage};
use crate::{Durability, SqliteError, schema};
use kv_proto::run_blocking;

/// How often the thread looks for other processes' commits when idle.
const CHANGE_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often expired entries and dead consumers' messages are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// The most commands one transaction groups.
const MAX_GROUP: usize = 512;
/// Attempts to take the write lock from another process before giving up.
const LOCK_ATTEMPTS: u32 = 40;

/// Message ids held by live consumers in this process, per database file: sweeps never requeue
/// them, whichever handle runs the sweep.
static HELD: LazyLock<Mutex<HashMap<PathBuf, HashSet<String>>>> = LazyLock::new(Default::default);

fn held_registry() -> std::sync::MutexGuard<'static, HashMap<PathBuf, HashSet<String>>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a dequeue attempt found in the file (inside the group, before its commit).
enum Found {
    /// A message moved to `queue_running` for this handle.
    Message { id: String, payload: Vec<u8> },
    /// Nothing due; the next message is due at this time (ms), if any.
    NextAt(Option<i64>),
}

impl Found {
    /// The answer for the consumer, once the group has committed: a taken message becomes a
    /// [`Delivery`] here, on the writer thread, so an answer nobody receives (the dequeue was
    /// dropped) is dropped as a guard that gives the message back.
    fn into_taken(self, engine: Arc<Writer>) -> Taken<Writer> {
        match self {
            Found::Message { id, payload } => Taken::Message(Delivery::new(engine, id, payload)),
            Found::NextAt(next) => Taken::NextAt(next.and_then(ms_to_datetime)),
        }
    }
}

enum Command {
    Write {
        write: ValidatedWrite,
        now: DateTime<Utc>,
        reply: oneshot::Sender<Result<Option<CommitResult>, KvError>>,
    },
    Take {
        now: DateTime<Utc>,
        /// Settles the delivery the take creates.
        engine: Arc<Writer>,
        reply: oneshot::Sender<Result<Taken<Writer>, KvError>>,
    },
    Finish {
        id: String,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
        reply: Option<oneshot::Sender<Result<(), KvError>>>,
    },
    Shutdown {
        now: DateTime<Utc>,
        reply: Option<oneshot::Sender<Result<(), KvError>>>,
    },
}

/// The handle's side of the writer thread.
pub(crate) struct Writer {
    commands: mpsc::Sender<Command>,
    queue_changes: Arc<watch::Sender<u64>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    clock: Arc<dyn Clock>,
}

impl Writer {
    /// Opens the write connection, migrates the file, requeues dead consumers' messages and
    /// starts the thread.
    pub(crate) fn start(
        path: &Path,
        durability: Durability,
        clock: Arc<dyn Clock>,
        signal: Arc<ChangeSignal>,
    ) -> Result<Self, KvError> {
        // Recognise an existing file through a read-only look first: a foreign file, or one with
        // a newer layout, is refused before the writable open switches it to WAL.
        if std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0) {
            schema::inspect(&open_connection(path, true, durability)?)?;
        }
        let mut conn = open_connection(path, false, durability)?;
        schema::migrate(&mut conn)?;
        let registry_key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let queue_changes = Arc::new(watch::channel(0u64).0);
        let mut thread = WriterThread {
            last_data_version: pragma_data_version(&conn)?,
            conn,
            clock: clock.clone(),
            signal,
            queue_changes: queue_changes.clone(),
            held: HashSet::new(),
            registry_key,
            last_keepalive: Instant::now(),
            last_sweep: Instant::now(),
        };
        thread.sweep()?;
        let (commands, inbox) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("kv-sqlite-writer".into())
            .spawn(move || thread.run(inbox))
            .map_err(SqliteError::Thread)?;
        Ok(Writer {
            commands,
            queue_changes,
            thread: Mutex::new(Some(handle)),
            clock,
        })
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, KvError>>) -> Command,
    ) -> Result<T, KvError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(make(reply))
            .map_err(|_| KvError::Closed)?;
        answer.await.map_err(|_| KvError::Closed)?
    }

    pub(crate) async fn write(
        &self,
        write: ValidatedWrite,
    ) -> Result<Option<CommitResult>, KvError> {
        let now = self.clock.now();
        self.ask(|reply| Command::Write { write, now, reply }).await
    }

    /// Takes the first message due at `now`, guarded by a [`Delivery`] settled through this
    /// writer.
    pub(crate) async fn take_message(
        self: &Arc<Self>,
        now: DateTime<Utc>,
    ) -> Result<Taken<Writer>, KvError> {
        let engine = self.clone();
        self.ask(|reply| Command::Take { now, engine, reply }).await
    }

    pub(crate) fn subscribe_queue(&self) -> watch::Receiver<u64> {
        self.queue_changes.subscribe()
    }

    /// Stops the thread after it has settled this handle's unfinished messages (as failures).
    pub(crate) async fn shut_down(&self) -> Result<(), KvError> {
        let now = self.clock.now();
        let result = self
            .ask(|reply| Command::Shutdown {
                now,
                reply: Some(reply),
            })
            .await;
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // The thread has answered the shutdown and is only closing its connection.
            let _ = run_blocking(move || {
                thread.join().map_err(|_| {
                    KvError::storage(std::io::Error::other(
                        "the kv-sqlite writer thread panicked",
                    ))
                })
            })
            .await;
        }
        match result {
            Err(KvError::Closed) => Ok(()),
            other => other,
        }
    }

    pub(crate) fn shut_down_in_background(&self) {
        let now = self.clock.now();
        let _ = self.commands.send(Command::Shutdown { now, reply: None });
    }
}

/// The writer settles the deliveries it hands out; the ticket is the message id.
#[async_trait]
impl DeliveryEngine for Writer {
    type Ticket = String;

    async fn settle(&self, id: String, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let now = self.clock.now();
        self.ask(|reply| Command::Finish {
            id,
            outcome,
            now,
            reply: Some(reply),
        })
        .await
    }

    fn settle_in_background(&self, id: String, outcome: DeliveryOutcome) {
        let now = self.clock.now();
        // A closed writer has given up every message it held (failed at shutdown): nothing to do.
        let _ = self.commands.send(Command::Finish {
            id,
            outcome,
            now,
            reply: None,
        });
    }
}

/// Which waiters a committed group must wake.
#[derive(Debug, Default, Clone)]
struct Effects {
    /// The entries written: their watches wake.
    changed: ChangedKeys,
    queue: bool,
}

/// A reply to send once the group's fate is known.
enum Pending {
    Write(
        oneshot::Sender<Result<Option<CommitResult>, KvError>>,
        Result<Option<CommitResult>, KvError>,
    ),
    Take(
        oneshot::Sender<Result<Taken<Writer>, KvError>>,
        Result<Found, KvError>,
        Arc<Writer>,
    ),
    Unit(
        Option<oneshot::Sender<Result<(), KvError>>>,
        Result<(), KvError>,
    ),
}

struct WriterThread {
    conn: Connection,
    clock: Arc<dyn Clock>,
    signal: Arc<ChangeSignal>,
    queue_changes: Arc<watch::Sender<u64>>,
    /// Message ids this handle's consumers hold.
    held: HashSet<String>,
    registry_key: PathBuf,
    last_data_version: i64,
    last_keepalive: Instant,
    last_sweep: Instant,
}

impl WriterThread {
    fn run(mut self, inbox: mpsc::Receiver<Command>) {
        loop {
            match next_group(&inbox, CHANGE_POLL_INTERVAL, MAX_GROUP) {
                Ok(group) => {
                    if self.run_group(group) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let now = self.clock.now();
                    self.run_group(vec![Command::Shutdown { now, reply: None }]);
                    return;
                }
            }
            self.between_groups();
        }
    }

    /// Periodic work: other processes' commits, keep-alive, sweeps. Failures here are retried on
    /// the next round; nothing waits on them.
    fn between_groups(&mut self) {
        if let Ok(version) = pragma_data_version(&self.conn)
            && version != self.last_data_version
        {
            self.last_data_version = version;
            // Another process committed; which keys it wrote is unknown.
            self.signal.notify_all();
            self.queue_changes.send_modify(|n| *n += 1);
        }
        if !self.held.is_empty() && self.last_keepalive.elapsed() >= MESSAGE_KEEPALIVE_INTERVAL {
            self.last_keepalive = Instant::now();
            let _ = self.renew_deadlines();
        }
        if self.last_sweep.elapsed() >= SWEEP_INTERVAL {
            self.last_sweep = Instant::now();
            let _ = self.sweep();
        }
    }

    /// Runs a group of commands in one transaction; returns whether the thread must stop.
    fn run_group(&mut self, group: Vec<Command>) -> bool {
        let mut pending = Vec::with_capacity(group.len());
        let mut effects = Effects::default();
        let mut newly_held = Vec::new();
        let mut released = Vec::new();
        let mut stop = false;

        let tx = match WriteTxn::begin(&self.conn) {
            Ok(tx) => tx,
            Err(err) => {
                for command in group {
                    fail_command(command, err.clone());
                }
                return false;
            }
        };
        for command in group {
            match command {
                Command::Write { write, now, reply } => {
                    let result =
                        in_savepoint(&tx, |conn| commit_write(conn, &write, now, &mut effects));
                    pending.push(Pending::Write(reply, result));
                }
                Command::Take { now, engine, reply } => {
                    let registry_key = &self.registry_key;
                    let result = in_savepoint(&tx, |conn| {
                        take_message(conn, now, registry_key, &mut effects)
                    });
                    if let Ok(Found::Message { id, .. }) = &result {
                        newly_held.push(id.clone());
                    }
                    pending.push(Pending::Take(reply, result, engine));
                }
                Command::Finish {
                    id,
                    outcome,
                    now,
                    reply,
                } => {
                    let result = in_savepoint(&tx, |conn| {
                        finish_message(conn, &id, outcome, now, &mut effects)
                    });
                    released.push(id);
                    pending.push(Pending::Unit(reply, result));
                }
                Command::Shutdown { now, reply } => {
                    let own: Vec<String> = self.held.iter().chain(&newly_held).cloned().collect();
                    let result = in_savepoint(&tx, |conn| {
                        for id in &own {
                            finish_message(conn, id, DeliveryOutcome::Failed, now, &mut effects)?;
                        }
                        Ok(())
                    });
                    released.extend(own);
                    pending.push(Pending::Unit(reply, result));
                    stop = true;
                }
            }
        }
        let committed = tx.commit();
        if committed.is_ok() {
            let mut registry = held_registry();
            let file_held = registry.entry(self.registry_key.clone()).or_default();
            for id in newly_held {
                file_held.insert(id.clone());
                self.held.insert(id);
            }
            for id in released {
                file_held.remove(&id);
                self.held.remove(&id);
            }
        }
        for reply in pending {
            answer(reply, committed.as_ref().err());
        }
        if committed.is_ok() {
            self.signal.notify_changed(&effects.changed);
            if effects.queue {
                self.queue_changes.send_modify(|n| *n += 1);
            }
        }
        stop
    }

    /// Pushes the deadlines of this handle's held messages forward.
    fn renew_deadlines(&mut self) -> Result<(), KvError> {
        let deadline = deadline_ms(self.clock.now());
        let tx = WriteTxn::begin(&self.conn)?;
        for id in &self.held {
            tx.execute(
                "update queue_running set deadline = ?1 where id = ?2",
                params![deadline, id],
            )
            .map_err(storage)?;
        }
        tx.commit()
    }

    /// Deletes expired entries and requeues messages whose consumer died (deadline passed and not
    /// held by a live consumer in this process).
    fn sweep(&mut self) -> Result<(), KvError> {
        let now = self.clock.now();
        let mut effects = Effects::default();
        let tx = WriteTxn::begin(&self.conn)?;
        tx.execute(
            "delete from kv where expiration_ms >= 0 and expiration_ms <= ?1",
            [now.timestamp_millis()],
        )
        .map_err(storage)?;
        requeue_dead_messages(&tx, now, &self.registry_key, &mut effects)?;
        tx.commit()?;
        if effects.queue {
            self.queue_changes.send_modify(|n| *n += 1);
        }
        self.signal.notify_changed(&effects.changed);
        Ok(())
    }
}

fn pragma_data_version(conn: &Connection) -> Result<i64, KvError> {
    conn.query_row("pragma data_version", [], |row| row.get(0))
        .map_err(storage)
}

fn deadline_ms(now: DateTime<Utc>) -> i64 {
    (now + TimeDelta::from_std(MESSAGE_DEADLINE).unwrap_or(TimeDelta::seconds(5)))
        .timestamp_millis()
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked)
}

/// An open write transaction; rolled back on drop unless committed.
struct WriteTxn<'a> {
    conn: &'a Connection,
    open: bool,
}

impl<'a> WriteTxn<'a> {
    /// Takes the write lock, retrying with back-off while another process holds it (on top of
    /// SQLite's own busy wait), so "database is locked" does not reach the caller.
    fn begin(conn: &'a Connection) -> Result<Self, KvError> {
        let mut delay = Duration::from_millis(2);
        let mut attempt = 1;
        loop {
            match conn.execute_batch("begin immediate") {
                Ok(()) => return Ok(WriteTxn { conn, open: true }),
                Err(err) if is_busy(&err) && attempt < LOCK_ATTEMPTS => {
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(100));
                    attempt += 1;
                }
                Err(err) => return Err(storage(err)),
            }
        }
    }

    fn commit(mut self) -> Result<(), KvError> {
        self.open = false;
        match self.conn.execute_batch("commit") {
            Ok(()) => Ok(()),
            Err(err) => {
                let _ = self.conn.execute_batch("rollback");
                Err(storage(err))
            }
        }
    }
}

impl std::ops::Deref for WriteTxn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTxn<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.execute_batch("rollback");
        }
    }
}

/// Runs `work` in a savepoint: kept if it returns `Ok` with something to keep, rolled back
/// otherwise (a failed check, or an error).
fn in_savepoint<T: Keep>(
    tx: &WriteTxn<'_>,
    work: impl FnOnce(&Connection) -> Result<T, KvError>,
) -> Result<T, KvError> {
    tx.execute_batch("savepoint command").map_err(storage)?;
    let result = work(tx);
    let keep = matches!(&result, Ok(value) if value.keep());
    let end = if keep {
        "release command"
    } else {
        "rollback to command; release command"
    };
    tx.execute_batch(end).map_err(storage)?;
    result
}

/// Whether a savepoint's work is kept.
trait Keep {
    fn keep(&self) -> bool {
        true
    }
}
impl Keep for () {}
impl Keep for Found {}
impl Keep for Option<CommitResult> {
    fn keep(&self) -> bool {
        self.is_some()
    }
}

/// Bumps the file's version and returns the new one.
fn next_version(conn: &Connection) -> Result<Versionstamp, KvError> {
    let version: i64 = conn
        .query_row(
            "update data_version set version = version + 1 where k = 0 returning version",
            [],
            |row| row.get(0),
        )
        .map_err(storage)?;
    let version = u64::try_from(version).map_err(|_| KvError::Corrupt {
        message: format!("data_version {version}"),
    })?;
    Ok(Versionstamp::from_version(version, 0))
}

fn commit_write(
    conn: &Connection,
    write: &ValidatedWrite,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<Option<CommitResult>, KvError> {
    let versionstamp = next_version(conn)?;
    match apply_atomic_write(&mut SqlTransaction { conn }, write, versionstamp, now)? {
        WriteOutcome::CheckFailed => Ok(None),
        WriteOutcome::Committed {
            changed_keys,
            enqueued,
        } => {
            effects.changed.extend(changed_keys);
            effects.queue |= enqueued;
            Ok(Some(CommitResult { versionstamp }))
        }
    }
}

const SELECT_DUE: &str = "select ts, id, data, backoff_schedule, keys_if_undelivered from queue
    where ts <= ?1 order by ts limit 1";
const SELECT_DEAD: &str =
    "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running
    where deadline <= ?1 order by deadline limit 100";
const SELECT_RUNNING: &str =
    "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running
    where id = ?1";

fn take_message(
    conn: &Connection,
    now: DateTime<Utc>,
    registry_key: &Path,
    effects: &mut Effects,
) -> Result<Found, KvError> {
    requeue_dead_messages(conn, now, registry_key, effects)?;
    let due = {
        let mut stmt = conn.prepare_cached(SELECT_DUE).map_err(storage)?;
        let mut rows = stmt.query([now.timestamp_millis()]).map_err(storage)?;
        match rows.next().map_err(storage)? {
            Some(row) => Some(QueueRow::from_row(row)?),
            None => None,
        }
    };
    let Some(row) = due else {
        let next: Option<i64> = conn
            .query_row("select min(ts) from queue", [], |row| row.get(0))
            .map_err(storage)?;
        return Ok(Found::NextAt(next));
    };
    conn.execute(
        "delete from queue where ts = ?1 and id = ?2",
        params![row.time_ms, row.id],
    )
    .map_err(storage)?;
    let message = row.to_message()?;
    insert_queue_row(conn, "queue_running", deadline_ms(now), &row.id, &message)?;
    Ok(Found::Message {
        id: row.id,
        payload: row.data,
    })
}

/// Requeues (or dead-letters) running messages whose deadline passed and that no live consumer
/// in this process holds.
fn requeue_dead_messages(
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
        fail_delivery(conn, &row, now, effects)?;
    }
    Ok(())
}

/// Ends the delivery of running message `id` as `outcome` says (see
/// [`kv_proto::queue::after_delivery`]). An undelivered message goes back to `queue` due now
/// (`queue_running` does not keep its ready time), with its schedule untouched.
fn finish_message(
    conn: &Connection,
    id: &str,
    outcome: DeliveryOutcome,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), KvError> {
    let running = {
        let mut stmt = conn.prepare_cached(SELECT_RUNNING).map_err(storage)?;
        let mut rows = stmt.query([id]).map_err(storage)?;
        match rows.next().map_err(storage)? {
            Some(row) => Some(QueueRow::from_row(row)?),
            None => None,
        }
    };
    // Already settled (or requeued by another process after our deadline passed): nothing to do.
    let Some(row) = running else { return Ok(()) };
    conn.execute("delete from queue_running where id = ?1", [id])
        .map_err(storage)?;
    match after_delivery(&row.to_message()?, outcome, now) {
        Some(failure) => apply_failure(conn, &row, failure, now, effects),
        None => Ok(()),
    }
}

/// Applies kv-proto's retry rule to a message whose delivery failed.
fn fail_delivery(
    conn: &Connection,
    row: &QueueRow,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), KvError> {
    apply_failure(
        conn,
        row,
        after_failed_delivery(&row.to_message()?, now),
        now,
        effects,
    )
}

/// Requeues the message as `failure` says, or writes its dead letters.
fn apply_failure(
    conn: &Connection,
    row: &QueueRow,
    failure: DeliveryFailure,
    now: DateTime<Utc>,
    effects: &mut Effects,
) -> Result<(), KvError> {
    match failure {
        DeliveryFailure::Retry(next) => {
            insert_queue_row(
                conn,
                "queue",
                next.ready_at.timestamp_millis(),
                &row.id,
                &next,
            )?;
            effects.queue = true;
        }
        DeliveryFailure::DeadLetter { write } if write.mutations.is_empty() => {}
        DeliveryFailure::DeadLetter { write } => {
            commit_write(conn, &write, now, effects)?;
        }
    }
    Ok(())
}

fn answer(pending: Pending, commit_error: Option<&KvError>) {
    match (pending, commit_error) {
        (Pending::Write(reply, _), Some(err)) => drop(reply.send(Err(err.clone()))),
        (Pending::Write(reply, result), None) => drop(reply.send(result)),
        (Pending::Take(reply, _, _), Some(err)) => drop(reply.send(Err(err.clone()))),
        // A dequeue dropped meanwhile does not receive its delivery: dropped here, the guard
        // gives the message back.
        (Pending::Take(reply, result, engine), None) => {
            drop(reply.send(result.map(|found| found.into_taken(engine))));
        }
        (Pending::Unit(Some(reply), _), Some(err)) => drop(reply.send(Err(err.clone()))),
        (Pending::Unit(Some(reply), result), None) => drop(reply.send(result)),
        (Pending::Unit(None, _), _) => {}
    }
}

fn fail_command(command: Command, err: KvError) {
    match command {
        Command::Write { reply, .. } => drop(reply.send(Err(err))),
        Command::Take { reply, .. } => drop(reply.send(Err(err))),
        Command::Finish {
            reply: Some(reply), ..
        }
        | Command::Shutdown {
            reply: Some(reply), ..
        } => drop(reply.send(Err(err))),
        Command::Finish { reply: None, .. } | Command::Shutdown { reply: None, .. } => {}
    }
}

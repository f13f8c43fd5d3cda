//! The writer: every change to the file goes through the kit's group committer
//! ([`kv_proto::committer`]), on this handle's write connection.
//!
//! A write that finds the committer idle is committed by its caller's thread (in place on a
//! multi-thread tokio runtime: no hop to a writer thread); writes that arrive meanwhile wait and
//! form the next group. A group runs in one `BEGIN IMMEDIATE` transaction — each command in its
//! own savepoint, so one failed write does not disturb the others — and commits once: one fsync
//! for the whole group, with no timer to wait for. Replies go out after the commit, so an
//! acknowledged write is on disk.
//!
//! Queue consumers dequeue through the kit's loop ([`Committer::next_delivery`]): the message is
//! taken inside a group and handed out as a [`kv_proto::queue::Delivery`] settled through the
//! writer, which renews its deadline while it is held.
//!
//! Between groups the committer's standby thread notices other processes' commits (`PRAGMA
//! data_version` changes), renews the deadlines of the messages this handle's consumers hold, and
//! sweeps expired entries and messages whose consumer died.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kv_proto::committer::{self, Change, Committer, GroupRunner};
use kv_proto::interval::Every;
use kv_proto::isolated::{IsolatingTxn, run_isolated};
use kv_proto::queue::{
    self as kit, DeliveryEngine, DeliveryOutcome, Due, MESSAGE_KEEPALIVE_INTERVAL,
    delivery_deadline,
};
use kv_proto::{Clock, CommitResult, Effects, KvError, Notifier, ValidatedWrite};
use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior, params};

use crate::messages::{self, SqlQueue, held_registry};
use crate::store::{commit_write, open_connection, storage};
use crate::{Durability, SqliteError, schema};

/// How often the standby thread looks for other processes' commits.
const CHANGE_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often expired entries and dead consumers' messages are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// Attempts to take the write lock from another process before giving up.
const LOCK_ATTEMPTS: u32 = 40;

/// One change to the file, run inside a group: the kit's changes (a write, a take, a
/// settlement); this handle's deliveries are settled through its committer ([`SettleAtNow`]),
/// with the message id as their ticket.
type Command = Change<dyn DeliveryEngine<Ticket = String>>;

/// A handle's writer: the kit's committer over its write connection.
pub(crate) type Writer = Committer<WriteConnection>;

/// Opens the write connection, migrates the file, requeues dead consumers' messages and starts
/// the committer. Commits wake `notifier`'s watchers and consumers.
pub(crate) fn start(
    path: &Path,
    durability: Durability,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
) -> Result<Writer, KvError> {
    // Recognise an existing file through a read-only look first: a foreign file, or one with a
    // newer layout, is refused before the writable open switches it to WAL.
    if std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0) {
        schema::inspect(&open_connection(path, true, durability)?)?;
    }
    let mut conn = open_connection(path, false, durability)?;
    schema::migrate(&mut conn)?;
    let mut connection = WriteConnection {
        last_data_version: pragma_data_version(&conn)?,
        conn,
        clock,
        notifier,
        held: HashSet::new(),
        registry_key: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        keepalive: Every::new(MESSAGE_KEEPALIVE_INTERVAL),
        sweep: Every::new(SWEEP_INTERVAL),
    };
    connection.sweep()?;
    Ok(Committer::start(connection, "kv-sqlite-writer").map_err(SqliteError::Thread)?)
}

/// The write connection and what lives from one group to the next: the engine's
/// [`GroupRunner`].
pub(crate) struct WriteConnection {
    conn: Connection,
    clock: Arc<dyn Clock>,
    notifier: Arc<Notifier>,
    /// Message ids this handle's consumers hold.
    held: HashSet<String>,
    registry_key: PathBuf,
    last_data_version: i64,
    /// When held messages' deadlines are renewed next.
    keepalive: Every,
    /// When expired entries and dead consumers' messages are swept next.
    sweep: Every,
}

impl GroupRunner for WriteConnection {
    type Command = Command;

    /// Runs a group of commands in one transaction, each in its own savepoint (the kit's
    /// [`run_isolated`]).
    fn run_group(&mut self, group: Vec<Command>) {
        let tx = match begin_write(&self.conn) {
            Ok(tx) => tx,
            Err(err) => return committer::reject_all(group, &err),
        };
        let registry_key = &self.registry_key;
        let run = run_isolated(
            &mut SqlGroup {
                tx: &tx,
                registry_key,
            },
            group,
        );
        // A group in which every write failed its check changed nothing: rolled back, it costs
        // no write to the log and no fsync.
        let committed = if run.kept == 0 {
            tx.rollback().map_err(storage)
        } else {
            tx.commit().map_err(storage)
        };
        let notifier = self.notifier.clone();
        run.finish(&committed, &notifier, |taken, settled| {
            self.record_held(taken, settled);
        });
    }

    fn idle_timeout(&self) -> Duration {
        CHANGE_POLL_INTERVAL
    }

    /// Periodic work: other processes' commits, keep-alive, sweeps. Failures here are retried on
    /// the next round; nothing waits on them.
    fn idle(&mut self) {
        if let Ok(version) = pragma_data_version(&self.conn)
            && version != self.last_data_version
        {
            self.last_data_version = version;
            // Another process committed; which keys it wrote is unknown.
            self.notifier.notify_everything();
        }
        if !self.held.is_empty() && self.keepalive.due() {
            let _ = self.renew_deadlines();
        }
        if self.sweep.due() {
            let _ = self.sweep();
        }
    }

    /// The handle closes: the messages its consumers still hold are failed deliveries.
    fn close(&mut self) -> Result<(), KvError> {
        let own: Vec<String> = self.held.iter().cloned().collect();
        if own.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let mut effects = Effects::default();
        let failed = begin_write(&self.conn).and_then(|tx| {
            let mut tables = SqlQueue { conn: &tx };
            kit::fail_deliveries(&mut tables, own.iter().cloned(), now, &mut effects)?;
            tx.commit().map_err(storage)
        });
        // Whether or not the failures were stored, nobody here holds these messages any more: a
        // sweep requeues them once their deadline passes.
        self.record_held(Vec::new(), own);
        if failed.is_ok() {
            self.notifier.notify(&effects);
        }
        failed
    }
}

impl WriteConnection {
    /// Records, once committed, which messages this handle's consumers now hold.
    fn record_held(&mut self, taken: Vec<String>, released: Vec<String>) {
        let mut registry = held_registry();
        let file_held = registry.entry(self.registry_key.clone()).or_default();
        for id in taken {
            file_held.insert(id.clone());
            self.held.insert(id);
        }
        for id in released {
            file_held.remove(&id);
            self.held.remove(&id);
        }
    }

    /// Pushes the deadlines of this handle's held messages forward.
    fn renew_deadlines(&mut self) -> Result<(), KvError> {
        let deadline = delivery_deadline(self.clock.now()).timestamp_millis();
        let tx = begin_write(&self.conn)?;
        for id in &self.held {
            tx.execute(
                "update queue_running set deadline = ?1 where id = ?2",
                params![deadline, id],
            )
            .map_err(storage)?;
        }
        tx.commit().map_err(storage)
    }

    /// Deletes expired entries and requeues messages whose consumer died (deadline passed and not
    /// held by a live consumer in this process).
    fn sweep(&mut self) -> Result<(), KvError> {
        let now = self.clock.now();
        let mut effects = Effects::default();
        let tx = begin_write(&self.conn)?;
        tx.execute(
            "delete from kv where expiration_ms >= 0 and expiration_ms <= ?1",
            [now.timestamp_millis()],
        )
        .map_err(storage)?;
        messages::requeue_dead(&tx, now, &self.registry_key, &mut effects)?;
        tx.commit().map_err(storage)?;
        self.notifier.notify(&effects);
        Ok(())
    }
}

fn pragma_data_version(conn: &Connection) -> Result<i64, KvError> {
    conn.query_row("pragma data_version", [], |row| row.get(0))
        .map_err(storage)
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked)
}

/// Opens the group's write transaction (`BEGIN IMMEDIATE`: the write lock is taken at once),
/// retrying with back-off while another process holds the lock (on top of SQLite's own busy
/// wait), so "database is locked" does not reach the caller. Dropped without a commit, the
/// transaction rolls back; a commit that fails rolls back too.
fn begin_write(conn: &Connection) -> Result<Transaction<'_>, KvError> {
    let mut delay = Duration::from_millis(2);
    let mut attempt = 1;
    loop {
        match Transaction::new_unchecked(conn, TransactionBehavior::Immediate) {
            Err(err) if is_busy(&err) && attempt < LOCK_ATTEMPTS => {
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_millis(100));
                attempt += 1;
            }
            begun => return begun.map_err(storage),
        }
    }
}

/// The group's transaction, isolating each command in a savepoint: the kit's [`IsolatingTxn`].
struct SqlGroup<'t, 'c> {
    tx: &'t Transaction<'c>,
    /// The file, for the held-message registry.
    registry_key: &'t Path,
}

impl IsolatingTxn for SqlGroup<'_, '_> {
    type Id = String;

    fn begin_command(&mut self) -> Result<(), KvError> {
        self.tx.execute_batch("savepoint command").map_err(storage)
    }

    fn end_command(&mut self, keep: bool) -> Result<(), KvError> {
        let end = if keep {
            "release command"
        } else {
            "rollback to command; release command"
        };
        self.tx.execute_batch(end).map_err(storage)
    }

    fn write(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<Option<CommitResult>, KvError> {
        commit_write(self.tx, write, now, effects)
    }

    /// Requeues dead consumers' messages first, so they are due again.
    fn take(&mut self, now: DateTime<Utc>, effects: &mut Effects) -> Result<Due<String>, KvError> {
        messages::requeue_dead(self.tx, now, self.registry_key, effects)?;
        kit::take_due(&mut SqlQueue { conn: self.tx }, now)
    }

    fn settle(
        &mut self,
        id: &String,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), KvError> {
        kit::settle(&mut SqlQueue { conn: self.tx }, id, outcome, now, effects)
    }
}

//! The writer: every change to the file goes through the kit's group committer
//! ([`open_deno_kv_engine_kit::committer`]), on this handle's write connection.
//!
//! A write that finds the committer idle is committed by its caller's thread (in place on a
//! multi-thread tokio runtime: no hop to a writer thread); writes that arrive meanwhile wait and
//! form the next group. A group runs in one `BEGIN IMMEDIATE` transaction — each command in its
//! own savepoint, so one failed write does not disturb the others — and commits once: one fsync
//! for the whole group, with no timer to wait for. Replies go out after the commit, so an
//! acknowledged write is on disk.
//!
//! Queue consumers dequeue through the kit's loop ([`Committer::next_delivery`]): the message is
//! taken inside a group and handed out as a [`open_deno_kv_engine_kit::queue::Delivery`] settled through the
//! writer, which renews its deadline while it is held.
//!
//! Between groups the committer's standby thread notices other processes' commits (`PRAGMA
//! data_version` changes), renews the deadlines of the messages this handle's consumers hold, and
//! sweeps expired entries and messages whose consumer died.
//!
//! With [`Durability::Full`], a group that holds only queue bookkeeping (takes, settlements
//! without dead letters), and the renewals and sweeps, commit with `synchronous = NORMAL`: no
//! fsync of their own. The next synced commit syncs the log and them with it, and an idle
//! second later a checkpoint does (see `open_deno_kv_engine_kit::queue`, "Queue bookkeeping": a crash of the
//! machine before then redelivers a message, never loses one).
//!
//! Such bookkeeping, alone and with nothing queued, runs in place on its caller's thread whatever
//! drives it ([`GroupRunner::try_run_in_place`]) unless it would wait: another process holds the
//! write lock, or the log is due for a checkpoint (kept out of these commits: [`AutoCheckpoint`]).
//! Then the standby thread runs it. (An owed sync is no reason to refuse: the standby thread would
//! commit the command unsynced too; the sync is its idle work.)

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::committer::{self, Change, Committer, GroupRunner};
use open_deno_kv_engine_kit::interval::{Every, Unsynced};
use open_deno_kv_engine_kit::isolated::{IsolatingTxn, run_isolated};
use open_deno_kv_engine_kit::queue::{
    self as kit, DeliveryEngine, DeliveryOutcome, Due, MESSAGE_KEEPALIVE_INTERVAL,
    delivery_deadline,
};
use open_deno_kv_engine_kit::{Clock, CommitResult, Effects, KvError, Notifier, ValidatedWrite};
use rusqlite::{Connection, ErrorCode, Transaction, TransactionBehavior, params};

use crate::change_log::WriterLog;
use crate::error::SqliteError;
use crate::messages::{self, SqlQueue, held_registry};
use crate::options::Durability;
use crate::pending_records::PendingRecords;
use crate::schema;
use crate::store::{
    BUSY_TIMEOUT, commit_write, execute, open_connection, pragma_data_version, storage,
};

/// How often the standby thread looks for other processes' commits.
const CHANGE_POLL_INTERVAL: Duration = Duration::from_millis(25);
/// How often expired entries and dead consumers' messages are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
/// Attempts to take the write lock from another process before giving up.
const LOCK_ATTEMPTS: u32 = 40;
/// The longest queue bookkeeping stays unsynced while the writer is idle.
const BOOKKEEPING_SYNC_WITHIN: Duration = Duration::from_secs(1);
/// The log size, in pages, at which a commit checkpoints it (SQLite's default
/// `wal_autocheckpoint`, which [`AutoCheckpoint`] takes over).
const CHECKPOINT_PAGES: i32 = 1000;

/// The largest change-record buffer a group hands on to the next (bytes).
const KEPT_RECORDS_BUFFER: usize = 1 << 20;

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
    let connection = WriteConnection::open(path, durability, clock, notifier)?;
    Ok(Committer::start(connection, "open-deno-kv-sqlite-writer").map_err(SqliteError::Thread)?)
}

impl WriteConnection {
    /// Opens the write connection: recognises the file, migrates it and requeues dead
    /// consumers' messages.
    fn open(
        path: &Path,
        durability: Durability,
        clock: Arc<dyn Clock>,
        notifier: Arc<Notifier>,
    ) -> Result<Self, KvError> {
        // Recognise an existing file through a read-only look first: a foreign file, or one with a
        // newer layout, is refused before the writable open switches it to WAL.
        if std::fs::metadata(path).is_ok_and(|meta| meta.len() > 0) {
            schema::inspect(&open_connection(path, true)?)?;
        }
        let mut conn = open_connection(path, false)?;
        // Each command's savepoint copies the pages it changes into a sub-journal: in memory,
        // not a temporary file written through the kernel.
        conn.pragma_update(None, "temp_store", "memory")
            .map_err(storage)?;
        schema::migrate(&mut conn)?;
        let checkpoint = AutoCheckpoint::install(&mut conn)?;
        let mut connection = WriteConnection {
            last_data_version: pragma_data_version(&conn)?,
            conn,
            checkpoint,
            syncing: Syncing::new(durability),
            clock,
            notifier,
            held: HashSet::new(),
            registry_key: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            keepalive: Every::new(MESSAGE_KEEPALIVE_INTERVAL),
            sweep: Every::new(SWEEP_INTERVAL),
            log: WriterLog::default(),
            records_buffer: Vec::new(),
        };
        connection.sweep()?;
        Ok(connection)
    }
}

/// The write connection and what lives from one group to the next: the engine's
/// [`GroupRunner`].
pub(crate) struct WriteConnection {
    conn: Connection,
    checkpoint: AutoCheckpoint,
    syncing: Syncing,
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
    /// The change log's setting as this writer last read it, and its pruning.
    log: WriterLog,
    /// The last group's change-record buffer, emptied and handed to the next group's.
    records_buffer: Vec<u8>,
}

impl GroupRunner for WriteConnection {
    type Command = Command;

    /// Runs a group of commands in one transaction, each in its own savepoint (the kit's
    /// [`run_isolated`]).
    fn run_group(&mut self, group: Vec<Command>) {
        // A group that may wait for the write lock is never given back.
        let _ = self.run(group, true);
    }

    /// Bookkeeping in place (see the module docs): given back rather than wait.
    fn try_run_in_place(&mut self, command: Command) -> Result<(), Command> {
        if self.checkpoint.due() {
            return Err(command);
        }
        self.checkpoint.in_place.store(true, Ordering::Relaxed);
        let ran = self.run(vec![command], false);
        self.checkpoint.in_place.store(false, Ordering::Relaxed);
        match ran {
            Err(mut given_back) => given_back.pop().map_or(Ok(()), Err),
            Ok(()) => Ok(()),
        }
    }

    fn idle_timeout(&self) -> Duration {
        let sync_in = self.syncing.unsynced.due_in().unwrap_or(Duration::MAX);
        CHANGE_POLL_INTERVAL.min(sync_in)
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
        if self.syncing.unsynced.due() {
            self.syncing.sync(&self.conn);
        }
    }

    /// The handle closes: the messages its consumers still hold are failed deliveries, and any
    /// unsynced bookkeeping is synced.
    fn close(&mut self) -> Result<(), KvError> {
        let own: Vec<String> = self.held.iter().cloned().collect();
        if own.is_empty() {
            self.syncing.sync(&self.conn);
            return Ok(());
        }
        let now = self.clock.now();
        let mut effects = Effects::default();
        let log = &mut self.log;
        let failed = self.syncing.begin(&self.conn, true, true).and_then(|tx| {
            let mut pending = log.refresh(&tx)?.map(PendingRecords::new);
            let mut tables = SqlQueue {
                conn: &tx,
                log: pending.as_mut(),
            };
            kit::fail_deliveries(&mut tables, own.iter().cloned(), now, &mut effects)?;
            store_pending(&tx, pending.as_ref())?;
            self.syncing.commit(tx)
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

/// Which of the write connection's commits are synced (see the module docs).
struct Syncing {
    /// [`Durability::Full`]: what must survive a machine crash is synced at its commit.
    durable: bool,
    /// The connection's `synchronous` as last set: FULL (`Some(true)`) or NORMAL; unknown
    /// before the first transaction.
    full: Option<bool>,
    /// Bookkeeping committed without a sync, synced by a checkpoint when idle.
    unsynced: Unsynced,
}

impl Syncing {
    fn new(durability: Durability) -> Self {
        let unsynced = Unsynced::new(BOOKKEEPING_SYNC_WITHIN);
        let durable = durability == Durability::Full;
        Syncing {
            durable,
            full: None,
            unsynced,
        }
    }

    /// Begins a write transaction on `conn` whose commit is synced if it holds work a crash
    /// must not lose (`must_sync`) and the file is opened with [`Durability::Full`]. SQLite
    /// takes `synchronous` only outside a transaction, so it is set first (NORMAL: in WAL mode,
    /// synced only by a later synced commit or a checkpoint).
    fn begin<'c>(
        &mut self,
        conn: &'c Connection,
        must_sync: bool,
        wait: bool,
    ) -> Result<Transaction<'c>, KvError> {
        // Set only when it changes: a pragma is parsed anew every time it runs.
        let full = self.durable && must_sync;
        if self.full != Some(full) {
            let level = if full { "full" } else { "normal" };
            conn.pragma_update(None, "synchronous", level)
                .map_err(storage)?;
            self.full = Some(full);
        }
        begin_write(conn, wait)
    }

    /// Commits `tx`, begun by [`Syncing::begin`].
    fn commit(&mut self, tx: Transaction<'_>) -> Result<(), KvError> {
        tx.commit().map_err(storage)?;
        self.unsynced
            .committed(self.full == Some(true) || !self.durable);
        Ok(())
    }

    /// Syncs the unsynced bookkeeping, if any, with a passive checkpoint, which syncs the log
    /// before it copies it. One that could not copy the whole log (a reader of another process
    /// holds an old snapshot) may not have synced it: it is tried again later.
    fn sync(&mut self, conn: &Connection) {
        if !self.unsynced.pending() {
            return;
        }
        let checkpoint = conn.query_row("pragma wal_checkpoint(passive)", [], |row| {
            Ok(row.get::<_, i64>(1)? == row.get::<_, i64>(2)?)
        });
        match checkpoint {
            Ok(true) => self.unsynced.committed(true),
            _ => self.unsynced.postpone(),
        }
    }
}

impl WriteConnection {
    /// Runs `group` in one transaction, each command in its own savepoint (the kit's
    /// [`run_isolated`]). If the write lock is taken by another process, waits for it with
    /// back-off (`wait`), or gives the group back untouched.
    fn run(&mut self, group: Vec<Command>, wait: bool) -> Result<(), Vec<Command>> {
        let must_sync = group.iter().any(Change::must_sync);
        let tx = match self.syncing.begin(&self.conn, must_sync, wait) {
            Ok(tx) => tx,
            Err(_) if !wait => return Err(group),
            Err(err) => {
                committer::reject_all(group, &err);
                return Ok(());
            }
        };
        let log = match self.log.refresh(&tx) {
            Ok(log) => {
                let buffer = std::mem::take(&mut self.records_buffer);
                log.map(|database| PendingRecords::reusing(database, buffer))
            }
            Err(err) => {
                committer::reject_all(group, &err);
                return Ok(());
            }
        };
        let mut sql_group = SqlGroup {
            tx: &tx,
            registry_key: &self.registry_key,
            log,
        };
        let run = run_isolated(&mut sql_group, group);
        let mut pending = sql_group.log;
        // A group in which every write failed its check changed nothing: rolled back, it costs
        // no write to the log and no fsync.
        let committed = if run.kept == 0 {
            tx.rollback().map_err(storage)
        } else {
            match store_pending(&tx, pending.as_ref()) {
                // Without its records the group must not commit.
                Err(err) => {
                    let _ = tx.rollback();
                    Err(err)
                }
                Ok(()) => {
                    // Pruning is housekeeping: if it fails, the group still commits, and it is
                    // tried again at the next due time.
                    let _ = self.log.logged(&tx, run.kept, self.clock.now());
                    self.syncing.commit(tx)
                }
            }
        };
        // Kept for the next group unless an unusually large group grew it.
        if let Some(buffer) = pending.take().map(PendingRecords::into_buffer)
            && buffer.capacity() <= KEPT_RECORDS_BUFFER
        {
            self.records_buffer = buffer;
        }
        let notifier = self.notifier.clone();
        run.finish(&committed, &notifier, |taken, settled| {
            self.record_held(taken, settled);
        });
        Ok(())
    }

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
        let tx = self.syncing.begin(&self.conn, false, true)?;
        for id in &self.held {
            let renew = "update queue_running set deadline = ?1 where id = ?2";
            execute(&tx, renew, params![deadline, id])?;
        }
        self.syncing.commit(tx)
    }

    /// Deletes expired entries and requeues messages whose consumer died (deadline passed and not
    /// held by a live consumer in this process).
    fn sweep(&mut self) -> Result<(), KvError> {
        let now = self.clock.now();
        let mut effects = Effects::default();
        let tx = self.syncing.begin(&self.conn, false, true)?;
        let mut pending = self.log.refresh(&tx)?.map(PendingRecords::new);
        let expired = "delete from kv where expiration_ms >= 0 and expiration_ms <= ?1";
        execute(&tx, expired, [now.timestamp_millis()])?;
        messages::requeue_dead(&tx, now, &self.registry_key, &mut effects, pending.as_mut())?;
        store_pending(&tx, pending.as_ref())?;
        self.syncing.commit(tx)?;
        self.notifier.notify(&effects);
        Ok(())
    }
}

/// SQLite's automatic checkpoint, made by the write connection itself: once a commit leaves the
/// log at [`CHECKPOINT_PAGES`] or more, a passive checkpoint (as SQLite's own would), except
/// after a commit run in place, which must not wait for one. The next commit off the caller's
/// thread makes it then (in place is refused meanwhile: [`AutoCheckpoint::due`]), or the idle
/// sync.
struct AutoCheckpoint {
    /// Pages in the log after the last commit, 0 once a checkpoint has copied them all.
    pages: Arc<AtomicI32>,
    /// A commit runs in place: leave the checkpoint for later.
    in_place: Arc<AtomicBool>,
}

impl AutoCheckpoint {
    /// Takes over `conn`'s automatic checkpoint (a WAL hook replaces SQLite's own).
    fn install(conn: &mut Connection) -> Result<Self, KvError> {
        let pages = Arc::new(AtomicI32::new(0));
        let in_place = Arc::new(AtomicBool::new(false));
        let (log_pages, leave) = (pages.clone(), in_place.clone());
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, now: i32| {
            let mut left = now;
            if now >= CHECKPOINT_PAGES && !leave.load(Ordering::Relaxed) {
                // As SQLite's own, not an error if it cannot copy everything (another process
                // reads an old snapshot): then it stays due.
                let passive = rusqlite::wal::CheckpointMode::PASSIVE;
                if let Ok((log, copied)) = wal.checkpoint_v2(passive)
                    && log == copied
                {
                    left = 0;
                }
            }
            log_pages.store(left, Ordering::Relaxed);
            Ok(())
        }))
        .map_err(storage)?;
        Ok(AutoCheckpoint { pages, in_place })
    }

    /// The log holds enough for a checkpoint that no commit has made yet.
    fn due(&self) -> bool {
        self.pages.load(Ordering::Relaxed) >= CHECKPOINT_PAGES
    }
}

/// Stores a transaction's pending change records, if the log is on, before it commits.
fn store_pending(tx: &Transaction<'_>, pending: Option<&PendingRecords>) -> Result<(), KvError> {
    pending.map_or(Ok(()), |pending| pending.store(tx))
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(err, rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::DatabaseBusy || e.code == ErrorCode::DatabaseLocked)
}

/// Opens the group's write transaction (`BEGIN IMMEDIATE`: the write lock is taken at once),
/// retrying with back-off while another process holds the lock (on top of SQLite's own busy
/// wait), so "database is locked" does not reach the caller. Dropped without a commit, the
/// transaction rolls back; a commit that fails rolls back too. Without `wait`, one attempt that
/// does not wait at all: busy is an error.
fn begin_write(conn: &Connection, wait: bool) -> Result<Transaction<'_>, KvError> {
    if !wait {
        conn.busy_timeout(Duration::ZERO).map_err(storage)?;
        let begun = Transaction::new_unchecked(conn, TransactionBehavior::Immediate);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
        return begun.map_err(storage);
    }
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
    /// While the change log is on, the group's pending change records: its commits add theirs,
    /// and the group stores them before it commits.
    log: Option<PendingRecords>,
}

impl IsolatingTxn for SqlGroup<'_, '_> {
    type Id = String;

    fn begin_command(&mut self) -> Result<(), KvError> {
        if let Some(pending) = &mut self.log {
            pending.mark();
        }
        execute(self.tx, "savepoint command", [])
    }

    fn end_command(&mut self, keep: bool) -> Result<(), KvError> {
        if !keep {
            if let Some(pending) = &mut self.log {
                pending.rewind();
            }
            execute(self.tx, "rollback to command", [])?;
        }
        execute(self.tx, "release command", [])
    }

    fn write(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<Option<CommitResult>, KvError> {
        commit_write(self.tx, write, now, effects, self.log.as_mut())
    }

    /// Requeues dead consumers' messages first, so they are due again.
    fn take(&mut self, now: DateTime<Utc>, effects: &mut Effects) -> Result<Due<String>, KvError> {
        messages::requeue_dead(self.tx, now, self.registry_key, effects, self.log.as_mut())?;
        let mut tables = SqlQueue {
            conn: self.tx,
            log: self.log.as_mut(),
        };
        kit::take_due(&mut tables, now)
    }

    fn settle(
        &mut self,
        id: &String,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), KvError> {
        let mut tables = SqlQueue {
            conn: self.tx,
            log: self.log.as_mut(),
        };
        kit::settle(&mut tables, id, outcome, now, effects)
    }
}

#[cfg(test)]
mod tests {
    //! Which commits are synced: a write always, queue bookkeeping never on its own.

    use open_deno_kv_engine_kit::queue::Taken;
    use open_deno_kv_engine_kit::{AtomicWrite, Enqueue, Limits, ManualClock, async_trait};
    use tokio::sync::oneshot;

    use super::*;

    /// Settles nothing: these tests settle through the group themselves.
    struct NoEngine;

    #[async_trait]
    impl DeliveryEngine for NoEngine {
        type Ticket = String;
        async fn settle(&self, _: String, _: DeliveryOutcome) -> Result<(), KvError> {
            Ok(())
        }
        fn settle_in_background(&self, _: String, _: DeliveryOutcome) {}
    }

    fn enqueue(clock: &ManualClock) -> Command {
        let write = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: vec![1],
                ready_at: clock.now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..Default::default()
        };
        let write = Limits::deno()
            .accept_atomic_write(write, clock.now())
            .unwrap();
        let (reply, _) = oneshot::channel();
        Change::Write {
            write,
            now: clock.now(),
            reply,
        }
    }

    /// The connection's `synchronous` (2: FULL, 1: NORMAL), and whether a sync is owed.
    fn state(connection: &WriteConnection) -> (i64, bool) {
        let level = connection
            .conn
            .query_row("pragma synchronous", [], |row| row.get(0))
            .unwrap();
        (level, connection.syncing.unsynced.pending())
    }

    /// A write connection on a new file in a temporary directory.
    fn open(durability: Durability) -> (tempfile::TempDir, ManualClock, WriteConnection) {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::at_test_epoch();
        let path = dir.path().join("kv.sqlite3");
        let notifier = Arc::new(Notifier::new());
        let time = Arc::new(clock.clone());
        let connection = WriteConnection::open(&path, durability, time, notifier).unwrap();
        (dir, clock, connection)
    }

    #[test]
    fn writes_are_synced_and_queue_bookkeeping_is_not() {
        let (_dir, clock, mut connection) = open(Durability::Full);
        assert!(
            state(&connection).1,
            "the sweep at open is bookkeeping, unsynced"
        );
        connection.run_group(vec![enqueue(&clock)]);
        assert_eq!(
            state(&connection),
            (2, false),
            "an enqueue is a write: synced, and the sweep with it"
        );

        let (reply, taken) = oneshot::channel();
        let engine: Arc<dyn DeliveryEngine<Ticket = String>> = Arc::new(NoEngine);
        let now = clock.now();
        connection.run_group(vec![Change::Take {
            owner: 0,
            now,
            engine,
            reply,
        }]);
        let Ok(Ok(Taken::Message(delivery))) = taken.blocking_recv() else {
            panic!("the message is due");
        };
        assert_eq!(state(&connection), (1, true), "a take is bookkeeping");
        let id = connection.held.iter().next().cloned().unwrap();
        drop(delivery);

        connection.run_group(vec![Change::Settle {
            ticket: id,
            outcome: DeliveryOutcome::Succeeded,
            now,
            reply: None,
        }]);
        assert_eq!(state(&connection), (1, true), "so is a finish");
        let rows: i64 = connection
            .conn
            .query_row("select count(*) from queue_running", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 0, "the finish was committed");

        connection.syncing.sync(&connection.conn);
        assert!(!state(&connection).1, "a checkpoint synced it");
    }

    /// The answer to a take.
    type TakeAnswer =
        oneshot::Receiver<Result<Taken<dyn DeliveryEngine<Ticket = String>>, KvError>>;

    fn take(clock: &ManualClock) -> (Command, TakeAnswer) {
        let (reply, taken) = oneshot::channel();
        let engine: Arc<dyn DeliveryEngine<Ticket = String>> = Arc::new(NoEngine);
        let now = clock.now();
        let take = Change::Take {
            owner: 0,
            now,
            engine,
            reply,
        };
        (take, taken)
    }

    /// Bookkeeping in place never waits for another process's write lock: it is given back
    /// (untouched: it runs later, off the caller's thread); with the lock free it runs.
    #[test]
    fn in_place_gives_back_rather_than_wait_for_the_lock() {
        let (dir, clock, mut connection) = open(Durability::Full);
        connection.run_group(vec![enqueue(&clock)]);
        let other = Connection::open(dir.path().join("kv.sqlite3")).unwrap();
        other.execute_batch("begin immediate").unwrap();

        let (command, mut taken) = take(&clock);
        let started = std::time::Instant::now();
        let Err(command) = connection.try_run_in_place(command) else {
            panic!("ran while another process held the write lock");
        };
        assert!(
            started.elapsed() < BUSY_TIMEOUT,
            "it waited for the lock ({:?})",
            started.elapsed()
        );
        assert!(taken.try_recv().is_err(), "given back unanswered");

        other.execute_batch("commit").unwrap();
        assert!(connection.try_run_in_place(command).is_ok());
        assert!(matches!(taken.try_recv(), Ok(Ok(Taken::Message(_)))));
    }

    /// The log is still checkpointed at SQLite's usual size, but never by a commit run in place:
    /// once one leaves it due, in place is refused until a commit off the caller's thread has
    /// made the checkpoint.
    #[test]
    fn the_checkpoint_is_left_to_commits_off_the_callers_thread() {
        let (_dir, clock, mut connection) = open(Durability::Full);
        // Enough messages that their bookkeeping alone fills the log.
        for _ in 0..50 {
            connection.run_group((0..100).map(|_| enqueue(&clock)).collect());
        }
        assert!(
            !connection.checkpoint.due(),
            "the writes' commits checkpointed"
        );
        let mut in_place = 0;
        while !connection.checkpoint.due() {
            let (command, _taken) = take(&clock);
            assert!(
                connection.try_run_in_place(command).is_ok(),
                "nothing else was due"
            );
            in_place += 1;
            assert!(in_place < 100_000, "the log never grew to a checkpoint");
        }
        let (command, _taken) = take(&clock);
        let Err(command) = connection.try_run_in_place(command) else {
            panic!("ran in place with a checkpoint due");
        };
        connection.run_group(vec![command]);
        assert!(
            !connection.checkpoint.due(),
            "the commit off the caller's thread checkpointed"
        );
    }

    #[test]
    fn with_process_durability_nothing_is_owed() {
        let (_dir, clock, mut connection) = open(Durability::Process);
        connection.run_group(vec![enqueue(&clock)]);
        assert_eq!(state(&connection), (1, false));
    }
}

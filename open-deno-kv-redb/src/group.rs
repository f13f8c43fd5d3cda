//! What the writer does with a group of commands: run them all in **one redb write transaction
//! with one commit** — with [`crate::Durability::Immediate`], one fsync for the whole group.
//! The kit's group committer ([`open_deno_kv_engine_kit::committer`], driven through the `writer` module) decides
//! who runs a group and when; this module is the group itself, and the state that lives from one
//! group to the next ([`GroupState`], the engine's [`GroupRunner`]).
//!
//! Replies go out only after the commit, so an acknowledged write is as durable as the
//! configured durability promises.
//!
//! Isolation inside a group: each atomic write is staged in an overlay and applied only if it
//! commits (see [`crate::txn`]), so a failed check or a refused write leaves no trace and the
//! others are unaffected. Queue commands read first and write last. A failure of redb itself
//! while the transaction is being modified abandons the group: its transaction is aborted and
//! every command in it gets the error (none of them was acknowledged).
//!
//! Versionstamps: the state keeps the last version in memory; each committed write takes the
//! next one, in the order the group runs. The file does not record every version: `meta` holds a
//! *ceiling* that no version handed out exceeds. A group that would go past it raises it by
//! [`VERSION_RESERVATION`] in the same transaction, so most commits write only their entries (a
//! separate `meta` row on every commit cost a page, and a third of the writer's time at
//! `Deferred` durability, next to raw redb). At open, numbering continues from the ceiling, so
//! versionstamps strictly increase in commit order across reopens; a clean close lowers the
//! ceiling to the last version handed out ([`GroupState::close`]), so only a crash makes them
//! jump (Deno's own versionstamps grow by a random 1-9 per commit: nothing relies on them being
//! dense). A group that fails to commit gives its versions back.
//!
//! Between groups (when idle for a second) the writer sweeps expired entries that are due, and in
//! [`crate::Durability::Deferred`] mode makes unsynced commits durable ([`GroupState::idle`]).
//! In [`crate::Durability::Immediate`] mode, a group of queue bookkeeping only (takes and
//! settlements, no write: [`Change::must_sync`]) commits unsynced too; the next synced commit
//! or the idle sync a second later makes it durable. A crash before then, of the process too
//! (redb keeps unsynced commits in memory), delivers a message again, never loses one
//! (`open_deno_kv_engine_kit::queue`, "Queue bookkeeping"). Such a command, alone with nothing queued, runs in
//! place on its caller's thread ([`GroupState::try_run_in_place`]) unless a sync, a sweep or a
//! reopen is due.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::committer::{self, Answer, Answers, Change, GroupRunner, Reply};
use open_deno_kv_engine_kit::interval::Unsynced;
use open_deno_kv_engine_kit::queue::{self as kit, DeliveryOutcome, Leases, Taken};
use open_deno_kv_engine_kit::{Clock, Effects, KvError, Notifier};
use redb::{Database, ReadableTable};
use uuid::Uuid;

use crate::change_log::{self, LogSetting};
use crate::commit_clock::CommitClock;
use crate::error::storage;
use crate::file::{DbSlot, needs_reopen};
use crate::options::Durability;
use crate::queue::{self, Engine, RedbQueue, Ticket};
use crate::schema;
use crate::snapshot::ReadSnapshot;
use crate::txn::{Fatal, Step, Tables, commit_write};

/// How often an idle writer wakes up to sweep and (deferred mode) sync.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// In [`Durability::Deferred`] mode, the longest an acknowledged commit stays unsynced.
pub const DEFERRED_SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// How far above the last version handed out a group raises the ceiling recorded in `meta`
/// (see the module docs): about a million commits between two `meta` writes.
pub(crate) const VERSION_RESERVATION: u64 = 1 << 20;
/// Most expired entries deleted per group, so a sweep never makes a write wait long.
const SWEEP_BATCH: usize = 256;
/// How long sweeping stops after a sweep failed (reads still hide expired entries meanwhile).
const SWEEP_PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(60);

/// One change the writer makes, run inside a group: the kit's changes, and open-deno-kv-redb's
/// own ([`Own`]).
pub(crate) type Command = Change<Engine, Own>;

/// The writer's commands of open-deno-kv-redb's own.
pub(crate) enum Own {
    /// See [`Release`].
    Release(Release),
    /// See [`Configure`].
    Configure(Configure),
}

impl committer::Command for Own {
    fn reject(self, err: KvError) {
        match self {
            Own::Release(release) => release.reject(err),
            Own::Configure(configure) => configure.reject(err),
        }
    }
}

/// Switches the change log on with a retention, or off (see [`crate::change_log`]): every
/// command after it in the writer's order sees the new setting.
pub(crate) struct Configure {
    pub(crate) retention: Option<Duration>,
    pub(crate) reply: Reply<()>,
}

impl committer::Command for Configure {
    fn reject(self, err: KvError) {
        committer::answer(Some(self.reply), Err(err));
    }
}

/// A handle closed: its unfinished messages are failed deliveries, and it gets no more.
pub(crate) struct Release {
    pub(crate) owner: u64,
    pub(crate) now: DateTime<Utc>,
    pub(crate) reply: Option<Reply<()>>,
}

impl committer::Command for Release {
    fn reject(self, err: KvError) {
        committer::answer(self.reply, Err(err));
    }
}

/// The time a command runs at.
fn command_now(command: &Command) -> DateTime<Utc> {
    match command {
        Change::Write { now, .. } | Change::Take { now, .. } | Change::Settle { now, .. } => *now,
        Change::Engine(Own::Release(release)) => release.now,
        // A switch runs at no time of its own: it never holds a sweep back.
        Change::Engine(Own::Configure(_)) => DateTime::<Utc>::MAX_UTC,
    }
}

/// Holds a command's answer; a [`Fatal`] failure is the command's answer too, and abandons the
/// group.
fn hold<T: Answer>(
    answers: &mut Answers,
    reply: Option<Reply<T>>,
    step: Step<T>,
) -> Result<(), Fatal> {
    match step {
        Ok(result) => {
            answers.hold(reply, result);
            Ok(())
        }
        Err(fatal) => {
            answers.hold(reply, Err(fatal.0.clone()));
            Err(fatal)
        }
    }
}

/// What the writer keeps from one group to the next. Only the thread leading the writer holds
/// it (see [`open_deno_kv_engine_kit::committer`]).
pub(crate) struct GroupState {
    /// The file; reopened after an I/O error (see [`crate::file`]).
    db: Arc<DbSlot>,
    clock: Arc<dyn Clock>,
    durability: Durability,
    notifier: Arc<Notifier>,
    /// The snapshot reads share; dropped after every commit that changed something.
    snapshot: Arc<ReadSnapshot>,
    /// Where the version the file holds is published for exports, and where an import leaves
    /// the version to continue above (see [`crate::backup`]).
    commit_clock: Arc<CommitClock>,
    /// The version of the last versionstamp handed out by a committed write.
    last_version: u64,
    /// The ceiling recorded in the file: no version handed out is above it.
    version_ceiling: u64,
    /// Messages held by live consumers of this process, and the handles that closed.
    leases: Leases,
    /// The earliest expiry in the index (a hint: `None` means nothing to sweep).
    next_expiry: Option<DateTime<Utc>>,
    /// Commits made with redb's `Durability::None` and not yet followed by a durable one.
    unsynced: Unsynced,
    /// Set after a sweep failed: no sweeping until then.
    sweep_paused_until: Option<Instant>,
    /// The change log's setting, cached (see [`crate::change_log`]).
    log: LogSetting,
}

/// The earliest expiry time in the index, the sweep hint.
fn earliest_expiry(tables: &mut Tables<'_>) -> Result<Option<DateTime<Utc>>, KvError> {
    Ok(tables
        .expiry()
        .map_err(storage)?
        .first()
        .map_err(storage)?
        .and_then(|(key, _)| crate::codec::decode_time(key.value()).ok()))
}

/// What a failed group gives back.
struct Saved {
    last_version: u64,
    /// Only saved for groups with queue commands (the only ones that change it).
    leases: Option<Leases>,
    next_expiry: Option<DateTime<Utc>>,
    /// The change log's retention (a switch in the group did not happen).
    log_retention: Option<Duration>,
}

impl GroupRunner for GroupState {
    type Command = Command;

    fn idle_timeout(&self) -> Duration {
        self.unsynced
            .due_in()
            .map_or(IDLE_TICK, |due| due.min(IDLE_TICK))
    }

    /// Idle work: a sweep if entries are due, a sync if deferred commits wait for one. Failures
    /// are retried at the next tick; nothing waits on them.
    fn idle(&mut self) {
        if self.next_expiry.is_some_and(|at| at <= self.clock.now()) {
            self.run_group(Vec::new());
        }
        if self.unsynced.due() {
            let _ = self.sync_if_needed();
        }
    }

    /// The last commit, when the writer stops: records the exact last version as the ceiling
    /// (so the next open continues without a gap) and makes everything durable. If recording
    /// the ceiling fails, the higher one stays (which is safe) and the sync is still made.
    fn close(&mut self) -> Result<(), KvError> {
        if self.version_ceiling == self.last_version {
            return self.sync_if_needed();
        }
        match self.lower_ceiling() {
            Ok(()) => Ok(()),
            Err(err) => self.sync_if_needed().and(Err(err)),
        }
    }

    /// Queue bookkeeping in place: an unsynced commit of one command, which waits for nothing
    /// (this process's committer is redb's only writer). Given back when its commit would sync,
    /// sweep expired entries or reopen the file.
    fn try_run_in_place(&mut self, command: Command) -> Result<(), Command> {
        let sweep_due = self.next_expiry.is_some_and(|at| at <= self.clock.now());
        if sweep_due || self.db.has_failed() || self.sync_this_group(std::slice::from_ref(&command))
        {
            return Err(command);
        }
        self.run_group(vec![command]);
        Ok(())
    }

    /// Runs a group of commands in one transaction, and answers them once it has committed.
    fn run_group(&mut self, group: Vec<Command>) {
        let sync = self.sync_this_group(&group);
        let txn = match self.begin(sync) {
            Ok(txn) => txn,
            Err(err) => {
                committer::reject_all(group, &err);
                self.recover_from(&err);
                return;
            }
        };
        if let Err(err) = self.continue_after_import(&txn) {
            let _ = txn.abort();
            committer::reject_all(group, &err);
            return;
        }
        let touches_queue = group.iter().any(|c| !matches!(c, Change::Write { .. }));
        let saved = Saved {
            last_version: self.last_version,
            leases: touches_queue.then(|| self.leases.clone()),
            next_expiry: self.next_expiry,
            log_retention: self.log.retention(),
        };
        // Never sweep what a command of this group may still see as alive.
        let sweep_now = group
            .iter()
            .map(command_now)
            .fold(self.clock.now(), DateTime::min);

        let mut answers = Answers::with_capacity(group.len());
        let mut effects = Effects::default();
        let mut fatal: Option<KvError> = None;
        let mut raised_ceiling = None;
        let dirty = {
            let mut tables = Tables::new(&txn);
            tables.logging = self.log.is_on();
            let sweep_due = self.next_expiry.is_some_and(|at| at <= sweep_now)
                && self
                    .sweep_paused_until
                    .is_none_or(|until| Instant::now() >= until);
            if sweep_due && let Err(Fatal(_)) = self.sweep(&mut tables, sweep_now) {
                // The sweep is housekeeping: it must not take the group's writes down with it.
                // Start the group again in a fresh transaction, without sweeping for a while.
                drop(tables);
                let _ = txn.abort();
                self.sweep_paused_until = Some(Instant::now() + SWEEP_PAUSE_AFTER_FAILURE);
                return self.run_group(group);
            }
            for command in group {
                match &fatal {
                    Some(err) => committer::Command::reject(command, err.clone()),
                    None => {
                        let ran =
                            self.run_command(&mut tables, command, &mut answers, &mut effects);
                        fatal = ran.err().map(|Fatal(err)| err);
                    }
                }
            }
            // Pruning is housekeeping too, but it shares the transaction of the commits that made
            // it due; its failure is redb's own and abandons the group like any other.
            if fatal.is_none()
                && self.log.prune_due(tables.logged)
                && let Err(Fatal(err)) = self.log.prune(&mut tables, sweep_now)
            {
                fatal = Some(err);
            }
            // The new ceiling is kept in memory only once it is committed (below): a ceiling
            // above the file's would let later groups commit versions the file does not cover.
            if fatal.is_none() && self.last_version > self.version_ceiling {
                let ceiling = self.last_version.saturating_add(VERSION_RESERVATION);
                match tables.set_version_ceiling(ceiling) {
                    Ok(()) => raised_ceiling = Some(ceiling),
                    Err(Fatal(err)) => fatal = Some(err),
                }
            }
            if let Some(at) = tables.earliest_new_expiry
                && self.next_expiry.is_none_or(|next| at < next)
            {
                self.next_expiry = Some(at);
            }
            tables.dirty
        };
        let outcome = match fatal {
            Some(err) => {
                let _ = txn.abort();
                Err(err)
            }
            None if dirty => {
                self.commit_clock.landing();
                let committed = txn.commit().map_err(storage);
                let holds = if committed.is_ok() {
                    self.last_version
                } else {
                    saved.last_version
                };
                self.commit_clock.landed(holds);
                committed
            }
            None => {
                let _ = txn.abort();
                Ok(())
            }
        };
        match outcome {
            Ok(()) => {
                if let Some(ceiling) = raised_ceiling {
                    self.version_ceiling = ceiling;
                }
                if dirty {
                    // Before any answer: a read that follows an acknowledged write sees it.
                    self.snapshot.invalidate();
                    self.unsynced.committed(sync);
                }
                answers.send(Ok(()));
                self.notifier.notify(&effects);
            }
            Err(err) => {
                self.last_version = saved.last_version;
                if let Some(leases) = saved.leases {
                    self.leases = leases;
                }
                self.next_expiry = saved.next_expiry;
                if self.log.retention() != saved.log_retention {
                    self.log = LogSetting::restored(saved.log_retention);
                }
                answers.send(Err(&err));
                self.recover_from(&err);
            }
        }
    }
}

impl GroupState {
    /// Recognises (or initializes) the file and requeues the messages a previous process left
    /// running, in one transaction.
    pub(crate) fn prepare(
        db: Arc<DbSlot>,
        clock: Arc<dyn Clock>,
        durability: Durability,
        notifier: Arc<Notifier>,
        snapshot: Arc<ReadSnapshot>,
        commit_clock: Arc<CommitClock>,
    ) -> Result<Self, KvError> {
        let file = db.writable()?;
        let layout = schema::inspect(file.as_ref())?;
        let txn = file.begin_write().map_err(storage)?;
        if layout == schema::Layout::Empty {
            schema::initialize(&txn).map_err(storage)?;
        }
        let log =
            LogSetting::read(&txn.open_table(schema::META).map_err(storage)?).map_err(storage)?;
        let mut version_ceiling = schema::version_ceiling(&txn)?;
        let mut effects = Effects::default();
        let (dirty, next_expiry, last_version) = {
            let mut tables = Tables::new(&txn);
            tables.logging = log.is_on();
            // Numbering continues above the ceiling: every version handed out before is at or
            // below. With the change log on and holding records, and every acknowledged commit
            // synced (`Immediate`), from the last commit exactly (see `crate::change_log`,
            // "Numbering after a crash"); a `Deferred` store may have acknowledged commits the
            // crash lost, whose versions must not be handed out again.
            let logged = match durability {
                Durability::Immediate => change_log::last_logged_version(&mut tables)?,
                Durability::Deferred => None,
            };
            let mut last_version =
                logged.map_or(version_ceiling, |logged| logged.min(version_ceiling));
            // Problems with single rows are left for inspection; they do not prevent the open.
            let _undecodable =
                queue::recover(&mut tables, clock.now(), &mut last_version, &mut effects)
                    .map_err(|Fatal(err)| err)?;
            if last_version > version_ceiling {
                version_ceiling = last_version.saturating_add(VERSION_RESERVATION);
                tables
                    .set_version_ceiling(version_ceiling)
                    .map_err(|Fatal(err)| err)?;
            }
            (tables.dirty, earliest_expiry(&mut tables)?, last_version)
        };
        if dirty || layout == schema::Layout::Empty {
            txn.commit().map_err(storage)?;
        } else {
            txn.abort().map_err(storage)?;
        }
        commit_clock.landing();
        commit_clock.landed(last_version);
        Ok(GroupState {
            db,
            clock,
            durability,
            notifier,
            snapshot,
            commit_clock,
            last_version,
            version_ceiling,
            leases: Leases::default(),
            next_expiry,
            unsynced: Unsynced::new(DEFERRED_SYNC_INTERVAL),
            sweep_paused_until: None,
            log,
        })
    }

    /// Numbering and sweeping continue above what an import wrote since the last group (see
    /// [`crate::backup`]); `txn` is open, so an import that committed before is visible.
    fn continue_after_import(&mut self, txn: &redb::WriteTransaction) -> Result<(), KvError> {
        let Some(floor) = self.commit_clock.pending_floor() else {
            return Ok(());
        };
        // Read first: if a read fails, the floor stays pending for the next group.
        let ceiling = schema::version_ceiling(txn)?;
        let next_expiry = earliest_expiry(&mut Tables::new(txn))?;
        self.commit_clock.floor_applied();
        self.last_version = self.last_version.max(floor);
        self.version_ceiling = ceiling;
        self.next_expiry = next_expiry;
        Ok(())
    }

    /// Makes every commit so far durable, with an empty `Immediate` commit.
    fn sync_if_needed(&mut self) -> Result<(), KvError> {
        if !self.unsynced.pending() {
            return Ok(());
        }
        let txn = self.db.writable()?.begin_write().map_err(storage)?;
        txn.commit().map_err(storage)?;
        self.unsynced.committed(true);
        Ok(())
    }

    /// Records the exact last version as the ceiling, in a durable commit.
    fn lower_ceiling(&mut self) -> Result<(), KvError> {
        let txn = self.db.writable()?.begin_write().map_err(storage)?;
        {
            let mut tables = Tables::new(&txn);
            tables
                .set_version_ceiling(self.last_version)
                .map_err(|Fatal(err)| err)?;
        }
        txn.commit().map_err(storage)?;
        self.version_ceiling = self.last_version;
        self.unsynced.committed(true);
        Ok(())
    }

    /// Whether the commit of `group` must be durable: in Immediate mode, when it holds work a
    /// crash must not lose; in either mode, once earlier unsynced commits are due for a sync.
    fn sync_this_group(&self, group: &[Command]) -> bool {
        let must = self.durability == Durability::Immediate && group.iter().any(Change::must_sync);
        must || self.unsynced.due()
    }

    /// The group's write transaction, durable or not as `sync` says.
    fn begin(&mut self, sync: bool) -> Result<redb::WriteTransaction, KvError> {
        let mut txn = self.database()?.begin_write().map_err(storage)?;
        if !sync {
            txn.set_durability(redb::Durability::None)
                .map_err(storage)?;
        }
        Ok(txn)
    }

    /// The database, for tests that look into the file.
    #[cfg(test)]
    pub(crate) fn test_db(&self) -> Arc<Database> {
        self.db.writable().expect("the file is open")
    }

    /// The writable database; first reopens the file if an earlier reopen failed.
    fn database(&mut self) -> Result<Arc<Database>, KvError> {
        if self.db.has_failed() {
            self.reopen()?;
        }
        self.db.writable()
    }

    /// After a group failed with `err`: reopens the file if redb needs it (an I/O error, after
    /// which redb refuses everything until the database is reopened). A failed reopen is kept
    /// in the slot and retried before the next group.
    fn recover_from(&mut self, err: &KvError) {
        if needs_reopen(err) {
            let _ = self.reopen();
        }
    }

    /// Closes and reopens the file (redb recovers it to its last durable commit), then takes
    /// up numbering and sweeping from what the file holds: versions continue above both its
    /// ceiling and everything this process handed out, so none is handed out twice.
    fn reopen(&mut self) -> Result<(), KvError> {
        let snapshot = self.snapshot.clone();
        let db = self.db.reopen(|| snapshot.invalidate())?;
        let txn = db.begin_write().map_err(storage)?;
        let ceiling = schema::version_ceiling(&txn)?;
        let next_expiry = earliest_expiry(&mut Tables::new(&txn))?;
        // A switch the file lost (Deferred mode) is not in effect.
        let log =
            LogSetting::read(&txn.open_table(schema::META).map_err(storage)?).map_err(storage)?;
        txn.abort().map_err(storage)?;
        if log.retention() != self.log.retention() {
            self.log = log;
        }
        self.version_ceiling = ceiling;
        self.last_version = self.last_version.max(ceiling);
        self.next_expiry = next_expiry;
        self.unsynced.committed(true);
        // What the file holds may be older than what was acknowledged in Deferred mode.
        self.notifier.notify_everything();
        Ok(())
    }

    /// Deletes a batch of due entries in the group's transaction and updates the sweep hint.
    fn sweep(&mut self, tables: &mut Tables<'_>, now: DateTime<Utc>) -> Result<(), Fatal> {
        self.next_expiry = tables.sweep_expired(now, SWEEP_BATCH)?;
        Ok(())
    }

    /// Runs one command inside the group and holds its answer; a [`Fatal`] failure abandons
    /// the group.
    fn run_command(
        &mut self,
        tables: &mut Tables<'_>,
        command: Command,
        answers: &mut Answers,
        effects: &mut Effects,
    ) -> Result<(), Fatal> {
        match command {
            Change::Write { write, now, reply } => {
                let step = commit_write(tables, &write, now, &mut self.last_version, effects);
                hold(answers, Some(reply), step)
            }
            Change::Take {
                owner,
                now,
                engine,
                reply,
            } => {
                let step = if self.leases.is_closed(owner) {
                    Ok(Ok(Taken::Closed))
                } else {
                    let last_version = &mut self.last_version;
                    let due = kit::take_due(
                        &mut RedbQueue {
                            tables,
                            last_version,
                        },
                        now,
                    );
                    let leases = &mut self.leases;
                    queue::step(due).map(|due| {
                        due.map(|due| {
                            due.into_taken(engine, |id| Ticket {
                                id,
                                token: leases.grant(id, owner),
                            })
                        })
                    })
                };
                hold(answers, Some(reply), step)
            }
            Change::Settle {
                ticket,
                outcome,
                now,
                reply,
            } => {
                // A stale handle (its delivery abandoned at close and handed out again) does
                // nothing.
                let step = if self.leases.is_current(ticket.id, ticket.token) {
                    self.settle(tables, ticket.id, outcome, now, effects)
                } else {
                    Ok(Ok(()))
                };
                hold(answers, reply, step)
            }
            Change::Engine(Own::Configure(Configure { retention, reply })) => {
                let step = self.log.switch(tables, retention);
                hold(answers, Some(reply), step)
            }
            Change::Engine(Own::Release(Release { owner, now, reply })) => {
                let mut step = Ok(Ok(()));
                for id in self.leases.close_owner(owner) {
                    match self.settle(tables, id, DeliveryOutcome::Failed, now, effects) {
                        Ok(Ok(())) => {}
                        Ok(Err(err)) => step = Ok(Err(err)),
                        Err(fatal) => return hold(answers, reply, Err(fatal)),
                    }
                }
                hold(answers, reply, step)
            }
        }
    }

    /// Settles the delivery of message `id`, and ends its lease once settled.
    fn settle(
        &mut self,
        tables: &mut Tables<'_>,
        id: Uuid,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Step<()> {
        let last_version = &mut self.last_version;
        let settled = kit::settle(
            &mut RedbQueue {
                tables,
                last_version,
            },
            &id,
            outcome,
            now,
            effects,
        );
        let result = queue::step(settled)?;
        if result.is_ok() {
            self.leases.end(id);
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use open_deno_kv_engine_kit::{
        AtomicWrite, Check, CommitResult, Enqueue, KvValue, ManualClock, MutationKind,
        Versionstamp, encode_key, key,
    };
    use redb::ReadableDatabase;
    use tokio::sync::oneshot;

    use super::*;
    use crate::codec::EntryRecord;
    use crate::schema::{ENTRIES, EXPIRY, QUEUE_READY, QUEUE_RUNNING};

    fn k(name: &str) -> Vec<u8> {
        encode_key(&key![name]).expect("key")
    }

    fn set(name: &str, n: u64) -> open_deno_kv_engine_kit::Mutation {
        open_deno_kv_engine_kit::Mutation::set(k(name), KvValue::U64(n))
    }

    fn thread_on(path: &std::path::Path, clock: &ManualClock) -> GroupState {
        thread_with(path, clock, Durability::Immediate)
    }

    fn thread_with(
        path: &std::path::Path,
        clock: &ManualClock,
        durability: Durability,
    ) -> GroupState {
        let db = Arc::new(
            crate::file::DbSlot::open_writable(path, Arc::new(crate::file::FileStorage), false)
                .expect("open"),
        );
        GroupState::prepare(
            db,
            Arc::new(clock.clone()),
            durability,
            Arc::new(Notifier::new()),
            Arc::new(ReadSnapshot::default()),
            Arc::new(crate::commit_clock::CommitClock::default()),
        )
        .expect("prepare")
    }

    fn write_command(
        write: AtomicWrite,
        now: DateTime<Utc>,
    ) -> (
        Command,
        oneshot::Receiver<Result<Option<CommitResult>, KvError>>,
    ) {
        let write = open_deno_kv_engine_kit::Limits::deno()
            .accept_atomic_write(write, now)
            .expect("valid");
        let (reply, answer) = oneshot::channel();
        (Change::Write { write, now, reply }, answer)
    }

    /// A take by handle 1 at `now`, and where its answer arrives.
    fn take_command(
        now: DateTime<Utc>,
    ) -> (
        Command,
        oneshot::Receiver<Result<Taken<queue::Engine>, KvError>>,
    ) {
        let (reply, answer) = oneshot::channel();
        let take: Command = Change::Take {
            owner: 1,
            now,
            engine: Arc::new(queue::SettlesNothing),
            reply,
        };
        (take, answer)
    }

    fn stored(db: &Database, name: &str) -> Option<(u64, Versionstamp)> {
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(ENTRIES).expect("table");
        let guard = table.get(k(name).as_slice()).expect("get")?;
        let record = EntryRecord::decode(guard.value()).expect("decode");
        match record.value().expect("value") {
            KvValue::U64(n) => Some((n, record.versionstamp)),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn rows(db: &Database, table: redb::TableDefinition<&[u8], &[u8]>) -> usize {
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(table).expect("table");
        table.iter().expect("iter").count()
    }

    /// One group holding a commit, a failed check, a refused write and another commit: the
    /// failures leave no trace, the commits land with consecutive versionstamps, and the failed
    /// check saw the group's earlier write.
    #[test]
    fn a_failed_or_refused_write_does_not_disturb_its_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::at_test_epoch();
        let mut thread = thread_on(&dir.path().join("kv.redb"), &clock);
        let now = clock.now();
        let text = KvValue::V8(vec![0xff, 0x0f, b'"', 1, b'x']);
        let first = AtomicWrite {
            mutations: vec![
                set("a", 1),
                open_deno_kv_engine_kit::Mutation::set(k("text"), text.clone()),
            ],
            ..Default::default()
        };
        let check_fails = AtomicWrite {
            checks: vec![Check {
                key: k("a"),
                versionstamp: None,
            }],
            mutations: vec![set("b", 2)],
            enqueues: vec![Enqueue {
                payload: vec![1],
                ready_at: now,
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
        };
        let refused = AtomicWrite {
            mutations: vec![
                set("c", 3),
                open_deno_kv_engine_kit::Mutation {
                    key: k("text"),
                    kind: MutationKind::Sum {
                        value: KvValue::U64(1),
                        min_v8: vec![],
                        max_v8: vec![],
                        clamp: false,
                    },
                    expire_at: None,
                },
            ],
            ..Default::default()
        };
        let second = AtomicWrite {
            checks: vec![Check {
                key: k("a"),
                versionstamp: Some(Versionstamp::from_version(1, 0)),
            }],
            mutations: vec![set("d", 4)],
            ..Default::default()
        };
        let mut answers = Vec::new();
        let mut group = Vec::new();
        for write in [first, check_fails, refused, second] {
            let (command, answer) = write_command(write, now);
            group.push(command);
            answers.push(answer);
        }
        thread.run_group(group);
        let results: Vec<_> = answers
            .into_iter()
            .map(|mut a| a.try_recv().expect("answered"))
            .collect();
        let stamp = |n| Versionstamp::from_version(n, 0);
        assert_eq!(
            results[0].as_ref().expect("first").map(|c| c.versionstamp),
            Some(stamp(1))
        );
        assert_eq!(results[1].as_ref().expect("check fails"), &None);
        assert!(matches!(results[2], Err(KvError::Mutation { .. })));
        assert_eq!(
            results[3].as_ref().expect("second").map(|c| c.versionstamp),
            Some(stamp(2)),
            "a failed write hands out no versionstamp"
        );
        assert_eq!(stored(&thread.test_db(), "a"), Some((1, stamp(1))));
        assert_eq!(stored(&thread.test_db(), "d"), Some((4, stamp(2))));
        assert_eq!(stored(&thread.test_db(), "b"), None);
        assert_eq!(stored(&thread.test_db(), "c"), None);
        assert_eq!(
            rows(&thread.test_db(), QUEUE_READY),
            0,
            "nothing was enqueued"
        );
    }

    /// A file as a crashed process leaves it (a message moved to running, never finished) gets
    /// the message requeued, as a failed delivery, when it is opened again.
    #[test]
    fn a_message_left_running_by_a_crash_is_requeued_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let thread = thread_on(&path, &clock);
            let txn = thread.test_db().begin_write().expect("txn");
            {
                let mut tables = Tables::new(&txn);
                let message = open_deno_kv_engine_kit::queue::QueuedMessage::new(
                    vec![7],
                    clock.now(),
                    vec![],
                    vec![100, 1_000],
                );
                tables.insert_ready(&message).expect("enqueue");
                let mut last_version = 0;
                let mut queue = RedbQueue {
                    tables: &mut tables,
                    last_version: &mut last_version,
                };
                let taken = kit::take_due(&mut queue, clock.now());
                assert!(matches!(taken, Ok(kit::Due::Message(..))));
            }
            txn.commit().expect("commit");
            assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 1);
            assert_eq!(rows(&thread.test_db(), QUEUE_READY), 0);
        }
        clock.advance(Duration::from_secs(30));
        let mut thread = thread_on(&path, &clock);
        assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 0);
        assert_eq!(rows(&thread.test_db(), QUEUE_READY), 1);
        let take = |thread: &mut GroupState, now| {
            let (command, mut answer) = take_command(now);
            thread.run_group(vec![command]);
            answer.try_recv().expect("answered").expect("take")
        };
        match take(&mut thread, clock.now()) {
            Taken::NextAt(Some(at)) => {
                assert_eq!(at, clock.now() + chrono::TimeDelta::milliseconds(100));
            }
            _ => panic!("the retry waits for its first interval"),
        }
        clock.advance(Duration::from_millis(100));
        match take(&mut thread, clock.now()) {
            Taken::Message(delivery) => assert_eq!(delivery.hand_over().payload(), vec![7]),
            _ => panic!("the message is delivered again"),
        }
    }

    /// In Immediate mode a write is synced at its commit; a take and a finish are queue
    /// bookkeeping, committed unsynced until the next synced commit or the idle sync.
    #[test]
    fn writes_are_synced_and_queue_bookkeeping_is_not() {
        let (clock, dir) = (
            ManualClock::at_test_epoch(),
            tempfile::tempdir().expect("tempdir"),
        );
        let (mut thread, now) = (thread_on(&dir.path().join("kv.redb"), &clock), clock.now());
        let enqueue = || AtomicWrite {
            enqueues: vec![Enqueue {
                payload: vec![1],
                ready_at: now,
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..Default::default()
        };
        let (command, _answer) = write_command(enqueue(), now);
        thread.run_group(vec![command]);
        assert!(!thread.unsynced.pending(), "an enqueue is a write: synced");

        let (command, mut answer) = take_command(now);
        thread.run_group(vec![command]);
        let Ok(Ok(Taken::Message(delivery))) = answer.try_recv() else {
            panic!("the message is due");
        };
        assert!(thread.unsynced.pending(), "a take is bookkeeping");
        assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 1, "yet committed");
        let ticket = *delivery.ticket().expect("held");
        drop(delivery.hand_over());
        thread.run_group(vec![Change::Settle {
            ticket,
            outcome: DeliveryOutcome::Succeeded,
            now,
            reply: None,
        }]);
        assert!(thread.unsynced.pending(), "so is a finish");
        assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 0);

        let (command, _answer) = write_command(enqueue(), now);
        thread.run_group(vec![command]);
        assert!(!thread.unsynced.pending(), "the next write syncs them all");

        thread.run_group(vec![take_command(now).0]);
        assert!(thread.unsynced.pending());
        thread.sync_if_needed().expect("sync");
        assert!(!thread.unsynced.pending(), "the idle sync");
    }

    /// Expired entries are deleted through the expiry index by the next group after their time,
    /// and an index row made stale by an overwrite deletes nothing.
    #[test]
    fn expired_entries_are_swept_through_the_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::at_test_epoch();
        let mut thread = thread_on(&dir.path().join("kv.redb"), &clock);
        let now = clock.now();
        let expiring = |name: &str, secs: i64| open_deno_kv_engine_kit::Mutation {
            expire_at: Some(now + chrono::TimeDelta::seconds(secs)),
            ..set(name, 1)
        };
        let write = AtomicWrite {
            mutations: vec![expiring("soon", 10), expiring("later", 100), set("kept", 1)],
            ..Default::default()
        };
        let (command, _answer) = write_command(write, now);
        thread.run_group(vec![command]);
        // "later" is rewritten without expiry: its index row goes with the rewrite.
        let (command, _answer) = write_command(
            AtomicWrite {
                mutations: vec![set("later", 2)],
                ..Default::default()
            },
            now,
        );
        thread.run_group(vec![command]);
        let index_rows = |db: &Database| {
            let txn = db.begin_read().expect("read");
            let table = txn.open_table(EXPIRY).expect("table");
            table.iter().expect("iter").count()
        };
        assert_eq!(index_rows(&thread.test_db()), 1);
        assert_eq!(
            thread.next_expiry,
            Some(now + chrono::TimeDelta::seconds(10))
        );

        clock.advance(Duration::from_secs(10));
        thread.idle();
        assert_eq!(stored(&thread.test_db(), "soon"), None, "swept at its time");
        assert_eq!(index_rows(&thread.test_db()), 0);
        assert_eq!(thread.next_expiry, None);
        assert!(stored(&thread.test_db(), "later").is_some());
        assert!(stored(&thread.test_db(), "kept").is_some());
    }

    /// Runs one write of `name` = `n` in its own group and returns its versionstamp's version.
    fn write_one(state: &mut GroupState, name: &str, n: u64, now: DateTime<Utc>) -> u64 {
        let (command, mut answer) = write_command(
            AtomicWrite {
                mutations: vec![set(name, n)],
                ..Default::default()
            },
            now,
        );
        state.run_group(vec![command]);
        let committed = answer.try_recv().expect("answered").expect("write");
        committed.expect("no checks").versionstamp.version()
    }

    fn recorded_ceiling(db: &Database) -> u64 {
        let txn = db.begin_read().expect("read");
        let meta = txn.open_table(schema::META).expect("meta");
        meta.get(schema::META_LAST_VERSION)
            .expect("get")
            .expect("row")
            .value()
    }

    /// Commits write the version ceiling only when they cross it; after a crash (no clean
    /// close) numbering continues above the ceiling, so no version is handed out twice.
    #[test]
    fn after_a_crash_versions_continue_above_the_ceiling() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let mut state = thread_on(&path, &clock);
            assert_eq!(write_one(&mut state, "a", 1, clock.now()), 1);
            assert_eq!(recorded_ceiling(&state.test_db()), 1 + VERSION_RESERVATION);
            assert_eq!(write_one(&mut state, "b", 2, clock.now()), 2);
            assert_eq!(write_one(&mut state, "c", 3, clock.now()), 3);
            assert_eq!(
                recorded_ceiling(&state.test_db()),
                1 + VERSION_RESERVATION,
                "below the ceiling, commits do not touch meta"
            );
            // Dropped without `close`, as a killed process would leave it.
        }
        let mut state = thread_on(&path, &clock);
        let next = write_one(&mut state, "d", 4, clock.now());
        assert_eq!(next, VERSION_RESERVATION + 2);
        assert_eq!(
            recorded_ceiling(&state.test_db()),
            next + VERSION_RESERVATION
        );
    }

    /// A clean close records the exact last version, so the next open continues without a gap.
    #[test]
    fn after_a_clean_close_versions_continue_without_a_gap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let mut state = thread_on(&path, &clock);
            write_one(&mut state, "a", 1, clock.now());
            assert_eq!(write_one(&mut state, "b", 2, clock.now()), 2);
            state.close().expect("close");
            assert_eq!(recorded_ceiling(&state.test_db()), 2);
        }
        let mut state = thread_on(&path, &clock);
        assert_eq!(write_one(&mut state, "c", 3, clock.now()), 3);
    }

    /// A switch of the change log, as its own command.
    fn configure_command(
        retention: Option<Duration>,
    ) -> (Command, oneshot::Receiver<Result<(), KvError>>) {
        let (reply, answer) = oneshot::channel();
        (
            Change::Engine(Own::Configure(Configure { retention, reply })),
            answer,
        )
    }

    fn logged(db: &Database) -> Vec<open_deno_kv_engine_kit::change_log::ChangeRecord> {
        change_log::read(db, Versionstamp::ZERO, 1000).expect("read log")
    }

    /// A switch takes effect between two commands of one group: the write before it is not
    /// logged, the one after it is, and names the one before as its previous commit.
    #[test]
    fn a_switch_applies_to_the_commands_after_it_in_its_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::at_test_epoch();
        let mut state = thread_on(&dir.path().join("kv.redb"), &clock);
        let now = clock.now();
        let one = |name: &str| AtomicWrite {
            mutations: vec![set(name, 1)],
            ..Default::default()
        };
        let (before, _a) = write_command(one("before"), now);
        let (switch, mut switched) = configure_command(Some(Duration::from_secs(60)));
        let (after, _b) = write_command(one("after"), now);
        state.run_group(vec![before, switch, after]);
        switched.try_recv().expect("answered").expect("switched");
        let records = logged(&state.test_db());
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].previous, Versionstamp::from_version(1, 0));
        assert_eq!(records[0].versionstamp, Versionstamp::from_version(2, 0));
        assert!(records[0].changes.writes.contains_key(&k("after")));
    }

    /// After a crash (no clean close, so the file's ceiling is far above the last commit), a
    /// file whose log is on numbers on from its last record: the chain goes on unbroken. With
    /// the log off, numbering continues above the ceiling as before.
    #[test]
    fn after_a_crash_a_logged_file_numbers_on_from_its_last_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let mut state = thread_on(&path, &clock);
            let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
            state.run_group(vec![switch]);
            for n in 1..=3 {
                assert_eq!(write_one(&mut state, "a", n, clock.now()), n);
            }
            // Dropped without `close`, as a killed process would leave it.
        }
        {
            let mut state = thread_on(&path, &clock);
            assert_eq!(write_one(&mut state, "b", 4, clock.now()), 4);
            let records = logged(&state.test_db());
            assert_eq!(records.len(), 4);
            assert_eq!(records[3].previous, records[2].versionstamp);
            let (switch, _answer) = configure_command(None);
            state.run_group(vec![switch]);
            assert_eq!(write_one(&mut state, "c", 5, clock.now()), 5);
            // Crashes again, with the log off.
        }
        // The ceiling the first commit of the first run raised, never crossed since.
        let mut state = thread_on(&path, &clock);
        assert_eq!(
            write_one(&mut state, "d", 6, clock.now()),
            1 + VERSION_RESERVATION + 1
        );
    }

    /// A `Deferred` store may have acknowledged commits a crash lost: even with the log on, it
    /// numbers on above the ceiling after a crash, never reusing a version it may have handed
    /// out (its log then has a gap at the crash).
    #[test]
    fn after_a_crash_a_deferred_store_never_reuses_a_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let mut state = thread_with(&path, &clock, Durability::Deferred);
            let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
            state.run_group(vec![switch]);
            assert_eq!(write_one(&mut state, "a", 1, clock.now()), 1);
            // Dropped without `close`, as a killed process would leave it.
        }
        let mut state = thread_with(&path, &clock, Durability::Deferred);
        assert_eq!(
            write_one(&mut state, "b", 2, clock.now()),
            1 + VERSION_RESERVATION + 1,
            "above the ceiling, not after the last record"
        );
    }

    /// An import is not a commit and leaves no record, only its version as the log's floor: after
    /// a crash, numbering continues above the floor when it is above the last record.
    #[test]
    fn after_a_crash_numbering_continues_above_an_import() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let clock = ManualClock::at_test_epoch();
        {
            let mut state = thread_on(&path, &clock);
            let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
            state.run_group(vec![switch]);
            write_one(&mut state, "a", 1, clock.now());
            // What `backup::import_into` leaves beside its entries.
            let txn = state.test_db().begin_write().expect("txn");
            change_log::note_import(&mut Tables::new(&txn), 50).expect("note");
            txn.commit().expect("commit");
        }
        let mut state = thread_on(&path, &clock);
        assert_eq!(write_one(&mut state, "b", 2, clock.now()), 51);
        let records = logged(&state.test_db());
        assert_eq!(records[1].previous, Versionstamp::from_version(50, 0));
    }
}

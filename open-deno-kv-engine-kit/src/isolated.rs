//! The body of a group for engines that isolate each command inside the group's transaction (a
//! savepoint per command: open-deno-kv-sqlite, and any SQL engine), written once.
//!
//! Such an engine's [`GroupRunner::run_group`](crate::committer::GroupRunner::run_group) opens
//! its transaction, hands the group to [`run_isolated`] with an [`IsolatingTxn`] over that
//! transaction, commits, and ends with [`IsolatedRun::finish`]. The kit dispatches every
//! [`Change`]: a write through the engine's write path, a take of the first due message
//! (guarded at once as a delivery), a settlement; each in its own isolation, kept only when it
//! did something to keep (a write whose checks failed, or a command that failed, is rolled back
//! and leaves no trace), and answered only once the commit decides the group.
//!
//! Engines that cannot roll back one command alone (open-deno-kv-redb) stage each write in an overlay
//! instead, and run their groups themselves.

use chrono::{DateTime, Utc};

use crate::committer::{Answers, Change};
use crate::queue::{DeliveryEngine, DeliveryOutcome, Due};
use crate::{CommitResult, Effects, KvError, Notifier, ValidatedWrite};

/// One group transaction of an engine that isolates each command (see the module docs).
pub trait IsolatingTxn {
    /// How the engine names a stored message; it is also the delivery's ticket.
    type Id: Clone;

    /// Starts isolating one command's work (`SAVEPOINT`).
    fn begin_command(&mut self) -> Result<(), KvError>;

    /// Ends the command's isolation: keeps its work (`RELEASE`) or rolls it back (`ROLLBACK TO`,
    /// then `RELEASE`).
    fn end_command(&mut self, keep: bool) -> Result<(), KvError>;

    /// Runs open-deno-kv-model's write path for `write` as of `now`; `Ok(None)` if a check failed.
    fn write(
        &mut self,
        write: &ValidatedWrite,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<Option<CommitResult>, KvError>;

    /// Takes the first message due at `now` (usually [`crate::queue::take_due`] over the
    /// engine's queue tables, after any housekeeping the engine does first).
    fn take(&mut self, now: DateTime<Utc>, effects: &mut Effects)
    -> Result<Due<Self::Id>, KvError>;

    /// Settles the delivery of message `id` (usually [`crate::queue::settle`]).
    fn settle(
        &mut self,
        id: &Self::Id,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
        effects: &mut Effects,
    ) -> Result<(), KvError>;
}

/// What a group run by [`run_isolated`] leaves for its engine to finish once it has committed
/// (or failed to).
pub struct IsolatedRun<Id> {
    /// Every command's answer, held until the commit decides them.
    pub answers: Answers,
    /// What the group changed, for the watches and queue consumers.
    pub effects: Effects,
    /// The messages the group's takes handed out (held by this handle's consumers once
    /// committed).
    pub taken: Vec<Id>,
    /// The messages the group's settlements let go of.
    pub settled: Vec<Id>,
    /// How many commands kept their work. None (every write failed its check): the engine
    /// rolls the transaction back instead of committing it, so a failed check costs no durable
    /// commit.
    pub kept: usize,
}

/// Runs every command of `group` inside `txn`, each isolated (see the module docs).
pub fn run_isolated<T, E>(txn: &mut T, group: Vec<Change<E>>) -> IsolatedRun<T::Id>
where
    T: IsolatingTxn,
    E: DeliveryEngine<Ticket = T::Id> + ?Sized,
{
    let mut run = IsolatedRun {
        answers: Answers::with_capacity(group.len()),
        effects: Effects::default(),
        taken: Vec::new(),
        settled: Vec::new(),
        kept: 0,
    };
    let (effects, kept) = (&mut run.effects, &mut run.kept);
    for command in group {
        match command {
            Change::Write { write, now, reply } => {
                let result = isolated(txn, kept, Option::is_some, |txn| {
                    txn.write(&write, now, effects)
                });
                run.answers.hold(Some(reply), result);
            }
            Change::Take {
                now, engine, reply, ..
            } => {
                let due = isolated(txn, kept, |_| true, |txn| txn.take(now, effects));
                let taken = due.map(|due| {
                    due.into_taken(engine, |id| {
                        run.taken.push(id.clone());
                        id
                    })
                });
                run.answers.hold(Some(reply), taken);
            }
            Change::Settle {
                ticket: id,
                outcome,
                now,
                reply,
            } => {
                let result = isolated(
                    txn,
                    kept,
                    |_| true,
                    |txn| txn.settle(&id, outcome, now, effects),
                );
                run.settled.push(id);
                run.answers.hold(reply, result);
            }
            Change::Engine(never) => match never {},
        }
    }
    run
}

impl<Id> IsolatedRun<Id> {
    /// Ends the group whose transaction `committed` or not: once committed, `record` learns
    /// which messages were taken and settled, then every command gets its answer and
    /// `notifier` wakes what the group changed; otherwise every command gets the group's error.
    pub fn finish(
        self,
        committed: &Result<(), KvError>,
        notifier: &Notifier,
        record: impl FnOnce(Vec<Id>, Vec<Id>),
    ) {
        if committed.is_ok() {
            record(self.taken, self.settled);
        }
        self.answers.send(committed.as_ref().map(|_| ()));
        if committed.is_ok() {
            notifier.notify(&self.effects);
        }
    }
}

/// Runs `work` in its own isolation: kept (and counted in `kept`) if it returns `Ok` and `keep`
/// says so, rolled back otherwise (a failed check, or an error).
fn isolated<T: IsolatingTxn, R>(
    txn: &mut T,
    kept: &mut usize,
    keep: impl FnOnce(&R) -> bool,
    work: impl FnOnce(&mut T) -> Result<R, KvError>,
) -> Result<R, KvError> {
    txn.begin_command()?;
    let result = work(txn);
    let keeps = matches!(&result, Ok(value) if keep(value));
    txn.end_command(keeps)?;
    *kept += usize::from(keeps);
    result
}

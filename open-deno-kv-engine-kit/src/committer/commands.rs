//! What an engine and its committer agree on: the commands a group runs ([`Command`], and
//! [`Change`], the ones every engine sends), how the engine runs a group ([`GroupRunner`]), and
//! how answers wait for their group's commit ([`Answer`], [`Answers`]).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;

use crate::queue::{DeliveryEngine, DeliveryOutcome, Taken};
use crate::{CommitResult, KvError, ValidatedWrite};

/// How often the standby thread wakes for idle work unless the runner says otherwise.
pub const DEFAULT_IDLE_TICK: Duration = Duration::from_secs(1);

/// Where a command's answer goes.
pub type Reply<T> = oneshot::Sender<Result<T, KvError>>;

/// A change an engine's committer runs inside a group.
pub trait Command: Send + 'static {
    /// Answers the command with `err` without running it (the committer is closed, or the group
    /// could not start).
    fn reject(self, err: KvError);

    /// Whether this command may run on its caller's thread even where that thread must not
    /// block (a current-thread runtime, a `block_on` thread): a command that needs no sync, whose
    /// commit costs microseconds when nothing else is queued. The runner still decides
    /// ([`GroupRunner::try_run_in_place`]). No command by default.
    fn may_run_in_place(&self) -> bool {
        false
    }
}

/// No engine-specific commands (for [`Change`]).
impl Command for std::convert::Infallible {
    fn reject(self, _: KvError) {
        match self {}
    }
}

/// The changes every engine's committer runs: a write, a queue take, a delivery's settlement,
/// and the engine's own commands (`X`; [`std::convert::Infallible`] for none). `E` settles the
/// deliveries the engine hands out.
pub enum Change<E: DeliveryEngine + ?Sized, X = std::convert::Infallible> {
    /// Commit a validated write; the answer is `None` if a check failed.
    Write {
        /// The write, validated by the layer above the engine.
        write: ValidatedWrite,
        /// The time its expiry and queue rules run at.
        now: DateTime<Utc>,
        /// Its answer.
        reply: Reply<Option<CommitResult>>,
    },
    /// Take the first message due at `now` for handle `owner`, guarded by a delivery `engine`
    /// settles (built inside the group: see [`Answer`] for a group that does not commit).
    Take {
        /// The handle that dequeues.
        owner: u64,
        /// The time the message must be due by.
        now: DateTime<Utc>,
        /// Settles the delivery the take creates.
        engine: Arc<E>,
        /// Its answer.
        reply: Reply<Taken<E>>,
    },
    /// End a delivery as `outcome` says.
    Settle {
        /// Which delivery.
        ticket: E::Ticket,
        /// How it ended.
        outcome: DeliveryOutcome,
        /// The time the queue rule runs at.
        now: DateTime<Utc>,
        /// Its answer, if anyone waits.
        reply: Option<Reply<()>>,
    },
    /// A command of the engine's own.
    Engine(X),
}

impl<E: DeliveryEngine + ?Sized, X> Change<E, X> {
    /// Whether this change holds work a crash must not lose, so that the commit of its group
    /// must be synced: a write (its caller is told it is stored), and a failed delivery's
    /// settlement (it may write the message's dead letters). A take, and the settlement of a
    /// message that was handled or never seen, are queue bookkeeping: undone by a crash, the
    /// message is delivered again, never lost ([`crate::queue`], "Queue bookkeeping"). An
    /// engine's own command is counted as needing a sync.
    pub fn must_sync(&self) -> bool {
        match self {
            Change::Write { .. } | Change::Engine(_) => true,
            Change::Take { .. } => false,
            Change::Settle { outcome, .. } => matches!(outcome, DeliveryOutcome::Failed),
        }
    }
}

impl<E: DeliveryEngine + ?Sized, X: Command> Command for Change<E, X> {
    /// Queue bookkeeping ([`Change::must_sync`] false) may run in place.
    fn may_run_in_place(&self) -> bool {
        !self.must_sync()
    }

    fn reject(self, err: KvError) {
        match self {
            Change::Write { reply, .. } => answer(Some(reply), Err(err)),
            Change::Take { reply, .. } => answer(Some(reply), Err(err)),
            Change::Settle { reply, .. } => answer(reply, Err(err)),
            Change::Engine(command) => command.reject(err),
        }
    }
}

/// What an engine supplies to a [`Committer`]: how to run a group of commands in one
/// transaction, and its housekeeping.
pub trait GroupRunner: Send + 'static {
    /// The engine's commands.
    type Command: Command;

    /// Runs `group` in one transaction and answers every command of it (each its own result if
    /// the transaction committed, the transaction's error otherwise; see [`Answers`]). A command
    /// that fails on its own (a failed check, a refused mutation) must leave no trace and must
    /// not fail the others.
    fn run_group(&mut self, group: Vec<Self::Command>);

    /// Runs `command` alone, as a group of one, on the caller's thread, if that costs no wait
    /// now: no lock of another process to wait for, no sync, no housekeeping due (a checkpoint,
    /// a sweep). Otherwise gives it back untouched, and the committer hands it to its standby
    /// thread. Called only for a command whose [`Command::may_run_in_place`] says so, while
    /// nothing else is queued and nobody leads. The default gives every command back.
    ///
    /// This spares queue consumers on a current-thread runtime two thread hops per message
    /// (BENCHMARKS.md, "Queue bookkeeping in place").
    fn try_run_in_place(&mut self, command: Self::Command) -> Result<(), Self::Command> {
        Err(command)
    }

    /// How long the standby thread may sleep before [`GroupRunner::idle`] is due.
    fn idle_timeout(&self) -> Duration {
        DEFAULT_IDLE_TICK
    }

    /// Idle work between groups (sweeps, syncs, polling other processes). Failures are the
    /// runner's to retry: nothing waits on them.
    fn idle(&mut self) {}

    /// The last work, once every queued command has run: make everything durable, let go of the
    /// file. The runner is dropped right after.
    fn close(&mut self) -> Result<(), KvError> {
        Ok(())
    }
}

/// What a command answers with, as far as its group's fate is concerned.
pub trait Answer: Send + 'static {
    /// Called instead of sending the answer when the group's transaction did not commit, for an
    /// answer that stands for something taken in that transaction (a queue delivery).
    fn discard(self)
    where
        Self: Sized,
    {
    }
}

impl Answer for () {}
impl Answer for u64 {}
impl Answer for Option<CommitResult> {}

/// A delivery taken in a transaction that did not commit took nothing: dismissed, not given back.
impl<E: DeliveryEngine + ?Sized> Answer for Taken<E> {
    fn discard(self) {
        if let Taken::Message(delivery) = self {
            delivery.dismiss();
        }
    }
}

type HeldAnswer = Box<dyn FnOnce(Option<&KvError>) + Send>;

/// The answers of one group, held until its commit decides them.
#[derive(Default)]
pub struct Answers {
    held: Vec<HeldAnswer>,
}

impl Answers {
    /// Room for `n` answers.
    pub fn with_capacity(n: usize) -> Self {
        Answers {
            held: Vec::with_capacity(n),
        }
    }

    /// Holds a command's own result for its reply (`None`: nobody waits for it).
    pub fn hold<T: Answer>(&mut self, reply: Option<Reply<T>>, result: Result<T, KvError>) {
        self.held
            .push(Box::new(move |group_error| match group_error {
                None => {
                    // A reply nobody receives any more (its caller was dropped) drops the answer:
                    // a delivery in it gives its message back.
                    if let Some(reply) = reply {
                        let _ = reply.send(result);
                    }
                }
                Some(err) => {
                    if let Ok(answer) = result {
                        answer.discard();
                    }
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }));
    }

    /// Sends every answer: each command's own once the group committed (`Ok`), the group's error
    /// otherwise.
    pub fn send(self, committed: Result<(), &KvError>) {
        let group_error = committed.err();
        for answer in self.held {
            answer(group_error);
        }
    }
}

/// Answers every command of a group that could not start (its transaction did not begin) with
/// `err`, running none of them.
pub fn reject_all<C: Command>(group: Vec<C>, err: &KvError) {
    for command in group {
        command.reject(err.clone());
    }
}

/// Sends `result` to `reply` if anyone waits for it (a helper for [`Command::reject`]).
pub fn answer<T>(reply: Option<Reply<T>>, result: Result<T, KvError>) {
    if let Some(reply) = reply {
        let _ = reply.send(result);
    }
}

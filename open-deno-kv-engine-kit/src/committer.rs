//! The group committer every blocking engine writes through: leader/follower group commit, with
//! no timer to wait for.
//!
//! An engine supplies a [`GroupRunner`]: "run this group of commands in one transaction, then
//! answer each". The [`Committer`] decides who runs a group and when:
//!
//! - **Lead.** A caller whose command finds nobody leading becomes the leader and runs the group
//!   itself, on its own thread: in place on a multi-thread tokio runtime (with
//!   [`crate::run_blocking`], so the worker's other tasks move on), inline outside tokio. A lone
//!   write therefore costs no thread hop and no wake-up. (On a current-thread runtime the standby
//!   thread leads instead: leading from there would cost a hop to the blocking pool anyway.)
//! - **Follow.** A caller whose command finds a leader waits for its answer. The leader takes
//!   every command waiting (up to [`MAX_GROUP`]) as its next group, so commands that arrive while
//!   a commit is syncing share the next commit and its fsync.
//! - **Hand over.** A leader stops once the group holding its own command has run. If more
//!   commands are waiting, it hands the lead to the committer's *standby thread* rather than
//!   keeping its caller busy with other callers' commits.
//! - The standby thread also leads for commands sent without waiting for an answer
//!   ([`Committer::send`], used from `Drop`), and runs the runner's idle work
//!   ([`GroupRunner::idle`]).
//! - **In place.** A command that needs no sync ([`Command::may_run_in_place`]: queue
//!   bookkeeping) and finds nothing queued and nobody leading runs on its caller's thread, on any
//!   runtime, if the runner agrees ([`GroupRunner::try_run_in_place`]); the runner refuses what
//!   would make the caller wait, and the command then goes the usual way.
//!
//! One thread at a time leads, and the runner is touched only by the leader or by the idle work,
//! under its own mutex. Commands run in the order they entered the inbox, so an engine that
//! numbers its commits as it runs them hands out versionstamps in commit order.
//!
//! The lead is never stranded: a lead dropped without having been carried out (a leader's
//! blocking closure that never ran because its runtime was shutting down, a panic while leading)
//! passes to the standby thread. Stopping ([`Committer::stop`]) runs every command already
//! queued, refuses later ones with [`KvError::Closed`], then calls [`GroupRunner::close`] and
//! drops the runner.
//!
//! A runner answers its commands after its commit decides them; [`Answers`] holds each command's
//! answer until then, so a write is acknowledged only once it is as durable as promised, and a
//! group that fails answers every command with the group's error.
//!
//! ```
//! use std::time::Duration;
//! use open_deno_kv_engine_kit::KvError;
//! use open_deno_kv_engine_kit::committer::{Answers, Command, Committer, GroupRunner, Reply};
//!
//! /// An "engine" whose transaction is a counter: each command takes the next number.
//! struct Counter(u64);
//! struct Next(Reply<u64>);
//! impl Command for Next {
//!     fn reject(self, err: KvError) {
//!         let _ = self.0.send(Err(err));
//!     }
//! }
//! impl GroupRunner for Counter {
//!     type Command = Next;
//!     fn run_group(&mut self, group: Vec<Next>) {
//!         let mut answers = Answers::with_capacity(group.len());
//!         for Next(reply) in group {
//!             self.0 += 1;
//!             answers.hold(Some(reply), Ok(self.0));
//!         }
//!         answers.send(Ok(())); // the "commit" succeeded
//!     }
//! }
//!
//! let committer = Committer::start(Counter(0), "counter").unwrap();
//! let first = futures::executor::block_on(committer.ask(Next)).unwrap();
//! assert_eq!(first, 1);
//! committer.stop().unwrap();
//! assert!(matches!(futures::executor::block_on(committer.ask(Next)), Err(KvError::Closed)));
//! ```

mod changes;
mod commands;

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::{KvError, run_blocking};

pub use changes::SettleAtNow;
pub use commands::{
    Answer, Answers, Change, Command, DEFAULT_IDLE_TICK, GroupRunner, Reply, answer, reject_all,
};

/// The most commands one group (one transaction) takes.
pub const MAX_GROUP: usize = 512;
/// How soon the standby thread looks again when a leader held the runner, to keep the idle work
/// on time.
const BUSY_RECHECK: Duration = Duration::from_millis(20);

/// The engine's side of a group committer: see the module docs.
pub struct Committer<R: GroupRunner> {
    core: Arc<Core<R>>,
    standby: Mutex<Option<JoinHandle<()>>>,
}

impl<R: GroupRunner> std::fmt::Debug for Committer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inbox = self.core.inbox();
        f.debug_struct("Committer")
            .field("queued", &inbox.commands.len())
            .field("leading", &inbox.leading)
            .field("closed", &inbox.closed)
            .finish()
    }
}

/// What the leaders, the followers and the standby thread share.
struct Core<R: GroupRunner> {
    inbox: Mutex<Inbox<R::Command>>,
    /// Wakes the standby thread: the lead was handed to it, or the committer closed.
    standby_wake: Condvar,
    /// Wakes [`Committer::stop`] once the committer has closed.
    closed_wake: Condvar,
    /// Locked by the leader for each group, and by the idle work; taken out at close.
    runner: Mutex<Option<R>>,
}

struct Inbox<C> {
    /// Commands not yet taken into a group, in arrival order.
    commands: VecDeque<C>,
    /// A thread leads: it (or the standby thread it hands over to) will take new commands.
    leading: bool,
    /// The lead belongs to the standby thread.
    standby_leads: bool,
    /// A stop was asked for: new commands are refused, the queued ones still run.
    stopping: bool,
    /// The runner has closed: nothing runs any more.
    closed: bool,
    /// What [`GroupRunner::close`] returned, until [`Committer::stop`] takes it.
    close_result: Option<Result<(), KvError>>,
}

/// The right, and the duty, to run groups until a given command has run.
struct Lead<R: GroupRunner> {
    core: Arc<Core<R>>,
    /// How many commands, counted from the front of the inbox when the lead was taken, must run
    /// before the leader may stop (its own command is the last of them).
    until: usize,
    done: bool,
}

impl<R: GroupRunner> Drop for Lead<R> {
    /// A lead dropped before it was carried out goes to the standby thread.
    fn drop(&mut self) {
        if !self.done {
            let mut inbox = self.core.inbox();
            if !inbox.closed {
                inbox.standby_leads = true;
                self.core.standby_wake.notify_one();
            }
        }
    }
}

/// Closes the committer when dropped during a panic, if armed (a group run while stopping: `stop`
/// waits for the close and must not wait forever).
struct CloseOnUnwind<'a, R: GroupRunner> {
    core: &'a Core<R>,
    armed: bool,
}

impl<R: GroupRunner> Drop for CloseOnUnwind<'_, R> {
    fn drop(&mut self) {
        if self.armed && std::thread::panicking() {
            self.core.close(Err(KvError::internal(
                "a group panicked while the committer was stopping",
            )));
        }
    }
}

impl<R: GroupRunner> Core<R> {
    fn inbox(&self) -> MutexGuard<'_, Inbox<R::Command>> {
        // Every change to the inbox is a push, a drain or a flag: a panic elsewhere cannot leave
        // it half-changed.
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn runner(&self) -> MutexGuard<'_, Option<R>> {
        // A panic in a group drops its transaction, which aborts it; the runner keeps what it
        // kept between groups.
        self.runner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `command`. Returns the lead when nobody leads and the caller may lead (it must
    /// then call [`Core::lead`], or drop the lead to give it to the standby thread).
    fn submit(self: &Arc<Self>, command: R::Command, may_lead: bool) -> Option<Lead<R>> {
        let mut inbox = self.inbox();
        if inbox.stopping || inbox.closed {
            drop(inbox);
            command.reject(KvError::Closed);
            return None;
        }
        inbox.commands.push_back(command);
        let until = inbox.commands.len();
        self.take_lead(&mut inbox, may_lead, until)
    }

    /// Takes the lead if nobody has it: for the caller if it may lead, else for the standby
    /// thread.
    fn take_lead(
        self: &Arc<Self>,
        inbox: &mut Inbox<R::Command>,
        may_lead: bool,
        until: usize,
    ) -> Option<Lead<R>> {
        if inbox.leading || inbox.closed {
            return None;
        }
        inbox.leading = true;
        if may_lead {
            Some(Lead {
                core: self.clone(),
                until,
                done: false,
            })
        } else {
            inbox.standby_leads = true;
            self.standby_wake.notify_one();
            None
        }
    }

    /// Runs `command` in place if nothing is queued, nobody leads, the runner is free and it
    /// agrees ([`GroupRunner::try_run_in_place`]); gives it back otherwise. Commands that
    /// arrive meanwhile queue behind it and are handed to the standby thread; a panic in the
    /// runner hands the lead there too (the dropped [`Lead`]).
    fn try_run_in_place(self: &Arc<Self>, command: R::Command) -> Result<(), R::Command> {
        let mut runner = match self.runner.try_lock() {
            Ok(runner) => runner,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Err(command),
        };
        let Some(runner) = runner.as_mut() else {
            return Err(command);
        };
        let mut lead = {
            let mut inbox = self.inbox();
            if inbox.leading || inbox.stopping || inbox.closed || !inbox.commands.is_empty() {
                return Err(command);
            }
            inbox.leading = true;
            Lead {
                core: self.clone(),
                until: 0,
                done: false,
            }
        };
        let declined = runner.try_run_in_place(command).err();
        let mut inbox = self.inbox();
        lead.done = true;
        if let Some(command) = declined {
            // First in line: whatever arrived meanwhile arrived after it.
            inbox.commands.push_front(command);
        }
        if inbox.commands.is_empty() && !inbox.stopping {
            inbox.leading = false;
        } else {
            inbox.standby_leads = true;
            self.standby_wake.notify_one();
        }
        Ok(())
    }

    /// Asks the committer to stop; returns the lead if the caller must run what is queued.
    fn begin_stop(self: &Arc<Self>, may_lead: bool) -> Option<Lead<R>> {
        let mut inbox = self.inbox();
        inbox.stopping = true;
        self.take_lead(&mut inbox, may_lead, usize::MAX)
    }

    /// Runs groups until the commands `lead` covers have run; then gives up the lead, or hands
    /// it to the standby thread if commands are still waiting. Closes the committer when it
    /// finds the inbox empty while stopping.
    fn lead(&self, mut lead: Lead<R>) {
        loop {
            let (group, stopping) = {
                let mut inbox = self.inbox();
                if inbox.closed {
                    lead.done = true;
                    return;
                }
                if inbox.commands.is_empty() {
                    lead.done = true;
                    if inbox.stopping {
                        drop(inbox);
                        let closed = self.runner().take().map_or(Ok(()), |mut r| r.close());
                        self.close(closed);
                    } else {
                        inbox.leading = false;
                        inbox.standby_leads = false;
                    }
                    return;
                }
                if lead.until == 0 {
                    inbox.standby_leads = true;
                    self.standby_wake.notify_one();
                    lead.done = true;
                    return;
                }
                let n = inbox.commands.len().min(MAX_GROUP);
                lead.until = lead.until.saturating_sub(n);
                let group: Vec<R::Command> = inbox.commands.drain(..n).collect();
                (group, inbox.stopping)
            };
            let _close_on_unwind = CloseOnUnwind {
                core: self,
                armed: stopping,
            };
            match self.runner().as_mut() {
                Some(runner) => runner.run_group(group),
                None => group.into_iter().for_each(|c| c.reject(KvError::Closed)),
            }
        }
    }

    /// Marks the committer closed with the runner's last result, drops the runner if it is still
    /// there, answers what is still queued with `Closed`, and wakes the standby thread (to end)
    /// and `stop`.
    fn close(&self, result: Result<(), KvError>) {
        drop(self.runner().take());
        let rest: Vec<R::Command> = {
            let mut inbox = self.inbox();
            inbox.closed = true;
            inbox.stopping = true;
            inbox.leading = false;
            inbox.standby_leads = false;
            inbox.close_result = Some(result);
            inbox.commands.drain(..).collect()
        };
        rest.into_iter().for_each(|c| c.reject(KvError::Closed));
        self.standby_wake.notify_all();
        self.closed_wake.notify_all();
    }

    /// The standby thread: leads when handed the lead, does the idle work in between, and ends
    /// when the committer closes.
    fn standby(self: &Arc<Self>) {
        loop {
            // The idle work's next due time, unless a leader holds the runner right now.
            let timeout = match self.runner.try_lock() {
                Ok(runner) => runner.as_ref().map(GroupRunner::idle_timeout),
                Err(TryLockError::Poisoned(poisoned)) => poisoned
                    .into_inner()
                    .as_ref()
                    .map(GroupRunner::idle_timeout),
                Err(TryLockError::WouldBlock) => Some(BUSY_RECHECK),
            };
            let Some(timeout) = timeout else { return };
            let deadline = Instant::now() + timeout;
            let leads = {
                let mut inbox = self.inbox();
                loop {
                    if inbox.closed {
                        return;
                    }
                    if inbox.standby_leads {
                        break true;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break false;
                    }
                    inbox = self
                        .standby_wake
                        .wait_timeout(inbox, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            };
            // A panic in a group must not end the thread that everything else falls back on;
            // the commands of that group lose their replies (their callers see `Closed`).
            let _ = catch_unwind(AssertUnwindSafe(|| {
                if leads {
                    self.lead(Lead {
                        core: self.clone(),
                        until: usize::MAX,
                        done: false,
                    });
                } else if let Some(runner) = self.runner().as_mut() {
                    runner.idle();
                }
            }));
        }
    }
}

impl<R: GroupRunner> Committer<R> {
    /// Starts a committer on `runner`: its standby thread, named `thread_name`.
    pub fn start(runner: R, thread_name: &str) -> std::io::Result<Self> {
        let core = Arc::new(Core {
            inbox: Mutex::new(Inbox {
                commands: VecDeque::new(),
                leading: false,
                standby_leads: false,
                stopping: false,
                closed: false,
                close_result: None,
            }),
            standby_wake: Condvar::new(),
            closed_wake: Condvar::new(),
            runner: Mutex::new(Some(runner)),
        });
        let standby_core = core.clone();
        let handle = std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || standby_core.standby())?;
        Ok(Committer {
            core,
            standby: Mutex::new(Some(handle)),
        })
    }

    /// Queues a command and waits for its answer, leading the committer if nobody does and the
    /// caller can lead without stalling other writers: a task on a multi-thread tokio runtime's
    /// worker (in place, with `block_in_place`), or a thread outside any tokio runtime (inline).
    ///
    /// Everywhere else the standby thread leads: on a current-thread runtime, and on the thread
    /// that calls a multi-thread runtime's `block_on` (`#[tokio::main] async fn main` joining
    /// many writes). Those threads poll many futures by turns; one that led would block the
    /// thread through the commit, so the other futures could not queue their writes, and every
    /// write would commit alone. Handed to the standby thread, the writes they queue meanwhile
    /// form the next group.
    ///
    /// A command that may run in place ([`Command::may_run_in_place`]: queue bookkeeping) runs
    /// on the caller's thread, whatever drives it, when the committer is idle and the runner
    /// agrees ([`GroupRunner::try_run_in_place`]).
    ///
    /// Dropping the future does not withdraw the command: it still runs, and its answer is
    /// dropped (a queue delivery in it gives its message back).
    pub async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> R::Command) -> Result<T, KvError> {
        let (reply, answer) = oneshot::channel();
        let mut command = make(reply);
        if command.may_run_in_place() {
            match self.core.try_run_in_place(command) {
                Ok(()) => return answer.await.map_err(|_| KvError::Closed)?,
                Err(declined) => command = declined,
            }
        }
        let may_lead = caller_may_lead();
        if let Some(lead) = self.core.submit(command, may_lead) {
            let core = self.core.clone();
            // Should the closure never run, dropping it drops `lead`, which hands the lead on.
            // Either way the command is answered (or its reply dropped, if its group panicked),
            // so the answer below, not this result, says what happened to it.
            let _ = run_blocking(move || {
                core.lead(lead);
                Ok(())
            })
            .await;
        }
        answer.await.map_err(|_| KvError::Closed)?
    }

    /// Queues a command without waiting for it (from `Drop`, which cannot wait): the standby
    /// thread runs it if nobody leads. After a stop it is rejected with [`KvError::Closed`].
    pub fn send(&self, command: R::Command) {
        let _ = self.core.submit(command, false);
    }

    /// Runs every command already queued, refuses later ones, closes the runner
    /// ([`GroupRunner::close`]) and waits for the standby thread to end (blocking). Returns the
    /// close's error, if any; stopping again is harmless.
    pub fn stop(&self) -> Result<(), KvError> {
        if let Some(lead) = self.core.begin_stop(true) {
            self.core.lead(lead);
        }
        let result = {
            let mut inbox = self.core.inbox();
            while !inbox.closed {
                inbox = self
                    .core
                    .closed_wake
                    .wait(inbox)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            inbox.close_result.take().unwrap_or(Ok(()))
        };
        let standby = self
            .standby
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let joined = match standby.map(JoinHandle::join) {
            Some(Err(_)) => Err(KvError::internal("the committer's standby thread panicked")),
            Some(Ok(())) | None => Ok(()),
        };
        result.and(joined)
    }

    /// [`Committer::stop`] without waiting: the standby thread runs what is queued and closes
    /// the runner.
    pub fn stop_in_background(&self) {
        let _ = self.core.begin_stop(false);
    }
}

/// Whether the calling thread may lead a group in place (see [`Committer::ask`]): a task on a
/// multi-thread runtime's worker, or any thread outside a tokio runtime.
fn caller_may_lead() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|handle| handle.runtime_flavor()) {
        // `block_on`'s own future is not a task: only a spawned task has an id.
        Ok(RuntimeFlavor::MultiThread) => tokio::task::try_id().is_some(),
        Ok(_) => false,
        Err(_) => true,
    }
}

impl<R: GroupRunner> Drop for Committer<R> {
    /// A committer dropped without [`Committer::stop`] stops in the background, so its standby
    /// thread ends once the queued commands have run.
    fn drop(&mut self) {
        self.stop_in_background();
    }
}

#[cfg(test)]
mod tests;

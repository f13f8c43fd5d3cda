//! Who commits, and when: the leader/follower protocol in front of [`crate::group`].
//!
//! Every change to the file (a write, taking or settling a queue message, releasing a closing
//! handle's messages, shutting down) is a [`Command`] put in one queue, the *inbox*, and
//! committed by whichever thread *leads* the writer at that moment, one group at a time:
//!
//! - **Lead.** A caller whose command finds nobody leading becomes the leader and runs the group
//!   itself, on its own thread: in place on a multi-thread tokio runtime (with
//!   [`kv_proto::run_blocking`], so the worker's other tasks move on), inline outside tokio. An
//!   uncontended write therefore costs no thread hop and no wake-up: against raw redb at one
//!   writer, those two hops were most of the difference. (On a current-thread runtime the
//!   standby thread leads instead: leading from there would cost a hop to the blocking pool
//!   anyway.)
//! - **Follow.** A caller whose command finds a leader waits for its answer. The leader takes
//!   every command waiting (up to [`MAX_GROUP`]) as its next group, so commands that arrive while
//!   a commit is syncing share the next commit and its fsync (group commit, no timer).
//! - **Hand over.** A leader stops once the group holding its own command has committed. If more
//!   commands are waiting, it hands the lead to the writer's *standby thread* instead of keeping
//!   its caller busy with other callers' commits.
//! - The standby thread also leads for commands sent without waiting for an answer (from `Drop`),
//!   and runs the idle work: expired-entry sweeps, and in [`crate::Durability::Deferred`] mode
//!   the sync at least once a second.
//!
//! One thread at a time leads (the `leading` flag in the inbox), and the group state
//! ([`GroupState`]: last versionstamp, messages held, sweep hint) is only touched by the leader
//! or by the idle work, under its own mutex. Commands run in the order they entered the inbox,
//! so versionstamps are handed out in commit order.
//!
//! The lead is never stranded: [`Lead`] is a guard, and dropped without having led (a leader's
//! blocking closure that never ran because its runtime was shutting down, a panic while leading)
//! it hands the lead to the standby thread.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kv_proto::queue::{DeliveryOutcome, Taken};
use kv_proto::{CommitResult, KvError, ValidatedWrite, run_blocking};
use tokio::sync::oneshot;

use crate::RedbError;
use crate::group::{Command, GroupState, MAX_GROUP, Reply};
use crate::queue::{Engine, Ticket};

/// How soon the standby thread looks again when it could not see the group state (a leader
/// held it), to keep its idle work on time.
const BUSY_RECHECK: Duration = Duration::from_millis(20);

/// The handles' side of the writer.
pub(crate) struct Writer {
    core: Arc<Core>,
    standby: Mutex<Option<JoinHandle<()>>>,
}

/// What the leaders, the followers and the standby thread share.
struct Core {
    inbox: Mutex<Inbox>,
    /// Wakes the standby thread: the lead was handed to it, or the writer closed.
    standby_wake: Condvar,
    /// Wakes [`Writer::stop`] once the shutdown has run.
    closed_wake: Condvar,
    /// The state kept between groups; locked by the leader for each group, and by the idle work.
    /// Taken out by [`Writer::stop`], which releases the file.
    state: Mutex<Option<GroupState>>,
}

#[derive(Default)]
struct Inbox {
    /// Commands not yet taken into a group, in arrival order.
    commands: VecDeque<Command>,
    /// A thread leads: it (or the standby thread it hands over to) will take new commands.
    leading: bool,
    /// The lead belongs to the standby thread.
    standby_leads: bool,
    /// The shutdown has run: new commands are answered [`KvError::Closed`].
    closed: bool,
}

/// The right, and the duty, to run groups until a given command has been committed.
struct Lead {
    core: Arc<Core>,
    /// How many commands, counted from the front of the inbox when the lead was taken, must
    /// be run before the leader may stop (its own command is the last of them).
    until: usize,
    done: bool,
}

impl Drop for Lead {
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

/// Closes the writer when dropped during a panic, if armed (see [`Core::lead`]).
struct CloseOnUnwind<'a> {
    core: &'a Core,
    armed: bool,
}

impl Drop for CloseOnUnwind<'_> {
    fn drop(&mut self) {
        if self.armed && std::thread::panicking() {
            self.core.close();
        }
    }
}

impl Core {
    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        // Every change to the inbox is a push, a drain or a flag: a panic elsewhere cannot leave
        // it half-changed.
        self.inbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn state(&self) -> MutexGuard<'_, Option<GroupState>> {
        // A panic in a group drops its redb transaction, which aborts it; what the state keeps
        // (the last version, held messages, hints) is at worst ahead of the file, never behind.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `command`. Returns the lead when nobody leads and the caller may lead (it must
    /// then call [`Core::lead`], or drop the lead to give it to the standby thread).
    fn submit(self: &Arc<Self>, command: Command, may_lead: bool) -> Option<Lead> {
        let mut inbox = self.inbox();
        if inbox.closed {
            drop(inbox);
            command.reject(KvError::Closed);
            return None;
        }
        inbox.commands.push_back(command);
        if inbox.leading {
            return None;
        }
        inbox.leading = true;
        if may_lead {
            Some(Lead {
                core: self.clone(),
                until: inbox.commands.len(),
                done: false,
            })
        } else {
            inbox.standby_leads = true;
            self.standby_wake.notify_one();
            None
        }
    }

    /// Runs groups until the commands `lead` covers have committed; then gives up the lead, or
    /// hands it to the standby thread if commands are still waiting.
    fn lead(&self, mut lead: Lead) {
        loop {
            let group: Vec<Command> = {
                let mut inbox = self.inbox();
                if inbox.closed || inbox.commands.is_empty() {
                    inbox.leading = false;
                    inbox.standby_leads = false;
                    lead.done = true;
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
                inbox.commands.drain(..n).collect()
            };
            // A group holding the shutdown closes the writer even if it panics: `stop` waits for
            // the close, and must not wait forever.
            let _close_on_unwind = CloseOnUnwind {
                core: self,
                armed: group.iter().any(|c| matches!(c, Command::Shutdown)),
            };
            let stop = match self.state().as_mut() {
                Some(state) => state.run_group(group),
                None => {
                    for command in group {
                        command.reject(KvError::Closed);
                    }
                    true
                }
            };
            if stop {
                self.close();
                lead.done = true;
                return;
            }
        }
    }

    /// After the shutdown: answers what is still queued with `Closed` and wakes the standby
    /// thread (to end) and `stop`.
    fn close(&self) {
        let rest: Vec<Command> = {
            let mut inbox = self.inbox();
            inbox.closed = true;
            inbox.leading = false;
            inbox.standby_leads = false;
            inbox.commands.drain(..).collect()
        };
        for command in rest {
            command.reject(KvError::Closed);
        }
        self.standby_wake.notify_all();
        self.closed_wake.notify_all();
    }

    /// The standby thread: leads when handed the lead, does the idle work in between, and ends
    /// when the writer closes.
    fn standby(self: &Arc<Self>) {
        loop {
            // The idle work's next due time, unless a leader holds the state right now.
            let timeout = match self.state.try_lock() {
                Ok(state) => state.as_ref().map(GroupState::idle_timeout),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    poisoned.into_inner().as_ref().map(GroupState::idle_timeout)
                }
                Err(std::sync::TryLockError::WouldBlock) => Some(BUSY_RECHECK),
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
                } else if let Some(state) = self.state().as_mut() {
                    state.idle();
                }
            }));
        }
    }
}

impl Writer {
    /// Starts the writer of a prepared file (see [`GroupState::prepare`]): its standby thread.
    pub(crate) fn start(state: GroupState) -> Result<Self, KvError> {
        let core = Arc::new(Core {
            inbox: Mutex::new(Inbox::default()),
            standby_wake: Condvar::new(),
            closed_wake: Condvar::new(),
            state: Mutex::new(Some(state)),
        });
        let standby_core = core.clone();
        let handle = std::thread::Builder::new()
            .name("kv-redb-writer".into())
            .spawn(move || standby_core.standby())
            .map_err(RedbError::Thread)?;
        Ok(Writer {
            core,
            standby: Mutex::new(Some(handle)),
        })
    }

    /// Queues a command and waits for its answer, leading the writer if nobody does and the
    /// caller can lead without a thread hop: on a multi-thread tokio runtime (in place), or
    /// outside any tokio runtime (inline, as reads run there). On a current-thread runtime,
    /// leading would mean a hop to the blocking pool anyway, so the standby thread leads.
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, KvError> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let may_lead = matches!(
            Handle::try_current().map(|handle| handle.runtime_flavor()),
            Ok(RuntimeFlavor::MultiThread) | Err(_)
        );
        let (reply, answer) = oneshot::channel();
        if let Some(lead) = self.core.submit(make(reply), may_lead) {
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

    /// Commits a validated write; `Ok(None)` if a check failed.
    pub(crate) async fn write(
        &self,
        write: ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<CommitResult>, KvError> {
        self.ask(|reply| Command::Write { write, now, reply }).await
    }

    /// Hands the first due message to handle `owner`, guarded by a delivery that `engine`
    /// settles.
    pub(crate) async fn take(
        &self,
        owner: u64,
        now: DateTime<Utc>,
        engine: Arc<Engine>,
    ) -> Result<Taken<Engine>, KvError> {
        self.ask(|reply| Command::Take {
            owner,
            now,
            engine,
            reply,
        })
        .await
    }

    /// Settles a delivery as `outcome` says.
    pub(crate) async fn settle(
        &self,
        ticket: Ticket,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        self.ask(|reply| Command::Finish {
            id: ticket.id,
            token: ticket.token,
            outcome,
            now,
            reply: Some(reply),
        })
        .await
    }

    /// [`Writer::settle`] without waiting (from a delivery's `Drop`).
    pub(crate) fn settle_in_background(
        &self,
        ticket: Ticket,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) {
        let command = Command::Finish {
            id: ticket.id,
            token: ticket.token,
            outcome,
            now,
            reply: None,
        };
        self.core.submit(command, false);
    }

    /// Fails every message handle `owner` still holds, and refuses it further messages.
    pub(crate) async fn release(&self, owner: u64, now: DateTime<Utc>) -> Result<(), KvError> {
        self.ask(|reply| Command::Release {
            owner,
            now,
            reply: Some(reply),
        })
        .await
    }

    /// [`Writer::release`] without waiting (a handle dropped without `close`).
    pub(crate) fn release_in_background(&self, owner: u64, now: DateTime<Utc>) {
        let command = Command::Release {
            owner,
            now,
            reply: None,
        };
        self.core.submit(command, false);
    }

    /// Runs every command already queued, then stops the writer, waits for the standby thread,
    /// makes everything durable and lets go of the database (blocking). Returns the error of the
    /// final sync, if any.
    pub(crate) fn stop(&self) -> Result<(), KvError> {
        if let Some(lead) = self.core.submit(Command::Shutdown, true) {
            self.core.lead(lead);
        }
        {
            let mut inbox = self.core.inbox();
            while !inbox.closed {
                inbox = self
                    .core
                    .closed_wake
                    .wait(inbox)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
        let standby = self
            .standby
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let joined = match standby.map(JoinHandle::join) {
            Some(Err(_)) => Err(KvError::storage(std::io::Error::other(
                "the kv-redb writer thread panicked",
            ))),
            Some(Ok(())) | None => Ok(()),
        };
        // Taking the state out drops its reference to the database, so the file can close.
        let state = self.core.state().take();
        let synced = state.map_or(Ok(()), |mut state| state.close());
        joined.and(synced)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use kv_proto::{Clock, ManualClock, Mutation, Versionstamp, encode_key, key};
    use uuid::Uuid;

    use super::*;
    use crate::Durability;
    use crate::snapshot::ReadSnapshot;
    use crate::store::Notifier;

    fn writer_in(dir: &tempfile::TempDir) -> Writer {
        let db = crate::file::DbSlot::open_writable(
            &dir.path().join("kv.redb"),
            Arc::new(crate::file::FileStorage),
            false,
        )
        .expect("open");
        let state = GroupState::prepare(
            Arc::new(db),
            Arc::new(ManualClock::at_test_epoch()),
            Durability::Immediate,
            Arc::new(Notifier::new()),
            Arc::new(ReadSnapshot::default()),
        )
        .expect("prepare");
        Writer::start(state).expect("start")
    }

    fn set(name: &str, n: u64) -> ValidatedWrite {
        let k = encode_key(&key![name, n.cast_signed()]).expect("key");
        let write = kv_proto::AtomicWrite {
            mutations: vec![Mutation::set(k, kv_proto::KvValue::U64(n))],
            ..Default::default()
        };
        kv_proto::Limits::deno()
            .accept_atomic_write(write, now())
            .expect("valid")
    }

    fn now() -> DateTime<Utc> {
        ManualClock::at_test_epoch().now()
    }

    /// A caller that took the lead and never carried it out (its blocking closure dropped, as
    /// when its runtime shuts down) does not strand its command: the standby thread runs it.
    #[test]
    fn a_lead_dropped_unused_passes_to_the_standby_thread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = writer_in(&dir);
        let (reply, answer) = oneshot::channel();
        let command = Command::Write {
            write: set("a", 1),
            now: now(),
            reply,
        };
        let lead = writer.core.submit(command, true);
        assert!(lead.is_some(), "nobody leads, so the caller must");
        drop(lead);
        let committed = answer.blocking_recv().expect("answered").expect("write");
        assert_eq!(
            committed.map(|c| c.versionstamp),
            Some(Versionstamp::from_version(1, 0))
        );
        writer.stop().expect("stop");
    }

    /// Callers on eight OS threads at once, outside any runtime (so each leader commits
    /// inline): every write is answered, versionstamps are all distinct, each caller sees its own
    /// increase, and together they are exactly 1..=N (none skipped, none repeated).
    #[test]
    fn concurrent_callers_each_get_their_own_versionstamp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = Arc::new(writer_in(&dir));
        let per_thread = 40u64;
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    (0..per_thread)
                        .map(|i| {
                            let write = set(&format!("t{t}"), i);
                            let committed = futures::executor::block_on(writer.write(write, now()))
                                .expect("write")
                                .expect("no checks");
                            committed.versionstamp
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all = HashSet::new();
        for thread in threads {
            let stamps = thread.join().expect("thread");
            assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");
            all.extend(stamps);
        }
        let expected: HashSet<_> = (1..=8 * per_thread)
            .map(|v| Versionstamp::from_version(v, 0))
            .collect();
        assert_eq!(all, expected);
        writer.stop().expect("stop");
    }

    /// A command sent without waiting runs with nobody leading (the standby thread takes it),
    /// and before anything sent after it: a handle released in the background gets no message.
    #[test]
    fn background_commands_run_in_order_without_a_caller() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = writer_in(&dir);
        writer.release_in_background(7, now());
        let engine = || Arc::new(crate::queue::SettlesNothing);
        let taken = futures::executor::block_on(writer.take(7, now(), engine())).expect("take");
        assert!(matches!(taken, Taken::Closed));
        let other = futures::executor::block_on(writer.take(8, now(), engine())).expect("take");
        assert!(matches!(other, Taken::NextAt(None)), "the queue is empty");
        writer.stop().expect("stop");
    }

    /// A leader that panics in the group holding the shutdown still closes the writer, so
    /// `stop` (which waits for the close) returns.
    #[test]
    fn a_panic_in_the_shutdown_group_still_closes_the_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = writer_in(&dir);
        let core = writer.core.clone();
        let panicked = std::thread::spawn(move || {
            let _guard = CloseOnUnwind {
                core: &core,
                armed: true,
            };
            panic!("a group failed in a way nobody planned for");
        })
        .join();
        assert!(panicked.is_err());
        assert!(writer.core.inbox().closed);
        writer.stop().expect("stop returns");
        let refused = futures::executor::block_on(writer.write(set("a", 1), now()));
        assert!(matches!(refused, Err(KvError::Closed)), "{refused:?}");
    }

    /// On a current-thread runtime the standby thread leads: writes are answered all the same.
    #[test]
    fn on_a_current_thread_runtime_the_standby_thread_commits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = writer_in(&dir);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let versions = runtime.block_on(async {
            let mut versions = Vec::new();
            for i in 0..5 {
                let committed = writer.write(set("a", i), now()).await.expect("write");
                versions.push(committed.expect("no checks").versionstamp.version());
            }
            versions
        });
        assert_eq!(versions, vec![1, 2, 3, 4, 5]);
        writer.stop().expect("stop");
    }

    /// After `stop`, every command is answered `Closed` (none hangs), and stopping again is
    /// harmless.
    #[test]
    fn commands_after_stop_are_answered_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let writer = writer_in(&dir);
        futures::executor::block_on(writer.write(set("a", 1), now())).expect("write");
        writer.stop().expect("stop");
        let refused = futures::executor::block_on(writer.write(set("b", 2), now()));
        assert!(matches!(refused, Err(KvError::Closed)), "{refused:?}");
        let ticket = Ticket {
            id: Uuid::nil(),
            token: 1,
        };
        writer.settle_in_background(ticket, DeliveryOutcome::Failed, now());
        writer.stop().expect("a second stop");
    }
}

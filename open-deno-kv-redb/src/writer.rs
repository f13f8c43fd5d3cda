//! The handles' side of the file's writer: the commands they send to the kit's group committer
//! ([`open_deno_kv_engine_kit::committer`]), which runs them in groups through [`GroupState`].
//!
//! A write that finds the committer idle is committed by its caller's thread (in place on a
//! multi-thread tokio runtime); writes that arrive meanwhile join the leader's next group, one
//! redb commit and one fsync for all of them. Commands sent from `Drop` (which cannot wait) run on
//! the committer's standby thread, which also does the idle work: expired-entry sweeps and, in
//! [`crate::Durability::Deferred`] mode, the sync at least once a second.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::Clock;
use open_deno_kv_engine_kit::KvError;
use open_deno_kv_engine_kit::committer::{Change, Committer, SettleAtNow};

use crate::RedbError;
use crate::group::{Configure, GroupState, Own, Release};
use crate::queue::Engine;

/// The writer of one open file, shared by its handles: the kit's committer (writes, takes,
/// settlements) and open-deno-kv-redb's own commands ([`Own`]).
pub(crate) struct Writer(Arc<Committer<GroupState>>);

impl Deref for Writer {
    type Target = Committer<GroupState>;

    fn deref(&self) -> &Committer<GroupState> {
        &self.0
    }
}

impl Writer {
    /// Starts the writer of a prepared file (see [`GroupState::prepare`]).
    pub(crate) fn start(state: GroupState) -> Result<Self, KvError> {
        let committer =
            Committer::start(state, "open-deno-kv-redb-writer").map_err(RedbError::Thread)?;
        Ok(Writer(Arc::new(committer)))
    }

    /// The delivery engine of the messages this writer hands out: each is settled through the
    /// writer at `clock`'s now.
    pub(crate) fn deliveries(&self, clock: Arc<dyn Clock>) -> Arc<Engine> {
        Arc::new(SettleAtNow::new(self.0.clone(), clock))
    }

    /// Fails every message handle `owner` still holds, and refuses it further messages.
    pub(crate) async fn release(&self, owner: u64, now: DateTime<Utc>) -> Result<(), KvError> {
        self.ask(|reply| {
            let reply = Some(reply);
            Change::Engine(Own::Release(Release { owner, now, reply }))
        })
        .await
    }

    /// [`Writer::release`] without waiting (a handle dropped without `close`).
    pub(crate) fn release_in_background(&self, owner: u64, now: DateTime<Utc>) {
        let reply = None;
        self.send(Change::Engine(Own::Release(Release { owner, now, reply })));
    }

    /// Switches the change log on with `retention`, or off (see [`crate::change_log`]): in
    /// effect for every command the writer runs after it, so for every commit that starts after
    /// this returns. Dropping the future does not withdraw the switch.
    pub(crate) async fn configure_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        self.ask(|reply| Change::Engine(Own::Configure(Configure { retention, reply })))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use std::sync::Arc;

    use open_deno_kv_engine_kit::queue::{DeliveryOutcome, Taken};
    use open_deno_kv_engine_kit::{
        AtomicWrite, Clock, ManualClock, Mutation, ValidatedWrite, Versionstamp, encode_key, key,
    };
    use uuid::Uuid;

    use super::*;
    use crate::Durability;
    use crate::queue::Ticket;
    use crate::snapshot::ReadSnapshot;

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
            Arc::new(open_deno_kv_engine_kit::Notifier::new()),
            Arc::new(ReadSnapshot::default()),
            Arc::new(crate::commit_clock::CommitClock::default()),
        )
        .expect("prepare");
        Writer::start(state).expect("start")
    }

    fn set(name: &str, n: u64) -> ValidatedWrite {
        let k = encode_key(&key![name, n.cast_signed()]).expect("key");
        let write = AtomicWrite {
            mutations: vec![Mutation::set(k, open_deno_kv_engine_kit::KvValue::U64(n))],
            ..Default::default()
        };
        open_deno_kv_engine_kit::Limits::deno()
            .accept_atomic_write(write, now())
            .expect("valid")
    }

    fn now() -> DateTime<Utc> {
        ManualClock::at_test_epoch().now()
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

//! The batching committer: one task that commits the writes waiting for it in groups, each group
//! in one transaction of the engine.
//!
//! The engine supplies one thing, [`GroupTransaction::run`]: "run this group in one transaction
//! and answer each item". The committer supplies the rest: a caller submits an item and awaits
//! its answer; the task takes the first waiting item, adds every item already waiting (up to a
//! cap) and runs them together. A lone write is run at once — there is no timer — and writes
//! that arrive while a group is committing form the next group, so groups grow with the load by
//! themselves. This is the idea of open-deno-kv-engine-kit's group committer (`committer.rs`:
//! a leader takes everything waiting as its next group), for an async engine; it shares none of
//! that committer's code.
//!
//! When a group woke other tasks than its writers (reads waiting for it), the task yields once
//! before it answers the writers, so that those tasks run first, and once after, so that the
//! writers' tasks run before the next group is taken; when nothing is waiting after a group, the
//! engine hears that the committer is idle ([`GroupTransaction::idle`]).
//!
//! **Cancel safety.** Once submitted, an item is run whether or not its caller still waits: a
//! caller that drops its future loses only the answer, never half a write.

use async_trait::async_trait;
use open_deno_kv_engine_kit::KvError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How many items may wait for the committer before `submit` waits for room.
const INBOX: usize = 4096;

/// The engine's side: how one group is committed.
#[async_trait]
pub(crate) trait GroupTransaction: Send + 'static {
    /// What a caller submits.
    type Item: Send + 'static;
    /// What each caller gets back.
    type Answer: Send + 'static;

    /// Runs `items` in one transaction and returns one answer per item, in order.
    async fn run(&mut self, items: Vec<Self::Item>) -> Vec<Self::Answer>;

    /// Whether the group just run woke tasks other than its writers (readers waiting for it),
    /// which then run before the writers are answered.
    fn woke_others(&self) -> bool {
        false
    }

    /// Nothing is waiting after a group: the committer is about to wait for the next item.
    fn idle(&mut self) {}
}

type Waiting<G> = (
    <G as GroupTransaction>::Item,
    oneshot::Sender<<G as GroupTransaction>::Answer>,
);

/// A handle to a running committer; clones submit to the same task, which ends when every
/// handle is gone.
pub(crate) struct Committer<G: GroupTransaction> {
    inbox: mpsc::Sender<Waiting<G>>,
}

impl<G: GroupTransaction> Clone for Committer<G> {
    fn clone(&self) -> Self {
        Committer {
            inbox: self.inbox.clone(),
        }
    }
}

impl<G: GroupTransaction> Committer<G> {
    /// Starts the committer task on the current runtime; groups hold at most `max_group` items.
    pub(crate) fn start(mut engine: G, max_group: usize) -> (Self, JoinHandle<()>) {
        let (inbox, mut receiver) = mpsc::channel::<Waiting<G>>(INBOX);
        let max_group = max_group.max(1);
        let task = tokio::spawn(async move {
            let mut group = Vec::with_capacity(max_group);
            while receiver.recv_many(&mut group, max_group).await > 0 {
                let (items, replies): (Vec<G::Item>, Vec<_>) = group.drain(..).unzip();
                let answers = engine.run(items).await;
                // The reads the group woke (the `in_flight` module) run before the writers hear
                // back: a check-and-set that read this commit submits its retry first, and the
                // answered writers' own reads then wait for that group instead of racing it.
                let woke_others = engine.woke_others();
                if woke_others {
                    tokio::task::yield_now().await;
                }
                for (reply, answer) in replies.into_iter().zip(answers) {
                    // A caller that stopped waiting only misses its answer.
                    let _ = reply.send(answer);
                }
                // And the writers' tasks run before the next group is taken: a check-and-set that
                // just committed reads the key again at once, and that read, invoked before the
                // next group's COMMIT leaves (at once, when the group is sent in one flight: the
                // `group` module), waits for that group and is answered by its commit.
                if woke_others {
                    tokio::task::yield_now().await;
                }
                if receiver.is_empty() {
                    engine.idle();
                }
            }
        });
        (Committer { inbox }, task)
    }

    /// Submits `item` and waits for its answer. `Err(Closed)` when the committer has stopped.
    pub(crate) async fn submit(&self, item: G::Item) -> Result<G::Answer, KvError> {
        let (reply, answer) = oneshot::channel();
        self.inbox
            .send((item, reply))
            .await
            .map_err(|_| KvError::Closed)?;
        answer.await.map_err(|_| KvError::Closed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records the size of each group and answers each item with itself doubled.
    struct Recorder(Arc<Mutex<Vec<usize>>>);

    #[async_trait]
    impl GroupTransaction for Recorder {
        type Item = u32;
        type Answer = u32;
        async fn run(&mut self, items: Vec<u32>) -> Vec<u32> {
            self.0.lock().unwrap().push(items.len());
            // Long enough for the other callers to queue up behind this group.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            items.into_iter().map(|i| i * 2).collect()
        }
    }

    #[tokio::test]
    async fn a_lone_item_runs_at_once_and_waiting_items_share_a_group() {
        let groups = Arc::new(Mutex::new(Vec::new()));
        let (committer, _task) = Committer::start(Recorder(groups.clone()), 100);
        assert_eq!(committer.submit(21).await.unwrap(), 42);
        let callers: Vec<_> = (0..10)
            .map(|i| {
                let committer = committer.clone();
                tokio::spawn(async move { committer.submit(i).await.unwrap() })
            })
            .collect();
        for (i, caller) in callers.into_iter().enumerate() {
            assert_eq!(caller.await.unwrap(), 2 * i as u32);
        }
        let groups = groups.lock().unwrap().clone();
        assert_eq!(groups[0], 1, "the lone item ran alone");
        assert_eq!(groups.iter().sum::<usize>(), 11);
        assert!(groups.len() < 11, "waiting items were grouped: {groups:?}");
    }
}

//! Point reads of keys that this handle's commit groups are writing, or are about to: they wait
//! for the group, and are answered from what it left when its commit happened during them.
//!
//! A check-and-set loop (read a counter, write it back +1 if its versionstamp is unchanged)
//! read from the server while a group of this handle is writing the same key gets the value
//! *before* that group: the store's state, yet one whose check the group is about to falsify.
//! Under contention that is most reads: each such read costs a round trip, its write a place in
//! the next group, and the loop another read. So a `get` (every range of the read one key) of a
//! key that a write mutates waits when that write is in the group being committed, or submitted
//! to the committer and not yet taken (then for the committer's next attempt, normally the one
//! that commits it). A `get` of a key that the committer's last commit wrote, with nothing of the
//! kind running or queued, first lets the other tasks run once (a yield): the commit has just
//! woken the reads that waited for it, and one of them may be about to submit the retry this read
//! would race. Then:
//!
//! - the group committed, the read was invoked before its `COMMIT` was sent, and the group
//!   decided every key read: the answer is what the group left ([`AfterCommit::read_points`]),
//!   with no round trip. The commit happened during the read's call, under the `kv_meta` row lock
//!   every writer of every process takes, so that state is the store's at an instant inside the
//!   call: the read is linearizable, and the check-and-set that follows it can succeed;
//! - otherwise (the read began after the `COMMIT` was sent, the group failed, or did not decide
//!   every key read) the read goes to the server, as every other read does: after the group, so
//!   it sees that group's commit rather than the state just before it.
//!
//! **The price**: a read of a key this handle wrote last pays one yield; a read that waits takes
//! up to two commits (the group in flight, then the one that
//! takes the write it waits for; each two round trips and a WAL flush) instead of one round
//! trip, and only when this handle is writing that very key at that moment. Reads of other keys,
//! reads with a scan, eventual reads on replicas and other processes' reads never wait. A group
//! that fails releases its readers at once, to the server, which answers (or fails) as it would
//! have; a committer that finds nothing more to run, or stops, releases them all.
//!
//! The keys are kept as hashes: a collision makes a read wait for a group that does not write
//! its key, then read from the server, which is still a correct answer.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{Mutation, MutationKind, ReadRange, ReadRangeOutput};
use tokio::sync::watch;

use crate::after_commit::AfterCommit;
use crate::group::WriteRequest;

/// How an attempt to commit a group ended, as its waiting readers learn it.
#[derive(Debug, Clone)]
enum Decision {
    /// Still running, or not begun.
    Pending,
    /// Committed, leaving this.
    Committed(Arc<AfterCommit>),
    /// Not committed, not known to have committed, or never run: the readers ask the server.
    Released,
}

/// Where the readers of one attempt wait.
type Waiters = Arc<watch::Sender<Decision>>;

fn waiters() -> Waiters {
    Arc::new(watch::channel(Decision::Pending).0)
}

/// Releases `waiters` to the server unless they were answered already.
fn release(waiters: &Waiters) {
    waiters.send_if_modified(|decision| {
        let pending = matches!(decision, Decision::Pending);
        if pending {
            *decision = Decision::Released;
        }
        pending
    });
}

/// One attempt to commit a group, seen by the reads that wait for it.
struct Attempt {
    /// Hashes of every key a write of the group sets, deletes, sums, mins or maxes.
    keys: HashSet<u64>,
    waiters: Waiters,
}

/// The attempt this handle's committer is running and the writes waiting for it; shared by the
/// committer, the writers and the reads.
#[derive(Default)]
pub(crate) struct InFlight {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    current: Option<Arc<Attempt>>,
    /// Hashes of the keys of writes submitted and not yet taken by the committer, with counts.
    queued: HashMap<u64, usize>,
    /// Where reads of queued keys wait: the committer's next attempt.
    next: Option<Waiters>,
    /// The last attempt that committed: the keys it wrote.
    recent: Option<Arc<Attempt>>,
    /// The committer stopped: nothing waits any more.
    closed: bool,
}

/// A write's keys, registered while it waits for the committer ([`InFlight::queue`]); dropped
/// (taken by the committer, or the write abandoned before it was sent), they are not.
pub(crate) struct Queued {
    in_flight: Arc<InFlight>,
    keys: Vec<u64>,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued")
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// The committer's hold on the attempt it published: [`AttemptGuard::committed`] hands the
/// readers what it left; dropped without that (a failure, a cancelled committer), it releases
/// them to the server.
pub(crate) struct AttemptGuard {
    in_flight: Arc<InFlight>,
    attempt: Arc<Attempt>,
}

fn key_hash(key: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// Hashes of the keys `mutations` name (a range delete's and a versionstamped key's are not
/// known by key).
fn hashes<'a>(mutations: impl Iterator<Item = &'a Mutation>) -> impl Iterator<Item = u64> {
    mutations
        .filter(|m| {
            !matches!(
                m.kind,
                MutationKind::DeleteRange { .. } | MutationKind::SetSuffixVersionstampedKey(_)
            )
        })
        .map(|m| key_hash(&m.key))
}

impl Inner {
    fn forget(&mut self, keys: &[u64]) {
        for key in keys {
            if let Some(count) = self.queued.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    self.queued.remove(key);
                }
            }
        }
    }
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the keys `mutations` write, for a write about to be submitted to the committer.
    pub(crate) fn queue(self: &Arc<Self>, mutations: &[Mutation]) -> Queued {
        let keys: Vec<u64> = hashes(mutations.iter()).collect();
        let mut inner = self.lock();
        for key in &keys {
            *inner.queued.entry(*key).or_default() += 1;
        }
        Queued {
            in_flight: self.clone(),
            keys,
        }
    }

    /// The committer takes `items` for a run: their keys are no longer queued. The reads that
    /// waited for them wait on for the committer's next attempt.
    pub(crate) fn take(&self, items: &mut [WriteRequest]) {
        let mut inner = self.lock();
        for item in items {
            if let Some(mut queued) = item.queued.take() {
                inner.forget(&std::mem::take(&mut queued.keys));
            }
        }
    }

    /// Publishes an attempt to commit `items`; point reads of the keys they write wait for it,
    /// and so do the reads that waited for the committer's next attempt.
    pub(crate) fn begin(self: &Arc<Self>, items: &[WriteRequest]) -> AttemptGuard {
        let keys = hashes(items.iter().flat_map(|item| item.write.mutations.iter())).collect();
        let mut inner = self.lock();
        let waiters = inner.next.take().unwrap_or_else(waiters);
        let attempt = Arc::new(Attempt { keys, waiters });
        inner.current = Some(attempt.clone());
        drop(inner);
        AttemptGuard {
            in_flight: self.clone(),
            attempt,
        }
    }

    /// Nothing is waiting for the committer after its last run: the reads waiting for its next
    /// attempt go to the server (the writes they waited for were answered without one).
    pub(crate) fn idle(&self) {
        let mut inner = self.lock();
        if let Some(next) = inner.next.take() {
            release(&next);
        }
    }

    /// The committer stopped: every waiting read goes to the server, and no read waits again.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        if let Some(current) = inner.current.take() {
            release(&current.waiters);
        }
        if let Some(next) = inner.next.take() {
            release(&next);
        }
    }

    /// The answer to a read of `ranges` at `now`, invoked at `invoked`, when a group of this
    /// handle gives it; `None` when the read must go to the server. Waits first for the group
    /// that writes, or is about to write, a key the read gets (see the module documentation).
    /// Cancel-safe: dropped, it only stops waiting.
    pub(crate) async fn read(
        &self,
        ranges: &[ReadRange],
        invoked: Instant,
        now: DateTime<Utc>,
    ) -> Option<Vec<ReadRangeOutput>> {
        let mut yielded = false;
        let mut decision = loop {
            {
                let mut inner = self.lock();
                if inner.closed
                    || (inner.current.is_none()
                        && inner.queued.is_empty()
                        && inner.recent.is_none())
                {
                    return None;
                }
                let keys: Vec<u64> = ranges
                    .iter()
                    .map(|r| r.point_key().map(key_hash))
                    .collect::<Option<_>>()?;
                let writes =
                    |attempt: &&Arc<Attempt>| keys.iter().any(|k| attempt.keys.contains(k));
                if let Some(current) = inner.current.as_ref().filter(writes) {
                    break current.waiters.subscribe();
                }
                if keys.iter().any(|k| inner.queued.contains_key(k)) {
                    break inner.next.get_or_insert_with(waiters).subscribe();
                }
                if yielded || inner.recent.as_ref().filter(writes).is_none() {
                    return None;
                }
            }
            // A key the last commit wrote: a writer of it the commit just woke (a check-and-set
            // about to retry) may be about to submit. Let it run once, then look again.
            yielded = true;
            tokio::task::yield_now().await;
        };
        let decided = decision
            .wait_for(|d| !matches!(d, Decision::Pending))
            .await
            .ok()?
            .clone();
        match decided {
            Decision::Committed(after) => after.read_points(ranges, invoked, now),
            Decision::Pending | Decision::Released => None,
        }
    }
}

impl Drop for Queued {
    /// Abandoned before the committer took it (its submission cancelled or refused): the write's
    /// keys are no longer queued. The reads that waited for it wait for the committer's next
    /// attempt or its idleness, which come: a submission waits only while the committer has
    /// writes to take.
    fn drop(&mut self) {
        if !self.keys.is_empty() {
            self.in_flight.lock().forget(&self.keys);
        }
    }
}

impl AttemptGuard {
    /// The attempt committed, leaving `after`: its waiting readers may be answered from it.
    /// Whether any read was waiting.
    pub(crate) fn committed(self, after: Arc<AfterCommit>) -> bool {
        self.in_flight.lock().recent = Some(self.attempt.clone());
        let woken = self.attempt.waiters.receiver_count() > 0;
        self.attempt
            .waiters
            .send_replace(Decision::Committed(after));
        woken
    }
}

impl Drop for AttemptGuard {
    fn drop(&mut self) {
        release(&self.attempt.waiters);
        let mut inner = self.in_flight.lock();
        if inner
            .current
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &self.attempt))
        {
            inner.current = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::task::Poll;
    use std::time::Duration;

    use open_deno_kv_engine_kit::{
        AtomicWrite, KvValue, Limits, Mutation, StoredEntry, Versionstamp,
    };

    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).expect("time")
    }

    fn key(name: &str) -> Vec<u8> {
        open_deno_kv_engine_kit::encode_key(&open_deno_kv_engine_kit::key![name]).expect("key")
    }

    fn get(name: &str) -> ReadRange {
        ReadRange::single_encoded_key(key(name))
    }

    /// A write that sets `name` to 1.
    fn setting(name: &str) -> WriteRequest {
        let write = AtomicWrite {
            mutations: vec![Mutation::set(key(name), KvValue::U64(1))],
            ..Default::default()
        };
        WriteRequest {
            write: Limits::deno()
                .accept_atomic_write(write, now())
                .expect("valid"),
            now: now(),
            claim: None,
            invoked: Instant::now(),
            queued: None,
        }
    }

    /// What a group that set `name` to 1 at version 9 left, its `COMMIT` sent at `sent`.
    fn left(name: &str, sent: Instant) -> Arc<AfterCommit> {
        let entry = StoredEntry {
            value: KvValue::U64(1),
            versionstamp: Versionstamp::from_version(9, 0),
            expires_at: None,
        };
        Arc::new(AfterCommit::new(
            BTreeMap::from([(key(name), Some(entry))]),
            Vec::new(),
            sent,
        ))
    }

    #[tokio::test]
    async fn a_get_of_a_key_the_group_writes_waits_and_gets_what_it_left() {
        let in_flight = Arc::new(InFlight::default());
        let attempt = in_flight.begin(&[setting("counter")]);
        let ranges = [get("counter")];
        let invoked = Instant::now();
        let mut read = std::pin::pin!(in_flight.read(&ranges, invoked, now()));
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "it waits for the group"
        );
        assert!(
            attempt.committed(left("counter", invoked + Duration::from_millis(1))),
            "a read was waiting"
        );
        let answer = read.await.expect("answered from the commit");
        let entry = &answer[0].entries[0];
        assert_eq!(entry.value, KvValue::U64(1));
        assert_eq!(entry.versionstamp, Versionstamp::from_version(9, 0));
        assert!(in_flight.lock().current.is_none(), "the attempt is over");
    }

    #[tokio::test]
    async fn reads_the_group_does_not_write_never_wait() {
        let in_flight = Arc::new(InFlight::default());
        let counter = [get("counter")];
        let idle = in_flight.read(&counter, Instant::now(), now());
        assert_eq!(futures::poll!(std::pin::pin!(idle)), Poll::Ready(None));
        let _attempt = in_flight.begin(&[setting("counter")]);
        let other = [get("other")];
        let other = in_flight.read(&other, Instant::now(), now());
        assert_eq!(futures::poll!(std::pin::pin!(other)), Poll::Ready(None));
        let scan = ReadRange {
            start: key("a"),
            end: key("z"),
            limit: 10,
            reverse: false,
        };
        let ranges = [scan, get("counter")];
        let scanning = in_flight.read(&ranges, Instant::now(), now());
        assert_eq!(
            futures::poll!(std::pin::pin!(scanning)),
            Poll::Ready(None),
            "a read with a scan goes to the server at once"
        );
    }

    /// After a group that did not commit, or a commit whose `COMMIT` was sent before the read
    /// began, only the server can answer: the read is released to it, after the group.
    #[tokio::test]
    async fn a_failed_group_or_a_late_read_goes_to_the_server_after_the_group() {
        let in_flight = Arc::new(InFlight::default());
        let ranges = [get("counter")];

        let attempt = in_flight.begin(&[setting("counter")]);
        let mut read = std::pin::pin!(in_flight.read(&ranges, Instant::now(), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        drop(attempt);
        assert_eq!(read.await, None, "released by the failure");

        let sent = Instant::now();
        let attempt = in_flight.begin(&[setting("counter")]);
        let mut read =
            std::pin::pin!(in_flight.read(&ranges, sent + Duration::from_millis(1), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        attempt.committed(left("counter", sent));
        assert_eq!(read.await, None, "invoked after the COMMIT was sent");
    }

    /// A write submitted and not yet taken by the committer: a `get` of its key waits for the
    /// first attempt of the run that takes it, and gets what that attempt left.
    #[tokio::test]
    async fn a_get_of_a_key_a_queued_write_sets_waits_for_the_run_that_takes_it() {
        let in_flight = Arc::new(InFlight::default());
        let mut items = vec![setting("counter")];
        items[0].queued = Some(in_flight.queue(&items[0].write.mutations));
        let ranges = [get("counter")];
        let invoked = Instant::now();
        let mut read = std::pin::pin!(in_flight.read(&ranges, invoked, now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        in_flight.take(&mut items);
        assert!(items[0].queued.is_none(), "taken from the queue");
        let attempt = in_flight.begin(&items);
        assert!(futures::poll!(read.as_mut()).is_pending());
        attempt.committed(left("counter", invoked + Duration::from_millis(1)));
        let answer = read.await.expect("answered from the commit");
        assert_eq!(answer[0].entries[0].value, KvValue::U64(1));
        assert!(in_flight.lock().queued.is_empty());
    }

    /// Whatever becomes of the write waited for, the read is released: a run answered without
    /// an attempt, a write abandoned before the committer took it, a committer that stops.
    #[tokio::test]
    async fn a_read_waiting_for_a_queued_write_is_always_released() {
        let in_flight = Arc::new(InFlight::default());
        let ranges = [get("counter")];

        // A run whose writes were all answered by the last commit, then nothing more to run.
        let mut items = vec![setting("counter")];
        items[0].queued = Some(in_flight.queue(&items[0].write.mutations));
        let mut read = std::pin::pin!(in_flight.read(&ranges, Instant::now(), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        in_flight.take(&mut items);
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "waits for an attempt"
        );
        in_flight.idle();
        assert_eq!(read.await, None);

        // Abandoned: its keys are no longer queued; the read waits for the next run.
        let queued = in_flight.queue(&setting("counter").write.mutations);
        let mut read = std::pin::pin!(in_flight.read(&ranges, Instant::now(), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        drop(queued);
        assert!(in_flight.lock().queued.is_empty());
        let idle = in_flight.read(&ranges, Instant::now(), now());
        assert_eq!(
            futures::poll!(std::pin::pin!(idle)),
            Poll::Ready(None),
            "nothing queued"
        );
        in_flight.idle();
        assert_eq!(read.await, None);

        // The committer stops.
        let _queued = in_flight.queue(&setting("counter").write.mutations);
        let mut read = std::pin::pin!(in_flight.read(&ranges, Instant::now(), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        in_flight.close();
        assert_eq!(read.await, None);
        let after = in_flight.read(&ranges, Instant::now(), now());
        assert_eq!(
            futures::poll!(std::pin::pin!(after)),
            Poll::Ready(None),
            "closed"
        );
    }

    /// A `get` of a key the last commit wrote, with nothing running or queued, lets the other
    /// tasks run once: a retry submitted meanwhile is then waited for. Other keys go straight on.
    #[tokio::test]
    async fn a_get_of_a_key_just_written_lets_a_retry_be_submitted_first() {
        let in_flight = Arc::new(InFlight::default());
        let sent = Instant::now();
        let woke = in_flight
            .begin(&[setting("counter")])
            .committed(left("counter", sent));
        assert!(!woke, "nothing was waiting");
        let other = [get("other")];
        let other = in_flight.read(&other, Instant::now(), now());
        assert_eq!(futures::poll!(std::pin::pin!(other)), Poll::Ready(None));

        let ranges = [get("counter")];
        let invoked = Instant::now();
        let mut read = std::pin::pin!(in_flight.read(&ranges, invoked, now()));
        assert!(futures::poll!(read.as_mut()).is_pending(), "it yields once");
        let mut items = vec![setting("counter")];
        items[0].queued = Some(in_flight.queue(&items[0].write.mutations));
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "it waits for the retry"
        );
        in_flight.take(&mut items);
        in_flight
            .begin(&items)
            .committed(left("counter", invoked + Duration::from_millis(1)));
        assert!(read.await.is_some(), "answered by the retry's commit");

        // Nothing submitted during the yield: the server answers.
        let mut read = std::pin::pin!(in_flight.read(&ranges, Instant::now(), now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        assert_eq!(read.await, None);
    }
}

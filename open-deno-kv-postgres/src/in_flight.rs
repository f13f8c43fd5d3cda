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
//! that commits it). Then:
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
//! **Reads of a key just written, with nothing running or queued for it.** When a group ends
//! without a read waiting for it (every loop had a write in it), all the loops read at once, and
//! nothing is in flight for them to wait for. Asked of the server, they would all get the same
//! value and all write, one would win, and the loops would stay in that step: a group and a
//! server read per increment, one after the other. So such a read first lets the other tasks run
//! once (a yield: one of them may be about to submit the retry this read would race), then:
//!
//! - the first goes to the server and *leads* ([`Leading`]); a later read of the same keys waits
//!   for it to be answered, lets its reader run once, and looks again. The leader's reader,
//!   a check-and-set loop, has submitted its write by then: the later read waits for that write's
//!   group as above and is answered by its commit. The loops then take turns: while one group
//!   commits, the loops it does not hold read and are answered by it, and form the next.
//! - when the leader's reader wrote none of the keys, a read that followed it and was invoked
//!   before the leader's statement left takes the leader's answer (the server took that snapshot
//!   inside the follower's call; entries expired at the follower's `now` are left out): a crowd of
//!   readers woken by one commit costs one statement. A later one asks the server itself.
//!
//! **The price**: a read of a key this handle wrote last pays one yield; a read that waits takes
//! up to two commits (the group in flight, then the one that
//! takes the write it waits for; each one or two round trips and a WAL flush) instead of one round
//! trip, and only when this handle is writing that very key at that moment; a read behind a
//! leader invoked after the leader's statement left takes two round trips (the leader's, then its
//! own). Reads of other keys, reads with a scan, eventual reads on replicas and other processes'
//! reads never wait. A group
//! that fails releases its readers at once, to the server, which answers (or fails) as it would
//! have; a committer that finds nothing more to run, or stops, releases them all; a leader that
//! fails or is abandoned releases its followers.
//!
//! The keys are kept as hashes: a collision makes a read wait for a group that does not write
//! its key, then read from the server, which is still a correct answer.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{Mutation, MutationKind, ReadRange, ReadRangeOutput, is_expired};
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
    /// Reads of keys the last commit wrote, on their way to the server: later reads of those
    /// keys wait for them once ([`Leading`]).
    leads: HashMap<u64, Arc<watch::Sender<LeadState>>>,
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

    /// How to answer a read of `ranges` at `now`, invoked at `invoked`: from what a group of
    /// this handle left, from another read's answer, or by the server. Waits first for the group
    /// that writes, or is about to write, a key the read gets, and behind another read of a key
    /// just written (see the module documentation). Cancel-safe: dropped, it only stops waiting.
    pub(crate) async fn read(
        self: &Arc<Self>,
        ranges: &[ReadRange],
        invoked: Instant,
        now: DateTime<Utc>,
    ) -> PointRead {
        let mut yielded = false;
        let mut followed: Option<LeadState> = None;
        let mut decision = loop {
            let lead = {
                let mut inner = self.lock();
                if inner.closed
                    || (inner.current.is_none()
                        && inner.queued.is_empty()
                        && inner.recent.is_none())
                {
                    return PointRead::Server(None);
                }
                let Some(keys) = ranges
                    .iter()
                    .map(|r| r.point_key().map(key_hash))
                    .collect::<Option<Vec<u64>>>()
                else {
                    return PointRead::Server(None);
                };
                let writes =
                    |attempt: &&Arc<Attempt>| keys.iter().any(|k| attempt.keys.contains(k));
                if let Some(current) = inner.current.as_ref().filter(writes) {
                    break current.waiters.subscribe();
                }
                if keys.iter().any(|k| inner.queued.contains_key(k)) {
                    break inner.next.get_or_insert_with(waiters).subscribe();
                }
                if let Some(state) = followed {
                    // The read followed did not lead to a write of these keys.
                    return state.share(ranges, invoked, now);
                }
                if inner.recent.as_ref().filter(writes).is_none() {
                    return PointRead::Server(None);
                }
                if !yielded {
                    None
                } else if let Some(lead) = keys.iter().find_map(|k| inner.leads.get(k)) {
                    Some(lead.subscribe())
                } else {
                    let lead = Arc::new(watch::channel(LeadState::Reading).0);
                    for key in &keys {
                        inner.leads.insert(*key, lead.clone());
                    }
                    return PointRead::Server(Some(Leading {
                        in_flight: self.clone(),
                        keys,
                        lead,
                        sent_after: Instant::now(),
                    }));
                }
            };
            match lead {
                // A key the last commit wrote: a writer of it the commit just woke (a
                // check-and-set about to retry) may be about to submit. Let it run once, then
                // look again.
                None => yielded = true,
                // Another read of it is on its way to the server: its reader may write the key
                // next. Wait for that read, let its reader run once, and look again.
                Some(mut lead) => {
                    let state = match lead
                        .wait_for(|state| !matches!(state, LeadState::Reading))
                        .await
                    {
                        Ok(state) => state.clone(),
                        Err(_) => LeadState::Failed,
                    };
                    followed = Some(state);
                }
            }
            tokio::task::yield_now().await;
        };
        let decided = decision
            .wait_for(|d| !matches!(d, Decision::Pending))
            .await
            .ok()
            .map(|d| d.clone());
        let answer = match decided {
            Some(Decision::Committed(after)) => after.read_points(ranges, invoked, now),
            Some(Decision::Pending | Decision::Released) | None => None,
        };
        match answer {
            Some(answer) => PointRead::Answered(answer),
            None => PointRead::Server(None),
        }
    }
}

/// What the reads behind a [`Leading`] read learn when it is done.
#[derive(Debug, Clone)]
enum LeadState {
    /// On its way to the server.
    Reading,
    /// Answered by the server, which took its snapshot after `sent_after`.
    Answered {
        ranges: Arc<[ReadRange]>,
        outputs: Arc<[ReadRangeOutput]>,
        sent_after: Instant,
    },
    /// Failed or abandoned.
    Failed,
}

impl LeadState {
    /// The answer for a read of `ranges` at `now`, invoked at `invoked`, that followed this one:
    /// its answer when it read the same ranges and its statement left after `invoked` (the
    /// server's snapshot is then an instant inside the follower's call), entries expired at
    /// `now` left out; otherwise the server's.
    fn share(self, ranges: &[ReadRange], invoked: Instant, now: DateTime<Utc>) -> PointRead {
        match self {
            LeadState::Answered {
                ranges: read,
                outputs,
                sent_after,
            } if invoked < sent_after && *read == *ranges => PointRead::Answered(
                outputs
                    .iter()
                    .map(|output| ReadRangeOutput {
                        entries: output
                            .entries
                            .iter()
                            .filter(|entry| !is_expired(entry.expires_at, now))
                            .cloned()
                            .collect(),
                    })
                    .collect(),
            ),
            _ => PointRead::Server(None),
        }
    }
}

/// How a point read is answered ([`InFlight::read`]).
#[derive(Debug)]
pub(crate) enum PointRead {
    /// By what a group of this handle left, committed during the read's call.
    Answered(Vec<ReadRangeOutput>),
    /// By the server. With [`Leading`], the first of several reads of keys the last commit
    /// wrote: the others wait until it is dropped (hold it through the server's answer).
    Server(Option<Leading>),
}

/// A read of keys the last commit wrote, on its way to the server, that other reads of those
/// keys wait for (the module documentation). Hand it the server's answer
/// ([`Leading::answered`]); dropped without it (the read failed or was abandoned), it lets them
/// go on to the server.
pub(crate) struct Leading {
    in_flight: Arc<InFlight>,
    keys: Vec<u64>,
    lead: Arc<watch::Sender<LeadState>>,
    /// Taken before the read's statement was sent.
    sent_after: Instant,
}

impl std::fmt::Debug for Leading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leading")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Leading {
    /// The server answered the read of `ranges` with `outputs`: the reads that followed it may
    /// share them (copied only when one did; a read that follows later finds no lead and asks
    /// the server).
    pub(crate) fn answered(self, ranges: &[ReadRange], outputs: &[ReadRangeOutput]) {
        if self.lead.receiver_count() == 0 {
            return;
        }
        self.lead.send_replace(LeadState::Answered {
            ranges: ranges.into(),
            outputs: outputs.into(),
            sent_after: self.sent_after,
        });
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        let mut inner = self.in_flight.lock();
        for key in &self.keys {
            if inner
                .leads
                .get(key)
                .is_some_and(|lead| Arc::ptr_eq(lead, &self.lead))
            {
                inner.leads.remove(key);
            }
        }
        drop(inner);
        self.lead.send_if_modified(|state| {
            let reading = matches!(state, LeadState::Reading);
            if reading {
                *state = LeadState::Failed;
            }
            reading
        });
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

    /// What [`InFlight::read`] answers without the server; `None` when it sends the read there.
    async fn answer(
        in_flight: &Arc<InFlight>,
        ranges: &[ReadRange],
        invoked: Instant,
    ) -> Option<Vec<ReadRangeOutput>> {
        match in_flight.read(ranges, invoked, now()).await {
            PointRead::Answered(answer) => Some(answer),
            PointRead::Server(_) => None,
        }
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
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, invoked));
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
        let idle = answer(&in_flight, &counter, Instant::now());
        assert_eq!(futures::poll!(std::pin::pin!(idle)), Poll::Ready(None));
        let _attempt = in_flight.begin(&[setting("counter")]);
        let other = [get("other")];
        let other = answer(&in_flight, &other, Instant::now());
        assert_eq!(futures::poll!(std::pin::pin!(other)), Poll::Ready(None));
        let scan = ReadRange {
            start: key("a"),
            end: key("z"),
            limit: 10,
            reverse: false,
        };
        let ranges = [scan, get("counter")];
        let scanning = answer(&in_flight, &ranges, Instant::now());
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
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        drop(attempt);
        assert_eq!(read.await, None, "released by the failure");

        let sent = Instant::now();
        let attempt = in_flight.begin(&[setting("counter")]);
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, sent + Duration::from_millis(1)));
        assert!(futures::poll!(read.as_mut()).is_pending());
        attempt.committed(left("counter", sent));
        assert_eq!(read.await, None, "invoked after the COMMIT was sent");
    }

    /// A write submitted and not yet taken by the committer: a `get` of its key waits for the
    /// first attempt of the run that takes it, and gets what that attempt left.
    #[tokio::test]
    async fn a_get_of_a_key_a_queued_write_sets_waits_for_the_run_that_takes_it() {
        let in_flight = Arc::new(InFlight::default());
        let mut items = queued_setting(&in_flight, "counter");
        let ranges = [get("counter")];
        let invoked = Instant::now();
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, invoked));
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
        let mut items = queued_setting(&in_flight, "counter");
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
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
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        drop(queued);
        assert!(in_flight.lock().queued.is_empty());
        let idle = answer(&in_flight, &ranges, Instant::now());
        assert_eq!(
            futures::poll!(std::pin::pin!(idle)),
            Poll::Ready(None),
            "nothing queued"
        );
        in_flight.idle();
        assert_eq!(read.await, None);

        // The committer stops.
        let _queued = in_flight.queue(&setting("counter").write.mutations);
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        in_flight.close();
        assert_eq!(read.await, None);
        let after = answer(&in_flight, &ranges, Instant::now());
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
        let other = answer(&in_flight, &other, Instant::now());
        assert_eq!(futures::poll!(std::pin::pin!(other)), Poll::Ready(None));

        let ranges = [get("counter")];
        let invoked = Instant::now();
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, invoked));
        assert!(futures::poll!(read.as_mut()).is_pending(), "it yields once");
        let mut items = queued_setting(&in_flight, "counter");
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "it waits for the retry"
        );
        take_and_commit(&in_flight, &mut items, invoked);
        assert!(read.await.is_some(), "answered by the retry's commit");

        // Nothing submitted during the yield: the server answers.
        let mut read = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
        assert!(futures::poll!(read.as_mut()).is_pending());
        assert_eq!(read.await, None);
    }

    /// The leading read's answer to a get of `name`: one entry holding 7, expiring at `expires`.
    fn lead_answer(name: &str, expires: Option<DateTime<Utc>>) -> Vec<ReadRangeOutput> {
        let entry = StoredEntry {
            value: KvValue::U64(7),
            versionstamp: Versionstamp::from_version(8, 0),
            expires_at: expires,
        };
        vec![ReadRangeOutput {
            entries: vec![open_deno_kv_engine_kit::KvEntry::from_stored(
                key(name),
                entry,
            )],
        }]
    }

    /// A write setting `name`, submitted to `in_flight` and not yet taken by the committer.
    fn queued_setting(in_flight: &Arc<InFlight>, name: &str) -> Vec<WriteRequest> {
        let mut items = vec![setting(name)];
        items[0].queued = Some(in_flight.queue(&items[0].write.mutations));
        items
    }

    /// The committer takes `items` and commits them, its `COMMIT` sent 1 ms after `invoked`.
    fn take_and_commit(in_flight: &Arc<InFlight>, items: &mut [WriteRequest], invoked: Instant) {
        in_flight.take(items);
        in_flight
            .begin(items)
            .committed(left("counter", invoked + Duration::from_millis(1)));
    }

    /// A handle whose last commit wrote `counter`, with nothing running or queued for it.
    fn just_wrote_counter() -> Arc<InFlight> {
        let in_flight = Arc::new(InFlight::default());
        in_flight
            .begin(&[setting("counter")])
            .committed(left("counter", Instant::now()));
        in_flight
    }

    /// The future of a read that follows a leading one ([`lead_and_follow`]).
    type Follower<'a> = std::pin::Pin<Box<dyn Future<Output = Option<Vec<ReadRangeOutput>>> + 'a>>;

    /// Two reads of `ranges` on `in_flight`, both invoked now and each polled once (both yield):
    /// the first, polled again, goes to the server and leads; the second, invoked at `invoked`,
    /// is handed back to follow it.
    async fn lead_and_follow<'a>(
        in_flight: &'a Arc<InFlight>,
        ranges: &'a [ReadRange],
        invoked: Instant,
    ) -> (Leading, Follower<'a>) {
        let mut first = Box::pin(in_flight.read(ranges, Instant::now(), now()));
        let mut second: Follower<'a> = Box::pin(answer(in_flight, ranges, invoked));
        assert!(
            futures::poll!(first.as_mut()).is_pending(),
            "it yields once"
        );
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "it yields once"
        );
        match first.await {
            PointRead::Server(Some(leading)) => (leading, second),
            other => panic!("expected a leading read, got {other:?}"),
        }
    }

    /// Two reads of a key just written, nothing running or queued for it: the first goes to the
    /// server and leads; the second waits for it, then for the write its reader submits, and is
    /// answered by that write's commit, not by the server.
    #[tokio::test]
    async fn a_read_behind_a_leading_read_waits_for_the_write_its_reader_submits() {
        let in_flight = just_wrote_counter();
        let ranges = [get("counter")];
        let invoked = Instant::now();
        let (leading, mut second) = lead_and_follow(&in_flight, &ranges, invoked).await;
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "it waits for the leading read"
        );
        // The leader's reader, a check-and-set, writes the key it read.
        leading.answered(&ranges, &lead_answer("counter", None));
        let mut items = queued_setting(&in_flight, "counter");
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "it lets the leader's reader run once"
        );
        assert!(
            futures::poll!(second.as_mut()).is_pending(),
            "then waits for the write"
        );
        take_and_commit(&in_flight, &mut items, invoked);
        let answer = second.await.expect("answered by the write's commit");
        assert_eq!(answer[0].entries[0].value, KvValue::U64(1), "what it left");
        assert!(in_flight.lock().leads.is_empty());
    }

    /// When the leader's reader writes none of its keys, a read that followed it and was invoked
    /// before its statement left takes its answer, without the entries expired at its own `now`;
    /// one invoked later asks the server.
    #[tokio::test]
    async fn a_read_behind_a_leader_that_writes_nothing_shares_its_answer() {
        for (expires, shown) in [(None, 1), (Some(now()), 0)] {
            let in_flight = just_wrote_counter();
            let ranges = [get("counter")];
            let (leading, mut early) = lead_and_follow(&in_flight, &ranges, Instant::now()).await;
            let mut late = std::pin::pin!(answer(&in_flight, &ranges, Instant::now()));
            assert!(futures::poll!(late.as_mut()).is_pending(), "it yields once");
            assert!(futures::poll!(late.as_mut()).is_pending(), "it follows");
            assert!(futures::poll!(early.as_mut()).is_pending(), "it follows");
            leading.answered(&ranges, &lead_answer("counter", expires));
            let shared = early.await.expect("the leader's answer");
            assert_eq!(shared[0].entries.len(), shown);
            if shown == 1 {
                assert_eq!(shared[0].entries[0].value, KvValue::U64(7));
            }
            assert_eq!(
                late.await,
                None,
                "invoked after the leader's statement left"
            );
        }
    }

    /// A leading read that fails or is abandoned sends the reads behind it to the server.
    #[tokio::test]
    async fn an_abandoned_leader_sends_its_followers_to_the_server() {
        let in_flight = just_wrote_counter();
        let ranges = [get("counter")];
        let (leading, mut second) = lead_and_follow(&in_flight, &ranges, Instant::now()).await;
        assert!(futures::poll!(second.as_mut()).is_pending(), "it follows");
        drop(leading);
        assert!(in_flight.lock().leads.is_empty(), "no longer leading");
        assert_eq!(second.await, None);
    }
}

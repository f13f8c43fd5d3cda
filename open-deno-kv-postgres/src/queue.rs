//! Queue delivery on PostgreSQL: several processes consume one queue table.
//!
//! A consumer **takes** messages with one statement (`FOR UPDATE SKIP LOCKED`, so consumers
//! never wait for each other) that gives them a *lease*: a random token and a deadline
//! ([`delivery_deadline`]). While this handle holds a message, it renews the deadline every
//! [`open_deno_kv_engine_kit::queue::MESSAGE_KEEPALIVE_INTERVAL`] (the handle's housekeeping task
//! does it). Every later change to the message names its lease, so a stale holder changes
//! nothing:
//!
//! - success deletes it; failure stores the kit's [`Settlement`]: back in the queue after the
//!   next back-off interval, or — no interval left — its payload written to its dead-letter keys
//!   by an ordinary commit that also deletes the message (through the committer, so the version
//!   row is locked first);
//! - a message never seen by a consumer (its dequeue was dropped) is put back as it was;
//! - a lease whose deadline passed belongs to a consumer presumed dead (a process killed while
//!   holding it): the next dequeue anywhere counts a failed delivery *as of the deadline*.
//!
//! ## Batches: what one round trip carries
//!
//! A message used to cost three round trips and two WAL flushes: look for dead consumers' leases,
//! take one message (a synchronous commit), delete it on success (another). Now:
//!
//! - **A take leases a batch** (`LIMIT n`) under one lease token, in the same pipelined round
//!   trip as the look for expired leases and for the next due time. The messages beyond the first
//!   wait in this handle (*prefetched*, leased and renewed like any held message) and the next
//!   dequeues hand them out with no round trip. `n` follows this handle's recent pace: as many as
//!   it handed out in the last [`PREFETCH_WINDOW`], at least one and at most [`MAX_BATCH`]. A fast
//!   consumer thus takes many per round trip, a slow one few, and prefetching keeps only about
//!   20 ms of a consumer's work away from the others. A prefetched message not handed out within
//!   [`PREFETCH_HOLD`] (its consumer stopped asking) is put back for everyone.
//! - **Successes are stored in batches, behind the consumer.** `finish(true)` records the
//!   success and returns; this handle's *finisher* task deletes every success recorded meanwhile
//!   in one statement, a synchronous commit. Until that commit the message stays held (its lease
//!   renewed), and a failed statement (the server restarting) is retried until it succeeds, so a
//!   server crash or restart neither loses nor repeats a finished message. This handle's own
//!   listing (`queued_messages`, `queue_depth`) first waits for the successes recorded before it,
//!   and closing stores them. Only the death of this *process* within that window (a few
//!   milliseconds under load) leaves a finished message to come back when its lease runs out —
//!   the at-least-once rule allows it, as open-deno-kv-redb's unsynced bookkeeping does.
//!
//! The take runs on a task of its own, and its [`Delivery`] guard is made there as soon as the
//! server answers: a dequeue dropped at any point drops the guard, which puts the message back
//! untouched (cancel safety, see [`open_deno_kv_engine_kit::queue`]). A prefetched message is
//! handed out with no await point at all.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use open_deno_kv_engine_kit::queue::{
    Delivery, DeliveryEngine, DeliveryOutcome, IdMap, QueueMessageHandle, QueuedMessage,
    Settlement, Taken, delivery_deadline, next_delivery,
};
use open_deno_kv_engine_kit::{Clock, KvError, ValidatedWrite};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::codec;
use crate::committer::Committer;
use crate::error::pg;
use crate::events::{Events, payload};
use crate::group::{WriteGroup, WriteRequest};
use crate::reader::pooled;
use crate::sql::Sql;

/// The most messages one take leases.
pub(crate) const MAX_BATCH: usize = 512;
/// A take leases as many messages as this handle handed out in this much time before it.
pub(crate) const PREFETCH_WINDOW: Duration = Duration::from_millis(20);
/// A prefetched message not handed out within this time goes back to the queue for every
/// consumer (checked by the housekeeping task every half of it).
pub(crate) const PREFETCH_HOLD: Duration = Duration::from_millis(500);
/// The most successes one statement deletes.
const FINISH_BATCH: usize = 4096;
/// The finisher's first wait after a failed statement; it doubles up to [`FINISH_RETRY_MAX`].
const FINISH_RETRY_FIRST: Duration = Duration::from_millis(20);
/// The finisher's longest wait between attempts.
const FINISH_RETRY_MAX: Duration = Duration::from_secs(1);

/// One delivery: the message and the lease it was handed out under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    id: Uuid,
    lease: Uuid,
}

/// What the queue of a handle works with.
pub(crate) struct QueueContext {
    pub(crate) pool: Pool,
    pub(crate) sql: Arc<Sql>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) events: Arc<Events>,
    /// Dead letters are commits: they lock the version row like every write.
    pub(crate) committer: Committer<WriteGroup>,
    /// This handle's name in notifications.
    pub(crate) origin: String,
}

/// Where a message this handle holds is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Taken ahead, waiting in [`Book::prefetched`] for a dequeue.
    Prefetched,
    /// With a consumer.
    HandedOut,
    /// Finished with success; the finisher has not stored that yet.
    Finished,
}

/// A message taken ahead of its dequeue.
struct Prefetched {
    ticket: Ticket,
    payload: Vec<u8>,
    /// When it was taken (for [`PREFETCH_HOLD`]).
    since: Instant,
}

/// How fast this handle hands messages out, measured between takes.
struct Pace {
    /// When the last take began, or when the answer of a take a dequeue waited for came.
    since: Instant,
    /// Messages handed out since.
    handed: usize,
}

impl Pace {
    /// The size of a take beginning now: the messages handed out since the last take, scaled
    /// to [`PREFETCH_WINDOW`]; then starts measuring again.
    fn next_batch(&mut self, now: Instant) -> usize {
        let elapsed = now
            .saturating_duration_since(self.since)
            .max(Duration::from_micros(1));
        let window = PREFETCH_WINDOW.as_micros();
        let scaled = (self.handed as u128).saturating_mul(window) / elapsed.as_micros();
        *self = Pace {
            since: now,
            handed: 0,
        };
        usize::try_from(scaled).map_or(MAX_BATCH, |n| n.clamp(1, MAX_BATCH))
    }
}

/// Everything this handle holds, under one lock.
struct Book {
    /// Messages this handle took and has not settled: id → (lease, stage).
    held: IdMap<(Uuid, Stage)>,
    /// Taken ahead, in due order.
    prefetched: VecDeque<Prefetched>,
    /// Successes for the finisher, in finish order.
    finished: Vec<Ticket>,
    /// Successes recorded since the handle opened.
    recorded: u64,
    /// Successes the finisher has taken from `finished` (stored, or being stored).
    drained: u64,
    pace: Pace,
    /// The size of the last take, and whether it found that many messages due.
    last_take: (usize, bool),
    /// A take ahead is under way.
    taking_ahead: bool,
    /// Closing: nothing more is handed out, recorded or prefetched.
    closed: bool,
}

impl Book {
    /// Holds leased `messages` in the handle, taken at `since`, for later dequeues to hand out.
    fn prefetch(
        &mut self,
        messages: impl IntoIterator<Item = (i64, Ticket, Vec<u8>)>,
        since: Instant,
    ) {
        for (_, ticket, payload) in messages {
            self.held
                .insert(ticket.id, (ticket.lease, Stage::Prefetched));
            self.prefetched.push_back(Prefetched {
                ticket,
                payload,
                since,
            });
        }
    }

    /// Forgets `ticket` if it is still held in `stage`.
    fn forget(&mut self, ticket: Ticket, stage: Stage) {
        if self.held.get(&ticket.id) == Some(&(ticket.lease, stage)) {
            self.held.remove(&ticket.id);
        }
    }
}

/// How far the finisher got: successes stored, and failed attempts (so a waiter learns of them).
#[derive(Debug, Clone, Copy, Default)]
struct Stored {
    through: u64,
    failures: u64,
}

/// The queue side of one handle.
pub(crate) struct Queue {
    ctx: QueueContext,
    book: Mutex<Book>,
    /// Settlements from `Drop`, for the settler task.
    settler: mpsc::UnboundedSender<(Ticket, DeliveryOutcome)>,
    /// Wakes the finisher task: successes were recorded.
    finisher: Arc<Notify>,
    /// What the finisher has stored.
    stored: watch::Sender<Stored>,
}

impl Queue {
    /// The queue of a handle, and its two tasks: the settler (deliveries dropped unfinished) and
    /// the finisher (successes, in batches).
    pub(crate) fn start(ctx: QueueContext) -> (Arc<Self>, Vec<JoinHandle<()>>) {
        let (settler, mut inbox) = mpsc::unbounded_channel::<(Ticket, DeliveryOutcome)>();
        let finisher = Arc::new(Notify::new());
        let queue = Arc::new(Queue {
            ctx,
            book: Mutex::new(Book {
                held: IdMap::default(),
                prefetched: VecDeque::new(),
                finished: Vec::new(),
                recorded: 0,
                drained: 0,
                pace: Pace {
                    since: Instant::now(),
                    handed: 0,
                },
                last_take: (0, false),
                taking_ahead: false,
                closed: false,
            }),
            settler,
            finisher: finisher.clone(),
            stored: watch::Sender::new(Stored::default()),
        });
        let weak: Weak<Queue> = Arc::downgrade(&queue);
        let settling = tokio::spawn(async move {
            while let Some((ticket, outcome)) = inbox.recv().await {
                let Some(queue) = weak.upgrade() else { return };
                // A settlement that fails leaves the lease to run out: the message comes back.
                let _ = queue.settle_now(ticket, outcome).await;
            }
        });
        let weak: Weak<Queue> = Arc::downgrade(&queue);
        let finishing = tokio::spawn(async move {
            let mut wait = FINISH_RETRY_FIRST;
            loop {
                finisher.notified().await;
                loop {
                    let Some(queue) = weak.upgrade() else { return };
                    match queue.store_finished().await {
                        Ok(true) => wait = FINISH_RETRY_FIRST,
                        Ok(false) => break,
                        Err(_) => {
                            // Kept and retried: the messages stay held, their leases renewed.
                            drop(queue);
                            tokio::time::sleep(wait).await;
                            wait = (wait * 2).min(FINISH_RETRY_MAX);
                        }
                    }
                }
            }
        });
        (queue, vec![settling, finishing])
    }

    /// Waits for the next due message (see [`open_deno_kv_engine_kit::Backend::dequeue_next_message`]).
    pub(crate) async fn next(
        self: &Arc<Self>,
    ) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        // Other processes' enqueues must wake this wait (the `listener` module).
        let _interested = self.ctx.events.interested();
        next_delivery(
            self.ctx.events.notifier.subscribe_queue(),
            &*self.ctx.clock,
            &self.ctx.events.signal,
            |now| {
                let queue = self.clone();
                async move {
                    if let Some(delivery) = queue.prefetched() {
                        return Ok(Taken::Message(delivery));
                    }
                    // Its own task: a dropped dequeue cannot cut it between the server's answer
                    // and the guard.
                    tokio::spawn(async move { queue.take(now, Hand::Now).await })
                        .await
                        .map_err(KvError::storage)?
                }
            },
        )
        .await
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // Plain inserts and removals: a panic elsewhere cannot leave the book half-changed.
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held_ids(&self) -> Vec<Uuid> {
        self.book().held.keys().copied().collect()
    }

    /// The first prefetched message, handed out (no await point: cancel-safe by construction).
    fn prefetched(self: &Arc<Self>) -> Option<Delivery<Queue>> {
        let mut book = self.book();
        if book.closed {
            return None;
        }
        let Prefetched {
            ticket, payload, ..
        } = book.prefetched.pop_front()?;
        book.held
            .insert(ticket.id, (ticket.lease, Stage::HandedOut));
        book.pace.handed += 1;
        // Half the last full batch handed out: the next one is leased while the rest is.
        let (size, full) = book.last_take;
        if full && size >= 4 && book.prefetched.len() <= size / 2 && !book.taking_ahead {
            book.taking_ahead = true;
            let queue = self.clone();
            tokio::spawn(async move {
                let now = queue.ctx.clock.now();
                // A failed take ahead took nothing: the next dequeue takes for itself.
                let _ = queue.clone().take(now, Hand::Ahead).await;
                queue.book().taking_ahead = false;
            });
        }
        Some(Delivery::new(self.clone(), ticket, payload))
    }

    /// Takes a batch of due messages (the first is returned, the rest prefetched; all of them
    /// prefetched for [`Hand::Ahead`]) and, in the same round trip, what dead consumers left and
    /// when the next message is due.
    async fn take(
        self: Arc<Self>,
        now: DateTime<Utc>,
        hand: Hand,
    ) -> Result<Taken<Queue>, KvError> {
        let client = pooled(&self.ctx.pool).await?;
        let held = self.held_ids();
        let size = self.book().pace.next_batch(Instant::now());
        let batch = i64::try_from(size).unwrap_or(1);
        let now_ms = codec::ms(now);
        let lease = Uuid::new_v4();
        let deadline = codec::ms(delivery_deadline(now));
        let sql = &self.ctx.sql;
        let (expired, take, next) = tokio::try_join!(
            client.prepare_cached(&sql.expired_leases),
            client.prepare_cached(&sql.take_due),
            client.prepare_cached(&sql.next_due),
        )
        .map_err(pg)?;
        // One round trip: the statements run in this order, each its own transaction.
        let expired_params: [&(dyn ToSql + Sync); 2] = [&now_ms, &held];
        let take_params: [&(dyn ToSql + Sync); 4] = [&now_ms, &lease, &deadline, &batch];
        let next_params: [&(dyn ToSql + Sync); 1] = [&held];
        let (expired, taken, next) = tokio::try_join!(
            client.query(&expired, &expired_params),
            client.query(&take, &take_params),
            client.query_one(&next, &next_params),
        )
        .map_err(pg)?;

        // The taken messages first: they are leased to this handle from here on.
        let mut messages = Vec::with_capacity(taken.len());
        for row in &taken {
            let id: Uuid = row.try_get(0).map_err(pg)?;
            let payload: Vec<u8> = row.try_get(1).map_err(pg)?;
            let ready_at: i64 = row.try_get(2).map_err(pg)?;
            messages.push((ready_at, Ticket { id, lease }, payload));
        }
        messages.sort_by_key(|(ready_at, ticket, _)| (*ready_at, ticket.id));
        // The guard exists from here on: an error below still gives the message back.
        let found = messages.len();
        let first = match self.keep_taken(messages, (size, found == size), hand) {
            Kept::First(ticket, payload) => Some(Delivery::new(self.clone(), ticket, payload)),
            Kept::Nothing => None,
            Kept::Closed(tickets) => {
                self.release(&client, &tickets).await?;
                return Ok(Taken::Closed);
            }
        };

        for row in expired {
            let stored = codec::message(&row)?;
            if let Some((lease, deadline)) = stored.lease {
                let ticket = Ticket {
                    id: stored.message.id,
                    lease,
                };
                self.fail(&client, &stored.message, ticket, deadline)
                    .await?;
            }
        }

        if let Some(delivery) = first {
            return Ok(Taken::Message(delivery));
        }
        let ready: Option<i64> = next.try_get(0).map_err(pg)?;
        let deadline: Option<i64> = next.try_get(1).map_err(pg)?;
        let next_at = match (ready, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Taken::NextAt(next_at.map(codec::time).transpose()?))
    }

    /// Records the messages a take leased (in due order): the first handed out, the rest
    /// prefetched.
    fn keep_taken(
        &self,
        messages: Vec<(i64, Ticket, Vec<u8>)>,
        take: (usize, bool),
        hand: Hand,
    ) -> Kept {
        let mut book = self.book();
        if book.closed {
            return Kept::Closed(messages.into_iter().map(|(_, t, _)| t).collect());
        }
        book.last_take = take;
        if hand == Hand::Ahead {
            let any = !messages.is_empty();
            book.prefetch(messages, Instant::now());
            drop(book);
            if any {
                // A consumer that found nothing a moment ago looks again.
                self.ctx.events.notifier.bump_queue();
            }
            return Kept::Nothing;
        }
        let mut messages = messages.into_iter();
        let Some((_, first, payload)) = messages.next() else {
            return Kept::Nothing;
        };
        book.held.insert(first.id, (first.lease, Stage::HandedOut));
        let since = Instant::now();
        // A dequeue waited for this take: the consumer's pace is measured from here, so the
        // time the take itself took does not count as the consumer's.
        book.pace = Pace { since, handed: 1 };
        book.prefetch(messages, since);
        Kept::First(first, payload)
    }

    /// A failed delivery of `message` under `ticket`, as of `at`: stores the kit's
    /// [`Settlement`] — retry later, dead-letter, or (no retry and no dead-letter key) forget.
    async fn fail(
        &self,
        client: &impl GenericClient,
        message: &QueuedMessage,
        ticket: Ticket,
        at: DateTime<Utc>,
    ) -> Result<(), KvError> {
        match Settlement::of(message, DeliveryOutcome::Failed, at) {
            Settlement::Requeue(next) => {
                let statement = client
                    .prepare_cached(&self.ctx.sql.retry_leased)
                    .await
                    .map_err(pg)?;
                let backoff = codec::backoff_column(&next.backoff_schedule);
                let note = payload(&self.ctx.origin, false, true);
                client
                    .query(
                        &statement,
                        &[
                            &ticket.id,
                            &ticket.lease,
                            &codec::ms(next.ready_at),
                            &backoff,
                            &self.ctx.sql.channel,
                            &note,
                        ],
                    )
                    .await
                    .map_err(pg)?;
                self.ctx.events.notifier.bump_queue();
                Ok(())
            }
            Settlement::DeadLetter(write) => self.dead_letter(ticket, write).await,
            Settlement::Forget => self.delete(client, &[ticket]).await,
        }
    }

    /// Commits `write` (a dead letter) and deletes the message under `ticket` in the same
    /// transaction, through the committer, so the version row is locked first as for every write.
    async fn dead_letter(&self, ticket: Ticket, write: ValidatedWrite) -> Result<(), KvError> {
        let request = WriteRequest {
            write,
            now: self.ctx.clock.now(),
            claim: Some((ticket.id, ticket.lease)),
            invoked: Instant::now(),
            queued: None,
        };
        self.ctx.committer.submit(request).await?.map(drop)
    }

    /// Deletes the messages under `tickets` (those whose lease was lost meanwhile stay).
    async fn delete(&self, client: &impl GenericClient, tickets: &[Ticket]) -> Result<(), KvError> {
        let statement = client
            .prepare_cached(&self.ctx.sql.delete_leased_many)
            .await
            .map_err(pg)?;
        let (ids, leases): (Vec<Uuid>, Vec<Uuid>) = tickets.iter().map(|t| (t.id, t.lease)).unzip();
        client
            .execute(&statement, &[&ids, &leases])
            .await
            .map_err(pg)?;
        Ok(())
    }

    /// Puts the messages under `tickets` back untouched (those whose lease was lost meanwhile
    /// stay as they are), due now at the latest, and wakes the consumers of every process.
    async fn release(
        &self,
        client: &impl GenericClient,
        tickets: &[Ticket],
    ) -> Result<(), KvError> {
        if tickets.is_empty() {
            return Ok(());
        }
        let sql = &self.ctx.sql;
        let statement = client
            .prepare_cached(&sql.release_leased)
            .await
            .map_err(pg)?;
        let (ids, leases): (Vec<Uuid>, Vec<Uuid>) = tickets.iter().map(|t| (t.id, t.lease)).unzip();
        let now = codec::ms(self.ctx.clock.now());
        let note = payload(&self.ctx.origin, false, true);
        client
            .query(&statement, &[&ids, &leases, &now, &sql.channel, &note])
            .await
            .map_err(pg)?;
        self.ctx.events.notifier.bump_queue();
        Ok(())
    }

    /// Stores how a delivery ended (unless its lease was lost meanwhile: then someone else
    /// already settled it).
    async fn settle_now(&self, ticket: Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let client = pooled(&self.ctx.pool).await?;
        match outcome {
            DeliveryOutcome::Succeeded => self.delete(&client, &[ticket]).await?,
            DeliveryOutcome::Undelivered => self.release(&client, &[ticket]).await?,
            DeliveryOutcome::Failed => {
                let statement = client
                    .prepare_cached(&self.ctx.sql.leased_message)
                    .await
                    .map_err(pg)?;
                let rows = client
                    .query(&statement, &[&ticket.id, &ticket.lease])
                    .await
                    .map_err(pg)?;
                if let Some(row) = rows.first() {
                    let stored = codec::message(row)?;
                    self.fail(&client, &stored.message, ticket, self.ctx.clock.now())
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the next batch of recorded successes; `Ok(false)` when there was none. A failed
    /// statement puts its batch back in front, for the next attempt.
    async fn store_finished(&self) -> Result<bool, KvError> {
        let (batch, through) = {
            let mut book = self.book();
            if book.finished.is_empty() {
                return Ok(false);
            }
            let n = book.finished.len().min(FINISH_BATCH);
            let batch: Vec<Ticket> = book.finished.drain(..n).collect();
            book.drained += n as u64;
            (batch, book.drained)
        };
        let stored = async {
            let client = pooled(&self.ctx.pool).await?;
            self.delete(&client, &batch).await
        };
        match stored.await {
            Ok(()) => {
                let mut book = self.book();
                for ticket in &batch {
                    book.forget(*ticket, Stage::Finished);
                }
                drop(book);
                self.stored.send_modify(|stored| stored.through = through);
                Ok(true)
            }
            Err(err) => {
                let mut book = self.book();
                book.drained -= batch.len() as u64;
                book.finished.splice(0..0, batch);
                drop(book);
                self.stored.send_modify(|stored| stored.failures += 1);
                Err(err)
            }
        }
    }

    /// Waits until the successes recorded before this call are stored, or until the finisher
    /// fails to store them once (the server is away: the caller's own statement will say so).
    pub(crate) async fn flush_finished(&self) {
        let target = self.book().recorded;
        let mut stored = self.stored.subscribe();
        let failures = stored.borrow().failures;
        // The sender lives as long as the queue: an error cannot happen while `self` is borrowed.
        let _ = stored
            .wait_for(|s| s.through >= target || s.failures > failures)
            .await;
    }

    /// Moves the deadlines of the messages this handle holds [`open_deno_kv_engine_kit::queue::MESSAGE_DEADLINE`] ahead, so
    /// other processes do not take them for a dead consumer's.
    pub(crate) async fn renew_leases(&self) -> Result<(), KvError> {
        let (ids, leases): (Vec<Uuid>, Vec<Uuid>) = self
            .book()
            .held
            .iter()
            .map(|(id, (lease, _))| (*id, *lease))
            .unzip();
        if ids.is_empty() {
            return Ok(());
        }
        let deadline = delivery_deadline(self.ctx.clock.now());
        let client = pooled(&self.ctx.pool).await?;
        let statement = client
            .prepare_cached(&self.ctx.sql.renew_leases)
            .await
            .map_err(pg)?;
        client
            .execute(&statement, &[&ids, &leases, &codec::ms(deadline)])
            .await
            .map_err(pg)?;
        Ok(())
    }

    /// Puts back the prefetched messages that waited longer than [`PREFETCH_HOLD`] for a
    /// dequeue: their consumer stopped asking, and another may be waiting.
    pub(crate) async fn release_stale(&self) -> Result<(), KvError> {
        let stale: Vec<Ticket> = {
            let mut book = self.book();
            let now = Instant::now();
            let fresh = book
                .prefetched
                .iter()
                .position(|p| now.saturating_duration_since(p.since) < PREFETCH_HOLD)
                .unwrap_or(book.prefetched.len());
            let stale: Vec<Ticket> = book.prefetched.drain(..fresh).map(|p| p.ticket).collect();
            for ticket in &stale {
                book.forget(*ticket, Stage::Prefetched);
            }
            stale
        };
        if stale.is_empty() {
            return Ok(());
        }
        let client = pooled(&self.ctx.pool).await?;
        // Not stored (the server is away): their leases run out and they come back then.
        self.release(&client, &stale).await
    }

    /// Closes the queue side of the handle: stores the successes not stored yet, puts the
    /// prefetched messages back untouched, and counts a failed delivery for every message still
    /// with a consumer: each comes back after its next back-off interval, or goes to its
    /// dead-letter keys, instead of waiting for its lease to run out. A delivery settled later
    /// through its handle changes nothing, as its lease no longer holds.
    pub(crate) async fn close(&self) -> Result<(), KvError> {
        self.shut(true).await
    }

    /// [`Queue::close`]; the messages still with a consumer are failed only if `fail_handed_out`
    /// (else their leases run out, as a crashed consumer's do).
    async fn shut(&self, fail_handed_out: bool) -> Result<(), KvError> {
        let (finished, prefetched, handed_out) = {
            let mut book = self.book();
            book.closed = true;
            book.prefetched.clear();
            book.finished.clear();
            let mut finished = Vec::new();
            let mut prefetched = Vec::new();
            let mut handed_out = Vec::new();
            for (id, (lease, stage)) in book.held.drain() {
                let ticket = Ticket { id, lease };
                match stage {
                    Stage::Finished => finished.push(ticket),
                    Stage::Prefetched => prefetched.push(ticket),
                    Stage::HandedOut => handed_out.push(ticket),
                }
            }
            (finished, prefetched, handed_out)
        };
        let mut first_error = None;
        if !finished.is_empty() || !prefetched.is_empty() {
            // One failure must not keep the others held: each one not stored comes back when
            // its lease runs out.
            match pooled(&self.ctx.pool).await {
                Ok(client) => {
                    if !finished.is_empty()
                        && let Err(err) = self.delete(&client, &finished).await
                    {
                        first_error.get_or_insert(err);
                    }
                    if let Err(err) = self.release(&client, &prefetched).await {
                        first_error.get_or_insert(err);
                    }
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        for ticket in handed_out.into_iter().filter(|_| fail_handed_out) {
            if let Err(err) = self.settle_now(ticket, DeliveryOutcome::Failed).await {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// For a handle dropped without close, on a task of its own: the recorded successes are
    /// stored (else they would come back once their leases ran out) and the prefetched messages
    /// put back; the messages still with a consumer come back when their leases run out (a late
    /// finish through its delivery is stored at once). Needs a tokio runtime; without one, or if
    /// the server cannot be reached, the messages come back when their leases run out.
    pub(crate) fn close_in_background(self: &Arc<Self>) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let queue = self.clone();
            runtime.spawn(async move {
                let _ = queue.shut(false).await;
            });
        }
    }

    /// Records a success for the finisher; `false` if the handle is closing (then it is stored
    /// at once instead). A ticket no longer held (its lease was given up) records nothing.
    fn record_success(&self, ticket: Ticket) -> bool {
        let mut guard = self.book();
        let book = &mut *guard;
        if book.closed {
            return false;
        }
        if let Some(held) = book.held.get_mut(&ticket.id)
            && *held == (ticket.lease, Stage::HandedOut)
        {
            held.1 = Stage::Finished;
            book.finished.push(ticket);
            book.recorded += 1;
            drop(guard);
            self.finisher.notify_one();
        }
        true
    }

    /// Forgets `ticket` among the held messages (it is being settled).
    fn let_go(&self, ticket: Ticket) {
        self.book().forget(ticket, Stage::HandedOut);
    }
}

/// Who a take is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hand {
    /// A dequeue waiting for it: the first message is handed out at once.
    Now,
    /// The dequeues to come: every message is prefetched.
    Ahead,
}

/// What a take leased, once recorded.
enum Kept {
    /// The message to hand out now (the rest, if any, are prefetched).
    First(Ticket, Vec<u8>),
    /// Nothing was due.
    Nothing,
    /// The handle closed meanwhile: these go back.
    Closed(Vec<Ticket>),
}

#[async_trait]
impl DeliveryEngine for Queue {
    type Ticket = Ticket;

    async fn settle(&self, ticket: Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        if outcome == DeliveryOutcome::Succeeded && self.record_success(ticket) {
            return Ok(());
        }
        self.let_go(ticket);
        self.settle_now(ticket, outcome).await
    }

    fn settle_in_background(&self, ticket: Ticket, outcome: DeliveryOutcome) {
        self.let_go(ticket);
        // A closed handle's settler is gone: the lease runs out and the message comes back.
        let _ = self.settler.send((ticket, outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pace that handed out `handed` messages in the `elapsed` before `now`.
    fn pace(now: Instant, handed: usize, elapsed: Duration) -> Pace {
        Pace {
            since: now - elapsed,
            handed,
        }
    }

    #[test]
    fn a_take_leases_what_the_consumer_handles_in_the_window() {
        let now = Instant::now() + Duration::from_secs(10);
        // Nothing handed out yet (a new handle, or one that found the queue empty): one.
        assert_eq!(pace(now, 0, Duration::from_secs(3)).next_batch(now), 1);
        // 5 ms per message: four per 20 ms.
        assert_eq!(pace(now, 4, Duration::from_millis(20)).next_batch(now), 4);
        assert_eq!(pace(now, 1, Duration::from_millis(5)).next_batch(now), 4);
        // Thousands per second: the cap.
        assert_eq!(
            pace(now, 100, Duration::from_millis(1)).next_batch(now),
            MAX_BATCH
        );
        // Slower than one per window: still one.
        assert_eq!(pace(now, 1, Duration::from_secs(1)).next_batch(now), 1);
        // The same instant (no time passed): the cap, not a division by zero.
        assert_eq!(pace(now, 3, Duration::ZERO).next_batch(now), MAX_BATCH);
    }

    #[test]
    fn measuring_starts_again_at_each_take() {
        let now = Instant::now() + Duration::from_secs(10);
        let mut pace = pace(now, 50, Duration::from_millis(10));
        assert_eq!(pace.next_batch(now), 100);
        assert_eq!((pace.since, pace.handed), (now, 0));
    }
}

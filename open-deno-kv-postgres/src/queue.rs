//! Queue delivery on PostgreSQL: several processes consume one queue table.
//!
//! A consumer **takes** a message with one statement (`FOR UPDATE SKIP LOCKED`, so consumers
//! never wait for each other) that gives it a *lease*: a random token and a deadline
//! ([`delivery_deadline`]). While the consumer holds the message, this handle renews the deadline
//! every [`open_deno_kv_engine_kit::queue::MESSAGE_KEEPALIVE_INTERVAL`] (the handle's housekeeping task does
//! it). Every later change to the message names its lease, so a stale holder changes nothing:
//!
//! - success deletes it; failure stores the kit's [`Settlement`]: back in the queue after the
//!   next back-off interval, or — no interval left — its payload written to its dead-letter keys
//!   by an ordinary commit that also deletes the message (through the committer, so the version
//!   row is locked first);
//! - a message never seen by a consumer (its dequeue was dropped) is put back as it was;
//! - a lease whose deadline passed belongs to a consumer presumed dead (a process killed while
//!   holding it): the next dequeue anywhere counts a failed delivery *as of the deadline*.
//!
//! The take runs on a task of its own, and its [`Delivery`] guard is made there as soon as the
//! server answers: a dequeue dropped at any point drops the guard, which puts the message back
//! untouched (cancel safety, see [`open_deno_kv_engine_kit::queue`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool};
use open_deno_kv_engine_kit::queue::{
    Delivery, DeliveryEngine, DeliveryOutcome, QueueMessageHandle, QueuedMessage, Settlement,
    Taken, delivery_deadline, next_delivery,
};
use open_deno_kv_engine_kit::{Clock, KvError, ValidatedWrite};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::codec;
use crate::committer::Committer;
use crate::error::pg;
use crate::events::{Events, payload};
use crate::group::{WriteGroup, WriteRequest};
use crate::reader::pooled;
use crate::sql::Sql;

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

/// The queue side of one handle.
pub(crate) struct Queue {
    ctx: QueueContext,
    /// Messages this handle handed out and that are not settled: id → lease.
    held: Mutex<HashMap<Uuid, Uuid>>,
    /// Settlements from `Drop`, for the settler task.
    settler: mpsc::UnboundedSender<(Ticket, DeliveryOutcome)>,
}

impl Queue {
    /// The queue of a handle, and the task that settles deliveries dropped unfinished.
    pub(crate) fn start(ctx: QueueContext) -> (Arc<Self>, JoinHandle<()>) {
        let (settler, mut inbox) = mpsc::unbounded_channel::<(Ticket, DeliveryOutcome)>();
        let queue = Arc::new(Queue {
            ctx,
            held: Mutex::new(HashMap::new()),
            settler,
        });
        let weak: Weak<Queue> = Arc::downgrade(&queue);
        let task = tokio::spawn(async move {
            while let Some((ticket, outcome)) = inbox.recv().await {
                let Some(queue) = weak.upgrade() else { return };
                // A settlement that fails leaves the lease to run out: the message comes back.
                let _ = queue.settle_now(ticket, outcome).await;
            }
        });
        (queue, task)
    }

    /// Waits for the next due message (see [`open_deno_kv_engine_kit::Backend::dequeue_next_message`]).
    pub(crate) async fn next(
        self: &Arc<Self>,
    ) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        next_delivery(
            self.ctx.events.notifier.subscribe_queue(),
            &*self.ctx.clock,
            &self.ctx.events.signal,
            |now| {
                let queue = self.clone();
                async move {
                    // Its own task: a dropped dequeue cannot cut it between the server's answer
                    // and the guard.
                    tokio::spawn(async move { queue.take(now).await })
                        .await
                        .map_err(KvError::storage)?
                }
            },
        )
        .await
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Uuid>> {
        // Plain inserts and removals: a panic elsewhere cannot leave the map half-changed.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held_ids(&self) -> Vec<Uuid> {
        self.held().keys().copied().collect()
    }

    /// Requeues what dead consumers left, then takes the first due message.
    async fn take(self: Arc<Self>, now: DateTime<Utc>) -> Result<Taken<Queue>, KvError> {
        let client = pooled(&self.ctx.pool).await?;
        let held = self.held_ids();
        let now_ms = codec::ms(now);

        let expired = client
            .prepare_cached(&self.ctx.sql.expired_leases)
            .await
            .map_err(pg)?;
        for row in client
            .query(&expired, &[&now_ms, &held])
            .await
            .map_err(pg)?
        {
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

        let lease = Uuid::new_v4();
        let deadline = delivery_deadline(now);
        let take = client
            .prepare_cached(&self.ctx.sql.take_due)
            .await
            .map_err(pg)?;
        let rows = client
            .query(&take, &[&now_ms, &lease, &codec::ms(deadline)])
            .await
            .map_err(pg)?;
        if let Some(row) = rows.first() {
            let id: Uuid = row.try_get(0).map_err(pg)?;
            self.held().insert(id, lease);
            let ticket = Ticket { id, lease };
            // The guard exists from here on: an error below still gives the message back.
            let delivery = Delivery::new(self.clone(), ticket, Vec::new());
            let payload: Vec<u8> = row.try_get(1).map_err(pg)?;
            delivery.dismiss();
            return Ok(Taken::Message(Delivery::new(self.clone(), ticket, payload)));
        }

        let next = client
            .prepare_cached(&self.ctx.sql.next_due)
            .await
            .map_err(pg)?;
        let row = client.query_one(&next, &[&held]).await.map_err(pg)?;
        let ready: Option<i64> = row.try_get(0).map_err(pg)?;
        let deadline: Option<i64> = row.try_get(1).map_err(pg)?;
        let next_at = match (ready, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Taken::NextAt(next_at.map(codec::time).transpose()?))
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
            Settlement::Forget => self.delete(client, ticket).await,
        }
    }

    /// Commits `write` (a dead letter) and deletes the message under `ticket` in the same
    /// transaction, through the committer, so the version row is locked first as for every write.
    async fn dead_letter(&self, ticket: Ticket, write: ValidatedWrite) -> Result<(), KvError> {
        let request = WriteRequest {
            write,
            now: self.ctx.clock.now(),
            claim: Some((ticket.id, ticket.lease)),
        };
        self.ctx.committer.submit(request).await?.map(drop)
    }

    /// Deletes the message under `ticket` (unless its lease was lost meanwhile).
    async fn delete(&self, client: &impl GenericClient, ticket: Ticket) -> Result<(), KvError> {
        let statement = client
            .prepare_cached(&self.ctx.sql.delete_leased)
            .await
            .map_err(pg)?;
        client
            .execute(&statement, &[&ticket.id, &ticket.lease])
            .await
            .map_err(pg)?;
        Ok(())
    }

    /// Stores how a delivery ended (unless its lease was lost meanwhile: then someone else
    /// already settled it).
    async fn settle_now(&self, ticket: Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let client = pooled(&self.ctx.pool).await?;
        let sql = &self.ctx.sql;
        match outcome {
            DeliveryOutcome::Succeeded => self.delete(&client, ticket).await?,
            DeliveryOutcome::Undelivered => {
                let statement = client
                    .prepare_cached(&sql.release_leased)
                    .await
                    .map_err(pg)?;
                let now = codec::ms(self.ctx.clock.now());
                let note = payload(&self.ctx.origin, false, true);
                client
                    .query(
                        &statement,
                        &[&ticket.id, &ticket.lease, &now, &sql.channel, &note],
                    )
                    .await
                    .map_err(pg)?;
                self.ctx.events.notifier.bump_queue();
            }
            DeliveryOutcome::Failed => {
                let statement = client
                    .prepare_cached(&sql.leased_message)
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

    /// Moves the deadlines of the messages this handle holds [`open_deno_kv_engine_kit::queue::MESSAGE_DEADLINE`] ahead, so
    /// other processes do not take them for a dead consumer's.
    pub(crate) async fn renew_leases(&self) -> Result<(), KvError> {
        let (ids, leases): (Vec<Uuid>, Vec<Uuid>) =
            self.held().iter().map(|(id, lease)| (*id, *lease)).unzip();
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

    /// Counts a failed delivery for every message this handle still holds (its handle is
    /// closing): each comes back after its next back-off interval, or goes to its dead-letter
    /// keys, instead of waiting for its lease to run out. A delivery settled later through its
    /// handle changes nothing, as its lease no longer holds.
    pub(crate) async fn fail_held(&self) -> Result<(), KvError> {
        let held: Vec<Ticket> = self
            .held()
            .drain()
            .map(|(id, lease)| Ticket { id, lease })
            .collect();
        let mut first_error = None;
        for ticket in held {
            // One failure must not keep the others held: each failed one comes back when its
            // lease runs out.
            if let Err(err) = self.settle_now(ticket, DeliveryOutcome::Failed).await {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Forgets `ticket` among the held messages (it is being settled).
    fn let_go(&self, ticket: Ticket) {
        let mut held = self.held();
        if held.get(&ticket.id) == Some(&ticket.lease) {
            held.remove(&ticket.id);
        }
    }
}

#[async_trait]
impl DeliveryEngine for Queue {
    type Ticket = Ticket;

    async fn settle(&self, ticket: Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        self.let_go(ticket);
        self.settle_now(ticket, outcome).await
    }

    fn settle_in_background(&self, ticket: Ticket, outcome: DeliveryOutcome) {
        self.let_go(ticket);
        // A closed handle's settler is gone: the lease runs out and the message comes back.
        let _ = self.settler.send((ticket, outcome));
    }
}

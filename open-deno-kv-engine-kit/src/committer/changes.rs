//! The changes every engine sends through its committer (a write, a queue take, a settlement),
//! as methods of [`Committer`], and [`SettleAtNow`], the delivery engine that settles a taken
//! message through the committer.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Change, Command, Committer, GroupRunner};
use crate::queue::{DeliveryEngine, DeliveryOutcome, Taken};
use crate::{
    ChangeSignal, Clock, CommitResult, KvError, Notifier, QueueMessageHandle, ValidatedWrite,
};

/// The changes every engine sends, for committers that run [`Change`]s.
impl<R, E, X> Committer<R>
where
    R: GroupRunner<Command = Change<E, X>>,
    E: DeliveryEngine + ?Sized,
    X: Command,
{
    /// Commits a validated write as of `now`; `Ok(None)` if a check failed.
    pub async fn write(
        &self,
        write: ValidatedWrite,
        now: DateTime<Utc>,
    ) -> Result<Option<CommitResult>, KvError> {
        self.ask(|reply| Change::Write { write, now, reply }).await
    }

    /// The dequeue of handle `owner` ([`crate::queue::next_delivery`] over this committer's
    /// takes): waits until a message is due by `clock`, a commit wakes `notifier`'s consumers,
    /// or the handle closes (`closed`, then `Ok(None)`); the message is guarded by a delivery
    /// `engine` settles. Cancel-safe as `next_delivery` is.
    pub async fn next_delivery(
        &self,
        owner: u64,
        engine: Arc<E>,
        notifier: &Notifier,
        clock: &dyn Clock,
        closed: &ChangeSignal,
    ) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let take = |now| self.take(owner, now, engine.clone());
        crate::queue::next_delivery(notifier.subscribe_queue(), clock, closed, take).await
    }

    /// Takes the first message due at `now` for handle `owner`, guarded by a delivery `engine`
    /// settles.
    pub async fn take(
        &self,
        owner: u64,
        now: DateTime<Utc>,
        engine: Arc<E>,
    ) -> Result<Taken<E>, KvError> {
        self.ask(|reply| Change::Take {
            owner,
            now,
            engine,
            reply,
        })
        .await
    }

    /// Ends a delivery as `outcome` says, and waits until that is stored.
    pub async fn settle(
        &self,
        ticket: E::Ticket,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        self.ask(|reply| Change::Settle {
            ticket,
            outcome,
            now,
            reply: Some(reply),
        })
        .await
    }

    /// [`Committer::settle`] without waiting (from a delivery's `Drop`).
    pub fn settle_in_background(
        &self,
        ticket: E::Ticket,
        outcome: DeliveryOutcome,
        now: DateTime<Utc>,
    ) {
        self.send(Change::Settle {
            ticket,
            outcome,
            now,
            reply: None,
        });
    }
}

/// The delivery engine of a committer's deliveries: settles each through the committer, at its
/// clock's time when the consumer settles it (the [`DeliveryEngine`] a [`Change::Take`] carries,
/// for engines whose settlement is a command like any other).
pub struct SettleAtNow<R: GroupRunner> {
    committer: Arc<Committer<R>>,
    clock: Arc<dyn Clock>,
}

impl<R: GroupRunner> SettleAtNow<R> {
    /// Settles through `committer` at `clock`'s now.
    pub fn new(committer: Arc<Committer<R>>, clock: Arc<dyn Clock>) -> Self {
        SettleAtNow { committer, clock }
    }
}

#[async_trait::async_trait]
impl<R, E, X> DeliveryEngine for SettleAtNow<R>
where
    R: GroupRunner<Command = Change<E, X>>,
    E: DeliveryEngine + ?Sized,
    X: Command,
{
    type Ticket = E::Ticket;

    async fn settle(&self, ticket: E::Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let now = self.clock.now();
        self.committer.settle(ticket, outcome, now).await
    }

    /// A stopped committer has given up every delivery it handed out: nothing to do then.
    fn settle_in_background(&self, ticket: E::Ticket, outcome: DeliveryOutcome) {
        let now = self.clock.now();
        self.committer.settle_in_background(ticket, outcome, now);
    }
}

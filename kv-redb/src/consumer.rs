//! Queue delivery on the consumer's side: wait until a message is due (by the injected clock),
//! a message is enqueued or retried, or the handle closes; then take it through the writer, which
//! hands it out as a [`kv_proto::queue::Delivery`] settled through [`RedbDeliveries`].

use std::sync::Arc;

use async_trait::async_trait;
use kv_proto::queue::{DeliveryEngine, DeliveryOutcome};
use kv_proto::{ChangeSignal, Clock, KvError, QueueMessageHandle};

use crate::queue::{Engine, Ticket};
use crate::store::Shared;

/// Settles one handle's deliveries through the file's writer, at the handle's clock's time.
struct RedbDeliveries {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
}

#[async_trait]
impl DeliveryEngine for RedbDeliveries {
    type Ticket = Ticket;

    async fn settle(&self, ticket: Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        let now = self.clock.now();
        self.shared.writer()?.settle(ticket, outcome, now).await
    }

    fn settle_in_background(&self, ticket: Ticket, outcome: DeliveryOutcome) {
        let now = self.clock.now();
        // Only a writable open hands out deliveries, so there is always a writer here.
        if let Ok(writer) = self.shared.writer() {
            writer.settle_in_background(ticket, outcome, now);
        }
    }
}

/// Waits for the next due message and hands it to handle `owner`; `Ok(None)` once the handle is
/// closed.
pub(crate) async fn next_message(
    shared: &Arc<Shared>,
    owner: u64,
    clock: &Arc<dyn Clock>,
    handle_signal: &ChangeSignal,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let engine: Arc<Engine> = Arc::new(RedbDeliveries {
        shared: shared.clone(),
        clock: clock.clone(),
    });
    let (notifier, clock) = (&shared.notifier, &**clock);
    (shared.writer()?)
        .next_delivery(owner, engine, notifier, clock, handle_signal)
        .await
}

//! Queue delivery: wait for the first due message, hand it out as a [`Delivery`], and settle it
//! when the consumer finishes, drops it, or never receives it.

use std::sync::Arc;

use async_trait::async_trait;
use open_deno_kv_engine_kit::queue::{
    Delivery, DeliveryEngine, DeliveryOutcome, Taken, next_delivery,
};
use open_deno_kv_engine_kit::{ChangeSignal, Clock, KvError, QueueMessageHandle};
use uuid::Uuid;

use crate::MemoryStore;

/// Settles one handle's deliveries on its store, at its clock's time.
struct MemoryDeliveries {
    store: MemoryStore,
    clock: Arc<dyn Clock>,
}

/// A delivery of this store: the message id and the delivery token.
type Ticket = (Uuid, u64);

#[async_trait]
impl DeliveryEngine for MemoryDeliveries {
    type Ticket = Ticket;

    async fn settle(&self, (id, token): Ticket, outcome: DeliveryOutcome) -> Result<(), KvError> {
        self.store
            .finish_message(id, token, outcome, self.clock.now())
    }

    fn settle_in_background(&self, (id, token): Ticket, outcome: DeliveryOutcome) {
        // Nothing to report to: a dead-letter write can only fail for a corrupt store.
        let _ = self
            .store
            .finish_message(id, token, outcome, self.clock.now());
    }
}

/// Waits until a message is due (by `clock`), or the handle closes (`Ok(None)`).
pub(crate) async fn next_message(
    store: &MemoryStore,
    clock: Arc<dyn Clock>,
    handle_signal: Arc<ChangeSignal>,
    owner: u64,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let engine = Arc::new(MemoryDeliveries {
        store: store.clone(),
        clock: clock.clone(),
    });
    let take = |now| {
        let taken = match store.take_due_message(now, owner) {
            Ok((message, token)) => Taken::Message(Delivery::new(
                engine.clone(),
                (message.id, token),
                message.payload,
            )),
            Err(next_due) => Taken::NextAt(next_due),
        };
        std::future::ready(Ok(taken))
    };
    next_delivery(store.subscribe_queue(), &*clock, &handle_signal, take).await
}

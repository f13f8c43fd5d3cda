//! Queue delivery: wait for the first due message, hand it out, and settle it when the consumer
//! finishes (or drops it unfinished, which counts as a failed delivery).

use std::sync::Arc;

use async_trait::async_trait;
use kv_proto::queue::{QueueWake, wait_for_queue};
use kv_proto::{ChangeSignal, Clock, KvError, QueueMessageHandle};
use uuid::Uuid;

use crate::MemoryStore;

/// Waits until a message is due (by `clock`), or the handle closes (`Ok(None)`).
pub(crate) async fn next_message(
    store: &MemoryStore,
    clock: Arc<dyn Clock>,
    handle_signal: Arc<ChangeSignal>,
    owner: u64,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let mut queue_changes = store.subscribe_queue();
    loop {
        if handle_signal.is_closed() {
            return Ok(None);
        }
        // Subscribed before looking, so an enqueue between the look and the wait still wakes us.
        queue_changes.borrow_and_update();
        let next_due = match store.take_due_message(clock.now(), owner) {
            Ok((message, token)) => {
                let handle = MemoryMessage {
                    store: store.clone(),
                    clock: clock.clone(),
                    id: message.id,
                    token,
                    payload: message.payload,
                    settled: false,
                };
                return Ok(Some(Box::new(handle)));
            }
            Err(next_due) => next_due,
        };
        let wake = wait_for_queue(&mut queue_changes, next_due, &*clock, &handle_signal).await;
        if wake == QueueWake::Closed {
            return Ok(None);
        }
    }
}

/// A message handed to a consumer.
struct MemoryMessage {
    store: MemoryStore,
    clock: Arc<dyn Clock>,
    id: Uuid,
    token: u64,
    payload: Vec<u8>,
    settled: bool,
}

#[async_trait]
impl QueueMessageHandle for MemoryMessage {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(mut self: Box<Self>, success: bool) -> Result<(), KvError> {
        self.settled = true;
        self.store
            .finish_message(self.id, self.token, success, self.clock.now())
    }
}

impl Drop for MemoryMessage {
    /// A consumer that drops a message without finishing it has failed to handle it.
    fn drop(&mut self) {
        if !self.settled {
            // Nothing to report to: a dead-letter write can only fail for a corrupt store.
            let _ = self
                .store
                .finish_message(self.id, self.token, false, self.clock.now());
        }
    }
}

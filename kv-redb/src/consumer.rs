//! Queue delivery on the consumer's side: wait until a message is due (by the injected clock),
//! a message is enqueued or retried, or the handle closes; then take it through the writer.

use std::sync::Arc;

use async_trait::async_trait;
use kv_proto::queue::{QueueWake, wait_for_queue};
use kv_proto::{ChangeSignal, Clock, KvError, QueueMessageHandle};
use uuid::Uuid;

use crate::queue::Taken;
use crate::store::Shared;

/// Waits for the next due message and hands it to handle `owner`; `Ok(None)` once the handle is
/// closed.
pub(crate) async fn next_message(
    shared: &Arc<Shared>,
    owner: u64,
    clock: &Arc<dyn Clock>,
    handle_signal: &ChangeSignal,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let mut changes = shared.notifier.subscribe_queue();
    loop {
        if handle_signal.is_closed() {
            return Ok(None);
        }
        // Marked seen before looking, so a change between the look and the wait still wakes us.
        changes.borrow_and_update();
        let next_at = match shared.writer()?.take(owner, clock.now()).await {
            Ok(Taken::Message { id, token, payload }) => {
                return Ok(Some(Box::new(RedbMessage {
                    shared: shared.clone(),
                    clock: clock.clone(),
                    id,
                    token,
                    payload,
                    settled: false,
                })));
            }
            Ok(Taken::NextAt(next_at)) => next_at,
            Ok(Taken::Closed) | Err(KvError::Closed) => return Ok(None),
            Err(err) => return Err(err),
        };
        if wait_for_queue(&mut changes, next_at, &**clock, handle_signal).await == QueueWake::Closed
        {
            return Ok(None);
        }
    }
}

/// A message held by a consumer of this process.
struct RedbMessage {
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    id: Uuid,
    token: u64,
    payload: Vec<u8>,
    settled: bool,
}

#[async_trait]
impl QueueMessageHandle for RedbMessage {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(mut self: Box<Self>, success: bool) -> Result<(), KvError> {
        self.settled = true;
        self.shared
            .writer()?
            .finish(self.id, self.token, success, self.clock.now())
            .await
    }
}

impl Drop for RedbMessage {
    /// Dropped without `finish`: the consumer gave up, which is a failed delivery.
    fn drop(&mut self) {
        if !self.settled
            && let Ok(writer) = self.shared.writer()
        {
            writer.fail_in_background(self.id, self.token, self.clock.now());
        }
    }
}

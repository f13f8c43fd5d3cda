//! Queue delivery: wait until a message is due (by the injected clock), an enqueue commits (here
//! or in another process), or the handle closes.

use std::sync::Arc;

use async_trait::async_trait;
use kv_proto::queue::{QueueWake, wait_for_queue};
use kv_proto::{ChangeSignal, Clock, KvError, QueueMessageHandle, ms_to_datetime};

use crate::writer::{Taken, Writer};

pub(crate) async fn next_message(
    writer: &Arc<Writer>,
    clock: &Arc<dyn Clock>,
    signal: &ChangeSignal,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let mut changes = writer.subscribe_queue();
    loop {
        if signal.is_closed() {
            return Ok(None);
        }
        // Marked seen before looking, so a change between the look and the wait still wakes us.
        changes.borrow_and_update();
        let next_at = match writer.take_message(clock.now()).await {
            Ok(Taken::Message { id, payload }) => {
                let handle = SqliteMessage {
                    writer: writer.clone(),
                    id,
                    payload,
                    settled: false,
                };
                return Ok(Some(Box::new(handle)));
            }
            Ok(Taken::NextAt(next_at)) => next_at.and_then(ms_to_datetime),
            Err(KvError::Closed) => return Ok(None),
            Err(err) => return Err(err),
        };
        if wait_for_queue(&mut changes, next_at, &**clock, signal).await == QueueWake::Closed {
            return Ok(None);
        }
    }
}

/// A message held by this process's consumer. Its deadline is renewed by the writer thread
/// while it is held.
struct SqliteMessage {
    writer: Arc<Writer>,
    id: String,
    payload: Vec<u8>,
    settled: bool,
}

#[async_trait]
impl QueueMessageHandle for SqliteMessage {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(mut self: Box<Self>, success: bool) -> Result<(), KvError> {
        self.settled = true;
        self.writer.finish_message(self.id.clone(), success).await
    }
}

impl Drop for SqliteMessage {
    /// Dropped without `finish`: the consumer gave up, which is a failed delivery.
    fn drop(&mut self) {
        if !self.settled {
            self.writer.fail_message_in_background(self.id.clone());
        }
    }
}

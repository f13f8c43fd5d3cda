//! Queue delivery: wait until a message is due (by the injected clock), an enqueue commits (here
//! or in another process), or the handle closes. The message is taken by the writer thread,
//! which hands it out as a [`kv_proto::queue::Delivery`] settled through the writer; its deadline
//! is renewed by the writer thread while it is held.

use std::sync::Arc;

use kv_proto::queue::next_delivery;
use kv_proto::{ChangeSignal, Clock, KvError, QueueMessageHandle};

use crate::writer::Writer;

pub(crate) async fn next_message(
    writer: &Arc<Writer>,
    clock: &Arc<dyn Clock>,
    signal: &ChangeSignal,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let take = |now| writer.take_message(now);
    next_delivery(writer.subscribe_queue(), &**clock, signal, take).await
}

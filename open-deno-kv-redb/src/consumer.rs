//! Queue delivery on the consumer's side: wait until a message is due (by the injected clock),
//! a message is enqueued or retried, or the handle closes; then take it through the writer, which
//! hands it out as a [`open_deno_kv_engine_kit::queue::Delivery`] settled through the writer at the handle's
//! clock's time (the kit's [`open_deno_kv_engine_kit::committer::SettleAtNow`]).

use std::sync::Arc;

use open_deno_kv_engine_kit::{ChangeSignal, Clock, KvError, QueueMessageHandle};

use crate::store::Shared;

/// Waits for the next due message and hands it to handle `owner`; `Ok(None)` once the handle is
/// closed.
pub(crate) async fn next_message(
    shared: &Arc<Shared>,
    owner: u64,
    clock: &Arc<dyn Clock>,
    handle_signal: &ChangeSignal,
) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
    let writer = shared.writer()?;
    let engine = writer.deliveries(clock.clone());
    let (notifier, clock) = (&shared.notifier, &**clock);
    (writer)
        .next_delivery(owner, engine, notifier, clock, handle_signal)
        .await
}

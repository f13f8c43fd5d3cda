//! The `range/watch` response body: each backend event as one or more length-prefixed
//! [`open_deno_kv_connect::ext::RangeWatchFrame`]s, keep-alives while nothing happens, and an end on
//! shutdown, as the `watch` body ([`crate::watch`]) does for keys.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use open_deno_kv_connect::ext::range_watch_frames;
use open_deno_kv_connect::frames::{KEEP_ALIVE, encode_payload};
use open_deno_kv_model::{Backend, RangeWatchEvent, RangeWatchStream};
use prost::Message;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::watch as signal;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};

use crate::response::ResponseBody;

/// How a range watch response behaves.
pub(crate) struct RangeWatchOptions {
    /// Interval of keep-alive frames.
    pub(crate) keep_alive_every: Duration,
    /// Ends the stream when the server shuts down.
    pub(crate) shutdown: signal::Receiver<bool>,
    /// Held until the stream ends: the watch-cap slot and the database.
    pub(crate) held: (OwnedSemaphorePermit, Arc<dyn Backend>),
}

struct State {
    stream: RangeWatchStream,
    /// The encoded frames of the current event not yet handed to the connection: one at a
    /// time, so a slow connection holds at most one event.
    queued: VecDeque<Vec<u8>>,
    keep_alive: Interval,
    shutdown: signal::Receiver<bool>,
    _held: (OwnedSemaphorePermit, Arc<dyn Backend>),
}

/// The body of a range watch response over `stream`.
pub(crate) fn range_watch_body(
    stream: RangeWatchStream,
    options: RangeWatchOptions,
) -> ResponseBody {
    let RangeWatchOptions {
        keep_alive_every,
        shutdown,
        held,
    } = options;
    let mut keep_alive = interval_at(Instant::now() + keep_alive_every, keep_alive_every);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        stream,
        queued: VecDeque::new(),
        keep_alive,
        shutdown,
        _held: held,
    };
    let frames = futures::stream::unfold(state, next_frame)
        .map(|bytes| Ok::<_, Infallible>(Frame::data(Bytes::from(bytes))));
    StreamBody::new(frames).boxed_unsync()
}

/// The frames of one event, each length-prefixed.
fn encode_event(event: &RangeWatchEvent) -> VecDeque<Vec<u8>> {
    range_watch_frames(event)
        .iter()
        .map(|frame| encode_payload(&frame.encode_to_vec()))
        .collect()
}

async fn next_frame(mut state: State) -> Option<(Vec<u8>, State)> {
    if *state.shutdown.borrow() {
        return None;
    }
    if let Some(frame) = state.queued.pop_front() {
        return Some((frame, state));
    }
    enum Next {
        Stop,
        Item(Option<Result<RangeWatchEvent, open_deno_kv_model::KvError>>),
        KeepAlive,
    }
    let shutdown = &mut state.shutdown;
    let next = tokio::select! {
        // Shutdown ends the stream cleanly (END_STREAM); the client reconnects elsewhere.
        () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => Next::Stop,
        item = state.stream.next() => Next::Item(item),
        _ = state.keep_alive.tick() => Next::KeepAlive,
    };
    match next {
        Next::Stop => None,
        Next::KeepAlive => Some((KEEP_ALIVE.to_vec(), state)),
        Next::Item(Some(Ok(event))) => {
            state.queued = encode_event(&event);
            state.keep_alive.reset();
            let frame = state.queued.pop_front()?;
            Some((frame, state))
        }
        // The backend closed or failed: end the response; the client reconnects (and rereads).
        Next::Item(Some(Err(_)) | None) => None,
    }
}

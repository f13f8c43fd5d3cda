//! The watch response body: length-prefixed frames, keep-alives, and an end on shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use open_deno_kv_connect::convert::watch_frame;
use open_deno_kv_connect::frames::{KEEP_ALIVE, encode_frame};
use open_deno_kv_model::{Backend, KvEntry, WatchKeyOutput, WatchStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::watch as signal;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};

use crate::response::ResponseBody;

struct State {
    /// `None` once the backend stream ended (or for a zero-key watch after its one frame).
    stream: Option<WatchStream>,
    /// The last entry of every key: the backend reports unchanged keys as `Unchanged`, but every
    /// frame must carry every key's full entry with `changed = true`.
    last: Vec<Option<KvEntry>>,
    keep_alive: Interval,
    shutdown: signal::Receiver<bool>,
    /// A zero-key watch yields one empty frame and ends, as denokv does.
    empty_pending: bool,
    /// Append the `expiry/1` extension to every frame.
    expiry: bool,
    /// Held while the stream lives: its slot under the watch cap, and its database (kept open).
    _held: (OwnedSemaphorePermit, Arc<dyn Backend>),
}

/// How a watch response behaves.
pub(crate) struct WatchOptions {
    /// Interval of keep-alive frames.
    pub(crate) keep_alive_every: Duration,
    /// Ends the stream when the server shuts down.
    pub(crate) shutdown: signal::Receiver<bool>,
    /// Append the `expiry/1` extension to every frame.
    pub(crate) expiry: bool,
    /// Held until the stream ends: the watch-cap slot and the database.
    pub(crate) held: (OwnedSemaphorePermit, Arc<dyn Backend>),
}

/// The body of a watch response over `stream` (`None` for a zero-key watch).
pub(crate) fn watch_body(
    stream: Option<WatchStream>,
    keys: usize,
    options: WatchOptions,
) -> ResponseBody {
    let WatchOptions {
        keep_alive_every,
        shutdown,
        expiry,
        held,
    } = options;
    let mut keep_alive = interval_at(Instant::now() + keep_alive_every, keep_alive_every);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        empty_pending: stream.is_none(),
        stream,
        last: vec![None; keys],
        keep_alive,
        shutdown,
        expiry,
        _held: held,
    };
    let frames = futures::stream::unfold(state, next_frame)
        .map(|bytes| Ok::<_, Infallible>(Frame::data(Bytes::from(bytes))));
    StreamBody::new(frames).boxed_unsync()
}

async fn next_frame(mut state: State) -> Option<(Vec<u8>, State)> {
    if state.empty_pending {
        state.empty_pending = false;
        return Some((encode_frame(&watch_frame(&[], state.expiry)), state));
    }
    let stream = state.stream.as_mut()?;
    if *state.shutdown.borrow() {
        return None;
    }
    enum Next {
        Stop,
        Item(Option<Result<Vec<WatchKeyOutput>, open_deno_kv_model::KvError>>),
        KeepAlive,
    }
    let shutdown = &mut state.shutdown;
    let next = tokio::select! {
        // Shutdown ends the stream cleanly (END_STREAM); the client reconnects elsewhere.
        () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => Next::Stop,
        item = stream.next() => Next::Item(item),
        _ = state.keep_alive.tick() => Next::KeepAlive,
    };
    match next {
        Next::Stop => None,
        Next::KeepAlive => Some((KEEP_ALIVE.to_vec(), state)),
        Next::Item(Some(Ok(outputs))) => {
            for (slot, output) in state.last.iter_mut().zip(outputs) {
                if let WatchKeyOutput::Changed(entry) = output {
                    *slot = entry;
                }
            }
            let frame = encode_frame(&watch_frame(&state.last, state.expiry));
            state.keep_alive.reset();
            Some((frame, state))
        }
        // The backend closed or failed: end the response; the client reconnects.
        Next::Item(Some(Err(_)) | None) => None,
    }
}

//! `POST /ui/api/watch`: the states of the keys on the page's screen, as server-sent events.
//!
//! The backend's `watch` takes at most 10 keys, so the keys are watched in groups of 10, each
//! group one backend watch holding one slot under [`crate::ResourceLimits::max_watches`] (429
//! when they run out), and the groups' emissions are merged into one stream. Every key whose
//! state an emission reports (the first emission reports every key) becomes one event:
//!
//! ```text
//! data: {"id":"<hex of the encoded key>","entry":{...} or null}
//! ```
//!
//! A comment line (`: keep-alive`) goes out every [`crate::ServerConfig::keep_alive_interval`]
//! so that proxies keep the response open; the stream ends when the server shuts down or the
//! database closes, and the page then opens a new one.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use open_deno_kv_model::{Backend, KvError, WatchKeyOutput};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::watch as signal;
use tokio::time::{Instant, Interval, MissedTickBehavior, interval_at};

use super::entry::entry_json;
use crate::response::{Failure, ResponseBody, kv_failure, too_many_streams};
use crate::shared::Shared;

/// The most keys one stream follows (a page of the explorer holds at most 500 rows, but the page
/// asks only for the rows on screen).
pub(super) const MAX_KEYS: usize = 500;

/// Keys per backend watch (the `Backend::watch` limit).
const GROUP: usize = 10;

/// One emission of a group's backend watch, with the group's keys.
type Emission = (Arc<Vec<Vec<u8>>>, Result<Vec<WatchKeyOutput>, KvError>);

/// One group's emissions.
type Group = BoxStream<'static, Emission>;

struct State {
    groups: SelectAll<Group>,
    keep_alive: Interval,
    shutdown: signal::Receiver<bool>,
    /// Held while the stream lives: a watch slot per group, and the database.
    _held: (Vec<OwnedSemaphorePermit>, Arc<dyn Backend>),
}

/// Starts the event stream for `keys` (encoded).
pub(super) fn watch(
    keys: Vec<Vec<u8>>,
    backend: Arc<dyn Backend>,
    shared: &Shared,
) -> Result<Response<ResponseBody>, Failure> {
    if keys.len() > MAX_KEYS {
        return Err(Failure::bad_request(format!(
            "At most {MAX_KEYS} keys are followed at once."
        )));
    }
    let mut slots = Vec::new();
    let mut groups = SelectAll::new();
    for chunk in keys.chunks(GROUP) {
        let slot = shared
            .budgets
            .watch()
            .ok_or_else(|| too_many_streams(shared, "watches"))?;
        slots.push(slot);
        let stream = backend
            .watch(chunk.to_vec())
            .map_err(|err| kv_failure(shared, &err))?;
        let chunk = Arc::new(chunk.to_vec());
        let group: Group = stream.map(move |item| (chunk.clone(), item)).boxed();
        groups.push(group);
    }
    let every = shared.config.keep_alive_interval;
    let mut keep_alive = interval_at(Instant::now() + every, every);
    keep_alive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        groups,
        keep_alive,
        shutdown: shared.shutdown.clone(),
        _held: (slots, backend),
    };
    // A first comment at once, so that the page knows the stream is open.
    let opening = futures::stream::once(async { b": open\n\n".to_vec() });
    let events = opening
        .chain(futures::stream::unfold(state, next_event))
        .map(|bytes| Ok::<_, Infallible>(Frame::data(Bytes::from(bytes))));
    let mut response = Response::new(StreamBody::new(events).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn next_event(mut state: State) -> Option<(Vec<u8>, State)> {
    if *state.shutdown.borrow() || state.groups.is_empty() {
        return None;
    }
    enum Next {
        Stop,
        Item(Option<Emission>),
        KeepAlive,
    }
    let shutdown = &mut state.shutdown;
    let next = tokio::select! {
        () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => Next::Stop,
        item = state.groups.next() => Next::Item(item),
        _ = state.keep_alive.tick() => Next::KeepAlive,
    };
    match next {
        Next::Stop | Next::Item(None | Some((_, Err(_)))) => None,
        Next::KeepAlive => Some((b": keep-alive\n\n".to_vec(), state)),
        Next::Item(Some((keys, Ok(outputs)))) => {
            let mut text = String::new();
            for (key, output) in keys.iter().zip(outputs) {
                if let WatchKeyOutput::Changed(entry) = output {
                    let event = json!({
                        "id": hex::encode(key),
                        "entry": entry.as_ref().map(entry_json),
                    });
                    text.push_str(&format!("data: {event}\n\n"));
                }
            }
            if text.is_empty() {
                text.push_str(": unchanged\n\n");
            }
            state.keep_alive.reset();
            Some((text.into_bytes(), state))
        }
    }
}

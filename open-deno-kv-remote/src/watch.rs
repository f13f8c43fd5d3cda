//! Watch over the network: one background task per watch reads the frame stream, reconnects
//! when it ends, and emits only real changes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt;
use open_deno_kv_connect::convert::{encode_watch, watch_frame_from_pb};
use open_deno_kv_connect::frames::{Frame, FrameDecoder, WatchFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::watch::WatchDiff;
use open_deno_kv_engine_kit::{KvEntry, KvError, WatchKeyOutput, WatchStream};
use tokio::sync::mpsc;

use crate::transport::{Inner, RemoteError, Replay, protocol};

type Emission = Result<Vec<WatchKeyOutput>, KvError>;

const FIRST_RECONNECT: Duration = Duration::from_millis(200);
const MAX_RECONNECT: Duration = Duration::from_secs(5);

/// Starts watching `keys` (already validated).
pub(crate) fn watch(inner: Arc<Inner>, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| RemoteError::NoRuntime)?;
    if keys.is_empty() {
        // Nothing can change: one empty emission, then the stream lasts until close.
        let first = futures::stream::once(async { Ok(Vec::new()) });
        let until_closed = futures::stream::once(async move {
            inner.wait_closed().await;
        })
        .filter_map(|()| async { None });
        return Ok(first.chain(until_closed).boxed());
    }
    let (sender, receiver) = mpsc::channel::<Emission>(8);
    runtime.spawn(run(inner, keys, sender));
    Ok(
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        })
        .boxed(),
    )
}

/// What the consumer has seen, to turn frames into emissions.
struct State {
    /// Every key's current entry, from the frames so far.
    current: Vec<Option<KvEntry>>,
    /// What was last emitted.
    diff: WatchDiff,
}

impl State {
    /// Applies one frame; returns the emission if anything changed since the last one.
    fn apply(&mut self, frame: WatchFrame) -> Result<Option<Vec<WatchKeyOutput>>, KvError> {
        let outputs = watch_frame_from_pb(frame).map_err(protocol)?;
        if outputs.len() != self.current.len() {
            return Err(protocol(format!(
                "a watch frame with {} keys for {} watched keys",
                outputs.len(),
                self.current.len()
            )));
        }
        for (slot, output) in self.current.iter_mut().zip(outputs) {
            if let WatchKeyOutput::Changed(entry) = output {
                *slot = entry;
            }
        }
        Ok(self.diff.next(self.current.clone()))
    }
}

/// The watch task: ends when the backend closes, the consumer drops the stream, or an error was
/// delivered.
async fn run(inner: Arc<Inner>, keys: Vec<Vec<u8>>, sender: mpsc::Sender<Emission>) {
    let body = encode_watch(&keys).encode_to_vec();
    let mut state = State {
        current: vec![None; keys.len()],
        diff: WatchDiff::new(),
    };
    let mut backoff = FIRST_RECONNECT;
    loop {
        let answer = tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            answer = inner.call("watch", body.clone(), Replay::Safe, inner.options.request_timeout) => answer,
        };
        let (session, response) = match answer {
            Ok(answer) => answer,
            Err(KvError::Closed) => return,
            Err(err) => {
                let _ = sender.send(Err(err)).await;
                return;
            }
        };
        let mut stream = response.into_body();
        // The request asked for the expiry times if the server offers them (see `Inner::call`).
        let mut decoder = FrameDecoder::new(session.extensions.expiry);
        loop {
            let next = tokio::select! {
                () = inner.wait_closed() => return,
                () = sender.closed() => return,
                next = tokio::time::timeout(inner.options.watch_idle_timeout, stream.frame()) => next,
            };
            match next {
                // Silent too long, ended, or broken: reconnect.
                Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => decoder.push(&data),
                    Err(_) => continue, // trailers
                },
            }
            loop {
                let frame = match decoder.next_frame() {
                    Ok(None) => break,
                    Ok(Some(Frame::KeepAlive)) => {
                        backoff = FIRST_RECONNECT;
                        continue;
                    }
                    Ok(Some(Frame::Output(frame))) => frame,
                    Err(err) => {
                        let _ = sender.send(Err(protocol(err))).await;
                        return;
                    }
                };
                backoff = FIRST_RECONNECT;
                match state.apply(frame) {
                    Ok(None) => {}
                    Ok(Some(emission)) => {
                        if sender.send(Ok(emission)).await.is_err() {
                            return;
                        }
                    }
                    Err(err) => {
                        let _ = sender.send(Err(err)).await;
                        return;
                    }
                }
            }
        }
        tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_RECONNECT);
    }
}

//! Watch over the network: one background task per watch reads the frame stream, reconnects
//! when it ends, and emits only real changes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;
use futures::StreamExt;
use http_body_util::BodyExt;
use kv_connect::convert::{encode_watch, watch_output_from_pb};
use kv_connect::frames::MAX_FRAME_BYTES;
use kv_connect::pb::WatchOutput;
use kv_connect::prost::Message;
use kv_proto::{KvEntry, KvError, Versionstamp, WatchKeyOutput, WatchStream};
use tokio::sync::mpsc;

use crate::backend::expiry_from_ms;
use crate::ext::WatchExpiry;
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
    /// The versionstamps last emitted (`None` before the first emission).
    emitted: Option<Vec<Option<Versionstamp>>>,
}

impl State {
    /// Applies one frame; returns the emission if anything changed since the last one.
    fn apply(&mut self, body: &[u8]) -> Result<Option<Vec<WatchKeyOutput>>, KvError> {
        let output = WatchOutput::decode(body)
            .map_err(|e| protocol(format!("Failed to decode watch output: {e}")))?;
        let times = WatchExpiry::decode(body).map_err(protocol)?;
        let outputs = watch_output_from_pb(output).map_err(protocol)?;
        if outputs.len() != self.current.len() {
            return Err(protocol(format!(
                "a watch frame with {} keys for {} watched keys",
                outputs.len(),
                self.current.len()
            )));
        }
        if !times.expires_at_ms.is_empty() && times.expires_at_ms.len() != outputs.len() {
            return Err(protocol("expiry extension: wrong number of keys"));
        }
        for (index, output) in outputs.into_iter().enumerate() {
            if let WatchKeyOutput::Changed(mut entry) = output {
                if let (Some(entry), Some(ms)) = (entry.as_mut(), times.expires_at_ms.get(index)) {
                    entry.expires_at = expiry_from_ms(*ms)?;
                }
                self.current[index] = entry;
            }
        }
        let stamps: Vec<Option<Versionstamp>> = self
            .current
            .iter()
            .map(|e| e.as_ref().map(|e| e.versionstamp))
            .collect();
        let emission = match &self.emitted {
            None => self
                .current
                .iter()
                .cloned()
                .map(WatchKeyOutput::Changed)
                .collect(),
            Some(last) if *last == stamps => return Ok(None),
            Some(last) => self
                .current
                .iter()
                .zip(last)
                .map(|(entry, before)| {
                    if entry.as_ref().map(|e| e.versionstamp) == *before {
                        WatchKeyOutput::Unchanged
                    } else {
                        WatchKeyOutput::Changed(entry.clone())
                    }
                })
                .collect(),
        };
        self.emitted = Some(stamps);
        Ok(Some(emission))
    }
}

/// The watch task: ends when the backend closes, the consumer drops the stream, or an error was
/// delivered.
async fn run(inner: Arc<Inner>, keys: Vec<Vec<u8>>, sender: mpsc::Sender<Emission>) {
    let body = encode_watch(&keys).encode_to_vec();
    let mut state = State {
        current: vec![None; keys.len()],
        emitted: None,
    };
    let mut backoff = FIRST_RECONNECT;
    loop {
        let answer = tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            answer = inner.call("watch", body.clone(), Replay::Safe, inner.options.request_timeout) => answer,
        };
        let response = match answer {
            Ok((_, response)) => response,
            Err(KvError::Closed) => return,
            Err(err) => {
                let _ = sender.send(Err(err)).await;
                return;
            }
        };
        let mut stream = response.into_body();
        let mut buffer: Vec<u8> = Vec::new();
        loop {
            let next = tokio::select! {
                () = inner.wait_closed() => return,
                () = sender.closed() => return,
                next = tokio::time::timeout(inner.options.watch_idle_timeout, stream.frame()) => next,
            };
            let data = match next {
                // Silent too long, ended, or broken: reconnect.
                Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue, // trailers
                },
            };
            buffer.extend_from_slice(data.chunk());
            while let Some(prefix) = buffer.first_chunk::<4>() {
                let len = u32::from_le_bytes(*prefix) as usize;
                if len > MAX_FRAME_BYTES {
                    let _ = sender
                        .send(Err(protocol(format!("a watch frame of {len} bytes"))))
                        .await;
                    return;
                }
                if buffer.len() < 4 + len {
                    break;
                }
                let frame: Vec<u8> = buffer.drain(..4 + len).skip(4).collect();
                backoff = FIRST_RECONNECT;
                if frame.is_empty() {
                    continue; // keep-alive
                }
                match state.apply(&frame) {
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

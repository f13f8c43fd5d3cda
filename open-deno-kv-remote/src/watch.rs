//! Watch over the network: one background task per watch reads the frame stream, reconnects
//! when it ends (the loop is [`crate::stream`]'s), and emits only real changes.

use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use hyper::Response;
use hyper::body::Incoming;
use open_deno_kv_connect::convert::{encode_watch, watch_frame_from_pb};
use open_deno_kv_connect::frames::{Frame, FrameDecoder, WatchFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::watch::WatchDiff;
use open_deno_kv_engine_kit::{KvEntry, KvError, WatchKeyOutput, WatchStream};

use crate::stream::{self, FrameStream, Read};
use crate::transport::{Inner, Replay, Session, protocol};

/// Starts watching `keys` (already validated).
pub(crate) fn watch(inner: Arc<Inner>, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
    if keys.is_empty() {
        // Nothing can change: one empty emission, then the stream lasts until close.
        let first = futures::stream::once(async { Ok(Vec::new()) });
        let until_closed = futures::stream::once(async move {
            inner.wait_closed().await;
        })
        .filter_map(|()| async { None });
        return Ok(first.chain(until_closed).boxed());
    }
    let body = encode_watch(&keys).encode_to_vec();
    let state = State {
        body,
        current: vec![None; keys.len()],
        diff: WatchDiff::new(),
    };
    stream::spawn(inner, state)
}

/// A key watch: its request, and what the consumer has seen, to turn frames into emissions.
struct State {
    /// The `watch` request's body.
    body: Vec<u8>,
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

impl FrameStream for State {
    type Event = Vec<WatchKeyOutput>;

    fn open(
        &self,
        inner: &Inner,
    ) -> impl Future<Output = Result<(Arc<Session>, Response<Incoming>), KvError>> + Send {
        inner.call(
            "watch",
            self.body.clone(),
            Replay::Safe,
            inner.options.request_timeout,
        )
    }

    fn begin(&mut self, session: &Session) -> FrameDecoder {
        // The request asked for the expiry times if the server offers them (see `Inner::call`).
        FrameDecoder::new(session.extensions.expiry)
    }

    fn next(&mut self, decoder: &mut FrameDecoder) -> Result<Option<Read<Self::Event>>, KvError> {
        Ok(match decoder.next_frame().map_err(protocol)? {
            None => None,
            Some(Frame::KeepAlive) => Some(Read::KeepAlive),
            Some(Frame::Output(frame)) => Some(Read::Frame(self.apply(frame)?)),
        })
    }
}

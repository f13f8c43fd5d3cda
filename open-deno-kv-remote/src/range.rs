//! Counting and watching a key range over the network: the `count/1` and `watch-range/1`
//! extensions of open-deno-kv-server (see [`open_deno_kv_connect::ext`]). Each is used only once the
//! metadata says the server offers it; otherwise the call fails with [`KvError::Unsupported`]
//! and nothing is sent.
//!
//! A range watch runs as one background task, like a key watch ([`crate::stream`]): it reads
//! the frame stream and reopens it when it ends, breaks or stays silent too long. Whatever
//! happened in the range while no stream was open is unknown, so every stream, the first and
//! each reopened one, starts with [`RangeWatchEvent::Reread`]: the server sends it first (after
//! it registered the watch, so no later commit is missed), and the client refuses a stream that
//! does not ([`RangeWatchAssembler`]). A change list cut off by a broken stream is dropped, never
//! emitted half.

use std::sync::Arc;

use hyper::Response;
use hyper::body::Incoming;
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::{KeyRange, KvError, RangeCount, RangeWatchEvent, RangeWatchStream};

use crate::ext::{RangeCountResponse, RangeRequest, RangeWatchAssembler, RangeWatchFrame};
use crate::stream::{self, FrameStream, Read};
use crate::transport::{Inner, Replay, Session, protocol};

const NO_COUNT: KvError = KvError::Unsupported {
    feature: "counting a range (the server does not offer count/1)",
};
const NO_WATCH_RANGE: KvError = KvError::Unsupported {
    feature: "watching a range (the server does not offer watch-range/1)",
};

/// `POST <endpoint>/range/count`, once the server is known to offer `count/1`.
pub(crate) async fn count(inner: &Inner, range: KeyRange) -> Result<RangeCount, KvError> {
    if !inner.session(false, None).await?.extensions.count {
        return Err(NO_COUNT);
    }
    let body = RangeRequest::of(&range).encode_to_vec();
    let (_, bytes) = inner
        .call_for_bytes("range/count", body, Replay::Safe)
        .await?;
    let count = RangeCountResponse::decode(bytes.as_ref()).map_err(protocol)?;
    Ok(count.into())
}

/// Starts watching `range` (already validated). Refused at once when the metadata is known and
/// lacks `watch-range/1`; when it is not known yet, the task learns it first and the stream
/// yields the refusal.
pub(crate) fn watch(inner: Arc<Inner>, range: KeyRange) -> Result<RangeWatchStream, KvError> {
    if inner.known_extensions().is_some_and(|e| !e.watch_range) {
        return Err(NO_WATCH_RANGE);
    }
    let body = RangeRequest::of(&range).encode_to_vec();
    stream::spawn(
        inner,
        RangeWatch {
            body,
            assembler: RangeWatchAssembler::new(range),
        },
    )
}

/// The session, if the server offers `watch-range/1`; the error to deliver otherwise.
async fn offering_session(inner: &Inner) -> Result<Arc<Session>, KvError> {
    let session = inner.session(false, None).await?;
    if session.extensions.watch_range {
        Ok(session)
    } else {
        Err(NO_WATCH_RANGE)
    }
}

/// A range watch: its request, and the assembler that turns its frames into events.
struct RangeWatch {
    /// The `range/watch` request's body.
    body: Vec<u8>,
    assembler: RangeWatchAssembler,
}

impl FrameStream for RangeWatch {
    type Event = RangeWatchEvent;

    async fn open(&self, inner: &Inner) -> Result<(Arc<Session>, Response<Incoming>), KvError> {
        offering_session(inner).await?;
        inner
            .call(
                "range/watch",
                self.body.clone(),
                Replay::Safe,
                inner.options.request_timeout,
            )
            .await
    }

    fn begin(&mut self, _session: &Session) -> FrameDecoder {
        // Every stream starts with a reread (see the module documentation).
        self.assembler.restart();
        FrameDecoder::default()
    }

    fn next(&mut self, decoder: &mut FrameDecoder) -> Result<Option<Read<Self::Event>>, KvError> {
        Ok(match decoder.next_payload().map_err(protocol)? {
            None => None,
            Some(RawFrame::KeepAlive) => Some(Read::KeepAlive),
            Some(RawFrame::Payload(bytes)) => {
                let frame = RangeWatchFrame::decode(bytes.as_slice()).map_err(protocol)?;
                Some(Read::Frame(self.assembler.push(frame).map_err(protocol)?))
            }
        })
    }
}

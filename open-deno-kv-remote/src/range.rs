//! Counting and watching a key range over the network: the `count/1` and `watch-range/1`
//! extensions of open-deno-kv-server (see [`open_deno_kv_connect::ext`]). Each is used only once the
//! metadata says the server offers it; otherwise the call fails with [`KvError::Unsupported`]
//! and nothing is sent.
//!
//! A range watch runs as one background task, like a key watch ([`crate::watch`]): it reads
//! the frame stream and reopens it when it ends, breaks or stays silent too long. Whatever
//! happened in the range while no stream was open is unknown, so every stream, the first and
//! each reopened one, starts with [`RangeWatchEvent::Reread`]: the server sends it first (after
//! it registered the watch, so no later commit is missed), and the client refuses a stream that
//! does not ([`RangeWatchAssembler`]). A change list cut off by a broken stream is dropped, never
//! emitted half.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http_body_util::BodyExt;
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::{KeyRange, KvError, RangeCount, RangeWatchEvent, RangeWatchStream};
use tokio::sync::mpsc;

use crate::ext::{RangeCountResponse, RangeRequest, RangeWatchAssembler, RangeWatchFrame};
use crate::transport::{Inner, RemoteError, Replay, Session, protocol};

const FIRST_RECONNECT: Duration = Duration::from_millis(200);
const MAX_RECONNECT: Duration = Duration::from_secs(5);

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

type Emission = Result<RangeWatchEvent, KvError>;

/// Starts watching `range` (already validated). Refused at once when the metadata is known and
/// lacks `watch-range/1`; when it is not known yet, the task learns it first and the stream
/// yields the refusal.
pub(crate) fn watch(inner: Arc<Inner>, range: KeyRange) -> Result<RangeWatchStream, KvError> {
    if inner.known_extensions().is_some_and(|e| !e.watch_range) {
        return Err(NO_WATCH_RANGE);
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| RemoteError::NoRuntime)?;
    let (sender, receiver) = mpsc::channel::<Emission>(8);
    runtime.spawn(run(inner, range, sender));
    Ok(
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        })
        .boxed(),
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

/// The watch task: ends when the backend closes, the consumer drops the stream, or an error was
/// delivered.
async fn run(inner: Arc<Inner>, range: KeyRange, sender: mpsc::Sender<Emission>) {
    let body = RangeRequest::of(&range).encode_to_vec();
    let mut assembler = RangeWatchAssembler::new(range);
    let mut backoff = FIRST_RECONNECT;
    loop {
        let answer = tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            answer = async {
                offering_session(&inner).await?;
                inner
                    .call("range/watch", body.clone(), Replay::Safe, inner.options.request_timeout)
                    .await
            } => answer,
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
        let mut decoder = FrameDecoder::default();
        assembler.restart();
        loop {
            let next = tokio::select! {
                () = inner.wait_closed() => return,
                () = sender.closed() => return,
                next = tokio::time::timeout(inner.options.watch_idle_timeout, stream.frame()) => next,
            };
            match next {
                // Silent too long, ended, or broken: reconnect (the new stream rereads).
                Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => decoder.push(&data),
                    Err(_) => continue, // trailers
                },
            }
            loop {
                let emission = match decoder.next_payload() {
                    Ok(None) => break,
                    Ok(Some(RawFrame::KeepAlive)) => {
                        backoff = FIRST_RECONNECT;
                        continue;
                    }
                    Ok(Some(RawFrame::Payload(bytes))) => RangeWatchFrame::decode(bytes.as_slice())
                        .map_err(protocol)
                        .and_then(|frame| assembler.push(frame).map_err(protocol)),
                    Err(err) => Err(protocol(err)),
                };
                backoff = FIRST_RECONNECT;
                match emission {
                    Ok(None) => {}
                    Ok(Some(event)) => {
                        if sender.send(Ok(event)).await.is_err() {
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
        drop(stream);
        tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_RECONNECT);
    }
}

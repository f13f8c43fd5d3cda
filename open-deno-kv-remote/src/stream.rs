//! The loop every watch over the network runs, written once: a key watch ([`crate::watch`]) and
//! a range watch ([`crate::range`]) differ only in the request they send and in what a frame
//! means ([`FrameStream`]).
//!
//! One background task per watch opens the frame stream, reads it with an idle timeout (keep-alive
//! frames count as traffic), and reopens it, after a back-off that doubles from
//! [`FIRST_RECONNECT`] to [`MAX_RECONNECT`] and resets whenever a frame arrives, when it ends,
//! breaks or stays silent too long. The task ends when the backend closes, when the consumer
//! drops the stream, or after it delivered an error (a refused request, a frame that does not
//! decode).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::Incoming;
use open_deno_kv_connect::frames::FrameDecoder;
use open_deno_kv_engine_kit::KvError;
use tokio::sync::mpsc;

use crate::transport::{Inner, RemoteError, Session};

/// The first wait before reopening a stream.
const FIRST_RECONNECT: Duration = Duration::from_millis(200);
/// The longest wait before reopening a stream.
const MAX_RECONNECT: Duration = Duration::from_secs(5);

/// What the next complete frame of a stream was.
pub(crate) enum Read<E> {
    /// A keep-alive: the server is there, nothing changed.
    KeepAlive,
    /// A frame, and the event it completes (`None`: nothing to emit yet, or nothing changed).
    Frame(Option<E>),
}

/// One kind of watch stream: how to open it and what its frames mean.
pub(crate) trait FrameStream: Send + 'static {
    /// What the stream emits.
    type Event: Send + 'static;

    /// Opens the stream (a request whose response body is the frame stream).
    fn open(
        &self,
        inner: &Inner,
    ) -> impl Future<Output = Result<(Arc<Session>, Response<Incoming>), KvError>> + Send;

    /// A stream was opened on `session` (the first one or a reopened one): the decoder for its
    /// frames.
    fn begin(&mut self, session: &Session) -> FrameDecoder;

    /// The next complete frame in `decoder`, or `None` when it needs more bytes.
    fn next(&mut self, decoder: &mut FrameDecoder) -> Result<Option<Read<Self::Event>>, KvError>;
}

/// Starts the task that runs `kind` and returns what it emits, as a stream.
pub(crate) fn spawn<S: FrameStream>(
    inner: Arc<Inner>,
    kind: S,
) -> Result<BoxStream<'static, Result<S::Event, KvError>>, KvError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| RemoteError::NoRuntime)?;
    let (sender, receiver) = mpsc::channel(8);
    runtime.spawn(run(inner, kind, sender));
    Ok(
        futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|item| (item, receiver))
        })
        .boxed(),
    )
}

/// The watch task (see the module documentation).
async fn run<S: FrameStream>(
    inner: Arc<Inner>,
    mut kind: S,
    sender: mpsc::Sender<Result<S::Event, KvError>>,
) {
    let mut backoff = FIRST_RECONNECT;
    loop {
        let answer = tokio::select! {
            () = inner.wait_closed() => return,
            () = sender.closed() => return,
            answer = kind.open(&inner) => answer,
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
        let mut decoder = kind.begin(&session);
        loop {
            let next = tokio::select! {
                () = inner.wait_closed() => return,
                () = sender.closed() => return,
                next = tokio::time::timeout(inner.options.watch_idle_timeout, stream.frame()) => next,
            };
            match next {
                // Silent too long, ended, or broken: reopen.
                Err(_) | Ok(None) | Ok(Some(Err(_))) => break,
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => decoder.push(&data),
                    Err(_) => continue, // trailers
                },
            }
            loop {
                let event = match kind.next(&mut decoder) {
                    Ok(None) => break,
                    Ok(Some(read)) => {
                        backoff = FIRST_RECONNECT;
                        match read {
                            Read::KeepAlive | Read::Frame(None) => continue,
                            Read::Frame(Some(event)) => Ok(event),
                        }
                    }
                    Err(err) => Err(err),
                };
                let failed = event.is_err();
                if sender.send(event).await.is_err() || failed {
                    return;
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

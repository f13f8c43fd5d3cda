//! One TCP connection: TLS first if the server has a certificate, then HTTP/1.1 or HTTP/2
//! (detected from the preface) until it closes, goes idle for too long, or the server shuts
//! down; the fast, clear refusal of a client speaking the other protocol (plaintext to a TLS
//! port, TLS to a plaintext port); and the refusal of a connection over the cap.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use crate::config::ServerConfig;
use crate::databases::ConnectionDatabases;
use crate::handler;
use crate::quick_ack::QuickAck;
use crate::response::ResponseBody;
use crate::shared::Shared;
use crate::tls::TLS_HANDSHAKE_RECORD;

/// How often an HTTP/2 connection is pinged, and how long a ping may go unanswered before the
/// peer counts as dead and the connection is closed.
pub const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(20);

/// How long a connection told to close (idle, or over the cap) gets to do so cleanly before it is
/// dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Requests in flight on one connection, and since when it has had none.
#[derive(Debug, Clone, Copy)]
struct ActivityState {
    in_flight: usize,
    idle_since: Instant,
}

/// Tracks a connection's requests; see [`idle_for`].
#[derive(Clone)]
struct Activity(Arc<watch::Sender<ActivityState>>);

/// One request in flight; it ends when the response body is finished or dropped.
struct InFlight(Activity);

impl Activity {
    fn new() -> Self {
        Activity(Arc::new(watch::Sender::new(ActivityState {
            in_flight: 0,
            idle_since: Instant::now(),
        })))
    }

    fn begin(&self) -> InFlight {
        self.0.send_modify(|state| state.in_flight += 1);
        InFlight(self.clone())
    }

    /// Completes once no request has been in flight for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        let mut changes = self.0.subscribe();
        loop {
            let state = *changes.borrow_and_update();
            if state.in_flight > 0 {
                if changes.changed().await.is_err() {
                    return;
                }
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep_until(state.idle_since + timeout) => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.send_modify(|state| {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.idle_since = Instant::now();
        });
    }
}

/// A response body that keeps its request counted as in flight until it is done.
struct TrackedBody {
    inner: ResponseBody,
    _in_flight: InFlight,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How long a peer that spoke the wrong protocol gets to read our short answer before the
/// connection is dropped.
const WRONG_PROTOCOL_GRACE: Duration = Duration::from_secs(1);

/// The answer to a plaintext request on the TLS port.
const PLAINTEXT_ON_TLS_PORT: &str = "This port speaks HTTPS (TLS): use an https:// URL.\n";

/// A fatal TLS alert record, `handshake_failure`: the answer to a TLS handshake on a plaintext
/// port (TLS 1.0 record version, as a record sent before any version is agreed may carry).
const TLS_ALERT_HANDSHAKE_FAILURE: [u8; 7] = [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28];

/// Serves one accepted connection; `_slot` is its place under the connection cap.
pub(crate) async fn serve(shared: Arc<Shared>, stream: TcpStream, _slot: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let Some(first) = first_byte(&shared, &stream).await else {
        return;
    };
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "a client".to_owned(), |a| a.to_string());
    let log = |message: String| {
        if shared.config.log_errors {
            tracing::warn!(peer = %peer, "{message}");
        }
    };
    let Some(tls) = shared.config.tls.clone() else {
        if first == TLS_HANDSHAKE_RECORD {
            log(
                "a TLS handshake on this plaintext port: refused with a TLS alert (serve with a \
                 certificate for https://, or have the client use http://)"
                    .into(),
            );
            answer_and_close(stream, &TLS_ALERT_HANDSHAKE_FAILURE).await;
            return;
        }
        serve_http(shared.clone(), QuickAck::new(stream)).await;
        return;
    };
    if first != TLS_HANDSHAKE_RECORD {
        log("plaintext on this TLS port: answered 400 (the client must use https://)".into());
        let answer = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{PLAINTEXT_ON_TLS_PORT}",
            PLAINTEXT_ON_TLS_PORT.len()
        );
        answer_and_close(stream, answer.as_bytes()).await;
        return;
    }
    let handshake = tls.acceptor().accept(QuickAck::new(stream));
    let mut shutdown = shared.shutdown.clone();
    let stream = tokio::select! {
        done = tokio::time::timeout(shared.config.resources.header_timeout, handshake) => {
            match done {
                Ok(Ok(stream)) => stream,
                Ok(Err(err)) => {
                    log(format!("TLS handshake failed: {err}"));
                    return;
                }
                Err(_) => {
                    log("TLS handshake not completed in time".into());
                    return;
                }
            }
        }
        _ = shutdown.wait_for(|stop| *stop) => return,
    };
    serve_http(shared.clone(), stream).await;
}

/// Writes `answer` to a peer that spoke the wrong protocol, closes our side, and reads what it
/// still sends for a moment, so that closing with its bytes unread does not reset the connection
/// before it has read the answer.
async fn answer_and_close(mut stream: TcpStream, answer: &[u8]) {
    let _ = tokio::time::timeout(WRONG_PROTOCOL_GRACE, async {
        stream.write_all(answer).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Serves HTTP/1.1 or HTTP/2 on an established stream (plain TCP, or TLS over it).
async fn serve_http<S>(shared: Arc<Shared>, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection_dbs = Arc::new(ConnectionDatabases::default());
    let activity = Activity::new();
    let service = {
        let shared = shared.clone();
        let connection_dbs = connection_dbs.clone();
        let activity = activity.clone();
        service_fn(move |request| {
            let in_flight = activity.begin();
            let response = handler::handle(request, shared.clone(), connection_dbs.clone());
            async move {
                let response = response.await?;
                Ok::<_, std::convert::Infallible>(response.map(|inner| {
                    TrackedBody {
                        inner,
                        _in_flight: in_flight,
                    }
                    .boxed_unsync()
                }))
            }
        })
    };
    let limits = &shared.config.resources;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(200)
        .keep_alive_interval(HTTP2_PING_INTERVAL)
        .keep_alive_timeout(HTTP2_PING_INTERVAL);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        _ = connection.as_mut() => {}
        () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.as_mut().await;
        }
        () = activity.idle_for(limits.idle_timeout) => {
            // HTTP/2 says GOAWAY, HTTP/1.1 closes; a peer that never spoke is simply dropped.
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(CLOSE_GRACE, connection.as_mut()).await;
        }
    }
    connection_dbs.close_all().await;
}

/// Waits for the peer's first bytes, for at most the header timeout: a peer that connects and
/// never speaks has not even begun a request's headers, so it is closed as a slow request head
/// would be (not kept for the whole idle timeout, holding a place under the connection cap).
/// Returns the first byte (left unread), or `None`: close the connection (silent, closed by the
/// peer, or the server is shutting down).
async fn first_byte(shared: &Shared, stream: &TcpStream) -> Option<u8> {
    let mut first = [0u8; 1];
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        peeked = tokio::time::timeout(shared.config.resources.header_timeout, stream.peek(&mut first)) => {
            matches!(peeked, Ok(Ok(n)) if n > 0).then_some(first[0])
        }
        _ = shutdown.wait_for(|stop| *stop) => None,
    }
}

/// Answers a connection over the cap with a plain-text `503` (one write attempt, never waiting
/// on the peer) and closes it. On a TLS port it is closed without a word: a plaintext answer
/// means nothing to a TLS client, and a handshake is what the cap spares.
pub(crate) fn refuse(stream: TcpStream, config: &ServerConfig) {
    if config.tls.is_some() {
        return;
    }
    let cap = config.resources.max_connections;
    let text =
        format!("Too many connections to this server (the cap is {cap}); try again later.\n");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.try_write(answer.as_bytes());
}

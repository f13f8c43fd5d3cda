//! Acknowledging a client's bytes at once, so its Nagle algorithm never waits on our delayed ACK.
//!
//! Deno's KV Connect client writes without `TCP_NODELAY`. On a new connection it sends a small
//! HTTP/2 frame (a SETTINGS acknowledgement) and then its request: Nagle's algorithm holds the
//! request back until the small frame is acknowledged, and Linux delays that ACK by up to 40 ms
//! because the server has nothing to send back. Measured on loopback with tcpdump: the request
//! left the client 40.6 ms after the small frame, right after the server's delayed ACK, and the
//! first `kv.get` of a new Deno process took 42-46 ms in three runs of five (then about 1 ms).
//!
//! The server cannot set the client's socket options, but it can acknowledge at once: after every
//! read that returns data it asks for an immediate ACK (`TCP_QUICKACK`, which also sends an ACK
//! that is pending), one cheap system call per read. Other systems keep their default
//! behaviour.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A server connection's TCP stream that acknowledges received data at once (see the module
/// docs); writes pass through.
pub(crate) struct QuickAck(TcpStream);

impl QuickAck {
    pub(crate) fn new(stream: TcpStream) -> Self {
        QuickAck(stream)
    }

    /// Sends any ACK the kernel is holding back, and acknowledges the next segments at once.
    fn acknowledge_now(&self) {
        #[cfg(target_os = "linux")]
        {
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
        }
    }
}

impl AsyncRead for QuickAck {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.acknowledge_now();
        }
        polled
    }
}

impl AsyncWrite for QuickAck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

//! A TCP proxy that can silently kill the connections through it, for tests of connections that
//! die while they sit idle in a pool.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::binaries::cluster_error;
use crate::PostgresError;

/// Forwards 127.0.0.1:[`port`](SilentCutProxy::port) to a server. [`cut`](SilentCutProxy::cut)
/// dooms every connection open at that moment without telling its client: the client learns of
/// it only when it next sends something, which closes the connection instead of forwarding — as
/// when a server restarts or a network path is dropped while a pooled connection sits idle.
/// Connections opened after the cut work normally. Stops when dropped.
#[derive(Debug)]
pub struct SilentCutProxy {
    port: u16,
    generation: Arc<AtomicU64>,
    acceptor: JoinHandle<()>,
}

impl SilentCutProxy {
    /// Starts a proxy to `127.0.0.1:server_port` on the current tokio runtime.
    pub async fn start(server_port: u16) -> Result<Self, PostgresError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| cluster_error("starting the proxy", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| cluster_error("starting the proxy", e))?
            .port();
        let generation = Arc::new(AtomicU64::new(0));
        let server = SocketAddr::from(([127, 0, 0, 1], server_port));
        let current = generation.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = current.load(Ordering::Acquire);
                tokio::spawn(forward(client, server, born, current.clone()));
            }
        });
        Ok(SilentCutProxy {
            port,
            generation,
            acceptor,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL through the proxy for the `postgres` superuser and `database`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Dooms every connection open now (see the [type docs](SilentCutProxy)).
    pub fn cut(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for SilentCutProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Carries one connection until either side closes or the client speaks after a cut.
async fn forward(mut client: TcpStream, server: SocketAddr, born: u64, current: Arc<AtomicU64>) {
    let Ok(mut upstream) = TcpStream::connect(server).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = upstream.split();
    let upward = async {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buffer).await.unwrap_or(0);
            // Cut since it was opened: drop the bytes and both sockets.
            if n == 0 || current.load(Ordering::Acquire) != born {
                return;
            }
            if server_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    let downward = tokio::io::copy(&mut server_read, &mut client_write);
    tokio::select! {
        () = upward => {}
        _ = downward => {}
    }
}

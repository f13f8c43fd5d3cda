//! A TCP proxy that can kill the connections through it: silently, for tests of connections that
//! die while they sit idle in a pool, and at a transaction's `COMMIT`, for tests of commits whose
//! answer is lost. It also counts each connection's round trips, for tests of how many a request
//! costs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::binaries::cluster_error;
use crate::PostgresError;

/// Where [`SilentCutProxy::cut_at_next_commit`] cuts a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitCut {
    /// The `COMMIT` reaches the server (which commits); its answer never reaches the client.
    AfterForwarding,
    /// The `COMMIT` is dropped: the server sees the connection end inside the transaction and
    /// rolls it back.
    InsteadOfForwarding,
}

impl CommitCut {
    const NONE: u8 = 0;

    fn code(self) -> u8 {
        match self {
            CommitCut::AfterForwarding => 1,
            CommitCut::InsteadOfForwarding => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(CommitCut::AfterForwarding),
            2 => Some(CommitCut::InsteadOfForwarding),
            _ => None,
        }
    }
}

/// The proxy's switches, shared with its connections.
#[derive(Debug, Default)]
struct Control {
    /// Bumped by [`SilentCutProxy::cut`]: connections born before are doomed.
    generation: AtomicU64,
    /// The armed [`CommitCut`], or [`CommitCut::NONE`].
    armed: AtomicU8,
    /// How many connections were cut at a `COMMIT`.
    commit_cuts: AtomicU64,
    /// New connections are closed at once.
    refusing: AtomicBool,
    /// Per connection, in the order they were accepted: the times its client sent again after
    /// an answer had reached it.
    client_turns: std::sync::Mutex<Vec<Arc<AtomicU64>>>,
}

/// Forwards 127.0.0.1:[`port`](SilentCutProxy::port) to a server, and kills connections on
/// demand:
///
/// - [`cut`](SilentCutProxy::cut) dooms every connection open at that moment without telling its
///   client: the client learns of it only when it next sends something, which closes the
///   connection instead of forwarding — as when a server restarts or a network path is dropped
///   while a pooled connection sits idle. Connections opened after the cut work normally.
/// - [`cut_at_next_commit`](SilentCutProxy::cut_at_next_commit) kills the next connection that
///   sends `COMMIT` (a simple-protocol query, as `tokio-postgres` sends it) at that message:
///   the client's side is closed at once and never sees an answer; the server's side gets the
///   `COMMIT` or not ([`CommitCut`]), then the end of the connection.
/// - [`refuse`](SilentCutProxy::refuse) closes every new connection at once, as an unreachable
///   server would look to a client.
///
/// Stops when dropped.
#[derive(Debug)]
pub struct SilentCutProxy {
    port: u16,
    control: Arc<Control>,
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
        let control = Arc::new(Control::default());
        let server = SocketAddr::from(([127, 0, 0, 1], server_port));
        let shared = control.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if shared.refusing.load(Ordering::Acquire) {
                    continue; // dropped: closed at once
                }
                let born = shared.generation.load(Ordering::Acquire);
                tokio::spawn(forward(client, server, born, shared.clone()));
            }
        });
        Ok(SilentCutProxy {
            port,
            control,
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
        self.control.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Arms a cut of the next connection that sends `COMMIT`, at that message (see the [type
    /// docs](SilentCutProxy)). One cut per call; a call while armed replaces the armed cut.
    pub fn cut_at_next_commit(&self, how: CommitCut) {
        self.control.armed.store(how.code(), Ordering::Release);
    }

    /// Whether a cut armed by [`SilentCutProxy::cut_at_next_commit`] is still waiting for its
    /// `COMMIT`.
    pub fn commit_cut_armed(&self) -> bool {
        self.control.armed.load(Ordering::Acquire) != CommitCut::NONE
    }

    /// How many connections were cut at a `COMMIT` so far.
    pub fn commit_cuts(&self) -> u64 {
        self.control.commit_cuts.load(Ordering::Acquire)
    }

    /// Closes every new connection at once while `refusing` is true; open connections carry on.
    pub fn refuse(&self, refusing: bool) {
        self.control.refusing.store(refusing, Ordering::Release);
    }

    /// For each connection so far, in the order they were accepted: how many times its client
    /// sent something after the server's last bytes had reached it — the round trips it waited
    /// for (its first send counts as one). Statements sent together without waiting for an
    /// answer in between count once. A count may be too high (a batch the client wrote in two
    /// pieces, with an answer forwarded between them), never too low.
    pub fn client_turns(&self) -> Vec<u64> {
        self.control
            .client_turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|turns| turns.load(Ordering::Acquire))
            .collect()
    }
}

impl Drop for SilentCutProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// How the client-to-server half of a connection ended.
enum Upward {
    /// Either side closed, or a [`SilentCutProxy::cut`] doomed it.
    Closed,
    /// It was cut at a `COMMIT`.
    CutAtCommit,
}

/// Carries one connection until either side closes, the client speaks after a cut, or it is
/// cut at a `COMMIT`.
async fn forward(client: TcpStream, server: SocketAddr, born: u64, control: Arc<Control>) {
    let Ok(upstream) = TcpStream::connect(server).await else {
        return;
    };
    // Each side forwards what it read at once, as a client and a server write their messages:
    // with Nagle's algorithm on, a message written in two pieces waited for the peer's delayed
    // ACK (40 ms on Linux), which made every lost commit and its lookup cost 50-150 ms.
    if client.set_nodelay(true).is_err() || upstream.set_nodelay(true).is_err() {
        return;
    }
    let (client_read, client_write) = client.into_split();
    let (mut server_read, mut server_write) = upstream.into_split();
    // Set before a cut `COMMIT` leaves: from then on nothing reaches the client.
    let mute = AtomicBool::new(false);
    // Set when the server's bytes reach the client: its next send starts a new turn.
    let answered = AtomicBool::new(true);
    let turns = Arc::new(AtomicU64::new(0));
    control
        .client_turns
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(turns.clone());
    let upward = carry_upward(
        client_read,
        &mut server_write,
        born,
        &control,
        (&mute, &answered, &turns),
    );
    let downward = carry_downward(&mut server_read, client_write, &mute, &answered);
    let ended = tokio::select! {
        ended = upward => ended,
        () = downward => Upward::Closed,
    };
    if let Upward::CutAtCommit = ended {
        // The client's side is gone (its halves were dropped with the futures). The server gets
        // the end of its input after what was forwarded, and its answers are read and dropped
        // until it closes, so that it is not reset before it has read the `COMMIT`.
        let _ = server_write.shutdown().await;
        let mut sink = vec![0u8; 16 * 1024];
        let drain = async { while server_read.read(&mut sink).await.is_ok_and(|n| n > 0) {} };
        let _ = tokio::time::timeout(Duration::from_secs(30), drain).await;
    }
}

/// Client to server: whole messages, watching for a `COMMIT` while a cut is armed, and counting
/// the client's turns (its sends after an answer).
async fn carry_upward(
    mut client_read: OwnedReadHalf,
    server_write: &mut OwnedWriteHalf,
    born: u64,
    control: &Control,
    (mute, answered, turns): (&AtomicBool, &AtomicBool, &AtomicU64),
) -> Upward {
    let mut framer = Framer::default();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = client_read.read(&mut buffer).await.unwrap_or(0);
        // Cut since it was opened: drop the bytes and both sockets.
        if n == 0 || control.generation.load(Ordering::Acquire) != born {
            return Upward::Closed;
        }
        if answered.swap(false, Ordering::AcqRel) {
            turns.fetch_add(1, Ordering::AcqRel);
        }
        framer.pending.extend_from_slice(&buffer[..n]);
        while let Some(length) = framer.next_message() {
            let message: Vec<u8> = framer.pending.drain(..length).collect();
            if framer.started && message == COMMIT {
                let armed = control.armed.swap(CommitCut::NONE, Ordering::AcqRel);
                if let Some(how) = CommitCut::from_code(armed) {
                    mute.store(true, Ordering::SeqCst);
                    if how == CommitCut::AfterForwarding {
                        let _ = server_write.write_all(&message).await;
                    }
                    control.commit_cuts.fetch_add(1, Ordering::AcqRel);
                    return Upward::CutAtCommit;
                }
            }
            if server_write.write_all(&message).await.is_err() {
                return Upward::Closed;
            }
            framer.note_forwarded(&message);
        }
    }
}

/// Server to client, until a cut mutes it.
async fn carry_downward(
    server_read: &mut OwnedReadHalf,
    mut client_write: OwnedWriteHalf,
    mute: &AtomicBool,
    answered: &AtomicBool,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let n = server_read.read(&mut buffer).await.unwrap_or(0);
        if n == 0 || mute.load(Ordering::SeqCst) {
            return;
        }
        // Noted before the bytes leave, so that a send they prompt always counts (a count may
        // be too high, never too low).
        answered.store(true, Ordering::Release);
        if client_write.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// The simple-protocol message `Query("COMMIT")`.
const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

/// The protocol version of a startup message (3.0); the other untyped first messages are
/// requests (SSL, GSS encryption, cancel) that a startup message follows.
const PROTOCOL_3: u32 = 196_608;

/// Splits what a client sends into messages: first the untyped ones (`length`, then a code),
/// then, once the startup message has gone, typed ones (a type byte, then `length`).
#[derive(Debug, Default)]
struct Framer {
    pending: Vec<u8>,
    /// Whether the startup message has been forwarded.
    started: bool,
}

impl Framer {
    /// The length of the first whole message in `pending`, if it has arrived.
    fn next_message(&self) -> Option<usize> {
        let (offset, header) = if self.started { (1, 5) } else { (0, 4) };
        if self.pending.len() < header {
            return None;
        }
        let bytes: [u8; 4] = self.pending[offset..offset + 4].try_into().ok()?;
        let length = offset + usize::try_from(u32::from_be_bytes(bytes)).ok()?;
        (self.pending.len() >= length).then_some(length)
    }

    /// Notes that `message` went to the server (the startup message ends the untyped ones).
    fn note_forwarded(&mut self, message: &[u8]) {
        if !self.started && message.len() >= 8 && message[4..8] == PROTOCOL_3.to_be_bytes() {
            self.started = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_framer_finds_the_startup_message_then_typed_messages() {
        let mut framer = Framer::default();
        let mut startup = vec![0, 0, 0, 9];
        startup.extend_from_slice(&PROTOCOL_3.to_be_bytes());
        startup.push(0);
        framer.pending.extend_from_slice(&startup);
        framer.pending.extend_from_slice(COMMIT);
        framer.pending.extend_from_slice(&COMMIT[..3]);
        assert_eq!(framer.next_message(), Some(9));
        let first: Vec<u8> = framer.pending.drain(..9).collect();
        framer.note_forwarded(&first);
        assert!(framer.started);
        assert_eq!(framer.next_message(), Some(COMMIT.len()));
        framer.pending.drain(..COMMIT.len());
        assert_eq!(
            framer.next_message(),
            None,
            "a message cut short waits for the rest"
        );
    }
}

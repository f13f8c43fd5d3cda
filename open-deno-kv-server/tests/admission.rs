//! Admission (issue 29, point 4): strangers without the token cannot keep out a client that has
//! it. At the cap the oldest connection that never authorized makes room; a connection that
//! makes no authorized request within the deadline is closed; one address holds only so many
//! unauthorized connections. Raw sockets from other loopback addresses (127.0.0.2, ...: all of
//! 127/8 is loopback on Linux) play the strangers. The server's defaults are used where they
//! suffice, so that these tests also ran against the server before admission existed.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::*;
use open_deno_kv_server::Databases;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;
/// An HTTP/2 client preface and an empty SETTINGS frame, and nothing more.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
/// Far longer than any deadline configured or defaulted here.
const PATIENCE: Duration = Duration::from_secs(15);

/// A connection to `addr` from the loopback address 127.0.0.`from`.
async fn connect_from(from: u8, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, from), 0)))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// The metadata exchange with the token over HTTP/1.1 keep-alive on `stream`: its status.
async fn authorized_request(stream: &mut TcpStream) -> u16 {
    let head = format!(
        "POST / HTTP/1.1\r\nhost: test\r\nauthorization: {BEARER}\r\ncontent-length: {}\r\n\r\n",
        OFFER.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(OFFER).await.unwrap();
    response(stream).await.0
}

/// `GET /health` (no token needed, so it does not authorize) on `stream`: its status.
async fn health(stream: &mut TcpStream) -> u16 {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    response(stream).await.0
}

/// `GET /health` on `stream`: its status, or `None` if the connection ended first.
async fn try_health(stream: &mut TcpStream) -> Option<u16> {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .ok()?;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 1024];
    // "ok\n" is the whole body.
    while !bytes.ends_with(b"\r\n\r\nok\n") {
        let n = timeout(Duration::from_secs(2), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&bytes[9..12]).parse().ok()
}

/// Reads a response head and its body (content-length): (status, body text).
async fn response(stream: &mut TcpStream) -> (u16, String) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    let status = head[9..12].parse().unwrap();
                    let body = &bytes[end + 4..end + 4 + length];
                    return (status, String::from_utf8_lossy(body).into_owned());
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before a whole response: {bytes:?}");
            bytes.extend_from_slice(&buf[..n]);
        }
    };
    timeout(PATIENCE, read).await.expect("no response")
}

/// How long the server took to close `stream` (EOF or reset), reading past any data; `None`
/// if it stayed open for [`PATIENCE`].
async fn closed_after(stream: &mut TcpStream) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
    .map(|()| started.elapsed())
}

#[tokio::test]
async fn at_the_cap_a_stranger_makes_room_for_a_client_with_the_token() {
    let mut config = config();
    config.resources.max_connections = 4;
    let running = start_with(config, Databases::new(memory())).await;
    let mut client = connect_from(1, running.addr).await;
    assert_eq!(authorized_request(&mut client).await, 200);
    // Three strangers fill the cap: silent, an HTTP/2 preface, half a request head.
    let mut silent = connect_from(2, running.addr).await;
    let mut preface = connect_from(3, running.addr).await;
    preface.write_all(H2_PREFACE).await.unwrap();
    let mut slow = connect_from(4, running.addr).await;
    slow.write_all(b"POST /v2/watch HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A second client with the token gets in: the oldest stranger makes room.
    let mut second = connect_from(1, running.addr).await;
    assert_eq!(authorized_request(&mut second).await, 200);
    let evicted = closed_after(&mut silent).await;
    assert!(
        evicted.is_some_and(|after| after < Duration::from_secs(2)),
        "the oldest stranger was not closed at once: {evicted:?}"
    );
    // And again, for the next oldest.
    let mut third = connect_from(1, running.addr).await;
    assert_eq!(authorized_request(&mut third).await, 200);
    assert!(closed_after(&mut preface).await.is_some());
    // The clients that authorized are never evicted: they keep being served.
    for stream in [&mut client, &mut second, &mut third] {
        assert_eq!(authorized_request(stream).await, 200);
    }
    drop(slow);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_connection_that_makes_no_authorized_request_in_time_is_closed() {
    // Only the admission deadline (5 s by default) can close these: every other timeout is an
    // hour.
    let mut config = config();
    config.resources.header_timeout = Duration::from_secs(3600);
    config.resources.idle_timeout = Duration::from_secs(3600);
    let running = start_with(config, Databases::new(memory())).await;
    let mut preface = connect_from(2, running.addr).await;
    preface.write_all(H2_PREFACE).await.unwrap();
    let mut slow = connect_from(2, running.addr).await;
    slow.write_all(b"POST /v2/watch HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // Requests without the token do not count, however many: `/health` every 100 ms.
    let mut tokenless = connect_from(3, running.addr).await;
    let tokenless = tokio::spawn(async move {
        let started = Instant::now();
        while started.elapsed() < PATIENCE {
            if try_health(&mut tokenless).await != Some(200) {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    });
    let mut client = connect_from(1, running.addr).await;
    assert_eq!(authorized_request(&mut client).await, 200);

    let (preface_closed, slow_closed) =
        tokio::join!(closed_after(&mut preface), closed_after(&mut slow));
    let tokenless_closed = tokenless.await.unwrap();
    for (what, closed) in [
        ("preface-only", preface_closed),
        ("slow head", slow_closed),
        ("tokenless", tokenless_closed),
    ] {
        assert!(
            closed.is_some_and(|after| after < Duration::from_secs(8)),
            "the {what} connection was not closed at the deadline: {closed:?}"
        );
    }
    // The client with the token is still served.
    assert_eq!(authorized_request(&mut client).await, 200);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn one_address_holds_only_so_many_unauthorized_connections() {
    let running = start().await;
    // The default per-address cap is 32.
    let mut held = Vec::new();
    for _ in 0..32 {
        held.push(connect_from(2, running.addr).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut refused = connect_from(2, running.addr).await;
    let (status, text) = response(&mut refused).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("from your address"), "{text}");
    // Another address, and a client with the token, still get in.
    let mut other = connect_from(3, running.addr).await;
    assert_eq!(health(&mut other).await, 200);
    let mut client = connect_from(1, running.addr).await;
    assert_eq!(authorized_request(&mut client).await, 200);
    drop(held);
    running.shutdown().await.unwrap();
}

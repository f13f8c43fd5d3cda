//! Logs that cannot be used as a weapon (issue 29, point 5): a flood of failed TLS handshakes
//! and plaintext requests on a TLS port writes a few summary lines, not a line per connection.
//! The server's events are captured by a subscriber installed for this binary alone (it has one
//! test, so nothing else logs into it), with the default interval (10 s).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

#[path = "support/capture.rs"]
mod capture;
mod common;
#[path = "support/pki.rs"]
mod pki;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use capture::Captured;
use common::*;
use open_deno_kv_server::{Databases, Tls};
use pki::{Ca, KeyFormat, write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinSet;

const BOGUS_HANDSHAKES: usize = 300;
const PLAINTEXT_REQUESTS: usize = 100;

/// A connection to `addr` from the loopback address 127.0.0.`from`.
async fn connect_from(from: u8, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, from), 0)))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Sends `bytes` and reads until the server closes the connection (at most 10 s).
async fn send_and_wait(from: u8, addr: SocketAddr, bytes: &'static [u8]) {
    let mut stream = connect_from(from, addr).await;
    let _ = stream.write_all(bytes).await;
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The number a summary line starts with ("1,234 failed ..." is 1234).
fn leading_count(line: &str, after: &str) -> u64 {
    let text = &line[line.find(after).unwrap() + after.len()..];
    let digits: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_client_errors_are_summarised_not_logged_one_by_one() {
    let captured = Captured::default();
    tracing::subscriber::set_global_default(captured.subscriber(tracing::Level::WARN)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cert = Ca::root("kv test root").server("server", KeyFormat::EcPkcs8);
    let tls = Tls::load(
        write(dir.path(), "cert.pem", &cert.cert_pem),
        write(dir.path(), "key.pem", &cert.key_pem),
    )
    .unwrap();
    let mut config = config();
    config.log_errors = true;
    config.tls = Some(tls);
    let running = start_with(config, Databases::new(memory())).await;
    let addr = running.addr;

    // A handshake record whose body is not a handshake message, and a plaintext request, from
    // 127.0.0.2, .3 and .4 in turn, 30 at a time.
    let started = Instant::now();
    let mut flood = JoinSet::new();
    for i in 0..BOGUS_HANDSHAKES + PLAINTEXT_REQUESTS {
        let from = 2 + (i % 3) as u8;
        let bytes: &'static [u8] = if i < BOGUS_HANDSHAKES {
            b"\x16\x03\x01\x00\x05\xff\xff\xff\xff\xff"
        } else {
            b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"
        };
        flood.spawn(send_and_wait(from, addr, bytes));
        if flood.len() >= 30 {
            flood.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(done) = flood.join_next().await {
        done.unwrap();
    }
    // Every event is in a summary once the interval that holds it ends (10 s by default).
    let deadline = Instant::now() + Duration::from_secs(30);
    let handshake_total = |lines: &[String]| {
        let firsts = lines
            .iter()
            .filter(|l| l.contains("TLS handshake failed:"))
            .count() as u64;
        let summaries: Vec<u64> = lines
            .iter()
            .filter(|l| l.contains("failed TLS handshakes from"))
            .map(|l| leading_count(l, "WARN"))
            .collect();
        // Each summary counts its interval's first event too, which was logged on its own.
        summaries.iter().sum::<u64>() + firsts - summaries.len() as u64
    };
    while handshake_total(&captured.lines()) < BOGUS_HANDSHAKES as u64 {
        assert!(
            Instant::now() < deadline,
            "the failed handshakes were never all counted: {:#?}",
            captured.lines()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed();
    let lines = captured.lines();
    running.shutdown().await.unwrap();
    eprintln!("{lines:#?}");

    assert_eq!(handshake_total(&lines), BOGUS_HANDSHAKES as u64);
    // At most two lines per kind and interval: the first event, and the summary.
    let intervals = elapsed.as_secs() / 10 + 2;
    for kind in ["handshake", "plaintext"] {
        let about = lines.iter().filter(|l| l.contains(kind)).count() as u64;
        assert!(
            about <= 2 * intervals,
            "{about} lines about {kind} in {elapsed:?}: {lines:#?}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("failed TLS handshakes from 3 addresses in the last 10 s")),
        "{lines:#?}"
    );
    let plaintext: u64 = lines
        .iter()
        .filter(|l| l.contains("plaintext requests on this TLS port"))
        .map(|l| leading_count(l, "WARN"))
        .sum();
    assert!(
        plaintext > 1 && plaintext <= PLAINTEXT_REQUESTS as u64,
        "{lines:#?}"
    );
}

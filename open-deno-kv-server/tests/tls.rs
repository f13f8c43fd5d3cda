//! TLS in the server: the key formats and certificate chains [`open_deno_kv_server::Tls`] loads, what it
//! refuses, ALPN (h2 and http/1.1), and the fast refusal of a client that speaks the other
//! protocol. Every certificate is made by the test (`support/pki.rs`).

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "support/pki.rs"]
mod pki;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use open_deno_kv_server::{ConfigError, Databases, Tls};
use pki::{Ca, KeyFormat, write};

/// Writes a server certificate (with `chain` after it) and its key; returns their paths.
fn files(dir: &std::path::Path, cert: &pki::ServerCert, chain: &str) -> (PathBuf, PathBuf) {
    (
        write(dir, "cert.pem", &format!("{}{chain}", cert.cert_pem)),
        write(dir, "key.pem", &cert.key_pem),
    )
}

/// What [`https_get`] saw: the negotiated protocol, the server's certificate, the answer.
type Exchange = (Option<Vec<u8>>, Vec<u8>, String);

/// One TLS connection to `addr` trusting `ca_pem` and offering `alpn`, with `GET /health` sent
/// over HTTP/1.1 unless h2 was chosen: (negotiated protocol, server certificate, answer).
fn https_get(addr: SocketAddr, ca_pem: &str, alpn: &[&[u8]]) -> Result<Exchange, String> {
    let mut connection = pki::HttpsConnection::open(addr, ca_pem, alpn)?;
    let alpn = connection.alpn();
    let answer = match alpn.as_deref() {
        Some(b"h2") => String::new(),
        _ => connection.health()?,
    };
    Ok((alpn, connection.certificate(), answer))
}

/// A CA and a server identity it signed (written in `dir`).
fn identity(dir: &std::path::Path, name: &str, format: KeyFormat) -> (Ca, pki::ServerCert, Tls) {
    let ca = Ca::root("kv test root");
    let cert = ca.server(name, format);
    let (cert_path, key_path) = files(dir, &cert, "");
    let tls = Tls::load(&cert_path, &key_path).unwrap();
    (ca, cert, tls)
}

async fn tls_server(tls: Tls) -> Running {
    let mut config = config();
    config.tls = Some(tls);
    start_with(config, Databases::new(memory())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_format_serves_https_with_a_chain_and_alpn() {
    let root = Ca::root("kv test root");
    let intermediate = root.intermediate("kv test intermediate");
    for format in [
        KeyFormat::EcPkcs8,
        KeyFormat::EcSec1,
        KeyFormat::RsaPkcs8,
        KeyFormat::RsaPkcs1,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cert = intermediate.server("kv test server", format);
        let (cert_path, key_path) = files(dir.path(), &cert, &intermediate.pem());
        let tls = Tls::load(&cert_path, &key_path)
            .unwrap_or_else(|e| panic!("{format:?} key refused: {e}"));
        let running = tls_server(tls).await;
        let (addr, ca) = (running.addr, root.pem());
        let (h2, http1) = tokio::task::spawn_blocking(move || {
            (
                https_get(addr, &ca, &[b"h2", b"http/1.1"]),
                https_get(addr, &ca, &[b"http/1.1"]),
            )
        })
        .await
        .unwrap();
        let (alpn, served, _) = h2.unwrap_or_else(|e| panic!("{format:?}: {e}"));
        assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "{format:?}: h2 first");
        assert_eq!(served, cert.der, "{format:?}: the certificate loaded");
        let (alpn, _, answer) = http1.unwrap_or_else(|e| panic!("{format:?}: {e}"));
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
        assert!(answer.starts_with("HTTP/1.1 200"), "{format:?}: {answer}");
        running.shutdown().await.unwrap();
    }
}

#[test]
fn unusable_files_are_refused_with_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::root("kv test root");
    let one = ca.server("one", KeyFormat::EcPkcs8);
    let other = ca.server("other", KeyFormat::EcPkcs8);
    let cert = write(dir.path(), "cert.pem", &one.cert_pem);
    let key = write(dir.path(), "key.pem", &one.key_pem);
    let wrong_key = write(dir.path(), "other.pem", &other.key_pem);
    let garbage = write(dir.path(), "garbage.pem", "not a certificate\n");
    let missing = dir.path().join("missing.pem");

    assert!(Tls::load(&cert, &key).is_ok());
    match Tls::load(&cert, &wrong_key) {
        Err(ConfigError::TlsRefused(reason)) => {
            assert!(reason.contains("does not go with"), "{reason}")
        }
        other => panic!("a key of another certificate: {other:?}"),
    }
    for (cert, key, bad) in [
        (&garbage, &key, &garbage),
        (&cert, &garbage, &garbage),
        (&missing, &key, &missing),
        (&cert, &missing, &missing),
    ] {
        match Tls::load(cert, key) {
            Err(ConfigError::TlsFile { path, reason }) => {
                assert_eq!(&path, bad, "{reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{} / {}: {other:?}", cert.display(), key.display()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_serves_the_new_certificate_and_keeps_the_old_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, first, tls) = identity(dir.path(), "first", KeyFormat::EcPkcs8);
    let running = tls_server(tls.clone()).await;
    let (addr, ca_pem) = (running.addr, ca.pem());
    let served = move || https_get(addr, &ca_pem, &[b"http/1.1"]).unwrap().1;
    let check = served.clone();
    assert_eq!(tokio::task::spawn_blocking(check).await.unwrap(), first.der);

    let second = ca.server("second", KeyFormat::EcSec1);
    files(dir.path(), &second, "");
    tls.reload().unwrap();
    let check = served.clone();
    assert_eq!(
        tokio::task::spawn_blocking(check).await.unwrap(),
        second.der
    );

    write(dir.path(), "key.pem", "broken\n");
    assert!(matches!(tls.reload(), Err(ConfigError::TlsFile { .. })));
    assert_eq!(
        tokio::task::spawn_blocking(served).await.unwrap(),
        second.der,
        "a failed reload keeps the certificate in force"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_port_refuses_the_other_protocol_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, _, tls) = identity(dir.path(), "server", KeyFormat::EcPkcs8);
    let tls_port = tls_server(tls).await;
    let plain_port = start().await;
    let (tls_addr, plain_addr, ca_pem) = (tls_port.addr, plain_port.addr, ca.pem());

    let started = Instant::now();
    let (plaintext_answer, handshake) = tokio::task::spawn_blocking(move || {
        let mut tcp = TcpStream::connect(tls_addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        (answer, https_get(plain_addr, &ca_pem, &[b"h2"]))
    })
    .await
    .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "both refusals are immediate"
    );
    assert!(
        plaintext_answer.starts_with("HTTP/1.1 400"),
        "{plaintext_answer}"
    );
    assert!(
        plaintext_answer.contains("This port speaks HTTPS"),
        "{plaintext_answer}"
    );
    let err = handshake.err().unwrap_or_default();
    assert!(
        err.contains("HandshakeFailure"),
        "a TLS alert from the plaintext port: {err}"
    );
    tls_port.shutdown().await.unwrap();
    plain_port.shutdown().await.unwrap();
}

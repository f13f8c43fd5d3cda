//! TLS in the server: the key formats and certificate chains [`open_deno_kv_server::Tls`] loads, what it
//! refuses, ALPN (h2 and http/1.1), and the fast refusal of a client that speaks the other
//! protocol. Every certificate is made by the test (`support/pki.rs`).

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

#[path = "support/capture.rs"]
mod capture;
mod common;
#[path = "support/pki.rs"]
mod pki;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capture::Captured;
use common::*;
use open_deno_kv_server::{ConfigError, Databases, MAX_TLS_FILE_BYTES, Tls};
use pki::{Ca, KeyFormat, write};
use time::OffsetDateTime;

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
    tls.reload().await.unwrap();
    let check = served.clone();
    assert_eq!(
        tokio::task::spawn_blocking(check).await.unwrap(),
        second.der
    );

    write(dir.path(), "key.pem", "broken\n");
    assert!(matches!(
        tls.reload().await,
        Err(ConfigError::TlsFile { .. })
    ));
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

/// Runs `f` on a thread of its own; panics if it has not returned within 10 s (a read blocked
/// on a FIFO, or reading `/dev/zero` forever).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(f());
    });
    receiver
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo (coreutils)");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A valid PEM chain larger than the cap: the certificate, repeated.
fn huge_chain(cert_pem: &str) -> String {
    let copies = usize::try_from(MAX_TLS_FILE_BYTES).unwrap() / cert_pem.len() + 2;
    cert_pem.repeat(copies)
}

/// The special and oversized files a certificate or key path may point at, each with what the
/// refusal says about it.
fn hostile_files(dir: &std::path::Path, cert_pem: &str) -> Vec<(PathBuf, &'static str)> {
    let fifo = dir.join("fifo.pem");
    mkfifo(&fifo);
    let zero = dir.join("zero.pem");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let huge = write(dir, "huge.pem", &huge_chain(cert_pem));
    let directory = dir.join("directory.pem");
    std::fs::create_dir(&directory).unwrap();
    vec![
        (fifo, "not a regular file (a FIFO)"),
        (zero, "not a regular file (a character device)"),
        (huge, "larger than the 1048576 bytes"),
        (directory, "not a regular file (a directory)"),
    ]
}

#[test]
fn special_and_huge_files_are_refused_without_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::root("kv test root");
    let one = ca.server("one", KeyFormat::EcPkcs8);
    let cert = write(dir.path(), "cert.pem", &one.cert_pem);
    let key = write(dir.path(), "key.pem", &one.key_pem);
    for (hostile, says) in hostile_files(dir.path(), &one.cert_pem) {
        for (cert, key) in [(&hostile, &key), (&cert, &hostile)] {
            let (c, k) = (cert.clone(), key.clone());
            let what = format!("loading {} / {}", c.display(), k.display());
            match within_10s(&what, move || Tls::load(c, k)) {
                Err(ConfigError::TlsFile { path, reason }) => {
                    assert_eq!(&path, &hostile, "{reason}");
                    assert!(reason.contains(says), "{what}: {reason}");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_from_special_or_huge_files_is_refused_and_the_certificate_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, first, tls) = identity(dir.path(), "first", KeyFormat::EcPkcs8);
    let running = tls_server(tls.clone()).await;
    let (addr, ca_pem) = (running.addr, ca.pem());
    let served = move || https_get(addr, &ca_pem, &[b"http/1.1"]).unwrap();
    let others = tempfile::tempdir().unwrap();
    for (hostile, says) in hostile_files(others.path(), &first.cert_pem) {
        for path in [tls.cert_path(), tls.key_path()] {
            let _ = std::fs::remove_file(path);
            std::os::unix::fs::symlink(&hostile, path).unwrap();
            let reload = tokio::time::timeout(Duration::from_secs(10), tls.reload())
                .await
                .unwrap_or_else(|_| panic!("reload from {}: no answer in 10 s", hostile.display()));
            match reload {
                Err(ConfigError::TlsFile { reason, .. }) => {
                    assert!(reason.contains(says), "{}: {reason}", hostile.display())
                }
                other => panic!("reload from {}: {other:?}", hostile.display()),
            }
            // The server still answers, with the certificate in force.
            let (_, certificate, answer) =
                tokio::task::spawn_blocking(served.clone()).await.unwrap();
            assert_eq!(certificate, first.der);
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            std::fs::remove_file(path).unwrap();
            files(dir.path(), &first, "");
        }
    }
    running.shutdown().await.unwrap();
}

/// A server certificate of `ca` valid from `not_before` to `not_after`, written as
/// `NAME-cert.pem` and `NAME-key.pem` in `dir`.
fn dated(
    dir: &std::path::Path,
    ca: &Ca,
    name: &str,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> (PathBuf, PathBuf) {
    let cert = ca.server_with(name, KeyFormat::EcPkcs8, |params| {
        params.not_before = not_before;
        params.not_after = not_after;
    });
    (
        write(dir, &format!("{name}-cert.pem"), &cert.cert_pem),
        write(dir, &format!("{name}-key.pem"), &cert.key_pem),
    )
}

#[test]
fn an_expired_certificate_is_refused_and_a_doubtful_one_warned_about_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::root("kv test root");
    let now = OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    let (cert, key) = dated(dir.path(), &ca, "expired", now - 30 * day, now - day);
    match Tls::load(&cert, &key) {
        Err(ConfigError::TlsExpired { path, not_after }) => {
            assert_eq!(path, cert);
            let message = ConfigError::TlsExpired { path, not_after }.to_string();
            assert!(message.contains("expired on"), "{message}");
        }
        other => panic!("an expired certificate: {other:?}"),
    }

    let captured = Captured::default();
    tracing::subscriber::with_default(captured.subscriber(tracing::Level::WARN), || {
        for (name, from, to) in [
            ("fine", now - day, now + 90 * day),
            ("soon", now - 30 * day, now + 5 * day),
            ("early", now + 2 * day, now + 90 * day),
        ] {
            let (cert, key) = dated(dir.path(), &ca, name, from, to);
            Tls::load(&cert, &key).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    });
    let lines = captured.lines();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].contains("soon-cert.pem") && lines[0].contains("expires on"),
        "{lines:#?}"
    );
    assert!(lines[0].contains("in 4 days"), "{lines:#?}");
    assert!(
        lines[1].contains("early-cert.pem") && lines[1].contains("is not valid before"),
        "{lines:#?}"
    );
}

#[test]
fn a_reload_refuses_an_expired_certificate_and_warns_about_a_soon_expiring_one() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, _, tls) = identity(dir.path(), "first", KeyFormat::EcPkcs8);
    let in_force = tls.validity();
    let now = OffsetDateTime::now_utc();
    let day = time::Duration::days(1);
    let captured = Captured::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    tracing::subscriber::with_default(captured.subscriber(tracing::Level::WARN), || {
        runtime.block_on(async {
            let replace = |name: &str, from, to| {
                let (cert, key) = dated(dir.path(), &ca, name, from, to);
                std::fs::rename(cert, tls.cert_path()).unwrap();
                std::fs::rename(key, tls.key_path()).unwrap();
            };
            replace("expired", now - 30 * day, now - day);
            assert!(
                matches!(tls.reload().await, Err(ConfigError::TlsExpired { .. })),
                "an expired certificate is refused on reload"
            );
            assert_eq!(tls.validity(), in_force, "the certificate in force stays");
            assert!(captured.lines().is_empty(), "{:#?}", captured.lines());

            replace("soon", now - 30 * day, now + 3 * day);
            tls.reload().await.unwrap();
            assert_ne!(tls.validity(), in_force, "the new certificate is in force");
        })
    });
    let lines = captured.lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("expires on") && lines[0].contains("in 2 days"),
        "{lines:#?}"
    );
}

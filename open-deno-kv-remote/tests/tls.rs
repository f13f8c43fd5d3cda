//! open-deno-kv-remote over TLS against open-deno-kv-server in the same process: `https://` with a CA file, and the
//! fast, clear refusals: a CA that did not sign the server's certificate, the system's roots
//! for a private CA, `https://` to a plaintext server, `http://` to a TLS server, and an
//! unusable CA file. Certificates are made by the test (open-deno-kv-server's `tests/support/pki.rs`).

#![allow(clippy::unwrap_used)]

#[path = "../../open-deno-kv-server/tests/support/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use open_deno_kv_engine_kit::{Backend, KvError};
use open_deno_kv_remote::{RemoteBackend, RemoteError, RemoteOptions};
use open_deno_kv_server::{Access, Databases, Server, ServerConfig, Tls};
use pki::{Ca, KeyFormat, write};

const TOKEN: &str = "remote-tls-token-0123456789";

/// Starts a server (HTTPS when `tls` is given) on 127.0.0.1; it stops when the sender drops.
async fn start(tls: Option<Tls>) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
    config.log_errors = false;
    config.shutdown_grace = Duration::from_millis(100);
    config.tls = tls;
    let server = Server::new(
        config,
        Databases::new(open_deno_kv_server::databases::new_memory_database()),
    )
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A CA file, and the server's TLS identity it signed, in `dir`.
fn pki(dir: &Path) -> (PathBuf, Tls) {
    let ca = Ca::root("kv remote test CA");
    let server = ca.server("kv remote test server", KeyFormat::EcPkcs8);
    let cert = write(dir, "cert.pem", &server.cert_pem);
    let key = write(dir, "key.pem", &server.key_pem);
    (
        write(dir, "ca.pem", &ca.pem()),
        Tls::load(cert, key).unwrap(),
    )
}

fn options(ca_file: Option<PathBuf>) -> RemoteOptions {
    let mut options = RemoteOptions::new(TOKEN);
    options.ca_file = ca_file;
    options
}

/// Connects, expecting a [`RemoteError::Tls`] within a second or two; returns its text.
async fn refused(url: &str, options: RemoteOptions) -> String {
    let started = Instant::now();
    let err = match RemoteBackend::connect(url, options).await {
        Ok(_) => panic!("{url}: connected"),
        Err(err) => err,
    };
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{url}: refused only after {:?}",
        started.elapsed()
    );
    let text = err.to_string();
    let KvError::Storage { source } = &err else {
        panic!("{url}: not a storage error: {err:?}");
    };
    assert!(
        matches!(
            source.downcast_ref::<RemoteError>(),
            Some(RemoteError::Tls { .. })
        ),
        "{url}: not a TLS error: {text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_servers_ca_works() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_file, tls) = pki(dir.path());
    let (addr, _stop) = start(Some(tls)).await;
    for host in ["localhost".to_owned(), "127.0.0.1".to_owned()] {
        let url = format!("https://{host}:{}/", addr.port());
        let kv = RemoteBackend::connect(&url, options(Some(ca_file.clone())))
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let key =
            open_deno_kv_engine_kit::encode_key(&open_deno_kv_engine_kit::key!["tls"]).unwrap();
        let mut write = open_deno_kv_engine_kit::AtomicWrite::default();
        write.mutations.push(open_deno_kv_engine_kit::Mutation::set(
            key.clone(),
            open_deno_kv_engine_kit::KvValue::Bytes(b"over TLS".to_vec().into()),
        ));
        kv.atomic_write(write).await.unwrap();
        let read = open_deno_kv_engine_kit::SnapshotRead {
            ranges: vec![open_deno_kv_engine_kit::ReadRange::single_encoded_key(key)],
            ..Default::default()
        };
        let entry = kv
            .snapshot_read(read)
            .await
            .unwrap()
            .remove(0)
            .entries
            .pop();
        assert_eq!(
            entry.map(|e| e.value),
            Some(open_deno_kv_engine_kit::KvValue::Bytes(
                b"over TLS".to_vec().into()
            ))
        );
        kv.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_did_not_sign_the_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, tls) = pki(dir.path());
    let other_ca = write(dir.path(), "other-ca.pem", &Ca::root("another CA").pem());
    let (addr, _stop) = start(Some(tls)).await;
    let url = format!("https://localhost:{}/", addr.port());
    let text = refused(&url, options(Some(other_ca))).await;
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(text.contains("not trusted"), "{text}");
    assert!(
        text.contains("--ca") && text.contains("KV_CA_FILE"),
        "{text}"
    );
    // The system's roots do not know the throwaway CA either.
    let text = refused(&url, options(None)).await;
    assert!(text.contains("TLS"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_plaintext_server_fails_fast_naming_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_file, _) = pki(dir.path());
    let (addr, _stop) = start(None).await;
    let text = refused(
        &format!("https://localhost:{}/", addr.port()),
        options(Some(ca_file)),
    )
    .await;
    assert!(text.contains("TLS handshake"), "{text}");
    assert!(text.contains("use an http:// URL"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_to_a_tls_server_fails_fast_with_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (_, tls) = pki(dir.path());
    let (addr, _stop) = start(Some(tls)).await;
    let text = refused(&format!("http://{addr}/"), options(None)).await;
    assert!(text.contains("This port speaks HTTPS"), "{text}");
    assert!(text.contains("https://"), "{text}");
}

#[test]
fn an_unusable_ca_file_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = write(dir.path(), "garbage.pem", "no certificate here\n");
    for file in [garbage, dir.path().join("missing.pem")] {
        let err = RemoteBackend::connect_lazy("https://localhost:1/", options(Some(file.clone())))
            .err()
            .unwrap_or_else(|| panic!("{} accepted", file.display()));
        let text = err.to_string();
        assert!(
            text.contains("CA file") && text.contains(&*file.to_string_lossy()),
            "{text}"
        );
    }
}

//! The whole conformance suite through the network over TLS: open-deno-kv-remote → open-deno-kv-server (HTTPS,
//! HTTP/2 by ALPN, on localhost) → open-deno-kv-memory, in one process. The server's certificate is made
//! here, signed by a throwaway CA whose file the client is given as `RemoteOptions::ca_file`;
//! the servers are those of `conformance.rs` (`support/conformance_server.rs`).

#![allow(clippy::unwrap_used)]

#[path = "support/conformance_server.rs"]
mod conformance_server;
#[path = "../../open-deno-kv-server/tests/support/pki.rs"]
mod pki;

use conformance_server::TlsSetup;
use pki::{Ca, KeyFormat, write};

/// A CA, a server certificate it signed, and their files (in the target directory, made anew by
/// each run).
fn tls_setup() -> TlsSetup {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("open-deno-kv-remote-conformance-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = Ca::root("kv conformance CA");
    let server = ca.server("kv conformance server", KeyFormat::EcPkcs8);
    let cert = write(&dir, "cert.pem", &server.cert_pem);
    let key = write(&dir, "key.pem", &server.key_pem);
    TlsSetup {
        server: open_deno_kv_server::Tls::load(cert, key).unwrap(),
        ca_file: write(&dir, "ca.pem", &ca.pem()),
    }
}

open_deno_kv_conformance::conformance_main!(
    factory = conformance_server::factory(Some(tls_setup()))
);

//! Throwaway certificates for the TLS tests, made fresh by each test with rcgen: a root CA, an
//! intermediate CA under it, and server certificates for `localhost` and `127.0.0.1` whose keys
//! come in each PEM form a server accepts (PKCS#8, SEC1 for EC, PKCS#1 for RSA).
//!
//! The RSA key is `rsa-2048.pkcs8.pem` beside this file (made once with
//! `openssl genpkey -algorithm RSA`; ring, which rcgen uses here, cannot generate RSA keys). It
//! protects nothing: every certificate over it is made by the test that uses it.
//!
//! Shared by open-deno-kv-server's, open-deno-kv-remote's and open-deno-kv-cli's TLS tests (`#[path]`), so not every item is
//! used by each.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// The RSA key the RSA certificates use (PKCS#8 PEM).
const RSA_KEY_PKCS8: &str = include_str!("rsa-2048.pkcs8.pem");

/// A certificate authority that signs certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// How a server's private key is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// P-256, PKCS#8 (`PRIVATE KEY`).
    EcPkcs8,
    /// P-256, SEC1 (`EC PRIVATE KEY`).
    EcSec1,
    /// RSA 2048, PKCS#8 (`PRIVATE KEY`).
    RsaPkcs8,
    /// RSA 2048, PKCS#1 (`RSA PRIVATE KEY`).
    RsaPkcs1,
}

/// A server certificate (PEM, without its issuers) and its key (PEM, in the format asked).
pub struct ServerCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
    /// The certificate, DER (to recognise it in a handshake).
    pub der: Vec<u8>,
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

impl Ca {
    /// A self-signed root CA.
    pub fn root(name: &str) -> Ca {
        let issuer = CertifiedIssuer::self_signed(ca_params(name), KeyPair::generate().unwrap());
        Ca {
            issuer: issuer.unwrap(),
        }
    }

    /// An intermediate CA signed by this one.
    pub fn intermediate(&self, name: &str) -> Ca {
        let issuer =
            CertifiedIssuer::signed_by(ca_params(name), KeyPair::generate().unwrap(), &self.issuer);
        Ca {
            issuer: issuer.unwrap(),
        }
    }

    /// This CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1`, named `name`, signed by this CA.
    pub fn server(&self, name: &str, format: KeyFormat) -> ServerCert {
        self.server_with(name, format, |_| {})
    }

    /// As [`Ca::server`], with `edit` applied to the certificate's parameters before signing
    /// (validity dates, for instance).
    pub fn server_with(
        &self,
        name: &str,
        format: KeyFormat,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> ServerCert {
        let key = match format {
            KeyFormat::EcPkcs8 | KeyFormat::EcSec1 => KeyPair::generate().unwrap(),
            KeyFormat::RsaPkcs8 | KeyFormat::RsaPkcs1 => KeyPair::from_pem(RSA_KEY_PKCS8).unwrap(),
        };
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        edit(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pkcs8 = key.serialize_der();
        let key_pem = match format {
            KeyFormat::EcPkcs8 | KeyFormat::RsaPkcs8 => key.serialize_pem(),
            KeyFormat::EcSec1 => pem("EC PRIVATE KEY", &inner_key(&pkcs8)),
            KeyFormat::RsaPkcs1 => pem("RSA PRIVATE KEY", &inner_key(&pkcs8)),
        };
        ServerCert {
            cert_pem: cert.pem(),
            key_pem,
            der: cert.der().to_vec(),
        }
    }
}

/// The key a PKCS#8 `PrivateKeyInfo` wraps: its `privateKey` OCTET STRING, which holds the
/// SEC1 `ECPrivateKey` or the PKCS#1 `RSAPrivateKey`.
fn inner_key(pkcs8: &[u8]) -> Vec<u8> {
    // SEQUENCE { INTEGER version, SEQUENCE algorithm, OCTET STRING privateKey, ... }
    let (_, body, _) = der_item(pkcs8);
    let (_, _, rest) = der_item(body);
    let (_, _, rest) = der_item(rest);
    let (tag, key, _) = der_item(rest);
    assert_eq!(tag, 0x04, "PKCS#8 privateKey is an OCTET STRING");
    key.to_vec()
}

/// One DER item: (tag, contents, what follows).
fn der_item(der: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = der[0];
    let (len, header) = match der[1] {
        short if short < 0x80 => (usize::from(short), 2),
        long => {
            let n = usize::from(long & 0x7f);
            let len = der[2..2 + n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, 2 + n)
        }
    };
    (tag, &der[header..header + len], &der[header + len..])
}

/// PEM text of `der` under `label`.
pub fn pem(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// Writes `contents` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// A rustls client configuration (ring) trusting only `ca_pem`, offering ALPN `alpn`.
pub fn client_config(ca_pem: &str, alpn: &[&[u8]]) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    std::sync::Arc::new(config)
}

/// A blocking HTTPS connection (rustls, ring) to a test server, as `localhost`.
pub struct HttpsConnection {
    conn: rustls::ClientConnection,
    tcp: TcpStream,
}

impl HttpsConnection {
    /// Connects to `addr` trusting only `ca_pem`, offering `alpn`, and completes the handshake.
    pub fn open(addr: SocketAddr, ca_pem: &str, alpn: &[&[u8]]) -> Result<Self, String> {
        let config = client_config(ca_pem, alpn);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
        let mut tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
        }
        Ok(HttpsConnection { conn, tcp })
    }

    /// The protocol ALPN chose.
    pub fn alpn(&self) -> Option<Vec<u8>> {
        self.conn.alpn_protocol().map(<[u8]>::to_vec)
    }

    /// The server's certificate (DER).
    pub fn certificate(&self) -> Vec<u8> {
        self.conn.peer_certificates().unwrap()[0].to_vec()
    }

    /// `GET /health` over HTTP/1.1 on this connection, kept open: the answer's head and body.
    pub fn health(&mut self) -> Result<String, String> {
        let mut tls = rustls::Stream::new(&mut self.conn, &mut self.tcp);
        tls.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let mut byte = [0u8; 1];
        while !answer.ends_with(b"\r\n\r\n") {
            match tls.read(&mut byte).map_err(|e| e.to_string())? {
                0 => return Err(format!("closed: {}", String::from_utf8_lossy(&answer))),
                _ => answer.push(byte[0]),
            }
        }
        let head = String::from_utf8_lossy(&answer).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        tls.read_exact(&mut body).map_err(|e| e.to_string())?;
        answer.extend_from_slice(&body);
        Ok(String::from_utf8_lossy(&answer).into_owned())
    }
}

//! TLS: serving `https://` with rustls (its `ring` provider), HTTP/2 and HTTP/1.1 chosen by ALPN,
//! and reloading the certificate without a restart.
//!
//! [`Tls::load`] reads a PEM certificate chain (the server's certificate first, then its
//! intermediates) and a PEM private key (PKCS#8 `PRIVATE KEY`, PKCS#1 `RSA PRIVATE KEY` or SEC1
//! `EC PRIVATE KEY`); rustls checks that the key belongs to the certificate. Each accepted
//! connection takes the configuration in force when its handshake starts, so
//! [`Tls::reload`] (which `kv serve` calls on SIGHUP) changes what new connections see and
//! leaves established ones alone; a reload that fails keeps the old certificate.
//!
//! A TLS port and a plaintext port each recognise the other protocol from the first byte a
//! client sends (a TLS connection always begins with a handshake record, byte `0x16`; an HTTP
//! request with a method name or HTTP/2's `PRI` preface): see `connection.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig as RustlsConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config_error::ConfigError;

/// The first byte of every TLS connection: the record type of a handshake message.
pub(crate) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The ALPN protocols offered, preferred first: HTTP/2 (what Deno asks for), then HTTP/1.1.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A server certificate and key read from PEM files, reloadable (see the module docs). Cheap to
/// clone: clones share the configuration, so a reload through one is seen by all.
#[derive(Clone)]
pub struct Tls {
    inner: Arc<TlsFiles>,
}

struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<RustlsConfig>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert", &self.inner.cert)
            .field("key", &self.inner.key)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Reads the certificate chain at `cert` and the private key at `key` (both PEM) and checks
    /// that they make a usable server identity.
    pub fn load(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Result<Tls, ConfigError> {
        let (cert, key) = (cert.into(), key.into());
        let config = server_config(&cert, &key)?;
        Ok(Tls {
            inner: Arc::new(TlsFiles {
                cert,
                key,
                current: RwLock::new(Arc::new(config)),
            }),
        })
    }

    /// Reads both files again and, if they are valid, serves them to every connection made from
    /// now on; connections already established keep the certificate they were opened with. On
    /// an error the certificate in force stays.
    pub fn reload(&self) -> Result<(), ConfigError> {
        let config = server_config(&self.inner.cert, &self.inner.key)?;
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        Ok(())
    }

    /// The certificate chain's file.
    pub fn cert_path(&self) -> &Path {
        &self.inner.cert
    }

    /// The private key's file.
    pub fn key_path(&self) -> &Path {
        &self.inner.key
    }

    /// An acceptor with the configuration in force now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        let config = self
            .inner
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        TlsAcceptor::from(config)
    }
}

/// Reads `path` whole, naming it in the error.
fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::TlsFile {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The rustls configuration for this certificate chain and key.
fn server_config(cert: &Path, key: &Path) -> Result<RustlsConfig, ConfigError> {
    let bad = |path: &Path, reason: String| ConfigError::TlsFile {
        path: path.to_path_buf(),
        reason,
    };
    let cert_pem = read(cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(bad(
            cert,
            "no certificate in it (expected PEM blocks \"-----BEGIN CERTIFICATE-----\")".into(),
        ));
    }
    let key_pem = read(key)?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        bad(
            key,
            format!(
                "no usable private key ({e}); expected a PEM PKCS#8 \"PRIVATE KEY\", PKCS#1 \
                 \"RSA PRIVATE KEY\" or SEC1 \"EC PRIVATE KEY\""
            ),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = RustlsConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::TlsRefused(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| {
            ConfigError::TlsRefused(format!(
                "the key {} does not go with the certificate {}: {e}",
                key.display(),
                cert.display()
            ))
        })?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

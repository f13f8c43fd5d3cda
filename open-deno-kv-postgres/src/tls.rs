//! TLS to PostgreSQL with libpq's meanings of `sslmode`, `sslrootcert`, `sslcert` and `sslkey`,
//! over rustls (its `ring` provider, as `kv serve` uses; no OpenSSL).
//!
//! | `sslmode` | encrypted | the server's certificate is checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default, as libpq's) | when the server offers TLS; else, or when the handshake fails, in plaintext | only if `sslrootcert` is given: signed by it (not the host name) |
//! | `require` | always (a server without TLS is refused) | only if `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a CA of `sslrootcert` (any host name) |
//! | `verify-full` | always | signed by a CA of `sslrootcert`, and valid for the URL's host name (or IP address) |
//!
//! `sslrootcert` is a PEM file of CA certificates, or `system` for the operating system's
//! trusted roots; as in libpq, `system` makes `verify-full` the default and refuses weaker modes.
//! `sslcert` and `sslkey` (PEM) give a client certificate, for `hostssl ... cert` lines of
//! `pg_hba.conf`. Unlike libpq, files are never looked for in `~/.postgresql/`: name them. Every
//! file is read when the URL is parsed, so a missing or unreadable file is refused before
//! anything is connected to.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::PostgresError;

/// libpq's `sslmode`: whether the connection is encrypted, and what of the server's
/// certificate is checked (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    /// Never encrypted.
    Disable,
    /// Encrypted when the server offers it; plaintext otherwise.
    Prefer,
    /// Always encrypted; the certificate is checked only against an `sslrootcert` given.
    Require,
    /// Always encrypted; the certificate must be signed by a trusted CA.
    VerifyCa,
    /// Always encrypted; the certificate must be signed by a trusted CA and name the host.
    VerifyFull,
}

impl SslMode {
    /// The modes and their names in URLs.
    const NAMES: [(&'static str, SslMode); 5] = [
        ("disable", SslMode::Disable),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ];

    /// The mode named `value` in a URL.
    pub(crate) fn parse(value: &str) -> Result<SslMode, PostgresError> {
        if let Some((_, mode)) = Self::NAMES.iter().find(|(name, _)| *name == value) {
            return Ok(*mode);
        }
        let expected = if value == "allow" {
            "sslmode=allow (plaintext first, TLS only if the server insists) is not supported; \
             use prefer (TLS first, plaintext if the server has none) or disable"
        } else {
            "one of disable, prefer, require, verify-ca, verify-full"
        };
        Err(PostgresError::InvalidParameter {
            parameter: "sslmode".to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        })
    }

    /// The name of the mode in a URL.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, mode)| *mode == self)
            .map_or("prefer", |(name, _)| name)
    }

    /// How tokio-postgres is to negotiate: it knows only whether TLS is off, tried or required;
    /// the certificate checks are the verifier's.
    pub(crate) fn negotiation(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Client;
        match self {
            SslMode::Disable => Client::Disable,
            SslMode::Prefer => Client::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Client::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The CA certificates to check the server's certificate against (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// The operating system's trusted roots (`sslrootcert=system`).
    System,
    /// The CA certificates of a PEM file.
    File(String),
}

/// The TLS parameters of a connection URL, as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TlsParams {
    /// `sslmode`, if given.
    pub(crate) mode: Option<SslMode>,
    /// `sslrootcert`, if given.
    pub(crate) root_cert: Option<RootCert>,
    /// `sslcert`, if given.
    pub(crate) client_cert: Option<String>,
    /// `sslkey`, if given.
    pub(crate) client_key: Option<String>,
}

/// A connection's TLS, its files read: the mode and the rustls connector that gives it
/// libpq's meaning.
#[derive(Clone)]
pub(crate) struct Tls {
    /// The mode in force (given, or libpq's default).
    pub(crate) mode: SslMode,
    /// The connector tokio-postgres hands each connection to.
    pub(crate) connector: MakeRustlsConnect,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish()
    }
}

impl TlsParams {
    /// Reads the files and builds the connector: every bad value or file is refused here.
    pub(crate) fn load(&self) -> Result<Tls, PostgresError> {
        let mode = match (self.mode, &self.root_cert) {
            (Some(mode), _) => mode,
            // libpq: a system root store makes full verification the default.
            (None, Some(RootCert::System)) => SslMode::VerifyFull,
            (None, _) => SslMode::Prefer,
        };
        if self.root_cert == Some(RootCert::System) && mode != SslMode::VerifyFull {
            return Err(PostgresError::InvalidParameter {
                parameter: "sslmode".to_owned(),
                value: mode.name().to_owned(),
                expected: "sslrootcert=system needs sslmode=verify-full (as in libpq): the \
                           system's roots vouch for host names, so checking less is pointless"
                    .to_owned(),
            });
        }
        let roots = match &self.root_cert {
            None => None,
            Some(RootCert::System) => Some(system_roots()?),
            Some(RootCert::File(path)) => Some(file_roots(path)?),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (mode, roots) {
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(PostgresError::InvalidParameter {
                    parameter: "sslmode".to_owned(),
                    value: mode.name().to_owned(),
                    expected: "verify-ca and verify-full check the server's certificate against \
                               CA certificates: name them with sslrootcert=FILE (a PEM file), or \
                               sslrootcert=system for the system's trusted roots"
                        .to_owned(),
                });
            }
            (SslMode::VerifyFull, Some(roots)) => {
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| PostgresError::TlsFile {
                        parameter: "sslrootcert",
                        path: self.root_cert_name(),
                        reason: e.to_string(),
                    })?
            }
            // libpq: with a root certificate, `require` (and `prefer`) check the chain as
            // `verify-ca` does.
            (_, roots) => Arc::new(WithoutHostName {
                roots: roots.map(Arc::new),
                provider: provider.clone(),
            }),
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| PostgresError::TlsHandshake {
                server: String::new(),
                reason: format!("rustls refuses its own defaults: {e}"),
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = read_certs("sslcert", cert)?;
                let key = read_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| PostgresError::TlsFile {
                        parameter: "sslkey",
                        path: key_name(&self.client_key),
                        reason: format!("does not fit the certificate of sslcert: {e}"),
                    })?
            }
            (Some(cert), None) => {
                return Err(PostgresError::InvalidParameter {
                    parameter: "sslcert".to_owned(),
                    value: cert.clone(),
                    expected: "a client certificate needs its private key: add sslkey=FILE"
                        .to_owned(),
                });
            }
            (None, Some(key)) => {
                return Err(PostgresError::InvalidParameter {
                    parameter: "sslkey".to_owned(),
                    value: key.clone(),
                    expected: "a private key needs its certificate: add sslcert=FILE".to_owned(),
                });
            }
        };
        Ok(Tls {
            mode,
            connector: MakeRustlsConnect::new(config),
        })
    }

    fn root_cert_name(&self) -> String {
        match &self.root_cert {
            Some(RootCert::File(path)) => path.clone(),
            Some(RootCert::System) => "system".to_owned(),
            None => String::new(),
        }
    }
}

fn key_name(key: &Option<String>) -> String {
    key.clone().unwrap_or_default()
}

/// The operating system's trusted roots.
fn system_roots() -> Result<RootCertStore, PostgresError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(PostgresError::TlsFile {
            parameter: "sslrootcert",
            path: "system".to_owned(),
            reason: format!(
                "no trusted root certificate found on this system ({}); install the CA \
                 certificates (Debian: ca-certificates) or name a PEM file",
                errors.join("; ")
            ),
        });
    }
    Ok(roots)
}

/// The CA certificates of the PEM file `path`.
fn file_roots(path: &str) -> Result<RootCertStore, PostgresError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("sslrootcert", path)? {
        roots.add(cert).map_err(|e| PostgresError::TlsFile {
            parameter: "sslrootcert",
            path: path.to_owned(),
            reason: format!("holds a certificate rustls cannot use as a CA: {e}"),
        })?;
    }
    Ok(roots)
}

/// The certificates of the PEM file `path` (at least one).
fn read_certs(
    parameter: &'static str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, PostgresError> {
    let refuse = |reason: String| PostgresError::TlsFile {
        parameter,
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refuse(format!("is not a PEM file of certificates: {e}")))?;
    if certs.is_empty() {
        return Err(refuse(
            "holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(certs)
}

/// The private key of the PEM file `path`.
fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, PostgresError> {
    let refuse = |reason: String| PostgresError::TlsFile {
        parameter: "sslkey",
        path: path.to_owned(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        refuse(format!(
            "holds no usable private key ({e}); expected an unencrypted PEM key (PKCS#8, \
             PKCS#1 or SEC1): encrypted keys (sslpassword) are not supported"
        ))
    })
}

/// Every mode but `verify-full`: the host name is not checked.
///
/// - With `roots` (`verify-ca`, and `require`/`prefer` with an `sslrootcert`), the certificate
///   chain must lead to a trusted CA.
/// - Without (`prefer` and `require` without an `sslrootcert`, as libpq), the connection is
///   encrypted but the certificate is not checked (the handshake's own signature still is), so
///   an active attacker on the path can pose as the server. The docs say so; `verify-full` is
///   the mode that prevents it.
#[derive(Debug)]
struct WithoutHostName {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for WithoutHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_libpq_mode_parses_and_others_are_refused_by_name() {
        for (name, mode) in SslMode::NAMES {
            assert_eq!(SslMode::parse(name).ok(), Some(mode));
            assert_eq!(mode.name(), name);
        }
        for bad in ["", "Require", "verify_full", "on", "allow"] {
            let err = SslMode::parse(bad).err().map(|e| e.to_string());
            let err = err.unwrap_or_default();
            assert!(err.contains("sslmode"), "{bad}: {err}");
        }
        let allow = SslMode::parse("allow").err().map(|e| e.to_string());
        assert!(allow.unwrap_or_default().contains("not supported"));
    }

    #[test]
    fn the_default_is_prefer_and_system_roots_mean_verify_full() {
        let mode = |params: TlsParams| params.load().map(|tls| tls.mode).map_err(|e| e.to_string());
        assert_eq!(mode(TlsParams::default()), Ok(SslMode::Prefer));
        let system = TlsParams {
            root_cert: Some(RootCert::System),
            mode: Some(SslMode::Require),
            ..TlsParams::default()
        };
        let refused = mode(system).err().unwrap_or_default();
        assert!(refused.contains("verify-full"), "{refused}");
    }

    #[test]
    fn verification_without_a_root_certificate_is_refused() {
        for checked in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let params = TlsParams {
                mode: Some(checked),
                ..TlsParams::default()
            };
            let err = params
                .load()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains("sslrootcert"), "{err}");
        }
    }

    #[test]
    fn missing_files_are_named() {
        let params = TlsParams {
            mode: Some(SslMode::VerifyCa),
            root_cert: Some(RootCert::File("/nonexistent/ca.pem".to_owned())),
            ..TlsParams::default()
        };
        let err = params.load().err();
        assert!(
            matches!(&err, Some(PostgresError::TlsFile { parameter: "sslrootcert", path, .. }) if path == "/nonexistent/ca.pem"),
            "{err:?}"
        );
        let half = TlsParams {
            client_cert: Some("client.pem".to_owned()),
            ..TlsParams::default()
        };
        let err = half.load().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("sslkey"), "{err}");
    }
}

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
//! The files are read with care, since a path an operator pointed at can hold anything: each
//! must be a regular file (a FIFO would block the reader forever, a device such as `/dev/zero`
//! never ends) of at most [`MAX_TLS_FILE_BYTES`], checked before it is opened and again on the
//! opened file; [`Tls::reload`] reads them on a blocking thread, never on the async runtime.
//!
//! The leaf certificate's validity is read (with x509-parser) at every load: one that has
//! expired is refused, at start as on reload, since no client would accept it (on reload the
//! certificate in force stays); one not valid yet, or expiring within [`EXPIRY_WARNING`], is
//! served with a warning, at start and at each reload.
//!
//! A TLS port and a plaintext port each recognise the other protocol from the first byte a
//! client sends (a TLS connection always begins with a handshake record, byte `0x16`; an HTTP
//! request with a method name or HTTP/2's `PRI` preface): see `connection.rs`.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::ServerConfig as RustlsConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config_error::ConfigError;

/// The first byte of every TLS connection: the record type of a handshake message.
pub(crate) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The largest certificate chain or key file read: 1 MiB. A chain (the leaf and a few
/// intermediates, even with 4096-bit RSA keys) and a key take a few KB of PEM; 1 MiB is
/// hundreds of times that, and still a trivial amount of memory to read whole, while a path
/// pointing at a huge file (or a log, or a disk image) is refused before it is read.
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// A leaf certificate that expires sooner than this (14 days) is warned about at start and at
/// each reload.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 60 * 60);

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
    current: RwLock<Loaded>,
}

/// A configuration read from the files, with its leaf's validity.
#[derive(Clone)]
struct Loaded {
    config: Arc<RustlsConfig>,
    validity: Validity,
}

/// When a certificate is valid: its `notBefore` and `notAfter` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// The first moment it is valid.
    pub not_before: SystemTime,
    /// The last moment it is valid.
    pub not_after: SystemTime,
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
    /// that they make a usable server identity whose leaf has not expired (a warning is logged
    /// if it is not valid yet or expires within [`EXPIRY_WARNING`]).
    ///
    /// This reads files on the calling thread: from async code, call it through
    /// `tokio::task::spawn_blocking`.
    pub fn load(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Result<Tls, ConfigError> {
        let (cert, key) = (cert.into(), key.into());
        let loaded = load_files(&cert, &key, SystemTime::now())?;
        warn_about_validity(&cert, loaded.validity, SystemTime::now());
        Ok(Tls {
            inner: Arc::new(TlsFiles {
                cert,
                key,
                current: RwLock::new(loaded),
            }),
        })
    }

    /// Reads both files again, on a blocking thread, and, if they are valid, serves them to every
    /// connection made from now on; connections already established keep the certificate they
    /// were opened with. On an error (a file that is not a regular file or is larger than
    /// [`MAX_TLS_FILE_BYTES`], a key that does not match, an expired certificate...) the
    /// certificate in force stays. A certificate not valid yet or expiring within
    /// [`EXPIRY_WARNING`] is put in force with a warning.
    pub async fn reload(&self) -> Result<(), ConfigError> {
        let (cert, key) = (self.inner.cert.clone(), self.inner.key.clone());
        let loaded =
            tokio::task::spawn_blocking(move || load_files(&cert, &key, SystemTime::now()))
                .await
                .map_err(|e| ConfigError::TlsFile {
                    path: self.inner.cert.clone(),
                    reason: format!("the thread reading it failed: {e}"),
                })??;
        warn_about_validity(&self.inner.cert, loaded.validity, SystemTime::now());
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(())
    }

    /// The validity of the leaf certificate in force.
    pub fn validity(&self) -> Validity {
        self.inner
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .validity
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
            .config
            .clone();
        TlsAcceptor::from(config)
    }
}

/// Reads `path` whole if it is a regular file of at most [`MAX_TLS_FILE_BYTES`], naming it in the
/// error. The kind of file is checked before opening (opening a FIFO for reading waits for a
/// writer) and again on the opened file, which is opened non-blocking on Unix, so a file swapped
/// for a FIFO in between cannot block either.
fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let refuse = |reason: String| ConfigError::TlsFile {
        path: path.to_path_buf(),
        reason,
    };
    let check = |metadata: std::fs::Metadata| {
        if !metadata.is_file() {
            return Err(refuse(format!(
                "not a regular file (a {}); give the path of a PEM file",
                file_kind(&metadata)
            )));
        }
        if metadata.len() > MAX_TLS_FILE_BYTES {
            return Err(refuse(too_large(metadata.len())));
        }
        Ok(())
    };
    check(std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| refuse(e.to_string()))?;
    check(file.metadata().map_err(|e| refuse(e.to_string()))?)?;
    let mut bytes = Vec::new();
    file.take(MAX_TLS_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(e.to_string()))?;
    if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
        // It grew after it was checked.
        return Err(refuse(too_large(bytes.len() as u64)));
    }
    Ok(bytes)
}

fn too_large(len: u64) -> String {
    format!(
        "{len} bytes, larger than the {MAX_TLS_FILE_BYTES} bytes a certificate chain or key \
         file may have (a chain takes a few KB)"
    )
}

/// What kind of file `metadata` describes, for an error.
fn file_kind(metadata: &std::fs::Metadata) -> &'static str {
    let kind = metadata.file_type();
    if kind.is_dir() {
        return "directory";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "FIFO";
        }
        if kind.is_char_device() {
            return "character device";
        }
        if kind.is_block_device() {
            return "block device";
        }
        if kind.is_socket() {
            return "socket";
        }
    }
    "special file"
}

/// Reads and checks both files (see [`Tls::reload`]); `now` decides whether the leaf expired.
fn load_files(cert: &Path, key: &Path, now: SystemTime) -> Result<Loaded, ConfigError> {
    let (config, leaf) = server_config(cert, key)?;
    let validity = validity(cert, &leaf)?;
    if now > validity.not_after {
        return Err(ConfigError::TlsExpired {
            path: cert.to_path_buf(),
            not_after: rfc3339(validity.not_after),
        });
    }
    Ok(Loaded {
        config: Arc::new(config),
        validity,
    })
}

/// The leaf's validity period, read by x509-parser.
fn validity(cert: &Path, leaf: &CertificateDer<'_>) -> Result<Validity, ConfigError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(leaf).map_err(|e| ConfigError::TlsFile {
        path: cert.to_path_buf(),
        reason: format!("its first certificate is not a readable X.509 certificate: {e}"),
    })?;
    let at = |seconds: i64| match u64::try_from(seconds) {
        Ok(after) => UNIX_EPOCH + Duration::from_secs(after),
        Err(_) => UNIX_EPOCH - Duration::from_secs(seconds.unsigned_abs()),
    };
    let validity = parsed.validity();
    Ok(Validity {
        not_before: at(validity.not_before.timestamp()),
        not_after: at(validity.not_after.timestamp()),
    })
}

/// What should be said about serving a certificate valid over `validity` at `now`, if anything.
fn validity_warning(validity: Validity, now: SystemTime) -> Option<String> {
    if now < validity.not_before {
        return Some(format!(
            "is not valid before {}: clients refuse it until then (is this machine's clock \
             right?)",
            rfc3339(validity.not_before)
        ));
    }
    let left = validity.not_after.duration_since(now).ok()?;
    (left < EXPIRY_WARNING).then(|| {
        format!(
            "expires on {} (in {} days, {} hours): renew it, then reload (SIGHUP to kv serve)",
            rfc3339(validity.not_after),
            left.as_secs() / 86_400,
            left.as_secs() % 86_400 / 3_600
        )
    })
}

fn warn_about_validity(cert: &Path, validity: Validity, now: SystemTime) {
    if let Some(warning) = validity_warning(validity, now) {
        tracing::warn!(cert = %cert.display(), "TLS certificate {warning}");
    }
}

/// `time` as an RFC 3339 UTC date and time, to the second.
fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The rustls configuration for this certificate chain and key, and the chain's leaf.
fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<(RustlsConfig, CertificateDer<'static>), ConfigError> {
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
    let leaf = chain[0].clone();
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
    Ok((config, leaf))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn valid(from: SystemTime, to: SystemTime) -> Validity {
        Validity {
            not_before: from,
            not_after: to,
        }
    }

    #[test]
    fn validity_warnings() {
        let now = UNIX_EPOCH + 20_000 * DAY;
        assert_eq!(
            validity_warning(valid(now - DAY, now + 90 * DAY), now),
            None
        );
        assert_eq!(
            validity_warning(valid(now - DAY, now + 14 * DAY), now),
            None
        );
        let soon = validity_warning(valid(now - DAY, now + 13 * DAY), now).unwrap();
        assert!(soon.starts_with("expires on "), "{soon}");
        assert!(soon.contains("in 13 days, 0 hours"), "{soon}");
        let early = validity_warning(valid(now + DAY, now + 90 * DAY), now).unwrap();
        assert!(early.starts_with("is not valid before "), "{early}");
    }
}

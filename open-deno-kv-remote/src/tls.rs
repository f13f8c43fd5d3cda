//! Connections: plain TCP for `http://` (h2c), TLS with rustls (its `ring` provider) for
//! `https://`, verifying the server's certificate against the system's root certificates or the
//! CA file of [`RemoteOptions::ca_file`](crate::RemoteOptions::ca_file). There is no way to skip
//! verification.
//!
//! A client that speaks the wrong protocol fails at once with [`WrongTransport`], which the
//! transport reports as [`RemoteError::Tls`](crate::RemoteError::Tls) and never retries:
//! - `https://` to a plaintext server: the TLS handshake fails (open-deno-kv-server answers a TLS
//!   handshake on a plaintext port with a TLS alert);
//! - `http://` to a TLS server: open-deno-kv-server answers the HTTP/2 preface with a plaintext
//!   `HTTP/1.1 400` saying the port speaks HTTPS; an HTTP/2 server never begins its answer with
//!   `HTTP/`, so the first bytes read tell.

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::{AlertDescription, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A connection that cannot work because of TLS: a failed handshake (untrusted certificate,
/// wrong name, a server that speaks plaintext), or a TLS server reached with `http://`.
#[derive(Debug, Clone)]
pub(crate) struct WrongTransport(pub(crate) String);

impl std::fmt::Display for WrongTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WrongTransport {}

impl WrongTransport {
    /// Finds a [`WrongTransport`] in an error's source chain (also inside an [`io::Error`]).
    pub(crate) fn find(err: &(dyn std::error::Error + 'static)) -> Option<WrongTransport> {
        let mut next = Some(err);
        while let Some(err) = next {
            if let Some(found) = err.downcast_ref::<WrongTransport>() {
                return Some(found.clone());
            }
            if let Some(found) = err
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<WrongTransport>())
            {
                return Some(found.clone());
            }
            next = err.source();
        }
        None
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The last [`WrongTransport`] a connection of one client met. hyper reports a connection that
/// died of it to the requests waiting on it as merely "closed", so the transport looks here too.
#[derive(Clone, Default)]
pub(crate) struct LastFailure(Arc<Mutex<Option<WrongTransport>>>);

impl LastFailure {
    fn record(&self, failure: &WrongTransport) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(failure.clone());
    }

    /// The failure recorded since the last call, if any.
    pub(crate) fn take(&self) -> Option<WrongTransport> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Where TLS gets its trusted roots, and the connector once they are loaded.
#[derive(Clone)]
pub(crate) struct Connector {
    http: HttpConnector,
    /// Built on the first `https://` connection from the system's roots, or at once from a CA
    /// file (so a bad file is reported when the backend is opened).
    tls: Arc<OnceLock<Result<TlsConnector, String>>>,
    /// Where connections record a [`WrongTransport`].
    pub(crate) failures: LastFailure,
}

impl Connector {
    /// A connector for `http://` and `https://`; `ca_file`: trust only the CA certificates in
    /// this PEM file instead of the system's roots.
    pub(crate) fn new(http: HttpConnector, ca_file: Option<&Path>) -> Result<Self, String> {
        let tls = Arc::new(OnceLock::new());
        if let Some(file) = ca_file {
            let _ = tls.set(Ok(tls_connector(roots_from_file(file)?)?));
        }
        Ok(Connector {
            http,
            tls,
            failures: LastFailure::default(),
        })
    }

    fn tls(&self) -> Result<TlsConnector, String> {
        self.tls
            .get_or_init(|| system_roots().and_then(tls_connector))
            .clone()
    }
}

/// The CA certificates in a PEM file.
fn roots_from_file(file: &Path) -> Result<RootCertStore, String> {
    let bad = |reason: String| format!("CA file {}: {reason}", file.display());
    let pem = std::fs::read(file).map_err(|e| bad(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(bad(
            "no certificate in it (expected \"-----BEGIN CERTIFICATE-----\" blocks)".into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| bad(format!("a certificate cannot be used as a root: {e}")))?;
    }
    Ok(roots)
}

/// The operating system's trusted root certificates.
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (_added, _ignored) = roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(format!(
            "no trusted root certificates found on this system{why}; give the server's CA with \
             --ca FILE or KV_CA_FILE"
        ));
    }
    Ok(roots)
}

fn tls_connector(roots: RootCertStore) -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration refused: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // KV Connect here is HTTP/2 only, as Deno speaks it.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// What a handshake error means for the user.
fn handshake_failure(host: &str, err: &io::Error) -> WrongTransport {
    let hint = match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_))
            if err.to_string().contains("CaUsedAsEndEntity") =>
        {
            "; the server presents a CA certificate as its own (`openssl req -x509` makes one \
             unless given `-addext basicConstraints=critical,CA:FALSE`): give it a server \
             certificate"
        }
        Some(rustls::Error::InvalidCertificate(_)) => {
            "; the server's certificate is not trusted for this name: give the CA that signed it \
             with --ca FILE or KV_CA_FILE, and use the name the certificate was issued for"
        }
        Some(rustls::Error::AlertReceived(
            AlertDescription::HandshakeFailure | AlertDescription::ProtocolVersion,
        ))
        | Some(rustls::Error::InvalidMessage(_)) => {
            "; does the server speak plaintext? then use an http:// URL"
        }
        _ if err.kind() == io::ErrorKind::UnexpectedEof => {
            "; the server closed the connection: does it speak plaintext? then use an http:// URL"
        }
        _ => "",
    };
    WrongTransport(format!("TLS handshake with {host} failed: {err}{hint}"))
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Either>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TokioIo<Either>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = (uri.scheme_str() == Some("https")).then(|| self.tls());
        let host = uri.host().unwrap_or_default().to_owned();
        let connecting = self.http.call(uri);
        let failures = self.failures.clone();
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let Some(tls) = tls else {
                return Ok(TokioIo::new(Either::Plain {
                    tcp,
                    checked: false,
                    failures,
                }));
            };
            let handshake = async {
                let tls = tls.map_err(WrongTransport)?;
                let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).map_err(
                    |e| WrongTransport(format!("{host:?} is not a TLS server name: {e}")),
                )?;
                tls.connect(name, tcp)
                    .await
                    .map_err(|e| handshake_failure(&host, &e))
            };
            match handshake.await {
                Ok(stream) => Ok(TokioIo::new(Either::Tls(Box::new(stream)))),
                Err(failure) => {
                    failures.record(&failure);
                    Err(failure.into())
                }
            }
        })
    }
}

/// A connection: plain TCP (checked for an HTTP/1 answer, see [`Either::Plain`]) or TLS over
/// TCP. hyper's client takes it as `TokioIo<Either>`.
pub(crate) enum Either {
    /// A plaintext HTTP/2 connection that recognises an HTTP/1 answer in its first bytes (a TLS
    /// port's plaintext refusal, or any server that does not speak h2c) and fails with its
    /// text.
    Plain {
        tcp: TcpStream,
        /// Whether the first bytes were looked at.
        checked: bool,
        failures: LastFailure,
    },
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Either {
    fn connected(&self) -> Connected {
        let connected = Connected::new();
        match self {
            Either::Tls(tls) if tls.get_ref().1.alpn_protocol() == Some(b"h2") => {
                connected.negotiated_h2()
            }
            _ => connected,
        }
    }
}

impl AsyncRead for Either {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Either::Plain {
                tcp,
                checked,
                failures,
            } => {
                let before = buf.filled().len();
                let polled = Pin::new(tcp).poll_read(cx, buf);
                if *checked || !matches!(polled, Poll::Ready(Ok(()))) {
                    return polled;
                }
                let read = &buf.filled()[before..];
                if read.is_empty() {
                    return polled;
                }
                *checked = true;
                match http1_answer(read) {
                    None => polled,
                    Some(failure) => {
                        failures.record(&failure);
                        Poll::Ready(Err(io::Error::other(failure)))
                    }
                }
            }
        }
    }
}

/// If the first bytes read on an h2c connection are an HTTP/1 answer: the failure, with the
/// answer's status line and text.
fn http1_answer(read: &[u8]) -> Option<WrongTransport> {
    if !read.starts_with(b"HTTP/") {
        return None;
    }
    let text = String::from_utf8_lossy(read);
    let status = text.lines().next().unwrap_or_default().trim().to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.trim().chars().take(200).collect::<String>())
        .unwrap_or_default();
    Some(WrongTransport(format!(
        "the server answered this HTTP/2 (h2c) connection in plaintext HTTP/1 ({status}){}{body}",
        if body.is_empty() { "" } else { ": " }
    )))
}

impl AsyncWrite for Either {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Plain { tcp, .. } => Pin::new(tcp).poll_write(cx, buf),
            Either::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Either::Plain { tcp, .. } => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Either::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Either::Plain { tcp, .. } => tcp.is_write_vectored(),
            Either::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain { tcp, .. } => Pin::new(tcp).poll_flush(cx),
            Either::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Either::Plain { tcp, .. } => Pin::new(tcp).poll_shutdown(cx),
            Either::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

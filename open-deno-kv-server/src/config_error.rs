//! The configurations the server refuses to run with.

/// The shortest access token accepted (denokv's minimum too).
pub const MIN_TOKEN_LEN: usize = 12;

/// A configuration the server refuses to run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The token is too short.
    #[error("the access token must be at least {MIN_TOKEN_LEN} characters long")]
    TokenTooShort,
    /// The token cannot travel in an HTTP header.
    #[error("the access token may only contain visible ASCII characters (no spaces)")]
    TokenNotPrintable,
    /// Open access on an address other than loopback.
    #[error(
        "refusing to serve without an access token on {0}: give a token, or bind to a loopback \
         address (127.0.0.1 or ::1) to run open"
    )]
    OpenNotLoopback(std::net::SocketAddr),
    /// A TLS certificate or key file that cannot be read or holds nothing usable.
    #[error("TLS file {}: {reason}", path.display())]
    TlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// rustls refused the certificate and key (e.g. the key does not belong to the
    /// certificate, or its algorithm is not supported).
    #[error("TLS configuration refused: {0}")]
    TlsRefused(String),
}

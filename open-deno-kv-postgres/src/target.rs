//! [`Target`]: one server (or list of servers) of a URL and how to reach it — the client's
//! configuration and the TLS connector — for every connection of a handle: the committer's, the
//! listener's and the pools'.

use futures::future::BoxFuture;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::PostgresError;
use crate::refusal;
use crate::tls::SslMode;
use crate::url::ConnectUrl;

/// The stream of a connection, encrypted or not.
pub(crate) type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    url: ConnectUrl,
}

impl Target {
    /// The target of a parsed URL.
    pub(crate) fn new(url: ConnectUrl) -> Self {
        Target { url }
    }

    /// The client's configuration (user, database, hosts).
    pub(crate) fn config(&self) -> &Config {
        &self.url.config
    }

    /// The `sslmode` in force.
    pub(crate) fn ssl_mode(&self) -> SslMode {
        self.url.tls.mode
    }

    /// Connects, and returns the client and the connection (which the caller must drive).
    /// Refusals come back as the [`PostgresError`] variant that names their cause.
    pub(crate) async fn connect(
        &self,
    ) -> Result<(Client, Connection<Socket, Stream>), PostgresError> {
        self.connect_client()
            .await
            .map_err(|err| refusal::classify(err, self.config(), self.ssl_mode()))
    }

    /// [`Target::connect`] with the client's own error. With `sslmode=prefer`, a failed TLS
    /// handshake is followed by a plaintext attempt, as libpq does.
    async fn connect_client(
        &self,
    ) -> Result<(Client, Connection<Socket, Stream>), tokio_postgres::Error> {
        let tls = self.url.tls.connector.clone();
        match self.url.config.connect(tls.clone()).await {
            Err(err) if self.ssl_mode() == SslMode::Prefer && is_handshake_failure(&err) => {
                let mut plain = self.url.config.clone();
                plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
                plain.connect(tls).await
            }
            answer => answer,
        }
    }
}

/// Whether `err` is rustls refusing the handshake (as opposed to the server or the network).
pub(crate) fn is_handshake_failure(err: &tokio_postgres::Error) -> bool {
    refusal::rustls_error(err).is_some()
}

/// The pools connect through the same TLS (and `prefer`'s fallback) as [`Target::connect`].
impl deadpool_postgres::Connect for Target {
    fn connect(
        &self,
        _config: &Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        Box::pin(async move {
            let (client, connection) = self.connect_client().await?;
            let task = tokio::spawn(async move {
                // The connection's end is seen by its client (every later call fails as closed).
                let _ = connection.await;
            });
            Ok((client, task))
        })
    }
}

//! The server: checks its configuration, accepts connections until told to stop, then shuts down
//! gracefully.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::JoinSet;

#[cfg(doc)]
use crate::ResourceLimits;
use crate::config::{Access, ServerConfig};
use crate::config_error::{ConfigError, MIN_TOKEN_LEN};
use crate::databases::{self, Databases};
use crate::deliveries::Deliveries;
use crate::shared::Shared;
use crate::{admission, connection, metrics, queue, resources};

/// A KV Connect server; see the [crate documentation](crate).
pub struct Server {
    config: ServerConfig,
    databases: Databases,
}

impl Server {
    /// Checks the configuration.
    pub fn new(config: ServerConfig, databases: Databases) -> Result<Self, ConfigError> {
        if let Access::Token(token) = &config.access {
            if token.chars().count() < MIN_TOKEN_LEN {
                return Err(ConfigError::TokenTooShort);
            }
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(ConfigError::TokenNotPrintable);
            }
        }
        Ok(Server { config, databases })
    }

    /// Serves connections from `listener` until `shutdown` completes, then shuts down
    /// gracefully: stops accepting, ends watch streams, lets in-flight requests finish (for at
    /// most [`ServerConfig::shutdown_grace`]), and closes the databases it opened itself.
    /// Connections are admitted as [`crate::admission`] describes: over
    /// [`ResourceLimits::max_connections`] the oldest that has not authorized makes room, and when
    /// all have, the new one is answered `503` and closed.
    ///
    /// Refuses to start ([`ConfigError::OpenNotLoopback`], as an I/O error of kind
    /// `PermissionDenied`) if access is open and the listener is not on a loopback address.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let local = listener.local_addr()?;
        if self.config.access == Access::Open && !local.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                ConfigError::OpenNotLoopback(local),
            ));
        }
        let (stop, stopped) = signal::channel(false);
        let mut databases = self.databases;
        databases.max_open = self.config.resources.max_open_databases;
        databases.idle_timeout = self.config.resources.database_idle_timeout;
        let shared = Arc::new(Shared {
            deliveries: Deliveries::new(self.config.queue_lease),
            budgets: resources::Budgets::new(&self.config.resources),
            metrics: metrics::Metrics::new(self.config.shipping.as_ref()),
            config: self.config,
            databases,
            shutdown: stopped,
        });
        let admission = Arc::new(admission::Admission::new(
            &shared.config.resources,
            shared.config.log_errors,
        ));
        let summaries = {
            let (admission, shutdown) = (admission.clone(), shared.shutdown.clone());
            tokio::spawn(async move { admission.warnings.run(shutdown).await })
        };
        let sweeper = tokio::spawn(queue::sweep(shared.clone()));
        let database_sweeper = {
            let shared = shared.clone();
            tokio::spawn(async move {
                databases::sweep_idle(&shared.databases, shared.shutdown.clone()).await;
            })
        };
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => match admission.admit(&shared.budgets, peer) {
                        Ok(ticket) => {
                            connections.spawn(connection::serve(shared.clone(), stream, ticket));
                        }
                        Err(refusal) => connection::refuse(stream, &shared.config, refusal),
                    },
                    Err(err) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        if shared.config.log_errors {
                            tracing::error!(error = %err, "accept failed; retrying in 100 ms");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop.send(true);
        let drained = tokio::time::timeout(shared.config.shutdown_grace, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            connections.abort_all();
            while connections.join_next().await.is_some() {}
        }
        let _ = sweeper.await;
        let _ = summaries.await;
        let _ = database_sweeper.await;
        shared.deliveries.release_all();
        shared.databases.close_opened().await;
        Ok(())
    }
}

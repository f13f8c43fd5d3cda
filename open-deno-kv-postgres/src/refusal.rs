//! Why a connection could not be made, as the [`PostgresError`] variant that names the cause and
//! what to change: the server's SQLSTATE for refusals after the handshake, rustls's error for a
//! refused TLS handshake, the I/O error for an unreachable server.

use std::error::Error as _;

use rustls::{AlertDescription, CertificateError};

use tokio_postgres::Config;

use crate::PostgresError;
use crate::tls::SslMode;

/// The message tokio-postgres gives when `sslmode` requires TLS and the server answers the TLS
/// request with "no" (the server has `ssl = off`).
const NO_TLS: &str = "server does not support TLS";

/// The refusal `err` of a connection made with `config` in `ssl_mode`, as the variant naming its
/// cause ([`PostgresError::Connect`] when none fits).
pub(crate) fn classify(
    err: tokio_postgres::Error,
    config: &Config,
    ssl_mode: SslMode,
) -> PostgresError {
    let server = crate::url::servers(config);
    let user = config.get_user().unwrap_or_default().to_owned();
    if let Some(tls) = rustls_error(&err) {
        return tls_refusal(tls, config, server);
    }
    if let Some(db) = err.as_db_error() {
        let message = db.message().to_owned();
        return match db.code().code() {
            "28P01" => PostgresError::WrongPassword { user },
            "3D000" => PostgresError::UnknownDatabase {
                database: config
                    .get_dbname()
                    .map_or_else(|| user.clone(), ToOwned::to_owned),
            },
            "53300" => PostgresError::TooManyConnections { message },
            "57P03" => PostgresError::NotAcceptingConnections { message },
            "28000" if message.starts_with("role ") && message.ends_with("does not exist") => {
                PostgresError::UnknownRole { user }
            }
            "28000" if message.contains("certificate") => {
                PostgresError::ClientCertificateRefused { message }
            }
            "28000" if message.contains("pg_hba.conf") => PostgresError::HbaRefused { message },
            _ => PostgresError::Connect { source: err },
        };
    }
    let cause = err.source().map(ToString::to_string).unwrap_or_default();
    if cause == NO_TLS {
        return PostgresError::TlsUnavailable {
            server,
            sslmode: ssl_mode.name().to_owned(),
        };
    }
    // target_session_attrs=read-write found no primary among the hosts.
    if cause.contains("does not allow writes") {
        return PostgresError::NotPrimary { server };
    }
    let io = err
        .source()
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some();
    // The connect timeout, refused connections, unknown host names.
    if io || err.to_string().contains("timeout") || err.to_string().contains("timed out") {
        let cause = match err.source() {
            Some(inner) => format!("{err}: {inner}"),
            None => err.to_string(),
        };
        return PostgresError::Unreachable {
            server,
            cause,
            source: err,
        };
    }
    PostgresError::Connect { source: err }
}

/// A refused TLS handshake.
fn tls_refusal(tls: &rustls::Error, config: &Config, server: String) -> PostgresError {
    match tls {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => PostgresError::TlsWrongHost {
            host: first_host(config),
            reason: tls.to_string(),
        },
        rustls::Error::InvalidCertificate(_) => PostgresError::TlsUntrusted {
            server,
            reason: tls.to_string(),
        },
        // The server's refusal of our certificate (or of having none) during the handshake.
        rustls::Error::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::UnsupportedCertificate,
        ) => PostgresError::ClientCertificateRefused {
            message: tls.to_string(),
        },
        _ => PostgresError::TlsHandshake {
            server,
            reason: tls.to_string(),
        },
    }
}

/// The first host of the URL, for a host name mismatch.
fn first_host(config: &Config) -> String {
    use tokio_postgres::config::Host;
    match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => String::new(),
    }
}

impl PostgresError {
    /// Whether this is a failure to connect that may pass by itself: the server is down,
    /// starting, full, or (during a failover) not the primary yet. Work that was not committed
    /// may be run again on a later connection.
    pub fn may_connect_later(&self) -> bool {
        matches!(
            self,
            PostgresError::Connect { .. }
                | PostgresError::Unreachable { .. }
                | PostgresError::NotAcceptingConnections { .. }
                | PostgresError::TooManyConnections { .. }
                | PostgresError::NotPrimary { .. }
        )
    }

    /// Whether this is a refusal a retry cannot cure (a wrong password, an unknown role or
    /// database, pg_hba.conf, TLS, a bad URL): the caller must change its configuration or the
    /// server's. Unreachable servers, full servers, servers starting up and standbys may
    /// answer differently a moment later.
    pub fn is_configuration_error(&self) -> bool {
        matches!(
            self,
            PostgresError::InvalidUrl { .. }
                | PostgresError::InvalidParameter { .. }
                | PostgresError::InvalidSchemaName { .. }
                | PostgresError::TlsFile { .. }
                | PostgresError::WrongPassword { .. }
                | PostgresError::UnknownRole { .. }
                | PostgresError::UnknownDatabase { .. }
                | PostgresError::HbaRefused { .. }
                | PostgresError::ClientCertificateRefused { .. }
                | PostgresError::TlsUnavailable { .. }
                | PostgresError::TlsUntrusted { .. }
                | PostgresError::TlsWrongHost { .. }
                | PostgresError::PermissionDenied { .. }
        )
    }
}

/// Refuses a standby: the store writes (schema, commits, queues, LISTEN) on the primary.
pub(crate) async fn require_primary(
    client: &tokio_postgres::Client,
    config: &Config,
) -> Result<(), PostgresError> {
    let row = client.query_one("SELECT pg_is_in_recovery()", &[]).await?;
    if row.try_get::<_, bool>(0)? {
        return Err(PostgresError::NotPrimary {
            server: crate::url::servers(config),
        });
    }
    Ok(())
}

/// `err` as [`PostgresError::PermissionDenied`] when the server refused a privilege (SQLSTATE
/// 42501) to the store's role in `schema`; otherwise unchanged.
pub(crate) fn privilege(err: PostgresError, config: &Config, schema: &str) -> PostgresError {
    match err {
        PostgresError::Postgres(ref source)
            if source
                .as_db_error()
                .is_some_and(|db| db.code().code() == "42501") =>
        {
            let message = source
                .as_db_error()
                .map(|db| db.message().to_owned())
                .unwrap_or_default();
            PostgresError::PermissionDenied {
                user: config.get_user().unwrap_or_default().to_owned(),
                schema: schema.to_owned(),
                message,
            }
        }
        other => other,
    }
}

/// Refuses a writable open by a role that may not write the store's tables (a reader's role
/// opened without `read_only`), at once rather than at its first write.
pub(crate) async fn require_write_privileges(
    client: &tokio_postgres::Client,
    config: &Config,
    schema: &str,
) -> Result<(), PostgresError> {
    let tables: Vec<String> = [
        "kv",
        "kv_meta",
        "kv_queue",
        "kv_change_log",
        "kv_commit_ids",
    ]
    .iter()
    .map(|table| format!("\"{schema}\".{table}"))
    .collect();
    let rows = client
        .query(
            // A list of privileges asks whether ANY is held: each is asked on its own.
            "SELECT t FROM unnest($1::text[]) AS t WHERE NOT ( \
               has_table_privilege(t, 'SELECT') AND has_table_privilege(t, 'INSERT') \
               AND has_table_privilege(t, 'UPDATE') AND has_table_privilege(t, 'DELETE'))",
            &[&tables],
        )
        .await?;
    if rows.is_empty() {
        return Ok(());
    }
    let missing: Vec<String> = rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    Err(PostgresError::PermissionDenied {
        user: config.get_user().unwrap_or_default().to_owned(),
        schema: schema.to_owned(),
        message: format!(
            "no SELECT, INSERT, UPDATE and DELETE on {}; open with read_only to only read",
            missing.join(", ")
        ),
    })
}

/// The rustls error inside `err`, if the TLS handshake failed.
pub(crate) fn rustls_error(err: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut cause = err.source();
    while let Some(current) = cause {
        if let Some(found) = current.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && let Some(found) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        cause = current.source();
    }
    None
}

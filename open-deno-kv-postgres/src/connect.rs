//! Dedicated connections (the committer's, the listener's) and how their failures are read.

use std::error::Error as _;

use open_deno_kv_engine_kit::KvError;
use tokio_postgres::{Client, Config, NoTls};

use crate::PostgresError;

/// Opens a connection and drives it on a task of its own until it closes.
pub(crate) async fn connect(config: &Config) -> Result<Client, PostgresError> {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .map_err(|source| PostgresError::Connect { source })?;
    tokio::spawn(async move {
        // The connection's end is seen by its client (every later call fails as closed).
        let _ = connection.await;
    });
    Ok(client)
}

/// Whether `err` is the connection or the server failing (closed, I/O, the server shutting down
/// or starting up) rather than a statement being refused: work that had not been committed may be
/// retried on a new connection.
pub(crate) fn is_connection_failure(err: &tokio_postgres::Error) -> bool {
    if err.is_closed() || err.source().is_some_and(|s| s.is::<std::io::Error>()) {
        return true;
    }
    err.as_db_error().is_some_and(|db| {
        let code = db.code().code();
        // 08: connection exception; 57: operator intervention (shutdown, crash recovery,
        // starting up); 40001 / 40P01: serialization failure / deadlock, safe to run again.
        code.starts_with("08") || code.starts_with("57") || code == "40001" || code == "40P01"
    })
}

/// Whether `err` (as this crate reports it) is a [connection failure](is_connection_failure).
pub(crate) fn is_lost_connection(err: &KvError) -> bool {
    match err {
        KvError::Storage { source } => matches!(
            source.downcast_ref::<PostgresError>(),
            Some(PostgresError::Postgres(err)) if is_connection_failure(err)
        ),
        _ => false,
    }
}

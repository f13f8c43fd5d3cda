//! The crate's one error type, and what it becomes as a [`KvError`].

use std::path::PathBuf;

use open_deno_kv_engine_kit::KvError;
use thiserror::Error;

/// Why a database could not be opened or used.
#[derive(Debug, Error)]
pub enum SqliteError {
    /// SQLite itself failed (I/O, corruption, locking after every retry).
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file was written by a newer version of the layout; it is left untouched.
    #[error(transparent)]
    SchemaTooNew(#[from] open_deno_kv_engine_kit::SchemaTooNew),
    /// A read-only open of a file that has not been migrated to the current layout.
    #[error(
        "the database is at schema version {found} and needs migrating to {supported}; open it writable once"
    )]
    NeedsMigration {
        /// The file's migration version.
        found: i64,
        /// The version required.
        supported: i64,
    },
    /// The file is a SQLite database, but not a Deno KV one.
    #[error("not a Deno KV database: {reason}")]
    NotDenoKv {
        /// What gave it away.
        reason: String,
    },
    /// A read-only open of a WAL-mode file whose WAL holds commits, in a directory where SQLite
    /// cannot create the WAL index (`-shm`) it needs to read them.
    #[error(
        "cannot read {} read-only: its write-ahead log holds commits and SQLite cannot create the \
         log's index (-shm) beside it (read-only directory); open it once where it can be written \
         (or by a process that may write the directory) to checkpoint the log",
        path.display()
    )]
    WalNeedsWritableDirectory {
        /// The database file.
        path: PathBuf,
    },
    /// A read-only open that needs to name the file as an immutable SQLite URI and cannot.
    #[error("cannot open {} read-only as immutable: {reason}", path.display())]
    ImmutablePath {
        /// The database file.
        path: PathBuf,
        /// Why the path cannot be named.
        reason: String,
    },
    /// A background thread could not be started.
    #[error("cannot start the writer thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl From<SqliteError> for KvError {
    fn from(err: SqliteError) -> Self {
        match err {
            SqliteError::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::NotADatabase
                    || e.code == rusqlite::ErrorCode::DatabaseCorrupt =>
            {
                KvError::Corrupt {
                    message: err.to_string(),
                }
            }
            SqliteError::NotDenoKv { .. } => KvError::Corrupt {
                message: err.to_string(),
            },
            other => KvError::storage(other),
        }
    }
}

//! The crate's one error type, and how it becomes a [`KvError`].
//!
//! Every failure of this crate is a [`PostgresError`]. Through the [`Backend`](open_deno_kv_engine_kit::Backend)
//! trait it travels as a [`KvError`]: a database that holds something other than a Deno KV store is
//! [`KvError::Corrupt`] (as the file engines report a foreign file), everything else is
//! [`KvError::Storage`] with the `PostgresError` as its source, so a caller can downcast it and
//! act on the variant. [`PostgresError::OutcomeUnknown`] is the exception: it travels as
//! [`KvError::OutcomeUnknown`] (with the `PostgresError` as its source), the same for every engine.

use open_deno_kv_engine_kit::KvError;
use thiserror::Error;

/// Why a PostgreSQL store could not be opened or used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection URL does not parse (`postgres://user@host:port/database` is expected).
    #[error("invalid PostgreSQL URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL as given (it may hold a password: do not log it).
        url: String,
        /// What the parser said.
        source: tokio_postgres::Error,
    },

    /// The schema name in the options is not a plain lowercase identifier.
    #[error(
        "invalid schema name {name:?}: use 1 to 40 lowercase ASCII letters, digits and \
         underscores, starting with a letter or an underscore"
    )]
    InvalidSchemaName {
        /// The name given.
        name: String,
    },

    /// No connection could be made (server down, wrong port, authentication refused).
    #[error("cannot connect to PostgreSQL: {source}")]
    Connect {
        /// The client's error.
        source: tokio_postgres::Error,
    },

    /// PostgreSQL refused a statement, or the connection failed while no commit was in flight:
    /// nothing of the failed operation was applied.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] tokio_postgres::Error),

    /// The pool of read connections failed to hand out a connection.
    #[error("PostgreSQL connection pool: {0}")]
    Pool(String),

    /// The connection to the server was lost after the commit was sent and before its answer
    /// arrived, and the server could not be asked whether it committed within
    /// [`crate::PostgresOptions::commit_outcome_wait`]: the write may or may not have been
    /// committed. Read the keys it wrote (or check its effect another way) before retrying it; a
    /// blind retry of a `sum` could apply it twice. It travels as
    /// [`KvError::OutcomeUnknown`], the same for every engine.
    #[error(
        "the connection to PostgreSQL was lost during the commit ({source}), and the server \
         could not be asked within {waited:?} whether it committed ({lookup})"
    )]
    OutcomeUnknown {
        /// The client's error at the commit.
        source: tokio_postgres::Error,
        /// How long the committer tried to find out.
        waited: std::time::Duration,
        /// The last failure of those tries.
        lookup: String,
    },

    /// An option of [`crate::PostgresOptions`] is out of its range; nothing was opened.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is accepted.
        reason: String,
    },

    /// Notifications do not reach the store's `LISTEN` connection, checked at open: behind a
    /// connection pooler that lends server connections per transaction or statement (PgBouncer's
    /// `pool_mode = transaction` or `statement`), a session's `LISTEN` receives nothing, and
    /// watches and queue consumers would wait forever for other processes' commits. Nothing was
    /// opened.
    #[error(
        "the store's LISTEN connection receives no notifications ({reason}). A connection pooler \
         in transaction or statement pool mode (PgBouncer's pool_mode = transaction or \
         statement) does this: LISTEN, and the prepared statements the store keeps on its \
         connections, need a session of their own. Connect the store to PostgreSQL directly, or \
         through a pooler in session mode (PgBouncer: pool_mode = session)"
    )]
    NotificationsLost {
        /// What the check saw.
        reason: String,
    },

    /// A broken promise inside this crate (a bug): the operation was not applied.
    #[error("internal error in open-deno-kv-postgres: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },

    /// The store was created by a newer version of this crate. It is left untouched.
    #[error(transparent)]
    SchemaTooNew(#[from] open_deno_kv_engine_kit::SchemaTooNew),

    /// The database holds tables with this crate's names that this crate did not create. They are
    /// left untouched.
    #[error("not a Deno KV store: {reason}; it is left untouched")]
    NotOurs {
        /// What gave it away.
        reason: String,
    },

    /// The PostgreSQL server programs needed by [`crate::testing`] were not found.
    #[cfg(feature = "testing")]
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl) not found (looked in: {searched}). Install \
         them (Debian: `apt-get install postgresql-15`, after `echo create_main_cluster = false \
         >> /etc/postgresql-common/createcluster.conf` to keep Debian from starting its own \
         cluster), or point PG_BIN at their directory; set KV_POSTGRES_TESTS=skip to skip \
         these tests instead"
    )]
    ServerMissing {
        /// Where they were looked for.
        searched: String,
    },

    /// A step of starting or stopping a throwaway test cluster failed.
    #[cfg(feature = "testing")]
    #[error("test cluster: {step} failed: {detail}")]
    Cluster {
        /// What was being done.
        step: String,
        /// What went wrong (the command's output, or the I/O error).
        detail: String,
    },
}

impl From<PostgresError> for KvError {
    fn from(err: PostgresError) -> Self {
        match err {
            PostgresError::NotOurs { .. } => KvError::Corrupt {
                message: err.to_string(),
            },
            PostgresError::OutcomeUnknown { .. } => KvError::outcome_unknown(err),
            other => KvError::storage(other),
        }
    }
}

/// A client error as a [`KvError`] (through [`PostgresError::Postgres`]).
pub(crate) fn pg(err: tokio_postgres::Error) -> KvError {
    PostgresError::Postgres(err).into()
}

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
        /// The URL as given, its password replaced by `<password>`.
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

    /// A parameter of the connection URL has a value this crate does not accept (an unknown
    /// `sslmode`, a `schema` that is not an identifier, two parameters that contradict each
    /// other). Nothing was connected to.
    #[error("invalid PostgreSQL URL parameter {parameter}={value:?}: {expected}")]
    InvalidParameter {
        /// The parameter (`sslmode`, `sslrootcert`, `schema`, ...).
        parameter: String,
        /// Its value as given.
        value: String,
        /// What is accepted instead.
        expected: String,
    },

    /// A certificate or key file named by the URL (`sslrootcert`, `sslcert`, `sslkey`) cannot
    /// be read or holds no usable certificate or key. Nothing was connected to.
    #[error("{parameter}={path:?}: {reason}")]
    TlsFile {
        /// The parameter that names the file.
        parameter: &'static str,
        /// The file as named.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The server is not reachable (nothing listens at the address, the network or a firewall
    /// drops the connection, or the connection attempt timed out).
    #[error(
        "cannot reach PostgreSQL at {server}: {cause}; check the host and port in the URL and \
         that the server is running and accepts TCP connections (listen_addresses)"
    )]
    Unreachable {
        /// The host(s) and port(s) of the URL.
        server: String,
        /// What the network said (connection refused, timed out, unknown host, ...).
        cause: String,
        /// The client's error.
        source: tokio_postgres::Error,
    },

    /// The server refused the password (SQLSTATE 28P01); PostgreSQL gives the same answer for a
    /// role that does not exist when it asks for a password.
    #[error(
        "PostgreSQL refused the password of user {user:?} (or, with password authentication, \
         there is no such role): fix the password in the URL, or set it with \
         `ALTER ROLE \"{user}\" PASSWORD '...'`"
    )]
    WrongPassword {
        /// The user of the URL.
        user: String,
    },

    /// The role of the URL does not exist (SQLSTATE 28000, `role "..." does not exist`).
    #[error(
        "PostgreSQL has no role {user:?}: fix the user in the URL, or create it with \
         `CREATE ROLE \"{user}\" LOGIN PASSWORD '...'` (docs/postgres.md lists the grants the \
         store needs)"
    )]
    UnknownRole {
        /// The user of the URL.
        user: String,
    },

    /// The database of the URL does not exist (SQLSTATE 3D000).
    #[error(
        "PostgreSQL has no database {database:?}: fix the database in the URL, or create it \
         with `CREATE DATABASE \"{database}\"`"
    )]
    UnknownDatabase {
        /// The database of the URL.
        database: String,
    },

    /// `pg_hba.conf` on the server has no line that lets this user connect from here to this
    /// database in this way (SQLSTATE 28000), or a line that rejects it; the server's message
    /// says which (with or without encryption).
    #[error(
        "PostgreSQL's pg_hba.conf refuses this connection ({message}): add a line for this \
         user, database and client address to the server's pg_hba.conf and reload it, or, if \
         the server only accepts encrypted connections, use sslmode=require or stronger"
    )]
    HbaRefused {
        /// The server's message.
        message: String,
    },

    /// The server wants a client certificate that this connection did not give, or refused
    /// the one it gave (`hostssl ... cert` in pg_hba.conf).
    #[error(
        "PostgreSQL wants a valid client certificate ({message}): give one with sslcert= and \
         sslkey= in the URL, signed by a CA in the server's ssl_ca_file, whose common name is \
         the user's name"
    )]
    ClientCertificateRefused {
        /// What the server (or the TLS handshake) said.
        message: String,
    },

    /// The server has no connection slot left (SQLSTATE 53300).
    #[error(
        "PostgreSQL has too many connections ({message}): raise max_connections on the \
         server, lower pool_size of the processes sharing it, or put fewer processes on it"
    )]
    TooManyConnections {
        /// The server's message.
        message: String,
    },

    /// The server is starting up, shutting down or recovering (SQLSTATE 57P03): try again in a
    /// moment.
    #[error("PostgreSQL is not accepting connections right now ({message}): try again shortly")]
    NotAcceptingConnections {
        /// The server's message.
        message: String,
    },

    /// The server is a standby (read-only), but the store needs the primary to write.
    #[error(
        "PostgreSQL at {server} is a standby (in recovery, read-only), and the store needs the \
         primary: point the URL at the primary, or list every node with \
         target_session_attrs=read-write (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write)"
    )]
    NotPrimary {
        /// The host(s) and port(s) of the URL.
        server: String,
    },

    /// The server does not speak TLS (`ssl = off`), and the URL's `sslmode` requires it.
    #[error(
        "PostgreSQL at {server} does not accept TLS and sslmode={sslmode} requires it: turn on \
         ssl on the server (ssl_cert_file, ssl_key_file, ssl = on), or, on a network you trust, \
         use sslmode=prefer or disable"
    )]
    TlsUnavailable {
        /// The host(s) and port(s) of the URL.
        server: String,
        /// The URL's `sslmode`.
        sslmode: String,
    },

    /// The server's certificate is not signed by a CA this connection trusts (`sslrootcert`),
    /// or is otherwise invalid (expired, not yet valid, a CA certificate used as a server's).
    #[error(
        "the TLS certificate of PostgreSQL at {server} is not trusted ({reason}): set \
         sslrootcert= to the CA file that signed the server's certificate (or sslrootcert=system \
         for a publicly signed one)"
    )]
    TlsUntrusted {
        /// The host(s) and port(s) of the URL.
        server: String,
        /// What rustls found wrong.
        reason: String,
    },

    /// The server's certificate is trusted but names another host (`sslmode=verify-full`).
    #[error(
        "the TLS certificate of PostgreSQL is not valid for the host {host:?} ({reason}): \
         connect by a name the certificate lists, or use sslmode=verify-ca to check the CA only"
    )]
    TlsWrongHost {
        /// The host of the URL.
        host: String,
        /// What rustls found.
        reason: String,
    },

    /// The TLS handshake failed for another reason.
    #[error("the TLS handshake with PostgreSQL at {server} failed: {reason}")]
    TlsHandshake {
        /// The host(s) and port(s) of the URL.
        server: String,
        /// What went wrong.
        reason: String,
    },

    /// The role lacks a privilege the store needs (SQLSTATE 42501), e.g. to create its tables
    /// in the schema.
    #[error(
        "PostgreSQL refused a privilege to user {user:?} ({message}): the store's role must own \
         its schema (`CREATE SCHEMA \"{schema}\" AUTHORIZATION \"{user}\"`), or, read-only, \
         have USAGE on it and SELECT on its tables (see docs/postgres.md)"
    )]
    PermissionDenied {
        /// The user of the URL.
        user: String,
        /// The store's schema.
        schema: String,
        /// The server's message.
        message: String,
    },

    /// A read-only open found no store it can read as it is.
    #[error("cannot open the store in schema {schema:?} read-only: {reason}")]
    ReadOnlyOpen {
        /// The store's schema.
        schema: String,
        /// Why.
        reason: String,
    },

    /// No connection could be made for another reason.
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

    /// A [`ShippingLease`](crate::ShippingLease) is no longer held: its connection was lost or
    /// the server stopped answering, so the server ended (or will end) its session and another
    /// process may hold the lease now. Stop the work it guarded and acquire it again.
    #[error(
        "the shipping lease of schema {schema:?} is lost ({detail}); another process may ship \
         now: stop shipping and take the lease again"
    )]
    LeaseLost {
        /// The store's schema.
        schema: String,
        /// What the lease's connection said.
        detail: String,
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

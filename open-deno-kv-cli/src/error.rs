//! What can go wrong in a `kv` command, each with the words a user needs to fix it.

use std::path::PathBuf;

use thiserror::Error;

/// A failed command. Every variant is reported on stderr with a non-zero exit code.
#[derive(Debug, Error)]
pub enum CliError {
    /// The store or the `Kv` API refused or failed.
    #[error(transparent)]
    Kv(#[from] open_deno_kv::Error),

    /// `kv conformance` pointed at something that is not a KV Connect server it can use (an
    /// HTML page, a closed port, a wrong token): one line saying why.
    #[error("{url} is not a KV Connect server this suite can run against: {reason}")]
    NotKvConnect {
        /// The URL given.
        url: String,
        /// What went wrong, on one line.
        reason: String,
    },

    /// `kv conformance` on a server that holds data, without `--yes-write`.
    #[error(
        "{url} already holds data; the conformance suite writes (under its own key prefix, \
         deleted afterwards): pass --yes-write to run it anyway"
    )]
    ConformanceNeedsConsent {
        /// The URL given.
        url: String,
    },

    /// `kv conformance` found cases that failed (the report says which).
    #[error("{failed} conformance case(s) failed")]
    ConformanceFailed {
        /// How many.
        failed: usize,
    },

    /// A key on the command line or in a file that does not parse.
    #[error("bad key {input}: {reason}")]
    BadKey {
        /// The text given.
        input: String,
        /// What is wrong, and where.
        reason: String,
    },

    /// A value on the command line or in a file that does not parse.
    #[error("bad value: {0}")]
    BadValue(String),

    /// A database file that a reading command was pointed at does not exist.
    #[error("no database at {}: nothing to read (a writing command such as `kv set` creates it)", path.display())]
    MissingDatabase {
        /// The path given.
        path: PathBuf,
    },

    /// A reading command given its database both as its argument and with `--db`.
    #[error("two databases given: --db {flag} and the argument {argument}; name the database once")]
    TwoDatabases {
        /// The `--db` value.
        flag: String,
        /// The positional database.
        argument: String,
    },

    /// A target for `load` or `migrate` that already holds entries.
    #[error(
        "{target} already holds data; load, migrate and restore write only into a new or empty database"
    )]
    TargetNotEmpty {
        /// The target URL.
        target: String,
    },

    /// `kv backup` of a backend that has no consistent snapshot export.
    #[error(
        "{db} offers no consistent snapshot export, so it cannot be backed up online (a KV \
         Connect server without the snapshot/1 extension, such as denokv, has no export \
         endpoint); `kv dump` copies it page by page instead, or back up the server's own \
         database"
    )]
    NoExport {
        /// The database URL.
        db: String,
    },

    /// `kv restore` into a backend that cannot import a snapshot.
    #[error(
        "{db} cannot import a snapshot (a KV Connect server has no import endpoint); restore \
         into a local database, or use `kv load`, which makes new versionstamps"
    )]
    NoImport {
        /// The database URL.
        db: String,
    },

    /// `kv restore` of a file that is not a consistent backup.
    #[error("{file} is not a backup: {reason}")]
    NotABackup {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },

    /// A range delete that was not confirmed (answered no, or no answer and no `--yes`).
    #[error(
        "not deleted: {} {what} {} (confirm with y, or pass --yes)",
        crate::duration::plural(*entries, "entry", "entries"),
        if *entries == 1 { "stays" } else { "stay" }
    )]
    NotConfirmed {
        /// How many entries were counted in the range.
        entries: u64,
        /// The range, as the user gave it.
        what: String,
    },

    /// `kv restore FILE --at POINT` without `--log`: a backup file is one state; the states after
    /// it are in a database's change log (`--log`) or a bucket (`--from` instead of the file).
    #[error(
        "--at needs where the later commits are: --log DATABASE (its change log, replayed over \
         the backup file) or --from URL (a bucket of continuous backups, instead of a file)"
    )]
    BadRestorePoint,

    /// A bucket of continuous backups refused or failed (an unknown URL scheme, missing
    /// credentials, another database's backups, a gap, a missing, truncated or corrupt object,
    /// which the message names).
    #[error(transparent)]
    Bucket(#[from] open_deno_kv_bucket::BucketError),

    /// `kv replicate` or `kv serve --backup-to` cannot ship this database (a KV Connect URL:
    /// ship from the server that holds the store instead).
    #[error("{db} cannot be shipped to a bucket from here: {reason}")]
    CannotShip {
        /// The database URL.
        db: String,
        /// Why, and what to do instead.
        reason: String,
    },

    /// The lock that keeps two processes from shipping one store could not be taken or
    /// checked (a lock file that cannot be created, the database refusing the lock's
    /// connection).
    #[error("the shipping lock of {db}: {reason}")]
    ShippingLock {
        /// The database URL.
        db: String,
        /// What failed.
        reason: String,
    },

    /// `kv serve`'s log output could not be set up.
    #[error("cannot set up the log output: {0}")]
    Logging(String),

    /// A line of a dump file that does not parse.
    #[error("{file}, line {line}: {reason}")]
    BadDumpLine {
        /// The file (or `-` for standard input).
        file: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },

    /// Reading or writing a file (not the database) failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// `kv dump -o` refused its output path (a directory, a link to nothing).
    #[error("cannot dump to {}: {reason}", path.display())]
    BadOutput {
        /// The path given.
        path: PathBuf,
        /// Why, and what to give instead.
        reason: String,
    },

    /// `kv serve` refused its configuration (no token, open access off loopback, a bad token).
    #[error("{0}")]
    ServeRefused(String),

    /// `kv serve` could not listen on its address, or serving failed.
    #[error("serving on {addr}: {source}")]
    Serve {
        /// The address.
        addr: std::net::SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// The database failed its integrity check: it is damaged, and a command that reads all of
    /// it (`dump`, `stats`, `migrate`) would give an incomplete or wrong answer.
    #[error(
        "{db} is damaged ({} problem(s) found; first: {}); nothing was read. \
         `kv --db {db} check` lists every problem",
        problems.len(),
        problems.first().map_or("", String::as_str)
    )]
    Damaged {
        /// The database URL.
        db: String,
        /// What the check found.
        problems: Vec<String>,
    },

    /// `kv get` of a key that does not exist; `near` is a key one confusion away (`2` and
    /// `2n`, `2` and `"2"`) that does hold an entry, if there is one.
    #[error("no entry at {key}{}", near_hint(near.as_ref()))]
    NotFound {
        /// The key asked for, as a literal.
        key: String,
        /// The near key that exists.
        near: Option<crate::near_key::NearKey>,
    },
}

/// The second half of [`CliError::NotFound`]'s message.
fn near_hint(near: Option<&crate::near_key::NearKey>) -> String {
    match near {
        Some(near) => format!("; did you mean {}? ({})", near.key, near.why),
        None => String::new(),
    }
}

impl From<open_deno_kv_model::KvError> for CliError {
    fn from(err: open_deno_kv_model::KvError) -> Self {
        CliError::Kv(err.into())
    }
}

impl From<open_deno_kv_model::KeyError> for CliError {
    fn from(err: open_deno_kv_model::KeyError) -> Self {
        CliError::Kv(err.into())
    }
}

impl From<open_deno_kv_server::ConfigError> for CliError {
    fn from(err: open_deno_kv_server::ConfigError) -> Self {
        CliError::ServeRefused(err.to_string())
    }
}

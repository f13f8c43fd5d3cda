//! The command line's shape: subcommands, arguments and their help.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use open_deno_kv_model::change_log::RestorePoint;

/// The embedded default database, when no `--db` is given.
pub const DEFAULT_DB: &str = "sqlite:./kv.sqlite3";

/// Inspect and move Deno KV data, in any backend: Deno's own SQLite files, redb, memory.
///
/// Keys are JavaScript-like literals: '["users", 42n, true]' (a plain number is a float as in
/// JavaScript, 42n a bigint, b"00ff" or new Uint8Array([0, 255]) bytes), or the typed JSON
/// form '[{"string":"users"},{"int":"42"}]'.
#[derive(Debug, Parser)]
#[command(name = "kv", version, about, long_about)]
pub struct Cli {
    /// The database: sqlite:PATH (or a plain path), redb:PATH, memory:,
    /// postgres://USER@HOST:PORT/DB, https://HOST:PORT/PATH, http://HOST:PORT/PATH.
    ///
    /// Every form:
    ///   sqlite:PATH, or a plain PATH    Deno's own SQLite file (the default, ./kv.sqlite3)
    ///   sqlite:PATH?read_only           the same, opened read-only
    ///   sqlite:PATH?durability=process  synced less often: survives a process crash only
    ///   redb:PATH                       a redb file (pure Rust; one process at a time)
    ///   redb:PATH?durability=deferred   synced at least every second
    ///   memory:                         a fresh in-memory store, gone on exit
    ///   postgres://USER@HOST:PORT/DB    a PostgreSQL database (postgresql:// too), with
    ///                                   libpq's options: ?sslmode=verify-full, ?schema=NAME...
    ///   http://HOST:PORT/               a KV Connect server (kv serve, denokv): its default
    ///                                   database; http://HOST:PORT/db/NAME a named one
    ///   http://HOST:PORT/PATH?token=T   the same with the access token in the URL; otherwise
    ///                                   from KV_ACCESS_TOKEN or DENO_KV_ACCESS_TOKEN
    ///   https://HOST:PORT/PATH          the same over TLS, the server's certificate checked
    ///                                   against the system's roots, or --ca FILE
    /// Reading commands such as dump and stats also take the database as their argument:
    /// kv dump FILE.
    #[arg(
        long,
        global = true,
        env = "KV_DB",
        default_value = DEFAULT_DB,
        value_name = "URL",
        verbatim_doc_comment
    )]
    pub db: String,

    /// For https:// databases: trust only the CA certificates in this PEM file (a private CA or
    /// a self-signed server certificate) instead of the system's root certificates.
    #[arg(long, global = true, env = "KV_CA_FILE", value_name = "FILE")]
    pub ca: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What `kv log` does.
#[derive(Debug, Subcommand)]
pub enum LogAction {
    /// Whether the log is on, its retention, and its first and last records.
    Status,
    /// Switch the log on, or change its retention (records are kept).
    Enable {
        /// How long records are kept: 7d, 12h, 90min, 1h 30m... (a plain number is
        /// milliseconds, as everywhere in kv).
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
        keep: Duration,
    },
    /// Switch the log off and delete its records.
    Disable,
}

/// What `kv backups` does.
#[derive(Debug, Subcommand)]
pub enum BackupsAction {
    /// The bucket's database, its snapshots, and every recovery point with its time and the
    /// bytes a restore to it reads (a bucket Deno Deploy wrote too).
    List {
        /// The bucket: s3://BUCKET/PREFIX, gs://, az://, file:///DIR.
        url: String,
        /// text: readable lines; json: one JSON document.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
    /// How far the bucket is behind the database (--db): the last commit shipped, the commits
    /// not shipped yet and how long the oldest of them has waited. Exit code 0 either way.
    Status {
        /// The bucket: s3://BUCKET/PREFIX, gs://, az://, file:///DIR.
        url: String,
        /// text: readable lines; json: one JSON document.
        #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
        format: ReportFormat,
    },
}

/// How a store is shipped: `kv replicate` and `kv serve --backup-to` take the same flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Continuous backup")]
pub struct ShippingFlags {
    /// The longest a commit waits in an open log segment while commits arrive, in seconds: the
    /// most a lost machine loses. Segments are written only while commits arrive.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub backup_segment_interval: f64,
    /// Snapshots and segments older than this are pruned from the bucket, keeping every point
    /// inside it restorable: 7d, 12h, 30d...
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = crate::duration::parse_duration)]
    pub backup_retention: Duration,
    /// A new snapshot this often, so a restore replays at most this much log: 1d, 6h...
    #[arg(long, value_name = "DURATION", default_value = "1d", value_parser = crate::duration::parse_duration)]
    pub backup_snapshot_interval: Duration,
}

/// `kv replicate`.
#[derive(Debug, Clone, Args)]
pub struct ReplicateArgs {
    /// The bucket to ship to: s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX,
    /// file:///DIR.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Ship every commit made so far, then exit (0 once the bucket holds them all).
    #[arg(long)]
    pub once: bool,
    /// Seconds over which repeated shipping failures are counted and logged as one summary
    /// line.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub warning_interval: f64,
    #[command(flatten)]
    pub shipping: ShippingFlags,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the entry at a key (exit code 1 if there is none).
    Get {
        /// The key.
        key: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Set a key to a value.
    Set {
        /// The key.
        key: String,
        /// The value, read as --type says (JSON by default).
        value: String,
        /// How to read the value.
        #[arg(long = "type", value_enum, default_value_t = ValueType::Json)]
        value_type: ValueType,
        /// Expire the entry this long from now: 60s, 5min, 12h, 7d, 1h 30m, or a plain number
        /// of milliseconds (60000), as Deno's expireIn counts.
        #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
        expire_in: Option<Duration>,
    },
    /// Delete a key, or every key under --prefix or between --start and --end.
    ///
    /// A range is deleted in one commit, however many entries it holds (not part of Deno KV: a
    /// KV Connect server must be `kv serve`). Before a range delete the command counts the
    /// entries and asks for confirmation on standard input (answer y); --yes skips the question.
    /// It prints the commit's versionstamp.
    #[command(group = clap::ArgGroup::new("target").required(true).args(["key", "prefix", "start"]))]
    Delete {
        /// The key.
        key: Option<String>,
        /// Delete every key strictly under this prefix (the prefix itself stays).
        #[arg(long, conflicts_with_all = ["key", "start", "end"])]
        prefix: Option<String>,
        /// Delete from this key (inclusive); needs --end.
        #[arg(long, requires = "end", conflicts_with = "key")]
        start: Option<String>,
        /// Delete up to this key (exclusive); needs --start.
        #[arg(long, requires = "start", conflicts_with = "key")]
        end: Option<String>,
        /// Do not ask before deleting a range.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// List entries under a prefix, or between --start and --end.
    List {
        /// The prefix (default: every key).
        prefix: Option<String>,
        /// The first key (inclusive).
        #[arg(long)]
        start: Option<String>,
        /// The key to stop before.
        #[arg(long)]
        end: Option<String>,
        /// At most this many entries.
        #[arg(long)]
        limit: Option<usize>,
        /// Newest key first.
        #[arg(long)]
        reverse: bool,
        /// Resume after this cursor (printed on stderr after a limited listing).
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print the entries of keys now and after every change, until interrupted.
    ///
    /// Each emission is the state of every key: with --format js a line per key, then a line
    /// `--`; with --format json or plain-json one line holding a JSON array, an element per key
    /// in the order given.
    ///
    /// With --prefix, every key under the prefix (no limit on their number; not part of Deno
    /// KV): first every entry under the prefix, then the keys each commit changed, a line per
    /// key (`KEY = (absent)` once deleted) and a `--` line per event (--format json: one
    /// `{"changed":[...]}` object per event). When the watch cannot name the keys a commit
    /// changed (another process's commit to an SQLite file, a range delete), the prefix is
    /// listed again and what is new, changed or deleted since the last event is printed.
    #[command(group = clap::ArgGroup::new("watched").required(true).args(["keys", "prefix"]))]
    Watch {
        /// The keys (at most 10).
        keys: Vec<String>,
        /// Watch every key under this prefix instead of given keys.
        #[arg(long, conflicts_with = "keys")]
        prefix: Option<String>,
        /// Stop after this many emissions.
        #[arg(long)]
        count: Option<usize>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Enqueue a message for queue listeners (Deno's listenQueue included).
    Enqueue {
        /// The message, read as --type says (JSON by default).
        value: String,
        /// How to read the message.
        #[arg(long = "type", value_enum, default_value_t = ValueType::Json)]
        value_type: ValueType,
        /// Deliver no earlier than this long from now: 5s, 10min, 1h, or a plain number of
        /// milliseconds (5000), as Deno's delay counts.
        #[arg(long, value_name = "DURATION", default_value = "0", value_parser = crate::duration::parse_duration)]
        delay: Duration,
        /// Where to write the message if every delivery fails (repeatable).
        #[arg(long = "if-undelivered", value_name = "KEY")]
        if_undelivered: Vec<String>,
    },
    /// Back up every entry and queued message as JSON lines, byte for byte.
    ///
    /// A header line names the format version; then a line per entry (typed key, encoding,
    /// versionstamp, expiry, the readable tagged value and, for V8 values, the stored bytes in
    /// hex), a line per queued message (payload, ready time, keys if undelivered, the backoff
    /// schedule left) and an end line counting them. `kv load` stores the bytes, so every value
    /// comes back exactly: the tagged value alone does not hold an error's stack and cause, the
    /// rest of the buffer a typed array or DataView looks into, or which views share a buffer.
    /// Expired entries are not dumped. On a local database (SQLite, redb, PostgreSQL, memory)
    /// the dump is one consistent snapshot, taken while writers keep writing, exactly as
    /// `kv backup` writes it, and so is a dump of a `kv serve` server (its snapshot/1
    /// extension); another KV Connect server (denokv) has no snapshot export, so its dump is
    /// read a page at a time (the header says "consistent": false): dump it while nothing
    /// writes.
    Dump {
        #[command(flatten)]
        database: DatabaseArg,
        /// Write to this file instead of standard output. A regular file, or the file a
        /// symbolic link points to, is replaced only once the dump is complete (all or nothing,
        /// keeping its permissions); a FIFO or device (/dev/stdout) is written into as a
        /// stream and stays what it is; a link to nothing and a directory are refused.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Back up a live database: one consistent snapshot of every entry and queued message
    /// (waiting or being delivered) as of one commit, while writers keep writing.
    ///
    /// Written in the dump format, version 3 (see `kv dump`): the header records the
    /// snapshot's versionstamp, entry lines keep their versionstamps and expiry, message lines
    /// their ids. A regular FILE is replaced only once the backup is complete; - writes to
    /// standard output. Works on SQLite, redb, PostgreSQL and memory databases, and on a
    /// database served by `kv serve` (http://, https://), whose server streams its snapshot
    /// (the snapshot/1 extension); another KV Connect server (denokv) has no export endpoint
    /// and is refused. Restore with `kv restore FILE --db URL` (into `kv serve` too).
    Backup {
        /// Where to write the backup (- for standard output).
        file: PathBuf,
    },
    /// Restore a backup into a new or empty database (--db), all or nothing, keeping every
    /// entry's versionstamp and expiry and every queued message.
    ///
    /// The database's next commit gets a versionstamp after the backup's. Any engine restores a
    /// backup of any other. A file that is cut short or damaged, or any failure, leaves the
    /// target as it was (a file target is written beside it and moved into place at the end);
    /// a target that holds data is refused.
    ///
    /// With --at and --log, a point-in-time restore: the backup, then the change log of the
    /// database --log names (see `kv log`) replayed over it up to the commit --at names (a
    /// versionstamp), or the last commit at or before a time (RFC 3339). The log must hold every
    /// commit from the backup on; a gap (the log was off, or pruned past the backup) is
    /// refused. Queue deliveries are not logged: a message handled between the backup and the
    /// point is delivered again.
    ///
    /// With --from URL, the bucket of continuous backups at URL (see `kv replicate`) instead
    /// of a file: its latest state, or the one --at names. A gap in the bucket's log, a
    /// missing, truncated or damaged object (named) is refused, and nothing is written.
    #[command(group = clap::ArgGroup::new("source").required(true).args(["file", "from"]))]
    Restore {
        /// The backup file (written by `kv backup`, or by `kv dump` of a local database).
        file: Option<PathBuf>,
        /// Restore from a bucket of continuous backups instead (see `kv replicate`): the
        /// state at --at (a versionstamp that is one of the bucket's recovery points, or the
        /// last one at or before a time), or its latest. s3://BUCKET/PREFIX, gs://, az://,
        /// file:///DIR. A bucket Deno Deploy wrote is read the same way.
        #[arg(long, value_name = "URL", conflicts_with_all = ["file", "log"])]
        from: Option<String>,
        /// Restore the state as of this commit (a versionstamp) or time (RFC 3339).
        #[arg(long, value_name = "VERSIONSTAMP|TIME", value_parser = crate::change_log::parse_point)]
        at: Option<RestorePoint>,
        /// The database whose change log is replayed (read only; usually the one backed up).
        #[arg(long, value_name = "URL", requires = "at")]
        log: Option<String>,
    },
    /// The change log of the database (--db), for point-in-time restores (not part of Deno
    /// KV).
    ///
    /// While on, every commit's effects are stored with it, in the same transaction, and kept
    /// for the retention given. The setting is stored in the database: every program that opens
    /// it with this library keeps logging (SQLite, redb and PostgreSQL databases). Deno itself
    /// does not log its own commits to a shared SQLite file; a restore across one is refused.
    Log {
        #[command(subcommand)]
        action: LogAction,
    },
    /// Read a dump into a new or empty database (all or nothing).
    ///
    /// Entries get new versionstamps and queued messages new ids; entries expired by now are
    /// skipped. A line's "bytes" are what is stored, and its "value" must still describe them:
    /// a line whose value was edited but not its bytes is refused (delete "bytes" to load the
    /// edited value). A V8 value without "bytes" is rebuilt from its tagged form, with a
    /// warning, since that form does not hold everything V8 stores. Dumps of earlier versions
    /// (format 1: no header, no bytes, no queue) still load; a dump that stops before its end
    /// line is refused as incomplete.
    Load {
        /// The dump file, or - for standard input.
        input: PathBuf,
    },
    /// Count entries, their size, expiring entries and queued messages.
    ///
    /// With --prefix, only the entries under the prefix: their number and sizes, counted by the
    /// backend from one snapshot without reading values (not part of Deno KV).
    Stats {
        #[command(flatten)]
        database: DatabaseArg,
        /// Count only the entries strictly under this prefix.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Check the database for damage: the engine's own check, then every entry and queued
    /// message read and decoded. Prints a summary (exit 0) or every problem found (exit 1).
    /// `dump`, `stats` and `migrate` run the same check first and refuse a damaged database.
    Check {
        #[command(flatten)]
        database: DatabaseArg,
    },
    /// Copy every entry and queued message from the database (--db) into a new or empty
    /// target (all or nothing).
    Migrate {
        /// The target database URL.
        target: String,
    },
    /// Ship every commit of the database (--db) to object storage, continuously: a snapshot,
    /// then its change log as log segments, a segment closed at most every
    /// --backup-segment-interval while commits arrive (not part of Deno KV).
    ///
    /// For a store that no `kv serve` fronts (`kv serve --backup-to` ships the store it serves).
    /// The bucket is in the layout Deno Deploy writes for its continuous backups, which denokv
    /// 0.14 reads (`denokv --sync-from-s3`, `denokv pitr`). Targets: s3://BUCKET/PREFIX (AWS_*
    /// variables: credentials, AWS_REGION, AWS_ENDPOINT_URL for an S3-compatible server),
    /// gs://BUCKET/PREFIX, az://CONTAINER/PREFIX, file:///DIR. The change log is switched on if
    /// it is off. Only one process ships a store at a time: on PostgreSQL a lock in the
    /// database, on a SQLite or redb file a lock file beside it; another waits and takes over
    /// when that one stops. Runs until interrupted, or with --once until the bucket holds
    /// every commit made so far.
    Replicate(ReplicateArgs),
    /// The continuous backups in a bucket: their recovery points, and how far behind a store's
    /// shipping is.
    Backups {
        #[command(subcommand)]
        action: BackupsAction,
    },
    /// Serve the database (--db) to Deno.openKv("https://HOST:PORT") and other KV Connect
    /// clients, over HTTPS with --tls-cert and --tls-key (HTTP/2 or HTTP/1.1 by ALPN), else
    /// plaintext HTTP/2 (h2c) and HTTP/1.1, until interrupted (Ctrl-C or SIGTERM). SIGHUP
    /// reloads the certificate and key.
    Serve(ServeArgs),
    /// Encode or decode keys.
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
    /// Print a completion script for a shell, generated from kv's own definition.
    ///
    /// bash: `kv completions bash > ~/.local/share/bash-completion/completions/kv`;
    /// zsh: `kv completions zsh > ~/.zfunc/_kv` (with ~/.zfunc in fpath);
    /// fish: `kv completions fish > ~/.config/fish/completions/kv.fish`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print kv's manual page (roff), generated from the same definition as --help:
    /// `kv man > kv.1 && man ./kv.1`, or into a directory of MANPATH as man1/kv.1; with a
    /// subcommand, its own page, kv-SUBCOMMAND(1) (`kv man get > kv-get.1`).
    Man {
        /// The subcommand whose page to print (default: the page of kv itself).
        #[arg(value_parser = parse_subcommand)]
        subcommand: Option<String>,
    },
    /// Run the Deno KV conformance suite against any KV Connect server (kv serve, denokv, a
    /// server of your own) and report, case by case, what passed, what failed (expected vs
    /// seen) and what could not run there, and why. Exit code 1 if any case failed.
    ///
    /// Every case works under a key prefix of its own (["kv-conformance", RUN, CASE, ...]) and
    /// deletes it afterwards, so the server may hold other data; but the suite writes, so it
    /// runs only on an empty server or with --yes-write.
    Conformance(ConformanceArgs),
}

/// `kv conformance`.
#[derive(Debug, Clone, Args)]
pub struct ConformanceArgs {
    /// The server's KV Connect URL (what `Deno.openKv` is given): http://HOST:PORT/ or
    /// https://HOST:PORT/PATH.
    pub url: String,
    /// The access token. Read from KV_ACCESS_TOKEN, else from DENO_KV_ACCESS_TOKEN.
    #[arg(long, env = "KV_ACCESS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// text: one line per case, failures with their details; json: one JSON document (for CI).
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Run even though the server already holds data (the suite writes, under its own prefix).
    #[arg(long)]
    pub yes_write: bool,
    /// Run only the cases whose name contains this text (e.g. `basics::` or `expiry`).
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

/// `kv conformance --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// Readable lines.
    Text,
    /// One JSON document.
    Json,
}

/// `kv serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:4512")]
    pub addr: SocketAddr,
    /// The access token clients must send (Deno: the DENO_KV_ACCESS_TOKEN variable); at least
    /// 12 visible ASCII characters. Read from KV_ACCESS_TOKEN, else from DENO_KV_ACCESS_TOKEN.
    /// Prefer the environment variables: a flag is visible to other users of the machine.
    #[arg(long, env = "KV_ACCESS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Run without a token (only allowed on a loopback address).
    #[arg(long, conflicts_with = "token")]
    pub open_loopback: bool,
    /// Serve HTTPS with this PEM certificate chain (the server's certificate first, then its
    /// intermediates). Reloaded with the key on SIGHUP: new connections get the new
    /// certificate, open ones keep theirs, and a bad new file is refused (the old one stays).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key, PEM: PKCS#8 ("PRIVATE KEY"), PKCS#1 ("RSA PRIVATE KEY")
    /// or SEC1 ("EC PRIVATE KEY").
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Also serve /db/NAME as the file NAME.sqlite3 (or NAME.redb, after --db's backend) in
    /// this directory, created on first use.
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
    /// Also serve /ephemeral/...: a fresh in-memory database per connection for paths ending in
    /// ":memory:" (or nothing), and a shared in-memory one per other path (for Deno's
    /// DENO_KV_PATH_PREFIX=http://HOST:PORT/ephemeral/).
    #[arg(long)]
    pub ephemeral: bool,
    /// Also serve GET /metrics: request, commit, queue, watch, connection and database counts
    /// in the Prometheus text format. It is served WITHOUT the access token (Prometheus
    /// scrapers carry none), so turn it on only where who can reach the address is controlled.
    #[arg(long)]
    pub metrics: bool,
    /// Also serve the web explorer at /ui: list entries by prefix, open them, follow live
    /// changes, see counts and the queue's depth. The page asks for the access token (none with
    /// --open-loopback) and sends it with every call; it is read-only unless --ui-write is given.
    #[arg(long)]
    pub ui: bool,
    /// Serve the explorer at /ui and let it edit and delete entries (implies --ui; each write is
    /// checked against the versionstamp the page saw: a conflicting edit is refused, never
    /// overwritten).
    #[arg(long)]
    pub ui_write: bool,
    /// The least severe events written on stderr: debug adds one line per request (method,
    /// endpoint, status, duration). Tokens, keys and values are never logged.
    #[arg(long, value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,
    /// text: one readable line per event; json: one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Resource limits that protect the server from hostile or broken clients.
    #[command(flatten)]
    pub limits: ServeLimits,
    /// Ship every commit of the database (--db) to this bucket, continuously, as `kv replicate`
    /// does (see `kv replicate --help`): s3://BUCKET/PREFIX, gs://, az://, file:///DIR. Only
    /// --db's database is shipped, not --db-dir's or --ephemeral ones. With
    /// several servers on one PostgreSQL database, one ships at a time and another takes over
    /// when it stops. The lag shows in GET /metrics (kv_backup_*); failures are logged as one
    /// WARN line per --warning-interval.
    #[arg(long, value_name = "URL", help_heading = "Continuous backup")]
    pub backup_to: Option<String>,
    #[command(flatten)]
    pub shipping: ShippingFlags,
}

/// `kv serve --log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Only errors.
    Error,
    /// Errors and warnings.
    Warn,
    /// And start, stop and reload notices.
    Info,
    /// And one line per request.
    Debug,
    /// Everything the server and `kv` emit.
    Trace,
}

/// `kv serve --log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `kv serve`'s resource policy (see the open-deno-kv-server crate's `resources` module). A client over a
/// cap gets a plain-text refusal, never a hang. At start the server raises its soft open-file
/// limit to the hard limit.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Resource limits")]
pub struct ServeLimits {
    /// Connections served at once. At the cap, a new connection takes the place of the oldest
    /// one that has not authorized yet (which is closed); when every one has, it gets "503 Too
    /// many connections". Lowered to half the open-file limit when that is lower.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub max_connections: usize,
    /// Seconds a connection may stay open with no request in flight (a watch counts as one).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub idle_timeout: f64,
    /// Seconds a client may take to send a request's headers (HTTP/1.1).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a client may take to send a request's body (408 after).
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub body_timeout: f64,
    /// Bytes of request bodies buffered at once across all connections (503 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_body_memory: usize,
    /// Watch streams open at once (429 beyond).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_watches: usize,
    /// --db-dir databases open at once (503 beyond, when all are in use).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_open_databases: usize,
    /// Seconds an unused --db-dir database stays open (it reopens on next use).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub database_idle_timeout: f64,
    /// Seconds a new connection has to make a request with the access token before it is
    /// closed (with --open-loopback, any request counts).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub auth_timeout: f64,
    /// Connections that have not authorized yet, open at once from one address (an IPv6 /64);
    /// more get "503 Too many connections from your address".
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_unauthorized_per_address: usize,
    /// Seconds over which repeated warnings of one kind (failed TLS handshakes, wrong-protocol
    /// connections, evictions, refusals) are counted and logged as one summary line.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub warning_interval: f64,
    /// Seconds the queue depths GET /metrics reports are reused before they are read again
    /// from the databases (0: at every scrape). Scrapes are answered one at a time.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub metrics_refresh: f64,
}

/// The database a reading command names as its argument (`kv dump FILE`, `kv stats FILE`), in
/// place of `--db`.
#[derive(Debug, Clone, Args)]
pub struct DatabaseArg {
    /// The database to read, in any --db form (the same as --db; give only one of them).
    #[arg(value_name = "DATABASE")]
    pub database: Option<String>,
}

/// `kv key ...`.
#[derive(Debug, Subcommand)]
pub enum KeyAction {
    /// Print a key's stored bytes in hex.
    Encode {
        /// The key.
        key: String,
    },
    /// Print the key stored as these hex bytes.
    Decode {
        /// The bytes, in hex.
        hex: String,
        /// Print the typed JSON form instead of the literal.
        #[arg(long)]
        json: bool,
    },
}

/// How to print entries.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// js: readable JavaScript literals; json: the dump's JSON lines (typed, exact);
    /// plain-json: plain JSON values for jq and other JSON tools.
    #[arg(long, value_enum, default_value_t = Format::Js)]
    pub format: Format,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `["users", 1n] = { name: "Alice" }  (versionstamp ...)`.
    Js,
    /// One JSON object per entry, as `kv dump` writes: typed keys and values, nothing lost.
    Json,
    /// One JSON object per entry as Deno's `JSON.stringify(entry)` writes it:
    /// `{"key":["users",1],"value":{"name":"Alice"},"versionstamp":"..."}` (a bigint is a JSON
    /// integer, or a string beyond 64 bits; Map, Set and errors are `{}`: see `open_deno_kv::v8::to_json`).
    PlainJson,
}

/// How a value on the command line is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ValueType {
    /// JSON, stored as the V8 value Deno's JSON.parse would give.
    Json,
    /// The text itself, as a V8 string.
    String,
    /// A decimal number, stored as Deno.KvU64.
    U64,
    /// Hex bytes, stored as a Uint8Array.
    Bytes,
    /// The tagged JSON form of dumps and manifests (any V8 value; it does not hold an error's
    /// stack and cause, or the buffer around a typed array or DataView).
    Tagged,
}

/// Reads `kv man`'s argument: the name of one of kv's subcommands.
pub fn parse_subcommand(name: &str) -> Result<String, String> {
    let command = <Cli as clap::CommandFactory>::command();
    if command.find_subcommand(name).is_some() {
        return Ok(name.to_owned());
    }
    let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
    Err(format!(
        "no subcommand {name:?}; one of: {}",
        names.join(", ")
    ))
}

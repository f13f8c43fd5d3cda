//! The command line's shape: subcommands, arguments and their help.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// The database: sqlite:PATH (or a plain path), redb:PATH, memory:.
    #[arg(long, global = true, env = "KV_DB", default_value = DEFAULT_DB)]
    pub db: String,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
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
        /// Expire the entry this many milliseconds from now.
        #[arg(long, value_name = "MS")]
        expire_in: Option<u64>,
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: String,
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
    Watch {
        /// The keys (at most 10).
        #[arg(required = true)]
        keys: Vec<String>,
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
        /// Deliver no earlier than this many milliseconds from now.
        #[arg(long, value_name = "MS", default_value_t = 0)]
        delay: u64,
        /// Where to write the message if every delivery fails (repeatable).
        #[arg(long = "if-undelivered", value_name = "KEY")]
        if_undelivered: Vec<String>,
    },
    /// Write every entry as JSON lines (the manifests' typed key and tagged value forms).
    Dump {
        /// Write to this file instead of standard output (all or nothing: the file appears
        /// only when the dump is complete).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Read a dump into a new or empty database (all or nothing).
    Load {
        /// The dump file, or - for standard input.
        input: PathBuf,
    },
    /// Count entries, their size, expiring entries and queued messages.
    Stats,
    /// Check the database for damage: the engine's own check, then every entry and queued
    /// message read and decoded. Prints a summary (exit 0) or every problem found (exit 1).
    /// `dump`, `stats` and `migrate` run the same check first and refuse a damaged database.
    Check,
    /// Copy every entry and queued message from the database (--db) into a new or empty
    /// target (all or nothing).
    Migrate {
        /// The target database URL.
        target: String,
    },
    /// Serve the database (--db) to Deno.openKv("http://HOST:PORT") and other KV Connect
    /// clients, over HTTP/2 (h2c) and HTTP/1.1, until interrupted (Ctrl-C or SIGTERM).
    Serve(ServeArgs),
    /// Encode or decode keys.
    Key {
        #[command(subcommand)]
        action: KeyAction,
    },
}

/// `kv serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:4512")]
    pub addr: SocketAddr,
    /// The access token clients must send (Deno: the DENO_KV_ACCESS_TOKEN variable); at least
    /// 12 visible ASCII characters. Prefer the environment variable: a flag is visible to other
    /// users of the machine.
    #[arg(long, env = "KV_ACCESS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Run without a token (only allowed on a loopback address).
    #[arg(long, conflicts_with = "token")]
    pub open_loopback: bool,
    /// Also serve /db/NAME as the file NAME.sqlite3 (or NAME.redb, after --db's backend) in
    /// this directory, created on first use.
    #[arg(long, value_name = "DIR")]
    pub db_dir: Option<PathBuf>,
    /// Also serve /ephemeral/...: a fresh in-memory database per connection for paths ending in
    /// ":memory:" (or nothing), and a shared in-memory one per other path (for Deno's
    /// DENO_KV_PATH_PREFIX=http://HOST:PORT/ephemeral/).
    #[arg(long)]
    pub ephemeral: bool,
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
    /// js: readable JavaScript literals; json: the dump's JSON lines.
    #[arg(long, value_enum, default_value_t = Format::Js)]
    pub format: Format,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `["users", 1n] = { name: "Alice" }  (versionstamp ...)`.
    Js,
    /// One JSON object per entry, as `kv dump` writes.
    Json,
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
    /// The tagged JSON form of dumps and manifests (any V8 value, losslessly).
    Tagged,
}

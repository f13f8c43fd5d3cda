//! # open-deno-kv-sqlite — the reference Deno KV backend, file-compatible with Deno
//!
//! Stores data in a SQLite file with exactly the layout Deno 2.9 writes (`Deno.openKv(path)`), so
//! Deno and this crate open each other's files: same tables, migrations, encodings, versionstamps,
//! expiry and queue rows, WAL journal.
//!
//! How it works ([`SqliteBackend`] is the engine; its constructors hand it out behind open-deno-kv-engine-kit's
//! [`Checked`] layer, which answers for the closed state, limits and read-only refusals):
//! - **Writes** go through one write connection per handle and open-deno-kv-engine-kit's group committer: a
//!   write that finds it idle commits on its caller's thread, and writes that arrive meanwhile
//!   share the next SQLite transaction and fsync (group commit, no fixed wait). Each write runs in
//!   its own savepoint, so a failed check or a bad mutation rolls back only that write. Deno's
//!   rules come from open-deno-kv-model's write path.
//! - **Reads** use a pool of read connections and, up to 256 entries, run on the caller's thread
//!   (open-deno-kv-engine-kit's `run_read`) rather than hopping to another thread; a get is an equality
//!   lookup. In WAL mode readers never block the writer and see a consistent
//!   snapshot.
//! - **Queues** use Deno's `queue` / `queue_running` tables: a delivered message holds a deadline
//!   renewed while its consumer lives; messages of a crashed consumer are requeued when the
//!   deadline passes and at open.
//! - **Across processes**: the writer notices other processes' commits (SQLite's data version) and
//!   wakes this handle's watches and queue consumers, which Deno's own backend does not do.
//! - **Busy**: another process holding the write lock is waited for with retries and back-off;
//!   "database is locked" never reaches the caller.
//!
//! Reads and writes work from any executor (or none); queue consumers and watches wait on tokio
//! timers and need a tokio runtime.
//!
//! Durability is explicit: [`Durability::Full`] (the default) syncs every commit group, so an
//! acknowledged commit survives a crash of the process and of the machine;
//! [`Durability::Process`] survives a process crash only, and is faster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_engine_kit::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation};
//! use open_deno_kv_sqlite::{FileEngine, SqliteBackend};
//! let kv = SqliteBackend::open("kv.sqlite3")?;
//! let write = AtomicWrite {
//!     mutations: vec![Mutation::set(encode_key(&key!["hello"])?, KvValue::Bytes(b"world".to_vec().into()))],
//!     ..Default::default()
//! };
//! kv.atomic_write(write).await?;
//! kv.close().await?;
//! # Ok(()) }
//! ```

mod backend;
mod backup;
mod change_log;
mod error;
mod identity;
mod integrity;
mod messages;
mod options;
mod pending_records;
mod reader;
mod schema;
mod store;
mod writer;

pub use backend::SqliteBackend;
pub use error::SqliteError;
pub use options::{Durability, SqliteOptions};

/// The trait [`SqliteBackend`]'s `open`, `open_with` and `path` come from: bring it into scope
/// (`use open_deno_kv_sqlite::FileEngine;`) to call them.
pub use open_deno_kv_engine_kit::FileEngine;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

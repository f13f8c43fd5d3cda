//! # open-deno-kv-postgres — Deno KV on PostgreSQL
//!
//! An [`Engine`](open_deno_kv_engine_kit::Engine) that keeps a Deno KV store in a PostgreSQL database, so that
//! several processes on several machines share one store: the scale-out story of this workspace.
//! Its constructors hand it out behind [`Checked`](open_deno_kv_engine_kit::Checked), the kit's layer that makes
//! it a [`Backend`](open_deno_kv_engine_kit::Backend) (closed state, Deno's limits, capability refusals).
//!
//! ```no_run
//! # async fn demo() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_postgres::PostgresBackend;
//! let kv = PostgresBackend::open("postgres://app@db.internal:5432/app").await?;
//! # Ok(()) }
//! ```
//!
//! ## How the model maps onto PostgreSQL
//!
//! - **Tables** (`schema.rs`): `kv` (keys as `bytea`, whose `memcmp` order is Deno's key order),
//!   `kv_queue`, `kv_change_log` (the change log), and `kv_meta`, one row holding the schema version,
//!   the last commit version and the change log's retention.
//!   The backend creates them on first open; tables of a newer version, or with our names and
//!   another shape, are refused untouched.
//! - **Writes** (`group.rs`, `committer.rs`): one committer task per handle runs the writes
//!   waiting for it in one transaction that locks the `kv_meta` row FIRST, reads what the checks
//!   and sums need under that lock, runs each write through open-deno-kv-model's write path on an overlay
//!   (a failed check fails only its own write), writes the survivors, notifies, and commits once,
//!   in two round trips (`pipeline.rs`: statements sent together run in order), or in one when the
//!   committer foresees what the group reads from its own last commit, a guess the version bump
//!   guards (`group.rs`, "One flight").
//!   The row lock queues writers from every process, so versionstamps follow commit order.
//! - **Reads** (`reader.rs`): pooled connections, one round trip per read; several ranges come
//!   from one `REPEATABLE READ READ ONLY` snapshot. Expired entries are filtered from the millisecond they expire.
//!   Eventual reads may go to replicas ([`PostgresOptions::replica_urls`]); a replica serves a
//!   handle only once it has replayed that handle's own commits, else the primary answers
//!   ([`PostgresOptions::read_your_writes`]). A pooled connection found dead is replaced and
//!   the read run again. A `get` of a key this handle's committer is writing right then waits
//!   for that group, and is answered from what it left when the commit happened during the
//!   read (`in_flight.rs`).
//! - **Queues** (`queue.rs`): `FOR UPDATE SKIP LOCKED` takes with leases that a live consumer
//!   renews; a dead consumer's message comes back when its lease runs out.
//! - **Watch** (`listener.rs`): commits `NOTIFY`; a LISTEN connection per handle wakes the
//!   watches, which re-read their keys (open-deno-kv-engine-kit's [`watch_stream`](open_deno_kv_engine_kit::watch_stream)).
//!   It listens only while the handle has a watch stream or a waiting dequeue: a listening
//!   session slows every commit on the database.
//! - **Expiry** (`housekeeping.rs`): a sweep deletes expired rows every second.
//! - **Change log** (`change_log.rs`): opt-in, for point-in-time restores; the retention lives
//!   in the `kv_meta` row every writer locks, and each commit's record is written by its group's
//!   transaction, one `INSERT` per group.
//! - **Backups** (`backup.rs`): an export streams one `REPEATABLE READ` snapshot in keyset pages;
//!   an import writes a snapshot in one transaction that holds the `kv_meta` row lock.
//! - **One shipper** (`lease.rs`): [`ShippingLease`], a session-level advisory lock on a
//!   connection of its own, lets exactly one of the processes sharing a store ship its change
//!   log to object storage; when that process dies, the server releases the lock and another
//!   takes over.
//!
//! ## Connecting
//!
//! The URL is libpq's (`postgres://user@host:port/db?…`), read by `url.rs`: TLS with libpq's
//! `sslmode`, `sslrootcert` (a file or `system`), `sslcert` and `sslkey` (`tls.rs`: rustls with
//! its `ring` provider, no OpenSSL; `prefer` is the default, as in libpq), and this crate's own
//! `schema`, `read_only` and `pool_size`. Each is checked, and each file read, before anything
//! is connected to. A refused connection comes back as the [`PostgresError`] variant that names
//! its cause and what to change (`refusal.rs`): [`PostgresError::WrongPassword`],
//! [`PostgresError::UnknownRole`], [`PostgresError::UnknownDatabase`],
//! [`PostgresError::HbaRefused`], [`PostgresError::TooManyConnections`],
//! [`PostgresError::NotPrimary`], [`PostgresError::TlsUntrusted`],
//! [`PostgresError::TlsWrongHost`], [`PostgresError::TlsUnavailable`], and more. The store
//! needs no superuser: a role that owns its schema, or only `SELECT` for a
//! [read-only](PostgresOptions::read_only) open.
//!
//! ## When the connection fails
//!
//! The committer reconnects by itself and runs a group again when it surely did not commit (the
//! failure came before `COMMIT` was sent). When the connection is lost after `COMMIT` was sent and
//! before its answer, it finds out whether the group committed (`outcome.rs`): each group writes
//! a row with a random id in its own transaction, which a new connection looks up once the lost
//! transaction has ended. Committed, the writes get their answers; not committed, the group runs
//! again. Only when the server cannot be asked within
//! [`PostgresOptions::commit_outcome_wait`] does a write fail with
//! [`open_deno_kv_engine_kit::KvError::OutcomeUnknown`] (its source a [`PostgresError::OutcomeUnknown`]):
//! read back what it wrote before retrying it; a blind retry of a `sum` could count twice. Reads,
//! queue operations and the listener reconnect by themselves too.
//!
//! ## Behind a connection pooler
//!
//! PgBouncer in session mode works. A pooler that lends server connections per transaction or
//! statement cannot carry the store's `LISTEN` nor its prepared statements: the store checks at
//! open that a notification reaches its listener, and refuses such a pooler with
//! [`PostgresError::NotificationsLost`], which names the pool mode and the fix.

mod after_commit;
mod backend;
mod backup;
mod change_log;
mod codec;
mod committer;
mod connect;
mod error;
mod events;
mod group;
mod housekeeping;
mod in_flight;
mod integrity;
mod lease;
mod listener;
mod options;
mod outcome;
mod pipeline;
mod queue;
mod reader;
mod refusal;
mod schema;
mod sql;
mod target;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod url;

pub use backend::PostgresBackend;
pub use error::PostgresError;
pub use lease::ShippingLease;
pub use options::PostgresOptions;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

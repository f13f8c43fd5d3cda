//! # open-deno-kv-redb — a pure-Rust, durable Deno KV backend on redb
//!
//! Stores Deno KV data in one [redb](https://www.redb.org) file: no C code, no SQLite. Every rule
//! of Deno KV comes from open-deno-kv-model ([`Limits`] validation, [`open_deno_kv_engine_kit::apply_atomic_write`], the
//! queue retry rule); this crate only stores, orders and commits.
//!
//! How it works:
//! - **Tables** (see the `schema` module): entries by encoded key (value, encoding, versionstamp,
//!   expiry); an expiry index by (expiry time, key) that sweeps walk in time order; the queue as
//!   ready messages by (ready time, id) and running messages by id, with their deadline; and a
//!   metadata table with the schema version and the last versionstamp. A file with a newer schema
//!   version, or one that is not a open-deno-kv-redb file, is refused untouched.
//! - **Writes** go through one writer per file, which commits every write waiting in one redb
//!   write transaction — one commit and, with [`Durability::Immediate`], one fsync for the group,
//!   with no timer to wait for (group commit). The writer has no thread of its own on the hot
//!   path: a write that finds it idle is committed by its caller's thread, and writes that arrive
//!   meanwhile are committed together by that leader or by a standby thread it hands over to
//!   (see the `writer` module). Each write is staged in an
//!   overlay and applied only if its checks pass and its mutations are valid, so a failed or
//!   refused write in a group leaves no trace and does not affect the others. Versionstamps are
//!   handed out in commit order and strictly increase, across reopens too.
//! - **Reads** are redb read transactions (MVCC snapshots): they never block the writer, and all
//!   ranges of one read come from one snapshot. Reads between two commits share one snapshot
//!   (the writer drops it after each commit, before answering), which saves a point read the
//!   cost of starting a transaction. A read of up to 256 entries runs in place on the
//!   caller's thread (open-deno-kv-engine-kit's `run_read`: no thread hop, no hand-off of the worker); a larger
//!   one leaves the executor.
//! - **Expiry** is never visible after its time: reads filter with the injected [`Clock`], and
//!   the writer also deletes due entries through the expiry index.
//! - **Queues** deliver at least once, in ready-time order, with open-deno-kv-model's back-off and
//!   dead-letter rule. A message handed out and not finished is retried when its handle is
//!   dropped or closed, and a message a crashed process held is requeued when the file is next
//!   opened.
//! - **Change log** (opt-in, for point-in-time restores; see `open_deno_kv_engine_kit::change_log`):
//!   switched on or off through the writer and stored in the file, so every later handle keeps
//!   it; while on, every commit stores its record in its own transaction, and the writer prunes
//!   records past the retention (see the `change_log` module for the layout).
//! - **Watch** uses open-deno-kv-engine-kit's [`ChangeSignal`] and [`watch_stream`].
//! - **One process, many handles.** redb lets one process at a time open a file. Handles opened
//!   in this process on the same path share one open file, one writer and one queue (they see
//!   each other's commits, watches and messages); the file is closed when the last handle closes.
//!   Another process opening the file gets an "already open in another process" error.
//!
//! Durability is explicit, see [`Durability`]: [`Durability::Immediate`] (the default) syncs
//! every commit group before acknowledging it; [`Durability::Deferred`] acknowledges commits
//! before they are synced and syncs at least once a second.
//!
//! ```no_run
//! # async fn demo() -> Result<(), open_deno_kv_engine_kit::KvError> {
//! use open_deno_kv_engine_kit::{encode_key, key, AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead};
//! use open_deno_kv_redb::{FileEngine, RedbBackend};
//! let kv = RedbBackend::open("kv.redb")?;
//! let k = encode_key(&key!["hello"])?;
//! let write = AtomicWrite {
//!     mutations: vec![Mutation::set(k.clone(), KvValue::Bytes(b"world".to_vec().into()))],
//!     ..Default::default()
//! };
//! let committed = kv.atomic_write(write).await?.expect("no checks, so it commits");
//! let read = SnapshotRead { ranges: vec![ReadRange::single_encoded_key(k)], ..Default::default() };
//! let entry = &kv.snapshot_read(read).await?[0].entries[0];
//! assert_eq!(entry.versionstamp, committed.versionstamp);
//! kv.close().await?;
//! # Ok(()) }
//! ```

mod backend;
mod backup;
mod change_log;
mod codec;
mod commit_clock;
mod consumer;
mod error;
mod file;
mod group;
mod integrity;
mod options;
mod queue;
mod reader;
mod schema;
mod snapshot;
mod store;
mod txn;
mod writer;

pub use backend::RedbBackend;
pub use error::RedbError;
pub use group::DEFERRED_SYNC_INTERVAL;
/// The most commands (writes, queue takes and settlements) one redb transaction groups.
pub use open_deno_kv_engine_kit::committer::MAX_GROUP;
pub use options::{Durability, RedbOptions};
pub use schema::SCHEMA_VERSION;

/// The trait [`RedbBackend`]'s `open`, `open_with` and `path` come from: bring it into scope
/// (`use open_deno_kv_redb::FileEngine;`) to call them.
pub use open_deno_kv_engine_kit::FileEngine;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

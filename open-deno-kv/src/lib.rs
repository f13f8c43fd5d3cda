//! # kv — Deno KV for Rust programs
//!
//! A [`Kv`] handle with the shape of Deno's `Deno.Kv`, over any backend of this workspace (or
//! your own [`Backend`]): typed keys, `get` / `get_many` / `set` / `delete`, `list` as a stream
//! that pages under the hood with Deno's cursor strings, atomic operations with checks, sums and
//! versionstamped keys, queues with at-least-once delivery, watches, and expiry.
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use open_deno_kv::{Json, Kv, ListOptions, Selector, key};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct User { name: String }
//!
//! # async fn demo() -> open_deno_kv::Result<()> {
//! let kv = Kv::open("sqlite:./data.sqlite3").await?;      // or "memory:", or a plain path
//! kv.set(key!["users", 1], Json(User { name: "Alice".into() })).await?; // Deno reads an object
//! let user = kv.get(key!["users", 1]).await?;
//! let outcome = kv.atomic().check(&user).sum(key!["count"], 1u64).commit().await?;
//! assert!(outcome.is_committed());
//! let mut users = kv.list(Selector::prefix(key!["users"]), ListOptions::default())?;
//! while let Some(entry) = users.try_next().await? {
//!     println!("{} {}", entry.key, entry.value_as::<User>()?.name);
//! }
//! # Ok(()) }
//! ```
//!
//! Keys: Rust integers are JavaScript bigints (`key!["users", 1]` is `["users", 1n]`), `f64` is
//! a JavaScript number, `&str` a string, `bool` a boolean, `&[u8]` a `Uint8Array`. Values (see
//! [`value`]): strings, numbers and booleans are JavaScript's, `u64` is `Deno.KvU64`, `Vec<u8>`
//! a `Uint8Array`, [`Json`] of any serde type an object; [`v8`] converts everything else.
//!
//! ## Engines are cargo features
//!
//! [`Kv::open`] opens the engines this crate was compiled with, one cargo feature each, so a
//! program that wants one engine compiles only that one:
//!
//! | feature | URLs | engine |
//! |---|---|---|
//! | `sqlite` (default) | `sqlite:PATH`, a plain path | open-deno-kv-sqlite: Deno's own SQLite file |
//! | `memory` (default) | `memory:` | open-deno-kv-memory: in memory, gone at close |
//! | `redb` | `redb:PATH` | open-deno-kv-redb: a pure-Rust redb file |
//! | `remote` | `https://HOST:PORT/PATH`, `http://HOST:PORT/PATH` | open-deno-kv-remote: a KV Connect server (open-deno-kv-server, denokv), over TLS or h2c |
//! | `postgres` | `postgres://USER@HOST:PORT/DB`, `postgresql://…` | open-deno-kv-postgres: a store in PostgreSQL that several processes share |
//!
//! A URL whose engine is left out is refused with
//! [`Error::BadUrl`] naming the feature to turn on. With no engine at all
//! (`default-features = false`), [`Kv::new`] still runs over any [`Backend`] you build.
//!
//! ```toml
//! [dependencies]
//! open-deno-kv = { path = "../open-deno-kv", default-features = false, features = ["redb"] }
//! ```

mod atomic;
mod entry;
mod error;
mod handle;
mod list;
mod open;
mod outcome;
pub mod queue;
mod range_watch;
mod time;
pub mod value;
mod watch;

pub use atomic::{AtomicCheck, AtomicOperation};
pub use entry::{Entry, MaybeEntry};
pub use error::{Error, Result};
pub use handle::Kv;
pub use list::{DEFAULT_BATCH_SIZE, ListOptions, ListStream, Selector};
pub use open::BackendUrl;
pub use outcome::CommitOutcome;
pub use queue::{
    DEFAULT_QUEUE_CONCURRENCY, DeliveryFailure, EnqueueOptions, ListenOptions, QueueHandler,
};
pub use range_watch::{RangeEvent, RangeWatch};
pub use value::{FromValue, IntoValue, Json};
pub use watch::WatchStream;

/// V8 values: Deno's stored bytes to and from tagged JSON, plain JSON, serde types, primitives
/// and JavaScript literals. The codec lives in open-deno-kv-model (the sum rules use it too); this is the
/// same module under the path programs use.
pub use open_deno_kv_model::v8;

/// The change log and point-in-time restores: [`Kv::enable_change_log`] switches a store's log
/// on; [`change_log::restore`] rolls a backup forward to a commit with it. The module lives in
/// open-deno-kv-model; this is the same module under the path programs use.
pub use open_deno_kv_model::change_log;

// The data model, re-exported so a program needs only this crate.
pub use open_deno_kv_model::{
    Backend, CommitResult, Consistency, Key, KeyPart, KeyRange, KvError, KvValue, QueuedMessage,
    RangeCount, Versionstamp, decode_key, encode_key, key,
};

/// The README.md of this crate (the page crates.io shows) is compiled as a doc test, so that it
/// stays true. The repository's README.md shows the same example; `.ci/run` checks that every
/// Rust block there is a copy of one in a crate's README.md, which is tested here or in its crate.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

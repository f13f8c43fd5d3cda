//! # kv — Deno KV for Rust programs
//!
//! A [`Kv`] handle with the shape of Deno's `Deno.Kv`, over any backend of this workspace (or
//! your own [`Backend`]): typed keys, `get` / `get_many` / `set` / `delete`, `list` as a stream
//! that pages under the hood with Deno's cursor strings, atomic operations with checks, sums and
//! versionstamped keys, queues with at-least-once delivery, watches, and expiry.
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use kv::{Kv, ListOptions, Selector, key};
//!
//! # async fn demo() -> kv::Result<()> {
//! let kv = Kv::open("sqlite:./data.sqlite3")?;            // or "memory:", or a plain path
//! let alice = kv::v8::from_json(&serde_json::json!({"name": "Alice"}))?; // Deno reads an object
//! kv.set(key!["users", 1], alice).await?;
//! let user = kv.get(key!["users", 1]).await?;
//! kv.atomic().check(key!["users", 1], user.versionstamp).sum(key!["count"], 1u64).commit().await?;
//! let mut users = kv.list(Selector::prefix(key!["users"]), ListOptions::default())?;
//! while let Some(entry) = users.try_next().await? {
//!     println!("{} {}", entry.key, kv::v8::to_json(&entry.value)?);
//! }
//! # Ok(()) }
//! ```
//!
//! Keys: Rust integers are JavaScript bigints (`key!["users", 1]` is `["users", 1n]`), `f64` is
//! a JavaScript number, `&str` a string, `bool` a boolean, `&[u8]` a `Uint8Array`. Values: `u64`
//! is `Deno.KvU64`, `Vec<u8>` a `Uint8Array`, and everything else a V8 value made by [`v8`] from
//! JSON or any serde type.

mod atomic;
mod entry;
mod error;
mod handle;
mod list;
mod open;
pub mod queue;
pub mod v8;
mod watch;

pub use atomic::AtomicOperation;
pub use entry::{Entry, MaybeEntry};
pub use error::{Error, Result};
pub use handle::Kv;
pub use list::{DEFAULT_BATCH_SIZE, ListOptions, ListStream, Selector};
pub use open::BackendUrl;
pub use queue::{DEFAULT_QUEUE_CONCURRENCY, EnqueueOptions};
pub use watch::WatchStream;

// The data model, re-exported so a program needs only this crate.
pub use kv_proto::{
    Backend, CommitResult, Consistency, Key, KeyPart, KvError, KvValue, QueuedMessage,
    Versionstamp, key,
};

/// The README's Rust snippets are compiled (and run, where they can) as doc tests, so they stay
/// true. They live here because this crate sees every other one.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

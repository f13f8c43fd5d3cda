//! # open-deno-kv-engine-kit — what a Deno KV storage engine is built from
//!
//! The data model and Deno's rules (keys, values, the V8 codec, requests, limits, errors, the
//! `Backend` trait) are open-deno-kv-model's. This crate is the room next door, for engine
//! authors: the plumbing every engine of this workspace shares, so an engine holds only what its
//! storage does.
//!
//! - the [`Engine`] trait a storage engine implements, and [`Checked`], the one layer above every
//!   engine that makes it a [`Backend`]: the closed state, the limits (an engine receives only
//!   [`Validated`] requests, which only [`Limits`] builds), the capability and read-only
//!   refusals; [`FileEngine`] for engines that open a file, and the [`SchemaTooNew`] rule;
//! - the group committer blocking engines write through ([`committer`]), with the loop that runs
//!   one group on the committer's thread ([`isolated`]) and a pool of read connections
//!   ([`pool`]); [`run_blocking`] and [`run_read`], which take blocking work off the executor;
//! - the wake-ups of watches and consumers after a commit ([`Notifier`], [`Effects`]), and the
//!   watch streams built on a commit signal ([`watch_stream`], [`range_watch_stream`],
//!   [`ChangeSignal`]);
//! - the queue machinery: the delivery handle, the dequeue loop, the lease book and the queue
//!   tables ([`queue`]);
//! - export and import for engines whose storage blocks ([`backup`]), a write transaction that
//!   records what it did for the change log ([`change_log`]), and timers for periodic work
//!   ([`interval`]);
//! - the real wall clock ([`SystemClock`]).
//!
//! Every item of open-deno-kv-model is re-exported here (and its `queue`, `watch`, `backup` and
//! `change_log` items under this crate's modules of the same name), so an engine names one crate:
//!
//! ```
//! use open_deno_kv_engine_kit::{Checked, Engine, KvError, Limits, SystemClock};
//! # let _ = (Limits::deno(), SystemClock);
//! # fn engines_are_checked<E: Engine>(_: Checked<E>) -> Result<(), KvError> { Ok(()) }
//! ```
//!
//! ## Semver policy for engine authors
//!
//! [`Engine`], [`Backend`] and the traits an engine implements ([`WriteTransaction`],
//! [`queue::DeliveryEngine`], …) are the contract with every engine, here and outside this
//! project; the policy is open-deno-kv-model's (see its crate documentation), applied to both
//! crates.

pub mod backup;
mod blocking;
pub mod change_log;
mod checked;
mod clock;
pub mod committer;
mod engine;
mod file_engine;
pub mod interval;
pub mod isolated;
mod notifier;
mod optional;
mod page;
pub mod pool;
pub mod queue;
mod schema;
pub mod watch;

#[doc(no_inline)]
pub use open_deno_kv_model::*;

pub use blocking::{IN_PLACE_READ_ENTRIES, run_blocking, run_read};
pub use checked::Checked;
pub use clock::SystemClock;
pub use engine::Engine;
pub use file_engine::FileEngine;
pub use notifier::{Effects, Notifier};
pub use page::{PageBuilder, SHARED_ENTRY_MAX};
pub use schema::SchemaTooNew;
pub use watch::{
    ChangeSignal, WatchReader, WatchedEntry, blocking_range_watch_stream, blocking_watch_stream,
    range_watch_stream, watch_stream,
};

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

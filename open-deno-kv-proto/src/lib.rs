//! # open-deno-kv-proto — the data model and rules of Deno KV
//!
//! Everything a Deno KV storage engine needs to agree with Deno 2.9, byte for byte, and with every
//! other engine in this workspace:
//!
//! - [`Key`] / [`KeyPart`] and their ordered byte encoding ([`encode_key`], [`decode_key`]);
//! - [`KvValue`] and its stored encodings ([`ValueEncoding`]), and the one V8 codec of the
//!   workspace ([`v8`]): V8 bytes to and from tagged JSON, plain JSON, serde types, primitives
//!   and JavaScript literals;
//! - [`Versionstamp`]s;
//! - read requests ([`SnapshotRead`], [`ReadRange`]), list selectors and cursors
//!   ([`ListSelector`]), and atomic writes ([`AtomicWrite`]);
//! - Deno's [`Limits`] with their exact error texts, behind one validation entry point;
//! - the rules: sum/min/max and versionstamped keys ([`rules`]), the queue retry decision
//!   ([`queue`]), expiry, and the whole write path ([`apply_atomic_write`]);
//! - watch streams built on a commit signal ([`watch_stream`]);
//! - the engine kit: the group committer blocking engines write through ([`committer`]), the
//!   wake-ups of watches and consumers after a commit ([`Notifier`], [`Effects`]), and the queue
//!   delivery handle, lease book and settlement rule ([`queue`]);
//! - an injected [`Clock`];
//! - the [`Engine`] trait a storage engine implements, and [`Checked`], the one layer above every
//!   engine that makes it a [`Backend`]: the closed state, the limits (an engine receives only
//!   [`Validated`] requests, which only [`Limits`] builds), the capability and read-only
//!   refusals;
//! - whole-store snapshots for online backups and restores ([`backup`]);
//! - the [`Backend`] trait itself, and the one error type [`KvError`].
//!
//! ```
//! use open_deno_kv_proto::{decode_key, encode_key, key};
//! // ["users", 42n] in JavaScript:
//! let bytes = encode_key(&key!["users", 42]).unwrap();
//! assert_eq!(hex::encode(&bytes), "02757365727300152a");
//! assert_eq!(decode_key(&bytes).unwrap(), key!["users", 42]);
//! ```
//!
//! ## Semver policy for engine authors
//!
//! [`Engine`], [`Backend`] and the traits an engine implements ([`WriteTransaction`],
//! [`queue::DeliveryEngine`], …) are the contract with every engine, here and outside this
//! project. Until 1.0 a breaking change bumps the minor version (0.1 → 0.2); from 1.0 on, the
//! major one.
//!
//! **Breaking:** a new required trait method, or a changed signature (arguments, return type,
//! `async`-ness, bounds); a new variant of an enum that is not `#[non_exhaustive]`, or a new
//! public field of a struct that is not; a changed rule (an encoding, a limit, an error text, key
//! order, what a mutation does); a changed expectation of the conformance suite
//! (`open-deno-kv-conformance`), i.e. a case that a correct engine of the previous version fails.
//!
//! **Not breaking:** a new provided method whose default keeps every existing engine correct; a
//! new variant or field of a `#[non_exhaustive]` enum or struct ([`KvError`],
//! [`Capabilities`], …); new functions, types and helpers; a new conformance case that a correct
//! engine already passes (it pins down a rule already stated).
//!
//! Once a release exists, CI compares the public API with it (`cargo semver-checks`).

mod backend;
pub mod backup;
mod blocking;
pub mod change_log;
mod checked;
mod clock;
mod commit;
pub mod committer;
mod engine;
mod error;
mod file_engine;
pub mod identity;
mod integrity;
pub mod interval;
pub mod isolated;
mod key;
mod key_codec;
mod key_literal;
mod limits;
mod notifier;
pub mod pool;
pub mod queue;
mod range;
mod read;
pub mod rules;
mod schema;
mod selector;
mod staged;
pub mod v8;
mod validated;
mod value;
mod versionstamp;
pub mod watch;
mod write;

pub use backend::{Backend, Capabilities, RangeWatchStream, WatchStream};
pub use backup::{ImportSummary, Snapshot, SnapshotItem, SnapshotOrigin, SnapshotStream};
pub use blocking::{IN_PLACE_READ_ENTRIES, run_blocking, run_read};
pub use checked::Checked;
pub use clock::{Clock, ManualClock, SystemClock, ms_to_datetime};
pub use commit::{StoredEntry, WriteOutcome, WriteTransaction, apply_atomic_write, is_expired};
pub use engine::Engine;
pub use error::KvError;
pub use file_engine::FileEngine;
pub use identity::DatabaseId;
pub use integrity::{IntegrityReport, RowProblem, TableHolds};
pub use key::{Key, KeyPart};
pub use key_codec::{KeyError, MAX_INT_MAGNITUDE_BYTES, decode_key, encode_key, encode_part};
pub use key_literal::{key_literal, parse_key_literal};
pub use limits::{LimitError, LimitKind, Limits};
pub use notifier::{Effects, Notifier};
pub use queue::{QueueMessageHandle, QueuedMessage};
pub use range::{KeyRange, RangeCount};
pub use read::{Consistency, KvEntry, ReadRange, ReadRangeOutput, SnapshotRead, WatchKeyOutput};
pub use rules::MutationError;
pub use schema::SchemaTooNew;
pub use selector::ListSelector;
pub use staged::{StagedCommit, stage_atomic_write};
pub use validated::{Validated, ValidatedRange, ValidatedRead, ValidatedWatch, ValidatedWrite};
pub use value::{KvValue, ValueEncoding, ValueError};
pub use versionstamp::{Versionstamp, VersionstampParseError};
pub use watch::{
    ChangeSignal, ChangedKeys, RangeChange, RangeWatchEvent, WatchReader, WatchedEntry,
    blocking_range_watch_stream, blocking_watch_stream, range_watch_stream, watch_stream,
};
pub use write::{
    AtomicWrite, Check, CommitResult, DEFAULT_BACKOFF_SCHEDULE, Enqueue, Mutation, MutationKind,
};

// Re-exported so users name the same types open-deno-kv-proto uses, and code outside this workspace that
// implements `Backend` or `DeliveryEngine` (boxed, dyn-compatible traits) uses the same
// `async_trait` attribute. (`Engine` needs none: its methods are plain `async fn`s.)
pub use async_trait::async_trait;
pub use chrono;
pub use num_bigint;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

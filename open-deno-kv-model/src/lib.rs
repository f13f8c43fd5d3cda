//! # open-deno-kv-model — the data model and rules of Deno KV
//!
//! What a Deno KV store is, and the rules every implementation must agree on with Deno 2.9, byte
//! for byte — without a runtime (no executor, no threads, no timers):
//!
//! - [`Key`] / [`KeyPart`] and their ordered byte encoding ([`encode_key`], [`decode_key`]), and
//!   JavaScript key literals ([`key_literal`], [`parse_key_literal`]);
//! - [`KvValue`] and its stored encodings ([`ValueEncoding`]), and the one V8 codec of the
//!   workspace ([`v8`]): V8 bytes to and from tagged JSON, plain JSON, serde types, primitives
//!   and JavaScript literals;
//! - [`Versionstamp`]s;
//! - read requests ([`SnapshotRead`], [`ReadRange`]), list selectors and cursors
//!   ([`ListSelector`]), and atomic writes ([`AtomicWrite`]);
//! - Deno's [`Limits`] with their exact error texts, behind one validation entry point, and the
//!   [`Validated`] requests only it builds;
//! - the rules: sum/min/max and versionstamped keys ([`rules`]), expiry ([`is_expired`]), the
//!   whole write path ([`apply_atomic_write`], [`stage_atomic_write`]), and the queue's messages
//!   and retry decision ([`queue`]);
//! - what a watch reports ([`watch`]);
//! - an injected [`Clock`] (and [`ManualClock`] for tests);
//! - whole-store snapshots for online backups and restores ([`backup`]), and the change log's
//!   records, their encoding and the replay of a log over a backup ([`change_log`]);
//! - the [`Backend`] trait a program talks to, what a backend offers ([`Capabilities`]), and the
//!   one error type [`KvError`].
//!
//! How to *build* an engine (the `Engine` trait, the `Checked` layer above every engine, the
//! group committer, queue tables, watch streams, the system clock) is the other crate,
//! open-deno-kv-engine-kit, which re-exports this one.
//!
//! ```
//! use open_deno_kv_model::{decode_key, encode_key, key};
//! // ["users", 42n] in JavaScript:
//! let bytes = encode_key(&key!["users", 42]).unwrap();
//! assert_eq!(hex::encode(&bytes), "02757365727300152a");
//! assert_eq!(decode_key(&bytes).unwrap(), key!["users", 42]);
//! ```
//!
//! ## Semver policy for engine authors
//!
//! [`Backend`], [`WriteTransaction`] and the data an engine stores and answers (and, in
//! open-deno-kv-engine-kit, `Engine` and `DeliveryEngine`) are the contract with every engine,
//! here and outside this project. Until 1.0 a breaking change bumps the minor version (0.1 → 0.2); from 1.0 on, the
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
pub mod change_log;
mod clock;
mod commit;
mod error;
pub mod identity;
mod integrity;
mod key;
mod key_codec;
mod key_literal;
mod limits;
pub mod queue;
mod range;
mod read;
pub mod rules;
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
pub use clock::{Clock, ManualClock, ms_to_datetime};
pub use commit::{StoredEntry, WriteOutcome, WriteTransaction, apply_atomic_write, is_expired};
pub use error::KvError;
pub use identity::DatabaseId;
pub use integrity::{IntegrityReport, RowProblem, TableHolds};
pub use key::{Key, KeyPart};
pub use key_codec::{KeyError, MAX_INT_MAGNITUDE_BYTES, decode_key, encode_key, encode_part};
pub use key_literal::{key_literal, parse_key_literal};
pub use limits::{LimitError, LimitKind, Limits};
pub use queue::{QueueMessageHandle, QueuedMessage};
pub use range::{KeyRange, RangeCount};
pub use read::{Consistency, KvEntry, ReadRange, ReadRangeOutput, SnapshotRead, WatchKeyOutput};
pub use rules::MutationError;
pub use selector::ListSelector;
pub use staged::{StagedCommit, stage_atomic_write};
pub use validated::{Validated, ValidatedRange, ValidatedRead, ValidatedWatch, ValidatedWrite};
pub use value::{KvValue, KvValueRef, ValueEncoding, ValueError};
pub use versionstamp::{Versionstamp, VersionstampParseError};
pub use watch::{ChangedKeys, RangeChange, RangeWatchEvent};
pub use write::{
    AtomicWrite, Check, CommitResult, DEFAULT_BACKOFF_SCHEDULE, Enqueue, Mutation, MutationKind,
};

// Re-exported so users name the same types open-deno-kv-model uses, and code outside this
// workspace that implements `Backend` or `QueueMessageHandle` (boxed, dyn-compatible traits) uses
// the same `async_trait` attribute.
pub use async_trait::async_trait;
pub use bytes::{self, Bytes};
pub use chrono;
pub use num_bigint;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

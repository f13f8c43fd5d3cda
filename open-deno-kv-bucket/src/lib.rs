//! Continuous backup of a Deno KV store to object storage, and restores from it.
//!
//! A [`Shipper`] takes a store's snapshot, writes it to a bucket ([`Target`]: S3 or an
//! S3-compatible server, GCS, Azure, a local directory), then tails the store's change log and
//! writes its commits as log segments, about a second behind. A [`BucketReader`] lists the
//! bucket's recovery points and rebuilds the store's state at any of them, for any engine to
//! import.
//!
//! The bucket is in the layout Deno Deploy writes for its continuous backups and denokv 0.14
//! reads (`denokv --sync-from-s3`, `denokv pitr`), described in [`layout`]; what that layout
//! cannot carry (queued messages, the database's identity, commit times and range deletes)
//! travels beside it under the prefix's `odkv/`, which denokv ignores. A bucket written by Deno
//! Deploy is read the same way.

mod error;
mod inventory;
pub mod layout;
mod objects;
mod reader;
pub mod retention;
mod shipper;
mod target;

pub use error::BucketError;
pub use reader::{BucketReader, BucketSummary, PointKind, RecoveryPoint, RestoreAt, SnapshotInfo};
pub use retention::{PruneReport, prune};
pub use shipper::{
    ShipReport, Shipper, ShipperConfig, ShipperStatus, SnapshotReason, SnapshotTaken,
};
pub use target::Target;

/// The README.md of this crate (the page crates.io shows): its Rust example is compiled as a doc
/// test, so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

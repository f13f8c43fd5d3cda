//! How a database is opened: the clock, the limits, how hard commits are pushed to disk, an
//! integrity check at open, read-only or not.

use std::sync::Arc;

#[cfg(doc)]
use open_deno_kv_engine_kit::KvError;
use open_deno_kv_engine_kit::{Clock, Limits, SystemClock};

#[cfg(doc)]
use crate::{DEFERRED_SYNC_INTERVAL, RedbError};

/// How hard a commit is pushed to disk before it is acknowledged.
///
/// Whatever the mode, a crash never corrupts the file: redb keeps two commit slots with
/// checksums and reopens at the last commit that was made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit group is committed with redb's `Durability::Immediate`: written and fsynced
    /// before any write in it is acknowledged. An acknowledged commit survives a crash of the
    /// process and of the machine (to the extent the disk honours fsync). A group of queue
    /// bookkeeping only (takes and settlements, no write) is committed unsynced and made durable
    /// by the next synced commit, or within [`DEFERRED_SYNC_INTERVAL`]: a crash before then
    /// delivers the message again (`open_deno_kv_engine_kit::queue`, "Queue bookkeeping").
    #[default]
    Immediate,
    /// Commit groups use redb's `Durability::None`: committed in memory, visible to every reader
    /// at once, and acknowledged without waiting for the disk; the writer makes them durable with
    /// an `Immediate` commit at least every [`DEFERRED_SYNC_INTERVAL`] (1 s), when it is idle,
    /// and when the last handle closes (or is dropped).
    ///
    /// - A clean close keeps every acknowledged commit.
    /// - A crash of the process or of the machine loses the commits acknowledged since the last
    ///   sync (at most about [`DEFERRED_SYNC_INTERVAL`] of them); the file reopens at the last
    ///   synced commit, and versionstamps of the lost commits may be handed out again.
    Deferred,
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct RedbOptions {
    /// The clock expiry and queue times are read from (the system clock by default; tests use a
    /// [`open_deno_kv_engine_kit::ManualClock`]).
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// See [`Durability`]. Handles on a file already open in this process share its writer, so
    /// the durability of the first open applies to all of them (as does its clock for the
    /// writer's own housekeeping: recovery at open and idle sweeps; each handle's reads, writes
    /// and queue operations use its own clock).
    pub durability: Durability,
    /// Verify every page's checksum when the file is opened (reads the whole file). Without it a
    /// file that was closed cleanly is trusted; a file left by a crash is always checked and
    /// repaired by redb.
    pub check_integrity_on_open: bool,
    /// Open without writing anything to the file: no recovery, no initialisation, no writer
    /// (writes and dequeues fail with [`KvError::ReadOnly`]). Several processes may read a file
    /// this way at once, but none may have it open writable meanwhile. A file that was not
    /// closed cleanly is refused ([`RedbError::NeedsRecovery`]), as is a file with no tables.
    pub read_only: bool,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            durability: Durability::Immediate,
            check_integrity_on_open: false,
            read_only: false,
        }
    }
}

//! The change log: every commit's effects, kept by the store, for point-in-time restores.
//!
//! A backup ([`crate::backup`]) is the store as of one commit. To get back the store as of any
//! *later* commit — the minute before a bad deploy deleted half of it — a store can also keep a
//! log of its commits: opt-in, with a retention limit, written by the durable engines in the
//! transaction of the commit itself (a commit and its record are stored together or not at all).
//! [`replay_log`] and [`Replay`] then rebuild the state as of a chosen commit from a backup and the log's records
//! after it, and the result is imported like any backup.
//!
//! ## What a record holds
//!
//! A [`ChangeRecord`] is one commit: the database it was made in ([`crate::identity`]), its
//! versionstamp, the time it ran at (the store's clock),
//! the versionstamp of the commit before it in the store, and its effects as the engine applied
//! them ([`StagedCommit`]): the ranges it deleted as a whole, then the final state of every key it
//! touched (the entry stored, with its versionstamp and expiry, or a deletion), then the messages
//! it enqueued. Effects, not requests: a `sum` is recorded as the value it stored, so a replay
//! needs neither the store's earlier state nor Deno's rules, and gives byte for byte what the
//! commit gave. Writes that run no checks of their own are logged too: dead letters of a message
//! whose retries ran out are a commit like any other.
//!
//! Queue *deliveries* are not commits and are not logged (see [`crate::queue`], "Queue
//! bookkeeping"): a restore holds the backup's messages and every message a replayed commit
//! enqueued, delivered or not. A message handled between the backup and the restore point is
//! delivered again after the restore. Delivery is at least once, so this is allowed; it is never
//! lost.
//!
//! An import ([`crate::Backend::import_snapshot`]) is not a commit either; the first commit after
//! it chains onto a version no record has ([`version_after_import`]), so a replay never crosses
//! an import.
//!
//! ## The chain
//!
//! Each record names the commit before it ([`ChangeRecord::previous`]), as the store counted it
//! when it committed. A replay checks that the records it applies follow each other, starting
//! from the backup's versionstamp: a commit the log does not hold (Deno itself writing a SQLite
//! file, or a log switched off for a while) breaks the chain, and the replay refuses rather than
//! build a state that never existed. And every record names its database, as the backup's
//! header does: a replay refuses records of a database other than the backup's
//! ([`crate::identity::same_database`]), since another database's log may well continue the
//! backup's versionstamps and pass the chain check.
//!
//! ## Switching it on, and retention
//!
//! [`crate::Backend::configure_change_log`] switches the log on with a retention, or off (which
//! deletes its records); the setting is stored in the database, so every later handle keeps
//! logging until it is switched off. Records older than the retention (by their time) are pruned
//! by the writer every [`PRUNE_EVERY`] commits, at most [`PRUNE_BATCH`] records at a time, oldest
//! first, in the same transaction as a commit.
//!
//! ```
//! use std::collections::BTreeMap;
//! use open_deno_kv_model::change_log::ChangeRecord;
//! use open_deno_kv_model::{KvValue, StagedCommit, StoredEntry, Versionstamp, chrono::Utc};
//!
//! let stamp = Versionstamp::from_version(8, 0);
//! let entry = StoredEntry { value: KvValue::U64(1), versionstamp: stamp, expires_at: None };
//! let record = ChangeRecord {
//!     database: Some(open_deno_kv_model::DatabaseId::random()),
//!     versionstamp: stamp,
//!     previous: Versionstamp::from_version(7, 0),
//!     at: Utc::now(),
//!     changes: StagedCommit {
//!         writes: BTreeMap::from([(b"\x02a\x00".to_vec(), Some(entry))]),
//!         ..Default::default()
//!     },
//! };
//! let bytes = record.encode();
//! assert_eq!(ChangeRecord::decode(&bytes)?, record);
//! # Ok::<(), open_deno_kv_model::KvError>(())
//! ```

mod codec;
mod replay;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::{DatabaseId, KvError, MutationKind, StagedCommit, ValidatedWrite, Versionstamp};

pub use replay::{Replay, RestorePoint, Restored, replay_log, restore};

/// The most records one [`crate::Backend::read_change_log`] call returns.
pub const MAX_READ: usize = 1000;

/// How many logged commits a writer lets pass between two prunings.
pub const PRUNE_EVERY: u32 = 256;

/// The most records one pruning deletes: more than [`PRUNE_EVERY`], so pruning keeps up with
/// the log however fast it grows.
pub const PRUNE_BATCH: usize = 1024;

/// One commit of the change log (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The database the commit was made in. `None` only for a record written before databases
    /// had identities (layout 1 of `change_log/codec.rs`): a replay refuses it.
    pub database: Option<DatabaseId>,
    /// The commit's versionstamp.
    pub versionstamp: Versionstamp,
    /// The versionstamp of the commit before it in the store (the store's version counter when
    /// this commit started), for the chain check of [`Replay::apply`].
    pub previous: Versionstamp,
    /// The time the commit ran at, on the store's clock.
    pub at: DateTime<Utc>,
    /// What the commit did: ranges deleted, then keys' final states, then messages enqueued.
    pub changes: StagedCommit,
}

impl ChangeRecord {
    /// The record's bytes, as engines store them (layout in `change_log/codec.rs`).
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(self)
    }

    /// Appends the record's bytes to `out`: records appended one after another can be stored
    /// together and read back with [`ChangeRecord::decode_all`].
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        codec::encode_into(self, None, out);
    }

    /// [`ChangeRecord::encode_into`] for a record appended right after `before` (the database
    /// and versionstamp of the record appended just before it, in the same bytes): when `before`
    /// is this record's database and previous commit, the record is stored *continued*, without
    /// what `before` already says (about 36 bytes fewer for a one-key set; layout in
    /// `change_log/codec.rs`). Such bytes read back only with [`ChangeRecord::decode_all`].
    pub fn encode_after_into(&self, before: Option<RecordHead>, out: &mut Vec<u8>) {
        codec::encode_into(self, before.map(|h| (h.database, h.versionstamp)), out);
    }

    /// A record from its stored bytes; [`KvError::Corrupt`] if they do not decode.
    pub fn decode(bytes: &[u8]) -> Result<Self, KvError> {
        codec::decode(bytes)
    }

    /// Records stored back to back ([`ChangeRecord::encode_into`], [`ChangeRecord::encode_after_into`]),
    /// in their order: one or more, or [`KvError::Corrupt`] if the bytes are empty, start with a
    /// continued record, or any record does not decode to its end. The bytes of one record alone
    /// decode to that record.
    pub fn decode_all(bytes: &[u8]) -> Result<Vec<Self>, KvError> {
        codec::decode_all(bytes)
    }
}

/// What a record appended after another may leave out ([`ChangeRecord::encode_after_into`]):
/// the database and versionstamp of the record before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHead {
    /// The record's database.
    pub database: Option<DatabaseId>,
    /// The record's commit.
    pub versionstamp: Versionstamp,
}

/// A write that only sets and deletes keys: no checks' effects to record beyond its own
/// mutations, no versionstamped keys, range deletes, sums, min/max or enqueues. Its change record
/// follows from the write alone, so an engine can apply it as it is and append the record's bytes
/// afterwards ([`PlainWrite::encode_record_into`]), without staging a copy of its effects
/// through [`crate::change_log`]'s recording first: most writes are such, and the copy is most
/// of what logging them costs. Any other write is recorded as [`apply_atomic_write`] applies it.
///
/// [`apply_atomic_write`]: crate::apply_atomic_write
#[derive(Debug, Clone, Copy)]
pub struct PlainWrite<'a> {
    write: &'a ValidatedWrite,
}

impl<'a> PlainWrite<'a> {
    /// `Some` when `write` only sets and deletes keys.
    pub fn of(write: &'a ValidatedWrite) -> Option<Self> {
        let plain = write.enqueues.is_empty()
            && write.mutations.iter().all(|mutation| {
                matches!(mutation.kind, MutationKind::Set(_) | MutationKind::Delete)
            });
        plain.then_some(PlainWrite { write })
    }

    /// Appends the record of this write, committed as `versionstamp` after `previous` at `at` in
    /// `database`, right after the record `before` (if any, in the same bytes): byte for byte
    /// [`ChangeRecord::encode_after_into`] of the record of what [`crate::apply_atomic_write`]
    /// did for it.
    pub fn encode_record_into(
        &self,
        before: Option<RecordHead>,
        database: Option<DatabaseId>,
        versionstamp: Versionstamp,
        previous: Versionstamp,
        at: DateTime<Utc>,
        out: &mut Vec<u8>,
    ) {
        codec::encode_plain_into(
            out,
            before.map(|h| (h.database, h.versionstamp)),
            database,
            versionstamp,
            previous,
            at,
            &self.write.mutations,
        );
    }
}

/// Where a change log stands: [`crate::Backend::change_log_status`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeLogStatus {
    /// The database whose log this is ([`crate::identity`]); `None` only for a store that cannot
    /// record one (a Deno-written SQLite file read without ever being opened writable, which
    /// keeps no log either).
    pub database: Option<DatabaseId>,
    /// How long records are kept; `None` when the log is off.
    pub retention: Option<Duration>,
    /// How many records the log holds.
    pub records: u64,
    /// Its oldest record, if any.
    pub first: Option<LogMark>,
    /// Its newest record, if any.
    pub last: Option<LogMark>,
}

/// A record's place in the log: its commit and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogMark {
    /// The commit.
    pub versionstamp: Versionstamp,
    /// When it ran.
    pub at: DateTime<Utc>,
}

/// Checks a retention given to [`crate::Backend::configure_change_log`]: at least a second,
/// and no more than a store can write down (about 292 million years, in milliseconds).
pub fn check_retention(retention: Duration) -> Result<Duration, KvError> {
    if retention < Duration::from_secs(1) {
        return Err(KvError::invalid_argument(
            "a change log's retention must be at least one second",
        ));
    }
    retention_ms(retention)?;
    Ok(retention)
}

/// A retention in whole milliseconds, as engines store it.
pub fn retention_ms(retention: Duration) -> Result<i64, KvError> {
    i64::try_from(retention.as_millis())
        .map_err(|_| KvError::invalid_argument("a change log's retention is too long"))
}

/// The oldest time a record may have at `now` under `retention`: records before it are pruned.
pub fn prune_before(now: DateTime<Utc>, retention: Duration) -> DateTime<Utc> {
    let keep = TimeDelta::from_std(retention).unwrap_or(TimeDelta::MAX);
    now.checked_sub_signed(keep)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// The version an import leaves a store's counter at: the snapshot's, unless the store already
/// handed out that version or a later one (it was emptied after later commits), whose versions
/// must never be handed out again. Then the counter stays, and while the change log is on it
/// moves one further: an import is not a commit and has no record, and the next commit's record
/// must not name the last one before the import as its predecessor (a replay of an older backup
/// across the import would pass the chain check without the imported data). It names a version
/// no record has instead, so the chain shows the import as a gap.
///
/// ```
/// use open_deno_kv_model::change_log::version_after_import;
/// assert_eq!(version_after_import(7, 3, false), 7); // a new store takes the snapshot's
/// assert_eq!(version_after_import(7, 9, false), 9); // never backwards
/// assert_eq!(version_after_import(7, 9, true), 10); // and a gap in the log's chain
/// assert_eq!(version_after_import(9, 9, true), 10);
/// ```
pub fn version_after_import(snapshot: u64, current: u64, logging: bool) -> u64 {
    if snapshot > current {
        snapshot
    } else if logging {
        current.saturating_add(1)
    } else {
        current
    }
}

/// Counts logged commits and says when to prune ([`PRUNE_EVERY`]). A writer keeps one.
#[derive(Debug, Default)]
pub struct PruneSchedule {
    since: u32,
}

impl PruneSchedule {
    /// Counts `commits` logged commits; `true` when a pruning is due (the count then restarts).
    pub fn logged(&mut self, commits: usize) -> bool {
        let commits = u32::try_from(commits).unwrap_or(u32::MAX);
        self.since = self.since.saturating_add(commits);
        if self.since >= PRUNE_EVERY {
            self.since = 0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;

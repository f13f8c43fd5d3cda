//! One atomic write inside the writer's group transaction, isolated from the others by an
//! overlay.
//!
//! The writer runs a whole group of commands in one redb [`redb::WriteTransaction`]. redb's
//! savepoints do not fit per-command isolation (an ephemeral savepoint can only be taken before
//! any table of the transaction is opened, and restoring one rolls back the whole transaction to
//! that point), so each atomic write runs in two phases instead:
//!
//! 1. **Stage.** open-deno-kv-model's [`stage_atomic_write`] runs the write path over an overlay: reads see
//!    the overlay first, then the group's transaction (so earlier writes of the group are
//!    visible); puts, deletes and enqueues only go into the overlay. A failed check or a refused
//!    mutation returns here with nothing to apply: the transaction was never touched, so the
//!    other writes of the group are unaffected.
//! 2. **Apply.** A committed overlay is copied into the tables (entries, the expiry index, the
//!    ready queue). Only redb itself can fail here (I/O, a full disk); such a failure leaves the
//!    transaction half-written, so it is reported as [`Fatal`] and the writer abandons the whole
//!    group.
//!
//! Expired entries are swept through the expiry index ([`Tables::sweep_expired`]) as part of
//! group transactions, so the sweep never needs a transaction of its own while writes flow.
//!
//! While the change log is on ([`Tables::logging`]), the apply phase also stores the commit's
//! record (see [`crate::change_log`]): the staged effects themselves, moved into the record once
//! they are applied, so a logged commit costs one encoding and one insert, and an unlogged one
//! nothing.

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::ChangeRecord;
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    CommitResult, Effects, KeyRange, KvError, StoredEntry, ValidatedWrite, Versionstamp,
    stage_atomic_write,
};
use redb::{ReadableTable, Table};

use crate::codec::{self, EntryRecord, TIME_LEN};
use crate::error::storage;
use crate::schema::{
    CHANGE_LOG, ENTRIES, EXPIRY, META, META_LAST_VERSION, QUEUE_READY, QUEUE_RUNNING,
};

/// A failure after the group's transaction was modified: the whole group must be abandoned.
#[derive(Debug, Clone)]
pub(crate) struct Fatal(pub(crate) KvError);

/// The result of one command of a group: the outer error abandons the group, the inner one is
/// this command's own answer.
pub(crate) type Step<T> = Result<Result<T, KvError>, Fatal>;

/// Turns a redb error met while modifying the transaction into [`Fatal`].
pub(crate) fn fatal(err: impl Into<redb::Error>) -> Fatal {
    Fatal(storage(err))
}

type BytesTable<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// The tables of one group transaction, opened on first use (a group that only writes entries
/// never opens the queue tables).
pub(crate) struct Tables<'t> {
    txn: &'t redb::WriteTransaction,
    entries: Option<BytesTable<'t>>,
    expiry: Option<Table<'t, &'static [u8], ()>>,
    ready: Option<BytesTable<'t>>,
    running: Option<BytesTable<'t>>,
    change_log: Option<BytesTable<'t>>,
    /// Whether every commit made through these tables stores its change record (the log is
    /// on). Set by the writer from its cached setting.
    pub(crate) logging: bool,
    /// How many change records were stored (the writer's pruning schedule counts them).
    pub(crate) logged: usize,
    /// Whether anything was written (a group that wrote nothing is aborted, not committed).
    pub(crate) dirty: bool,
    /// The earliest expiry written by this group, to keep the writer's sweep hint.
    pub(crate) earliest_new_expiry: Option<DateTime<Utc>>,
}

impl<'t> Tables<'t> {
    pub(crate) fn new(txn: &'t redb::WriteTransaction) -> Self {
        Tables {
            txn,
            entries: None,
            expiry: None,
            ready: None,
            running: None,
            change_log: None,
            logging: false,
            logged: 0,
            dirty: false,
            earliest_new_expiry: None,
        }
    }

    pub(crate) fn entries(&mut self) -> Result<&mut BytesTable<'t>, redb::Error> {
        let table = match self.entries.take() {
            Some(table) => table,
            None => self.txn.open_table(ENTRIES)?,
        };
        Ok(self.entries.insert(table))
    }

    pub(crate) fn expiry(&mut self) -> Result<&mut Table<'t, &'static [u8], ()>, redb::Error> {
        let table = match self.expiry.take() {
            Some(table) => table,
            None => self.txn.open_table(EXPIRY)?,
        };
        Ok(self.expiry.insert(table))
    }

    pub(crate) fn ready(&mut self) -> Result<&mut BytesTable<'t>, redb::Error> {
        let table = match self.ready.take() {
            Some(table) => table,
            None => self.txn.open_table(QUEUE_READY)?,
        };
        Ok(self.ready.insert(table))
    }

    pub(crate) fn running(&mut self) -> Result<&mut BytesTable<'t>, redb::Error> {
        let table = match self.running.take() {
            Some(table) => table,
            None => self.txn.open_table(QUEUE_RUNNING)?,
        };
        Ok(self.running.insert(table))
    }

    pub(crate) fn change_log(&mut self) -> Result<&mut BytesTable<'t>, redb::Error> {
        let table = match self.change_log.take() {
            Some(table) => table,
            None => self.txn.open_table(CHANGE_LOG)?,
        };
        Ok(self.change_log.insert(table))
    }

    /// The metadata table, opened for one use (drop it before the next).
    pub(crate) fn meta(&self) -> Result<Table<'t, &'static str, u64>, redb::Error> {
        Ok(self.txn.open_table(META)?)
    }

    /// Deletes the change log's table with every record (the log is switched off).
    pub(crate) fn drop_change_log(&mut self) -> Result<(), Fatal> {
        // redb refuses to delete a table this transaction holds open.
        self.change_log = None;
        self.dirty = true;
        self.txn.delete_table(CHANGE_LOG).map_err(fatal)?;
        Ok(())
    }

    /// Stores the change record of a commit (see [`crate::change_log`]).
    fn log(&mut self, record: &ChangeRecord) -> Result<(), Fatal> {
        let bytes = record.encode();
        self.change_log()
            .map_err(fatal)?
            .insert(record.versionstamp.as_bytes().as_slice(), bytes.as_slice())
            .map_err(fatal)?;
        self.logged += 1;
        Ok(())
    }

    /// Records the version ceiling: no versionstamp handed out is above it (see
    /// the `group` module).
    pub(crate) fn set_version_ceiling(&mut self, version: u64) -> Result<(), Fatal> {
        let mut meta = self.txn.open_table(META).map_err(fatal)?;
        meta.insert(META_LAST_VERSION, version).map_err(fatal)?;
        self.dirty = true;
        Ok(())
    }

    /// The stored entry at `key`, expired or not.
    fn get_entry(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        let table = self.entries().map_err(storage)?;
        match table.get(key).map_err(storage)? {
            Some(guard) => EntryRecord::decode(guard.value())?.to_stored().map(Some),
            None => Ok(None),
        }
    }

    /// Stores (`Some`) or deletes (`None`) the entry at `key`, keeping the expiry index in step.
    pub(crate) fn store_entry(
        &mut self,
        key: &[u8],
        entry: Option<&StoredEntry>,
    ) -> Result<(), Fatal> {
        self.dirty = true;
        let new_expiry = entry.and_then(|e| e.expires_at);
        let table = self.entries().map_err(fatal)?;
        let old = match entry {
            Some(entry) => table.insert(key, codec::encode_entry(entry).as_slice()),
            None => table.remove(key),
        }
        .map_err(fatal)?;
        // An old record that does not decode leaves at worst a stale index row, which the sweep
        // recognises (it re-reads the entry before deleting it).
        let old_expiry = old.and_then(|guard| {
            EntryRecord::decode(guard.value())
                .ok()
                .and_then(|r| r.expires_at)
        });
        if old_expiry == new_expiry {
            return Ok(());
        }
        let index = self.expiry().map_err(fatal)?;
        if let Some(at) = old_expiry {
            index
                .remove(codec::expiry_key(at, key).as_slice())
                .map_err(fatal)?;
        }
        if let Some(at) = new_expiry {
            index
                .insert(codec::expiry_key(at, key).as_slice(), ())
                .map_err(fatal)?;
            if self.earliest_new_expiry.is_none_or(|e| at < e) {
                self.earliest_new_expiry = Some(at);
            }
        }
        Ok(())
    }

    /// Deletes every entry in `range` with one range drain of the entries table (redb's
    /// `retain_in`), then the expiry index rows of the drained entries that had an expiry.
    fn delete_range(&mut self, range: &KeyRange) -> Result<(), Fatal> {
        if range.is_empty() {
            return Ok(());
        }
        self.dirty = true;
        let mut indexed = Vec::new();
        self.entries()
            .map_err(fatal)?
            .retain_in::<&[u8], _>(
                range.start.as_slice()..range.end.as_slice(),
                |key, record| {
                    // A record that does not decode leaves at worst a stale index row, which the
                    // sweep recognises.
                    if let Some(at) = EntryRecord::decode(record).ok().and_then(|r| r.expires_at) {
                        indexed.push(codec::expiry_key(at, key));
                    }
                    false
                },
            )
            .map_err(fatal)?;
        let index = self.expiry().map_err(fatal)?;
        for row in indexed {
            index.remove(row.as_slice()).map_err(fatal)?;
        }
        Ok(())
    }

    /// Puts a message in the ready queue.
    pub(crate) fn insert_ready(&mut self, message: &QueuedMessage) -> Result<(), Fatal> {
        self.dirty = true;
        let key = codec::ready_key(message.ready_at, message.id);
        let body = codec::encode_message_body(message);
        self.ready()
            .map_err(fatal)?
            .insert(key.as_slice(), body.as_slice())
            .map_err(fatal)?;
        Ok(())
    }

    /// Deletes up to `budget` entries expired at `now`, walking the expiry index in time order.
    /// Returns the earliest expiry left in the index (the writer's hint for the next sweep).
    pub(crate) fn sweep_expired(
        &mut self,
        now: DateTime<Utc>,
        budget: usize,
    ) -> Result<Option<DateTime<Utc>>, Fatal> {
        let due: Vec<Vec<u8>> = {
            let index = self.expiry().map_err(fatal)?;
            let mut due = Vec::new();
            for row in index.iter().map_err(fatal)? {
                let (key, ()) = row
                    .map(|(k, v)| (k.value().to_vec(), v.value()))
                    .map_err(fatal)?;
                // A row that does not decode cannot be due; it is removed with the others below.
                let at = codec::decode_time(&key).ok();
                if at.is_some_and(|at| at > now) || due.len() >= budget {
                    break;
                }
                due.push(key);
            }
            due
        };
        for index_key in &due {
            self.dirty = true;
            self.expiry()
                .map_err(fatal)?
                .remove(index_key.as_slice())
                .map_err(fatal)?;
            let Some(key) = index_key.get(TIME_LEN..) else {
                continue;
            };
            let indexed_at = codec::decode_time(index_key).ok();
            // Delete only if the entry still carries this expiry (the index row may be stale).
            let expired = {
                let table = self.entries().map_err(fatal)?;
                let current = table.get(key).map_err(fatal)?;
                current.is_some_and(|guard| {
                    EntryRecord::decode(guard.value())
                        .is_ok_and(|r| r.expires_at.is_some() && r.expires_at == indexed_at)
                })
            };
            if expired {
                self.entries().map_err(fatal)?.remove(key).map_err(fatal)?;
            }
        }
        let index = self.expiry().map_err(fatal)?;
        let first = index.first().map_err(fatal)?;
        Ok(first.and_then(|(key, _)| codec::decode_time(key.value()).ok()))
    }
}

/// Runs one validated atomic write against the group transaction as of `now`.
///
/// The write gets version `last_version + 1`; `last_version` moves only if the write commits
/// (a failed check or a refused mutation hands out nothing, so versionstamps stay in commit
/// order with no reuse). While the log is on, a committed write also stores its record, whose
/// `previous` is `last_version` before the write: the version an export reports between commits
/// (see [`crate::backup`]), and within a group the group's previous write.
pub(crate) fn commit_write(
    tables: &mut Tables<'_>,
    write: &ValidatedWrite,
    now: DateTime<Utc>,
    last_version: &mut u64,
    effects: &mut Effects,
) -> Step<Option<CommitResult>> {
    let Some(version) = last_version.checked_add(1) else {
        return Ok(Err(KvError::internal(
            "the versionstamp counter is exhausted",
        )));
    };
    let versionstamp = Versionstamp::from_version(version, 0);
    let staged = match stage_atomic_write(|key| tables.get_entry(key), write, versionstamp, now) {
        Ok(Some(staged)) => staged,
        Ok(None) => return Ok(Ok(None)),
        Err(err) => return Ok(Err(err)),
    };
    for range in &staged.deleted_ranges {
        tables.delete_range(range)?;
    }
    for (key, entry) in &staged.writes {
        tables.store_entry(key, entry.as_ref())?;
    }
    for message in &staged.enqueued {
        tables.insert_ready(message)?;
    }
    // Even a write with no mutations takes a versionstamp and counts as a commit.
    tables.dirty = true;
    effects.changed.merge(staged.changed());
    effects.queue |= !staged.enqueued.is_empty();
    if tables.logging {
        tables.log(&ChangeRecord {
            versionstamp,
            previous: Versionstamp::from_version(*last_version, 0),
            at: now,
            changes: staged,
        })?;
    }
    *last_version = version;
    Ok(Ok(Some(CommitResult { versionstamp })))
}

//! The change log in a redb file (see [`open_deno_kv_engine_kit::change_log`]): where it is kept, how
//! the writer switches it, logs and prunes it, and how handles read it.
//!
//! **Layout.**
//!
//! | where | key | value |
//! |---|---|---|
//! | table `deno_kv.change_log` | the commit's versionstamp, 10 bytes (byte order is commit order) | [`ChangeRecord::encode`] (layout in open-deno-kv-model's `change_log/codec.rs`) |
//! | `deno_kv.meta` row `change_log_retention_ms` | | the retention, in milliseconds (at least 1000) |
//! | `deno_kv.meta` row `change_log_floor` | | the version an import left while the log was on |
//!
//! The retention row *is* the setting: present = on. The table and the floor row exist only while
//! it is on. Switching on creates the table (empty) beside the row, or only rewrites the row if
//! the log was on already (its records stay); switching off deletes the table, with every record,
//! and both rows, in one transaction. A file whose log is off is therefore what builds before the
//! change log wrote (see [`crate::schema`] for what those builds do with one whose log is on).
//!
//! **Writing.** The writer caches the setting ([`LogSetting`]); a switch runs as a command of the
//! writer ([`crate::group::Configure`]), so it takes effect between two commands: every commit
//! after it in commit order is logged. A logged commit stores its record in its own group's
//! transaction ([`crate::txn::commit_write`]): atomic writes and the dead-letter writes of a
//! message whose retries ran out alike, since both go through that function. Every
//! [`PRUNE_EVERY`](open_deno_kv_engine_kit::change_log::PRUNE_EVERY) logged commits the writer prunes
//! ([`prune`]) in the transaction of the group that crossed the count.
//!
//! **Numbering after a crash.** The writer records only a ceiling of the versions it handed out
//! (see the `group` module), and after a crash numbering would continue above it, so the first
//! record after the crash would not follow the last one before: the chain would break at every
//! crash. While the log is on its last record *is* the last commit in the file (a commit and its
//! record are stored together), so a writable open numbers on from it instead
//! ([`last_logged_version`]), or from the floor an import left if that is higher (an import is
//! not a commit and has no record). Only with [`crate::Durability::Immediate`], where every
//! acknowledged commit is synced before its answer, so no version above the last record was ever
//! seen by anyone. A [`crate::Durability::Deferred`] store may have acknowledged commits that the
//! crash lost; their versions must never be handed out again (a check naming one would match a
//! different write), so it numbers on above the ceiling, and its log has a gap at the crash: a
//! restore across it is refused, and a backup taken after it replays.
//!
//! **Reading** ([`status`], [`read`]) uses a read transaction of its own, on writable and
//! read-only handles alike: a file without the table reads as a log that is off (or empty).

use std::ops::Bound;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{
    ChangeLogStatus, ChangeRecord, LogMark, PRUNE_BATCH, PruneSchedule, prune_before, retention_ms,
};
use open_deno_kv_engine_kit::{KvError, Versionstamp};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableError};

use crate::error::storage;
use crate::schema::{CHANGE_LOG, META, META_CHANGE_LOG_FLOOR, META_CHANGE_LOG_RETENTION_MS};
use crate::txn::{Fatal, Tables, fatal};

/// The writer's cached setting: on with its retention and pruning schedule, or off.
#[derive(Debug, Default)]
pub(crate) struct LogSetting {
    on: Option<(Duration, PruneSchedule)>,
}

impl LogSetting {
    /// The setting `meta` holds.
    pub(crate) fn read(meta: &impl ReadableTable<&'static str, u64>) -> Result<Self, redb::Error> {
        Ok(LogSetting {
            on: stored_retention(meta)?.map(|retention| (retention, PruneSchedule::default())),
        })
    }

    /// Whether commits are logged.
    pub(crate) fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// The retention, if the log is on.
    pub(crate) fn retention(&self) -> Option<Duration> {
        self.on.as_ref().map(|(retention, _)| *retention)
    }

    /// The setting after a group that failed to commit: `retention` as it was before the group
    /// (a switch in it did not happen), with a fresh schedule.
    pub(crate) fn restored(retention: Option<Duration>) -> Self {
        LogSetting {
            on: retention.map(|retention| (retention, PruneSchedule::default())),
        }
    }

    /// Counts `logged` commits; `true` when a pruning is due.
    pub(crate) fn prune_due(&mut self, logged: usize) -> bool {
        match &mut self.on {
            Some((_, schedule)) if logged > 0 => schedule.logged(logged),
            _ => false,
        }
    }

    /// Switches the log in `tables`'s transaction (see the module documentation) and in this
    /// cache, from the next commit on.
    pub(crate) fn switch(
        &mut self,
        tables: &mut Tables<'_>,
        retention: Option<Duration>,
    ) -> Result<Result<(), KvError>, Fatal> {
        let ms = match retention.map(retention_ms).transpose() {
            Ok(ms) => ms,
            Err(err) => return Ok(Err(err)),
        };
        let mut meta = tables.meta().map_err(fatal)?;
        tables.dirty = true;
        match (ms, retention) {
            (Some(ms), Some(retention)) => {
                // Stored as u64: `retention_ms` is at least 1000 for a checked retention, and
                // never negative.
                let ms = u64::try_from(ms).unwrap_or(0);
                meta.insert(META_CHANGE_LOG_RETENTION_MS, ms)
                    .map_err(fatal)?;
                drop(meta);
                // Creates the table if the log was off; keeps its records if it was on.
                tables.change_log().map_err(fatal)?;
                let schedule = self.on.take().map(|(_, s)| s).unwrap_or_default();
                self.on = Some((retention, schedule));
                tables.logging = true;
            }
            _ => {
                meta.remove(META_CHANGE_LOG_RETENTION_MS).map_err(fatal)?;
                meta.remove(META_CHANGE_LOG_FLOOR).map_err(fatal)?;
                drop(meta);
                tables.drop_change_log()?;
                self.on = None;
                tables.logging = false;
            }
        }
        Ok(Ok(()))
    }

    /// Deletes, in `tables`'s transaction, the oldest records older than the retention at `now`
    /// (at most [`PRUNE_BATCH`], oldest first, stopping at the first newer one).
    pub(crate) fn prune(&self, tables: &mut Tables<'_>, now: DateTime<Utc>) -> Result<(), Fatal> {
        let Some((retention, _)) = &self.on else {
            return Ok(());
        };
        prune(tables, prune_before(now, *retention))
    }
}

/// The retention `meta` records, if the log is on.
fn stored_retention(
    meta: &impl ReadableTable<&'static str, u64>,
) -> Result<Option<Duration>, redb::Error> {
    Ok(meta
        .get(META_CHANGE_LOG_RETENTION_MS)?
        .map(|ms| Duration::from_millis(ms.value())))
}

/// Deletes the oldest records whose time is before `before`, at most [`PRUNE_BATCH`]. A record
/// that does not decode stops the pruning there (it is left for a read to report as corrupt).
pub(crate) fn prune(tables: &mut Tables<'_>, before: DateTime<Utc>) -> Result<(), Fatal> {
    let old: Vec<Vec<u8>> = {
        let table = tables.change_log().map_err(fatal)?;
        let mut old = Vec::new();
        for row in table.iter().map_err(fatal)? {
            let (key, value) = row.map_err(fatal)?;
            let Ok(record) = ChangeRecord::decode(value.value()) else {
                break;
            };
            if record.at >= before || old.len() >= PRUNE_BATCH {
                break;
            }
            old.push(key.value().to_vec());
        }
        old
    };
    if old.is_empty() {
        return Ok(());
    }
    tables.dirty = true;
    let table = tables.change_log().map_err(fatal)?;
    for key in old {
        table.remove(key.as_slice()).map_err(fatal)?;
    }
    Ok(())
}

/// The version a writable open numbers on from, when the log is on and holds records: the last
/// record's, or the floor an import left if higher (see the module documentation). `None` when
/// the log is off or empty (numbering then continues above the ceiling).
pub(crate) fn last_logged_version(tables: &mut Tables<'_>) -> Result<Option<u64>, KvError> {
    let (on, floor) = {
        let meta = tables.meta().map_err(storage)?;
        let on = stored_retention(&meta).map_err(storage)?.is_some();
        let floor = meta
            .get(META_CHANGE_LOG_FLOOR)
            .map_err(storage)?
            .map(|guard| guard.value());
        (on, floor)
    };
    if !on {
        return Ok(None);
    }
    let table = tables.change_log().map_err(storage)?;
    let last = table.last().map_err(storage)?;
    let Some((key, _)) = last else {
        return Ok(None);
    };
    let version = record_key(key.value())?.version();
    Ok(Some(version.max(floor.unwrap_or(0))))
}

/// Whether the log is on, as the file says (inside a write transaction of its own).
pub(crate) fn is_on(tables: &mut Tables<'_>) -> Result<bool, Fatal> {
    let meta = tables.meta().map_err(fatal)?;
    Ok(stored_retention(&meta).map_err(fatal)?.is_some())
}

/// Records the version an import leaves, if the log is on (see the module documentation).
pub(crate) fn note_import(tables: &mut Tables<'_>, version: u64) -> Result<(), Fatal> {
    let mut meta = tables.meta().map_err(fatal)?;
    if stored_retention(&meta).map_err(fatal)?.is_some() {
        meta.insert(META_CHANGE_LOG_FLOOR, version).map_err(fatal)?;
    }
    Ok(())
}

/// A record's key as a versionstamp.
fn record_key(key: &[u8]) -> Result<Versionstamp, KvError> {
    let bytes: [u8; 10] = key.try_into().map_err(|_| {
        crate::error::corrupt(format!(
            "a change log key of {} bytes (a versionstamp has 10)",
            key.len()
        ))
    })?;
    Ok(Versionstamp::from(bytes))
}

/// The change log's table as a read transaction sees it.
type LogSnapshot = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// The change log's table in a read transaction; `None` if the file has none (the log is off).
fn open_log(txn: &ReadTransaction) -> Result<Option<LogSnapshot>, KvError> {
    match txn.open_table(CHANGE_LOG) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(err) => Err(storage(err)),
    }
}

/// The log's setting and extent, from one read transaction.
pub(crate) fn status(db: &dyn ReadableDatabase) -> Result<ChangeLogStatus, KvError> {
    let txn = db.begin_read().map_err(storage)?;
    let meta = txn.open_table(META).map_err(storage)?;
    let Some(retention) = stored_retention(&meta).map_err(storage)? else {
        return Ok(ChangeLogStatus::default());
    };
    let mut status = ChangeLogStatus {
        retention: Some(retention),
        ..Default::default()
    };
    let Some(table) = open_log(&txn)? else {
        return Ok(status);
    };
    status.records = table.len().map_err(storage)?;
    let mark = |record: Option<redb::AccessGuard<'_, &[u8]>>| {
        record
            .map(|value| {
                let record = ChangeRecord::decode(value.value())?;
                Ok::<_, KvError>(LogMark {
                    versionstamp: record.versionstamp,
                    at: record.at,
                })
            })
            .transpose()
    };
    status.first = mark(table.first().map_err(storage)?.map(|(_, value)| value))?;
    status.last = mark(table.last().map_err(storage)?.map(|(_, value)| value))?;
    Ok(status)
}

/// Up to `limit` records after `after`, in commit order, from one read transaction. A record
/// that does not decode fails the read ([`KvError::Corrupt`]); none is skipped.
pub(crate) fn read(
    db: &dyn ReadableDatabase,
    after: Versionstamp,
    limit: usize,
) -> Result<Vec<ChangeRecord>, KvError> {
    let txn = db.begin_read().map_err(storage)?;
    let Some(table) = open_log(&txn)? else {
        return Ok(Vec::new());
    };
    let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (
        Bound::Excluded(after.as_bytes().as_slice()),
        Bound::Unbounded,
    );
    let mut records = Vec::new();
    for row in table.range::<&[u8]>(bounds).map_err(storage)? {
        if records.len() >= limit {
            break;
        }
        let (key, value) = row.map_err(storage)?;
        let record = ChangeRecord::decode(value.value())?;
        if record.versionstamp != record_key(key.value())? {
            return Err(crate::error::corrupt(format!(
                "the change log record at {} holds commit {}",
                record_key(key.value())?,
                record.versionstamp
            )));
        }
        records.push(record);
    }
    Ok(records)
}

//! The change log in the file (see `open_deno_kv_engine_kit::change_log`): two tables of this crate's
//! own beside Deno's, created only when the log is first switched on.
//!
//! | table | columns |
//! |---|---|
//! | `odkv_change_log_setting` | `k` (0), `retention_ms`: the log is on while the row exists |
//! | `odkv_change_log` (without rowid) | `versionstamp` (10 bytes, the key: commit order), `at_ms` (commit time, for pruning), `record` ([`ChangeRecord::encode`]) |
//!
//! Deno opens a file holding them as any other (it looks only at its own tables), and so does
//! this crate's schema inspection; a version of this crate from before the log ignores them and
//! does not log (a replay then finds the gap: [`open_deno_kv_engine_kit::change_log::Replay::apply`]).
//!
//! **Who logs.** The writer logs every commit made through `store::commit_write` (atomic
//! writes and dead letters), which stores the record in the commit's savepoint: a write that
//! fails its check or is rolled back leaves no record. The writer learns the setting from the
//! file, in the group's own transaction: each group runs `PRAGMA data_version` (one prepared
//! statement), and the setting is read again only when it moved, that is when another connection
//! committed. The switch itself commits on a connection of its own, so every group that starts
//! after it sees it.
//!
//! **Pruning** deletes, every [`PRUNE_EVERY`] logged commits, at most [`PRUNE_BATCH`] of the
//! oldest records whose time is before the retention, walking `versionstamp` from the front.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{
    ChangeLogStatus, ChangeRecord, LogMark, PRUNE_BATCH, PruneSchedule, prune_before, retention_ms,
};
use open_deno_kv_engine_kit::{KvError, Versionstamp};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::store::{execute, open_connection, pragma_data_version, storage};

const CREATE: &str = "create table if not exists odkv_change_log_setting (
  k integer not null primary key check (k = 0),
  retention_ms integer not null
);
create table if not exists odkv_change_log (
  versionstamp blob not null primary key,
  at_ms integer not null,
  record blob not null
) without rowid;";
const TABLE_EXISTS: &str = "select exists(select 1 from sqlite_master where type = 'table' and name = 'odkv_change_log_setting')";
const SETTING: &str = "select retention_ms from odkv_change_log_setting where k = 0";
const SET: &str = "insert into odkv_change_log_setting (k, retention_ms) values (0, ?1)
    on conflict(k) do update set retention_ms = excluded.retention_ms";
const OLDEST: &str =
    "select versionstamp, at_ms from odkv_change_log order by versionstamp limit ?1";
const PRUNE: &str = "delete from odkv_change_log where versionstamp <= ?1";
const READ: &str =
    "select record from odkv_change_log where versionstamp > ?1 order by versionstamp limit ?2";
const COUNT: &str = "select count(*) from odkv_change_log";
const FIRST: &str = "select record from odkv_change_log order by versionstamp limit 1";
const LAST: &str = "select record from odkv_change_log order by versionstamp desc limit 1";

/// Whether the file holds the log's tables (the log was switched on and not off since).
pub(crate) fn tables_exist(conn: &Connection) -> Result<bool, KvError> {
    conn.prepare_cached(TABLE_EXISTS)
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(storage)
}

/// The log's setting in the file: the retention, `None` when off (or never switched on).
fn setting(conn: &Connection) -> Result<Option<Duration>, KvError> {
    if !tables_exist(conn)? {
        return Ok(None);
    }
    let ms: Option<i64> = conn
        .prepare_cached(SETTING)
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)).optional())
        .map_err(storage)?;
    ms.map(|ms| {
        u64::try_from(ms)
            .map(Duration::from_millis)
            .map_err(|_| KvError::Corrupt {
                message: format!("the change log's retention is {ms} ms"),
            })
    })
    .transpose()
}

/// The writer's view of the log: the setting as last read, and its pruning schedule.
#[derive(Debug, Default)]
pub(crate) struct WriterLog {
    /// `PRAGMA data_version` when the setting was read; `None` before the first read.
    read_at: Option<i64>,
    retention: Option<Duration>,
    schedule: PruneSchedule,
}

impl WriterLog {
    /// Brings the setting up to date inside the group's transaction, if another connection
    /// committed since it was read. Whether commits are logged.
    pub(crate) fn refresh(&mut self, conn: &Connection) -> Result<bool, KvError> {
        let version = pragma_data_version(conn)?;
        if self.read_at != Some(version) {
            self.retention = setting(conn)?;
            self.read_at = Some(version);
        }
        Ok(self.retention.is_some())
    }

    /// After a group logged `commits` commits: prunes, in its transaction, when due.
    pub(crate) fn logged(
        &mut self,
        conn: &Connection,
        commits: usize,
        now: DateTime<Utc>,
    ) -> Result<(), KvError> {
        match self.retention {
            Some(retention) if commits > 0 && self.schedule.logged(commits) => {
                prune(conn, prune_before(now, retention))
            }
            _ => Ok(()),
        }
    }
}

/// Deletes the oldest records (at most [`PRUNE_BATCH`]) whose time is before `before`.
fn prune(conn: &Connection, before: DateTime<Utc>) -> Result<(), KvError> {
    let before_ms = before.timestamp_millis();
    let mut stmt = conn.prepare_cached(OLDEST).map_err(storage)?;
    let mut rows = stmt
        .query([i64::try_from(PRUNE_BATCH).unwrap_or(i64::MAX)])
        .map_err(storage)?;
    let mut last_old: Option<Vec<u8>> = None;
    while let Some(row) = rows.next().map_err(storage)? {
        let at_ms: i64 = row.get(1).map_err(storage)?;
        if at_ms >= before_ms {
            break;
        }
        last_old = Some(row.get(0).map_err(storage)?);
    }
    drop(rows);
    match last_old {
        Some(versionstamp) => execute(conn, PRUNE, [versionstamp]),
        None => Ok(()),
    }
}

/// Switches the log of the file at `path` on (creating its tables) or off (dropping them), on
/// a connection of its own, in one `BEGIN IMMEDIATE` transaction.
pub(crate) fn configure(path: &Path, retention: Option<Duration>) -> Result<(), KvError> {
    let mut conn = open_connection(path, false)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(storage)?;
    match retention {
        Some(retention) => {
            tx.execute_batch(CREATE).map_err(storage)?;
            execute(&tx, SET, [retention_ms(retention)?])?;
        }
        None => tx
            .execute_batch(
                "drop table if exists odkv_change_log; drop table if exists odkv_change_log_setting;",
            )
            .map_err(storage)?,
    }
    tx.commit().map_err(storage)
}

/// Records after `after`, in commit order, from one read transaction.
pub(crate) fn read(
    path: &Path,
    read_only: bool,
    after: Versionstamp,
    limit: usize,
) -> Result<Vec<ChangeRecord>, KvError> {
    let mut conn = open_connection(path, read_only)?;
    let tx = conn.transaction().map_err(storage)?;
    if setting(&tx)?.is_none() {
        return Ok(Vec::new());
    }
    let mut stmt = tx.prepare(READ).map_err(storage)?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt
        .query_map(
            rusqlite::params![after.as_bytes().as_slice(), limit],
            |row| row.get::<_, Vec<u8>>(0),
        )
        .map_err(storage)?;
    rows.map(|bytes| ChangeRecord::decode(&bytes.map_err(storage)?))
        .collect()
}

/// The setting and the log's extent, from one read transaction.
pub(crate) fn status(path: &Path, read_only: bool) -> Result<ChangeLogStatus, KvError> {
    let mut conn = open_connection(path, read_only)?;
    let tx = conn.transaction().map_err(storage)?;
    let Some(retention) = setting(&tx)? else {
        return Ok(ChangeLogStatus::default());
    };
    let records: i64 = tx.query_row(COUNT, [], |row| row.get(0)).map_err(storage)?;
    let mark = |sql: &str| -> Result<Option<LogMark>, KvError> {
        let bytes: Option<Vec<u8>> = tx
            .query_row(sql, [], |row| row.get(0))
            .optional()
            .map_err(storage)?;
        bytes
            .map(|bytes| {
                let record = ChangeRecord::decode(&bytes)?;
                Ok(LogMark {
                    versionstamp: record.versionstamp,
                    at: record.at,
                })
            })
            .transpose()
    };
    Ok(ChangeLogStatus {
        retention: Some(retention),
        records: u64::try_from(records).unwrap_or(0),
        first: mark(FIRST)?,
        last: mark(LAST)?,
    })
}

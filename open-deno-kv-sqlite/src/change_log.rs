//! The change log in the file (see `open_deno_kv_engine_kit::change_log`): two tables of this crate's
//! own beside Deno's, created only when the log is first switched on.
//!
//! | table | columns |
//! |---|---|
//! | `odkv_change_log_setting` | `k` (0), `retention_ms`: the log is on while the row exists |
//! | `odkv_change_log` (without rowid) | `versionstamp` (10 bytes, the key: the last commit of the row), `at_ms` (the latest commit time in the row, for pruning), `record` (the row's records back to back, each after the first continued: [`ChangeRecord::encode_after_into`]), `records` (how many) |
//!
//! **A row per commit group.** The writer keeps the records of a group's commits in memory
//! ([`crate::pending_records::PendingRecords`]) and stores them as one row when the group's transaction commits: one
//! insert per group rather than one per commit, and none inside the commands' savepoints (each
//! page a savepoint changes is first copied to its sub-journal). A row is keyed by its last
//! commit, so the rows holding the records after a versionstamp are those keyed after it. A file
//! logged by a version of this crate from before groups holds one record per row and no
//! `records` column, which the writer adds (`alter table`, every old row counting 1) when it
//! next logs; readers count rows where the column is missing.
//!
//! Deno opens a file holding them as any other (it looks only at its own tables), and so does
//! this crate's schema inspection; a version of this crate from before the log ignores them and
//! does not log (a replay then finds the gap: [`open_deno_kv_engine_kit::change_log::Replay::apply`]).
//! A version from before groups reports a row of several records as corrupt, never reads part
//! of it.
//!
//! **Who logs.** The writer logs every commit made through `store::commit_write` (atomic
//! writes and dead letters): the record joins the group's pending records once the write
//! committed in its savepoint, and leaves them if the savepoint is rolled back, so a write that
//! fails its check or is rolled back leaves no record; a group that fails to store its row
//! commits nothing. The writer learns the setting from the
//! file, in the group's own transaction: each group runs `PRAGMA data_version` (one prepared
//! statement), and the setting is read again only when it moved, that is when another connection
//! committed. The switch itself commits on a connection of its own, so every group that starts
//! after it sees it.
//!
//! **Pruning** deletes, every [`PRUNE_EVERY`] logged commits, at most [`PRUNE_BATCH`] of the
//! oldest rows whose time is before the retention, walking `versionstamp` from the front: a row
//! goes when its latest commit is older than the retention.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{
    ChangeLogStatus, ChangeRecord, LogMark, PRUNE_BATCH, PruneSchedule, prune_before, retention_ms,
};
use open_deno_kv_engine_kit::{DatabaseId, KvError, Versionstamp};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::store::{execute, open_connection, pragma_data_version, storage};

const CREATE: &str = "create table if not exists odkv_change_log_setting (
  k integer not null primary key check (k = 0),
  retention_ms integer not null
);
create table if not exists odkv_change_log (
  versionstamp blob not null primary key,
  at_ms integer not null,
  record blob not null,
  records integer not null default 1
) without rowid;";
/// Gives a table made before rows held groups its `records` column: every old row holds one.
const ADD_RECORDS: &str =
    "alter table odkv_change_log add column records integer not null default 1";
const HAS_RECORDS: &str =
    "select exists(select 1 from pragma_table_info('odkv_change_log') where name = 'records')";

const TABLE_EXISTS: &str = "select exists(select 1 from sqlite_master where type = 'table' and name = 'odkv_change_log_setting')";
const SETTING: &str = "select retention_ms from odkv_change_log_setting where k = 0";
const SET: &str = "insert into odkv_change_log_setting (k, retention_ms) values (0, ?1)
    on conflict(k) do update set retention_ms = excluded.retention_ms";
const OLDEST: &str =
    "select versionstamp, at_ms from odkv_change_log order by versionstamp limit ?1";
const PRUNE: &str = "delete from odkv_change_log where versionstamp <= ?1";
const READ: &str = "select versionstamp, record from odkv_change_log where versionstamp > ?1
    order by versionstamp limit ?2";
const COUNT: &str = "select coalesce(sum(records), 0) from odkv_change_log";
const COUNT_ROWS: &str = "select count(*) from odkv_change_log";
const FIRST: &str =
    "select versionstamp, record from odkv_change_log order by versionstamp limit 1";
const LAST: &str =
    "select versionstamp, record from odkv_change_log order by versionstamp desc limit 1";

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
    /// The database's identity, read with the setting while the log is on.
    identity: Option<DatabaseId>,
    schedule: PruneSchedule,
}

impl WriterLog {
    /// Brings the setting up to date inside the group's transaction, if another connection
    /// committed since it was read. While commits are logged, the database's identity, which
    /// their records name (made by the writable open, so always there).
    pub(crate) fn refresh(&mut self, conn: &Connection) -> Result<Option<DatabaseId>, KvError> {
        let version = pragma_data_version(conn)?;
        if self.read_at != Some(version) {
            self.retention = setting(conn)?;
            self.identity = match self.retention {
                Some(_) => {
                    add_records_column(conn)?;
                    Some(crate::identity::of_writable(conn)?)
                }
                None => None,
            };
            // The `alter table` above is this connection's own: it does not move `data_version`.
            self.read_at = Some(version);
        }
        Ok(self.identity)
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

/// Whether the log's table has its `records` column (a table made before rows held groups has
/// not, until a writer logs).
pub(crate) fn has_records_column(conn: &Connection) -> Result<bool, KvError> {
    conn.prepare_cached(HAS_RECORDS)
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(storage)
}

/// Adds the `records` column to a table made before rows held groups, if it lacks it.
fn add_records_column(conn: &Connection) -> Result<(), KvError> {
    if has_records_column(conn)? {
        return Ok(());
    }
    execute(conn, ADD_RECORDS, [])
}

/// A row's records, checked: at least one, in commit order, the last under the row's key. `key`
/// is the row's `versionstamp`, `count` its `records` (when the column exists).
pub(crate) fn row_records(
    key: &[u8],
    bytes: &[u8],
    count: Option<i64>,
) -> Result<Vec<ChangeRecord>, KvError> {
    let records = ChangeRecord::decode_all(bytes)?;
    let stamps = || records.iter().map(|record| record.versionstamp);
    let ordered = stamps().zip(stamps().skip(1)).all(|(a, b)| a < b);
    let last = records.last().map(|record| record.versionstamp);
    let hex = || key.iter().map(|b| format!("{b:02x}")).collect::<String>();
    if !ordered {
        return Err(KvError::Corrupt {
            message: format!("the change log's row {} holds records out of order", hex()),
        });
    }
    if last.is_none_or(|last| last.as_bytes().as_slice() != key) {
        return Err(KvError::Corrupt {
            message: format!(
                "the change log's row {} ends with the record of commit {}",
                hex(),
                last.map_or_else(|| "none".to_owned(), |last| last.to_string())
            ),
        });
    }
    if let Some(count) = count
        && usize::try_from(count).ok() != Some(records.len())
    {
        return Err(KvError::Corrupt {
            message: format!(
                "the change log's row {} counts {count} records and holds {}",
                hex(),
                records.len()
            ),
        });
    }
    Ok(records)
}

/// Deletes the oldest rows (at most [`PRUNE_BATCH`]) whose time is before `before`.
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
            add_records_column(&tx)?;
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

/// Records after `after`, in commit order (at most `limit`), from one read transaction.
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
    // Every row keyed after `after` holds at least one record after it: `limit` rows hold
    // enough. The first may also hold records up to `after`, which are skipped.
    let mut stmt = tx.prepare(READ).map_err(storage)?;
    let rows = stmt
        .query_map(
            rusqlite::params![
                after.as_bytes().as_slice(),
                i64::try_from(limit).unwrap_or(i64::MAX)
            ],
            |row| Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, Vec<u8>>(1)?)),
        )
        .map_err(storage)?;
    let mut records = Vec::new();
    for row in rows {
        let (key, bytes) = row.map_err(storage)?;
        let row = row_records(&key, &bytes, None)?;
        records.extend(row.into_iter().filter(|record| record.versionstamp > after));
        if records.len() >= limit {
            break;
        }
    }
    records.truncate(limit);
    Ok(records)
}

/// The setting and the log's extent, from one read transaction.
pub(crate) fn status(path: &Path, read_only: bool) -> Result<ChangeLogStatus, KvError> {
    let mut conn = open_connection(path, read_only)?;
    let tx = conn.transaction().map_err(storage)?;
    let database = crate::identity::read(&tx)?;
    let Some(retention) = setting(&tx)? else {
        return Ok(ChangeLogStatus {
            database,
            ..ChangeLogStatus::default()
        });
    };
    // A table from before rows held groups (not yet logged to since) holds a record per row.
    let count = if has_records_column(&tx)? {
        COUNT
    } else {
        COUNT_ROWS
    };
    let records: i64 = tx.query_row(count, [], |row| row.get(0)).map_err(storage)?;
    let row = |sql: &str| -> Result<Option<Vec<ChangeRecord>>, KvError> {
        let row: Option<(Vec<u8>, Vec<u8>)> = tx
            .query_row(sql, [], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .map_err(storage)?;
        row.map(|(key, bytes)| row_records(&key, &bytes, None))
            .transpose()
    };
    let mark = |record: Option<&ChangeRecord>| {
        record.map(|record| LogMark {
            versionstamp: record.versionstamp,
            at: record.at,
        })
    };
    Ok(ChangeLogStatus {
        database,
        retention: Some(retention),
        records: u64::try_from(records).unwrap_or(0),
        first: mark(row(FIRST)?.as_ref().and_then(|records| records.first())),
        last: mark(row(LAST)?.as_ref().and_then(|records| records.last())),
    })
}

//! The change log (see `open_deno_kv_engine_kit::change_log`): its setting, its reading.
//!
//! **Where it lives.** The retention is `kv_meta.change_log_ms` (milliseconds; NULL when the log
//! is off), in the row every writer locks first: [`configure`] updates that row, so it waits for
//! the group holding the lock and every group that locks the row after it returns reads the new
//! value, in every process (the group reads it in the statement that takes the lock, see
//! `group.rs`). Records are rows of `kv_change_log`: `vs` (the commit's 10-byte versionstamp, primary
//! key, byte order = commit order), `at` (the commit's time in ms, rounded down, for pruning
//! without decoding) and `record` (the bytes of [`ChangeRecord::encode`], open-deno-kv-model's
//! one layout for every engine). The group commit writes them (`group.rs`); this module reads
//! them.
//!
//! **Reading.** [`read`] and [`status`] are one statement each, so each answers from one snapshot;
//! both use the primary (replicas are for entries). A record whose bytes do not decode, or whose
//! versionstamp is not the one of its row, is [`KvError::Corrupt`], never skipped.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord, LogMark, retention_ms};
use open_deno_kv_engine_kit::{KvError, Versionstamp};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::pg;
use crate::reader;
use crate::sql::Sql;

/// Switches the log on with `retention`, or off (`None`, deleting every record), in one
/// transaction that takes the `kv_meta` row lock as writers do. Dropping the future before it
/// ends rolls it back.
pub(crate) async fn configure(
    pool: &Pool,
    sql: &Sql,
    retention: Option<Duration>,
) -> Result<(), KvError> {
    let retention = retention.map(retention_ms).transpose()?;
    let mut client = reader::pooled(pool).await?;
    let tx = client.transaction().await.map_err(pg)?;
    tx.execute(&sql.log_configure, &[&retention])
        .await
        .map_err(pg)?;
    if retention.is_none() {
        tx.execute(&sql.log_clear, &[]).await.map_err(pg)?;
    }
    tx.commit().await.map_err(pg)
}

/// The setting and extent of the log, from one snapshot.
pub(crate) async fn status(pool: &Pool, sql: &Sql) -> Result<ChangeLogStatus, KvError> {
    reader::with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.log_status).await.map_err(pg)?;
        let row = client.query_one(&statement, &[]).await.map_err(pg)?;
        let retention: Option<i64> = row.try_get(0).map_err(pg)?;
        let records: i64 = row.try_get(1).map_err(pg)?;
        let first: Option<Vec<u8>> = row.try_get(2).map_err(pg)?;
        let last: Option<Vec<u8>> = row.try_get(3).map_err(pg)?;
        let retention = retention
            .map(|ms| {
                u64::try_from(ms)
                    .map(Duration::from_millis)
                    .map_err(|_| corrupt(format!("kv_meta.change_log_ms is {ms}")))
            })
            .transpose()?;
        let mark = |bytes: Option<Vec<u8>>| {
            bytes
                .map(|bytes| {
                    ChangeRecord::decode(&bytes).map(|record| LogMark {
                        versionstamp: record.versionstamp,
                        at: record.at,
                    })
                })
                .transpose()
        };
        Ok(ChangeLogStatus {
            retention,
            records: u64::try_from(records).unwrap_or(0),
            first: mark(first)?,
            last: mark(last)?,
        })
    })
    .await
}

/// Up to `limit` records after `after`, in commit order, from one snapshot.
pub(crate) async fn read(
    pool: &Pool,
    sql: &Sql,
    after: Versionstamp,
    limit: usize,
) -> Result<Vec<ChangeRecord>, KvError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    reader::with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.log_read).await.map_err(pg)?;
        let after: &[u8] = after.as_bytes();
        let params: [&(dyn ToSql + Sync); 2] = [&after, &limit];
        let rows = client.query(&statement, &params).await.map_err(pg)?;
        rows.iter().map(record).collect()
    })
    .await
}

/// The record of a `kv_change_log` row (`vs, record`): it decodes, and it is the commit of its row.
pub(crate) fn record(row: &Row) -> Result<ChangeRecord, KvError> {
    let stamp: Vec<u8> = row.try_get(0).map_err(pg)?;
    let bytes: Vec<u8> = row.try_get(1).map_err(pg)?;
    let record = ChangeRecord::decode(&bytes)?;
    if record.versionstamp.as_bytes().as_slice() != stamp.as_slice() {
        return Err(corrupt(format!(
            "the change log row {stamp:02x?} holds the record of commit {}",
            record.versionstamp
        )));
    }
    Ok(record)
}

fn corrupt(message: String) -> KvError {
    KvError::Corrupt { message }
}

//! The integrity check: every entry and queued message, read from one snapshot and decoded as
//! reads decode them.
//!
//! PostgreSQL guards its own pages (its WAL, and data checksums where the cluster was created
//! with them); what only this crate can tell is whether each row still means something: a key in
//! Deno's encoding, a value that decodes under its encoding number, a 10-byte versionstamp, a
//! message whose columns are whole, a change log record that decodes (as the record of its row's
//! commit). Rows are streamed and decoded in batches, so the check holds
//! one batch in memory, not the store.

use deadpool_postgres::Object;
use futures::{StreamExt, pin_mut};
use open_deno_kv_engine_kit::{IntegrityReport, KvError, RowProblem, TableHolds, decode_key};
use tokio_postgres::{Row, Transaction};

use crate::codec;
use crate::error::pg;
use crate::reader;
use crate::sql::Sql;

/// How many rows are decoded before they are added to the report.
const BATCH: usize = 1024;

/// Checks the store `sql` names, from one `REPEATABLE READ READ ONLY` snapshot on `client`.
/// Problems go in the report; an error means the check could not run at all.
pub(crate) async fn check(mut client: Object, sql: &Sql) -> Result<IntegrityReport, KvError> {
    let tx = reader::snapshot(&mut client).await?;
    let mut report = IntegrityReport::default();
    scan(
        &tx,
        &sql.all_entries,
        "kv",
        TableHolds::Entries,
        &mut report,
        entry,
    )
    .await;
    scan(
        &tx,
        &sql.all_messages,
        "kv_queue",
        TableHolds::Messages,
        &mut report,
        message,
    )
    .await;
    scan(
        &tx,
        &sql.log_all,
        "kv_change_log",
        TableHolds::Index,
        &mut report,
        log_record,
    )
    .await;
    tx.commit().await.map_err(pg)?;
    Ok(report)
}

/// An entry row decodes, and its key is a Deno key.
fn entry(row: &Row) -> Result<(), RowProblem> {
    let (key, _) = codec::stored_entry(row).map_err(|err| (row.try_get(0).ok(), err))?;
    decode_key(&key).map_err(|err| (Some(key.clone()), KvError::from(err)))?;
    Ok(())
}

/// A message row decodes.
fn message(row: &Row) -> Result<(), RowProblem> {
    codec::message(row).map(|_| ()).map_err(|err| (None, err))
}

/// A change log row decodes, as the record of its own commit.
fn log_record(row: &Row) -> Result<(), RowProblem> {
    crate::change_log::record(row)
        .map(|_| ())
        .map_err(|err| (None, err))
}

/// Streams every row of `query` through `decode` into the report, a batch at a time (see
/// [`IntegrityReport::scan_rows_from`]); a query that cannot start makes the table unreadable.
async fn scan(
    tx: &Transaction<'_>,
    query: &str,
    table: &str,
    holds: TableHolds,
    report: &mut IntegrityReport,
    decode: fn(&Row) -> Result<(), RowProblem>,
) {
    let rows = match tx.query_raw(query, std::iter::empty::<i32>()).await {
        Ok(rows) => rows,
        Err(err) => return report.unreadable(table, err),
    };
    pin_mut!(rows);
    let mut seen = 0;
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        let mut stopped = false;
        while batch.len() < BATCH {
            match rows.next().await {
                Some(Ok(row)) => batch.push(Ok(decode(&row))),
                Some(Err(err)) => {
                    batch.push(Err(err));
                    stopped = true;
                    break;
                }
                None => {
                    stopped = true;
                    break;
                }
            }
        }
        let n = batch.len();
        report.scan_rows_from(table, holds, seen, batch);
        seen += n;
        if stopped {
            return;
        }
    }
}

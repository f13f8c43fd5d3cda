//! The integrity check: SQLite's own, then every row decoded as reads decode it.

use open_deno_kv_engine_kit::{IntegrityReport, KvError, RowProblem, TableHolds, decode_key};
use rusqlite::{Connection, Row};

use crate::store::{entry_from_row, queue_row, storage};

const ENTRIES_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv order by k";
const MESSAGES_SQL: [(&str, &str); 2] = [
    (
        "queue",
        "select ts, id, data, backoff_schedule, keys_if_undelivered from queue",
    ),
    (
        "queue_running",
        "select deadline, id, data, backoff_schedule, keys_if_undelivered from queue_running",
    ),
];

/// Checks the database `conn` is open on, from one snapshot. Problems go in the report; an error
/// means the check could not run at all.
pub(crate) fn check(conn: &mut Connection) -> Result<IntegrityReport, KvError> {
    let tx = conn.transaction().map_err(storage)?;
    let mut report = IntegrityReport::default();
    structure(&tx, &mut report);
    scan(
        &tx,
        ENTRIES_SQL,
        "kv",
        TableHolds::Entries,
        &mut report,
        |row| {
            decode_key(&entry_from_row(row)?.key)?;
            Ok(())
        },
    );
    for (table, sql) in MESSAGES_SQL {
        scan(&tx, sql, table, TableHolds::Messages, &mut report, |row| {
            queue_row(row).map(|_| ())
        });
    }
    if crate::change_log::tables_exist(&tx)? {
        // The change log's rows: each must decode to its records, in commit order, the last
        // under the row's own key, as many as the row counts.
        let counted = crate::change_log::has_records_column(&tx)?;
        let sql = if counted {
            "select versionstamp, record, records from odkv_change_log"
        } else {
            "select versionstamp, record from odkv_change_log"
        };
        scan(
            &tx,
            sql,
            "odkv_change_log",
            TableHolds::Index,
            &mut report,
            |row| {
                let (key, bytes): (Vec<u8>, Vec<u8>) =
                    (row.get(0).map_err(storage)?, row.get(1).map_err(storage)?);
                let count = if counted {
                    Some(row.get(2).map_err(storage)?)
                } else {
                    None
                };
                crate::change_log::row_records(&key, &bytes, count).map(drop)
            },
        );
    }
    tx.finish().map_err(storage)?;
    Ok(report)
}

/// SQLite's `integrity_check`: pages, free lists, indexes against their tables.
fn structure(conn: &Connection, report: &mut IntegrityReport) {
    let lines = conn.prepare("pragma integrity_check").and_then(|mut stmt| {
        stmt.query_map([], |row| row.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
    });
    match lines {
        Ok(lines) => {
            for line in lines.into_iter().filter(|line| line != "ok") {
                report.problem(format!("sqlite integrity_check: {line}"));
            }
        }
        Err(err) => report.problem(format!("sqlite integrity_check failed: {err}")),
    }
}

/// Reads every row of `sql` through `decode`, into the report (see
/// [`IntegrityReport::scan_rows`]); a row's key is its first column when that is a blob.
fn scan(
    conn: &Connection,
    sql: &str,
    table: &str,
    holds: TableHolds,
    report: &mut IntegrityReport,
    decode: impl Fn(&Row<'_>) -> Result<(), KvError>,
) {
    let mut stmt = match conn.prepare(sql) {
        Ok(stmt) => stmt,
        Err(err) => return report.unreadable(table, err),
    };
    let rows = stmt.query_map([], |row| {
        Ok(decode(row).map_err(|err| -> RowProblem {
            let key = row.get_ref(0).ok().and_then(|value| value.as_blob().ok());
            (key.map(<[u8]>::to_vec), err)
        }))
    });
    match rows {
        Ok(rows) => report.scan_rows(table, holds, rows),
        Err(err) => report.unreadable(table, err),
    }
}

//! The integrity check: SQLite's own, then every row decoded as reads decode it.

use kv_proto::{IntegrityReport, KvError, decode_key};
use rusqlite::{Connection, Row};

use crate::store::{QueueRow, entry_from_row, storage};

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
    scan(&tx, ENTRIES_SQL, "kv", &mut report, |row, report| {
        let entry = entry_from_row(row)?;
        decode_key(&entry.key)?;
        report.entries_checked += 1;
        Ok(())
    });
    for (table, sql) in MESSAGES_SQL {
        scan(&tx, sql, table, &mut report, |row, report| {
            QueueRow::from_row(row)?.to_message()?;
            report.messages_checked += 1;
            Ok(())
        });
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

/// Reads every row of `sql` through `decode`. A row that does not decode is a problem and the
/// scan goes on; a scan that stops with an error is a problem too (the rows after it are unseen).
fn scan(
    conn: &Connection,
    sql: &str,
    table: &str,
    report: &mut IntegrityReport,
    decode: impl Fn(&Row<'_>, &mut IntegrityReport) -> Result<(), KvError>,
) {
    let mut stmt = match conn.prepare(sql) {
        Ok(stmt) => stmt,
        Err(err) => return report.problem(format!("table {table} cannot be read: {err}")),
    };
    let mut rows = match stmt.query([]) {
        Ok(rows) => rows,
        Err(err) => return report.problem(format!("table {table} cannot be read: {err}")),
    };
    let mut index = 0u64;
    loop {
        match rows.next() {
            Ok(Some(row)) => {
                if let Err(err) = decode(row, report) {
                    let key = row
                        .get_ref(0)
                        .ok()
                        .and_then(|value| value.as_blob().ok())
                        .map(|key| format!(" (key {})", hex_bytes(key)))
                        .unwrap_or_default();
                    report.problem(format!("table {table}, row {index}{key}: {err}"));
                }
            }
            Ok(None) => return,
            Err(err) => {
                return report.problem(format!(
                    "table {table}: the scan stopped after {index} rows: {err}"
                ));
            }
        }
        index += 1;
    }
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

//! The integrity check: every table read from one snapshot, every record decoded as reads and
//! the writer decode it.
//!
//! redb keeps a checksum for every page and verifies the whole file when it recovers from a
//! crash (and at every open with [`crate::RedbOptions::check_integrity_on_open`]); its on-demand
//! check needs the database to itself, which an open, shared file cannot give. This check reads
//! everything through the B-trees instead: a damaged page that breaks a tree stops a scan, which
//! is reported, and a record that does not decode is reported with its key.

use kv_proto::{IntegrityReport, KvError, decode_key};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition};

use crate::codec;
use crate::error::storage;
use crate::schema::{ENTRIES, EXPIRY, QUEUE_READY, QUEUE_RUNNING};

/// Checks the file `db` is open on, from one snapshot. Problems go in the report; an error means
/// the check could not start.
pub(crate) fn check(db: &dyn ReadableDatabase) -> Result<IntegrityReport, KvError> {
    let txn = db.begin_read().map_err(storage)?;
    let mut report = IntegrityReport::default();
    scan(&txn, ENTRIES, &mut report, |key, value, report| {
        decode_key(key)?;
        codec::EntryRecord::decode(value)?.value()?;
        report.entries_checked += 1;
        Ok(())
    });
    scan(&txn, EXPIRY, &mut report, |key, (), _| {
        let time_len = codec::encode_time(chrono::DateTime::UNIX_EPOCH).len();
        codec::decode_time(key)?;
        decode_key(key.get(time_len..).unwrap_or_default())?;
        Ok(())
    });
    scan(&txn, QUEUE_READY, &mut report, |key, body, report| {
        let (ready_at, id) = codec::decode_ready_key(key)?;
        codec::decode_message_body(body, id, ready_at)?;
        report.messages_checked += 1;
        Ok(())
    });
    scan(&txn, QUEUE_RUNNING, &mut report, |key, record, report| {
        codec::decode_running(record, codec::decode_id(key)?)?;
        report.messages_checked += 1;
        Ok(())
    });
    Ok(report)
}

/// Reads every row of `table` through `decode`. A row that does not decode is a problem and the
/// scan goes on; a scan that stops with an error is a problem too (the rows after it are unseen).
fn scan<V: redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<&'static [u8], V>,
    report: &mut IntegrityReport,
    decode: impl Fn(&[u8], V::SelfType<'_>, &mut IntegrityReport) -> Result<(), KvError>,
) {
    let name = redb::TableHandle::name(&table).to_owned();
    let opened = match txn.open_table(table) {
        Ok(opened) => opened,
        Err(err) => return report.problem(format!("table {name} cannot be read: {err}")),
    };
    let rows = match opened.iter() {
        Ok(rows) => rows,
        Err(err) => return report.problem(format!("table {name} cannot be read: {err}")),
    };
    for (index, row) in rows.enumerate() {
        match row {
            Ok((key, value)) => {
                if let Err(err) = decode(key.value(), value.value(), report) {
                    let key = key
                        .value()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>();
                    report.problem(format!("table {name}, row {index} (key {key}): {err}"));
                }
            }
            Err(err) => {
                return report.problem(format!(
                    "table {name}: the scan stopped after {index} rows: {err}"
                ));
            }
        }
    }
}

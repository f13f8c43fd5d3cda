//! The integrity check: every table read from one snapshot, every record decoded as reads and
//! the writer decode it.
//!
//! redb keeps a checksum for every page and verifies the whole file when it recovers from a
//! crash (and at every open with [`crate::RedbOptions::check_integrity_on_open`]); its on-demand
//! check needs the database to itself, which an open, shared file cannot give. This check reads
//! everything through the B-trees instead: a damaged page that breaks a tree stops a scan, which
//! is reported, and a record that does not decode is reported with its key.

use open_deno_kv_engine_kit::change_log::ChangeRecord;
use open_deno_kv_engine_kit::{IntegrityReport, KvError, TableHolds, decode_key};
use redb::{ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

use crate::codec;
use crate::error::storage;
use crate::schema::{CHANGE_LOG, ENTRIES, EXPIRY, QUEUE_READY, QUEUE_RUNNING};

/// Checks the file `db` is open on, from one snapshot. Problems go in the report; an error means
/// the check could not start.
pub(crate) fn check(db: &dyn ReadableDatabase) -> Result<IntegrityReport, KvError> {
    let txn = db.begin_read().map_err(storage)?;
    let mut report = IntegrityReport::default();
    scan(
        &txn,
        ENTRIES,
        TableHolds::Entries,
        &mut report,
        |key, value| {
            decode_key(key)?;
            codec::EntryRecord::decode(value)?.value().map(|_| ())
        },
    );
    scan(&txn, EXPIRY, TableHolds::Index, &mut report, |key, ()| {
        let time_len = codec::encode_time(chrono::DateTime::UNIX_EPOCH).len();
        codec::decode_time(key)?;
        decode_key(key.get(time_len..).unwrap_or_default())?;
        Ok(())
    });
    scan(
        &txn,
        QUEUE_READY,
        TableHolds::Messages,
        &mut report,
        |key, body| {
            let (ready_at, id) = codec::decode_ready_key(key)?;
            codec::decode_message_body(body, id, ready_at).map(|_| ())
        },
    );
    scan(
        &txn,
        QUEUE_RUNNING,
        TableHolds::Messages,
        &mut report,
        |key, record| codec::decode_running(record, codec::decode_id(key)?).map(|_| ()),
    );
    // The change log's table exists only while the log is on.
    let has_log = txn
        .list_tables()
        .map_err(storage)?
        .any(|handle| handle.name() == CHANGE_LOG.name());
    if has_log {
        scan(
            &txn,
            CHANGE_LOG,
            TableHolds::Index,
            &mut report,
            |key, value| {
                let record = ChangeRecord::decode(value)?;
                if record.versionstamp.as_bytes().as_slice() != key {
                    return Err(crate::error::corrupt(format!(
                        "a change log record of commit {} under another key",
                        record.versionstamp
                    )));
                }
                Ok(())
            },
        );
    }
    Ok(report)
}

/// Reads every row of `table` through `decode`, into the report (see
/// [`IntegrityReport::scan_rows`]).
fn scan<V: redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<&'static [u8], V>,
    holds: TableHolds,
    report: &mut IntegrityReport,
    decode: impl Fn(&[u8], V::SelfType<'_>) -> Result<(), KvError>,
) {
    let name = redb::TableHandle::name(&table).to_owned();
    let opened = match txn.open_table(table) {
        Ok(opened) => opened,
        Err(err) => return report.unreadable(&name, err),
    };
    let rows = match opened.iter() {
        Ok(rows) => rows.map(|row| {
            row.map(|(key, value)| {
                decode(key.value(), value.value()).map_err(|err| (Some(key.value().to_vec()), err))
            })
        }),
        Err(err) => return report.unreadable(&name, err),
    };
    report.scan_rows(&name, holds, rows);
}

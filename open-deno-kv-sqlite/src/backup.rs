//! Snapshot export and import (see `open_deno_kv_engine_kit::backup`), each on a connection of its
//! own and a thread of its own ([`blocking_export`], and [`Transfers::import`], which the handle's
//! close ends: an import holds the database's write lock).
//!
//! **Export**: one read transaction (in WAL mode a reader never blocks the writer, and the writer
//! never blocks it): the database's identity and `data_version` (the last commit), then every visible `kv` row in key order,
//! then the messages of `queue` and `queue_running` (these as ready at the snapshot's time) by
//! ready time and id. Rows are read from the statement as the consumer takes them; nothing is
//! collected.
//!
//! **Import**: one `BEGIN IMMEDIATE` transaction that first checks that `kv`, `queue` and
//! `queue_running` are empty, inserts every row with its versionstamp, expiry and message id, and
//! sets `data_version` to the snapshot's versionstamp (or, in a store that handed out that version
//! or later, leaves it there, one further while the change log is on: `version_after_import`):
//! the writer's next commit takes the version after it. Anything short of the whole stream rolls the transaction back.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::backup::{
    ExportSink, ImportFeed, ImportRow, Transfers, blocking_export, import_each,
};
use open_deno_kv_engine_kit::change_log::version_after_import;
use open_deno_kv_engine_kit::{
    ImportSummary, KvError, Snapshot, SnapshotItem, Versionstamp, WriteTransaction,
    backup::not_empty,
};
use rusqlite::{Connection, TransactionBehavior};

use crate::store::{
    SqlTransaction, entry_from_row, insert_queued, last_commit, open_connection, queue_row, storage,
};

const ENTRIES: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where expiration_ms < 0 or expiration_ms > ?1 order by k";
/// Waiting messages by ready time and messages being delivered as ready at `?1`, in one order.
const MESSAGES: &str = "select ts, id, data, backoff_schedule, keys_if_undelivered from queue
    union all select ?1, id, data, backoff_schedule, keys_if_undelivered from queue_running
    order by 1, 2";
const ANY_ROW: &str = "select exists(select 1 from kv) or exists(select 1 from queue)
    or exists(select 1 from queue_running)";
const SET_LAST_COMMIT: &str = "update data_version set version = ?1, seq = ?2 where k = 0";

/// Streams the database at `path` from one read transaction (see the module documentation).
pub(crate) async fn export(
    path: PathBuf,
    read_only: bool,
    now: DateTime<Utc>,
) -> Result<Snapshot, KvError> {
    blocking_export(move |sink| {
        let mut conn = open_connection(&path, read_only)?;
        export_from(&mut conn, now, sink)
    })
    .await
}

fn export_from(
    conn: &mut Connection,
    now: DateTime<Utc>,
    sink: &mut ExportSink,
) -> Result<(), KvError> {
    let tx = conn.transaction().map_err(storage)?;
    // The first read starts the snapshot; every later statement of the transaction sees it.
    sink.begin(crate::identity::read(&tx)?, last_commit(&tx)?)?;
    let now_ms = now.timestamp_millis();
    {
        let mut entries = tx.prepare(ENTRIES).map_err(storage)?;
        let mut rows = entries.query([now_ms]).map_err(storage)?;
        while let Some(row) = rows.next().map_err(storage)? {
            sink.send(SnapshotItem::Entry(entry_from_row(row)?))?;
        }
    }
    {
        let mut messages = tx.prepare(MESSAGES).map_err(storage)?;
        let mut rows = messages.query([now_ms]).map_err(storage)?;
        while let Some(row) = rows.next().map_err(storage)? {
            sink.send(SnapshotItem::Message(queue_row(row)?.1))?;
        }
    }
    tx.finish().map_err(storage)
}

/// Writes `snapshot` into the (empty) database at `path` in one transaction (see the module
/// documentation).
pub(crate) async fn import(
    transfers: &Transfers,
    path: PathBuf,
    snapshot: Snapshot,
) -> Result<ImportSummary, KvError> {
    transfers
        .import(snapshot, move |versionstamp, feed| {
            let mut conn = open_connection(&path, false)?;
            import_into(&mut conn, versionstamp, feed)
        })
        .await
}

fn import_into(
    conn: &mut Connection,
    versionstamp: Versionstamp,
    feed: &mut ImportFeed,
) -> Result<ImportSummary, KvError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(storage)?;
    let occupied: bool = tx
        .query_row(ANY_ROW, [], |row| row.get(0))
        .map_err(storage)?;
    if occupied {
        return Err(not_empty());
    }
    let summary = import_each(feed, |row| match row {
        ImportRow::Entry(key, stored) => SqlTransaction { conn: &tx }.put(&key, stored),
        ImportRow::Message(message) => insert_queued(&tx, &message),
    })?;
    // Never backwards, and a gap in the change log's chain (`version_after_import`).
    let current = last_commit(&tx)?;
    let logging = crate::change_log::tables_exist(&tx)?;
    let next = version_after_import(versionstamp.version(), current.version(), logging);
    let seq = if next == versionstamp.version() {
        versionstamp.seq()
    } else {
        0
    };
    let version = i64::try_from(next)
        .map_err(|_| KvError::invalid_argument("the snapshot's version is beyond SQLite's i64"))?;
    let changed = tx
        .execute(SET_LAST_COMMIT, rusqlite::params![version, i64::from(seq)])
        .map_err(storage)?;
    if changed != 1 {
        return Err(KvError::Corrupt {
            message: "data_version has no row".into(),
        });
    }
    tx.commit().map_err(storage)?;
    Ok(summary)
}

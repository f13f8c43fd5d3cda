//! Snapshot export and import (see `open_deno_kv_engine_kit::backup`), each on a thread of its own
//! ([`Transfers::export`] and [`Transfers::import`]: closing the handle that runs them ends
//! them, so none holds the file after its close).
//!
//! **Which commit a read transaction holds.** The writer keeps the last version in memory and
//! records only a ceiling in the file (see the `group` module), so a read transaction alone does
//! not say which commit it holds. The writer therefore publishes it in a [`CommitClock`] (see
//! the `commit_clock` module), which gives an export a read transaction together with the exact
//! version it holds; an export that meets a landing commit waits for that one commit (never for
//! more), and writers never wait for an export. A file open read-only has no writer: its
//! ceiling is the exact last version after a clean close (after a crash it may be above it, which
//! still bounds every entry and every later commit).
//!
//! **Export**: in that read transaction, every visible entry in key order, then the messages
//! by ready time and id (the running ones as ready at the snapshot's time), decoded as the
//! consumer takes them.
//!
//! **Import**: one redb write transaction (redb has one writer at a time: the file's own writer
//! waits for it) that checks that the entries and both queues are empty, writes every entry with
//! its expiry index row and every message, and raises the ceiling to the snapshot's version.
//! Before it commits it leaves the version in the [`CommitClock`] as a floor, which the writer
//! applies when it next begins a group (and re-reads its sweep hint): the next commit gets a
//! later version. An import is not a commit and writes no change record; with the log on it
//! notes its version in `meta` (`change_log_floor`, see [`crate::change_log`]). The next commit's
//! record names the snapshot's version as its `previous`, as an export between the two reports:
//! a backup taken after the import replays onto the log, one from before does not (a gap).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::backup::{ExportSink, ImportFeed, ImportRow, Transfers, import_each};
use open_deno_kv_engine_kit::change_log::version_after_import;
use open_deno_kv_engine_kit::{
    ImportSummary, KvEntry, KvError, QueuedMessage, Snapshot, SnapshotItem, Versionstamp,
    backup::not_empty, is_expired,
};
use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};

use crate::codec::{self, EntryRecord};
use crate::commit_clock::CommitClock;
use crate::error::storage;
use crate::schema::{self, ENTRIES, META, META_LAST_VERSION, QUEUE_READY, QUEUE_RUNNING};
use crate::store::Shared;
use crate::txn::{Fatal, Tables};

/// Streams the file of `shared` from one read transaction (see the module documentation), as
/// one of `transfers`. Closing them (the handle's close) ends the export: its consumer reads
/// [`KvError::Closed`] after the items already sent.
pub(crate) async fn export(
    transfers: &Transfers,
    shared: Arc<Shared>,
    now: DateTime<Utc>,
) -> Result<Snapshot, KvError> {
    transfers
        .export(move |sink| {
            shared.with_export_db(|db| {
                let (txn, version) = if shared.is_read_only() {
                    let txn = db.begin_read().map_err(storage)?;
                    let ceiling = read_ceiling(&txn)?;
                    (txn, ceiling)
                } else {
                    shared.commit_clock().begin_read(db)?
                };
                let identity = {
                    let meta = txn.open_table(META).map_err(storage)?;
                    crate::schema::identity(&meta).map_err(storage)?
                };
                sink.begin(identity, Versionstamp::from_version(version, 0))?;
                export_from(&txn, now, sink)
            })
        })
        .await
}

fn read_ceiling(txn: &ReadTransaction) -> Result<u64, KvError> {
    let meta = txn.open_table(META).map_err(storage)?;
    let ceiling = meta.get(META_LAST_VERSION).map_err(storage)?;
    ceiling
        .map(|guard| guard.value())
        .ok_or_else(|| crate::error::corrupt("deno_kv.meta has no last_version"))
}

fn export_from(
    txn: &ReadTransaction,
    now: DateTime<Utc>,
    sink: &mut ExportSink,
) -> Result<(), KvError> {
    let entries = txn.open_table(ENTRIES).map_err(storage)?;
    for row in entries.iter().map_err(storage)? {
        let (key, record) = row.map_err(storage)?;
        let record = EntryRecord::decode(record.value())?;
        if is_expired(record.expires_at, now) {
            continue;
        }
        sink.send(SnapshotItem::Entry(KvEntry {
            key: key.value().to_vec().into(),
            value: record.value()?,
            versionstamp: record.versionstamp,
            expires_at: record.expires_at,
        }))?;
    }
    // Messages being delivered (at most what consumers hold at once) count as ready now; they
    // are merged into the ready queue's (time, id) order.
    let running_table = txn.open_table(QUEUE_RUNNING).map_err(storage)?;
    let mut running = Vec::new();
    for row in running_table.iter().map_err(storage)? {
        let (key, record) = row.map_err(storage)?;
        let id = codec::decode_id(key.value())?;
        let (_deadline, message) = codec::decode_running(record.value(), id)?;
        running.push(QueuedMessage {
            ready_at: now,
            ..message
        });
    }
    let mut running = running.into_iter().peekable();
    let ready = txn.open_table(QUEUE_READY).map_err(storage)?;
    for row in ready.iter().map_err(storage)? {
        let (key, body) = row.map_err(storage)?;
        let (ready_at, id) = codec::decode_ready_key(key.value())?;
        while let Some(held) = running.next_if(|held| (held.ready_at, held.id) < (ready_at, id)) {
            sink.send(SnapshotItem::Message(held))?;
        }
        let message = codec::decode_message_body(body.value(), id, ready_at)?;
        sink.send(SnapshotItem::Message(message))?;
    }
    for held in running {
        sink.send(SnapshotItem::Message(held))?;
    }
    Ok(())
}

/// Writes `snapshot` into the (empty) file of `shared` in one write transaction (see the module
/// documentation).
pub(crate) async fn import(
    transfers: &Transfers,
    shared: Arc<Shared>,
    snapshot: Snapshot,
) -> Result<ImportSummary, KvError> {
    transfers
        .import(snapshot, move |versionstamp, feed| {
            let db = shared.writable_db()?;
            let txn = db.begin_write().map_err(storage)?;
            let (summary, version) = import_into(&txn, versionstamp, feed, shared.commit_clock())?;
            let clock = shared.commit_clock();
            // The file's writer waits for this transaction, so nothing else lands meanwhile.
            let before = clock.last_landed();
            clock.landing();
            let committed = txn.commit().map_err(storage);
            clock.landed(if committed.is_ok() { version } else { before });
            committed?;
            shared.invalidate_snapshot();
            Ok(summary)
        })
        .await
}

fn import_into(
    txn: &redb::WriteTransaction,
    versionstamp: Versionstamp,
    feed: &mut ImportFeed,
    clock: &CommitClock,
) -> Result<(ImportSummary, u64), KvError> {
    let fatal = |Fatal(err)| err;
    let mut tables = Tables::new(txn);
    let occupied = !tables
        .entries()
        .map_err(storage)?
        .is_empty()
        .map_err(storage)?
        || !tables
            .ready()
            .map_err(storage)?
            .is_empty()
            .map_err(storage)?
        || !tables
            .running()
            .map_err(storage)?
            .is_empty()
            .map_err(storage)?;
    if occupied {
        return Err(not_empty());
    }
    let summary = import_each(feed, |row| match row {
        ImportRow::Entry(key, stored) => tables.store_entry(&key, Some(&stored)).map_err(fatal),
        ImportRow::Message(message) => tables.insert_ready(&message).map_err(fatal),
    })?;
    // Never backwards, and a gap in the change log's chain (`version_after_import`): the
    // writer cannot commit while this transaction is open, so the last version that landed is
    // the store's.
    let logging = crate::change_log::is_on(&mut tables).map_err(fatal)?;
    let version = version_after_import(versionstamp.version(), clock.last_landed(), logging);
    let ceiling = schema::version_ceiling(txn)?;
    if version > ceiling {
        tables.set_version_ceiling(version).map_err(fatal)?;
    }
    crate::change_log::note_import(&mut tables, version).map_err(fatal)?;
    drop(tables);
    // Before the commit: the writer begins its next group only after this transaction ends, and
    // then finds the floor.
    clock.set_floor(version);
    Ok((summary, version))
}

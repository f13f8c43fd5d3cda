//! Snapshot export and import (see `open_deno_kv_engine_kit::backup`).
//!
//! **Export**: one `REPEATABLE READ READ ONLY` transaction on a pooled connection, run by a task
//! of its own: `kv_meta.data_version` (writers bump it first in their transaction, so the
//! snapshot holds exactly the commits up to it), then the visible entries in key order and the
//! messages in due order, each read in pages of [`PAGE`] rows by keyset queries inside that
//! transaction (never the whole table at once). The task sends rows through a bounded channel as
//! the consumer takes them; when the consumer drops the stream the task stops, and the
//! transaction ends when its connection goes back to the pool. Writers never wait for it.
//!
//! **Import**: one transaction that first locks the `kv_meta` row (as every writer does, so
//! writes of any process wait for the import rather than interleave), checks that `kv` and
//! `kv_queue` are empty, writes the entries in batches with their versionstamps and expiry and
//! the messages with their ids, raises `data_version` to the snapshot's version, notifies every
//! handle, and commits. While the change log is on, an import is not logged: when it would leave
//! `data_version` where it was (a store emptied after later commits than the snapshot's), it
//! takes one version more instead, so that the log's chain shows the import as a gap (a replay
//! across it is refused rather than missing the imported data). Dropping the future, or an error, rolls it back.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Pool, Transaction};
use open_deno_kv_engine_kit::backup::{
    ImportWrites, SnapshotOrigin, import_each_async, snapshot_from_channel,
};
use open_deno_kv_engine_kit::change_log::version_after_import;
use open_deno_kv_engine_kit::{
    ImportSummary, KvError, QueuedMessage, Snapshot, SnapshotItem, StoredEntry, Versionstamp,
    backup::not_empty,
};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::codec::{self, EntryColumns};
use crate::error::pg;
use crate::reader;
use crate::sql::Sql;

/// Rows per keyset page, and items waiting between the export task and its consumer.
const PAGE: i64 = 500;

type Items = mpsc::Sender<Result<SnapshotItem, KvError>>;

/// Streams the store from one `REPEATABLE READ` snapshot (see the module documentation).
pub(crate) async fn export(
    pool: Pool,
    sql: Arc<Sql>,
    now: DateTime<Utc>,
) -> Result<Snapshot, KvError> {
    let (versionstamp_tx, versionstamp_rx) = oneshot::channel();
    let (items_tx, items_rx) = mpsc::channel(PAGE as usize);
    tokio::spawn(async move {
        let mut versionstamp_tx = Some(versionstamp_tx);
        let outcome = export_pages(&pool, &sql, now, &mut versionstamp_tx, &items_tx).await;
        if let Err(err) = outcome {
            match versionstamp_tx.take() {
                Some(waiting) => {
                    let _ = waiting.send(Err(err));
                }
                None => {
                    let _ = items_tx.send(Err(err)).await;
                }
            }
        }
    });
    let versionstamp = versionstamp_rx
        .await
        .map_err(|_| KvError::internal("the export task stopped without an answer"))??;
    Ok(snapshot_from_channel(
        SnapshotOrigin {
            database: None,
            versionstamp,
        },
        items_rx,
    ))
}

/// The export's work; returns early (`Ok`) once the consumer is gone.
async fn export_pages(
    pool: &Pool,
    sql: &Sql,
    now: DateTime<Utc>,
    versionstamp_tx: &mut Option<oneshot::Sender<Result<Versionstamp, KvError>>>,
    items: &Items,
) -> Result<(), KvError> {
    let mut client = reader::pooled(pool).await?;
    let tx = reader::snapshot(&mut client).await?;
    let row = tx.query_one(&sql.read_version, &[]).await.map_err(pg)?;
    let version: i64 = row.try_get(0).map_err(pg)?;
    let version = u64::try_from(version).map_err(|_| KvError::Corrupt {
        message: format!("kv_meta.data_version is {version}"),
    })?;
    if let Some(waiting) = versionstamp_tx.take()
        && waiting
            .send(Ok(Versionstamp::from_version(version, 0)))
            .is_err()
    {
        return Ok(());
    }
    if !export_entries(&tx, sql, now, items).await? {
        return Ok(());
    }
    export_messages(&tx, sql, now, items).await?;
    tx.commit().await.map_err(pg)
}

/// Sends every visible entry, a keyset page at a time; `false` once the consumer is gone.
async fn export_entries(
    tx: &Transaction<'_>,
    sql: &Sql,
    now: DateTime<Utc>,
    items: &Items,
) -> Result<bool, KvError> {
    let statement = tx.prepare_cached(&sql.export_entries).await.map_err(pg)?;
    let now_ms = codec::ms(now);
    let mut after: Vec<u8> = Vec::new();
    loop {
        let params: [&(dyn ToSql + Sync); 3] = [&after, &now_ms, &PAGE];
        let rows = tx.query(&statement, &params).await.map_err(pg)?;
        let full = rows.len() as i64 == PAGE;
        for row in &rows {
            let entry = codec::entry(row)?;
            after.clear();
            after.extend_from_slice(&entry.key);
            if items.send(Ok(SnapshotItem::Entry(entry))).await.is_err() {
                return Ok(false);
            }
        }
        if !full {
            return Ok(true);
        }
    }
}

/// Sends every message by (ready time, id), a keyset page at a time (a leased message as ready
/// now at the latest).
async fn export_messages(
    tx: &Transaction<'_>,
    sql: &Sql,
    now: DateTime<Utc>,
    items: &Items,
) -> Result<(), KvError> {
    let statement = tx.prepare_cached(&sql.export_messages).await.map_err(pg)?;
    let now_ms = codec::ms(now);
    let (mut after_ready, mut after_id) = (i64::MIN, Uuid::nil());
    loop {
        let params: [&(dyn ToSql + Sync); 4] = [&after_ready, &after_id, &PAGE, &now_ms];
        let rows = tx.query(&statement, &params).await.map_err(pg)?;
        let full = rows.len() as i64 == PAGE;
        for row in &rows {
            let stored = codec::message(row)?;
            let mut message = stored.message;
            if stored.lease.is_some() {
                message.ready_at = message.ready_at.min(now);
            }
            after_ready = codec::ms(message.ready_at);
            after_id = message.id;
            if items
                .send(Ok(SnapshotItem::Message(message)))
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// Entries per insert statement during an import.
const IMPORT_BATCH: usize = 500;

/// Writes `snapshot` into the (empty) store in one transaction (see the module documentation).
pub(crate) async fn import(
    pool: &Pool,
    sql: &Sql,
    snapshot: Snapshot,
) -> Result<ImportSummary, KvError> {
    let Snapshot {
        versionstamp,
        items,
        ..
    } = snapshot;
    let version = i64::try_from(versionstamp.version()).map_err(|_| {
        KvError::invalid_argument("the snapshot's version is beyond PostgreSQL's bigint")
    })?;
    let mut client = reader::pooled(pool).await?;
    let tx = client.transaction().await.map_err(pg)?;
    let locked = tx.query_one(&sql.lock_version, &[]).await.map_err(pg)?;
    let before: i64 = locked.try_get(0).map_err(pg)?;
    let logging = locked.try_get::<_, Option<i64>>(1).map_err(pg)?.is_some();
    let occupied: bool = tx
        .query_one(&sql.any_data, &[])
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    if occupied {
        return Err(not_empty());
    }
    let upsert = tx.prepare_cached(&sql.upsert).await.map_err(pg)?;
    let enqueue = tx.prepare_cached(&sql.enqueue).await.map_err(pg)?;
    let mut writes = ImportRows {
        tx: &tx,
        upsert: &upsert,
        enqueue: &enqueue,
        columns: EntryColumns::default(),
    };
    let summary = import_each_async(items, &mut writes).await?;
    let columns = writes.columns;
    insert_entries(&tx, &upsert, columns).await?;
    // Never backwards, and while the change log is on, a gap in its chain: the import is not
    // logged, so the next commit must not name the last record as its predecessor
    // (`version_after_import`).
    let next = version_after_import(
        u64::try_from(version).unwrap_or(0),
        u64::try_from(before).unwrap_or(0),
        logging,
    );
    if next != u64::try_from(before).unwrap_or(0) {
        let next = i64::try_from(next).map_err(|_| KvError::Corrupt {
            message: format!("data_version {before} cannot move past {next}"),
        })?;
        tx.execute(&sql.set_version, &[&next]).await.map_err(pg)?;
    }
    // A payload without an origin: every handle, in every process, looks at everything again.
    let notify_params: [&(dyn ToSql + Sync); 2] = [&sql.channel, &"restore"];
    tx.execute(&sql.notify, &notify_params).await.map_err(pg)?;
    tx.commit().await.map_err(pg)?;
    Ok(summary)
}

/// An import's writes into PostgreSQL: entries batched ([`IMPORT_BATCH`] per statement),
/// messages one by one.
struct ImportRows<'t> {
    tx: &'t Transaction<'t>,
    upsert: &'t tokio_postgres::Statement,
    enqueue: &'t tokio_postgres::Statement,
    columns: EntryColumns,
}

impl ImportWrites for ImportRows<'_> {
    async fn entry(&mut self, key: Vec<u8>, stored: StoredEntry) -> Result<(), KvError> {
        self.columns.push(&key, &stored);
        if self.columns.keys.len() >= IMPORT_BATCH {
            insert_entries(self.tx, self.upsert, std::mem::take(&mut self.columns)).await?;
        }
        Ok(())
    }

    async fn message(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        let backoff = codec::backoff_column(&message.backoff_schedule);
        let ready_at = codec::ms(message.ready_at);
        let params: [&(dyn ToSql + Sync); 5] = [
            &message.id,
            &ready_at,
            &message.payload,
            &message.keys_if_undelivered,
            &backoff,
        ];
        self.tx.execute(self.enqueue, &params).await.map_err(pg)?;
        Ok(())
    }
}

async fn insert_entries(
    tx: &Transaction<'_>,
    upsert: &tokio_postgres::Statement,
    columns: EntryColumns,
) -> Result<(), KvError> {
    if columns.is_empty() {
        return Ok(());
    }
    let params: [&(dyn ToSql + Sync); 5] = [
        &columns.keys,
        &columns.values,
        &columns.encodings,
        &columns.stamps,
        &columns.expiries,
    ];
    tx.execute(upsert, &params).await.map_err(pg)?;
    Ok(())
}

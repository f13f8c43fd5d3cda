//! Reads from a pool of connections: snapshot reads, watched keys, the queue listing.
//!
//! A read of several ranges runs in one `REPEATABLE READ READ ONLY` transaction, so every range
//! comes from the same snapshot; its range queries are sent together (pipelined). A read of one
//! range is one statement, which is a snapshot by itself. Expired entries are filtered by the
//! query, with the handle's clock: invisible from the millisecond they expire, swept or not.

use std::future::Future;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use futures::future::try_join_all;
use kv_proto::queue::QueuedMessage;
use kv_proto::{KvEntry, KvError, ReadRange, ReadRangeOutput, WatchedEntry};
use tokio_postgres::IsolationLevel;
use tokio_postgres::types::ToSql;

use crate::PostgresError;
use crate::codec;
use crate::connect::is_lost_connection;
use crate::error::pg;
use crate::sql::Sql;

/// A connection from `pool`.
pub(crate) async fn pooled(pool: &Pool) -> Result<Object, KvError> {
    pool.get()
        .await
        .map_err(|e| PostgresError::Pool(e.to_string()).into())
}

/// Runs `read` on a pooled connection, and once more on a fresh one if the connection turned out
/// to be dead.
///
/// A pooled connection can die without anyone noticing while it sits idle (the server restarted,
/// a firewall dropped the path): the pool hands it out as healthy and its first statement fails.
/// Every other idle connection is then suspect too, so they are all dropped and `read` runs again
/// on a new connection. Only for reads, which can run twice harmlessly.
pub(crate) async fn with_fresh_retry<T, F, Fut>(pool: &Pool, read: F) -> Result<T, KvError>
where
    F: Fn(Object) -> Fut,
    Fut: Future<Output = Result<T, KvError>>,
{
    match read(pooled(pool).await?).await {
        Err(err) if is_lost_connection(&err) => {
            pool.retain(|_, _| false);
            read(pooled(pool).await?).await
        }
        answer => answer,
    }
}

/// Answers `ranges` from one snapshot, as of `now`.
pub(crate) async fn read_ranges(
    pool: &Pool,
    sql: &Sql,
    ranges: &[ReadRange],
    now: DateTime<Utc>,
) -> Result<Vec<ReadRangeOutput>, KvError> {
    with_fresh_retry(pool, |client| read_ranges_on(client, sql, ranges, now)).await
}

/// [`read_ranges`] on one connection.
async fn read_ranges_on(
    mut client: Object,
    sql: &Sql,
    ranges: &[ReadRange],
    now: DateTime<Utc>,
) -> Result<Vec<ReadRangeOutput>, KvError> {
    let now = codec::ms(now);
    if let [range] = ranges {
        return Ok(vec![read_range(&client, sql, range, now).await?]);
    }
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg)?;
    let outputs = try_join_all(ranges.iter().map(|range| read_range(&tx, sql, range, now))).await?;
    tx.commit().await.map_err(pg)?;
    Ok(outputs)
}

/// One range, on a connection or inside a transaction.
async fn read_range(
    client: &impl deadpool_postgres::GenericClient,
    sql: &Sql,
    range: &ReadRange,
    now: i64,
) -> Result<ReadRangeOutput, KvError> {
    let rows = match range.point_key() {
        Some(key) => {
            let statement = client.prepare_cached(&sql.read_point).await.map_err(pg)?;
            client.query(&statement, &[&key, &now]).await
        }
        None => {
            let text = if range.reverse {
                &sql.read_range_reverse
            } else {
                &sql.read_range
            };
            let statement = client.prepare_cached(text).await.map_err(pg)?;
            let limit = i64::from(range.limit);
            let params: [&(dyn ToSql + Sync); 4] = [&range.start, &range.end, &now, &limit];
            client.query(&statement, &params).await
        }
    }
    .map_err(pg)?;
    let entries = rows
        .iter()
        .map(codec::entry)
        .collect::<Result<Vec<KvEntry>, _>>()?;
    Ok(ReadRangeOutput { entries })
}

/// The current state of each watched key, in order, as of `now` (one statement: one snapshot).
pub(crate) async fn read_watched(
    pool: &Pool,
    sql: &Sql,
    keys: &[Vec<u8>],
    now: DateTime<Utc>,
) -> Result<Vec<WatchedEntry>, KvError> {
    let rows = with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.read_keys).await.map_err(pg)?;
        client.query(&statement, &[&keys]).await.map_err(pg)
    })
    .await?;
    let mut found = std::collections::HashMap::with_capacity(rows.len());
    for row in &rows {
        let (key, stored) = codec::stored_entry(row)?;
        found.insert(key, stored);
    }
    Ok(keys
        .iter()
        .map(|key| match found.remove(key) {
            Some(stored) => WatchedEntry {
                expires_at: stored.expires_at,
                entry: (!stored.is_expired(now)).then(|| KvEntry::from_stored(key.clone(), stored)),
            },
            None => WatchedEntry {
                entry: None,
                expires_at: None,
            },
        })
        .collect())
}

/// Every message, by ready time; a message a consumer holds counts as ready `now`.
pub(crate) async fn queued_messages(
    pool: &Pool,
    sql: &Sql,
    now: DateTime<Utc>,
) -> Result<Vec<QueuedMessage>, KvError> {
    let rows = with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.all_messages).await.map_err(pg)?;
        client.query(&statement, &[]).await.map_err(pg)
    })
    .await?;
    let mut messages = rows
        .iter()
        .map(|row| {
            let stored = codec::message(row)?;
            let mut message = stored.message;
            if stored.lease.is_some() {
                message.ready_at = message.ready_at.min(now);
            }
            Ok(message)
        })
        .collect::<Result<Vec<_>, KvError>>()?;
    messages.sort_by_key(|m| m.ready_at);
    Ok(messages)
}

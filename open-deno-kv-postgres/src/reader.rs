//! Reads from a pool of connections: snapshot reads, watched keys, the queue listing.
//!
//! Every read that reaches the server is one round trip (a `get` of a key this handle is
//! writing may not reach it: the `in_flight` module). A read of one range is one statement, which is a snapshot by
//! itself. A read of several ranges runs in one `REPEATABLE READ READ ONLY` transaction, so
//! every range comes from the same snapshot, and the transaction's statements — `BEGIN`, the
//! ranges, `COMMIT` — are sent together (see the `pipeline` module). Expired entries are filtered by the
//! query, with the handle's clock: invisible from the millisecond they expire, swept or not.
//!
//! A read on a replica always runs in such a transaction (one round trip too) and also reads the
//! version the replica has replayed, from the same snapshot: the handle serves it only when that version is new
//! enough ([`read_replica`], read-your-writes). A hot standby replays the primary's commits in
//! commit order, so its snapshot is a consistent prefix of the primary's history: stale, never
//! torn, and its versionstamps are the primary's.

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Object, Pool, Transaction};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    KeyRange, KvEntry, KvError, RangeCount, ReadRange, ReadRangeOutput, WatchedEntry,
};
use tokio_postgres::IsolationLevel;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PostgresError;
use crate::codec;
use crate::connect::is_lost_connection;
use crate::error::pg;
use crate::pipeline::{Flight, Statement};
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

/// Starts a `REPEATABLE READ READ ONLY` transaction on `client`: every statement in it reads
/// the same snapshot, and a read-only one never fails to serialize.
pub(crate) async fn snapshot(client: &mut Object) -> Result<Transaction<'_>, KvError> {
    client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(pg)
}

/// Answers `ranges` from one snapshot, as of `now`.
pub(crate) async fn read_ranges(
    pool: &Pool,
    sql: &Sql,
    ranges: &[ReadRange],
    now: DateTime<Utc>,
) -> Result<Vec<ReadRangeOutput>, KvError> {
    let (_, outputs) = with_fresh_retry(pool, |client| {
        read_ranges_on(client, sql, ranges, now, false)
    })
    .await?;
    Ok(outputs)
}

/// A read answered by a replica that had replayed `version`.
pub(crate) struct ReplicaRead {
    /// The last version the replica had replayed when it took the read's snapshot.
    pub(crate) version: u64,
    /// The ranges, as of that version.
    pub(crate) outputs: Vec<ReadRangeOutput>,
}

/// Answers `ranges` on a replica once it has replayed at least version `floor`: at once if it
/// has, else after waiting up to `wait` for it (polling its version, which is one row). `None`
/// when it has not caught up by then: the caller reads from the primary instead.
pub(crate) async fn read_replica(
    pool: &Pool,
    sql: &Sql,
    ranges: &[ReadRange],
    now: DateTime<Utc>,
    floor: u64,
    wait: Duration,
) -> Result<Option<ReplicaRead>, KvError> {
    let started = Instant::now();
    let read = || {
        with_fresh_retry(pool, |client| {
            read_ranges_on(client, sql, ranges, now, true)
        })
    };
    let (version, outputs) = read().await?;
    if version >= floor {
        return Ok(Some(ReplicaRead { version, outputs }));
    }
    let mut pause = Duration::from_micros(500);
    loop {
        if started.elapsed() + pause > wait {
            return Ok(None);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(10));
        let replayed = with_fresh_retry(
            pool,
            |client| async move { read_version(&client, sql).await },
        )
        .await?;
        if replayed >= floor {
            break;
        }
    }
    // Replay only moves forward: this snapshot is at least as new as the version just seen.
    let (version, outputs) = read().await?;
    Ok((version >= floor).then_some(ReplicaRead { version, outputs }))
}

/// [`read_ranges`] on one connection; with the server's last version as of the same snapshot
/// when `with_version` (else the version returned is 0).
///
/// One round trip either way: a lone range is one statement, which is a snapshot by itself;
/// anything more is one flight (see the `pipeline` module) of `BEGIN ISOLATION LEVEL REPEATABLE
/// READ READ ONLY`, the version, the ranges and `COMMIT`, sent together.
async fn read_ranges_on(
    client: Object,
    sql: &Sql,
    ranges: &[ReadRange],
    now: DateTime<Utc>,
    with_version: bool,
) -> Result<(u64, Vec<ReadRangeOutput>), KvError> {
    let now = codec::ms(now);
    if !with_version && let [range] = ranges {
        return Ok((0, vec![read_range(&client, sql, range, now).await?]));
    }
    // Prepared first (once per connection: the pool keeps them), so that nothing waits
    // between the sends below.
    let version_statement = if with_version {
        Some(client.prepare_cached(&sql.read_version).await.map_err(pg)?)
    } else {
        None
    };
    let mut range_statements = Vec::with_capacity(ranges.len());
    for range in ranges {
        range_statements.push(
            client
                .prepare_cached(range_sql(sql, range))
                .await
                .map_err(pg)?,
        );
    }
    let answers = {
        let client: &tokio_postgres::Client = &client;
        let mut flight: Flight<'_, Vec<Row>> = Flight::new();
        let mut sent = flight
            .send(Box::pin(async move {
                client
                    .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await
                    .map(|()| Vec::new())
            }))
            .await;
        if let (Ok(()), Some(statement)) = (&sent, &version_statement) {
            sent = flight
                .send(Box::pin(async move { client.query(statement, &[]).await }))
                .await;
        }
        for (range, statement) in ranges.iter().zip(&range_statements) {
            if sent.is_ok() {
                sent = flight
                    .send(range_query(client, statement, range, &now))
                    .await;
            }
        }
        if sent.is_ok() {
            sent = flight
                .send(Box::pin(async move {
                    client.batch_execute("COMMIT").await.map(|()| Vec::new())
                }))
                .await;
        }
        match sent {
            Ok(()) => flight
                .answers()
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>(),
            Err(err) => Err(err),
        }
    };
    let mut answers = match answers {
        Ok(answers) => answers.into_iter(),
        Err(err) => {
            // The flight may have stopped inside its transaction: this connection must not go
            // back to the pool (dropped, it closes, and the server ends the transaction).
            drop(Object::take(client));
            return Err(pg(err));
        }
    };
    let mut next = || answers.next().unwrap_or_default();
    next(); // BEGIN
    let version = match version_statement {
        Some(_) => {
            let rows = next();
            let row = rows.first().ok_or_else(|| missing("the version"))?;
            let version: i64 = row.try_get(0).map_err(pg)?;
            // The version only grows from 0.
            u64::try_from(version).unwrap_or(0)
        }
        None => 0,
    };
    let outputs = ranges
        .iter()
        .map(|_| entries(&next()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((version, outputs))
}

/// An error for an answer that lacks what its statement always returns.
fn missing(what: &str) -> KvError {
    PostgresError::Internal {
        message: format!("{what} came back without a row"),
    }
    .into()
}

/// The statement text that reads `range`.
fn range_sql<'a>(sql: &'a Sql, range: &ReadRange) -> &'a str {
    match (range.point_key(), range.reverse) {
        (Some(_), _) => &sql.read_point,
        (None, false) => &sql.read_range,
        (None, true) => &sql.read_range_reverse,
    }
}

/// `range` read with `statement` (prepared from [`range_sql`]) as a statement of a flight.
fn range_query<'a>(
    client: &'a tokio_postgres::Client,
    statement: &'a tokio_postgres::Statement,
    range: &'a ReadRange,
    now: &'a i64,
) -> Statement<'a, Vec<Row>> {
    Box::pin(async move {
        match range.point_key() {
            Some(key) => client.query(statement, &[&key, now]).await,
            None => {
                let limit = i64::from(range.limit);
                let params: [&(dyn ToSql + Sync); 4] = [&range.start, &range.end, now, &limit];
                client.query(statement, &params).await
            }
        }
    })
}

/// The entries of one range's rows.
fn entries(rows: &[Row]) -> Result<ReadRangeOutput, KvError> {
    let entries = rows
        .iter()
        .map(codec::entry)
        .collect::<Result<Vec<KvEntry>, _>>()?;
    Ok(ReadRangeOutput { entries })
}

/// The last version committed, as far as the server `client` is on has it.
async fn read_version(client: &impl GenericClient, sql: &Sql) -> Result<u64, KvError> {
    let statement = client.prepare_cached(&sql.read_version).await.map_err(pg)?;
    let version: i64 = client
        .query_one(&statement, &[])
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    // The version only grows from 0.
    Ok(u64::try_from(version).unwrap_or(0))
}

/// One range, in one statement.
async fn read_range(
    client: &impl GenericClient,
    sql: &Sql,
    range: &ReadRange,
    now: i64,
) -> Result<ReadRangeOutput, KvError> {
    let statement = client
        .prepare_cached(range_sql(sql, range))
        .await
        .map_err(pg)?;
    let rows = match range.point_key() {
        Some(key) => client.query(&statement, &[&key, &now]).await,
        None => {
            let limit = i64::from(range.limit);
            let params: [&(dyn ToSql + Sync); 4] = [&range.start, &range.end, &now, &limit];
            client.query(&statement, &params).await
        }
    }
    .map_err(pg)?;
    entries(&rows)
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
        .map(|key| {
            let live = found.remove(key).filter(|stored| !stored.is_expired(now));
            WatchedEntry::from(live.map(|stored| KvEntry::from_stored(key.clone(), stored)))
        })
        .collect())
}

/// How many entries of `range` are visible at `now`, and their sizes: one aggregate statement
/// (one snapshot) that reads lengths, not values.
pub(crate) async fn count_range(
    pool: &Pool,
    sql: &Sql,
    range: &KeyRange,
    now: DateTime<Utc>,
) -> Result<RangeCount, KvError> {
    if range.is_empty() {
        return Ok(RangeCount::default());
    }
    let now = codec::ms(now);
    let row = with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.count_range).await.map_err(pg)?;
        let params: [&(dyn ToSql + Sync); 3] = [&range.start, &range.end, &now];
        client.query_one(&statement, &params).await.map_err(pg)
    })
    .await?;
    let column = |i: usize| -> Result<u64, KvError> {
        let n: i64 = row.try_get(i).map_err(pg)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    Ok(RangeCount {
        entries: column(0)?,
        key_bytes: column(1)?,
        value_bytes: column(2)?,
    })
}

/// How many messages [`queued_messages`] would list, counted by PostgreSQL (no row is sent).
pub(crate) async fn queue_depth(pool: &Pool, sql: &Sql) -> Result<usize, KvError> {
    let row = with_fresh_retry(pool, |client| async move {
        let statement = client.prepare_cached(&sql.queue_depth).await.map_err(pg)?;
        client.query_one(&statement, &[]).await.map_err(pg)
    })
    .await?;
    let depth: i64 = row.try_get(0).map_err(pg)?;
    Ok(usize::try_from(depth).unwrap_or(0))
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

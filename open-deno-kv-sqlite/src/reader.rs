//! Reads: a pool of read connections, each read one consistent snapshot (a read transaction).

use std::path::PathBuf;

use open_deno_kv_engine_kit::pool::Pool;
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    IntegrityReport, KeyRange, KvEntry, KvError, RangeCount, ReadRange, ReadRangeOutput,
    StoredEntry, WatchedEntry,
};
use rusqlite::Connection;

use crate::store::{
    entry_from_row, first_row, open_connection, queue_row, storage, stored_from_row,
};

/// Idle connections kept for reuse; more are opened under load and closed when returned.
const MAX_IDLE: usize = 16;

/// This handle's read connections.
#[derive(Debug)]
pub(crate) struct ReaderPool {
    path: PathBuf,
    read_only: bool,
    idle: Pool<Connection>,
}

impl ReaderPool {
    pub(crate) fn new(path: PathBuf, read_only: bool) -> Self {
        ReaderPool {
            path,
            read_only,
            idle: Pool::new(MAX_IDLE),
        }
    }

    /// Runs `work` on a pooled connection.
    fn with_connection<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let open = || Ok(open_connection(&self.path, self.read_only)?);
        self.idle.with(open, work)
    }

    /// Answers every range from one snapshot, hiding entries expired at `now_ms`.
    pub(crate) fn read(
        &self,
        ranges: &[ReadRange],
        now_ms: i64,
    ) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.with_connection(|conn| {
            // One statement is one snapshot already; several need a read transaction.
            if let [range] = ranges {
                return Ok(vec![ReadRangeOutput {
                    entries: read_range(conn, range, now_ms)?,
                }]);
            }
            let tx = conn.transaction().map_err(storage)?;
            let mut outputs = Vec::with_capacity(ranges.len());
            for range in ranges {
                outputs.push(ReadRangeOutput {
                    entries: read_range(&tx, range, now_ms)?,
                });
            }
            tx.finish().map_err(storage)?;
            Ok(outputs)
        })
    }

    /// Every queued message from one snapshot: `queue` by ready time, then `queue_running`
    /// (whose messages are being delivered) as ready at `now_ms`.
    pub(crate) fn queued_messages(&self, now_ms: i64) -> Result<Vec<QueuedMessage>, KvError> {
        self.with_connection(|conn| {
            let tx = conn.transaction().map_err(storage)?;
            let mut messages = Vec::new();
            for (sql, params) in [(QUEUE_SQL, vec![]), (RUNNING_SQL, vec![now_ms])] {
                let mut stmt = tx.prepare_cached(sql).map_err(storage)?;
                let mut rows = stmt
                    .query(rusqlite::params_from_iter(params))
                    .map_err(storage)?;
                while let Some(row) = rows.next().map_err(storage)? {
                    messages.push(queue_row(row)?.1);
                }
            }
            tx.finish().map_err(storage)?;
            messages.sort_by_key(|message| message.ready_at);
            Ok(messages)
        })
    }

    /// The integrity check (see [`crate::integrity`]), on a pooled connection.
    pub(crate) fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        self.with_connection(crate::integrity::check)
    }

    /// How many entries of `range` are visible at `now_ms`, and their sizes: one statement
    /// (one snapshot) over the primary key, which reads value lengths without the values.
    pub(crate) fn count_range(&self, range: &KeyRange, now_ms: i64) -> Result<RangeCount, KvError> {
        if range.is_empty() {
            return Ok(RangeCount::default());
        }
        self.with_connection(|conn| {
            let mut stmt = conn.prepare_cached(COUNT_SQL).map_err(storage)?;
            let params = rusqlite::params![range.start, range.end, now_ms];
            let (entries, key_bytes, value_bytes): (i64, i64, i64) = stmt
                .query_row(params, |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .map_err(storage)?;
            let unsigned = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(RangeCount {
                entries: unsigned(entries),
                key_bytes: unsigned(key_bytes),
                value_bytes: unsigned(value_bytes),
            })
        })
    }

    /// The current entries of watched keys, from one snapshot.
    pub(crate) fn read_watched(
        &self,
        keys: &[Vec<u8>],
        now_ms: i64,
    ) -> Result<Vec<WatchedEntry>, KvError> {
        self.with_connection(|conn| {
            let tx = conn.transaction().map_err(storage)?;
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let stored = read_point(&tx, key, now_ms)?;
                out.push(stored.map(|s| KvEntry::from_stored(key.clone(), s)).into());
            }
            tx.finish().map_err(storage)?;
            Ok(out)
        })
    }
}

const QUEUE_SQL: &str =
    "select ts, id, data, backoff_schedule, keys_if_undelivered from queue order by ts";
const RUNNING_SQL: &str =
    "select ?1, id, data, backoff_schedule, keys_if_undelivered from queue_running";
const COUNT_SQL: &str = "select count(*), coalesce(sum(length(k)), 0), coalesce(sum(length(v)), 0)
    from kv where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3)";
const POINT_SQL: &str = "select v, v_encoding, version, seq, expiration_ms from kv
    where k = ?1 and (expiration_ms < 0 or expiration_ms > ?2)";
const RANGE_ASC_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k asc limit ?4";
const RANGE_DESC_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k desc limit ?4";

/// The live (unexpired at `now_ms`) entry at exactly `key`.
fn read_point(conn: &Connection, key: &[u8], now_ms: i64) -> Result<Option<StoredEntry>, KvError> {
    first_row(
        conn,
        POINT_SQL,
        rusqlite::params![key, now_ms],
        stored_from_row,
    )
}

fn read_range(conn: &Connection, range: &ReadRange, now_ms: i64) -> Result<Vec<KvEntry>, KvError> {
    if range.start >= range.end {
        return Ok(Vec::new());
    }
    // A get (`[k, k+00)`) is an equality lookup; the range scan below would find the same row.
    if let Some(key) = range.point_key() {
        return Ok(read_point(conn, key, now_ms)?
            .map(|stored| KvEntry::from_stored(key.to_vec(), stored))
            .into_iter()
            .collect());
    }
    let sql = if range.reverse {
        RANGE_DESC_SQL
    } else {
        RANGE_ASC_SQL
    };
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let mut rows = stmt
        .query(rusqlite::params![
            range.start,
            range.end,
            now_ms,
            i64::from(range.limit)
        ])
        .map_err(storage)?;
    let mut entries = Vec::new();
    while let Some(row) = rows.next().map_err(storage)? {
        entries.push(entry_from_row(row)?);
    }
    Ok(entries)
}

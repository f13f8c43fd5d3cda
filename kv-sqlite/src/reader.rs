//! Reads: a pool of read connections, each read one consistent snapshot (a read transaction).

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use kv_proto::{KvError, ReadRange, ReadRangeOutput, WatchedEntry};
use rusqlite::Connection;

use crate::Durability;
use crate::store::{entry_from_row, open_connection, storage};

/// Idle connections kept for reuse; more are opened under load and closed when returned.
const MAX_IDLE: usize = 16;

pub(crate) struct ReaderPool {
    path: PathBuf,
    read_only: bool,
    durability: Durability,
    idle: Mutex<Vec<Connection>>,
}

impl ReaderPool {
    pub(crate) fn new(path: PathBuf, read_only: bool, durability: Durability) -> Self {
        ReaderPool {
            path,
            read_only,
            durability,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn with_connection<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => open_connection(&self.path, self.read_only, self.durability)?,
        };
        let result = work(&mut conn);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
        result
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
                let range = ReadRange::single_encoded_key(key.clone());
                let mut stmt = tx.prepare_cached(POINT_SQL).map_err(storage)?;
                let mut rows = stmt
                    .query(rusqlite::params![range.start, now_ms])
                    .map_err(storage)?;
                out.push(match rows.next().map_err(storage)? {
                    Some(row) => {
                        let (entry, stored) = entry_from_row(row)?;
                        WatchedEntry {
                            entry: Some(entry),
                            expires_at: stored.expires_at,
                        }
                    }
                    None => WatchedEntry {
                        entry: None,
                        expires_at: None,
                    },
                });
            }
            drop(tx);
            Ok(out)
        })
    }
}

const POINT_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k = ?1 and (expiration_ms < 0 or expiration_ms > ?2)";
const RANGE_ASC_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k asc limit ?4";
const RANGE_DESC_SQL: &str = "select k, v, v_encoding, version, seq, expiration_ms from kv
    where k >= ?1 and k < ?2 and (expiration_ms < 0 or expiration_ms > ?3) order by k desc limit ?4";

fn read_range(
    conn: &Connection,
    range: &ReadRange,
    now_ms: i64,
) -> Result<Vec<kv_proto::KvEntry>, KvError> {
    if range.start >= range.end {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached(if range.reverse {
            RANGE_DESC_SQL
        } else {
            RANGE_ASC_SQL
        })
        .map_err(storage)?;
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
        entries.push(entry_from_row(row)?.0);
    }
    Ok(entries)
}

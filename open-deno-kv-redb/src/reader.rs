//! Reads: each request reads one redb read transaction, an MVCC snapshot that never blocks the
//! writer (nor is blocked by it); entry reads share theirs until the next commit (see
//! [`crate::snapshot`]).
//!
//! Expired entries are filtered here, by the injected clock, so an entry is never visible after
//! its expiry time even if the sweep has not deleted it yet.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    Clock, KeyRange, KvEntry, KvError, PageBuilder, RangeCount, ReadRange, ReadRangeOutput,
    WatchedEntry, is_expired,
};
use redb::{ReadableDatabase, ReadableTable};

use crate::codec::{self, EntryRecord};
use crate::error::storage;
use crate::schema::{QUEUE_READY, QUEUE_RUNNING};
use crate::snapshot::EntriesSnapshot;

/// The time one read request compares expiries with: read from the clock once, and only when
/// the request meets an entry that expires (most entries never do, and a clock read is a
/// measurable part of a point read).
pub(crate) struct ReadTime {
    clock: Arc<dyn Clock>,
    at: Option<DateTime<Utc>>,
}

impl ReadTime {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        ReadTime { clock, at: None }
    }

    /// Whether an entry with this expiry is gone (the clock is read on first need).
    fn expired(&mut self, expires_at: Option<DateTime<Utc>>) -> bool {
        if expires_at.is_none() {
            return false;
        }
        let clock = &self.clock;
        let now = *self.at.get_or_insert_with(|| clock.now());
        is_expired(expires_at, now)
    }
}

/// Answers every range from one snapshot, hiding expired entries.
pub(crate) fn read_ranges(
    table: &EntriesSnapshot,
    ranges: Vec<ReadRange>,
    time: &mut ReadTime,
) -> Result<Vec<ReadRangeOutput>, KvError> {
    let mut outputs = Vec::with_capacity(ranges.len());
    for range in ranges {
        outputs.push(ReadRangeOutput {
            entries: read_range(table, range, time)?,
        });
    }
    Ok(outputs)
}

/// How many entries of `range` are visible, and their sizes, from one snapshot: one scan of
/// the range that decodes each record's header and takes its value's length, never the value.
pub(crate) fn count_range(
    table: &EntriesSnapshot,
    range: &KeyRange,
    time: &mut ReadTime,
) -> Result<RangeCount, KvError> {
    let mut count = RangeCount::default();
    if range.is_empty() {
        return Ok(count);
    }
    let rows = table
        .range::<&[u8]>(range.start.as_slice()..range.end.as_slice())
        .map_err(storage)?;
    for row in rows {
        let (key, value) = row.map_err(storage)?;
        let record = EntryRecord::decode(value.value())?;
        if !time.expired(record.expires_at) {
            count.add(key.value().len(), record.value_len());
        }
    }
    Ok(count)
}

/// The current state of each watched key, from one snapshot.
pub(crate) fn read_watched(
    table: &EntriesSnapshot,
    keys: &[Vec<u8>],
    time: &mut ReadTime,
) -> Result<Vec<WatchedEntry>, KvError> {
    keys.iter()
        .map(|key| {
            let found = match table.get(key.as_slice()).map_err(storage)? {
                Some(guard) => visible(key.as_slice(), guard.value(), time)?,
                None => None,
            };
            Ok(WatchedEntry::from(found))
        })
        .collect()
}

/// Every queued message from one snapshot: `queue_ready` in ready-time order, then the running
/// messages as ready at `now` (they are being delivered).
pub(crate) fn queued_messages(
    db: &dyn ReadableDatabase,
    now: DateTime<Utc>,
) -> Result<Vec<QueuedMessage>, KvError> {
    let txn = db.begin_read().map_err(storage)?;
    let ready = txn.open_table(QUEUE_READY).map_err(storage)?;
    let mut messages = Vec::new();
    for row in ready.iter().map_err(storage)? {
        let (key, body) = row.map_err(storage)?;
        let (ready_at, id) = codec::decode_ready_key(key.value())?;
        messages.push(codec::decode_message_body(body.value(), id, ready_at)?);
    }
    let running = txn.open_table(QUEUE_RUNNING).map_err(storage)?;
    for row in running.iter().map_err(storage)? {
        let (key, record) = row.map_err(storage)?;
        let id = codec::decode_id(key.value())?;
        let (_deadline, message) = codec::decode_running(record.value(), id)?;
        messages.push(QueuedMessage {
            ready_at: now,
            ..message
        });
    }
    messages.sort_by_key(|message| message.ready_at);
    Ok(messages)
}

/// How many messages [`queued_messages`] would list: the lengths of `queue_ready` and
/// `queue_running`, which redb keeps in each table's root (no row is read).
pub(crate) fn queue_depth(db: &dyn ReadableDatabase) -> Result<usize, KvError> {
    use redb::ReadableTableMetadata;
    let txn = db.begin_read().map_err(storage)?;
    let ready = txn.open_table(QUEUE_READY).map_err(storage)?.len();
    let running = txn.open_table(QUEUE_RUNNING).map_err(storage)?.len();
    let depth = ready.map_err(storage)? + running.map_err(storage)?;
    Ok(usize::try_from(depth).unwrap_or(usize::MAX))
}

fn read_range(
    table: &EntriesSnapshot,
    range: ReadRange,
    time: &mut ReadTime,
) -> Result<Vec<KvEntry>, KvError> {
    if range.start >= range.end {
        return Ok(Vec::new());
    }
    // A single-key range `[k, k+00)` (every `get`) is one B-tree lookup, not a scan.
    if range.point_key().is_some() {
        let found = match table.get(range.start.as_slice()).map_err(storage)? {
            // The range's start is the key: move it into the entry instead of copying it.
            Some(guard) => visible(range.start, guard.value(), time)?,
            None => None,
        };
        return Ok(found.into_iter().collect());
    }
    let limit = usize::try_from(range.limit).unwrap_or(usize::MAX);
    let rows = table
        .range::<&[u8]>(range.start.as_slice()..range.end.as_slice())
        .map_err(storage)?;
    // The page's small entries share one buffer (see `PageBuilder`).
    let mut page = PageBuilder::for_limit(limit);
    let mut take = |row: Result<_, redb::StorageError>| -> Result<bool, KvError> {
        let (key, value): (redb::AccessGuard<&[u8]>, redb::AccessGuard<&[u8]>) =
            row.map_err(storage)?;
        let record = EntryRecord::decode(value.value())?;
        if !time.expired(record.expires_at) {
            record.push_onto(&mut page, key.value())?;
        }
        Ok(page.len() < limit)
    };
    if range.reverse {
        for row in rows.rev() {
            if !take(row)? {
                break;
            }
        }
    } else {
        for row in rows {
            if !take(row)? {
                break;
            }
        }
    }
    Ok(page.finish())
}

/// The entry stored as `record` under `key`, unless it has expired.
/// (`key` is only copied once the entry is known to be visible.)
fn visible(
    key: impl Into<Vec<u8>>,
    record: &[u8],
    time: &mut ReadTime,
) -> Result<Option<KvEntry>, KvError> {
    let record = EntryRecord::decode(record)?;
    if time.expired(record.expires_at) {
        return Ok(None);
    }
    Ok(Some(KvEntry {
        key: key.into().into(),
        value: record.value()?,
        versionstamp: record.versionstamp,
        expires_at: record.expires_at,
    }))
}

//! A write transaction's change records, kept in memory until it commits and then stored as one
//! row of the change log (see [`crate::change_log`], "A row per commit group").

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{ChangeRecord, RecordHead};
use open_deno_kv_engine_kit::{DatabaseId, KvError, Versionstamp};
use rusqlite::{Connection, params};

use crate::error::SqliteError;

const APPEND: &str =
    "insert into odkv_change_log (versionstamp, at_ms, record, records) values (?1, ?2, ?3, ?4)";

/// The records of one write transaction's logged commits, stored as one row before it commits
/// ([`PendingRecords::store`]). Commands mark where they begin, and a command rolled back to its
/// savepoint takes its records back ([`PendingRecords::rewind`]).
#[derive(Debug)]
pub(crate) struct PendingRecords {
    database: DatabaseId,
    /// The records, back to back.
    bytes: Vec<u8>,
    /// How many, the last one's versionstamp, and the latest time among them.
    count: i64,
    last: Option<Versionstamp>,
    latest_ms: i64,
    /// What the above were when the current command began.
    mark: Mark,
}

/// [`PendingRecords`]' extent when a command began.
#[derive(Debug, Clone, Copy)]
struct Mark {
    len: usize,
    count: i64,
    last: Option<Versionstamp>,
    latest_ms: i64,
}

impl PendingRecords {
    /// No records yet, for commits of `database`.
    pub(crate) fn new(database: DatabaseId) -> Self {
        Self::reusing(database, Vec::new())
    }

    /// No records yet, kept in `buffer` (emptied first): the writer hands the last group's
    /// buffer on, so that a group's records do not grow a new one from nothing.
    pub(crate) fn reusing(database: DatabaseId, mut buffer: Vec<u8>) -> Self {
        buffer.clear();
        PendingRecords {
            database,
            bytes: buffer,
            count: 0,
            last: None,
            latest_ms: i64::MIN,
            mark: Mark {
                len: 0,
                count: 0,
                last: None,
                latest_ms: i64::MIN,
            },
        }
    }

    /// The buffer the records were kept in, for the next transaction's.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }

    /// The database the records name.
    pub(crate) fn database(&self) -> DatabaseId {
        self.database
    }

    /// A commit's record, in commit order.
    pub(crate) fn push(&mut self, record: &ChangeRecord) {
        self.append(record.versionstamp, record.at, |before, out| {
            record.encode_after_into(before, out);
        });
    }

    /// A commit's record, in commit order, appended by `encode` (which must append exactly the
    /// record of commit `versionstamp` made at `at`), given the record before it in the row to
    /// continue ([`ChangeRecord::encode_after_into`]).
    pub(crate) fn append(
        &mut self,
        versionstamp: Versionstamp,
        at: DateTime<Utc>,
        encode: impl FnOnce(Option<RecordHead>, &mut Vec<u8>),
    ) {
        let before = self.last.map(|versionstamp| RecordHead {
            database: Some(self.database),
            versionstamp,
        });
        encode(before, &mut self.bytes);
        self.count += 1;
        self.last = Some(versionstamp);
        self.latest_ms = self.latest_ms.max(at.timestamp_millis());
    }

    /// A command begins: [`PendingRecords::rewind`] goes back to here.
    pub(crate) fn mark(&mut self) {
        self.mark = Mark {
            len: self.bytes.len(),
            count: self.count,
            last: self.last,
            latest_ms: self.latest_ms,
        };
    }

    /// The command that began at the last mark was rolled back: its records go with it.
    pub(crate) fn rewind(&mut self) {
        let Mark {
            len,
            count,
            last,
            latest_ms,
        } = self.mark;
        self.bytes.truncate(len);
        (self.count, self.last, self.latest_ms) = (count, last, latest_ms);
    }

    /// Stores the records, if any, as one row, in the transaction about to commit. If this
    /// fails, that transaction must not commit: its commits would have no records.
    pub(crate) fn store(&self, conn: &Connection) -> Result<(), KvError> {
        let Some(last) = self.last else {
            return Ok(());
        };
        let params = params![
            last.as_bytes().as_slice(),
            self.latest_ms,
            self.bytes,
            self.count
        ];
        conn.prepare_cached(APPEND)
            .and_then(|mut stmt| stmt.execute(params))
            .map(drop)
            .map_err(|err| KvError::from(SqliteError::from(err)))
    }
}

//! Rows in Deno's tables, and open-deno-kv-model's write path over a SQLite connection.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{ChangeRecord, PlainWrite, RecordingTransaction};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    CommitResult, Effects, KeyRange, KvEntry, KvError, KvValue, StagedCommit, StoredEntry,
    ValidatedWrite, Versionstamp, WriteOutcome, WriteTransaction, apply_atomic_write,
    ms_to_datetime,
};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rusqlite::{Connection, OpenFlags, Params, Row, params};
use uuid::Uuid;

use crate::error::SqliteError;
use crate::pending_records::PendingRecords;

/// How long SQLite itself waits for another connection's lock before reporting busy; callers
/// retry beyond that with back-off.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// Opens a connection with the settings every connection of this crate uses (how hard commits
/// are synced is the writer's: see `writer::Syncing`).
///
/// A read-only connection never writes: no journal mode is set, and if SQLite cannot create the
/// WAL index beside a WAL-mode file (a read-only directory), the file is read as immutable when
/// its WAL holds nothing, or refused with an explanation when it does.
pub(crate) fn open_connection(path: &Path, read_only: bool) -> Result<Connection, SqliteError> {
    let conn = if read_only {
        open_read_only(path)?
    } else {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | COMMON_FLAGS,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Deno's files are in WAL mode; readers then never block the writer.
        let _mode: String = conn.query_row("pragma journal_mode = wal", [], |row| row.get(0))?;
        conn
    };
    // This SQLite is built with STAT4, which re-plans a statement whenever a bound value used by
    // its range constraints changes: every `get` would pay a fresh prepare. The query planner
    // stability guarantee keeps one plan per statement (our queries have one good plan: the
    // primary key).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

const COMMON_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_NO_MUTEX.union(OpenFlags::SQLITE_OPEN_URI);

/// A read-only connection that has read the schema (SQLite opens lazily: problems with the file
/// show at the first read, so they are found here rather than in the middle of a request).
fn open_read_only(path: &Path) -> Result<Connection, SqliteError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | COMMON_FLAGS;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let err = match read_schema(&conn) {
        Ok(()) => return Ok(conn),
        Err(err) => err,
    };
    if !cannot_create_wal_index(&err) {
        return Err(err.into());
    }
    drop(conn);
    // A WAL-mode file needs its `-shm` index, which a read-only directory does not let SQLite
    // create. Without commits in the WAL, the main file is the whole database: read it as
    // immutable (no index, no locks, nothing written).
    if wal_holds_commits(path) {
        return Err(SqliteError::WalNeedsWritableDirectory {
            path: path.to_path_buf(),
        });
    }
    let conn = Connection::open_with_flags(immutable_uri(path)?, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    read_schema(&conn)?;
    Ok(conn)
}

fn read_schema(conn: &Connection) -> Result<(), rusqlite::Error> {
    conn.query_row("select count(*) from sqlite_master", [], |_| Ok(()))
}

/// SQLite's answer when a read-only connection cannot create or open a WAL-mode file's `-shm`.
fn cannot_create_wal_index(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
    )
}

/// Whether `PATH-wal` exists and is not empty.
fn wal_holds_commits(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_os_string();
    wal.push("-wal");
    std::fs::metadata(wal).is_ok_and(|meta| meta.len() > 0)
}

/// `file:/abs/path?immutable=1`, with the path percent-encoded as SQLite's URI syntax wants.
fn immutable_uri(path: &Path) -> Result<String, SqliteError> {
    let unnamable = |reason: String| SqliteError::ImmutablePath {
        path: path.to_path_buf(),
        reason,
    };
    let full = std::path::absolute(path).map_err(|e| unnamable(e.to_string()))?;
    let text = full
        .to_str()
        .ok_or_else(|| unnamable("the path is not UTF-8".into()))?;
    let path = utf8_percent_encode(text, URI_PATH_BYTES);
    Ok(format!("file:{path}?immutable=1"))
}

/// What stays as it is in the path of a SQLite URI; every other byte is percent-encoded.
const URI_PATH_BYTES: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Decodes one `kv` row selected as `k, v, v_encoding, version, seq, expiration_ms`.
pub(crate) fn entry_from_row(row: &Row<'_>) -> Result<KvEntry, KvError> {
    let key: Vec<u8> = row.get(0).map_err(corrupt)?;
    Ok(KvEntry::from_stored(key, stored_from_columns(row, 1)?))
}

/// Decodes one `kv` row selected as `v, v_encoding, version, seq, expiration_ms`.
pub(crate) fn stored_from_row(row: &Row<'_>) -> Result<StoredEntry, KvError> {
    stored_from_columns(row, 0)
}

/// Decodes `v, v_encoding, version, seq, expiration_ms` starting at column `first`.
fn stored_from_columns(row: &Row<'_>, first: usize) -> Result<StoredEntry, KvError> {
    let bytes: Vec<u8> = row.get(first).map_err(corrupt)?;
    let encoding: i64 = row.get(first + 1).map_err(corrupt)?;
    let version: i64 = row.get(first + 2).map_err(corrupt)?;
    let seq: i64 = row.get(first + 3).map_err(corrupt)?;
    let expiration_ms: i64 = row.get(first + 4).map_err(corrupt)?;
    let value = KvValue::decode(bytes, encoding)?;
    let version = u64::try_from(version).map_err(|_| bad(format!("negative version {version}")))?;
    let seq = u16::try_from(seq).map_err(|_| bad(format!("sequence {seq} out of range")))?;
    let expires_at = expiry_from_ms(expiration_ms)?;
    Ok(StoredEntry {
        value,
        versionstamp: Versionstamp::from_version(version, seq),
        expires_at,
    })
}

/// Runs `sql` (a cached statement) and decodes its first row, if any.
pub(crate) fn first_row<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: impl FnOnce(&Row<'_>) -> Result<T, KvError>,
) -> Result<Option<T>, KvError> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let mut rows = stmt.query(params).map_err(storage)?;
    rows.next().map_err(storage)?.map(decode).transpose()
}

/// `expiration_ms` (-1 or any negative: never) as a time.
pub(crate) fn expiry_from_ms(ms: i64) -> Result<Option<DateTime<Utc>>, KvError> {
    if ms < 0 {
        return Ok(None);
    }
    ms_to_datetime(ms)
        .map(Some)
        .ok_or_else(|| bad(format!("expiration_ms {ms} out of range")))
}

fn expiry_to_ms(at: Option<DateTime<Utc>>) -> i64 {
    at.map_or(-1, |at| at.timestamp_millis())
}

/// A SQLite error while reading a row: the file holds something this layout does not allow.
pub(crate) fn corrupt(err: rusqlite::Error) -> KvError {
    match err {
        rusqlite::Error::SqliteFailure(..) => KvError::storage(err),
        other => bad(other.to_string()),
    }
}

fn bad(message: String) -> KvError {
    KvError::Corrupt { message }
}

/// A SQLite error from a statement.
pub(crate) fn storage(err: rusqlite::Error) -> KvError {
    KvError::from(SqliteError::from(err))
}

/// open-deno-kv-model's view of a write transaction, over an open SQLite transaction (or savepoint).
pub(crate) struct SqlTransaction<'a> {
    pub(crate) conn: &'a Connection,
}

const PUT: &str = "insert into kv (k, v, v_encoding, version, seq, expiration_ms)
    values (?1, ?2, ?3, ?4, ?5, ?6)
    on conflict(k) do update set v = excluded.v, v_encoding = excluded.v_encoding,
    version = excluded.version, seq = excluded.seq, expiration_ms = excluded.expiration_ms";

/// Runs `sql` through the connection's statement cache: every statement of the write path runs
/// once per write or per queue step, and parsing it each time would be a measurable part of it.
pub(crate) fn execute(conn: &Connection, sql: &str, params: impl Params) -> Result<(), KvError> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    stmt.execute(params).map(drop).map_err(storage)
}

impl WriteTransaction for SqlTransaction<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<StoredEntry>, KvError> {
        const GET: &str = "select v, v_encoding, version, seq, expiration_ms from kv where k = ?1";
        first_row(self.conn, GET, [key], stored_from_row)
    }

    fn put(&mut self, key: &[u8], entry: StoredEntry) -> Result<(), KvError> {
        let (bytes, encoding) = entry.value.encode();
        let version = i64::try_from(entry.versionstamp.version())
            .map_err(|_| bad("version beyond i64".into()))?;
        let seq = i64::from(entry.versionstamp.seq());
        let expiry = expiry_to_ms(entry.expires_at);
        let row = params![key, &bytes[..], encoding.id(), version, seq, expiry];
        execute(self.conn, PUT, row)
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), KvError> {
        execute(self.conn, "delete from kv where k = ?1", [key])
    }

    /// One statement over the primary key's range, however many rows it removes.
    fn delete_range(&mut self, range: &KeyRange) -> Result<(), KvError> {
        let bounds = params![range.start, range.end];
        execute(self.conn, "delete from kv where k >= ?1 and k < ?2", bounds)
    }

    fn enqueue(&mut self, message: QueuedMessage) -> Result<(), KvError> {
        insert_queued(self.conn, &message)
    }
}

/// Decodes a `queue` / `queue_running` row selected as `<time>, id, data, backoff_schedule,
/// keys_if_undelivered`: the row's id as stored, and the message, ready at `<time>` (a non-UUID
/// id, which Deno never writes, gets a fresh one in the message).
pub(crate) fn queue_row(row: &Row<'_>) -> Result<(String, QueuedMessage), KvError> {
    let time_ms: i64 = row.get(0).map_err(corrupt)?;
    let id: String = row.get(1).map_err(corrupt)?;
    let schedule: String = row.get(3).map_err(corrupt)?;
    // Deno writes the keys as JSON text in a blob column; accept either storage class.
    let keys_text = match row.get(4).map_err(corrupt)? {
        rusqlite::types::Value::Text(t) => t,
        rusqlite::types::Value::Blob(b) => {
            String::from_utf8(b).map_err(|_| bad("keys_if_undelivered is not UTF-8".into()))?
        }
        other => return Err(bad(format!("keys_if_undelivered holds {other:?}"))),
    };
    let backoff: Option<Vec<u64>> = serde_json::from_str(&schedule)
        .map_err(|e| bad(format!("backoff_schedule {schedule:?}: {e}")))?;
    let message = QueuedMessage {
        id: Uuid::parse_str(&id).unwrap_or_else(|_| Uuid::new_v4()),
        payload: row.get(2).map_err(corrupt)?,
        ready_at: ms_to_datetime(time_ms)
            .ok_or_else(|| bad(format!("queue time {time_ms} out of range")))?,
        keys_if_undelivered: serde_json::from_str(&keys_text)
            .map_err(|e| bad(format!("keys_if_undelivered {keys_text:?}: {e}")))?,
        backoff_schedule: (backoff.unwrap_or_default().into_iter())
            .map(|ms| u32::try_from(ms).unwrap_or(u32::MAX))
            .collect(),
    };
    Ok((id, message))
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    // Serializing numbers and lists of numbers cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "[]".to_owned())
}

/// Inserts a message into `queue`, ready at its `ready_at`.
pub(crate) fn insert_queued(conn: &Connection, message: &QueuedMessage) -> Result<(), KvError> {
    insert_queue_row(
        conn,
        "queue",
        message.ready_at.timestamp_millis(),
        &message.id.to_string(),
        message,
    )
}

/// Inserts a row into `queue` or `queue_running` with the given time and id.
pub(crate) fn insert_queue_row(
    conn: &Connection,
    table: &str,
    time_ms: i64,
    id: &str,
    message: &QueuedMessage,
) -> Result<(), KvError> {
    let sql = format!("insert into {table} values (?1, ?2, ?3, ?4, ?5)");
    let (backoff, keys) = (
        json(&message.backoff_schedule),
        json(&message.keys_if_undelivered),
    );
    execute(
        conn,
        &sql,
        params![time_ms, id, message.payload, backoff, keys],
    )
}

/// Bumps the file's version and returns the new one. (`seq` is 0 in every versionstamp Deno
/// hands out; it is reset here so that `data_version` names the last commit exactly after an
/// import of a snapshot whose versionstamp has another.)
///
/// `last` is the file's last commit ([`last_commit`]), read in the same write transaction: the
/// writer holds SQLite's write lock, so nothing moves `data_version` in between. The new value
/// is computed here and stored with a plain `update`: an `update … returning` costs as much as
/// storing an entry, because SQLite materialises `returning` rows in an ephemeral table that it
/// opens and begins for every statement (measured with callgrind; BENCHMARKS.md, "Continuous
/// backup").
fn next_version(conn: &Connection, last: Versionstamp) -> Result<Versionstamp, KvError> {
    const SET: &str = "update data_version set version = ?1, seq = 0 where k = 0";
    let version = last
        .version()
        .checked_add(1)
        .filter(|&next| i64::try_from(next).is_ok())
        .ok_or_else(|| bad(format!("data_version {} has no successor", last.version())))?;
    let stored = i64::try_from(version).map_err(|_| bad(format!("data_version {version}")))?;
    execute(conn, SET, [stored])?;
    Ok(Versionstamp::from_version(version, 0))
}

/// The versionstamp of the file's last commit, as `data_version` holds it.
pub(crate) fn last_commit(conn: &Connection) -> Result<Versionstamp, KvError> {
    const LAST: &str = "select version, seq from data_version where k = 0";
    let mut last = conn.prepare_cached(LAST).map_err(storage)?;
    let (version, seq): (i64, i64) = last
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))
        .map_err(storage)?;
    let version = u64::try_from(version).map_err(|_| bad(format!("data_version {version}")))?;
    let seq = u16::try_from(seq).map_err(|_| bad(format!("data_version seq {seq}")))?;
    Ok(Versionstamp::from_version(version, seq))
}

/// Runs one validated atomic write through open-deno-kv-model's write path on `conn` (inside the caller's
/// transaction or savepoint, which the caller rolls back unless this returns `Ok(Some(_))`).
/// With `log`, a committed write also adds its change record to the transaction's pending
/// records (see [`crate::change_log`]).
pub(crate) fn commit_write(
    conn: &Connection,
    write: &ValidatedWrite,
    now: DateTime<Utc>,
    effects: &mut Effects,
    log: Option<&mut PendingRecords>,
) -> Result<Option<CommitResult>, KvError> {
    if let Some(pending) = log {
        return commit_logged_write(conn, write, now, effects, pending);
    }
    let versionstamp = next_version(conn, last_commit(conn)?)?;
    let outcome = apply_atomic_write(&mut SqlTransaction { conn }, write, versionstamp, now)?;
    effects.record(&outcome);
    Ok(match outcome {
        WriteOutcome::CheckFailed => None,
        WriteOutcome::Committed { .. } => Some(CommitResult { versionstamp }),
    })
}

/// What a logged write's record is made from: the write itself, or the effects its recording
/// transaction staged.
enum Recorded<'w> {
    Plain(PlainWrite<'w>),
    Staged(StagedCommit),
}

/// [`commit_write`] with the change log on: its record joins the pending ones, stored with the
/// transaction. A write that only sets and deletes keys is applied as it is and its record
/// encoded from it ([`PlainWrite`]); any other runs through a recording transaction.
fn commit_logged_write(
    conn: &Connection,
    write: &ValidatedWrite,
    now: DateTime<Utc>,
    effects: &mut Effects,
    pending: &mut PendingRecords,
) -> Result<Option<CommitResult>, KvError> {
    let previous = last_commit(conn)?;
    let versionstamp = next_version(conn, previous)?;
    let mut txn = SqlTransaction { conn };
    let (outcome, recorded) = match PlainWrite::of(write) {
        Some(plain) => (
            apply_atomic_write(&mut txn, write, versionstamp, now)?,
            Recorded::Plain(plain),
        ),
        None => {
            let mut recording = RecordingTransaction::new(&mut txn);
            let outcome = apply_atomic_write(&mut recording, write, versionstamp, now)?;
            (outcome, Recorded::Staged(recording.into_changes()))
        }
    };
    effects.record(&outcome);
    if outcome == WriteOutcome::CheckFailed {
        return Ok(None);
    }
    let database = Some(pending.database());
    match recorded {
        Recorded::Plain(plain) => pending.append(versionstamp, now, |before, out| {
            plain.encode_record_into(before, database, versionstamp, previous, now, out);
        }),
        Recorded::Staged(changes) => pending.push(&ChangeRecord {
            database,
            versionstamp,
            previous,
            at: now,
            changes,
        }),
    }
    Ok(Some(CommitResult { versionstamp }))
}

/// SQLite's count of other connections' commits (it does not move for this connection's own):
/// the idle poll, and the change log's setting, look again when it moves. Run on every group
/// while the change log is read, so it is prepared once.
pub(crate) fn pragma_data_version(conn: &Connection) -> Result<i64, KvError> {
    conn.prepare_cached("pragma data_version")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(storage)
}

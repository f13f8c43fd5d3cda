//! The database's identity (see `open_deno_kv_engine_kit::identity`), in a table of this
//! crate's own beside Deno's:
//!
//! | table | columns |
//! |---|---|
//! | `odkv_database` | `k` (0), `id`: the 16 bytes of the database's [`DatabaseId`] |
//!
//! Made by the first writable open of this crate: with Deno's tables in a new file, or added to
//! a file Deno wrote (its own tables, their layout and its `migration_state` stay as they were,
//! so Deno opens the file as before: it looks only at its own tables). A read-only open never
//! writes, so a Deno-written file only ever read has no identity yet (`None`): its backups name
//! no database, and it keeps no change log (switching one on is a write, which makes the
//! identity first).
//!
//! Deno's `migration_state` stays Deno's (Deno refuses a version it does not know), so the table
//! needs no schema version of its own: it is there or not, and never changes once made. A build
//! of this crate from before identities opens such a file and ignores the table; the change
//! records it writes name no database, and a replay refuses them rather than trust them.

use open_deno_kv_engine_kit::{DatabaseId, KvError};
use rusqlite::{Connection, OptionalExtension};

use crate::store::storage;

const CREATE: &str = "create table if not exists odkv_database (
  k integer not null primary key check (k = 0),
  id blob not null check (length(id) = 16)
)";
const TABLE_EXISTS: &str =
    "select exists(select 1 from sqlite_master where type = 'table' and name = 'odkv_database')";
const READ: &str = "select id from odkv_database where k = 0";
const COUNT: &str = "select count(*) from odkv_database";
const INSERT: &str = "insert into odkv_database (k, id) values (0, ?1)";

/// Gives the file an identity if it has none; run by the writable open, in its migration's
/// transaction (a file that has one is not written to).
pub(crate) fn ensure(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(CREATE)?;
    let rows: i64 = conn.query_row(COUNT, [], |row| row.get(0))?;
    if rows == 0 {
        conn.execute(INSERT, [DatabaseId::random().as_bytes().as_slice()])?;
    }
    Ok(())
}

/// The file's identity, `None` if it has none yet (see the module documentation). Runs in the
/// caller's transaction, so an export reads it from its own snapshot.
pub(crate) fn read(conn: &Connection) -> Result<Option<DatabaseId>, KvError> {
    let exists: bool = conn
        .prepare_cached(TABLE_EXISTS)
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(storage)?;
    if !exists {
        return Ok(None);
    }
    let bytes: Option<Vec<u8>> = conn
        .prepare_cached(READ)
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)).optional())
        .map_err(storage)?;
    bytes
        .map(|bytes| {
            <[u8; 16]>::try_from(bytes.as_slice())
                .map(DatabaseId::from_bytes)
                .map_err(|_| KvError::Corrupt {
                    message: format!("odkv_database holds an identity of {} bytes", bytes.len()),
                })
        })
        .transpose()
}

/// The identity of a file the writable open already gave one: a logged commit names it.
pub(crate) fn of_writable(conn: &Connection) -> Result<DatabaseId, KvError> {
    read(conn)?.ok_or_else(|| KvError::Corrupt {
        message: "the odkv_database table lost its row (the database's identity)".into(),
    })
}

//! Deno's on-disk layout and its migrations (versions 1 to 3), so files are interchangeable.
//!
//! | table | columns |
//! |---|---|
//! | `migration_state` | `k` (0), `version` (3) |
//! | `data_version` | `k` (0), `version` (last commit), `seq` |
//! | `kv` (without rowid) | `k` encoded key, `v` value bytes, `v_encoding` 1/2/3, `version`, `seq`, `expiration_ms` (-1 = never), indexed |
//! | `queue` | `ts` ready time (ms), `id` UUID text, `data` V8 bytes, `backoff_schedule` JSON, `keys_if_undelivered` JSON |
//! | `queue_running` | `deadline` (ms), then as `queue` |
//!
//! The migrations are replayed as Deno wrote them (tables created, then columns added), so the
//! schema of a file made here reads exactly like one made by Deno.

use open_deno_kv_engine_kit::SchemaTooNew;
use rusqlite::{Connection, OptionalExtension};

use crate::error::SqliteError;

/// The newest schema this crate (and Deno 2.9) knows.
pub(crate) const SCHEMA_VERSION: i64 = 3;

const MIGRATIONS: [&str; 3] = [
    "
create table data_version (
  k integer primary key,
  version integer not null
);
insert into data_version (k, version) values (0, 0);
create table kv (
  k blob primary key,
  v blob not null,
  v_encoding integer not null,
  version integer not null
) without rowid;
",
    "
create table queue (
  ts integer not null,
  id text not null,
  data blob not null,
  backoff_schedule text not null,
  keys_if_undelivered blob not null,

  primary key (ts, id)
);
create table queue_running(
  deadline integer not null,
  id text not null,
  data blob not null,
  backoff_schedule text not null,
  keys_if_undelivered blob not null,

  primary key (deadline, id)
);
",
    "
alter table kv add column seq integer not null default 0;
alter table data_version add column seq integer not null default 0;
alter table kv add column expiration_ms integer not null default -1;
create index kv_expiration_ms_idx on kv (expiration_ms);
",
];

/// Brings a writable database up to [`SCHEMA_VERSION`], in one transaction. A database with a
/// newer schema is refused untouched, as is a file that holds other tables but no Deno KV state.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), SqliteError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute_batch(
        "create table if not exists migration_state(
  k integer not null primary key,
  version integer not null
)",
    )?;
    // The same verdict as the read-only look before the open, now under the write lock.
    let current = match inspect(&tx)? {
        Layout::Empty => 0,
        Layout::Deno { version } => version,
    };
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.execute_batch(migration)?;
        let version = index as i64 + 1;
        tx.execute(
            "insert into migration_state (k, version) values (0, ?1)
             on conflict(k) do update set version = excluded.version",
            [version],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// What an existing file holds, judged from a read-only look before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// No schema objects at all (a new or empty file): Deno's layout may be created in it.
    Empty,
    /// A Deno KV database at this migration version (at most [`SCHEMA_VERSION`]).
    Deno {
        /// The file's migration version.
        version: i64,
    },
}

/// The `kv` columns Deno's migrations leave, by migration version.
fn deno_kv_columns(version: i64) -> &'static [&'static str] {
    const V1: [&str; 4] = ["k", "v", "v_encoding", "version"];
    const V3: [&str; 6] = ["k", "v", "v_encoding", "version", "seq", "expiration_ms"];
    if version >= 3 { &V3 } else { &V1 }
}

/// Recognises a database without writing to it: an empty file, or a Deno KV database at a
/// version this crate knows. Anything else (another application's tables, a `kv` table of
/// another shape, a newer schema) is an error, and the caller must leave the file untouched.
pub(crate) fn inspect(conn: &Connection) -> Result<Layout, SqliteError> {
    let objects: i64 =
        conn.query_row("select count(*) from sqlite_master", [], |row| row.get(0))?;
    if objects == 0 {
        return Ok(Layout::Empty);
    }
    const TABLES: &str = "select name from sqlite_master where type = 'table' order by name";
    let tables = names(conn, TABLES)?;
    let has_table = |name: &str| tables.iter().any(|table| table == name);
    if !has_table("migration_state") {
        return Err(SqliteError::NotDenoKv {
            reason: format!(
                "it has no migration_state table (it holds: {})",
                tables.join(", ")
            ),
        });
    }
    let version: i64 = conn
        .query_row(
            "select version from migration_state where k = 0",
            [],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(0);
    SchemaTooNew::check(version, SCHEMA_VERSION)?;
    if version < 0 {
        return Err(SqliteError::NotDenoKv {
            reason: format!("its migration version is {version}"),
        });
    }
    if has_table("kv") {
        if version == 0 {
            return Err(SqliteError::NotDenoKv {
                reason: "it has a kv table but no migration state".into(),
            });
        }
        let columns = names(
            conn,
            "select name from pragma_table_info('kv') order by cid",
        )?;
        if columns != deno_kv_columns(version) {
            return Err(SqliteError::NotDenoKv {
                reason: format!(
                    "its kv table has the columns ({}), not Deno's at migration version {version}",
                    columns.join(", ")
                ),
            });
        }
    }
    Ok(Layout::Deno { version })
}

/// Checks a database opened read-only: it must already be a Deno KV database at the current
/// version.
pub(crate) fn check_readable(conn: &Connection) -> Result<(), SqliteError> {
    match inspect(conn)? {
        Layout::Empty => Err(SqliteError::NotDenoKv {
            reason: "it has no migration_state table".into(),
        }),
        Layout::Deno { version } if version < SCHEMA_VERSION => Err(SqliteError::NeedsMigration {
            found: version,
            supported: SCHEMA_VERSION,
        }),
        Layout::Deno { .. } => Ok(()),
    }
}

/// The first column of every row `sql` returns: names of tables or columns.
fn names(conn: &Connection, sql: &str) -> Result<Vec<String>, SqliteError> {
    let mut stmt = conn.prepare(sql)?;
    let names = stmt.query_map([], |row| row.get(0))?;
    Ok(names.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_database_reaches_version_three_with_denos_tables() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("select version from migration_state", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 3);
        let columns: Vec<String> = conn
            .prepare("select name from pragma_table_info('kv')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            columns,
            ["k", "v", "v_encoding", "version", "seq", "expiration_ms"]
        );
        migrate(&mut conn).unwrap(); // idempotent
    }

    #[test]
    fn newer_schema_is_refused_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        conn.execute("update migration_state set version = 4", [])
            .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert!(
            matches!(
                err,
                SqliteError::SchemaTooNew(SchemaTooNew {
                    found: 4,
                    supported: 3
                })
            ),
            "{err}"
        );
        let version: i64 = conn
            .query_row("select version from migration_state", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 4);
    }

    #[test]
    fn foreign_kv_table_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("create table kv (x integer)").unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(SqliteError::NotDenoKv { .. })
        ));
    }
}

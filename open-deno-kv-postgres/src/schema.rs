//! The store's tables: created on first open, recognised on every later one, brought up to
//! date (versions 1 and 2 to 3) on open, refused untouched when they are not ours or are newer than
//! this build.
//!
//! | table | holds |
//! |---|---|
//! | `kv_meta` | one row: `schema_version`, `data_version`, the last commit version handed out, `change_log_ms`, the change log's retention in ms (NULL: the log is off), and `database_id`, the 16 bytes of the database's identity (see `open_deno_kv_engine_kit::identity`), made with the store; every write transaction locks this row first, and reads the retention from it in the same statement |
//! | `kv` | entries: `k` (Deno's key encoding, `bytea`: ordered by `memcmp` then length, Deno's order), `v`, `v_encoding` (1 V8, 2 u64 little-endian, 3 bytes: Deno's numbering), `vs` (the 10-byte versionstamp), `expires_at` (ms, or NULL) |
//! | `kv_queue` | messages: `id`, `ready_at` (ms), `payload`, `keys_if_undelivered`, `backoff_ms` (the intervals left), and while a consumer holds it `lease` (a token) and `deadline` (ms) |
//! | `kv_commit_ids` | one row per committed group of writes: `version`, the version the group took, and `id`, a random id the committer chose before the transaction (primary key: both, in that order). Written in the group's own transaction, so that when the connection drops during `COMMIT` a fresh connection can tell whether the group landed (see `outcome.rs`); pruned once no lookup can need it |
//! | `kv_change_log` | the change log (see `open_deno_kv_engine_kit::change_log`): `vs`, the commit's 10-byte versionstamp (primary key: its byte order is commit order), `at`, the commit's time in ms (rounded down; what pruning compares), and `record`, the bytes of `ChangeRecord::encode` (its own layout, in open-deno-kv-model's `change_log/codec.rs`) |
//!
//! ## Versions
//!
//! - **1**: `kv_meta` (`id`, `schema_version`, `data_version`), `kv`, `kv_queue`.
//! - **2**: adds `kv_meta.change_log_ms` and the table `kv_change_log`. A writable open of a version 1
//!   store migrates it in one transaction (under the same advisory lock as the creation): a
//!   nullable column (a catalogue change, no table rewrite), an empty table, and the version.
//!   The log stays off until `configure_change_log` switches it on.
//! - **3**: adds `kv_meta.database_id` and the table `kv_commit_ids`. A writable open of an older
//!   store migrates it (after version 2's step, for a version 1 store) in the same transaction:
//!   the column, filled with a new random identity, then made `NOT NULL`; an empty table; the
//!   version.
//!
//! A build of version 1 refuses a newer store untouched: it finds `kv_meta` with a column
//! it does not know and reports the tables as not its own (`KvError::Corrupt`), before reading
//! the version; a build of version 2 refuses a version 3 store as [`SchemaTooNew`]. So an old build can never commit into a store whose log it would not keep; a
//! process of the old build that is still running when a new one migrates the store keeps
//! writing (its statements still fit) until it is restarted, so upgrade every process before
//! switching the log on. A build of version 2 refuses a version 3 store as [`SchemaTooNew`]
//! (it reads the version first); one still running when the store is migrated writes records
//! that name no database until it is restarted, and a replay refuses those rather than trust
//! them. A store of a version above 3 is refused as [`SchemaTooNew`] by this build, untouched,
//! whatever its shape.

use std::collections::BTreeMap;

use open_deno_kv_engine_kit::{DatabaseId, SchemaTooNew};
use tokio_postgres::{Client, Transaction};

use crate::PostgresError;
use crate::sql::Sql;

/// The layout version this build writes and reads. A store with a larger one is refused.
pub(crate) const SCHEMA_VERSION: i32 = 3;

/// A table's name and its columns (name, PostgreSQL type name), in order.
type Table = (&'static str, &'static [(&'static str, &'static str)]);

/// The `kv_meta` of version 1.
const META_V1: Table = (
    "kv_meta",
    &[
        ("id", "bool"),
        ("schema_version", "int4"),
        ("data_version", "int8"),
    ],
);

/// Every table of a version 1 store (`kv_change_log` and `kv_commit_ids` absent).
const TABLES_V1: [Table; 3] = [TABLES[0], META_V1, TABLES[2]];

/// The `kv_meta` of version 2.
const META_V2: Table = (
    "kv_meta",
    &[
        ("id", "bool"),
        ("schema_version", "int4"),
        ("data_version", "int8"),
        ("change_log_ms", "int8"),
    ],
);

/// Every table of a version 2 store (`kv_meta` without `database_id`, `kv_commit_ids` absent).
const TABLES_V2: [Table; 4] = [TABLES[0], META_V2, TABLES[2], TABLES[3]];

/// Every table of a store at [`SCHEMA_VERSION`] and its columns, in order.
const TABLES: [Table; 5] = [
    (
        "kv",
        &[
            ("k", "bytea"),
            ("v", "bytea"),
            ("v_encoding", "int2"),
            ("vs", "bytea"),
            ("expires_at", "int8"),
        ],
    ),
    (
        "kv_meta",
        &[
            ("id", "bool"),
            ("schema_version", "int4"),
            ("data_version", "int8"),
            ("change_log_ms", "int8"),
            ("database_id", "bytea"),
        ],
    ),
    (
        "kv_queue",
        &[
            ("id", "uuid"),
            ("ready_at", "int8"),
            ("payload", "bytea"),
            ("keys_if_undelivered", "_bytea"),
            ("backoff_ms", "_int4"),
            ("lease", "uuid"),
            ("deadline", "int8"),
        ],
    ),
    (
        "kv_change_log",
        &[("vs", "bytea"), ("at", "int8"), ("record", "bytea")],
    ),
    ("kv_commit_ids", &[("version", "int8"), ("id", "uuid")]),
];

/// Makes sure the store's tables exist at [`SCHEMA_VERSION`]: creates them when none of them
/// exists, migrates a version 1 or 2 store, and otherwise checks their shape and version without
/// changing anything. Returns the store's identity.
///
/// `read_only`: nothing is created or migrated (a role with only SELECT can open the store);
/// a missing store, or one that needs migrating, is refused as [`PostgresError::ReadOnlyOpen`].
pub(crate) async fn ensure(
    client: &mut Client,
    sql: &Sql,
    read_only: bool,
) -> Result<DatabaseId, PostgresError> {
    let tx = client.transaction().await?;
    // Two processes opening a new store at once: one creates, the other then finds the tables.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("open-deno-kv-postgres schema {}", sql.schema)],
    )
    .await?;
    let found = columns(&tx, &sql.schema).await?;
    if found.is_empty() && read_only {
        tx.rollback().await?;
        return Err(PostgresError::ReadOnlyOpen {
            schema: sql.schema.clone(),
            reason: "it holds no store, and a read-only open creates nothing: open it \
                     writable once (as a role that owns the schema)"
                .to_owned(),
        });
    }
    if found.is_empty() {
        // An existing schema is used as it is: the store's role then needs no privilege on the
        // database, only the ownership of its schema (`CREATE SCHEMA IF NOT EXISTS` would ask
        // for CREATE on the database even when the schema exists).
        let exists = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
                &[&sql.schema],
            )
            .await?
            .try_get::<_, bool>(0)?;
        if !exists {
            tx.batch_execute(&format!("CREATE SCHEMA \"{}\"", sql.schema))
                .await?;
        }
        tx.batch_execute(&create_tables(&sql.schema)).await?;
        let id = read_identity(&tx, sql).await?;
        tx.commit().await?;
        return Ok(id);
    }
    // The version first, when `kv_meta` has one: a newer store is refused as such, whatever
    // its shape.
    let has_version = found
        .get("kv_meta")
        .is_some_and(|c| c.iter().any(|(c, k)| c == "schema_version" && k == "int4"));
    let version = if has_version {
        Some(read_version(&tx, sql).await?)
    } else {
        None
    };
    match version {
        Some(found_version) if found_version > SCHEMA_VERSION => {
            tx.rollback().await?;
            Err(SchemaTooNew {
                found: found_version.into(),
                supported: SCHEMA_VERSION.into(),
            }
            .into())
        }
        Some(old @ (1 | 2)) if read_only => {
            tx.rollback().await?;
            Err(PostgresError::ReadOnlyOpen {
                schema: sql.schema.clone(),
                reason: format!(
                    "it is a store of version {old}, which a writable open migrates first"
                ),
            })
        }
        Some(old @ (1 | 2)) => {
            let (tables, newer): (&[Table], &[&str]) = if old == 1 {
                (&TABLES_V1, &["kv_change_log", "kv_commit_ids"])
            } else {
                (&TABLES_V2, &["kv_commit_ids"])
            };
            let checked = check_shape(&found, tables).and_then(|()| {
                match newer.iter().find(|table| found.contains_key(**table)) {
                    Some(table) => Err(PostgresError::NotOurs {
                        reason: format!("a table {table} is beside a store of version {old}"),
                    }),
                    None => Ok(()),
                }
            });
            if let Err(err) = checked {
                tx.rollback().await?;
                return Err(err);
            }
            if old == 1 {
                tx.batch_execute(&migrate_to_2(&sql.schema)).await?;
            }
            tx.batch_execute(&migrate_to_3(&sql.schema)).await?;
            let id = read_identity(&tx, sql).await?;
            tx.commit().await?;
            Ok(id)
        }
        Some(SCHEMA_VERSION) => {
            let checked = check_shape(&found, &TABLES);
            let id = match checked {
                Ok(()) => read_identity(&tx, sql).await,
                Err(err) => Err(err),
            };
            // Nothing was changed; end the transaction without committing anything.
            tx.rollback().await?;
            id
        }
        Some(other) => {
            tx.rollback().await?;
            Err(PostgresError::NotOurs {
                reason: format!("kv_meta records schema version {other}"),
            })
        }
        None => {
            tx.rollback().await?;
            // `kv_meta` is missing or has no version: the shape check names what differs.
            check_shape(&found, &TABLES).and(Err(PostgresError::NotOurs {
                reason: "kv_meta has no schema_version".to_owned(),
            }))
        }
    }
}

/// The statements that bring a version 1 store in `s` to version 2 (see the module docs).
fn migrate_to_2(s: &str) -> String {
    format!(
        "ALTER TABLE \"{s}\".kv_meta ADD COLUMN change_log_ms bigint CHECK (change_log_ms > 0);
         {log}
         UPDATE \"{s}\".kv_meta SET schema_version = 2;",
        log = create_log(s)
    )
}

/// The statements that bring a version 2 store in `s` to version 3 (see the module docs): a new
/// identity, and the table of commit ids.
fn migrate_to_3(s: &str) -> String {
    format!(
        "ALTER TABLE \"{s}\".kv_meta ADD COLUMN database_id bytea
           CHECK (length(database_id) = 16);
         UPDATE \"{s}\".kv_meta SET database_id = {id}, schema_version = 3;
         ALTER TABLE \"{s}\".kv_meta ALTER COLUMN database_id SET NOT NULL;
         {ids}",
        id = identity_literal(DatabaseId::random()),
        ids = create_commit_ids(s)
    )
}

/// A new identity as an SQL literal (hex digits this function writes: nothing from outside).
fn identity_literal(id: DatabaseId) -> String {
    let digits: String = id.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("'\\x{digits}'::bytea")
}

/// The identity `kv_meta` records.
async fn read_identity(tx: &Transaction<'_>, sql: &Sql) -> Result<DatabaseId, PostgresError> {
    let row = tx
        .query_one(
            &format!("SELECT database_id FROM \"{}\".kv_meta", sql.schema),
            &[],
        )
        .await?;
    let bytes: Vec<u8> = row.try_get(0)?;
    <[u8; 16]>::try_from(bytes.as_slice())
        .map(DatabaseId::from_bytes)
        .map_err(|_| PostgresError::NotOurs {
            reason: format!("kv_meta.database_id holds {} bytes", bytes.len()),
        })
}

/// The statement that creates the table of commit ids in `s`. The key starts with the version,
/// which grows with every commit: new rows go to the right edge of the index, and pruning
/// deletes a range from its left edge.
fn create_commit_ids(s: &str) -> String {
    format!(
        "CREATE TABLE \"{s}\".kv_commit_ids (
           version bigint NOT NULL,
           id uuid NOT NULL,
           PRIMARY KEY (version, id)
         );"
    )
}

/// The statement that creates the change log's table in `s`.
fn create_log(s: &str) -> String {
    format!(
        "CREATE TABLE \"{s}\".kv_change_log (
           vs bytea PRIMARY KEY CHECK (length(vs) = 10),
           at bigint NOT NULL,
           record bytea NOT NULL
         );"
    )
}

/// The statements that create the store's tables in `s` (at [`SCHEMA_VERSION`]).
fn create_tables(s: &str) -> String {
    format!(
        "CREATE TABLE \"{s}\".kv_meta (
           id boolean PRIMARY KEY DEFAULT true CHECK (id),
           schema_version integer NOT NULL,
           data_version bigint NOT NULL,
           change_log_ms bigint CHECK (change_log_ms > 0),
           database_id bytea NOT NULL CHECK (length(database_id) = 16)
         );
         INSERT INTO \"{s}\".kv_meta VALUES (true, {SCHEMA_VERSION}, 0, NULL, {id});
         CREATE TABLE \"{s}\".kv (
           k bytea PRIMARY KEY,
           v bytea NOT NULL,
           v_encoding smallint NOT NULL,
           vs bytea NOT NULL CHECK (length(vs) = 10),
           expires_at bigint
         );
         CREATE INDEX kv_expires_at ON \"{s}\".kv (expires_at) WHERE expires_at IS NOT NULL;
         CREATE TABLE \"{s}\".kv_queue (
           id uuid PRIMARY KEY,
           ready_at bigint NOT NULL,
           payload bytea NOT NULL,
           keys_if_undelivered bytea[] NOT NULL,
           backoff_ms integer[] NOT NULL,
           lease uuid,
           deadline bigint,
           CHECK ((lease IS NULL) = (deadline IS NULL))
         );
         CREATE INDEX kv_queue_ready ON \"{s}\".kv_queue (ready_at, id) WHERE lease IS NULL;
         CREATE INDEX kv_queue_deadline ON \"{s}\".kv_queue (deadline)
           WHERE lease IS NOT NULL;
         {log}
         {ids}",
        log = create_log(s),
        ids = create_commit_ids(s),
        id = identity_literal(DatabaseId::random()),
    )
}

/// The columns of our tables that exist in `schema`: table → [(column, type)].
async fn columns(
    tx: &Transaction<'_>,
    schema: &str,
) -> Result<BTreeMap<String, Vec<(String, String)>>, PostgresError> {
    let names: Vec<&str> = TABLES.iter().map(|(name, _)| *name).collect();
    let rows = tx
        .query(
            "SELECT table_name::text, column_name::text, udt_name::text \
             FROM information_schema.columns WHERE table_schema = $1 AND table_name = ANY($2) \
             ORDER BY table_name, ordinal_position",
            &[&schema, &names],
        )
        .await?;
    let mut found: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for row in rows {
        let (table, column, kind): (String, String, String) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        found.entry(table).or_default().push((column, kind));
    }
    Ok(found)
}

/// Every table present, each with exactly our columns.
fn check_shape(
    found: &BTreeMap<String, Vec<(String, String)>>,
    tables: &[Table],
) -> Result<(), PostgresError> {
    for &(table, expected) in tables {
        let Some(columns) = found.get(table) else {
            return Err(PostgresError::NotOurs {
                reason: format!("the table {table} is missing beside the others"),
            });
        };
        let same = columns.len() == expected.len()
            && columns
                .iter()
                .zip(expected)
                .all(|((c, k), (ec, ek))| c == ec && k == ek);
        if !same {
            let shown: Vec<String> = columns.iter().map(|(c, k)| format!("{c} {k}")).collect();
            return Err(PostgresError::NotOurs {
                reason: format!("the table {table} has other columns ({})", shown.join(", ")),
            });
        }
    }
    Ok(())
}

/// The schema version `kv_meta` records (its one row).
async fn read_version(tx: &Transaction<'_>, sql: &Sql) -> Result<i32, PostgresError> {
    let rows = tx
        .query(
            &format!("SELECT schema_version FROM \"{}\".kv_meta", sql.schema),
            &[],
        )
        .await?;
    let [row] = rows.as_slice() else {
        return Err(PostgresError::NotOurs {
            reason: format!("kv_meta holds {} rows instead of one", rows.len()),
        });
    };
    Ok(row.try_get(0)?)
}

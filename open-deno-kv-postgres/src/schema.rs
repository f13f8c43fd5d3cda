//! The store's tables: created on first open, recognised on every later one, refused untouched
//! when they are not ours or are newer than this build.
//!
//! | table | holds |
//! |---|---|
//! | `kv_meta` | one row: `schema_version`, and `data_version`, the last commit version handed out; every write transaction locks this row first |
//! | `kv` | entries: `k` (Deno's key encoding, `bytea`: ordered by `memcmp` then length, Deno's order), `v`, `v_encoding` (1 V8, 2 u64 little-endian, 3 bytes: Deno's numbering), `vs` (the 10-byte versionstamp), `expires_at` (ms, or NULL) |
//! | `kv_queue` | messages: `id`, `ready_at` (ms), `payload`, `keys_if_undelivered`, `backoff_ms` (the intervals left), and while a consumer holds it `lease` (a token) and `deadline` (ms) |

use std::collections::BTreeMap;

use open_deno_kv_proto::SchemaTooNew;
use tokio_postgres::{Client, Transaction};

use crate::PostgresError;
use crate::sql::Sql;

/// The layout version this build writes and reads. A store with a larger one is refused.
pub(crate) const SCHEMA_VERSION: i32 = 1;

/// Every table of a store and its columns (name, PostgreSQL type name), in order.
const TABLES: [(&str, &[(&str, &str)]); 3] = [
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
];

/// Makes sure the store's tables exist at [`SCHEMA_VERSION`]: creates them when none of them
/// exists; otherwise checks their shape and version without changing anything.
pub(crate) async fn ensure(client: &mut Client, sql: &Sql) -> Result<(), PostgresError> {
    let tx = client.transaction().await?;
    // Two processes opening a new store at once: one creates, the other then finds the tables.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("open-deno-kv-postgres schema {}", sql.schema)],
    )
    .await?;
    let found = columns(&tx, &sql.schema).await?;
    if found.is_empty() {
        tx.batch_execute(&create_tables(&sql.schema)).await?;
        tx.commit().await?;
        return Ok(());
    }
    let checked = check_shape(&found).and(check_version(&tx, sql).await);
    // Nothing was changed either way; end the transaction without committing anything.
    tx.rollback().await?;
    checked
}

/// The statements that create the store's tables in `s` (at [`SCHEMA_VERSION`]).
fn create_tables(s: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS \"{s}\";
         CREATE TABLE \"{s}\".kv_meta (
           id boolean PRIMARY KEY DEFAULT true CHECK (id),
           schema_version integer NOT NULL,
           data_version bigint NOT NULL
         );
         INSERT INTO \"{s}\".kv_meta VALUES (true, {SCHEMA_VERSION}, 0);
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
           WHERE lease IS NOT NULL;"
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
fn check_shape(found: &BTreeMap<String, Vec<(String, String)>>) -> Result<(), PostgresError> {
    for (table, expected) in TABLES {
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

async fn check_version(tx: &Transaction<'_>, sql: &Sql) -> Result<(), PostgresError> {
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
    let found: i32 = row.try_get(0)?;
    SchemaTooNew::check(found.into(), SCHEMA_VERSION.into())?;
    if found < 1 {
        return Err(PostgresError::NotOurs {
            reason: format!("kv_meta records schema version {found}"),
        });
    }
    // Version 1 is the only one so far: no migration to run.
    Ok(())
}

//! The tables of a open-deno-kv-redb file, and opening a file safely.
//!
//! | table | key | value | holds |
//! |---|---|---|---|
//! | `deno_kv.entries` | encoded Deno key | entry record (encoding, versionstamp, expiry, value) | every entry, in key order |
//! | `deno_kv.expiry` | expiry time + encoded key | `()` | one row per entry that expires, in time order, so sweeps walk only what is due |
//! | `deno_kv.queue_ready` | ready time + message id | message body | messages waiting for delivery, in due order |
//! | `deno_kv.queue_running` | message id | deadline + ready time + message body | messages handed to a consumer and not yet finished |
//! | `deno_kv.meta` | name | `u64` | `schema_version`, and `last_version`: a ceiling no versionstamp's version handed out exceeds (the exact last one after a clean close; see the `group` module); while the change log is on, `change_log_retention_ms` and, after an import, `change_log_floor` |
//! | `deno_kv.change_log` | versionstamp (10 bytes, so byte order is commit order) | [`open_deno_kv_engine_kit::change_log::ChangeRecord::encode`] | one record per commit while the change log is on (see [`crate::change_log`]); the table exists only then |
//!
//! Byte layouts are in [`crate::codec`]. Opening a file never modifies it before it has been
//! recognised: a file with a newer `schema_version`, or with other tables than these, is refused
//! untouched (the version is looked at first, so a newer layout's new tables are reported as a
//! newer schema, not as a foreign file).
//!
//! **The change log and older builds.** The change log did not change `schema_version` (still
//! 1): its table is optional, created when the log is switched on and dropped, with its `meta`
//! rows, when it is switched off. A file whose log is off is exactly what builds before the
//! change log wrote, and they open it. A file whose log is on holds `deno_kv.change_log`, which
//! those builds do not know: they refuse it untouched (as "not a Deno KV redb file: it has a
//! table named \"deno_kv.change_log\""), so they can never commit to it without logging and
//! break the log's chain unnoticed.

use std::path::Path;

use open_deno_kv_engine_kit::SchemaTooNew;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableHandle};

use crate::RedbError;

/// Entries by encoded key.
pub(crate) const ENTRIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("deno_kv.entries");
/// The expiry index: (expiry time, key) of every entry that expires.
pub(crate) const EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("deno_kv.expiry");
/// Messages waiting for delivery, by (ready time, id).
pub(crate) const QUEUE_READY: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("deno_kv.queue_ready");
/// Messages in flight, by id.
pub(crate) const QUEUE_RUNNING: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("deno_kv.queue_running");
/// Small named numbers.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("deno_kv.meta");
/// The change log: one record per commit, by versionstamp (see [`crate::change_log`]).
pub(crate) const CHANGE_LOG: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("deno_kv.change_log");

/// `meta` row: the layout version of the file.
pub(crate) const META_SCHEMA_VERSION: &str = "schema_version";
/// `meta` row: no versionstamp handed out has a larger version (commits after an open get larger
/// ones). The name is from when it held the exact last version, which it still does after a clean
/// close; files written either way read the same.
pub(crate) const META_LAST_VERSION: &str = "last_version";

/// `meta` row: the change log's retention in milliseconds; absent when the log is off.
pub(crate) const META_CHANGE_LOG_RETENTION_MS: &str = "change_log_retention_ms";
/// `meta` row: the version an import left while the change log was on (an import is not a
/// commit and has no record), so that numbering after a crash continues above it (see
/// [`crate::change_log::last_logged_version`]). Absent when the log is off.
pub(crate) const META_CHANGE_LOG_FLOOR: &str = "change_log_floor";

/// The layout this build writes and reads.
pub const SCHEMA_VERSION: u64 = 1;

const TABLE_NAMES: [&str; 6] = [
    "deno_kv.entries",
    "deno_kv.expiry",
    "deno_kv.queue_ready",
    "deno_kv.queue_running",
    "deno_kv.meta",
    "deno_kv.change_log",
];

/// Opens (or creates) the redb file at `path`, after recognising an existing file through a
/// read-only open, so that a foreign file or one from a newer build is refused before anything
/// is written to it (a writable open of a redb file may rewrite its header and allocator state
/// even if nothing is committed).
pub(crate) fn open_database(path: &Path, check_integrity: bool) -> Result<Database, RedbError> {
    let already_open = |err: redb::DatabaseError| match err {
        redb::DatabaseError::DatabaseAlreadyOpen => RedbError::AlreadyOpen {
            path: path.to_path_buf(),
        },
        other => RedbError::Redb(other.into()),
    };
    let existing = std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
    if existing {
        match Database::builder().open_read_only(path) {
            Ok(read_only) => {
                inspect(&read_only)?;
            }
            // A file left by a crash must be repaired by a writable open first; it is inspected
            // again right after (before anything of ours is written).
            Err(redb::DatabaseError::RepairAborted) => {}
            Err(err) => return Err(already_open(err)),
        }
    }
    let mut builder = Database::builder();
    builder.set_check_integrity_on_open(check_integrity);
    builder.create(path).map_err(already_open)
}

/// What a file holds, as far as opening it is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// No tables at all: a new file, to initialize.
    Empty,
    /// A open-deno-kv-redb file at [`SCHEMA_VERSION`].
    Current,
}

/// Recognises the file from a read transaction, without writing anything.
pub(crate) fn inspect(db: &dyn ReadableDatabase) -> Result<Layout, RedbError> {
    let txn = db.begin_read().map_err(redb::Error::from)?;
    let names: Vec<String> = txn
        .list_tables()
        .map_err(redb::Error::from)?
        .map(|handle| handle.name().to_owned())
        .collect();
    let multimaps = txn
        .list_multimap_tables()
        .map_err(redb::Error::from)?
        .count();
    if multimaps > 0 {
        return Err(RedbError::NotDenoKv {
            reason: "it has multimap tables".into(),
        });
    }
    if names.is_empty() {
        return Ok(Layout::Empty);
    }
    let foreign = names
        .iter()
        .find(|n| !TABLE_NAMES.contains(&n.as_str()))
        .map(|foreign| RedbError::NotDenoKv {
            reason: format!("it has a table named {foreign:?}"),
        });
    if !names.iter().any(|n| n == META.name()) {
        return Err(foreign.unwrap_or_else(|| RedbError::NotDenoKv {
            reason: "it has no deno_kv.meta table".into(),
        }));
    }
    // The version before the table names: a newer layout may have tables this build does not
    // know, and is reported as newer, not as foreign.
    let meta = txn.open_table(META).map_err(redb::Error::from)?;
    let found = meta
        .get(META_SCHEMA_VERSION)
        .map_err(redb::Error::from)?
        .map(|guard| guard.value())
        .ok_or_else(|| RedbError::NotDenoKv {
            reason: "deno_kv.meta has no schema_version".into(),
        })?;
    let recorded = i64::try_from(found).unwrap_or(i64::MAX);
    SchemaTooNew::check(recorded, SCHEMA_VERSION as i64)?;
    if let Some(foreign) = foreign {
        return Err(foreign);
    }
    match found {
        SCHEMA_VERSION => Ok(Layout::Current),
        older => Err(RedbError::NotDenoKv {
            reason: format!("unknown schema_version {older}"),
        }),
    }
}

/// Creates every table and the metadata rows of a new file, in `txn`.
pub(crate) fn initialize(txn: &redb::WriteTransaction) -> Result<(), redb::Error> {
    txn.open_table(ENTRIES)?;
    txn.open_table(EXPIRY)?;
    txn.open_table(QUEUE_READY)?;
    txn.open_table(QUEUE_RUNNING)?;
    let mut meta = txn.open_table(META)?;
    meta.insert(META_SCHEMA_VERSION, SCHEMA_VERSION)?;
    meta.insert(META_LAST_VERSION, 0)?;
    Ok(())
}

/// The version ceiling recorded in the file.
pub(crate) fn version_ceiling(txn: &redb::WriteTransaction) -> Result<u64, RedbError> {
    let meta = txn.open_table(META).map_err(redb::Error::from)?;
    let last = meta
        .get(META_LAST_VERSION)
        .map_err(redb::Error::from)?
        .map(|guard| guard.value());
    last.ok_or_else(|| RedbError::NotDenoKv {
        reason: "deno_kv.meta has no last_version".into(),
    })
}

//! Files that are not ours are refused untouched, and reading never needs to write.
//!
//! "Untouched" is checked on the bytes: the file is identical before and after, and no `-wal`,
//! `-shm` or `-journal` file appears beside it.

use std::path::{Path, PathBuf};

use open_deno_kv_conformance::unprivileged::{assert_succeeds_in_read_only_dirs, child_argument};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvError, KvValue, Mutation, ReadRange, SnapshotRead, encode_key,
    key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
use rusqlite::Connection;

fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Builds a SQLite file with `sql` in rollback-journal mode (SQLite's default), closed.
fn sqlite_file(dir: &tempfile::TempDir, sql: &str) -> PathBuf {
    let path = dir.path().join("app.db");
    let conn = Connection::open(&path).expect("create");
    conn.execute_batch(sql).expect("schema");
    conn.close().expect("close");
    path
}

/// Opens `path` writable, as `set`, `serve` and `watch` do, expects a refusal, and checks that
/// the file was not touched.
fn assert_refused_untouched(path: &Path) -> KvError {
    let before = std::fs::read(path).expect("read");
    let err = SqliteBackend::open(path).expect_err("a file that is not ours is refused");
    assert_eq!(
        std::fs::read(path).expect("read"),
        before,
        "the bytes changed"
    );
    for suffix in ["-wal", "-shm", "-journal"] {
        assert!(
            !side_file(path, suffix).exists(),
            "{suffix} was created beside a refused file"
        );
    }
    err
}

#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sqlite_file(
        &dir,
        "create table users (id integer primary key, name text);
         insert into users (name) values ('alice');",
    );
    let err = assert_refused_untouched(&path);
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("users"), "{err}");
}

#[test]
fn a_kv_table_of_another_shape_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sqlite_file(&dir, "create table kv (name text, payload blob);");
    let err = assert_refused_untouched(&path);
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");

    // With Deno's migration state, but columns Deno never wrote.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sqlite_file(
        &dir,
        "create table migration_state (k integer not null primary key, version integer not null);
         insert into migration_state values (0, 3);
         create table kv (k blob primary key, v blob not null) without rowid;",
    );
    let err = assert_refused_untouched(&path);
    assert!(err.to_string().contains("columns"), "{err}");
}

#[test]
fn a_newer_schema_in_rollback_journal_mode_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sqlite_file(
        &dir,
        "create table migration_state (k integer not null primary key, version integer not null);
         insert into migration_state values (0, 4);",
    );
    let err = assert_refused_untouched(&path);
    assert!(err.to_string().contains("newer"), "{err}");
}

/// A SQLite file without any table (as some tools create) is empty: Deno's layout goes in it.
#[tokio::test]
async fn an_empty_sqlite_file_gets_denos_layout() -> Result<(), KvError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sqlite_file(&dir, "pragma user_version = 0;");
    let kv = SqliteBackend::open(&path)?;
    let k = encode_key(&key!["a"])?;
    let write = AtomicWrite {
        mutations: vec![Mutation::set(k, KvValue::U64(1))],
        ..Default::default()
    };
    assert!(kv.atomic_write(write).await?.is_some());
    kv.close().await
}

fn read_only(path: &Path) -> Result<Checked<SqliteBackend>, KvError> {
    let options = SqliteOptions {
        read_only: true,
        ..Default::default()
    };
    SqliteBackend::open_with(path, options)
}

/// Writes `["a"] = 1` into a new database at `path` and closes it (WAL checkpointed away).
fn deno_file_with_one_entry(path: &Path) -> Result<(), KvError> {
    futures::executor::block_on(async {
        let kv = SqliteBackend::open(path)?;
        let write = AtomicWrite {
            mutations: vec![Mutation::set(encode_key(&key!["a"])?, KvValue::U64(1))],
            ..Default::default()
        };
        kv.atomic_write(write).await?;
        kv.close().await
    })
}

/// The read-only view, in the child: reads `["a"]`; prints the error if it fails.
fn read_one_entry(path: &Path) -> Result<u64, KvError> {
    futures::executor::block_on(async {
        let kv = read_only(path)?;
        let read = SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(encode_key(&key!["a"])?)],
            ..Default::default()
        };
        let out = kv.snapshot_read(read).await?;
        kv.close().await?;
        match out[0].entries.first().map(|entry| &entry.value) {
            Some(KvValue::U64(n)) => Ok(*n),
            other => Err(KvError::invalid_argument(format!("read {other:?}"))),
        }
    })
}

/// Issue 14, defect 11: a Deno file (WAL mode) in a directory the reader may not write is read
/// by the read-only view instead of failing with "attempt to write a readonly database".
#[test]
fn the_read_only_view_reads_a_file_in_a_read_only_directory() {
    if let Some(path) = child_argument() {
        match read_one_entry(Path::new(&path)) {
            Ok(1) => return,
            other => panic!("the read-only view failed: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let path = data.join("kv.sqlite3");
    deno_file_with_one_entry(&path).expect("write");
    assert!(!side_file(&path, "-wal").exists(), "closed cleanly");
    let before = std::fs::read(&path).expect("read");
    assert_succeeds_in_read_only_dirs(
        "the_read_only_view_reads_a_file_in_a_read_only_directory",
        &path,
        &[dir.path(), &data],
    );
    assert_eq!(std::fs::read(&path).expect("read"), before);
    assert!(!side_file(&path, "-shm").exists());
}

/// With commits still in the WAL, the main file alone is not the database: the read-only view
/// in a read-only directory refuses with an explanation instead of reading stale data.
#[test]
fn a_wal_with_commits_in_a_read_only_directory_is_explained() {
    if let Some(path) = child_argument() {
        match read_one_entry(Path::new(&path)) {
            Err(err) => {
                let text = err.to_string();
                assert!(text.contains("write-ahead log holds commits"), "{text}");
                return;
            }
            Ok(n) => panic!("read {n} while the WAL could not be read"),
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("live.sqlite3");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let path = data.join("kv.sqlite3");
    // A copy taken while the writer holds the file open: the entry is in the WAL only.
    futures::executor::block_on(async {
        let kv = SqliteBackend::open(&live)?;
        let write = AtomicWrite {
            mutations: vec![Mutation::set(encode_key(&key!["a"])?, KvValue::U64(1))],
            ..Default::default()
        };
        kv.atomic_write(write).await?;
        std::fs::copy(&live, &path).map_err(KvError::storage)?;
        std::fs::copy(side_file(&live, "-wal"), side_file(&path, "-wal"))
            .map_err(KvError::storage)?;
        kv.close().await
    })
    .expect("copy while open");
    assert!(
        std::fs::metadata(side_file(&path, "-wal"))
            .expect("wal")
            .len()
            > 0
    );
    assert_succeeds_in_read_only_dirs(
        "a_wal_with_commits_in_a_read_only_directory_is_explained",
        &path,
        &[dir.path(), &data],
    );
}

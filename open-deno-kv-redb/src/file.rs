//! The open redb file of one path, as every handle and the writer reach it, and how it is
//! (re)opened.
//!
//! - [`DbSlot`] holds the open database: writable (with a writer) or read-only (for reading
//!   commands, which must never change a file). Readers use it under a read lock; the writer
//!   swaps it under the write lock when it reopens the file.
//! - **Recovery from an I/O error.** After a failed write or sync, redb refuses every later
//!   operation with "Previous I/O error occurred" until the database is reopened: a server would
//!   answer errors forever, even once the disk has room again. So when a group fails with an
//!   I/O error the writer closes the database and opens the file again ([`DbSlot::reopen`]);
//!   redb then recovers it to its last durable commit. Reads wait for the swap (they hold the
//!   read lock). If the file cannot be opened again, the slot keeps the error: reads answer it,
//!   and the next write tries to reopen once more.
//! - [`OpenStorage`] is how a writable file is opened: redb's own file backend in production,
//!   a backend that fails on demand in this crate's tests.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use open_deno_kv_engine_kit::KvError;
use redb::{Database, ReadOnlyDatabase, ReadableDatabase};

use crate::error::RedbError;

/// Opens a redb file writable, creating it if needed.
pub(crate) trait OpenStorage: Send + Sync + 'static {
    /// Opens `path`. `first` is the open that starts using the file (it must recognise the file
    /// before writing to it); later ones reopen a file already recognised, after an I/O error.
    fn open(&self, path: &Path, first: bool, check_integrity: bool) -> Result<Database, RedbError>;
}

/// redb's own file backend.
pub(crate) struct FileStorage;

impl OpenStorage for FileStorage {
    fn open(&self, path: &Path, first: bool, check_integrity: bool) -> Result<Database, RedbError> {
        if first {
            crate::schema::open_database(path, check_integrity)
        } else {
            Database::builder()
                .create(path)
                .map_err(|err| RedbError::Redb(err.into()))
        }
    }
}

/// What a slot holds.
enum SlotState {
    Writable(Arc<Database>),
    ReadOnly(ReadOnlyDatabase),
    /// Reopening after an I/O error failed; reads answer this until a reopen succeeds.
    Failed(KvError),
    Closed,
}

/// The open database of one path; see the module docs.
pub(crate) struct DbSlot {
    path: PathBuf,
    storage: Arc<dyn OpenStorage>,
    state: RwLock<SlotState>,
}

impl DbSlot {
    /// Opens `path` writable through `storage`.
    pub(crate) fn open_writable(
        path: &Path,
        storage: Arc<dyn OpenStorage>,
        check_integrity: bool,
    ) -> Result<Self, KvError> {
        let db = storage.open(path, true, check_integrity)?;
        Ok(DbSlot {
            path: path.to_path_buf(),
            storage,
            state: RwLock::new(SlotState::Writable(Arc::new(db))),
        })
    }

    /// Opens `path` read-only: nothing is written to the file, and it is refused if it needs
    /// recovery, is not a open-deno-kv-redb file, or is from a newer build.
    pub(crate) fn open_read_only(path: &Path) -> Result<Self, KvError> {
        let db = match Database::builder().open_read_only(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::RepairAborted) => {
                return Err(RedbError::NeedsRecovery {
                    path: path.to_path_buf(),
                }
                .into());
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(RedbError::AlreadyOpen {
                    path: path.to_path_buf(),
                }
                .into());
            }
            Err(err) => return Err(RedbError::Redb(err.into()).into()),
        };
        if crate::schema::inspect(&db)? == crate::schema::Layout::Empty {
            return Err(RedbError::NotDenoKv {
                reason: "it has no tables (it was never initialised)".into(),
            }
            .into());
        }
        Ok(DbSlot {
            path: path.to_path_buf(),
            storage: Arc::new(FileStorage),
            state: RwLock::new(SlotState::ReadOnly(db)),
        })
    }

    fn state(&self) -> RwLockReadGuard<'_, SlotState> {
        // The state is replaced whole: a panic cannot leave it half-changed.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `read` on the open database (holding it meanwhile): [`KvError::Closed`] once the
    /// file is closed, the reopen error while recovery fails.
    pub(crate) fn with_readable<T>(
        &self,
        read: impl FnOnce(&dyn ReadableDatabase) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        match &*self.state() {
            SlotState::Writable(db) => read(db.as_ref()),
            SlotState::ReadOnly(db) => read(db),
            SlotState::Failed(err) => Err(err.clone()),
            SlotState::Closed => Err(KvError::Closed),
        }
    }

    /// The writable database, for the writer.
    pub(crate) fn writable(&self) -> Result<Arc<Database>, KvError> {
        match &*self.state() {
            SlotState::Writable(db) => Ok(db.clone()),
            SlotState::ReadOnly(_) => Err(KvError::ReadOnly),
            SlotState::Failed(err) => Err(err.clone()),
            SlotState::Closed => Err(KvError::Closed),
        }
    }

    /// Whether the last reopen failed (the writer tries again before its next group).
    pub(crate) fn has_failed(&self) -> bool {
        matches!(*self.state(), SlotState::Failed(_))
    }

    /// Closes the database and opens the file again (see the module docs). `before_close` runs
    /// under the write lock before the old database is dropped (to let go of what else holds
    /// it, such as a cached read snapshot). The caller must hold no reference to the database.
    pub(crate) fn reopen(&self, before_close: impl FnOnce()) -> Result<Arc<Database>, KvError> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(*state, SlotState::Closed | SlotState::ReadOnly(_)) {
            return Err(KvError::Closed);
        }
        before_close();
        // Dropping the last reference closes the file and releases its lock.
        *state = SlotState::Closed;
        match self.storage.open(&self.path, false, false) {
            Ok(db) => {
                let db = Arc::new(db);
                *state = SlotState::Writable(db.clone());
                Ok(db)
            }
            Err(err) => {
                let err = KvError::from(err);
                *state = SlotState::Failed(err.clone());
                Err(err)
            }
        }
    }

    /// Takes the database out (later reads fail with [`KvError::Closed`]), runs `before_close`
    /// (no read can start meanwhile), and closes the database if this was the last reference.
    pub(crate) fn close(&self, before_close: impl FnOnce()) -> Result<(), KvError> {
        let old = {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            let old = std::mem::replace(&mut *state, SlotState::Closed);
            before_close();
            old
        };
        match old {
            SlotState::Writable(db) => match Arc::try_unwrap(db) {
                Ok(db) => db.close().map_err(crate::error::storage),
                Err(_) => Ok(()),
            },
            SlotState::ReadOnly(db) => db.close().map_err(crate::error::storage),
            SlotState::Failed(_) | SlotState::Closed => Ok(()),
        }
    }
}

/// Whether `err` is redb's I/O failure, after which the database must be reopened.
pub(crate) fn needs_reopen(err: &KvError) -> bool {
    let KvError::Storage { source } = err else {
        return false;
    };
    matches!(
        source.downcast_ref::<RedbError>(),
        Some(RedbError::Redb(
            redb::Error::Io(_) | redb::Error::PreviousIo
        ))
    )
}

#[cfg(test)]
mod tests {
    //! Issue 14, defect 4: a failed write (a full disk) must not leave the backend answering
    //! "Previous I/O error occurred" forever. The file is opened through a backend that fails
    //! every write and sync while a switch is on, as a full disk would.

    use std::ops::Bound;
    use std::sync::atomic::{AtomicBool, Ordering};

    use open_deno_kv_engine_kit::{
        AtomicWrite, Backend, Checked, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
    };
    use redb::backends::FileBackend;
    use redb::{BackendError, StorageBackend};

    use super::*;
    use crate::{FileEngine, RedbBackend, RedbOptions};

    /// redb's file backend, with writes that fail while `full` is set.
    #[derive(Debug)]
    struct DiskThatFills {
        file: FileBackend,
        full: Arc<AtomicBool>,
    }

    impl DiskThatFills {
        fn check(&self) -> Result<(), std::io::Error> {
            if self.full.load(Ordering::SeqCst) {
                Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "No space left on device",
                ))
            } else {
                Ok(())
            }
        }
    }

    impl StorageBackend for DiskThatFills {
        fn len(&self) -> Result<u64, std::io::Error> {
            self.file.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
            self.file.read(offset, out)
        }
        fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
            self.check()?;
            self.file.set_len(len)
        }
        fn sync_data(&self) -> Result<(), std::io::Error> {
            self.check()?;
            self.file.sync_data()
        }
        fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
            self.check()?;
            self.file.write(offset, data)
        }
        fn close(&self) -> Result<(), std::io::Error> {
            self.file.close()
        }
        fn try_lock_range(&self, a: Bound<u64>, b: Bound<u64>) -> Result<bool, BackendError> {
            self.file.try_lock_range(a, b)
        }
        fn try_lock_shared_range(
            &self,
            a: Bound<u64>,
            b: Bound<u64>,
        ) -> Result<bool, BackendError> {
            self.file.try_lock_shared_range(a, b)
        }
        fn lock_range(&self, a: Bound<u64>, b: Bound<u64>) -> Result<(), BackendError> {
            self.file.lock_range(a, b)
        }
        fn lock_shared_range(&self, a: Bound<u64>, b: Bound<u64>) -> Result<(), BackendError> {
            self.file.lock_shared_range(a, b)
        }
        fn unlock_range(&self, a: Bound<u64>, b: Bound<u64>) -> Result<(), BackendError> {
            self.file.unlock_range(a, b)
        }
        fn query_lock_range(&self, a: Bound<u64>, b: Bound<u64>) -> Result<bool, BackendError> {
            self.file.query_lock_range(a, b)
        }
    }

    /// Opens (and reopens) files on a [`DiskThatFills`] sharing one switch.
    struct FillingStorage {
        full: Arc<AtomicBool>,
    }

    impl OpenStorage for FillingStorage {
        fn open(&self, path: &Path, _first: bool, _check: bool) -> Result<Database, RedbError> {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .map_err(|err| RedbError::Redb(err.into()))?;
            let backend = DiskThatFills {
                file: FileBackend::new(file).map_err(|err| RedbError::Redb(err.into()))?,
                full: self.full.clone(),
            };
            Database::builder()
                .create_with_backend(backend)
                .map_err(|err| RedbError::Redb(err.into()))
        }
    }

    fn set(name: &str, n: u64) -> AtomicWrite {
        AtomicWrite {
            mutations: vec![Mutation::set(
                encode_key(&key![name]).expect("key"),
                KvValue::U64(n),
            )],
            ..Default::default()
        }
    }

    async fn names(kv: &Checked<RedbBackend>) -> Vec<String> {
        let read = SnapshotRead {
            ranges: vec![ReadRange::prefix(&key![], 100).expect("range")],
            ..Default::default()
        };
        let out = kv.snapshot_read(read).await.expect("read");
        out[0]
            .entries
            .iter()
            .map(|entry| {
                format!(
                    "{:?}",
                    open_deno_kv_engine_kit::decode_key(&entry.key).expect("key")
                )
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_succeed_again_once_the_disk_has_room() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kv.redb");
        let full = Arc::new(AtomicBool::new(false));
        let storage = Arc::new(FillingStorage { full: full.clone() });
        let kv =
            RedbBackend::open_with_storage(&path, RedbOptions::default(), storage).expect("open");
        kv.atomic_write(set("a", 1)).await.expect("write a");

        full.store(true, Ordering::SeqCst);
        for name in ["b", "c"] {
            let failed = kv.atomic_write(set(name, 2)).await;
            assert!(matches!(failed, Err(KvError::Storage { .. })), "{failed:?}");
        }

        full.store(false, Ordering::SeqCst);
        kv.atomic_write(set("d", 3))
            .await
            .expect("a write after the disk has room again");
        let expected = vec![format!("{:?}", key!["a"]), format!("{:?}", key!["d"])];
        assert_eq!(names(&kv).await, expected, "failed writes left nothing");
        kv.close().await.expect("a clean close");

        let reopened = RedbBackend::open(&path).expect("reopen");
        assert_eq!(names(&reopened).await, expected);
        reopened.close().await.expect("close");
    }
}

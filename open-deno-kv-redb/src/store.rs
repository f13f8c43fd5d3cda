//! One open file per process, shared by every handle on it.
//!
//! redb locks a file for one open [`Database`] at a time (a second open, even in the same
//! process, fails with "already open"). Deno programs open the same path several times, and the
//! conformance suite does too, so handles on one path share a [`Shared`]: one `Database`, one
//! writer, one set of watchers and queue wake-ups. A process-wide registry maps each
//! canonical path to its `Shared` while at least one handle on it is open.
//!
//! Lifecycle: [`acquire`] finds or opens the file and counts the handle; [`release`] uncounts it,
//! and the last one out stops the writer (which makes everything durable) and closes the
//! `Database`, all under the registry lock, so an open that follows a close always finds the
//! file unlocked and reads it afresh.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use open_deno_kv_engine_kit::{KvError, Notifier};
use redb::ReadableDatabase;

use crate::commit_clock::CommitClock;
use crate::error::RedbError;
use crate::file::{DbSlot, OpenStorage};
use crate::group::GroupState;
use crate::options::RedbOptions;
use crate::snapshot::{EntriesSnapshot, ReadSnapshot};
use crate::writer::Writer;

/// The state every handle on one file shares.
pub(crate) struct Shared {
    /// The registry key.
    key: PathBuf,
    /// The open file (closed once the last handle has closed it).
    db: Arc<DbSlot>,
    /// What all changes go through; `None` for a file open read-only.
    writer: Option<Writer>,
    /// Wake-ups for watches and queue consumers.
    pub(crate) notifier: Arc<Notifier>,
    /// The entries snapshot reads share until the next commit.
    snapshot: Arc<ReadSnapshot>,
    /// Which version the file holds, for exports (see [`crate::backup`]).
    commit_clock: Arc<CommitClock>,
    /// Numbers handles, so the writer knows whose messages are whose.
    next_owner: AtomicU64,
    /// Open handles; changed only under the registry lock.
    open_handles: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("path", &self.key)
            .field("open_handles", &self.open_handles.load(Ordering::Relaxed))
            .finish()
    }
}

impl Shared {
    /// Runs `read` on the open database (holding it open meanwhile), or fails with
    /// [`KvError::Closed`] once the file has been closed.
    pub(crate) fn with_db<T>(
        &self,
        read: impl FnOnce(&dyn ReadableDatabase) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        self.db.with_readable(read)
    }

    /// Runs `read` on the current snapshot of the entries (see [`crate::snapshot`]), or fails
    /// with [`KvError::Closed`] once the file has been closed.
    pub(crate) fn with_entries<T>(
        &self,
        read: impl FnOnce(&EntriesSnapshot) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        self.with_db(|db| read(&*self.snapshot.entries(db)?))
    }

    /// Runs `export` (the work of an export) on the open database for as long as it takes. A
    /// writable file is held by reference, so the writer's reopen after an I/O error does not
    /// wait for the export; a read-only one is held open until the export ends. Either way the
    /// close of the handle that runs it ends the export first (see [`Shared::shut_down`]).
    pub(crate) fn with_export_db<T>(
        &self,
        export: impl FnOnce(&dyn ReadableDatabase) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        if self.is_read_only() {
            self.with_db(export)
        } else {
            let db = self.db.writable()?;
            export(db.as_ref())
        }
    }

    /// The writable database, for an import.
    pub(crate) fn writable_db(&self) -> Result<Arc<redb::Database>, KvError> {
        self.db.writable()
    }

    /// Which version the file holds (see [`crate::backup`]).
    pub(crate) fn commit_clock(&self) -> &CommitClock {
        &self.commit_clock
    }

    /// Drops the shared entries snapshot after a commit made outside the writer (an import).
    pub(crate) fn invalidate_snapshot(&self) {
        self.snapshot.invalidate();
    }

    /// The writer, or [`KvError::ReadOnly`] for a file open read-only.
    pub(crate) fn writer(&self) -> Result<&Writer, KvError> {
        self.writer.as_ref().ok_or(KvError::ReadOnly)
    }

    /// Whether the file is open read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// Stops the writer (it settles and syncs everything) and closes the file: when this
    /// returns, nothing of this process holds the file, so an open anywhere finds it unlocked.
    /// (Exports and imports hold it too; each handle's close has ended its own before the last
    /// one gets here.)
    fn shut_down(&self) -> Result<(), KvError> {
        let stopped = self.writer.as_ref().map_or(Ok(()), |writer| writer.stop());
        // No read can start once the slot is closed, so none can cache a snapshot again. The
        // cached one is a read transaction: it must end before the file closes. The stopped
        // writer has let go of the database: closing here releases the file lock before the
        // registry lock.
        let closed = self.db.close(|| self.snapshot.invalidate());
        stopped.and(closed)
    }
}

/// Open files of this process, by canonical path.
static REGISTRY: LazyLock<Mutex<HashMap<PathBuf, Arc<Shared>>>> = LazyLock::new(Default::default);

fn registry() -> MutexGuard<'static, HashMap<PathBuf, Arc<Shared>>> {
    // Entries are inserted and removed whole: a panic elsewhere cannot leave the map inconsistent.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The path two opens of the same file agree on, even before the file exists.
fn registry_key(path: &Path) -> PathBuf {
    if let Ok(full) = std::fs::canonicalize(path) {
        return full;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(parent), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

/// Opens the file at `path` for a new handle (or joins the handles that already have it open),
/// through `storage` unless `options` ask for a read-only open. Returns the shared state and the
/// new handle's owner number.
pub(crate) fn acquire(
    path: &Path,
    options: &RedbOptions,
    storage: Arc<dyn OpenStorage>,
) -> Result<(Arc<Shared>, u64), KvError> {
    let key = registry_key(path);
    let mut registry = registry();
    let shared = match registry.get(&key) {
        Some(shared) if shared.is_read_only() && !options.read_only => {
            return Err(RedbError::OpenReadOnly {
                path: path.to_path_buf(),
            }
            .into());
        }
        Some(shared) => shared.clone(),
        None => {
            let shared = Arc::new(open_shared(path, key.clone(), options, storage)?);
            registry.insert(key, shared.clone());
            shared
        }
    };
    shared.open_handles.fetch_add(1, Ordering::AcqRel);
    let owner = shared.next_owner.fetch_add(1, Ordering::Relaxed);
    Ok((shared, owner))
}

fn open_shared(
    path: &Path,
    key: PathBuf,
    options: &RedbOptions,
    storage: Arc<dyn OpenStorage>,
) -> Result<Shared, KvError> {
    let notifier = Arc::new(Notifier::new());
    let snapshot = Arc::new(ReadSnapshot::default());
    let commit_clock = Arc::new(CommitClock::default());
    let (db, writer) = if options.read_only {
        (Arc::new(DbSlot::open_read_only(path)?), None)
    } else {
        let db = Arc::new(DbSlot::open_writable(
            path,
            storage,
            options.check_integrity_on_open,
        )?);
        let writer = Writer::start(GroupState::prepare(
            db.clone(),
            options.clock.clone(),
            options.durability,
            notifier.clone(),
            snapshot.clone(),
            commit_clock.clone(),
        )?)?;
        (db, Some(writer))
    };
    Ok(Shared {
        key,
        db,
        writer,
        notifier,
        snapshot,
        commit_clock,
        next_owner: AtomicU64::new(1),
        open_handles: AtomicU64::new(0),
    })
}

/// Uncounts a handle; the last one closes the file. Blocks while the writer finishes.
pub(crate) fn release(shared: &Arc<Shared>) -> Result<(), KvError> {
    let mut registry = registry();
    let before = shared.open_handles.fetch_sub(1, Ordering::AcqRel);
    if before > 1 {
        return Ok(());
    }
    if registry
        .get(&shared.key)
        .is_some_and(|s| Arc::ptr_eq(s, shared))
    {
        registry.remove(&shared.key);
    }
    // Still under the registry lock: a concurrent open of this path waits until the file is
    // closed, instead of finding it locked.
    let result = shared.shut_down();
    drop(registry);
    result
}

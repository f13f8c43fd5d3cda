//! The version the file holds, as the writer publishes it.
//!
//! The writer keeps the last version in memory and records only a ceiling in the file (see the
//! `group` module), so a read transaction alone does not say which commit it holds. The
//! [`CommitClock`] is a sequence lock around every commit that changes the file: the count is odd
//! while a commit lands. A reader that must know the version (an export) reads the count, the
//! version, opens its read transaction and reads the count again; the same even count both times
//! means no commit landed in between, so the transaction holds exactly that version. A reader
//! that meets a landing commit waits for that one commit (never for more); the writer never
//! waits for a reader.
//!
//! An import, which is not a commit, leaves its version here as a floor the writer continues
//! above when it next begins a group.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use open_deno_kv_engine_kit::KvError;
use redb::{ReadTransaction, ReadableDatabase};

use crate::error::storage;

/// How long an export waits before looking again at a commit that is landing.
const LANDING_POLL: Duration = Duration::from_micros(50);

/// Which version the file holds, published by the writer (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct CommitClock {
    /// Odd while a commit is landing.
    sequence: AtomicU64,
    /// The version of the last commit that landed.
    last_version: AtomicU64,
    /// A version an import left for the writer to continue above.
    floor: AtomicU64,
    /// Whether `floor` is new to the writer.
    floor_pending: AtomicBool,
}

impl CommitClock {
    /// A commit is about to land.
    pub(crate) fn landing(&self) {
        self.sequence.fetch_add(1, Ordering::SeqCst);
    }

    /// The commit begun by [`CommitClock::landing`] landed (or failed) and the file now holds
    /// `version`.
    pub(crate) fn landed(&self, version: u64) {
        self.last_version.store(version, Ordering::SeqCst);
        self.sequence.fetch_add(1, Ordering::SeqCst);
    }

    /// A read transaction and the version it holds.
    pub(crate) fn begin_read(
        &self,
        db: &dyn ReadableDatabase,
    ) -> Result<(ReadTransaction, u64), KvError> {
        loop {
            let before = self.sequence.load(Ordering::SeqCst);
            if before % 2 == 1 {
                std::thread::sleep(LANDING_POLL);
                continue;
            }
            let version = self.last_version.load(Ordering::SeqCst);
            let txn = db.begin_read().map_err(storage)?;
            if self.sequence.load(Ordering::SeqCst) == before {
                return Ok((txn, version));
            }
        }
    }

    /// The version of the last commit that landed.
    pub(crate) fn last_landed(&self) -> u64 {
        self.last_version.load(Ordering::SeqCst)
    }

    /// Leaves `version` for the writer to continue above.
    pub(crate) fn set_floor(&self, version: u64) {
        self.floor.fetch_max(version, Ordering::SeqCst);
        self.floor_pending.store(true, Ordering::SeqCst);
    }

    /// The floor an import left and the writer has not applied yet (the writer asks with its
    /// write transaction open, so an import that committed before is seen, and none can be
    /// running).
    pub(crate) fn pending_floor(&self) -> Option<u64> {
        self.floor_pending
            .load(Ordering::SeqCst)
            .then(|| self.floor.load(Ordering::SeqCst))
    }

    /// The writer applied the floor [`CommitClock::pending_floor`] gave.
    pub(crate) fn floor_applied(&self) {
        self.floor_pending.store(false, Ordering::SeqCst);
    }
}

//! The one trait every storage engine implements.
//!
//! A backend is what a program talks to: it stores entries ordered by their encoded keys, serves
//! consistent snapshots, and commits atomic writes in a total order with increasing
//! versionstamps. The engines of this workspace do not implement it themselves: each implements
//! the smaller [`crate::Engine`] trait (only what its storage does), and [`crate::Checked`], the
//! layer above every engine, implements `Backend` on top — the closed state, Deno's
//! [`crate::Limits`], the capability and read-only refusals — so every engine behaves alike.
//! Implement `Backend` directly only for a wrapper around another backend.
//!
//! The trait is object-safe, so a program can choose its engine at run time:
//!
//! ```
//! use std::sync::Arc;
//! use open_deno_kv_model::Backend;
//! fn takes_any_backend(_backend: Arc<dyn Backend>) {}
//! ```
//!
//! Engines that block (SQLite, redb) must do their blocking work off the async executor (for
//! example with `tokio::task::spawn_blocking` or a dedicated thread).

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::change_log::{ChangeLogStatus, ChangeRecord};
use crate::queue::{QueueMessageHandle, QueuedMessage};
use crate::watch::RangeWatchEvent;
use crate::{
    AtomicWrite, CommitResult, ImportSummary, IntegrityReport, KeyRange, KvError, RangeCount,
    ReadRangeOutput, Snapshot, SnapshotRead, Versionstamp, WatchKeyOutput,
};

/// What a backend offers beyond reads and writes, so a conformance suite (or a program) knows
/// what it may rely on. Every optional [`Backend`] method (one that answers
/// [`KvError::Unsupported`] where it is not offered) has its flag here, and a backend sets a flag
/// only when that method works; [`crate::Checked`] refuses the others without calling the
/// engine.
///
/// The struct is `#[non_exhaustive]` so new capabilities can be added without breaking engines:
/// build it from [`Capabilities::none`] and switch on what the engine offers.
///
/// ```
/// use open_deno_kv_model::Capabilities;
///
/// let caps = Capabilities::none().with_queues(true).with_watch(true);
/// assert!(caps.queues && caps.watch && !caps.durable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// Acknowledged commits survive the process (and can be reopened).
    pub durable: bool,
    /// [`Backend::dequeue_next_message`] works.
    pub queues: bool,
    /// [`Backend::queued_messages`] works.
    pub queue_inspection: bool,
    /// [`Backend::watch`] works.
    pub watch: bool,
    /// [`Backend::check_integrity`] works.
    pub integrity_check: bool,
    /// [`crate::MutationKind::DeleteRange`] is accepted in atomic writes (an extension of this
    /// project; a write holding one is refused otherwise).
    pub range_delete: bool,
    /// [`Backend::count_range`] works.
    pub count: bool,
    /// [`Backend::watch_range`] works.
    pub watch_range: bool,
    /// [`Backend::export_snapshot`] works: a consistent export of the whole store, for online
    /// backups.
    pub export: bool,
    /// [`Backend::import_snapshot`] works: a restore into a new or empty store.
    pub import: bool,
    /// The store can keep a change log ([`Backend::configure_change_log`],
    /// [`Backend::change_log_status`], [`Backend::read_change_log`]), for point-in-time
    /// restores (see [`crate::change_log`]).
    pub change_log: bool,
    /// The handle was opened read-only: writes and dequeues fail with [`KvError::ReadOnly`]
    /// (reads, watches, queue inspection and integrity checks still work).
    pub read_only: bool,
}

impl Capabilities {
    /// Nothing beyond reads and writes: a store that is not durable and whose optional methods
    /// all refuse. The starting point for every engine's capabilities.
    pub const fn none() -> Self {
        Capabilities {
            durable: false,
            queues: false,
            queue_inspection: false,
            watch: false,
            integrity_check: false,
            range_delete: false,
            count: false,
            watch_range: false,
            export: false,
            import: false,
            change_log: false,
            read_only: false,
        }
    }

    /// Sets [`Capabilities::durable`].
    pub const fn with_durable(mut self, yes: bool) -> Self {
        self.durable = yes;
        self
    }

    /// Sets [`Capabilities::queues`].
    pub const fn with_queues(mut self, yes: bool) -> Self {
        self.queues = yes;
        self
    }

    /// Sets [`Capabilities::queue_inspection`].
    pub const fn with_queue_inspection(mut self, yes: bool) -> Self {
        self.queue_inspection = yes;
        self
    }

    /// Sets [`Capabilities::watch`].
    pub const fn with_watch(mut self, yes: bool) -> Self {
        self.watch = yes;
        self
    }

    /// Sets [`Capabilities::integrity_check`].
    pub const fn with_integrity_check(mut self, yes: bool) -> Self {
        self.integrity_check = yes;
        self
    }

    /// Sets [`Capabilities::range_delete`].
    pub const fn with_range_delete(mut self, yes: bool) -> Self {
        self.range_delete = yes;
        self
    }

    /// Sets [`Capabilities::count`].
    pub const fn with_count(mut self, yes: bool) -> Self {
        self.count = yes;
        self
    }

    /// Sets [`Capabilities::watch_range`].
    pub const fn with_watch_range(mut self, yes: bool) -> Self {
        self.watch_range = yes;
        self
    }

    /// Sets [`Capabilities::export`].
    pub const fn with_export(mut self, yes: bool) -> Self {
        self.export = yes;
        self
    }

    /// Sets [`Capabilities::import`].
    pub const fn with_import(mut self, yes: bool) -> Self {
        self.import = yes;
        self
    }

    /// Sets [`Capabilities::change_log`].
    pub const fn with_change_log(mut self, yes: bool) -> Self {
        self.change_log = yes;
        self
    }

    /// Backups and restores ([`Capabilities::export`] and [`Capabilities::import`]), both on or
    /// both off.
    pub const fn with_backup(self, yes: bool) -> Self {
        self.with_export(yes).with_import(yes)
    }

    /// The three operations beyond Deno KV ([`Capabilities::range_delete`],
    /// [`Capabilities::count`], [`Capabilities::watch_range`]), all on or all off.
    pub const fn with_beyond_deno(self, yes: bool) -> Self {
        self.with_range_delete(yes)
            .with_count(yes)
            .with_watch_range(yes)
    }

    /// Sets [`Capabilities::read_only`].
    pub const fn with_read_only(mut self, yes: bool) -> Self {
        self.read_only = yes;
        self
    }

    /// Every flag that is on in `self` or in `other`: what two needs need together.
    ///
    /// ```
    /// use open_deno_kv_model::Capabilities;
    /// let needed = Capabilities::none()
    ///     .with_watch(true)
    ///     .union(Capabilities::none().with_queues(true));
    /// assert!(needed.watch && needed.queues && !needed.count);
    /// ```
    pub const fn union(self, other: Capabilities) -> Self {
        Capabilities {
            durable: self.durable || other.durable,
            queues: self.queues || other.queues,
            queue_inspection: self.queue_inspection || other.queue_inspection,
            watch: self.watch || other.watch,
            integrity_check: self.integrity_check || other.integrity_check,
            range_delete: self.range_delete || other.range_delete,
            count: self.count || other.count,
            watch_range: self.watch_range || other.watch_range,
            export: self.export || other.export,
            import: self.import || other.import,
            change_log: self.change_log || other.change_log,
            read_only: self.read_only || other.read_only,
        }
    }

    /// Whether every flag that is on in `needed` is on here too: a backend with these
    /// capabilities offers everything `needed` names (the conformance suite runs a case only when
    /// the backend's capabilities cover what the case needs).
    ///
    /// ```
    /// use open_deno_kv_model::Capabilities;
    /// let store = Capabilities::durable_store(false);
    /// assert!(store.covers(Capabilities::none().with_queues(true).with_watch(true)));
    /// assert!(!Capabilities::none().covers(Capabilities::none().with_export(true)));
    /// ```
    pub fn covers(self, needed: Capabilities) -> bool {
        self.union(needed) == self
    }

    /// Every optional method (queues and their listing, watch, integrity checks, the operations
    /// beyond Deno KV, backups, the change log), on a store that is not durable and not
    /// read-only (open-deno-kv-memory; open-deno-kv-postgres adds [`Capabilities::durable`]).
    ///
    /// ```
    /// use open_deno_kv_model::Capabilities;
    /// let all = Capabilities::every_operation();
    /// assert!(all.queues && all.watch_range && all.import && all.change_log);
    /// assert!(!all.durable && !all.read_only);
    /// ```
    pub const fn every_operation() -> Self {
        Capabilities::none()
            .with_queues(true)
            .with_queue_inspection(true)
            .with_watch(true)
            .with_integrity_check(true)
            .with_beyond_deno(true)
            .with_backup(true)
            .with_change_log(true)
    }

    /// A durable store that offers every optional method (open-deno-kv-sqlite,
    /// open-deno-kv-redb, open-deno-kv-postgres): a read-only open reports
    /// [`Capabilities::read_only`] and consumes no queue, but still lists the queue, watches,
    /// counts, exports and checks its integrity (a range delete and an import are writes,
    /// refused as every write is).
    ///
    /// ```
    /// use open_deno_kv_model::Capabilities;
    /// let reader = Capabilities::durable_store(true);
    /// assert!(reader.read_only && !reader.queues && reader.queue_inspection && reader.watch);
    /// assert!(reader.export && !reader.import);
    /// ```
    pub const fn durable_store(read_only: bool) -> Self {
        Capabilities::none()
            .with_durable(true)
            .with_queues(!read_only)
            .with_queue_inspection(true)
            .with_watch(true)
            .with_integrity_check(true)
            .with_beyond_deno(true)
            .with_export(true)
            .with_import(!read_only)
            .with_read_only(read_only)
    }
}

/// Emissions of a watch: one `Vec` per change, with one [`WatchKeyOutput`] per watched key in the
/// order the keys were given. The stream ends when the backend closes.
pub type WatchStream = BoxStream<'static, Result<Vec<WatchKeyOutput>, KvError>>;

/// Events of a range watch ([`Backend::watch_range`]); see [`crate::watch::RangeWatchEvent`]
/// for what they mean. The stream ends when the backend closes.
pub type RangeWatchStream = BoxStream<'static, Result<RangeWatchEvent, KvError>>;

/// A Deno KV store as a program uses it.
///
/// After [`Backend::close`], reads, writes and new watches fail with [`KvError::Closed`], and
/// [`Backend::dequeue_next_message`] returns `Ok(None)` (a consumer loop simply ends). An
/// optional method a backend does not offer (its [`Capabilities`] flag is off) answers
/// [`KvError::Unsupported`].
///
/// Storage engines implement [`crate::Engine`] and are handed out as [`crate::Checked`], which
/// implements this trait for them. Implement it yourself only to wrap another backend; no method
/// has a default, so a wrapper forwards every optional method and cannot hide one by
/// forgetting it.
#[async_trait]
pub trait Backend: Send + Sync {
    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Reads every range of `read` from one consistent snapshot. Expired entries are never
    /// returned. The output has one [`ReadRangeOutput`] per range, in order.
    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError>;

    /// Commits `write` atomically. Returns `Ok(None)` if a check failed (nothing was applied):
    /// that is an answer, not an error. Errors mean the write was invalid or the store failed;
    /// nothing was applied either.
    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError>;

    /// Waits for the next due queue message and hands it out; `Ok(None)` once the backend is
    /// closed (including a dequeue already waiting when it closes).
    /// [`Capabilities::queues`] says whether it works.
    ///
    /// **Cancel-safe.** Dropping the returned future at any await point (a `select!` with a
    /// timeout, a client that went away) loses no message and parks none: a message the engine
    /// already took is given back, due again at once and without using up a retry, since no
    /// consumer saw it ([`crate::queue::DeliveryOutcome::Undelivered`]). Only a handle that
    /// reached the caller and is dropped unfinished counts as a failed delivery. Engines get this
    /// by guarding every take with a [`crate::queue::Delivery`] created in the step that takes the
    /// message, and by running [`crate::queue::next_delivery`].
    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError>;

    /// Every message in the queue, waiting or being delivered, ordered by ready time (messages
    /// being delivered count as ready now). For tools that inspect or copy a store (`kv stats`,
    /// `kv migrate`); it hands nothing out and changes nothing.
    /// [`Capabilities::queue_inspection`] says whether it works.
    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError>;

    /// Watches up to 10 encoded keys: the stream yields their current state at once, then again
    /// after commits that change any of them (intermediate states may be coalesced).
    /// [`Capabilities::watch`] says whether it works.
    fn watch(&self, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError>;

    /// Counts the visible entries of `range` and sums their key and value sizes, from one
    /// snapshot, without transferring values. Not part of Deno KV.
    /// [`Capabilities::count`] says whether it works.
    async fn count_range(&self, range: KeyRange) -> Result<RangeCount, KvError>;

    /// Watches every key in `range`: first [`RangeWatchEvent::Reread`], then the keys that
    /// commits change, with their new states, coalesced; a consumer that falls behind, or a
    /// change that cannot be named key by key, gets [`RangeWatchEvent::Reread`] again (see
    /// [`crate::watch::RangeWatchEvent`]). Not part of Deno KV.
    /// [`Capabilities::watch_range`] says whether it works.
    fn watch_range(&self, range: KeyRange) -> Result<RangeWatchStream, KvError>;

    /// Opens one read snapshot of the whole store and streams it: every visible entry in key
    /// order (value as stored, versionstamp, expiry), then every queued message, waiting or being
    /// delivered, with the versionstamp of the last commit the snapshot holds (see
    /// [`crate::backup`]). Writers keep committing meanwhile; the stream holds the engine's read
    /// snapshot, not a copy of the store, and dropping it releases that snapshot. Not part of
    /// Deno KV. [`Capabilities::export`] says whether it works.
    async fn export_snapshot(&self) -> Result<Snapshot, KvError>;

    /// Writes `snapshot` into this store, which must hold no entry and no message
    /// ([`KvError::NotEmpty`] otherwise), in one transaction: every entry keeps its versionstamp
    /// and expiry, every message its id, and the store's version counter is left at
    /// [`Snapshot::versionstamp`], so the next commit gets a later one (in a store that already
    /// handed out that version or a later one, the counter stays, never going back:
    /// [`crate::change_log::version_after_import`]). All or nothing: an
    /// error, a stream that fails or breaks the order rules ([`crate::backup::ordered_import`]),
    /// or a future dropped half-way leaves the store as it was. Writes to the store while the
    /// import runs wait for it (it holds the store's write lock or transaction): import into a
    /// store nothing else writes to yet. Not part of Deno KV.
    /// [`Capabilities::import`] says whether it works.
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError>;

    /// Switches the store's change log on, keeping records for `retention` (at least a second),
    /// or off (`None`), which deletes its records. The setting is stored in the database: every
    /// handle opened later keeps logging until it is switched off. Every commit after this call
    /// returns is logged, in the commit's own transaction (see [`crate::change_log`]). A write:
    /// refused on a read-only handle. Not part of Deno KV.
    /// [`Capabilities::change_log`] says whether it works.
    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError>;

    /// Whether the change log is on, with what retention, and which records it holds. Works on
    /// a read-only handle. Not part of Deno KV.
    /// [`Capabilities::change_log`] says whether it works.
    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError>;

    /// Up to `limit` records of the change log (at most [`crate::change_log::MAX_READ`]), the
    /// first ones after commit `after`, in commit order, from one snapshot. Empty when the log
    /// is off or holds nothing later. Works on a read-only handle. Not part of Deno KV.
    /// [`Capabilities::change_log`] says whether it works.
    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError>;

    /// Reads the whole store and reports what is damaged: the engine's structural check, then
    /// every entry and queued message decoded (see [`IntegrityReport`]). Problems found are the
    /// report's content, not an error; an error means the check itself could not run. It changes
    /// nothing, and works on a read-only handle.
    /// [`Capabilities::integrity_check`] says whether it works.
    async fn check_integrity(&self) -> Result<IntegrityReport, KvError>;

    /// Closes the backend: pending dequeues return `None`, watch streams end, and every later
    /// call fails with [`KvError::Closed`]. Durable backends flush what they acknowledged.
    async fn close(&self) -> Result<(), KvError>;
}

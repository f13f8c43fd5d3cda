//! The trait a storage engine implements: only what its storage does.

use std::time::Duration;

use crate::change_log::{ChangeLogStatus, ChangeRecord};
use crate::optional::Optional;
use crate::queue::{QueueMessageHandle, QueuedMessage};
use crate::{
    Capabilities, CommitResult, ImportSummary, IntegrityReport, KvError, RangeCount,
    RangeWatchStream, ReadRangeOutput, Snapshot, ValidatedRange, ValidatedRead, ValidatedWatch,
    ValidatedWrite, Versionstamp, WatchStream,
};

/// A storage engine, below the [`crate::Checked`] layer.
///
/// An engine stores entries ordered by their encoded keys, answers reads from one consistent
/// snapshot, and commits writes in a total order with increasing versionstamps (through
/// [`crate::apply_atomic_write`] or [`crate::stage_atomic_write`], so Deno's rules stay in
/// open-deno-kv-model). Everything every engine would otherwise repeat lives one layer up, in
/// [`crate::Checked`], which turns any engine into a [`crate::Backend`]:
///
/// - the handle's lifecycle: after [`crate::Backend::close`] reads, writes, watches and queue
///   inspection fail with [`KvError::Closed`] and dequeues return `Ok(None)`, without reaching the
///   engine; a second close does nothing;
/// - Deno's [`crate::Limits`]: an engine receives only [`ValidatedRead`], [`ValidatedWrite`] and
///   [`ValidatedWatch`] values, which nothing but the limits can build;
/// - the capability gate: an optional method whose [`Capabilities`] flag is off is refused with
///   [`KvError::Unsupported`] without calling the engine, and a handle reporting
///   [`Capabilities::read_only`] is refused writes and dequeues with [`KvError::ReadOnly`].
///
/// This is the split OpenDAL makes between its services and its correctness layer: a service
/// only talks to its storage, and one layer checks every request the same way for all of them.
///
/// The methods mirror [`crate::Backend`]'s, with validated requests, and the layer calls them
/// only on an open handle and only when [`Engine::capabilities`] offers them. The optional ones
/// default to refusing, so an engine implements just what it offers; blocking engines keep their
/// blocking work off the async executor, and every method stays cancel-safe as
/// [`crate::Backend`] requires.
///
/// An implementation writes the methods as plain `async fn`s (no `#[async_trait]`): the layer
/// is generic over its engine, so the engine's futures live inside the layer's own future rather
/// than in a box of their own (one allocation per call fewer; see BENCHMARKS.md, open-deno-kv-memory W7).
/// Each future must be `Send`, as the signatures say.
///
/// A small engine — an ordered map behind a mutex — looks like this (the starter engine,
/// `open-deno-kv-conformance/tests/minimal_backend.rs`, is the same with an injected clock, and runs the
/// whole conformance suite):
///
/// ```
/// use std::collections::BTreeMap;
/// use std::sync::{Arc, Mutex};
/// use open_deno_kv_engine_kit::{
///     Capabilities, Checked, CommitResult, Engine, KvEntry, KvError, Limits, ReadRangeOutput,
///     StoredEntry, SystemClock, ValidatedRead, ValidatedWrite, Versionstamp,
/// };
///
/// #[derive(Default)]
/// struct Entries(Mutex<(BTreeMap<Vec<u8>, StoredEntry>, u64)>);
///
/// impl Engine for Entries {
///     fn capabilities(&self) -> Capabilities {
///         Capabilities::none() // reads and writes only: the layer refuses the rest
///     }
///     async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
///         let data = self.0.lock().unwrap();
///         let now = chrono::Utc::now();
///         let scan = |range: &open_deno_kv_engine_kit::ReadRange| {
///             if range.start >= range.end {
///                 return ReadRangeOutput { entries: vec![] };
///             }
///             let found = data.0.range(range.start.clone()..range.end.clone());
///             let visible = |(k, e): (&Vec<u8>, &StoredEntry)| {
///                 (!e.is_expired(now)).then(|| KvEntry::from_stored(k.clone(), e.clone()))
///             };
///             let entries: Vec<KvEntry> = if range.reverse {
///                 found.rev().filter_map(visible).take(range.limit as usize).collect()
///             } else {
///                 found.filter_map(visible).take(range.limit as usize).collect()
///             };
///             ReadRangeOutput { entries }
///         };
///         Ok(read.ranges.iter().map(scan).collect())
///     }
///     async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
///         let mut data = self.0.lock().unwrap();
///         let versionstamp = Versionstamp::from_version(data.1 + 1, 0);
///         let map = &data.0;
///         let now = chrono::Utc::now();
///         let read = |key: &[u8]| Ok(map.get(key).cloned());
///         let Some(staged) = open_deno_kv_engine_kit::stage_atomic_write(read, &write, versionstamp, now)? else {
///             return Ok(None); // a check failed
///         };
///         for (key, entry) in staged.writes {
///             match entry {
///                 Some(entry) => data.0.insert(key, entry),
///                 None => data.0.remove(&key),
///             };
///         }
///         data.1 += 1;
///         Ok(Some(CommitResult { versionstamp }))
///     }
///     async fn close(&self) -> Result<(), KvError> {
///         Ok(())
///     }
/// }
///
/// // What a program gets: the engine under the layer, usable as `Arc<dyn Backend>`.
/// let backend: Arc<dyn open_deno_kv_engine_kit::Backend> =
///     Arc::new(Checked::new(Entries::default(), Limits::deno(), Arc::new(SystemClock)));
/// assert!(!backend.capabilities().queues);
/// ```
pub trait Engine: Send + Sync {
    /// What this engine supports; the layer gates the optional methods on it.
    fn capabilities(&self) -> Capabilities;

    /// Reads every range of `read` from one consistent snapshot, never returning an expired
    /// entry; one [`ReadRangeOutput`] per range, in order.
    fn snapshot_read(
        &self,
        read: ValidatedRead,
    ) -> impl Future<Output = Result<Vec<ReadRangeOutput>, KvError>> + Send;

    /// Commits `write` atomically, or answers `Ok(None)` when a check failed (nothing applied).
    /// Never called on a read-only handle.
    fn atomic_write(
        &self,
        write: ValidatedWrite,
    ) -> impl Future<Output = Result<Option<CommitResult>, KvError>> + Send;

    /// Waits for the next due message and hands it out; `Ok(None)` once the engine closed (a
    /// dequeue already waiting when [`Engine::close`] runs must return). Called only when
    /// [`Capabilities::queues`] is on and the handle is writable.
    fn dequeue_next_message(
        &self,
    ) -> impl Future<Output = Result<Option<Box<dyn QueueMessageHandle>>, KvError>> + Send {
        async { Err(Optional::Queues.refusal()) }
    }

    /// Every queued message, for inspection. Called only when
    /// [`Capabilities::queue_inspection`] is on.
    fn queued_messages(&self) -> impl Future<Output = Result<Vec<QueuedMessage>, KvError>> + Send {
        async { Err(Optional::QueueInspection.refusal()) }
    }

    /// Watches `keys` (usually with [`crate::watch_stream`]); the stream ends when the engine
    /// closes. Called only when [`Capabilities::watch`] is on.
    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        let _ = keys;
        Err(Optional::Watch.refusal())
    }

    /// Counts the visible entries of `range` and their sizes from one snapshot, natively (one
    /// `COUNT`, one scan of keys and value lengths), without reading values out. Called only when
    /// [`Capabilities::count`] is on.
    fn count_range(
        &self,
        range: ValidatedRange,
    ) -> impl Future<Output = Result<RangeCount, KvError>> + Send {
        let _ = range;
        async { Err(Optional::Count.refusal()) }
    }

    /// Watches every key of `range` (usually with [`crate::range_watch_stream`], over the same
    /// reader and signal as [`Engine::watch`]); the stream ends when the engine closes. Called
    /// only when [`Capabilities::watch_range`] is on.
    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        let _ = range;
        Err(Optional::WatchRange.refusal())
    }

    /// Streams the whole store from one read snapshot, with the versionstamp of the last commit
    /// it holds (see [`crate::Backend::export_snapshot`] and [`crate::backup`]; blocking engines
    /// use [`crate::backup::blocking_export`]). Writers must not wait for the export beyond one
    /// commit, and dropping the stream must release the snapshot. Called only when
    /// [`Capabilities::export`] is on.
    fn export_snapshot(&self) -> impl Future<Output = Result<Snapshot, KvError>> + Send {
        async { Err(Optional::Export.refusal()) }
    }

    /// Writes `snapshot` into the store in one transaction, refusing a store that holds any
    /// entry or message with [`KvError::NotEmpty`], and leaves the version counter at
    /// [`crate::change_log::version_after_import`] of [`Snapshot::versionstamp`] (see
    /// [`crate::Backend::import_snapshot`]). The layer has
    /// checked the items' order ([`crate::backup::ordered_import`]); an error item, or a stream
    /// that ends in error, must roll everything back. Called only when [`Capabilities::import`]
    /// is on and the handle is writable.
    fn import_snapshot(
        &self,
        snapshot: Snapshot,
    ) -> impl Future<Output = Result<ImportSummary, KvError>> + Send {
        let _ = snapshot;
        async { Err(Optional::Import.refusal()) }
    }

    /// Switches the change log on with `retention` (checked: at least a second) or off, and
    /// stores the setting (see [`crate::Backend::configure_change_log`]): from the time this
    /// returns, every commit writes its [`ChangeRecord`] in its own transaction, and the writer
    /// prunes by [`crate::change_log::PruneSchedule`]. Switching off deletes the records. Called
    /// only when [`Capabilities::change_log`] is on and the handle is writable.
    fn configure_change_log(
        &self,
        retention: Option<Duration>,
    ) -> impl Future<Output = Result<(), KvError>> + Send {
        let _ = retention;
        async { Err(Optional::ChangeLog.refusal()) }
    }

    /// The log's setting and extent (see [`crate::Backend::change_log_status`]). Called only
    /// when [`Capabilities::change_log`] is on.
    fn change_log_status(&self) -> impl Future<Output = Result<ChangeLogStatus, KvError>> + Send {
        async { Err(Optional::ChangeLog.refusal()) }
    }

    /// Up to `limit` records after commit `after`, in commit order, from one snapshot; the
    /// layer has clamped `limit` to 1..=[`crate::change_log::MAX_READ`]. Called only when
    /// [`Capabilities::change_log`] is on.
    fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ChangeRecord>, KvError>> + Send {
        let _ = (after, limit);
        async { Err(Optional::ChangeLog.refusal()) }
    }

    /// The engine's integrity check (see [`crate::Backend::check_integrity`]). Called only when
    /// [`Capabilities::integrity_check`] is on.
    fn check_integrity(&self) -> impl Future<Output = Result<IntegrityReport, KvError>> + Send {
        async { Err(Optional::IntegrityCheck.refusal()) }
    }

    /// Releases the engine: waiting dequeues return `Ok(None)`, watch streams end, a durable
    /// engine flushes what it acknowledged. The layer calls it at most once, after which it calls
    /// nothing else.
    fn close(&self) -> impl Future<Output = Result<(), KvError>> + Send;

    /// The handle is being dropped without [`Engine::close`] having been called: release what
    /// close would, without waiting (no await is possible here). Does nothing by default.
    fn close_on_drop(&self) {}
}

//! The [`Kv`] handle: `Deno.Kv` for Rust.

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::change_log::ChangeLogStatus;
use open_deno_kv_model::queue::QueuedMessage;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, CommitResult, Consistency, Key, KvError, RangeCount, ReadRange,
    SnapshotRead, encode_key,
};

use crate::atomic::AtomicOperation;
use crate::entry::MaybeEntry;
use crate::error::{Error, Result};
use crate::list::{ListOptions, ListStream, Selector};
use crate::open::BackendUrl;
use crate::outcome::CommitOutcome;
use crate::queue::{EnqueueOptions, ListenOptions, QueueHandler};
use crate::range_watch::RangeWatch;
use crate::value::{FromValue, IntoValue};
use crate::watch::WatchStream;

/// A Deno KV database: reads, writes, lists, atomic operations, queues and watches over any
/// [`Backend`]. Cheap to clone; clones share the backend.
///
/// ```no_run
/// # async fn demo() -> open_deno_kv::Result<()> {
/// use open_deno_kv::{Kv, key};
/// let kv = Kv::open("sqlite:./data.sqlite3").await?;
/// kv.set(key!["visits"], 0u64).await?;
/// kv.atomic().sum(key!["visits"], 1u64).commit().await?;
/// assert_eq!(kv.get(key!["visits"]).await?.value, Some(open_deno_kv::KvValue::U64(1)));
/// kv.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Kv {
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Kv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kv")
            .field("capabilities", &self.backend.capabilities())
            .finish()
    }
}

impl Kv {
    /// Opens the backend a URL names (see [`BackendUrl`]): `sqlite:PATH` (or a plain path),
    /// `redb:PATH`, `memory:`, `https://HOST:PORT/PATH` or `http://…`; Deno's `Deno.openKv(url)`. Each engine
    /// is a cargo feature of this crate (see the [crate documentation](crate)); a URL whose
    /// engine is not compiled in fails with [`Error::BadUrl`].
    ///
    /// Opening a file touches the disk (creating, recovering or migrating it); that work runs
    /// off the async executor (see [`open_deno_kv_engine_kit::run_blocking`]), so other tasks keep running.
    /// A remote database is reached at once, so a wrong token or an unreachable server fails
    /// here. Dropping the future before it finishes leaves nothing open.
    pub async fn open(url: &str) -> Result<Kv> {
        let url: BackendUrl = url.parse()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Ok(Kv::with_clock(url.connect(clock.clone()).await?, clock))
    }

    /// [`Kv::open`] for a program without an async runtime: opens on the calling thread, and
    /// reaches a remote database only at its first operation.
    pub fn open_blocking(url: &str) -> Result<Kv> {
        let url: BackendUrl = url.parse()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Ok(Kv::with_clock(url.open(clock.clone())?, clock))
    }

    /// A handle over a backend opened by the caller, on the system clock.
    pub fn new(backend: Arc<dyn Backend>) -> Kv {
        Kv::with_clock(backend, Arc::new(SystemClock))
    }

    /// A handle over `backend` that reads time (for `expire_in` and enqueue delays) from `clock`.
    /// Give it the same clock the backend was opened with.
    pub fn with_clock(backend: Arc<dyn Backend>, clock: Arc<dyn Clock>) -> Kv {
        Kv { backend, clock }
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The value at `key` and its versionstamp, or an entry with neither if the key is absent.
    pub async fn get(&self, key: impl Into<Key>) -> Result<MaybeEntry> {
        self.get_with(key, Consistency::Strong).await
    }

    /// [`Kv::get`] with an explicit consistency.
    pub async fn get_with(
        &self,
        key: impl Into<Key>,
        consistency: Consistency,
    ) -> Result<MaybeEntry> {
        let mut entries = self.get_many_with([key.into()], consistency).await?;
        entries.pop().ok_or_else(|| missing_output(1, 0))
    }

    /// Several keys (at most 10) from one consistent snapshot, in the order given.
    pub async fn get_many<K: Into<Key>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<MaybeEntry>> {
        self.get_many_with(keys, Consistency::Strong).await
    }

    /// [`Kv::get_many`] with an explicit consistency.
    pub async fn get_many_with<K: Into<Key>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        consistency: Consistency,
    ) -> Result<Vec<MaybeEntry>> {
        let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
        let ranges = keys
            .iter()
            .map(|key| Ok(ReadRange::single_encoded_key(encode_key(key)?)))
            .collect::<Result<Vec<_>>>()?;
        let read = SnapshotRead {
            ranges,
            consistency,
        };
        let outputs = self.backend.snapshot_read(read).await?;
        if outputs.len() != keys.len() {
            return Err(missing_output(keys.len(), outputs.len()));
        }
        Ok(keys
            .into_iter()
            .zip(outputs)
            .map(|(key, mut output)| MaybeEntry::new(key, output.entries.pop()))
            .collect())
    }

    /// Sets `key` to `value`: any [`IntoValue`] — a string, number, boolean, `u64`
    /// (`Deno.KvU64`), bytes (`Uint8Array`), [`serde_json::Value`], or [`crate::Json`] of any
    /// serde type (see [`crate::value`]).
    pub async fn set(&self, key: impl Into<Key>, value: impl IntoValue) -> Result<CommitResult> {
        self.commit_unchecked(self.atomic().set(key, value)).await
    }

    /// Sets `key` to `value`, to disappear `expire_in` from now (Deno's `expireIn`): after that
    /// no read returns it.
    pub async fn set_expiring(
        &self,
        key: impl Into<Key>,
        value: impl IntoValue,
        expire_in: Duration,
    ) -> Result<CommitResult> {
        self.commit_unchecked(self.atomic().set_expiring(key, value, expire_in))
            .await
    }

    /// Deletes `key` (nothing happens if it is absent).
    pub async fn delete(&self, key: impl Into<Key>) -> Result<()> {
        self.commit_unchecked(self.atomic().delete(key)).await?;
        Ok(())
    }

    /// Deletes every entry the selector covers in one commit with one versionstamp, however
    /// many there are (the engines delete the range natively: one SQL `DELETE`, one range drain).
    /// Not part of Deno KV: a backend without it (an older `kv serve`, Deno Deploy) refuses with
    /// [`KvError::Unsupported`] and deletes nothing. To combine it with checks or other mutations,
    /// use [`AtomicOperation::delete_range`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> open_deno_kv::Result<()> {
    /// use open_deno_kv::{Kv, Selector, key};
    /// let kv = Kv::open("memory:").await?;
    /// kv.set(key!["session", 1], "a").await?;
    /// kv.set(key!["session", 2], "b").await?;
    /// kv.set(key!["user", 1], "c").await?;
    /// kv.delete_range(Selector::prefix(key!["session"])).await?;
    /// assert_eq!(kv.count(Selector::prefix(key!["session"])).await?.entries, 0);
    /// assert_eq!(kv.count(Selector::prefix(key!["user"])).await?.entries, 1);
    /// # Ok(()) }
    /// ```
    pub async fn delete_range(&self, selector: Selector) -> Result<CommitResult> {
        self.commit_unchecked(self.atomic().delete_range(selector))
            .await
    }

    /// How many entries the selector covers, and how many bytes their keys and values take,
    /// from one snapshot and without reading the values out. Expired entries are not counted.
    /// Not part of Deno KV ([`KvError::Unsupported`] where the backend cannot count).
    pub async fn count(&self, selector: Selector) -> Result<RangeCount> {
        Ok(self.backend.count_range(selector.key_range()?).await?)
    }

    /// Watches every key the selector covers: see [`RangeWatch`]. Not part of Deno KV
    /// ([`KvError::Unsupported`] where the backend cannot).
    pub fn watch_range(&self, selector: Selector) -> Result<RangeWatch> {
        Ok(RangeWatch::new(
            self.backend.watch_range(selector.key_range()?)?,
        ))
    }

    /// Switches the store's change log on, keeping every commit's effects for `retention`, so
    /// that a backup can later be rolled forward to any commit within it (`kv restore --at`,
    /// [`open_deno_kv_model::change_log::restore`]). Calling it again changes the retention.
    /// The setting is stored in the database. Not part of Deno KV ([`KvError::Unsupported`] where
    /// the backend keeps no log: SQLite, redb and PostgreSQL do).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> open_deno_kv::Result<()> {
    /// use std::time::Duration;
    /// use open_deno_kv::{Kv, key};
    ///
    /// let dir = tempfile::tempdir().expect("a temporary directory");
    /// let kv = Kv::open(&format!("sqlite:{}", dir.path().join("kv.sqlite3").display())).await?;
    /// kv.enable_change_log(Duration::from_secs(7 * 24 * 3600)).await?;
    /// let commit = kv.set(key!["visits"], 1u64).await?;
    /// let status = kv.change_log_status().await?;
    /// assert_eq!(status.records, 1);
    /// assert_eq!(status.last.map(|mark| mark.versionstamp), Some(commit.versionstamp));
    /// kv.disable_change_log().await?; // and its records are deleted
    /// # kv.close().await }
    /// ```
    pub async fn enable_change_log(&self, retention: Duration) -> Result<()> {
        Ok(self.backend.configure_change_log(Some(retention)).await?)
    }

    /// Switches the change log off and deletes its records. Not part of Deno KV.
    pub async fn disable_change_log(&self) -> Result<()> {
        Ok(self.backend.configure_change_log(None).await?)
    }

    /// Whether the change log is on, its retention, and its first and last records. Not part
    /// of Deno KV.
    pub async fn change_log_status(&self) -> Result<ChangeLogStatus> {
        Ok(self.backend.change_log_status().await?)
    }

    /// Lists the entries a selector names, as a stream that fetches pages as it is read. Errors
    /// in the selector or the cursor are reported here, before anything is read.
    pub fn list(&self, selector: Selector, options: ListOptions) -> Result<ListStream> {
        ListStream::new(self.backend.clone(), &selector, options)
    }

    /// Starts an atomic operation: checks, mutations and enqueues committed together.
    pub fn atomic(&self) -> AtomicOperation {
        AtomicOperation::new(self.backend.clone(), self.clock.clone())
    }

    /// Enqueues `message` for [`Kv::listen_queue`] (in this process or any other sharing the
    /// store, Deno included).
    pub async fn enqueue(
        &self,
        message: impl IntoValue,
        options: EnqueueOptions,
    ) -> Result<CommitResult> {
        self.commit_unchecked(self.atomic().enqueue(message, options))
            .await
    }

    /// Hands every queue message to `handler` until the store closes, with the default
    /// [`ListenOptions`] (up to [`crate::DEFAULT_QUEUE_CONCURRENCY`] at a time, failures
    /// reported on standard error). At-least-once: a message whose handler fails (returns
    /// `Err` or panics) is delivered again after its back-off; see [`crate::queue`].
    ///
    /// The handler takes a [`KvValue`](crate::KvValue), or [`crate::Json`]`<T>` to get the
    /// payload deserialized.
    pub async fn listen_queue<T: FromValue>(&self, handler: impl QueueHandler<T>) -> Result<()> {
        self.listen_queue_with(ListenOptions::default(), handler)
            .await
    }

    /// [`Kv::listen_queue`] with options: concurrency, and where failures are reported.
    pub async fn listen_queue_with<T: FromValue>(
        &self,
        options: ListenOptions,
        handler: impl QueueHandler<T>,
    ) -> Result<()> {
        crate::queue::listen(self.backend.clone(), options, handler).await
    }

    /// Every queued message, waiting or being delivered, without taking any (for tools that
    /// inspect or copy a store). Backends that cannot list their queue refuse with
    /// [`KvError::Unsupported`].
    pub async fn queued_messages(&self) -> Result<Vec<QueuedMessage>> {
        Ok(self.backend.queued_messages().await?)
    }

    /// Watches up to 10 keys: see [`WatchStream`].
    pub fn watch<K: Into<Key>>(&self, keys: impl IntoIterator<Item = K>) -> Result<WatchStream> {
        let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
        let encoded = keys.iter().map(encode_key).collect::<Result<Vec<_>, _>>()?;
        Ok(WatchStream::new(self.backend.watch(encoded)?, keys))
    }

    /// Closes the store: listeners and watches end, later calls fail with
    /// [`KvError::Closed`]. Durable backends have everything acknowledged on disk.
    pub async fn close(&self) -> Result<()> {
        Ok(self.backend.close().await?)
    }

    /// Commits an operation that has no checks, so it cannot be refused by one.
    async fn commit_unchecked(&self, operation: AtomicOperation) -> Result<CommitResult> {
        match operation.commit().await? {
            CommitOutcome::Committed { versionstamp } => Ok(CommitResult { versionstamp }),
            CommitOutcome::CheckFailed => Err(Error::Kv(KvError::internal(
                "the backend reported a failed check for a write without checks",
            ))),
        }
    }

    /// A raw atomic write, as the backend takes it (for tools that build [`AtomicWrite`]s
    /// themselves); [`Kv::atomic`] is the usual way.
    pub async fn write(&self, write: AtomicWrite) -> Result<CommitOutcome> {
        Ok(self.backend.atomic_write(write).await?.into())
    }
}

fn missing_output(asked: usize, got: usize) -> Error {
    Error::Kv(KvError::internal(format!(
        "the backend answered {got} of {asked} ranges"
    )))
}

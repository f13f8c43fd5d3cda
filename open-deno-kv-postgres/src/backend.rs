//! [`PostgresBackend`]: the kit's [`Engine`] over the pieces of this crate; its constructors hand
//! it out behind [`Checked`], the layer that makes it a [`open_deno_kv_engine_kit::Backend`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::StreamExt;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::queue::{QueueMessageHandle, QueuedMessage};
use open_deno_kv_engine_kit::{
    Capabilities, Checked, CommitResult, Consistency, DatabaseId, Engine, ImportSummary,
    IntegrityReport, KvError, RangeCount, RangeWatchStream, ReadRangeOutput, Snapshot,
    ValidatedRange, ValidatedRead, ValidatedWatch, ValidatedWrite, Versionstamp, WatchReader,
    WatchStream, range_watch_stream, watch_stream,
};
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::committer::Committer;
use crate::connect::connect;
use crate::events::Events;
use crate::group::{WriteGroup, WriteRequest};
use crate::in_flight::{InFlight, PointRead};
use crate::outcome::MAX_OUTCOME_WAIT;
use crate::queue::{Queue, QueueContext};
use crate::sql::Sql;
use crate::target::Target;
use crate::{
    PostgresError, PostgresOptions, housekeeping, integrity, listener, reader, refusal, schema,
};

/// A Deno KV store in a PostgreSQL database; see the [crate docs](crate).
pub struct PostgresBackend {
    options: PostgresOptions,
    sql: Arc<Sql>,
    pool: Pool,
    replicas: Vec<Pool>,
    next_replica: AtomicUsize,
    /// The newest version this handle committed or read from a replica: eventual reads wait for
    /// a replica to reach it ([`PostgresOptions::read_your_writes`]).
    seen_version: Arc<AtomicU64>,
    committer: Committer<WriteGroup>,
    /// The group the committer is running: point reads of the keys it writes wait for it.
    in_flight: Arc<InFlight>,
    queue: Arc<Queue>,
    events: Arc<Events>,
    /// The listener, the settler and the housekeeping: stopped on close.
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The store's identity (`kv_meta.database_id`), read by the open: it never changes.
    identity: DatabaseId,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("schema", &self.sql.schema)
            .field("replicas", &self.replicas.len())
            .finish()
    }
}

impl PostgresBackend {
    /// Opens the store at `url` (`postgres://user[:password]@host[:port]/database`) with the
    /// default options; see [`PostgresBackend::open_with`].
    ///
    /// Besides what libpq's URLs say, the URL may name the store's `schema` (several stores
    /// share one database, each in a schema of its own) and `read_only`. TLS follows libpq:
    /// `sslmode` (`disable`, `prefer` — the default —, `require`, `verify-ca`, `verify-full`),
    /// `sslrootcert` (a PEM file of CA certificates, or `system`), `sslcert` and `sslkey` (a
    /// client certificate). A refused connection is reported as the [`PostgresError`] variant
    /// that names its cause (a wrong password, an unknown role or database, pg_hba.conf, too
    /// many connections, a standby, TLS), inside [`KvError::Storage`].
    pub async fn open(url: &str) -> Result<Checked<Self>, KvError> {
        Self::open_with(url, PostgresOptions::default()).await
    }

    /// Checks `url` as [`PostgresBackend::open_with`] would, without connecting: its form, its
    /// parameters (`sslmode`, `schema`, `read_only`, ...) and the certificate files it names,
    /// which are read. For programs that take the URL from configuration and want to refuse a
    /// bad one at start.
    pub fn check_url(url: &str) -> Result<(), PostgresError> {
        let parsed = crate::url::parse(url)?;
        if let Some(schema) = &parsed.schema {
            Sql::new(schema)?;
        }
        Ok(())
    }

    /// Opens the store at `url` in `options.schema`, creating its tables if none exists.
    ///
    /// Tables of this crate at a newer schema version are refused
    /// ([`PostgresError::SchemaTooNew`], as [`KvError::Storage`]), and tables with this crate's
    /// names but another shape are refused ([`KvError::Corrupt`]); both are left untouched. Must
    /// be called inside a tokio runtime, which then runs the handle's background tasks. The
    /// engine comes behind [`Checked`], which validates requests with `options.limits` at
    /// `options.clock`'s time and answers for a closed handle.
    pub async fn open_with(
        url: &str,
        mut options: PostgresOptions,
    ) -> Result<Checked<Self>, KvError> {
        // Everything given is checked (and every file read) before anything is connected to.
        let mut primary = crate::url::parse(url)?;
        if let Some(schema) = primary.schema.take() {
            options.schema = schema;
        }
        if let Some(read_only) = primary.read_only.take() {
            options.read_only = read_only;
        }
        if let Some(pool_size) = primary.pool_size.take() {
            options.pool_size = pool_size;
        }
        if options.commit_outcome_wait > MAX_OUTCOME_WAIT {
            return Err(PostgresError::InvalidOption {
                option: "commit_outcome_wait",
                reason: format!(
                    "{:?} is longer than the {MAX_OUTCOME_WAIT:?} the commit records are kept for",
                    options.commit_outcome_wait
                ),
            }
            .into());
        }
        let sql = Arc::new(Sql::new(&options.schema)?);
        let replica_targets = options
            .replica_urls
            .iter()
            .map(|url| replica_target(url, &options.schema))
            .collect::<Result<Vec<_>, PostgresError>>()?;
        let target = Arc::new(Target::new(primary));
        let mut client = connect(&target).await?;
        refusal::require_primary(&client, target.config()).await?;
        let identity = schema::ensure(&mut client, &sql, options.read_only)
            .await
            .map_err(|err| refusal::privilege(err, target.config(), &sql.schema))?;
        if !options.read_only {
            refusal::require_write_privileges(&client, target.config(), &sql.schema).await?;
        }
        drop(client);

        // A replica that refuses this handle's configuration (TLS, password, role, pg_hba)
        // would only ever send its reads to the primary, silently: refuse it now. One that is
        // merely down is tried again by each eventual read. All at once: an open waits at most
        // one connect timeout for replicas that do not answer.
        let tried = futures::future::join_all(replica_targets.iter().map(Target::connect)).await;
        for answer in tried {
            match answer {
                Err(err) if err.is_configuration_error() => return Err(err.into()),
                Ok(_) | Err(_) => {}
            }
        }
        let pool = new_pool(&target, options.pool_size)?;
        let replicas = replica_targets
            .into_iter()
            .map(|target| new_pool(&target, options.pool_size))
            .collect::<Result<Vec<_>, PostgresError>>()?;
        let events = Arc::new(Events::new());
        let origin = Uuid::new_v4().simple().to_string();
        let listener = listener::start(
            target.clone(),
            sql.channel.clone(),
            origin.clone(),
            events.clone(),
        )
        .await?;
        let seen_version = Arc::new(AtomicU64::new(0));
        let in_flight = Arc::new(InFlight::default());
        let group = WriteGroup::new(
            target,
            sql.clone(),
            events.clone(),
            origin.clone(),
            seen_version.clone(),
            identity,
            options.commit_outcome_wait,
            in_flight.clone(),
        );
        // The committer's task ends by itself once every handle to it is gone.
        let (committer, _) = Committer::start(group, options.max_group);
        let (queue, queue_tasks) = Queue::start(QueueContext {
            pool: pool.clone(),
            sql: sql.clone(),
            clock: options.clock.clone(),
            events: events.clone(),
            committer: committer.clone(),
            origin,
        });
        let mut tasks = vec![listener];
        tasks.extend(queue_tasks);
        // A read-only handle deletes nothing and holds no message: no sweep, no renewals.
        if !options.read_only {
            tasks.push(housekeeping::start(
                pool.clone(),
                sql.clone(),
                options.clock.clone(),
                Arc::downgrade(&queue),
            ));
        }
        let (limits, clock) = (options.limits.clone(), options.clock.clone());
        let engine = PostgresBackend {
            options,
            sql,
            pool,
            replicas,
            next_replica: AtomicUsize::new(0),
            seen_version,
            committer,
            in_flight,
            queue,
            events,
            tasks: Mutex::new(tasks),
            identity,
        };
        Ok(Checked::new(engine, limits, clock))
    }

    /// Reads watched keys' current entries from the primary, for key and range watches.
    fn watch_reader(&self) -> WatchReader {
        let pool = self.pool.clone();
        let sql = self.sql.clone();
        let clock = self.options.clock.clone();
        Arc::new(move |keys| {
            let (pool, sql, now) = (pool.clone(), sql.clone(), clock.now());
            Box::pin(async move { reader::read_watched(&pool, &sql, &keys, now).await })
        })
    }

    /// The replica an eventual read goes to next, if there are any.
    fn next_replica(&self) -> Option<&Pool> {
        if self.replicas.is_empty() {
            return None;
        }
        let turn = self.next_replica.fetch_add(1, Ordering::Relaxed);
        self.replicas.get(turn % self.replicas.len())
    }

    fn stop_tasks(&self) {
        self.events.signal.close();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for task in tasks {
            task.abort();
        }
    }
}

/// A replica's URL, parsed: its `schema`, if it names one, must be the store's.
fn replica_target(url: &str, schema: &str) -> Result<Target, PostgresError> {
    let mut parsed = crate::url::parse(url)?;
    match parsed.schema.take() {
        Some(named) if named != schema => Err(PostgresError::InvalidParameter {
            parameter: "schema".to_owned(),
            value: named,
            expected: format!(
                "a replica URL serves the primary's store: leave schema out, or name {schema:?}"
            ),
        }),
        _ => Ok(Target::new(parsed)),
    }
}

/// A pool of at most `size` connections to `target` (its TLS, its refusals).
fn new_pool(target: &Target, size: usize) -> Result<Pool, PostgresError> {
    let manager = Manager::from_connect(
        target.config().clone(),
        target.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .build()
        .map_err(|e| PostgresError::Pool(e.to_string()))
}

impl Engine for PostgresBackend {
    fn capabilities(&self) -> Capabilities {
        // A read-only handle reads the change log; switching it is a write, refused by
        // `Checked` as every write is.
        Capabilities::durable_store(self.options.read_only).with_change_log(true)
    }

    /// Strong reads go to the primary. Eventual reads go to a replica when there is one, in
    /// turn; with [`PostgresOptions::read_your_writes`] only once it has replayed what this handle
    /// committed or already read (else, after [`PostgresOptions::replica_wait`], to the primary).
    /// A replica that fails sends the read to the primary too. A `get` of a key that this
    /// handle's commit group is writing waits for the group, and one of a key it just wrote may
    /// wait for another read of that key and the write that follows it (the `in_flight` module).
    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let invoked = Instant::now();
        let now = self.options.clock.now();
        if read.consistency == Consistency::Eventual
            && let Some(replica) = self.next_replica()
        {
            let floor = if self.options.read_your_writes {
                self.seen_version.load(Ordering::Acquire)
            } else {
                0
            };
            let wait = self.options.replica_wait;
            let answer =
                reader::read_replica(replica, &self.sql, &read.ranges, now, floor, wait).await;
            if let Ok(Some(answer)) = answer {
                self.seen_version
                    .fetch_max(answer.version, Ordering::AcqRel);
                return Ok(answer.outputs);
            }
        }
        let leading = match self.in_flight.read(&read.ranges, invoked, now).await {
            PointRead::Answered(answer) => return Ok(answer),
            PointRead::Server(leading) => leading,
        };
        let answer = reader::read_ranges(&self.pool, &self.sql, &read.ranges, now).await;
        if let (Some(leading), Ok(outputs)) = (leading, &answer) {
            leading.answered(&read.ranges, outputs);
        }
        answer
    }

    /// Submits the write to this handle's committer, which commits it with the writes waiting
    /// beside it. [`PostgresError::OutcomeUnknown`] (as [`KvError::Storage`]) when the connection
    /// was lost during the commit.
    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        let request = WriteRequest {
            queued: Some(self.in_flight.queue(&write.mutations)),
            write,
            now: self.options.clock.now(),
            claim: None,
            invoked: Instant::now(),
        };
        self.committer.submit(request).await?
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        self.queue.next().await
    }

    /// Every entry and queued message decoded, from one snapshot (PostgreSQL guards its pages
    /// itself; see the `integrity` module).
    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        let sql = &self.sql;
        reader::with_fresh_retry(&self.pool, |client| integrity::check(client, sql)).await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        // This handle's own successes are in the listing's past.
        self.queue.flush_finished().await;
        reader::queued_messages(&self.pool, &self.sql, self.options.clock.now()).await
    }

    /// One `count(*)` of the queue table: PostgreSQL counts, no message is sent.
    async fn queue_depth(&self) -> Result<usize, KvError> {
        self.queue.flush_finished().await;
        reader::queue_depth(&self.pool, &self.sql).await
    }

    /// One `REPEATABLE READ` snapshot, read in keyset pages by a task of its own (see the
    /// `backup` module).
    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        // A backup through this handle does not bring back messages it finished.
        self.queue.flush_finished().await;
        let now = self.options.clock.now();
        let snapshot = crate::backup::export(self.pool.clone(), self.sql.clone(), now).await?;
        Ok(snapshot.of_database(Some(self.identity)))
    }

    /// One transaction holding the `kv_meta` lock; this handle's watches and consumers look
    /// again at once, other handles when the commit's notification reaches them.
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        let summary = crate::backup::import(&self.pool, &self.sql, snapshot).await?;
        self.events.notifier.notify_everything();
        Ok(summary)
    }

    /// Updates `kv_meta.change_log_ms` (deleting every record when switching off) in one
    /// transaction that takes the `kv_meta` row lock: every commit of any process that starts
    /// after this returns reads the new setting (see the `change_log` module).
    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        crate::change_log::configure(&self.pool, &self.sql, retention).await
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        let status = crate::change_log::status(&self.pool, &self.sql).await?;
        Ok(ChangeLogStatus {
            database: Some(self.identity),
            ..status
        })
    }

    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        crate::change_log::read(&self.pool, &self.sql, after, limit).await
    }

    /// The handle listens for other processes' commits while the stream lives (the `listener`
    /// module).
    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        let interested = self.events.interested();
        let stream = watch_stream(
            keys.into_inner(),
            self.watch_reader(),
            &self.events.signal,
            self.options.clock.clone(),
        );
        Ok(stream
            .map(move |emission| {
                let _alive = &interested;
                emission
            })
            .boxed())
    }

    async fn count_range(&self, range: ValidatedRange) -> Result<RangeCount, KvError> {
        reader::count_range(&self.pool, &self.sql, &range, self.options.clock.now()).await
    }

    /// The handle listens for other processes' commits while the stream lives.
    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        let interested = self.events.interested();
        let stream =
            range_watch_stream(range.into_inner(), self.watch_reader(), &self.events.signal);
        Ok(stream
            .map(move |event| {
                let _alive = &interested;
                event
            })
            .boxed())
    }

    /// Closes this handle: its watch streams end, its waiting dequeues return `None`, and its
    /// background tasks stop. Every acknowledged write is already committed, and the successes
    /// of its consumers not stored yet are stored now; messages it took ahead of any dequeue go
    /// back untouched. Messages it handed
    /// out and that are not finished count as failed deliveries, as open-deno-kv-sqlite does at close: they
    /// come back after their next back-off interval (or go to their dead-letter keys) rather than
    /// after their lease. If that cannot be stored (the server is unreachable), or the close is
    /// dropped half-way, they come back when their lease runs out, as a crashed consumer's do.
    async fn close(&self) -> Result<(), KvError> {
        self.stop_tasks();
        let released = self.queue.close().await;
        self.pool.close();
        for replica in &self.replicas {
            replica.close();
        }
        released
    }

    /// A handle dropped without close stops its background tasks (the messages its consumers
    /// hold come back when their leases run out, as a crashed consumer's do); the successes it
    /// recorded and the messages it took ahead are still stored and put back, by a task of their
    /// own (see [`Queue::close_in_background`]).
    fn close_on_drop(&self) {
        self.stop_tasks();
        self.queue.close_in_background();
    }
}

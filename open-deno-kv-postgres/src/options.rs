//! How a [`crate::PostgresBackend`] is opened.

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::{Clock, Limits, SystemClock};

/// Options of [`crate::PostgresBackend::open_with`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The clock expiry and queue times are read from (the system clock by default; tests use a
    /// [`open_deno_kv_engine_kit::ManualClock`]). Every process sharing a store should have a synchronised
    /// clock, as expiry times are absolute.
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// The PostgreSQL schema holding the store's tables (`public` by default): several stores
    /// can share one database under different schemas. A plain lowercase identifier of at most
    /// 40 characters. The URL's `schema` parameter, when given, replaces it.
    pub schema: String,
    /// URLs of read replicas (hot standbys of the primary). Reads asking for
    /// [`open_deno_kv_engine_kit::Consistency::Eventual`] go to them, in turn, and fall back to the primary when
    /// a replica fails; strong reads, writes, queues and watch always use the primary.
    pub replica_urls: Vec<String>,
    /// Read-your-writes for eventual reads (on by default). The handle remembers the newest
    /// version it committed, or read from a replica. A replica serves an eventual read only once
    /// it has replayed that version; until then the read waits for it up to
    /// [`PostgresOptions::replica_wait`], then goes to the primary. So eventual reads through one
    /// handle see every write acknowledged to it, and never go back in time; a write made through
    /// another handle (another process) may still be missing from a replica for a moment. Off, a
    /// replica answers with whatever it has replayed.
    pub read_your_writes: bool,
    /// How long an eventual read waits for a replica to catch up with this handle (see
    /// [`PostgresOptions::read_your_writes`]) before it reads from the primary instead. A replica
    /// on a healthy network replays a commit within a millisecond or two.
    pub replica_wait: Duration,
    /// Pooled connections to the primary (reads, queue traffic); the committer and the listener
    /// have one each besides. The URL's `pool_size` parameter sets it too.
    pub pool_size: usize,
    /// The most atomic writes one transaction of the committer takes together.
    pub max_group: usize,
    /// Open read-only (the URL's `read_only` parameter sets it too): writes, dequeues, imports
    /// and change log settings are refused with [`open_deno_kv_engine_kit::KvError::ReadOnly`],
    /// nothing is created, migrated or swept, so a role with only `USAGE` on the schema and
    /// `SELECT` on its tables can open the store. The store must exist.
    pub read_only: bool,
    /// How long the committer tries to find out whether a group committed when the connection
    /// was lost during its `COMMIT` (30 s by default, at most 5 minutes). It looks the group's
    /// record up on new connections; only when the server cannot be asked within this time do
    /// the group's writes fail with [`crate::PostgresError::OutcomeUnknown`]. Cover a failover
    /// of your setup (Patroni's is about 10 s with default settings).
    pub commit_outcome_wait: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            schema: "public".to_owned(),
            replica_urls: Vec::new(),
            read_your_writes: true,
            replica_wait: Duration::from_millis(50),
            pool_size: 8,
            max_group: 512,
            read_only: false,
            commit_outcome_wait: Duration::from_secs(30),
        }
    }
}

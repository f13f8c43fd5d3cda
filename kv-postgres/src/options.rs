//! How a [`crate::PostgresBackend`] is opened.

use std::sync::Arc;

use kv_proto::{Clock, Limits, SystemClock};

/// Options of [`crate::PostgresBackend::open_with`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The clock expiry and queue times are read from (the system clock by default; tests use a
    /// [`kv_proto::ManualClock`]). Every process sharing a store should have a synchronised
    /// clock, as expiry times are absolute.
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// The PostgreSQL schema holding the store's tables (`public` by default): several stores
    /// can share one database under different schemas. A plain lowercase identifier of at most
    /// 40 characters.
    pub schema: String,
    /// URLs of read replicas (hot standbys of the primary). Reads asking for
    /// [`kv_proto::Consistency::Eventual`] go to them, in turn, and fall back to the primary when
    /// a replica fails; strong reads, writes, queues and watch always use the primary.
    pub replica_urls: Vec<String>,
    /// Pooled connections to the primary (reads, queue traffic); the committer and the listener
    /// have one each besides.
    pub pool_size: usize,
    /// The most atomic writes one transaction of the committer takes together.
    pub max_group: usize,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            schema: "public".to_owned(),
            replica_urls: Vec::new(),
            pool_size: 8,
            max_group: 512,
        }
    }
}

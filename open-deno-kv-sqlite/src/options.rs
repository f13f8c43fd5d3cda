//! How a database is opened: the clock, the limits, read-only or not, and how hard commits are
//! pushed to disk.

use std::sync::Arc;

use open_deno_kv_engine_kit::{Clock, Limits, SystemClock};

/// How hard a commit is pushed to disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: every commit group with a write is synced; survives a machine
    /// crash. Queue bookkeeping (takes and settlements without a write) is committed with
    /// `synchronous = NORMAL` and synced by the next synced commit or within a second: a
    /// machine crash before then delivers the message again (`open_deno_kv_engine_kit::queue`, "Queue
    /// bookkeeping").
    #[default]
    Full,
    /// `synchronous = NORMAL` in WAL mode: survives a process crash; a machine crash may lose the
    /// last commits (never corrupts).
    Process,
}

/// How to open a database.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The clock expiry and queue times are read from.
    pub clock: Arc<dyn Clock>,
    /// Limits to enforce (Deno's by default).
    pub limits: Limits,
    /// Open without writing (no migration, no writer thread; writes fail with
    /// [`KvError::ReadOnly`]).
    pub read_only: bool,
    /// See [`Durability`].
    pub durability: Durability,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            clock: Arc::new(SystemClock),
            limits: Limits::deno(),
            read_only: false,
            durability: Durability::Full,
        }
    }
}

//! A pool of an engine's idle connections (read connections, mostly), reused across requests:
//! a request takes one or opens a new one, and gives it back after, up to a number kept idle.

use std::sync::{Mutex, PoisonError};

use crate::KvError;

/// Idle connections `C`, kept for reuse (see the module docs).
///
/// ```
/// use open_deno_kv_engine_kit::pool::Pool;
/// let pool: Pool<String> = Pool::new(1);
/// let open = || Ok(String::from("connection"));
/// let len = pool.with(open, |conn| Ok(conn.len())).unwrap();
/// assert_eq!(len, 10);
/// assert_eq!(pool.idle(), 1, "given back for the next request");
/// ```
#[derive(Debug)]
pub struct Pool<C> {
    idle: Mutex<Vec<C>>,
    max_idle: usize,
}

impl<C> Pool<C> {
    /// An empty pool that keeps at most `max_idle` connections; more are opened under load and
    /// closed (dropped) when given back.
    pub fn new(max_idle: usize) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }

    /// Runs `work` on an idle connection, or on one `open` makes if none is idle, then keeps
    /// the connection for the next request (whatever `work` answered).
    pub fn with<T>(
        &self,
        open: impl FnOnce() -> Result<C, KvError>,
        work: impl FnOnce(&mut C) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let pooled = self.lock().pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => open()?,
        };
        let result = work(&mut conn);
        let mut idle = self.lock();
        if idle.len() < self.max_idle {
            idle.push(conn);
        }
        result
    }

    /// How many connections are idle now.
    pub fn idle(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<C>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

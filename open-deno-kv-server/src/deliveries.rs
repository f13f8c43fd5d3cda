//! The queue messages handed out over the network and not yet finished (the `queue/1`
//! extension, [`crate::queue`]): each held under a delivery token until it is finished, its lease
//! runs out, or the server shuts down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use open_deno_kv_model::{Backend, QueueMessageHandle};
use tokio::time::Instant;
use uuid::Uuid;

struct Held {
    database: Uuid,
    handle: Box<dyn QueueMessageHandle>,
    deadline: Instant,
    /// Keeps the database open while the message is held (see [`crate::databases`]).
    _backend: Arc<dyn Backend>,
}

/// Messages handed out over the network and not yet finished, by delivery token. Clones share
/// the same table.
#[derive(Clone)]
pub(crate) struct Deliveries {
    held: Arc<Mutex<HashMap<String, Held>>>,
    lease: Duration,
}

impl Deliveries {
    pub(crate) fn new(lease: Duration) -> Self {
        Deliveries {
            held: Arc::new(Mutex::new(HashMap::new())),
            lease,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        // Single inserts and removals: a panic cannot leave the map half-updated.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn hold(
        &self,
        database: Uuid,
        backend: Arc<dyn Backend>,
        handle: Box<dyn QueueMessageHandle>,
    ) -> String {
        let token = Uuid::new_v4().simple().to_string();
        let held = Held {
            database,
            handle,
            deadline: Instant::now() + self.lease,
            _backend: backend,
        };
        self.lock().insert(token.clone(), held);
        token
    }

    pub(crate) fn take(&self, database: Uuid, token: &str) -> Option<Box<dyn QueueMessageHandle>> {
        let mut held = self.lock();
        if held.get(token)?.database != database {
            return None;
        }
        held.remove(token).map(|h| h.handle)
    }

    pub(crate) fn renew(&self, database: Uuid, tokens: Vec<String>) -> Vec<String> {
        let deadline = Instant::now() + self.lease;
        let mut held = self.lock();
        tokens
            .into_iter()
            .filter(|token| match held.get_mut(token) {
                Some(h) if h.database == database => {
                    h.deadline = deadline;
                    false
                }
                _ => true,
            })
            .collect()
    }

    /// Removes the deliveries whose lease has passed (dropped by the caller, outside the lock:
    /// dropping a handle settles it as failed).
    pub(crate) fn expired(&self, now: Instant) -> Vec<Box<dyn QueueMessageHandle>> {
        let mut held = self.lock();
        let gone: Vec<String> = held
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(token, _)| token.clone())
            .collect();
        gone.iter()
            .filter_map(|token| held.remove(token).map(|h| h.handle))
            .collect()
    }

    /// How many deliveries are held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().len()
    }

    /// Lets go of every delivery (server shutdown): each counts as failed and is retried.
    pub(crate) fn release_all(&self) {
        let all: Vec<Held> = self.lock().drain().map(|(_, h)| h).collect();
        drop(all);
    }
}

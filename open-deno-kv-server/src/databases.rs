//! Which database a request means.
//!
//! A database is chosen at the metadata exchange by the URL path, and on the data path by the
//! `x-denokv-database-id` header carrying the id the exchange handed out:
//!
//! | metadata path | database | id |
//! |---|---|---|
//! | `/` | the default database | the nil UUID (as denokv) |
//! | `/db/NAME` | a named database (a fixed map, or opened on first use by the opener, e.g. one file per name in a directory) | derived from the name, stable across restarts |
//! | `/ephemeral`, `/ephemeral/`, `/ephemeral/...:memory:` | a fresh in-memory database **per connection**: the first exchange on a connection creates it, later exchanges on that connection (Deno's refresher) get the same one, and it is closed when the connection ends | random |
//! | `/ephemeral/ANY-OTHER-REST` | an in-memory "scratch" database shared by every connection naming the same rest, kept while the server runs | derived from the rest |
//!
//! NAME is 1–64 characters of `A–Z a–z 0–9 _ -` (no dots, no slashes: it may become a file name).
//! The `/ephemeral/` paths exist only when enabled ([`crate::ServerConfig::ephemeral`]).
//!
//! **Opened `/db/NAME` databases are bounded** (each may cost a writer thread, descriptors and
//! caches). At most [`crate::ResourceLimits::max_open_databases`] are open at once, and one that
//! nobody uses — no request in progress, no watch stream, no queue message held over the network
//! (each of those holds the backend) — is closed after
//! [`crate::ResourceLimits::database_idle_timeout`], and reopened by the opener on its next use
//! (its id stays valid). Opening one more when the cap is reached first closes the least recently
//! used idle one; when every open one is in use the request is refused
//! ([`Opened::TooManyOpen`], a `503` naming the cap). The default database, fixed named databases
//! ([`Databases::with_named`]) and scratch databases are never closed while the server runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use open_deno_kv_engine_kit::SystemClock;
use open_deno_kv_model::{Backend, KvError};
use tokio::time::Instant;
use uuid::Uuid;

/// Opens the named database `name` (called on first use, and again after it was closed for being
/// idle).
pub type DatabaseOpener = Arc<dyn Fn(&str) -> Result<Arc<dyn Backend>, KvError> + Send + Sync>;

/// The most scratch databases one server keeps (each is an in-memory store).
pub const MAX_SCRATCH_DATABASES: usize = 1024;

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened<T> {
    /// The database, open.
    Ready(T),
    /// No such database.
    Unknown,
    /// The database exists but is not open, and [`crate::ResourceLimits::max_open_databases`]
    /// databases are open and in use: try again later.
    TooManyOpen {
        /// The cap.
        cap: usize,
    },
}

/// The databases a server offers; see the [module documentation](self).
pub struct Databases {
    default: Arc<dyn Backend>,
    opener: Option<DatabaseOpener>,
    state: Mutex<State>,
    /// See [`crate::ResourceLimits::max_open_databases`] (set by the server at start).
    pub(crate) max_open: usize,
    /// See [`crate::ResourceLimits::database_idle_timeout`] (set by the server at start).
    pub(crate) idle_timeout: Duration,
}

#[derive(Default)]
struct State {
    /// Open databases by id (the default under the nil id).
    open: HashMap<Uuid, Slot>,
    /// Every named database ever handed out, fixed or through the opener.
    named: HashMap<String, Uuid>,
    /// The names of the opener's databases by id, to reopen one closed for being idle.
    opener_names: HashMap<Uuid, String>,
    /// Opener databases being opened right now (they count against the cap).
    opening: usize,
    scratch: HashMap<String, Uuid>,
}

struct Slot {
    backend: Arc<dyn Backend>,
    last_used: Instant,
    /// Opened through the opener: closed when idle, counted against the cap.
    closable: bool,
}

impl State {
    fn open_closable(&self) -> usize {
        self.open.values().filter(|slot| slot.closable).count()
    }

    /// Removes the least recently used closable database nobody holds, if there is one.
    fn evict_idle(&mut self) -> Option<Arc<dyn Backend>> {
        let id = self
            .open
            .iter()
            .filter(|(_, slot)| slot.closable && Arc::strong_count(&slot.backend) == 1)
            .min_by_key(|(_, slot)| slot.last_used)
            .map(|(id, _)| *id)?;
        self.open.remove(&id).map(|slot| slot.backend)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a few map inserts or removals: a panic cannot leave them half done.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for Databases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("Databases")
            .field("open", &state.open.len())
            .field("named", &state.named.len())
            .field("scratch", &state.scratch.len())
            .finish_non_exhaustive()
    }
}

/// What a metadata path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseRef {
    /// `/`.
    Default,
    /// `/db/NAME`.
    Named(String),
    /// A fresh database for this connection (the key tells apart several on one connection).
    Ephemeral(String),
    /// A shared scratch database.
    Scratch(String),
}

impl DatabaseRef {
    /// Parses a metadata path (without query). `None`: not a database path.
    pub fn parse(path: &str, ephemeral_enabled: bool) -> Option<DatabaseRef> {
        if path == "/" || path.is_empty() {
            return Some(DatabaseRef::Default);
        }
        if let Some(name) = path.strip_prefix("/db/") {
            return valid_name(name).then(|| DatabaseRef::Named(name.to_owned()));
        }
        if !ephemeral_enabled {
            return None;
        }
        if path == "/ephemeral" {
            return Some(DatabaseRef::Ephemeral(String::new()));
        }
        let rest = path.strip_prefix("/ephemeral/")?;
        if rest.is_empty() || rest.ends_with(":memory:") {
            Some(DatabaseRef::Ephemeral(rest.to_owned()))
        } else {
            Some(DatabaseRef::Scratch(rest.to_owned()))
        }
    }
}

/// Whether `name` may name a database (and a file).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A stable id for a name: two FNV-1a hashes of it, shaped as a version-8 UUID.
fn derived_id(namespace: &str, name: &str) -> Uuid {
    let hash = |seed: u64| {
        let mut h: u64 = seed;
        for b in namespace.bytes().chain([0]).chain(name.bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&hash(0xcbf2_9ce4_8422_2325).to_be_bytes());
    bytes[8..].copy_from_slice(&hash(0x84222325_cbf29ce4).to_be_bytes());
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// A fresh in-memory database.
pub fn new_memory_database() -> Arc<dyn Backend> {
    Arc::new(open_deno_kv_memory::MemoryBackend::open(
        &open_deno_kv_memory::MemoryStore::new(),
        Arc::new(SystemClock),
    ))
}

impl Databases {
    /// Only the default database (at `/`).
    pub fn new(default: Arc<dyn Backend>) -> Self {
        let limits = crate::ResourceLimits::default();
        let databases = Databases {
            default: default.clone(),
            opener: None,
            state: Mutex::new(State::default()),
            max_open: limits.max_open_databases,
            idle_timeout: limits.database_idle_timeout,
        };
        databases.insert(Uuid::nil(), default, false);
        databases
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn insert(&self, id: Uuid, backend: Arc<dyn Backend>, closable: bool) {
        let slot = Slot {
            backend,
            last_used: Instant::now(),
            closable,
        };
        self.lock().open.insert(id, slot);
    }

    /// Adds a fixed named database, served at `/db/NAME`. Panics on an invalid name (a
    /// programming error; see [`valid_name`]).
    pub fn with_named(self, name: &str, backend: Arc<dyn Backend>) -> Self {
        assert!(valid_name(name), "invalid database name {name:?}");
        let id = derived_id("db", name);
        self.insert(id, backend, false);
        self.lock().named.insert(name.to_owned(), id);
        self
    }

    /// Opens any other `/db/NAME` on first use with `opener`.
    pub fn with_opener(mut self, opener: DatabaseOpener) -> Self {
        self.opener = Some(opener);
        self
    }

    /// The default database.
    pub fn default_database(&self) -> &Arc<dyn Backend> {
        &self.default
    }

    /// The database with this id (default, named or scratch), reopening a named one closed for
    /// being idle. Holding the returned backend keeps it open.
    pub fn by_id(&self, id: &Uuid) -> Result<Opened<Arc<dyn Backend>>, KvError> {
        let name = {
            let mut state = self.lock();
            if let Some(slot) = state.open.get_mut(id) {
                slot.last_used = Instant::now();
                return Ok(Opened::Ready(slot.backend.clone()));
            }
            match state.opener_names.get(id) {
                Some(name) => name.clone(),
                None => return Ok(Opened::Unknown),
            }
        };
        self.open_named(&name, *id)
    }

    /// The id of a named database, opening it if needed.
    pub fn named(&self, name: &str) -> Result<Opened<Uuid>, KvError> {
        let id = derived_id("db", name);
        {
            let mut state = self.lock();
            if let Some(id) = state.named.get(name).copied() {
                if let Some(slot) = state.open.get_mut(&id) {
                    slot.last_used = Instant::now();
                }
                return Ok(Opened::Ready(id));
            }
        }
        if self.opener.is_none() {
            return Ok(Opened::Unknown);
        }
        Ok(match self.open_named(name, id)? {
            Opened::Ready(_) => Opened::Ready(id),
            Opened::Unknown => Opened::Unknown,
            Opened::TooManyOpen { cap } => Opened::TooManyOpen { cap },
        })
    }

    /// Opens the opener's database `name` (id `id`) within the cap, unless it is open already.
    fn open_named(&self, name: &str, id: Uuid) -> Result<Opened<Arc<dyn Backend>>, KvError> {
        let Some(opener) = &self.opener else {
            return Ok(Opened::Unknown);
        };
        let evicted = {
            let mut state = self.lock();
            let mut evicted = None;
            if state.open_closable() + state.opening >= self.max_open {
                evicted = state.evict_idle();
                if evicted.is_none() {
                    return Ok(Opened::TooManyOpen { cap: self.max_open });
                }
            }
            state.opening += 1;
            evicted
        };
        if let Some(backend) = evicted {
            close_in_background(backend);
        }
        // Opening may block (a file). Two racing first uses may both open: the first insert wins
        // and the loser is closed.
        let opened = opener(name);
        let mut state = self.lock();
        state.opening -= 1;
        let backend = opened?;
        if let Some(slot) = state.open.get_mut(&id) {
            slot.last_used = Instant::now();
            let winner = slot.backend.clone();
            drop(state);
            close_in_background(backend);
            return Ok(Opened::Ready(winner));
        }
        state.named.insert(name.to_owned(), id);
        state.opener_names.insert(id, name.to_owned());
        let slot = Slot {
            backend: backend.clone(),
            last_used: Instant::now(),
            closable: true,
        };
        state.open.insert(id, slot);
        Ok(Opened::Ready(backend))
    }

    /// The id of a scratch database, creating it if needed. `None`: too many exist.
    pub fn scratch(&self, rest: &str) -> Option<Uuid> {
        let mut state = self.lock();
        if let Some(id) = state.scratch.get(rest) {
            return Some(*id);
        }
        if state.scratch.len() >= MAX_SCRATCH_DATABASES {
            return None;
        }
        let id = derived_id("scratch", rest);
        state.scratch.insert(rest.to_owned(), id);
        let slot = Slot {
            backend: new_memory_database(),
            last_used: Instant::now(),
            closable: false,
        };
        state.open.insert(id, slot);
        Some(id)
    }

    /// Every database open in the table now, with the name metrics give it: `default`,
    /// `db/NAME` (fixed or opened from the directory) or `scratch/PATH`.
    pub(crate) fn open_databases(&self) -> crate::metrics::OpenDatabases {
        let state = self.lock();
        let mut names: HashMap<Uuid, String> = HashMap::new();
        for (name, id) in &state.named {
            names.insert(*id, format!("db/{name}"));
        }
        for (rest, id) in &state.scratch {
            names.insert(*id, format!("scratch/{rest}"));
        }
        state
            .open
            .iter()
            .map(|(id, slot)| {
                let name = if id.is_nil() {
                    "default".to_owned()
                } else {
                    names.remove(id).unwrap_or_else(|| id.to_string())
                };
                (name, slot.backend.clone())
            })
            .collect()
    }

    /// How many databases the opener opened are open now.
    pub fn open_named_count(&self) -> usize {
        self.lock().open_closable()
    }

    /// Closes the opener's databases unused for [`crate::ResourceLimits::database_idle_timeout`]
    /// as of `now`.
    pub async fn close_idle(&self, now: Instant) {
        let idle: Vec<Arc<dyn Backend>> = {
            let mut state = self.lock();
            let ids: Vec<Uuid> = state
                .open
                .iter()
                .filter(|(_, slot)| {
                    slot.closable
                        && Arc::strong_count(&slot.backend) == 1
                        && now.saturating_duration_since(slot.last_used) >= self.idle_timeout
                })
                .map(|(id, _)| *id)
                .collect();
            ids.iter()
                .filter_map(|id| state.open.remove(id).map(|slot| slot.backend))
                .collect()
        };
        for backend in idle {
            let _ = backend.close().await;
        }
    }

    /// Closes every database the server opened itself (named through the opener, scratch);
    /// the default and fixed named databases belong to the caller.
    pub async fn close_opened(&self) {
        let backends: Vec<Arc<dyn Backend>> = {
            let state = self.lock();
            let scratch: Vec<Uuid> = state.scratch.values().copied().collect();
            state
                .open
                .iter()
                .filter(|(id, slot)| slot.closable || scratch.contains(id))
                .map(|(_, slot)| slot.backend.clone())
                .collect()
        };
        for backend in backends {
            let _ = backend.close().await;
        }
    }
}

/// Closes a database no request can reach any more, without making the caller wait.
fn close_in_background(backend: Arc<dyn Backend>) {
    tokio::spawn(async move {
        let _ = backend.close().await;
    });
}

/// Closes idle `/db/NAME` databases of `databases` until `shutdown` says stop.
pub(crate) async fn sweep_idle(
    databases: &Databases,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let every =
        (databases.idle_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        databases.close_idle(Instant::now()).await;
    }
}

/// The databases created for one connection (the ephemeral ones).
#[derive(Default)]
pub struct ConnectionDatabases {
    by_key: Mutex<HashMap<String, Uuid>>,
    by_id: Mutex<HashMap<Uuid, Arc<dyn Backend>>>,
}

impl ConnectionDatabases {
    /// The ephemeral database `key` of this connection, created on first use.
    pub fn ephemeral(&self, key: &str) -> Uuid {
        let mut by_key = lock(&self.by_key);
        if let Some(id) = by_key.get(key) {
            return *id;
        }
        let id = Uuid::new_v4();
        by_key.insert(key.to_owned(), id);
        lock(&self.by_id).insert(id, new_memory_database());
        id
    }

    /// The ephemeral database with this id, if this connection created it.
    pub fn by_id(&self, id: &Uuid) -> Option<Arc<dyn Backend>> {
        lock(&self.by_id).get(id).cloned()
    }

    /// Closes and forgets them all (the connection ended).
    pub async fn close_all(&self) {
        let backends: Vec<Arc<dyn Backend>> = lock(&self.by_id).drain().map(|(_, b)| b).collect();
        lock(&self.by_key).clear();
        for backend in backends {
            let _ = backend.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_databases() {
        assert_eq!(DatabaseRef::parse("/", false), Some(DatabaseRef::Default));
        assert_eq!(
            DatabaseRef::parse("/db/app_1", false),
            Some(DatabaseRef::Named("app_1".into()))
        );
        assert_eq!(DatabaseRef::parse("/db/../x", false), None);
        assert_eq!(DatabaseRef::parse("/db/a.b", false), None);
        assert_eq!(DatabaseRef::parse("/ephemeral/", false), None);
        assert_eq!(
            DatabaseRef::parse("/ephemeral/", true),
            Some(DatabaseRef::Ephemeral(String::new()))
        );
        assert_eq!(
            DatabaseRef::parse("/ephemeral/:memory:", true),
            Some(DatabaseRef::Ephemeral(":memory:".into()))
        );
        assert_eq!(
            DatabaseRef::parse("/ephemeral//tmp/x/db", true),
            Some(DatabaseRef::Scratch("/tmp/x/db".into()))
        );
        assert_eq!(DatabaseRef::parse("/other", true), None);
    }

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        assert_eq!(derived_id("db", "a"), derived_id("db", "a"));
        assert_ne!(derived_id("db", "a"), derived_id("db", "b"));
        assert_ne!(derived_id("db", "a"), derived_id("scratch", "a"));
        assert_ne!(derived_id("db", "a"), Uuid::nil());
    }
}

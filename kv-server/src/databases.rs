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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use kv_proto::{Backend, KvError, SystemClock};
use uuid::Uuid;

/// Opens the named database `name` (called once per name; the result is kept).
pub type DatabaseOpener = Arc<dyn Fn(&str) -> Result<Arc<dyn Backend>, KvError> + Send + Sync>;

/// The most scratch databases one server keeps (each is an in-memory store).
pub const MAX_SCRATCH_DATABASES: usize = 1024;

/// The databases a server offers; see the [module documentation](self).
pub struct Databases {
    default: Arc<dyn Backend>,
    opener: Option<DatabaseOpener>,
    /// Named and scratch databases by id, plus the default under the nil id.
    by_id: Mutex<HashMap<Uuid, Arc<dyn Backend>>>,
    /// Named databases already opened.
    named: Mutex<HashMap<String, Uuid>>,
    scratch: Mutex<HashMap<String, Uuid>>,
}

impl std::fmt::Debug for Databases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Databases")
            .field("named", &lock(&self.named).len())
            .field("scratch", &lock(&self.scratch).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these maps cannot leave it half-updated (single inserts).
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    Arc::new(kv_memory::MemoryBackend::open(
        &kv_memory::MemoryStore::new(),
        Arc::new(SystemClock),
    ))
}

impl Databases {
    /// Only the default database (at `/`).
    pub fn new(default: Arc<dyn Backend>) -> Self {
        let mut by_id = HashMap::new();
        by_id.insert(Uuid::nil(), default.clone());
        Databases {
            default,
            opener: None,
            by_id: Mutex::new(by_id),
            named: Mutex::new(HashMap::new()),
            scratch: Mutex::new(HashMap::new()),
        }
    }

    /// Adds a fixed named database, served at `/db/NAME`. Panics on an invalid name (a
    /// programming error; see [`valid_name`]).
    pub fn with_named(self, name: &str, backend: Arc<dyn Backend>) -> Self {
        assert!(valid_name(name), "invalid database name {name:?}");
        let id = derived_id("db", name);
        lock(&self.by_id).insert(id, backend);
        lock(&self.named).insert(name.to_owned(), id);
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

    /// The database with this id (default, named or scratch).
    pub fn by_id(&self, id: &Uuid) -> Option<Arc<dyn Backend>> {
        lock(&self.by_id).get(id).cloned()
    }

    /// The id of a named database, opening it if needed. `Ok(None)`: no such database.
    pub fn named(&self, name: &str) -> Result<Option<Uuid>, KvError> {
        if let Some(id) = lock(&self.named).get(name) {
            return Ok(Some(*id));
        }
        let Some(opener) = &self.opener else {
            return Ok(None);
        };
        // Opening may block (a file); two racing first uses may both open, the first insert wins
        // and the loser is closed.
        let backend = opener(name)?;
        let id = derived_id("db", name);
        let mut named = lock(&self.named);
        if named.contains_key(name) {
            drop(named);
            tokio::spawn(async move {
                let _ = backend.close().await;
            });
            return Ok(Some(id));
        }
        named.insert(name.to_owned(), id);
        lock(&self.by_id).insert(id, backend);
        Ok(Some(id))
    }

    /// The id of a scratch database, creating it if needed. `None`: too many exist.
    pub fn scratch(&self, rest: &str) -> Option<Uuid> {
        let mut scratch = lock(&self.scratch);
        if let Some(id) = scratch.get(rest) {
            return Some(*id);
        }
        if scratch.len() >= MAX_SCRATCH_DATABASES {
            return None;
        }
        let id = derived_id("scratch", rest);
        scratch.insert(rest.to_owned(), id);
        lock(&self.by_id).insert(id, new_memory_database());
        Some(id)
    }

    /// Closes every database the server opened itself (named through the opener, scratch);
    /// the default and fixed named databases belong to the caller.
    pub async fn close_opened(&self) {
        let ids: Vec<Uuid> = lock(&self.scratch).values().copied().collect();
        let mut backends: Vec<Arc<dyn Backend>> = Vec::new();
        {
            let by_id = lock(&self.by_id);
            backends.extend(ids.iter().filter_map(|id| by_id.get(id).cloned()));
            if self.opener.is_some() {
                let named = lock(&self.named);
                backends.extend(named.values().filter_map(|id| by_id.get(id).cloned()));
            }
        }
        for backend in backends {
            let _ = backend.close().await;
        }
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

//! Backend URLs: naming a backend and its location in one string, so a program can take it from
//! configuration.
//!
//! | URL | backend |
//! |---|---|
//! | `sqlite:./data.sqlite3`, or a plain path `./data.sqlite3` | [`kv_sqlite::SqliteBackend`], the embedded default; the file Deno writes |
//! | `sqlite:./data.sqlite3?read_only` | the same, opened read-only |
//! | `sqlite:./data.sqlite3?durability=process` | synced less often: survives a process crash, not a machine crash |
//! | `redb:./data.redb` | [`kv_redb::RedbBackend`], pure Rust; one process at a time |
//! | `redb:./data.redb?durability=deferred` | synced at least every second: a crash may lose the last second |
//! | `memory:` | [`kv_memory::MemoryBackend`], gone when the last handle closes |
//!
//! ```
//! use kv::BackendUrl;
//! let url: BackendUrl = "sqlite:./data.sqlite3?read_only".parse().unwrap();
//! assert_eq!(url.scheme(), "sqlite");
//! assert!("cassandra://db".parse::<BackendUrl>().is_err());
//! ```

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use kv_proto::{Backend, Clock};

use crate::error::{Error, Result};

/// The schemes [`BackendUrl`] understands, for error messages.
const KNOWN: &str = "sqlite:PATH, redb:PATH, memory: (or a plain path, which means sqlite)";

/// A parsed backend URL; see the [module documentation](self) for the forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendUrl {
    /// A Deno KV SQLite file.
    Sqlite {
        /// Where the file is.
        path: PathBuf,
        /// Open without writing.
        read_only: bool,
        /// How hard commits are synced.
        durability: kv_sqlite::Durability,
    },
    /// A redb file.
    Redb {
        /// Where the file is.
        path: PathBuf,
        /// How hard commits are synced.
        durability: kv_redb::Durability,
    },
    /// A fresh in-memory store.
    Memory,
}

impl BackendUrl {
    /// The backend's name: `sqlite`, `redb` or `memory`.
    pub fn scheme(&self) -> &'static str {
        match self {
            BackendUrl::Sqlite { .. } => "sqlite",
            BackendUrl::Redb { .. } => "redb",
            BackendUrl::Memory => "memory",
        }
    }

    /// The file the backend keeps its data in, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            BackendUrl::Sqlite { path, .. } | BackendUrl::Redb { path, .. } => Some(path),
            BackendUrl::Memory => None,
        }
    }

    /// The same backend and options at another file (for a backend without a file, itself).
    pub fn with_path(&self, new_path: PathBuf) -> BackendUrl {
        let mut url = self.clone();
        if let BackendUrl::Sqlite { path, .. } | BackendUrl::Redb { path, .. } = &mut url {
            *path = new_path;
        }
        url
    }

    /// The same URL, opened read-only where the backend supports it (SQLite; a redb file is
    /// always opened writable, and only this process can use it while it is open).
    pub fn read_only(&self) -> BackendUrl {
        let mut url = self.clone();
        if let BackendUrl::Sqlite { read_only, .. } = &mut url {
            *read_only = true;
        }
        url
    }

    /// Opens the backend, reading time from `clock`.
    pub fn open(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Backend>> {
        Ok(match self {
            BackendUrl::Sqlite {
                path,
                read_only,
                durability,
            } => {
                let options = kv_sqlite::SqliteOptions {
                    clock,
                    read_only: *read_only,
                    durability: *durability,
                    ..Default::default()
                };
                Arc::new(kv_sqlite::SqliteBackend::open_with(path, options)?)
            }
            BackendUrl::Redb { path, durability } => {
                let options = kv_redb::RedbOptions {
                    clock,
                    durability: *durability,
                    ..Default::default()
                };
                Arc::new(kv_redb::RedbBackend::open_with(path, options)?)
            }
            BackendUrl::Memory => Arc::new(kv_memory::MemoryBackend::open(
                &kv_memory::MemoryStore::new(),
                clock,
            )),
        })
    }
}

impl FromStr for BackendUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let (scheme, rest) = match url.split_once(':') {
            // `C:\data` or `./a:b` are paths, not schemes.
            Some((scheme, rest))
                if scheme.len() > 1
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-') =>
            {
                (scheme, rest)
            }
            _ => ("sqlite", url),
        };
        let (location, query) = match rest.split_once('?') {
            Some((location, query)) => (location, Some(query)),
            None => (rest, None),
        };
        match scheme {
            "sqlite" => {
                if location.is_empty() {
                    return Err(bad(
                        "sqlite needs a file path, e.g. sqlite:./kv.sqlite3".into()
                    ));
                }
                let mut read_only = false;
                let mut durability = kv_sqlite::Durability::Full;
                for option in query.into_iter().flat_map(|q| q.split('&')) {
                    match option.split_once('=') {
                        None if option == "read_only" => read_only = true,
                        Some(("read_only", "true")) => read_only = true,
                        Some(("read_only", "false")) => read_only = false,
                        Some(("durability", "full")) => durability = kv_sqlite::Durability::Full,
                        Some(("durability", "process")) => {
                            durability = kv_sqlite::Durability::Process
                        }
                        _ => {
                            return Err(bad(format!(
                                "unknown sqlite option {option:?} \
                                 (known: read_only, durability=full|process)"
                            )));
                        }
                    }
                }
                Ok(BackendUrl::Sqlite {
                    path: PathBuf::from(location),
                    read_only,
                    durability,
                })
            }
            "redb" => {
                if location.is_empty() {
                    return Err(bad("redb needs a file path, e.g. redb:./kv.redb".into()));
                }
                let mut durability = kv_redb::Durability::Immediate;
                for option in query.into_iter().flat_map(|q| q.split('&')) {
                    durability = match option {
                        "durability=immediate" => kv_redb::Durability::Immediate,
                        "durability=deferred" => kv_redb::Durability::Deferred,
                        _ => {
                            return Err(bad(format!(
                                "unknown redb option {option:?} \
                                 (known: durability=immediate|deferred)"
                            )));
                        }
                    };
                }
                Ok(BackendUrl::Redb {
                    path: PathBuf::from(location),
                    durability,
                })
            }
            "memory" => {
                if !location.is_empty() || query.is_some() {
                    return Err(bad("memory: takes no path or options".into()));
                }
                Ok(BackendUrl::Memory)
            }
            other => Err(bad(format!("unknown backend {other:?}; known: {KNOWN}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> BackendUrl {
        match url.parse() {
            Ok(parsed) => parsed,
            Err(err) => panic!("{url}: {err}"),
        }
    }

    #[test]
    fn plain_paths_and_sqlite_urls_name_the_same_file() {
        let expected = BackendUrl::Sqlite {
            path: "./data.sqlite3".into(),
            read_only: false,
            durability: kv_sqlite::Durability::Full,
        };
        assert_eq!(parse("./data.sqlite3"), expected);
        assert_eq!(parse("sqlite:./data.sqlite3"), expected);
        // A drive letter is a path, not a scheme.
        assert_eq!(parse("C:/kv.sqlite3").scheme(), "sqlite");
    }

    #[test]
    fn sqlite_options_are_read() {
        assert_eq!(
            parse("sqlite:kv.sqlite3?read_only&durability=process"),
            BackendUrl::Sqlite {
                path: "kv.sqlite3".into(),
                read_only: true,
                durability: kv_sqlite::Durability::Process,
            }
        );
    }

    #[test]
    fn redb_urls_name_a_file_and_its_durability() {
        assert_eq!(
            parse("redb:./data.redb?durability=deferred"),
            BackendUrl::Redb {
                path: "./data.redb".into(),
                durability: kv_redb::Durability::Deferred,
            }
        );
        assert_eq!(parse("redb:x.redb").path(), Some(Path::new("x.redb")));
        assert!("redb:".parse::<BackendUrl>().is_err());
        assert!("redb:x?read_only".parse::<BackendUrl>().is_err());
    }

    #[test]
    fn memory_takes_nothing_else() {
        assert_eq!(parse("memory:"), BackendUrl::Memory);
        assert!("memory:/tmp/x".parse::<BackendUrl>().is_err());
    }

    #[test]
    fn unknown_schemes_and_options_say_what_is_known() {
        let err = "postgres://localhost/db"
            .parse::<BackendUrl>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown backend \"postgres\""), "{err}");
        assert!(err.contains("sqlite:PATH"), "{err}");
        let err = "sqlite:kv.sqlite3?fast"
            .parse::<BackendUrl>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown sqlite option \"fast\""), "{err}");
        assert!("sqlite:".parse::<BackendUrl>().is_err());
    }
}

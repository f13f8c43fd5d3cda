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
//! | `redb:./data.redb?read_only` | opened without writing to the file (several processes may read it at once) |
//! | `memory:` | [`kv_memory::MemoryBackend`], gone when the last handle closes |
//! | `http://host:port/path` | [`kv_remote::RemoteBackend`]: a database on a KV Connect server (kv-server, denokv) over HTTP/2 (h2c) |
//! | `http://host:port/path?token=SECRET` | the same, with the access token in the URL (it is removed from the URL before anything is sent) |
//!
//! A remote URL is the KV Connect *metadata URL*, exactly as `Deno.openKv` takes it: for
//! kv-server, `http://host:port/` is the default database and `http://host:port/db/NAME` a named
//! one. The access token comes from `?token=` if given, else from the `KV_ACCESS_TOKEN`
//! environment variable, else from Deno's `DENO_KV_ACCESS_TOKEN` (read when the backend is
//! opened; unset means no token, which only a server running open accepts). `https://` is
//! refused: this build has no TLS. [`Kv::open`] and [`BackendUrl::connect`] run the metadata
//! exchange at once and report a wrong token or an unreachable server there;
//! [`Kv::open_blocking`] and [`BackendUrl::open`] connect lazily, so the first operation reports
//! it.
//!
//! [`Kv::open`]: crate::Kv::open
//! [`Kv::open_blocking`]: crate::Kv::open_blocking
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

use kv_proto::{Backend, Clock, KvError};

use crate::error::{Error, Result};

/// The schemes [`BackendUrl`] understands, for error messages.
const KNOWN: &str =
    "sqlite:PATH, redb:PATH, memory:, http://HOST:PORT/PATH (or a plain path, which means sqlite)";

/// A parsed backend URL; see the [module documentation](self) for the forms.
#[derive(Clone, PartialEq, Eq)]
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
        /// Open without writing.
        read_only: bool,
        /// How hard commits are synced.
        durability: kv_redb::Durability,
    },
    /// A fresh in-memory store.
    Memory,
    /// A database on a KV Connect server.
    Remote {
        /// The metadata URL (`http://host:port/path`), without the `token` parameter.
        url: String,
        /// The access token from `?token=`; `None`: read `KV_ACCESS_TOKEN` (or
        /// `DENO_KV_ACCESS_TOKEN`) at open.
        token: Option<String>,
    },
}

impl std::fmt::Debug for BackendUrl {
    /// Like a derived `Debug`, but an access token is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendUrl::Sqlite {
                path,
                read_only,
                durability,
            } => f
                .debug_struct("Sqlite")
                .field("path", path)
                .field("read_only", read_only)
                .field("durability", durability)
                .finish(),
            BackendUrl::Redb {
                path,
                read_only,
                durability,
            } => f
                .debug_struct("Redb")
                .field("path", path)
                .field("read_only", read_only)
                .field("durability", durability)
                .finish(),
            BackendUrl::Memory => f.write_str("Memory"),
            BackendUrl::Remote { url, token } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("token", &token.as_ref().map(|_| "<redacted>"))
                .finish(),
        }
    }
}

impl BackendUrl {
    /// The backend's name: `sqlite`, `redb` or `memory`.
    pub fn scheme(&self) -> &'static str {
        match self {
            BackendUrl::Sqlite { .. } => "sqlite",
            BackendUrl::Redb { .. } => "redb",
            BackendUrl::Memory => "memory",
            BackendUrl::Remote { .. } => "http",
        }
    }

    /// The file the backend keeps its data in, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            BackendUrl::Sqlite { path, .. } | BackendUrl::Redb { path, .. } => Some(path),
            BackendUrl::Memory | BackendUrl::Remote { .. } => None,
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

    /// The same URL, opened read-only where the backend supports it (the SQLite and redb files:
    /// nothing is written to them).
    pub fn read_only(&self) -> BackendUrl {
        let mut url = self.clone();
        if let BackendUrl::Sqlite { read_only, .. } | BackendUrl::Redb { read_only, .. } = &mut url
        {
            *read_only = true;
        }
        url
    }

    /// Opens the backend on the calling thread, reading time from `clock`. A remote database
    /// is reached only at its first operation. In async code use [`BackendUrl::connect`],
    /// which keeps file work off the executor.
    pub fn open(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Backend>> {
        Ok(self.open_backend(clock)?)
    }

    fn open_backend(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Backend>, KvError> {
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
            BackendUrl::Redb {
                path,
                read_only,
                durability,
            } => {
                let options = kv_redb::RedbOptions {
                    clock,
                    read_only: *read_only,
                    durability: *durability,
                    ..Default::default()
                };
                Arc::new(kv_redb::RedbBackend::open_with(path, options)?)
            }
            BackendUrl::Memory => Arc::new(kv_memory::MemoryBackend::open(
                &kv_memory::MemoryStore::new(),
                clock,
            )),
            BackendUrl::Remote { url, .. } => Arc::new(kv_remote::RemoteBackend::connect_lazy(
                url,
                self.remote_options(clock),
            )?),
        })
    }

    /// Opens the backend like [`BackendUrl::open`], but without blocking the async executor:
    /// a file is opened (created, recovered, migrated) through [`kv_proto::run_blocking`], and
    /// a remote database is reached at once (metadata exchange), so a wrong token or URL fails
    /// here rather than at the first operation. Needs a tokio runtime for remote URLs.
    pub async fn connect(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Backend>> {
        match self {
            BackendUrl::Remote { url, .. } => Ok(Arc::new(
                kv_remote::RemoteBackend::connect(url, self.remote_options(clock)).await?,
            )),
            _ => {
                let url = self.clone();
                Ok(kv_proto::run_blocking(move || url.open_backend(clock)).await?)
            }
        }
    }

    fn remote_options(&self, clock: Arc<dyn Clock>) -> kv_remote::RemoteOptions {
        let mut options = match self {
            BackendUrl::Remote {
                token: Some(token), ..
            } => kv_remote::RemoteOptions::new(token.clone()),
            _ => kv_remote::RemoteOptions::from_env(),
        };
        options.clock = clock;
        options
    }
}

/// Parses `http://...` (the part after `http:` is `rest`): takes out a `token` parameter.
fn parse_remote(url: &str, rest: &str) -> std::result::Result<BackendUrl, String> {
    if !rest.starts_with("//") || rest.len() <= 2 {
        return Err("expected http://HOST:PORT/PATH".into());
    }
    let (location, query) = match rest.split_once('?') {
        Some((location, query)) => (location, Some(query)),
        None => (rest, None),
    };
    let mut token = None;
    let mut kept = Vec::new();
    for part in query.into_iter().flat_map(|q| q.split('&')) {
        match part.strip_prefix("token=") {
            Some(value) => token = Some(value.to_owned()),
            None if part.is_empty() => {}
            None => kept.push(part),
        }
    }
    let mut clean = format!("http:{location}");
    if !kept.is_empty() {
        clean.push('?');
        clean.push_str(&kept.join("&"));
    }
    // Checks the URL the way the client will use it.
    kv_remote::RemoteBackend::connect_lazy(&clean, kv_remote::RemoteOptions::new(""))
        .map_err(|e| format!("{e} ({url:?})"))?;
    Ok(BackendUrl::Remote { url: clean, token })
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
                let mut read_only = false;
                let mut durability = kv_redb::Durability::Immediate;
                for option in query.into_iter().flat_map(|q| q.split('&')) {
                    match option {
                        "read_only" | "read_only=true" => read_only = true,
                        "read_only=false" => read_only = false,
                        "durability=immediate" => durability = kv_redb::Durability::Immediate,
                        "durability=deferred" => durability = kv_redb::Durability::Deferred,
                        _ => {
                            return Err(bad(format!(
                                "unknown redb option {option:?} \
                                 (known: read_only, durability=immediate|deferred)"
                            )));
                        }
                    }
                }
                Ok(BackendUrl::Redb {
                    path: PathBuf::from(location),
                    read_only,
                    durability,
                })
            }
            "http" => parse_remote(url, rest).map_err(bad),
            "https" => Err(bad(
                "https is not supported: this build has no TLS; use http:// (h2c)".into(),
            )),
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
                read_only: false,
                durability: kv_redb::Durability::Deferred,
            }
        );
        assert_eq!(parse("redb:x.redb").path(), Some(Path::new("x.redb")));
        assert!("redb:".parse::<BackendUrl>().is_err());
        assert_eq!(parse("redb:x?read_only"), parse("redb:x").read_only());
        assert!("redb:x?fast".parse::<BackendUrl>().is_err());
    }

    #[test]
    fn remote_urls_keep_the_path_and_take_out_the_token() {
        assert_eq!(
            parse("http://127.0.0.1:4512/db/app?token=s3cret-token&x=1"),
            BackendUrl::Remote {
                url: "http://127.0.0.1:4512/db/app?x=1".into(),
                token: Some("s3cret-token".into()),
            }
        );
        assert_eq!(
            parse("http://localhost:4512/"),
            BackendUrl::Remote {
                url: "http://localhost:4512/".into(),
                token: None,
            }
        );
        assert!(!format!("{:?}", parse("http://h:1/?token=abc")).contains("abc"));
        assert_eq!(parse("http://h:1/").scheme(), "http");
        assert!("https://h:1/".parse::<BackendUrl>().is_err());
        assert!("http:nothing".parse::<BackendUrl>().is_err());
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

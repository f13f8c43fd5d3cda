//! Backend URLs: naming a backend and its location in one string, so a program can take it from
//! configuration.
//!
//! | URL | backend | cargo feature of `open-deno-kv` |
//! |---|---|---|
//! | `sqlite:./data.sqlite3`, or a plain path `./data.sqlite3` | open-deno-kv-sqlite's `SqliteBackend`, the embedded default; the file Deno writes | `sqlite` (default) |
//! | `sqlite:./data.sqlite3?read_only` | the same, opened read-only | `sqlite` |
//! | `sqlite:./data.sqlite3?durability=process` | synced less often: survives a process crash, not a machine crash | `sqlite` |
//! | `redb:./data.redb` | open-deno-kv-redb's `RedbBackend`, pure Rust; one process at a time | `redb` |
//! | `redb:./data.redb?durability=deferred` | synced at least every second: a crash may lose the last second | `redb` |
//! | `redb:./data.redb?read_only` | opened without writing to the file (several processes may read it at once) | `redb` |
//! | `memory:` | open-deno-kv-memory's `MemoryBackend`, gone when the last handle closes | `memory` (default) |
//! | `http://host:port/path` | open-deno-kv-remote's `RemoteBackend`: a database on a KV Connect server (open-deno-kv-server, denokv) over HTTP/2 (h2c) | `remote` |
//! | `http://host:port/path?token=SECRET` | the same, with the access token in the URL (it is removed from the URL before anything is sent) | `remote` |
//! | `https://host:port/path` (`?token=` too) | the same over TLS (HTTP/2, rustls), the server's certificate verified against the system's roots or the CA file of `KV_CA_FILE` / [`BackendUrl::with_ca_file`] | `remote` |
//! | `postgres://user[:password]@host[:port]/database` (or `postgresql://`) | open-deno-kv-postgres's `PostgresBackend`: a store in a PostgreSQL database that several processes share | `postgres` |
//!
//! Every form is recognised whatever the build, but only the engines compiled in can be
//! opened: parsing a URL whose engine's feature is off fails with [`Error::BadUrl`] naming the
//! feature (``redb: URLs need the `redb` feature of the open-deno-kv crate``), so a program that wants one
//! engine compiles only that one.
//!
//! A remote URL is the KV Connect *metadata URL*, exactly as `Deno.openKv` takes it: for
//! open-deno-kv-server, `http://host:port/` is the default database and `http://host:port/db/NAME` a named
//! one. The access token comes from `?token=` if given, else from the `KV_ACCESS_TOKEN`
//! environment variable, else from Deno's `DENO_KV_ACCESS_TOKEN` (read when the backend is
//! opened; unset means no token, which only a server running open accepts). An `https://`
//! server's certificate must be signed by one of the system's root certificates, or by a CA in
//! the PEM file named by [`BackendUrl::with_ca_file`], else by the `KV_CA_FILE` environment
//! variable; verification cannot be turned off. [`Kv::open`] and [`BackendUrl::connect`] run the metadata
//! exchange at once and report a wrong token or an unreachable server there;
//! [`Kv::open_blocking`] and [`BackendUrl::open`] connect lazily, so the first operation reports
//! it.
//!
//! A PostgreSQL URL is passed to the client as written (libpq's URL form). Its background tasks
//! (commits, LISTEN, leases) run on the tokio runtime it is opened in: [`BackendUrl::open`]
//! needs a multi-threaded runtime around it, [`Kv::open`] any runtime.
//!
//! [`Kv::open`]: crate::Kv::open
//! [`Kv::open_blocking`]: crate::Kv::open_blocking
//!
//! ```
//! use open_deno_kv::BackendUrl;
//! # #[cfg(feature = "sqlite")] {
//! let url: BackendUrl = "sqlite:./data.sqlite3?read_only".parse().unwrap();
//! assert_eq!(url.scheme(), "sqlite");
//! # }
//! assert!("cassandra://db".parse::<BackendUrl>().is_err());
//! ```

// In a build without any engine `BackendUrl` has no variant: its methods cannot be reached,
// and their arguments go unused.
#![cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "redb",
        feature = "memory",
        feature = "remote",
        feature = "postgres"
    )),
    allow(unused_variables, unused_mut, unreachable_code)
)]

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

#[cfg(any(feature = "sqlite", feature = "redb"))]
use open_deno_kv_engine_kit::FileEngine;
use open_deno_kv_model::{Backend, Clock, KvError};

use crate::error::{Error, Result};

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
use postgres::{open_postgres, open_postgres_blocking, redact_password};

/// The schemes [`BackendUrl`] understands, for error messages.
const KNOWN: &str = "sqlite:PATH, redb:PATH, memory:, http://HOST:PORT/PATH, https://HOST:PORT/PATH, \
     postgres://USER@HOST:PORT/DB (or a plain path, which means sqlite)";

/// Each scheme, the cargo feature of this crate that compiles its engine in, and whether this
/// build has it. A new engine is one more row here, one more variant of [`BackendUrl`] and one
/// more arm in its parser.
const ENGINES: [(&str, &str, bool); 7] = [
    ("sqlite", "sqlite", cfg!(feature = "sqlite")),
    ("redb", "redb", cfg!(feature = "redb")),
    ("memory", "memory", cfg!(feature = "memory")),
    ("http", "remote", cfg!(feature = "remote")),
    ("https", "remote", cfg!(feature = "remote")),
    ("postgres", "postgres", cfg!(feature = "postgres")),
    ("postgresql", "postgres", cfg!(feature = "postgres")),
];

/// The refusal of a URL whose engine is not compiled in, if `scheme` names one.
fn missing_feature(scheme: &str, plain_path: bool) -> Option<String> {
    let (_, feature, _) = ENGINES
        .iter()
        .find(|(name, _, compiled)| *name == scheme && !compiled)?;
    let plain = if plain_path {
        "a plain path is a sqlite: URL; "
    } else {
        ""
    };
    Some(format!(
        "{plain}{scheme}: URLs need the `{feature}` feature of the open-deno-kv crate \
         (this build was compiled without it)"
    ))
}

/// A parsed backend URL; see the [module documentation](self) for the forms. A variant exists
/// only when its engine's cargo feature is on.
#[derive(Clone, PartialEq, Eq)]
pub enum BackendUrl {
    /// A Deno KV SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite {
        /// Where the file is.
        path: PathBuf,
        /// Open without writing.
        read_only: bool,
        /// How hard commits are synced.
        durability: open_deno_kv_sqlite::Durability,
    },
    /// A redb file.
    #[cfg(feature = "redb")]
    Redb {
        /// Where the file is.
        path: PathBuf,
        /// Open without writing.
        read_only: bool,
        /// How hard commits are synced.
        durability: open_deno_kv_redb::Durability,
    },
    /// A fresh in-memory store.
    #[cfg(feature = "memory")]
    Memory,
    /// A database on a KV Connect server.
    #[cfg(feature = "remote")]
    Remote {
        /// The metadata URL (`http://host:port/path` or `https://...`), without the `token`
        /// parameter.
        url: String,
        /// The access token from `?token=`; `None`: read `KV_ACCESS_TOKEN` (or
        /// `DENO_KV_ACCESS_TOKEN`) at open.
        token: Option<String>,
        /// For `https://`: the PEM file of the CA certificates to trust instead of the system's
        /// roots ([`BackendUrl::with_ca_file`]); `None`: `KV_CA_FILE` if set, at open.
        ca_file: Option<PathBuf>,
    },
    /// A store in a PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres {
        /// The connection URL, as written (`postgres://user@host:port/database`).
        url: String,
    },
}

// The matches below are on `*self` with `ref` bindings: in a build without any engine the enum
// has no variant, and only a match on the value itself may then have no arm.

impl std::fmt::Debug for BackendUrl {
    /// Like a derived `Debug`, but an access token is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite {
                ref path,
                read_only,
                durability,
            } => f
                .debug_struct("Sqlite")
                .field("path", path)
                .field("read_only", &read_only)
                .field("durability", &durability)
                .finish(),
            #[cfg(feature = "redb")]
            BackendUrl::Redb {
                ref path,
                read_only,
                durability,
            } => f
                .debug_struct("Redb")
                .field("path", path)
                .field("read_only", &read_only)
                .field("durability", &durability)
                .finish(),
            #[cfg(feature = "memory")]
            BackendUrl::Memory => f.write_str("Memory"),
            #[cfg(feature = "remote")]
            BackendUrl::Remote {
                ref url,
                ref token,
                ref ca_file,
            } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("token", &token.as_ref().map(|_| "<redacted>"))
                .field("ca_file", ca_file)
                .finish(),
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { ref url } => f
                .debug_struct("Postgres")
                .field("url", &redact_password(url))
                .finish(),
        }
    }
}

impl BackendUrl {
    /// The backend's name: `sqlite`, `redb`, `memory`, `http`, `https` or `postgres`.
    pub fn scheme(&self) -> &'static str {
        match *self {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite { .. } => "sqlite",
            #[cfg(feature = "redb")]
            BackendUrl::Redb { .. } => "redb",
            #[cfg(feature = "memory")]
            BackendUrl::Memory => "memory",
            #[cfg(feature = "remote")]
            BackendUrl::Remote { ref url, .. } if url.starts_with("https:") => "https",
            #[cfg(feature = "remote")]
            BackendUrl::Remote { .. } => "http",
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { .. } => "postgres",
        }
    }

    /// The file the backend keeps its data in, if any.
    pub fn path(&self) -> Option<&Path> {
        match *self {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite { ref path, .. } => Some(path),
            #[cfg(feature = "redb")]
            BackendUrl::Redb { ref path, .. } => Some(path),
            #[cfg(feature = "memory")]
            BackendUrl::Memory => None,
            #[cfg(feature = "remote")]
            BackendUrl::Remote { .. } => None,
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { .. } => None,
        }
    }

    /// The file and the read-only flag of a file backend, to change them.
    #[cfg(any(feature = "sqlite", feature = "redb"))]
    fn file_mut(&mut self) -> Option<(&mut PathBuf, &mut bool)> {
        match *self {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite {
                ref mut path,
                ref mut read_only,
                ..
            } => Some((path, read_only)),
            #[cfg(feature = "redb")]
            BackendUrl::Redb {
                ref mut path,
                ref mut read_only,
                ..
            } => Some((path, read_only)),
            #[allow(unreachable_patterns)] // `memory:` and `http:` when compiled in
            _ => None,
        }
    }

    /// The same backend and options at another file (for a backend without a file, itself).
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "redb")),
        allow(unused_variables) // no backend with a file
    )]
    pub fn with_path(&self, new_path: PathBuf) -> BackendUrl {
        #[allow(unused_mut)] // mutated only when a file backend is compiled in
        let mut url = self.clone();
        #[cfg(any(feature = "sqlite", feature = "redb"))]
        if let Some((path, _)) = url.file_mut() {
            *path = new_path;
        }
        url
    }

    /// The same URL, trusting for `https://` only the CA certificates in the PEM file `ca_file`
    /// (instead of the system's roots); other backends are returned as they are.
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub fn with_ca_file(&self, ca_file: PathBuf) -> BackendUrl {
        #[allow(unused_mut)] // mutated only when the remote backend is compiled in
        let mut url = self.clone();
        #[cfg(feature = "remote")]
        #[allow(irrefutable_let_patterns)] // when remote is the only engine compiled in
        if let BackendUrl::Remote {
            ca_file: ref mut file,
            ..
        } = url
        {
            *file = Some(ca_file);
        }
        url
    }

    /// The same URL, opened read-only where the backend supports it (the SQLite and redb files:
    /// nothing is written to them).
    pub fn read_only(&self) -> BackendUrl {
        #[allow(unused_mut)] // mutated only when a file backend is compiled in
        let mut url = self.clone();
        #[cfg(any(feature = "sqlite", feature = "redb"))]
        if let Some((_, read_only)) = url.file_mut() {
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
        Ok(match *self {
            #[cfg(feature = "sqlite")]
            BackendUrl::Sqlite {
                ref path,
                read_only,
                durability,
            } => {
                let options = open_deno_kv_sqlite::SqliteOptions {
                    clock,
                    read_only,
                    durability,
                    ..Default::default()
                };
                Arc::new(open_deno_kv_sqlite::SqliteBackend::open_with(
                    path, options,
                )?)
            }
            #[cfg(feature = "redb")]
            BackendUrl::Redb {
                ref path,
                read_only,
                durability,
            } => {
                let options = open_deno_kv_redb::RedbOptions {
                    clock,
                    read_only,
                    durability,
                    ..Default::default()
                };
                Arc::new(open_deno_kv_redb::RedbBackend::open_with(path, options)?)
            }
            #[cfg(feature = "memory")]
            BackendUrl::Memory => Arc::new(open_deno_kv_memory::MemoryBackend::open(
                &open_deno_kv_memory::MemoryStore::new(),
                clock,
            )),
            #[cfg(feature = "remote")]
            BackendUrl::Remote { ref url, .. } => Arc::new(
                open_deno_kv_remote::RemoteBackend::connect_lazy(url, self.remote_options(clock))?,
            ),
            #[cfg(feature = "postgres")]
            BackendUrl::Postgres { ref url } => open_postgres_blocking(url, clock)?,
        })
    }

    /// Opens the backend like [`BackendUrl::open`], but without blocking the async executor:
    /// a file is opened (created, recovered, migrated) through [`open_deno_kv_engine_kit::run_blocking`], and
    /// a remote database is reached at once (metadata exchange), so a wrong token or URL fails
    /// here rather than at the first operation. Needs a tokio runtime for remote URLs.
    pub async fn connect(&self, clock: Arc<dyn Clock>) -> Result<Arc<dyn Backend>> {
        #[cfg(feature = "remote")]
        #[allow(irrefutable_let_patterns)] // when remote is the only engine compiled in
        if let BackendUrl::Remote { url, .. } = self {
            let options = self.remote_options(clock);
            return Ok(Arc::new(
                open_deno_kv_remote::RemoteBackend::connect(url, options).await?,
            ));
        }
        #[cfg(feature = "postgres")]
        #[allow(irrefutable_let_patterns)] // when postgres is the only engine compiled in
        if let BackendUrl::Postgres { url } = self {
            return Ok(open_postgres(url, clock).await?);
        }
        let url = self.clone();
        Ok(open_deno_kv_engine_kit::run_blocking(move || url.open_backend(clock)).await?)
    }

    #[cfg(feature = "remote")]
    fn remote_options(&self, clock: Arc<dyn Clock>) -> open_deno_kv_remote::RemoteOptions {
        let mut options = match self {
            BackendUrl::Remote {
                token: Some(token), ..
            } => open_deno_kv_remote::RemoteOptions::new(token.clone()),
            _ => open_deno_kv_remote::RemoteOptions::from_env(),
        };
        options.clock = clock;
        options.ca_file = match self {
            BackendUrl::Remote {
                ca_file: Some(file),
                ..
            } => Some(file.clone()),
            _ => open_deno_kv_remote::ca_file_from_env(),
        };
        options
    }
}

/// Parses `http://...` or `https://...` (the part after `scheme:` is `rest`): takes out a
/// `token` parameter.
#[cfg(feature = "remote")]
fn parse_remote(url: &str, scheme: &str, rest: &str) -> std::result::Result<BackendUrl, String> {
    if !rest.starts_with("//") || rest.len() <= 2 {
        return Err(format!("expected {scheme}://HOST:PORT/PATH"));
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
    let mut clean = format!("{scheme}:{location}");
    if !kept.is_empty() {
        clean.push('?');
        clean.push_str(&kept.join("&"));
    }
    // Checks the URL the way the client will use it.
    open_deno_kv_remote::RemoteBackend::connect_lazy(
        &clean,
        open_deno_kv_remote::RemoteOptions::new(""),
    )
    .map_err(|e| format!("{e} ({url:?})"))?;
    Ok(BackendUrl::Remote {
        url: clean,
        token,
        ca_file: None,
    })
}

/// The options of a file URL (`sqlite:` or `redb:`): `read_only` (alone or `=true`/`=false`)
/// and `durability=NAME`, where `durabilities` names the engine's modes (the first is the
/// default). Returns the path, the read-only flag and the durability. `example` is a file name
/// for the error text.
#[cfg(any(feature = "sqlite", feature = "redb"))]
fn parse_file<D: Copy>(
    scheme: &str,
    example: &str,
    location: &str,
    query: Option<&str>,
    durabilities: &[(&str, D)],
) -> std::result::Result<(PathBuf, bool, D), String> {
    if location.is_empty() {
        return Err(format!(
            "{scheme} needs a file path, e.g. {scheme}:./{example}"
        ));
    }
    let mut read_only = false;
    let mut durability = durabilities[0].1;
    for option in query.into_iter().flat_map(|q| q.split('&')) {
        let mode = option
            .strip_prefix("durability=")
            .and_then(|name| durabilities.iter().find(|(known, _)| *known == name));
        match (option, mode) {
            ("read_only" | "read_only=true", _) => read_only = true,
            ("read_only=false", _) => read_only = false,
            (_, Some((_, mode))) => durability = *mode,
            _ => {
                let names: Vec<&str> = durabilities.iter().map(|(name, _)| *name).collect();
                return Err(format!(
                    "unknown {scheme} option {option:?} (known: read_only, durability={})",
                    names.join("|")
                ));
            }
        }
    }
    Ok((PathBuf::from(location), read_only, durability))
}

impl FromStr for BackendUrl {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let (scheme, rest, plain_path) = match url.split_once(':') {
            // `C:\data` or `./a:b` are paths, not schemes.
            Some((scheme, rest))
                if scheme.len() > 1
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-') =>
            {
                (scheme, rest, false)
            }
            _ => ("sqlite", url, true),
        };
        if let Some(reason) = missing_feature(scheme, plain_path) {
            return Err(bad(reason));
        }
        #[allow(unused_variables)] // read only by the file and memory parsers
        let (location, query) = match rest.split_once('?') {
            Some((location, query)) => (location, Some(query)),
            None => (rest, None),
        };
        match scheme {
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                use open_deno_kv_sqlite::Durability::{Full, Process};
                let modes = [("full", Full), ("process", Process)];
                let (path, read_only, durability) =
                    parse_file(scheme, "kv.sqlite3", location, query, &modes).map_err(bad)?;
                Ok(BackendUrl::Sqlite {
                    path,
                    read_only,
                    durability,
                })
            }
            #[cfg(feature = "redb")]
            "redb" => {
                use open_deno_kv_redb::Durability::{Deferred, Immediate};
                let modes = [("immediate", Immediate), ("deferred", Deferred)];
                let (path, read_only, durability) =
                    parse_file(scheme, "kv.redb", location, query, &modes).map_err(bad)?;
                Ok(BackendUrl::Redb {
                    path,
                    read_only,
                    durability,
                })
            }
            #[cfg(feature = "remote")]
            "http" | "https" => parse_remote(url, scheme, rest).map_err(bad),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                if !rest.starts_with("//") {
                    return Err(bad("expected postgres://USER@HOST:PORT/DATABASE".into()));
                }
                Ok(BackendUrl::Postgres {
                    url: url.to_owned(),
                })
            }
            #[cfg(feature = "memory")]
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

    #[allow(dead_code)] // unused in a build without any engine
    fn parse(url: &str) -> BackendUrl {
        match url.parse() {
            Ok(parsed) => parsed,
            Err(err) => panic!("{url}: {err}"),
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn plain_paths_and_sqlite_urls_name_the_same_file() {
        let expected = BackendUrl::Sqlite {
            path: "./data.sqlite3".into(),
            read_only: false,
            durability: open_deno_kv_sqlite::Durability::Full,
        };
        assert_eq!(parse("./data.sqlite3"), expected);
        assert_eq!(parse("sqlite:./data.sqlite3"), expected);
        // A drive letter is a path, not a scheme.
        assert_eq!(parse("C:/kv.sqlite3").scheme(), "sqlite");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_options_are_read() {
        assert_eq!(
            parse("sqlite:kv.sqlite3?read_only&durability=process"),
            BackendUrl::Sqlite {
                path: "kv.sqlite3".into(),
                read_only: true,
                durability: open_deno_kv_sqlite::Durability::Process,
            }
        );
    }

    #[cfg(feature = "redb")]
    #[test]
    fn redb_urls_name_a_file_and_its_durability() {
        assert_eq!(
            parse("redb:./data.redb?durability=deferred"),
            BackendUrl::Redb {
                path: "./data.redb".into(),
                read_only: false,
                durability: open_deno_kv_redb::Durability::Deferred,
            }
        );
        assert_eq!(parse("redb:x.redb").path(), Some(Path::new("x.redb")));
        assert!("redb:".parse::<BackendUrl>().is_err());
        assert_eq!(parse("redb:x?read_only"), parse("redb:x").read_only());
        assert!("redb:x?fast".parse::<BackendUrl>().is_err());
    }

    #[cfg(feature = "remote")]
    #[test]
    fn remote_urls_keep_the_path_and_take_out_the_token() {
        assert_eq!(
            parse("http://127.0.0.1:4512/db/app?token=s3cret-token&x=1"),
            BackendUrl::Remote {
                url: "http://127.0.0.1:4512/db/app?x=1".into(),
                token: Some("s3cret-token".into()),
                ca_file: None,
            }
        );
        assert_eq!(
            parse("http://localhost:4512/"),
            BackendUrl::Remote {
                url: "http://localhost:4512/".into(),
                token: None,
                ca_file: None,
            }
        );
        assert!(!format!("{:?}", parse("http://h:1/?token=abc")).contains("abc"));
        assert_eq!(parse("http://h:1/").scheme(), "http");
        assert_eq!(
            parse("https://kv.example:4512/db/app?token=abc").with_ca_file("ca.pem".into()),
            BackendUrl::Remote {
                url: "https://kv.example:4512/db/app".into(),
                token: Some("abc".into()),
                ca_file: Some("ca.pem".into()),
            }
        );
        assert_eq!(parse("https://h:1/").scheme(), "https");
        assert!("https:nothing".parse::<BackendUrl>().is_err());
        assert!("http:nothing".parse::<BackendUrl>().is_err());
    }

    #[cfg(feature = "memory")]
    #[test]
    fn memory_takes_nothing_else() {
        assert_eq!(parse("memory:"), BackendUrl::Memory);
        assert!("memory:/tmp/x".parse::<BackendUrl>().is_err());
    }

    #[test]
    fn unknown_schemes_and_options_say_what_is_known() {
        let err = "cassandra://localhost/db"
            .parse::<BackendUrl>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown backend \"cassandra\""), "{err}");
        assert!(err.contains("sqlite:PATH"), "{err}");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn unknown_sqlite_options_say_what_is_known() {
        let err = "sqlite:kv.sqlite3?fast"
            .parse::<BackendUrl>()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown sqlite option \"fast\""), "{err}");
        assert!("sqlite:".parse::<BackendUrl>().is_err());
    }

    /// Parses `url`, expecting the refusal that names `feature`.
    #[allow(dead_code)] // used by the tests of the features that are off in this build
    fn assert_needs_feature(url: &str, scheme: &str, feature: &str) {
        let err = match url.parse::<BackendUrl>() {
            Ok(parsed) => panic!("{url} parsed as {parsed:?} without the {feature} feature"),
            Err(err) => err,
        };
        assert!(matches!(err, Error::BadUrl { .. }), "{err:?}");
        let expected =
            format!("{scheme}: URLs need the `{feature}` feature of the open-deno-kv crate");
        assert!(err.to_string().contains(&expected), "{err}");
    }

    #[cfg(not(feature = "sqlite"))]
    #[test]
    fn sqlite_urls_and_plain_paths_need_the_sqlite_feature() {
        assert_needs_feature("sqlite:./data.sqlite3", "sqlite", "sqlite");
        assert_needs_feature("./data.sqlite3", "sqlite", "sqlite");
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_urls_need_the_postgres_feature() {
        assert_needs_feature("postgres://app@localhost:5432/app", "postgres", "postgres");
        assert_needs_feature("postgresql://app@localhost/app", "postgresql", "postgres");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_are_kept_as_written_and_hide_their_password() {
        let url = "postgres://app:s3cret@localhost:5432/app";
        assert_eq!(parse(url), BackendUrl::Postgres { url: url.into() });
        assert_eq!(parse("postgresql://app@h/app").scheme(), "postgres");
        assert_eq!(parse(url).path(), None);
        assert!(!format!("{:?}", parse(url)).contains("s3cret"));
        assert!("postgres:app".parse::<BackendUrl>().is_err());
    }

    #[cfg(not(feature = "redb"))]
    #[test]
    fn redb_urls_need_the_redb_feature() {
        assert_needs_feature("redb:./data.redb?durability=deferred", "redb", "redb");
    }

    #[cfg(not(feature = "memory"))]
    #[test]
    fn memory_urls_need_the_memory_feature() {
        assert_needs_feature("memory:", "memory", "memory");
    }

    #[cfg(not(feature = "remote"))]
    #[test]
    fn http_urls_need_the_remote_feature() {
        assert_needs_feature("http://127.0.0.1:4512/?token=abc", "http", "remote");
    }
}

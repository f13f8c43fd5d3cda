//! Opening databases the way each command needs them: reading commands never create or change a
//! file, writing commands create it, and `load` / `migrate` / `restore` build their target beside
//! it and move it into place only when everything is written.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use futures::TryStreamExt;
use open_deno_kv::{BackendUrl, Kv, ListOptions, Selector, key};

use crate::error::CliError;

/// How a command uses the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only: the file must exist, and is opened read-only.
    Read,
    /// Reads and sees other processes' commits (watch): the file must exist; opened writable so
    /// this process notices changes made elsewhere.
    Observe,
    /// Writes: the file is created if needed.
    Write,
}

/// The database a reading command uses: its argument (`kv dump FILE`) if given, else `--db`
/// (`db`, which may come from `KV_DB` or the default). `db_on_command_line`: whether `--db` was
/// typed; then an argument naming another database is refused rather than one silently winning.
pub fn chosen_database(
    db: &str,
    db_on_command_line: bool,
    argument: Option<String>,
) -> Result<String, CliError> {
    match argument {
        None => Ok(db.to_owned()),
        Some(argument) if db_on_command_line && argument != db => Err(CliError::TwoDatabases {
            flag: db.to_owned(),
            argument,
        }),
        Some(argument) => Ok(argument),
    }
}

/// The `--ca` file (or `KV_CA_FILE`), set once at start.
static CA_FILE: OnceLock<PathBuf> = OnceLock::new();

/// Makes every `https://` database this process opens trust only the CA certificates in
/// `file` (`--ca`); the first call wins.
pub fn trust_ca_file(file: PathBuf) {
    let _ = CA_FILE.set(file);
}

/// The `--ca` file, if one was given.
pub fn ca_file() -> Option<PathBuf> {
    CA_FILE.get().cloned()
}

/// Parses a database URL, with the `--ca` file for `https://`.
pub fn parse_url(url: &str) -> Result<BackendUrl, CliError> {
    let parsed: BackendUrl = url.parse().map_err(CliError::Kv)?;
    Ok(match CA_FILE.get() {
        Some(file) => parsed.with_ca_file(file.clone()),
        None => parsed,
    })
}

/// Opens `url` for `access`.
pub fn open(url: &str, access: Access) -> Result<Kv, CliError> {
    let mut parsed = parse_url(url)?;
    if access != Access::Write
        && let Some(path) = parsed.path()
        && !path.exists()
    {
        return Err(CliError::MissingDatabase {
            path: path.to_path_buf(),
        });
    }
    if access == Access::Read {
        parsed = parsed.read_only();
    }
    let clock: std::sync::Arc<dyn open_deno_kv_model::Clock> =
        std::sync::Arc::new(open_deno_kv_engine_kit::SystemClock);
    Ok(Kv::with_clock(parsed.open(clock.clone())?, clock))
}

/// Whether the database holds no entries and no queued messages.
pub async fn is_empty(kv: &Kv) -> Result<bool, CliError> {
    let mut any = kv.list(
        Selector::prefix(key![]),
        ListOptions {
            limit: Some(1),
            ..Default::default()
        },
    )?;
    if any.try_next().await?.is_some() {
        return Ok(false);
    }
    Ok(kv.queued_messages().await?.is_empty())
}

/// A target being written: a temporary file beside the real one (for file backends), moved into
/// place by [`Target::commit`]. Dropped without commit, it removes what it wrote.
pub struct Target {
    /// The handle to write through (taken by `commit`).
    kv: Option<Kv>,
    url: String,
    /// (temporary file, final file) for file backends.
    files: Option<(PathBuf, PathBuf)>,
    committed: bool,
}

impl Target {
    /// Prepares to write into `url`, which must be new or empty.
    pub async fn create(url: &str) -> Result<Target, CliError> {
        let parsed = parse_url(url)?;
        let Some(path) = parsed.path().map(Path::to_path_buf) else {
            // Not a file (memory:): written in place.
            let kv = open(url, Access::Write)?;
            if !is_empty(&kv).await? {
                return Err(CliError::TargetNotEmpty { target: url.into() });
            }
            return Ok(Target {
                kv: Some(kv),
                url: url.into(),
                files: None,
                committed: false,
            });
        };
        if path.exists() {
            let existing = open(url, Access::Read)?;
            let empty = is_empty(&existing).await;
            existing.close().await?;
            if !empty? {
                return Err(CliError::TargetNotEmpty { target: url.into() });
            }
        }
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".partial-{}", std::process::id()));
        let temp = path.with_file_name(name);
        remove_database_files(&temp);
        let clock: std::sync::Arc<dyn open_deno_kv_model::Clock> =
            std::sync::Arc::new(open_deno_kv_engine_kit::SystemClock);
        let kv = Kv::with_clock(parsed.with_path(temp.clone()).open(clock.clone())?, clock);
        Ok(Target {
            kv: Some(kv),
            url: url.into(),
            files: Some((temp, path)),
            committed: false,
        })
    }

    /// The handle to write through.
    pub fn kv(&self) -> Result<&Kv, CliError> {
        self.kv
            .as_ref()
            .ok_or_else(|| open_deno_kv_model::KvError::Closed.into())
    }

    /// Closes the target and moves it into place.
    pub async fn commit(mut self) -> Result<(), CliError> {
        if let Some(kv) = self.kv.take() {
            kv.close().await?;
            // Every connection must be gone before the files move.
            drop(kv);
        }
        let Some((temp, path)) = self.files.clone() else {
            self.committed = true;
            return Ok(());
        };
        remove_database_files(&path);
        // The WAL first: the main file appears last, complete with its log.
        for suffix in ["-wal", ""] {
            let from = with_suffix(&temp, suffix);
            if from.exists() {
                std::fs::rename(&from, with_suffix(&path, suffix)).map_err(|source| {
                    CliError::Io {
                        path: path.clone(),
                        source,
                    }
                })?;
            }
        }
        remove_database_files(&temp);
        self.committed = true;
        Ok(())
    }

    /// The target's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.committed
            && let Some((temp, _)) = &self.files
        {
            remove_database_files(temp);
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// Removes a database file and SQLite's companions (missing ones are fine).
fn remove_database_files(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(with_suffix(path, suffix));
    }
}

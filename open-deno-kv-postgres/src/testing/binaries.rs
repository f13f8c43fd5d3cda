//! Finding the PostgreSQL server programs, and running them as the right OS user.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::PostgresError;

/// Set to `skip` to skip PostgreSQL tests on a machine without PostgreSQL (they say so loudly);
/// unset, a missing PostgreSQL fails them.
pub const SKIP_VARIABLE: &str = "KV_POSTGRES_TESTS";

/// The programs a test cluster needs: every one of them lives in one directory.
const PROGRAMS: [&str; 5] = ["initdb", "pg_ctl", "postgres", "pg_basebackup", "psql"];

/// The PostgreSQL server programs of one installation, and the OS user to run them as.
#[derive(Debug, Clone)]
pub struct ServerBinaries {
    dir: PathBuf,
    /// `Some("postgres")` when this process is root (PostgreSQL refuses to run as root).
    run_as: Option<String>,
}

impl ServerBinaries {
    /// Finds the programs: in `PG_BIN` if it is set (and only there), else in
    /// `/usr/lib/postgresql/*/bin` (newest version first), then in `pg_config --bindir`.
    pub fn find() -> Result<Self, PostgresError> {
        // An explicit PG_BIN is the only place looked at: a wrong one is reported, not ignored.
        let candidates: Vec<PathBuf> = match std::env::var_os("PG_BIN") {
            Some(dir) => vec![PathBuf::from(dir)],
            None => debian_bin_dirs()
                .into_iter()
                .chain(pg_config_bindir())
                .collect(),
        };
        let Some(dir) = candidates.iter().find(|dir| has_programs(dir)) else {
            let searched = if candidates.is_empty() {
                "PG_BIN unset, /usr/lib/postgresql/*/bin empty, no pg_config".to_owned()
            } else {
                candidates
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(PostgresError::ServerMissing { searched });
        };
        Ok(ServerBinaries {
            dir: dir.clone(),
            run_as: is_root().then(|| "postgres".to_owned()),
        })
    }

    /// Whether PostgreSQL tests should be skipped (`KV_POSTGRES_TESTS=skip`).
    pub fn skip_requested() -> bool {
        std::env::var(SKIP_VARIABLE).is_ok_and(|v| v == "skip")
    }

    /// The directory holding the programs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The OS user the servers run as, when it is not this process's user.
    pub fn run_as(&self) -> Option<&str> {
        self.run_as.as_deref()
    }

    /// A command for `program` of this installation, run as the servers' user.
    pub(crate) fn command(&self, program: &str) -> Command {
        let path = self.dir.join(program);
        match &self.run_as {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    /// Runs `command` to completion; an exit status other than success is an error naming `step`
    /// with the command's output.
    pub(crate) fn run(&self, step: &str, command: &mut Command) -> Result<Output, PostgresError> {
        let output = command.output().map_err(|e| cluster_error(step, e))?;
        if output.status.success() {
            Ok(output)
        } else {
            Err(cluster_error(
                step,
                format!(
                    "{}\n{}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            ))
        }
    }
}

/// A [`PostgresError::Cluster`] for `step`.
pub(crate) fn cluster_error(step: &str, detail: impl ToString) -> PostgresError {
    PostgresError::Cluster {
        step: step.to_owned(),
        detail: detail.to_string(),
    }
}

fn has_programs(dir: &Path) -> bool {
    PROGRAMS.iter().all(|p| dir.join(p).is_file())
}

/// `/usr/lib/postgresql/<version>/bin`, highest version first.
fn debian_bin_dirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") else {
        return Vec::new();
    };
    let mut versions: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn pg_config_bindir() -> Option<PathBuf> {
    let output = Command::new("pg_config").arg("--bindir").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?;
    Some(PathBuf::from(dir.trim()))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

//! Finding the anchor's binary, `open-deno-kv-bench-anchor`, which runs the `denokv` target.
//!
//! denokv_sqlite links another rusqlite than this workspace's, so it is built in its own
//! workspace (`open-deno-kv-bench/anchor`) into its own binary, and open-deno-kv-bench runs that binary as the child
//! of the `denokv` target, with the same arguments and the same JSON report as its own children.
//! When it is not found the run goes on without it and the report says so in one line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The binary's file name.
const BINARY: &str = "open-deno-kv-bench-anchor";

/// How to build the binary where open-deno-kv-bench looks for it.
pub const BUILD_COMMAND: &str =
    "cargo build --release --manifest-path open-deno-kv-bench/anchor/Cargo.toml";

/// The anchor's binary, or why there is none.
#[derive(Debug, Clone)]
pub enum Anchor {
    /// Found and answering: its path and what it reported of itself (`open-deno-kv-bench-anchor about`).
    Found {
        /// The binary.
        exe: PathBuf,
        /// Its `about` line: engine, SQLite version, journal mode, synchronous.
        about: Value,
    },
    /// Not usable: one line saying why and what to do.
    Missing(String),
}

impl Anchor {
    /// Looks for the binary at `explicit` (`--anchor PATH`) or, without it, next to this
    /// executable (where a shared `CARGO_TARGET_DIR` puts both) and in the anchor workspace's
    /// own `target/release`, then asks it what it is.
    pub fn find(explicit: Option<&Path>) -> Anchor {
        let candidates: Vec<PathBuf> = match explicit {
            Some(path) => vec![path.to_path_buf()],
            None => {
                let mut paths = Vec::new();
                if let Ok(exe) = std::env::current_exe()
                    && let Some(dir) = exe.parent()
                {
                    paths.push(dir.join(BINARY));
                }
                paths.push(
                    Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("anchor/target/release")
                        .join(BINARY),
                );
                paths
            }
        };
        let Some(exe) = candidates.iter().find(|p| p.is_file()) else {
            let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            return Anchor::Missing(format!(
                "denokv (the anchor) NOT MEASURED: no {BINARY} binary at {}; build it with `{BUILD_COMMAND}` or pass --anchor PATH",
                looked.join(" or ")
            ));
        };
        match about(exe) {
            Ok(about) => Anchor::Found {
                exe: exe.clone(),
                about,
            },
            Err(why) => Anchor::Missing(format!(
                "denokv (the anchor) NOT MEASURED: {} does not answer `about`: {why}",
                exe.display()
            )),
        }
    }

    /// The binary, when found.
    pub fn exe(&self) -> Option<&Path> {
        match self {
            Anchor::Found { exe, .. } => Some(exe),
            Anchor::Missing(_) => None,
        }
    }

    /// The report's one line on the anchor.
    pub fn line(&self) -> String {
        match self {
            Anchor::Found { exe, about } => format!(
                "denokv (the anchor): {}, SQLite {}, journal_mode={}, synchronous={} ({}), {} worker thread, batch timeout {}; binary {}",
                about["engine"].as_str().unwrap_or("?"),
                about["sqlite_version"].as_str().unwrap_or("?"),
                about["journal_mode"].as_str().unwrap_or("?"),
                about["synchronous"],
                match about["synchronous"].as_i64() {
                    Some(2) => "FULL: every commit fsyncs the WAL",
                    Some(1) => "NORMAL",
                    Some(0) => "OFF",
                    _ => "?",
                },
                about["workers"],
                if about["batch_timeout"].is_null() {
                    "none".to_owned()
                } else {
                    about["batch_timeout"].to_string()
                },
                exe.display()
            ),
            Anchor::Missing(line) => line.clone(),
        }
    }

    /// The anchor in the JSON report.
    pub fn json(&self) -> Value {
        match self {
            Anchor::Found { exe, about } => json!({
                "measured": true,
                "binary": exe.display().to_string(),
                "about": about,
            }),
            Anchor::Missing(line) => json!({ "measured": false, "reason": line }),
        }
    }
}

/// Runs `exe about` and parses its JSON line.
fn about(exe: &Path) -> Result<Value, String> {
    let output = Command::new(exe)
        .arg("about")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("not JSON: {e}"))
}

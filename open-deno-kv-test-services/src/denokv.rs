//! Finding the denokv 0.14 binary.

use std::path::PathBuf;
use std::process::Command;

use crate::TestServiceError;
use crate::skip::{self, DENOKV_SKIP_VARIABLE};

/// The denokv version the interop tests run against.
pub const DENOKV_VERSION: &str = "0.14.0";

/// The path of a denokv 0.14 binary: `DENOKV_BIN` if set (and only there), else
/// `denokv-0.14.0/bin/denokv` in the target directory this test was built into, where
/// `.ci/denokv-conformance` builds it. Checked to answer as denokv does, and to be 0.14.0 where
/// cargo's install record beside its `bin/` says which version it is.
pub fn denokv_binary() -> Result<PathBuf, TestServiceError> {
    let missing = |reason: String| TestServiceError::DenokvMissing { reason };
    let bin = match std::env::var_os("DENOKV_BIN").filter(|bin| !bin.is_empty()) {
        Some(bin) => PathBuf::from(bin),
        None => {
            // A test binary lives at TARGET/PROFILE/deps/NAME.
            let exe = std::env::current_exe()
                .map_err(|e| missing(format!("cannot tell where this test runs from: {e}")))?;
            let Some(target) = exe.ancestors().nth(3) else {
                return Err(missing(format!(
                    "{} is not inside a target directory",
                    exe.display()
                )));
            };
            target.join(format!("denokv-{DENOKV_VERSION}/bin/denokv"))
        }
    };
    if !bin.is_file() {
        return Err(missing(format!("there is no {}", bin.display())));
    }
    // denokv has no --version: its help must answer, and where `cargo install --root` left its
    // record beside bin/, the record must name this version.
    let output = Command::new(&bin)
        .arg("--help")
        .output()
        .map_err(|e| missing(format!("cannot run {}: {e}", bin.display())))?;
    if !output.status.success()
        || !String::from_utf8_lossy(&output.stdout).contains("--sqlite-path")
    {
        return Err(missing(format!(
            "{} --help does not answer as denokv does",
            bin.display()
        )));
    }
    if let Some(record) = bin
        .parent()
        .and_then(|b| b.parent())
        .map(|r| r.join(".crates.toml"))
        && let Ok(text) = std::fs::read_to_string(&record)
        && !text.contains(&format!("denokv {DENOKV_VERSION} "))
    {
        return Err(missing(format!(
            "{} says it installed another denokv than {DENOKV_VERSION}",
            record.display()
        )));
    }
    Ok(bin)
}

/// [`denokv_binary`] for a test: `None` (after saying so loudly on stderr) when denokv is
/// missing and `KV_DENOKV_TESTS=skip` is set; panics with what to build otherwise.
pub fn denokv_or_skip() -> Option<PathBuf> {
    match denokv_binary() {
        Ok(bin) => Some(bin),
        Err(err) if skip::requested(DENOKV_SKIP_VARIABLE) => {
            skip::announce("denokv interop test", &err, DENOKV_SKIP_VARIABLE);
            None
        }
        Err(err) => panic!("{err}"),
    }
}

//! Finding moto's `moto_server` program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::TestServiceError;

/// The moto version the tests run against (the one `.ci/install-moto` installs).
pub const MOTO_VERSION: &str = "5.2.5";

/// The path of a `moto_server` program: `MOTO_SERVER_BIN` if set (and only there), else the one
/// the repository's `.ci/install-moto` prints, which installs moto into `target/moto-5.2.5`
/// the first time (from PyPI) and finds it there afterwards.
pub fn moto_server_binary() -> Result<PathBuf, TestServiceError> {
    let missing = |reason: String| TestServiceError::MotoMissing { reason };
    if let Some(bin) = std::env::var_os("MOTO_SERVER_BIN").filter(|bin| !bin.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(missing(format!(
                "MOTO_SERVER_BIN={} is not a file",
                bin.display()
            )))
        };
    }
    // The installer is the repository's, beside this crate's directory.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/install-moto");
    if !script.is_file() {
        return Err(missing(format!(
            "MOTO_SERVER_BIN is unset and there is no {}",
            script.display()
        )));
    }
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| missing(format!("cannot run {}: {e}", script.display())))?;
    if !output.status.success() {
        return Err(missing(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default();
    if path.is_empty() || !Path::new(path).is_file() {
        return Err(missing(format!(
            "{} printed no program path (it printed {path:?})",
            script.display()
        )));
    }
    Ok(PathBuf::from(path))
}

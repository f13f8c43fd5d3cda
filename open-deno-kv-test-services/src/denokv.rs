//! Finding the denokv 0.14 binary.

use std::path::PathBuf;
use std::process::Command;

use crate::TestServiceError;
use crate::skip::{self, DENOKV_SKIP_VARIABLE};

/// The denokv version the interop tests run against.
pub const DENOKV_VERSION: &str = "0.14.0";

/// The path of a denokv 0.14 binary: `DENOKV_BIN` if set (and only there), else
/// `denokv-0.14.0/bin/denokv` in the target directory this test was built into, where
/// `.ci/denokv-conformance` builds it. Checked to say it is version 0.14.0.
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
    let output = Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(|e| missing(format!("cannot run {}: {e}", bin.display())))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !version.contains(DENOKV_VERSION) {
        return Err(missing(format!(
            "{} is not denokv {DENOKV_VERSION} (it says {:?})",
            bin.display(),
            version.trim()
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

//! Finding the real Deno 2.9.6 for interop tests.
//!
//! Tests that drive Deno call [`deno_binary`]: it uses `DENO_BIN` if set, and otherwise runs the
//! workspace's `.ci/install-deno`, which fetches Deno from the npm registry once and caches it in
//! `target/deno-2.9.6`. It never silently skips: without a Deno 2.9.6 the caller fails the test
//! with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Deno version the interop tests assert the behaviour of.
pub const DENO_VERSION: &str = "2.9.6";

/// The path of a Deno 2.9.6 binary, or why there is none.
pub fn deno_binary() -> Result<PathBuf, String> {
    let bin = match std::env::var_os("DENO_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => install()?,
    };
    let output = Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run Deno at {}: {e}", bin.display()))?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !version.starts_with(&format!("deno {DENO_VERSION} ")) {
        return Err(format!(
            "{} is not Deno {DENO_VERSION} (it says {:?}); unset DENO_BIN or point it at a \
             {DENO_VERSION} binary",
            bin.display(),
            version.lines().next().unwrap_or_default()
        ));
    }
    Ok(bin)
}

/// Runs `.ci/install-deno` and returns the path it prints last.
fn install() -> Result<PathBuf, String> {
    // The installer is the repository's, beside this crate's directory: a packaged open-deno-kv-conformance
    // has none, and then DENO_BIN is the way.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/install-deno");
    if !script.is_file() {
        return Err(format!(
            "set DENO_BIN to a Deno {DENO_VERSION} binary (there is no {} to install one: it is \
             part of the repository, not of the open-deno-kv-conformance package)",
            script.display()
        ));
    }
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!(
            "cannot obtain Deno {DENO_VERSION} with {} (it needs npm and the npm registry; or \
             set DENO_BIN to a Deno {DENO_VERSION} binary):\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let path = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default()
        .trim();
    if path.is_empty() {
        return Err(format!("{} printed no path", script.display()));
    }
    Ok(PathBuf::from(path))
}

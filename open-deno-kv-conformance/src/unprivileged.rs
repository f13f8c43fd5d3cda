//! Running a test's check as a user that permission bits apply to.
//!
//! Tests of "a read-only file" or "a read-only directory" prove nothing when they run as root,
//! which ignores permission bits (and CI runs as root). [`run_unprivileged`] re-executes one test
//! of the current test binary in a child process: as `nobody` when the parent is root, as the
//! same user otherwise. The test tells the two roles apart with [`child_argument`]:
//!
//! ```no_run
//! #[test]
//! fn reads_a_file_in_a_read_only_directory() {
//!     if let Some(path) = open_deno_kv_conformance::unprivileged::child_argument() {
//!         // The child: the check itself, as an unprivileged user.
//!         return;
//!     }
//!     // The parent: make the files, remove write permission, then:
//!     let out = open_deno_kv_conformance::unprivileged::run_unprivileged(
//!         "reads_a_file_in_a_read_only_directory",
//!         "/tmp/some/kv.sqlite3",
//!     );
//!     assert!(out.status.success());
//! }
//! ```
//!
//! Unix only: the child's user is set with `CommandExt::uid`.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// The environment variable carrying the child's argument (its presence marks the child).
const CHILD_ARGUMENT: &str = "KV_CONFORMANCE_UNPRIVILEGED_ARGUMENT";

/// `nobody`'s user and group id on Linux distributions.
const NOBODY: u32 = 65534;

/// The argument [`run_unprivileged`] passed, when this process is that child; `None` in the
/// parent.
pub fn child_argument() -> Option<String> {
    std::env::var(CHILD_ARGUMENT).ok()
}

/// Whether this process runs as root (whom permission bits do not stop).
pub fn is_root() -> bool {
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// Runs the test named `test` (exactly) of the current test binary in a child process, as
/// `nobody` if this process is root, with `argument` available to it through
/// [`child_argument`]. Returns the child's output (its stdout and stderr captured).
///
/// Everything the child needs (the test binary, the files it reads) must be readable by
/// `nobody`; temporary directories are created private, so make them traversable.
///
/// # Panics
///
/// If the test binary cannot be found or the child cannot be started.
pub fn run_unprivileged(test: &str, argument: impl AsRef<OsStr>) -> Output {
    let binary = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(binary);
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ARGUMENT, argument);
    if is_root() {
        command.uid(NOBODY).gid(NOBODY);
    }
    command.output().expect("start the unprivileged child")
}

/// Makes `path` (a directory) traversable and readable by everyone, with write permission only
/// as `writable` says, for a child run by [`run_unprivileged`].
pub fn set_directory_mode(path: &std::path::Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if writable { 0o777 } else { 0o555 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .expect("change the directory's permissions");
}

/// Makes `dirs` read-only (and traversable), runs the test `test` through [`run_unprivileged`],
/// makes them writable again (so they can be cleaned up), and asserts that the child succeeded.
///
/// # Panics
///
/// If the child fails (its stderr is in the message).
pub fn assert_succeeds_in_read_only_dirs(
    test: &str,
    argument: impl AsRef<OsStr>,
    dirs: &[&std::path::Path],
) {
    for dir in dirs {
        set_directory_mode(dir, false);
    }
    let out = run_unprivileged(test, argument);
    for dir in dirs {
        set_directory_mode(dir, true);
    }
    assert!(
        out.status.success(),
        "the unprivileged child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

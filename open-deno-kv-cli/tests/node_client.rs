//! `kv serve`, the binary, driven by Node.js through the official KV Connect client for Node,
//! `@deno/kv` 0.14.0 from the npm registry, on every local engine (sqlite, memory, redb).
//!
//! That client validates the metadata exchange strictly (no field beyond the five the protocol
//! defines) and checks content types, so it proves that a client which asks for no protocol
//! extension sees none. `open-deno-kv-server/tests/node/client.mjs` runs open, get, getMany, set, delete,
//! atomic checks, u64 sums, list (prefix, cursor, reverse, limit, range, batches), expireIn and
//! watch; every check it reports must be `true`. Then the real Deno 2.9.6 runs its own client
//! script against the same server, so both kinds of stock client pass side by side.
//!
//! Needs `node` and `npm` (Node.js 18 or newer) on PATH, or `NODE_BIN`; `@deno/kv` is installed
//! once into `target/tmp/node-deno-kv-0.14.0` (or taken from `NODE_DENO_KV_DIR`, a directory whose
//! `node_modules` holds it). Without them the test fails with what to install: it never skips.
//!
//! Run: `cargo test -p open-deno-kv-cli --test node_client -- --nocapture`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::{Server, assert_client_checks, assert_deno_client_passes};

/// The `@deno/kv` release these tests pin.
const CLIENT_VERSION: &str = "0.14.0";

/// The `node` to run.
fn node() -> PathBuf {
    let node = std::env::var_os("NODE_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("node"), PathBuf::from);
    match Command::new(&node).arg("--version").output() {
        Ok(out) if out.status.success() => node,
        _ => panic!(
            "cannot run {}: install Node.js 18 or newer with npm (Debian: apt-get install nodejs \
             npm), or set NODE_BIN",
            node.display()
        ),
    }
}

/// A directory whose `node_modules` holds `@deno/kv` at [`CLIENT_VERSION`], installing it from
/// the npm registry the first time (once per test process; npm verifies the registry's integrity
/// hashes).
fn client_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("NODE_DENO_KV_DIR").filter(|v| !v.is_empty()) {
            return PathBuf::from(dir);
        }
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("node-deno-kv-{CLIENT_VERSION}"));
        let manifest = dir.join("node_modules/@deno/kv/package.json");
        let installed = std::fs::read_to_string(&manifest)
            .is_ok_and(|text| text.contains(&format!("\"version\": \"{CLIENT_VERSION}\"")));
        if !installed {
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            let out = Command::new("npm")
                .args([
                    "install",
                    "--no-save",
                    "--no-package-lock",
                    "--no-audit",
                    "--no-fund",
                ])
                .arg("--prefix")
                .arg(&dir)
                .arg(format!("@deno/kv@{CLIENT_VERSION}"))
                .current_dir(&dir)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| {
                    panic!("cannot run npm ({e}): install Node.js with npm to run this test")
                });
            assert!(
                out.status.success(),
                "npm install @deno/kv@{CLIENT_VERSION} failed (is the npm registry reachable?)\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        dir
    })
}

/// Serves `db`, runs the Node client and then Deno's against it.
fn node_and_deno_pass(db: &str, dir: &Path) {
    let dbs = dir.join("dbs");
    let server = Server::start(
        db,
        &["--ephemeral".as_ref(), "--db-dir".as_ref(), dbs.as_ref()],
    );
    let script: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../open-deno-kv-server/tests/node/client.mjs",
    ]
    .iter()
    .collect();
    let mut node_run = Command::new(node());
    node_run
        .arg(&script)
        .arg(server.url())
        .env("NODE_PATH", client_dir().join("node_modules"))
        .env("DENO_KV_ACCESS_TOKEN", common::TOKEN);
    assert_client_checks("Node @deno/kv", node_run, 18);
    assert_deno_client_passes(&server.url());
}

#[test]
fn node_client_drives_kv_serve_on_sqlite() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = format!("sqlite:{}", dir.path().join("kv.sqlite3").display());
    node_and_deno_pass(&db, dir.path());
}

#[test]
fn node_client_drives_kv_serve_on_memory() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    node_and_deno_pass("memory:", dir.path());
}

#[test]
fn node_client_drives_kv_serve_on_redb() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = format!("redb:{}", dir.path().join("kv.redb").display());
    node_and_deno_pass(&db, dir.path());
}

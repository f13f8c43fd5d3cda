//! `kv serve`, the binary, driven by the real Deno 2.9.6 over KV Connect.
//!
//! Starts `kv --db sqlite:<temp> serve --ephemeral --db-dir <temp>` on a free loopback port with
//! a token from `KV_ACCESS_TOKEN`, waits for `GET /health`, and runs open-deno-kv-server's Deno script
//! (`open-deno-kv-server/tests/deno/client.ts`: get, set, getMany, list with cursors, atomic checks, u64 and
//! V8 sum/min/max, versionstamped keys, expireIn, watch, limits, ephemeral and named databases).
//! Every check the script reports must be `true`. Then SIGTERM must stop the server cleanly.
//!
//! Deno comes from `DENO_BIN` or `.ci/install-deno` (see `open_deno_kv_conformance::deno`).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Server, assert_deno_client_passes, run};

#[test]
fn deno_drives_kv_serve() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let db = format!("sqlite:{}", dir.path().join("kv.sqlite3").display());
    let dbs = dir.path().join("dbs");
    let mut server = Server::start(
        &db,
        &["--ephemeral".as_ref(), "--db-dir".as_ref(), dbs.as_ref()],
    );
    assert_deno_client_passes(&server.url());
    assert!(dbs.exists(), "--db-dir holds the named databases");

    // SIGTERM: in-flight work finishes, the database closes, the exit status is 0.
    let pid = server.child.id().to_string();
    let (sent, _, _) = run({
        let mut kill = Command::new("kill");
        kill.args(["-TERM", &pid]);
        kill
    });
    assert!(sent, "cannot send SIGTERM");
    let stopping = Instant::now();
    let status = loop {
        match server.child.try_wait() {
            Ok(Some(status)) => break status,
            _ if stopping.elapsed() > Duration::from_secs(20) => panic!("kv serve ignored SIGTERM"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert!(
        status.success(),
        "kv serve exited with {status} after SIGTERM"
    );
}

//! `kv serve`, the binary, driven by the real Deno 2.9.6 over KV Connect.
//!
//! Starts `kv --db sqlite:<temp> serve --ephemeral --db-dir <temp>` on a free loopback port with
//! a token from `KV_ACCESS_TOKEN`, waits for `GET /health`, and runs kv-server's Deno script
//! (`kv-server/tests/deno/client.ts`: get, set, getMany, list with cursors, atomic checks, u64 and
//! V8 sum/min/max, versionstamped keys, expireIn, watch, limits, ephemeral and named databases).
//! Every check the script reports must be `true`. Then SIGTERM must stop the server cleanly.
//!
//! Deno comes from `DENO_BIN` or `.ci/install-deno` (see `kv_conformance::deno`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "kv-serve-interop-token";
const DEADLINE: Duration = Duration::from_secs(120);

/// Kills the server if the test fails before stopping it.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Whether `GET /health` answers 200 over HTTP/1.1.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let request = "GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// Runs `program` to completion (or kills it after [`DEADLINE`]); returns (success, stdout, stderr).
fn run(mut command: Command) -> (bool, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let pipe = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = pipe(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = pipe(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let success = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if started.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break false;
            }
        }
    };
    (
        success,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

#[test]
fn deno_drives_kv_serve() {
    let deno = kv_conformance::deno::deno_binary().unwrap_or_else(|reason| panic!("{reason}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let port = free_port();
    let db = format!("sqlite:{}", dir.path().join("kv.sqlite3").display());
    let dbs = dir.path().join("dbs");
    let mut server = Server(
        Command::new(env!("CARGO_BIN_EXE_kv"))
            .args(["--db", &db, "serve", "--ephemeral", "--addr"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--db-dir")
            .arg(&dbs)
            .env("KV_ACCESS_TOKEN", TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start kv serve: {e}")),
    );
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kv serve never became healthy"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kv-server/tests/deno/client.ts");
    let mut deno_run = Command::new(deno);
    deno_run
        .args(["run", "--unstable-kv", "-A"])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/"))
        .env("DENO_KV_ACCESS_TOKEN", TOKEN)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1");
    let (ok, stdout, stderr) = run(deno_run);
    let context = format!("--- deno stderr ---\n{stderr}\n--- deno stdout ---\n{stdout}");
    assert!(ok, "Deno failed\n{context}");
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from Deno\n{context}"));
    let results: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON ({e})\n{context}"));
    let failed: Vec<_> = results
        .iter()
        .filter(|(_, v)| **v != serde_json::Value::Bool(true))
        .collect();
    assert!(
        results.len() >= 30,
        "the script reported only {} checks\n{context}",
        results.len()
    );
    assert!(failed.is_empty(), "failed checks: {failed:?}\n{context}");
    assert!(dbs.exists(), "--db-dir holds the named databases");

    // SIGTERM: in-flight work finishes, the database closes, the exit status is 0.
    let pid = server.0.id().to_string();
    let (sent, _, _) = run({
        let mut kill = Command::new("kill");
        kill.args(["-TERM", &pid]);
        kill
    });
    assert!(sent, "cannot send SIGTERM");
    let stopping = Instant::now();
    let status = loop {
        match server.0.try_wait() {
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

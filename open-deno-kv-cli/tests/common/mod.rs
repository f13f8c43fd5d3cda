//! What the tests that drive the `kv serve` binary share: starting it on a free loopback port
//! and stopping it, running a client program with a deadline, and reading the one JSON line of
//! check results the client scripts print (`{"check": true | "what went wrong", ...}`).

// Not every test binary uses every helper.
#![allow(dead_code)]

pub mod load;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The access token every served test database uses.
pub const TOKEN: &str = "kv-serve-interop-token";
/// How long a client program may run before it is killed and the test fails.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// A running `kv serve`; killed on drop if the test did not stop it.
pub struct Server {
    /// The server process.
    pub child: Child,
    /// Its loopback port.
    pub port: u16,
}

impl Server {
    /// Starts `kv --db DB serve --addr 127.0.0.1:PORT EXTRA...` with [`TOKEN`] in
    /// `KV_ACCESS_TOKEN` and waits until `GET /health` answers.
    pub fn start(db: &str, extra: &[&std::ffi::OsStr]) -> Server {
        Server::start_with_token_in(db, extra, "KV_ACCESS_TOKEN")
    }

    /// [`Server::start`] with [`TOKEN`] in the environment variable `token_variable` only.
    pub fn start_with_token_in(
        db: &str,
        extra: &[&std::ffi::OsStr],
        token_variable: &str,
    ) -> Server {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_kv"))
            .args(["--db", db, "serve", "--addr"])
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .env_remove("KV_ACCESS_TOKEN")
            .env_remove("DENO_KV_ACCESS_TOKEN")
            .env(token_variable, TOKEN)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start kv serve: {e}"));
        let server = Server { child, port };
        let started = Instant::now();
        while !healthy(port) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "kv serve --db {db} never became healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// The URL clients open.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kv --db memory: serve` with `extra` flags on a free port, its stderr (the log) into
/// the file `log`; returns once `/health` answers.
pub fn start_logging_memory_server(extra: &[&str], log: &Path) -> (Child, u16) {
    let port = free_port();
    let stderr = std::fs::File::create(log).unwrap_or_else(|e| panic!("{e}"));
    let child = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--db", "memory:", "serve", "--addr"])
        .arg(format!("127.0.0.1:{port}"))
        .args(extra)
        .env_remove("DENO_KV_ACCESS_TOKEN")
        .env("KV_ACCESS_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start kv serve: {e}"));
    let started = Instant::now();
    while !healthy(port) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kv serve never became healthy: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, port)
}

/// Stops a server started by [`start_logging_memory_server`] and waits for it (its log is
/// complete once it has exited).
pub fn stop_child(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Whether `GET /health` answers 200 over HTTP/1.1.
pub fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let request = "GET /health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

/// Runs `command` to completion (or kills it after [`DEADLINE`]); returns (success, stdout,
/// stderr).
pub fn run(mut command: Command) -> (bool, String, String) {
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
    let success = wait_with_deadline(&mut child);
    (
        success,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

/// Runs a client program that prints one JSON object of check results as its last `{` line, and
/// asserts it succeeded, reported at least `at_least` checks, and every one is `true`.
pub fn assert_client_checks(who: &str, command: Command, at_least: usize) {
    let (ok, stdout, stderr) = run(command);
    assert_check_output(who, ok, &stdout, &stderr, at_least);
}

/// Waits for `child` to exit, killing it after [`DEADLINE`]; whether it exited successfully.
pub fn wait_with_deadline(child: &mut Child) -> bool {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if started.elapsed() < DEADLINE => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Asserts what a client program left (`ok`: it exited successfully; its `stdout` and
/// `stderr`): its last `{` line of stdout holds at least `at_least` checks, every one `true`.
pub fn assert_check_output(who: &str, ok: bool, stdout: &str, stderr: &str, at_least: usize) {
    let context = format!("--- {who} stderr ---\n{stderr}\n--- {who} stdout ---\n{stdout}");
    assert!(ok, "{who} failed\n{context}");
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from {who}\n{context}"));
    let results: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON ({e})\n{context}"));
    let failed: Vec<_> = results
        .iter()
        .filter(|(_, v)| **v != serde_json::Value::Bool(true))
        .collect();
    assert!(
        results.len() >= at_least,
        "{who} reported only {} checks\n{context}",
        results.len()
    );
    assert!(
        failed.is_empty(),
        "{who}: failed checks: {failed:?}\n{context}"
    );
}

/// The real Deno 2.9.6 running open-deno-kv-server's client script (`open-deno-kv-server/tests/deno/client.ts`: get,
/// set, getMany, list with cursors, atomic checks, sums, versionstamped keys, expireIn, watch,
/// limits, ephemeral and named databases) against `url`; every check must pass. The server
/// needs `--ephemeral` and `--db-dir`.
pub fn assert_deno_client_passes(url: &str) {
    assert_client_checks("Deno", deno_client(url), 30);
}

/// The command [`assert_deno_client_passes`] runs, to add to (e.g. `DENO_CERT` for https://).
pub fn deno_client(url: &str) -> Command {
    let deno =
        open_deno_kv_conformance::deno::deno_binary().unwrap_or_else(|reason| panic!("{reason}"));
    let script: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "../open-deno-kv-server/tests/deno/client.ts",
    ]
    .iter()
    .collect();
    let mut deno_run = Command::new(deno);
    deno_run
        .args(["run", "--unstable-kv", "-A"])
        .arg(&script)
        .arg(url)
        .env("DENO_KV_ACCESS_TOKEN", TOKEN)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1");
    deno_run
}

/// Runs the `kv` binary in `dir` with `args` (and no `KV_DB` from the environment); a panic in
/// it fails the test, whatever its exit code.
pub fn kv(dir: &Path, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(args)
        .current_dir(dir)
        .env_remove("KV_DB")
        .output()
        .unwrap_or_else(|e| panic!("cannot run kv: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked"),
        "kv {args:?} panicked:\n{stderr}"
    );
    output
}

/// Runs `kv` in `dir` and returns its stdout; the command must succeed.
pub fn kv_ok(dir: &Path, args: &[&str]) -> String {
    let output = kv(dir, args);
    assert!(
        output.status.success(),
        "kv {args:?} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `kv` in `dir`, which must fail; returns its stderr.
pub fn kv_fails(dir: &Path, args: &[&str]) -> String {
    let output = kv(dir, args);
    assert!(!output.status.success(), "kv {args:?} should have failed");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

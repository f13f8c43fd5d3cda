//! The scale-out story, proven end to end: `kv --db postgres://…` on a throwaway PostgreSQL
//! cluster, and three `kv serve --db postgres://…` processes on that one cluster with real Deno
//! 2.9.6 clients connected to different servers, seeing one store.
//!
//! - [`kv_cli_reads_and_writes_postgres`]: `kv set`, `get` and `list` against the cluster.
//! - [`three_servers_share_one_postgres`]: Deno clients on all three servers increment one
//!   counter by check-and-set and it ends exact; a write through server A is read and watched
//!   (`kv.watch`) through server B; a message enqueued through A is delivered exactly once to a
//!   listener on B and to nobody on C, and further messages reach exactly one of two listeners.
//!
//! Queues go through `kv`'s own KV Connect client (open-deno-kv-remote, over the server's `queue/1`
//! extension): Deno's KV Connect client refuses `enqueue` and `listenQueue` on remote databases.
//!
//! The cluster comes from `open_deno_kv_postgres::testing` (initdb in a temporary directory, loopback only,
//! a free port; Debian's `postgresql-15` on these machines). Without PostgreSQL the tests fail
//! with what to install, unless `KV_POSTGRES_TESTS=skip` is set, when they say loudly that they
//! skip. Deno comes from `DENO_BIN` or `.ci/install-deno` (see `open_deno_kv_conformance::deno`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    DEADLINE, Server, TOKEN, assert_check_output, assert_client_checks, kv, wait_with_deadline,
};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};

/// Concurrent check-and-set loops in each Deno client.
const WORKERS_PER_CLIENT: u32 = 4;
/// Increments each loop makes.
const INCREMENTS_PER_WORKER: u32 = 10;
/// How long a queue message may take to arrive before the test fails.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(30);
/// How long to watch for a duplicate delivery: longer than open-deno-kv-server's 5 s queue lease, after
/// which a handed-out message that was not settled would go back to the queue.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(7);

/// A throwaway cluster (fsync off: nothing here kills the server), or `None` when PostgreSQL is
/// missing and the skip was asked for (said loudly by the harness).
fn cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions {
        fsync: false,
        ..ClusterOptions::default()
    })
}

fn stdout_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn kv_cli_reads_and_writes_postgres() {
    let Some(cluster) = cluster() else { return };
    let db = cluster.url();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |args: &[&str]| {
        let mut all = vec!["--db", db.as_str()];
        all.extend_from_slice(args);
        let output = kv(dir.path(), &all);
        assert!(
            output.status.success(),
            "kv {all:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout_of(&output)
    };

    run(&["set", r#"["users", 1n]"#, r#"{"name": "Alice"}"#]);
    run(&["set", r#"["users", 2n]"#, r#"{"name": "Bob"}"#]);
    run(&["set", r#"["other"]"#, r#""not listed""#]);

    let got = run(&["get", r#"["users", 1n]"#]);
    assert!(got.contains("Alice"), "kv get printed {got:?}");
    let listed = run(&["list", r#"["users"]"#]);
    let alice = listed.find("Alice");
    let bob = listed.find("Bob");
    assert!(
        alice.is_some() && bob.is_some() && alice < bob,
        "kv list printed {listed:?}"
    );
    assert!(!listed.contains("not listed"), "kv list printed {listed:?}");

    run(&["delete", r#"["users", 1n]"#]);
    let gone = kv(dir.path(), &["--db", &db, "get", r#"["users", 1n]"#]);
    assert_eq!(gone.status.code(), Some(1), "kv get after delete");
    assert!(
        !dir.path().join("kv.sqlite3").exists(),
        "a postgres:// --db must not create the default SQLite file"
    );
}

#[test]
fn three_servers_share_one_postgres() {
    let Some(cluster) = cluster() else { return };
    let db = cluster.url();
    let servers = [
        Server::start(&db, &[]),
        Server::start(&db, &[]),
        Server::start(&db, &[]),
    ];
    let [a, b, c] = &servers;

    counters_by_check_and_set_end_exact(&servers, &db);
    write_through_a_is_read_and_watched_through_b(a, b);
    queue_message_through_a_is_delivered_once_on_b(a, b, c);
}

/// Deno clients on every server increment one counter concurrently; it ends exact.
fn counters_by_check_and_set_end_exact(servers: &[Server], db: &str) {
    std::thread::scope(|scope| {
        for (index, server) in servers.iter().enumerate() {
            let command = deno(&[
                "count",
                &server.url(),
                &WORKERS_PER_CLIENT.to_string(),
                &INCREMENTS_PER_WORKER.to_string(),
            ]);
            scope.spawn(move || {
                assert_client_checks(&format!("Deno counter on server {index}"), command, 1)
            });
        }
    });
    let expected = servers.len() as u32 * WORKERS_PER_CLIENT * INCREMENTS_PER_WORKER;
    // Read back through PostgreSQL itself, not through any server.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let output = kv(
        dir.path(),
        &["--db", db, "get", r#"["counter"]"#, "--format", "json"],
    );
    let printed = stdout_of(&output);
    let counter = serde_json::from_str::<serde_json::Value>(&printed)
        .ok()
        .and_then(|entry| entry["value"]["number"].as_str().map(str::to_owned));
    assert_eq!(
        counter,
        Some(expected.to_string()),
        "kv get printed {printed:?}, stderr {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A Deno watch on B is running; a Deno client writes through A; B's watch sees the write and a
/// Deno read through B returns it.
fn write_through_a_is_read_and_watched_through_b(a: &Server, b: &Server) {
    let value = r#"{"from":"A"}"#;
    let watcher = WatchingClient::start(deno(&["watch", &b.url(), "note", value]));
    assert_client_checks(
        "Deno writer on A",
        deno(&["write", &a.url(), "note", value]),
        1,
    );
    assert_client_checks(
        "Deno reader on B",
        deno(&["read", &b.url(), "note", value]),
        1,
    );
    watcher.assert_checks("Deno watcher on B", 2);
}

/// One message through A reaches B's listener once and C's listener never; then, with both
/// listening, each further message is delivered exactly once in all.
fn queue_message_through_a_is_delivered_once_on_b(a: &Server, b: &Server, c: &Server) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    runtime.block_on(async {
        let deliveries = Deliveries::default();
        let on_a = remote(a).await;
        let on_b = remote(b).await;
        let on_c = remote(c).await;
        let listening_b = deliveries.listen(on_b.clone(), "B");

        on_a.enqueue(open_deno_kv::Json("first".to_owned()), Default::default())
            .await
            .unwrap_or_else(|e| panic!("enqueue through A: {e}"));
        deliveries.wait_for(1).await;
        // C listens from now on: the message is settled, so nothing may reach C, even after the
        // lease of a message that was handed out and not settled would have run out.
        let listening_c = deliveries.listen(on_c.clone(), "C");
        tokio::time::sleep(DUPLICATE_WINDOW).await;
        assert_eq!(
            deliveries.taken(),
            vec![("B".to_owned(), "first".to_owned())],
            "the message enqueued through A goes to B's listener, once"
        );

        // Both listen: every message is delivered once, to one of them.
        let more: Vec<String> = (0..10).map(|n| format!("message {n}")).collect();
        for message in &more {
            on_a.enqueue(open_deno_kv::Json(message.clone()), Default::default())
                .await
                .unwrap_or_else(|e| panic!("enqueue through A: {e}"));
        }
        deliveries.wait_for(1 + more.len()).await;
        tokio::time::sleep(DUPLICATE_WINDOW).await;
        let mut seen: Vec<String> = deliveries.taken()[1..]
            .iter()
            .map(|(_, m)| m.clone())
            .collect();
        seen.sort();
        let mut expected = more.clone();
        expected.sort();
        assert_eq!(
            seen,
            expected,
            "each message delivered exactly once across B and C: {:?}",
            deliveries.taken()
        );

        listening_b.abort();
        listening_c.abort();
        for kv in [on_a, on_b, on_c] {
            let _ = kv.close().await;
        }
    });
}

/// Queue messages taken by the listeners: (which server, payload), in arrival order.
#[derive(Clone, Default)]
struct Deliveries(Arc<Mutex<Vec<(String, String)>>>);

impl Deliveries {
    /// Listens on `kv` in a task, recording each message as delivered on `server`.
    fn listen(
        &self,
        kv: open_deno_kv::Kv,
        server: &str,
    ) -> tokio::task::JoinHandle<open_deno_kv::Result<()>> {
        let taken = self.0.clone();
        let server = server.to_owned();
        let handler = move |message: open_deno_kv::KvValue| {
            let payload = open_deno_kv::v8::to_json(&message).map_or_else(
                |e| format!("undecodable: {e}"),
                |json| json.as_str().unwrap_or("not a string").to_owned(),
            );
            taken
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((server.clone(), payload));
            std::future::ready(Ok::<(), String>(()))
        };
        tokio::spawn(async move { kv.listen_queue(handler).await })
    }

    fn taken(&self) -> Vec<(String, String)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until `count` deliveries were recorded, failing after [`DELIVERY_DEADLINE`].
    async fn wait_for(&self, count: usize) {
        let started = Instant::now();
        while self.taken().len() < count {
            assert!(
                started.elapsed() < DELIVERY_DEADLINE,
                "only {:?} delivered, {count} expected",
                self.taken()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `kv`'s KV Connect client on `server`'s default database.
async fn remote(server: &Server) -> open_deno_kv::Kv {
    open_deno_kv::Kv::open(&format!("{}?token={TOKEN}", server.url()))
        .await
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", server.url()))
}

/// Deno running `tests/deno/scale_out.ts` with `args`.
fn deno(args: &[&str]) -> Command {
    let deno =
        open_deno_kv_conformance::deno::deno_binary().unwrap_or_else(|reason| panic!("{reason}"));
    let script: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests/deno/scale_out.ts"]
        .iter()
        .collect();
    let mut command = Command::new(deno);
    command
        .args(["run", "--unstable-kv", "-A"])
        .arg(script)
        .args(args)
        .env("DENO_KV_ACCESS_TOKEN", TOKEN)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1");
    command
}

/// A Deno watcher started in the background: it is running (its watch has emitted once) when
/// [`WatchingClient::start`] returns; killed on drop if still running.
struct WatchingClient {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl WatchingClient {
    fn start(mut command: Command) -> WatchingClient {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the Deno watcher: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
            text
        });
        let mut watcher = WatchingClient {
            child,
            lines,
            stderr: Some(stderr),
        };
        if !matches!(watcher.lines.recv_timeout(DEADLINE), Ok(line) if line == "ready") {
            let _ = watcher.child.kill();
            let stderr = watcher.stderr.take().and_then(|t| t.join().ok());
            panic!("the Deno watcher did not start watching; stderr:\n{stderr:?}");
        }
        watcher
    }

    /// Waits for the watcher to end (killed after [`DEADLINE`]) and asserts its checks: at least
    /// `at_least`, all `true`.
    fn assert_checks(mut self, who: &str, at_least: usize) {
        let ok = wait_with_deadline(&mut self.child);
        // The reader thread ends at the end of stdout, which closes the channel.
        let stdout: String = self.lines.iter().map(|line| line + "\n").collect();
        let stderr = self
            .stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        assert_check_output(who, ok, &stdout, &stderr, at_least);
    }
}

impl Drop for WatchingClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

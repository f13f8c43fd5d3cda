//! Two real OS processes on one database file.
//!
//! Each test re-executes this test binary as a child process (`current_exe()` with the test's own
//! name, `--exact`), with `KV_TWO_PROC_CHILD` naming a scratch directory: the same `#[test]` fn
//! then runs its child half instead of its parent half. The processes meet through marker files
//! in that directory.
//!
//! - `counters_stay_exact_across_two_processes`: both processes do optimistic check-and-set
//!   increments of two counters at the same time; no update is lost, none is duplicated, every
//!   snapshot sees both counters equal, and no error (in particular no "database is locked")
//!   reaches either process.
//! - `watch_and_queue_see_another_process`: a watch in the parent sees a key set by the child,
//!   and a queue consumer in the parent receives a message the child enqueued (Deno's own SQLite
//!   backend does neither across processes).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use open_deno_kv_engine_kit::chrono::Utc;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Checked, Enqueue, KvError, KvValue, Mutation, ReadRange,
    SnapshotRead, Versionstamp, WatchKeyOutput, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};

/// Set in the child's environment to the scratch directory shared with the parent.
const CHILD_ENV: &str = "KV_TWO_PROC_CHILD";
/// Increments each process performs.
const INCREMENTS: usize = 300;
/// How long either side waits for the other before failing.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the child may take overall.
const CHILD_TIMEOUT: Duration = Duration::from_secs(240);
/// How long each process pauses between two increments.
const PAUSE_BETWEEN_INCREMENTS: Duration = Duration::from_millis(2);
/// How soon a cross-process change must be seen.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

const COUNTERS_TEST: &str = "counters_stay_exact_across_two_processes";
const NOTIFY_TEST: &str = "watch_and_queue_see_another_process";

fn db_path(dir: &Path) -> PathBuf {
    dir.join("kv.sqlite3")
}

/// The scratch directory if this process is a child.
fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD_ENV).map(PathBuf::from)
}

/// A spawned copy of this test binary, killed if the parent gives up early.
struct ChildProcess {
    child: Option<Child>,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// What a finished child left behind.
struct ChildOutput {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl ChildProcess {
    fn spawn(test_name: &str, dir: &Path) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child process");
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = child.stdout.take().map(|p| drain(Box::new(p)));
        let stderr = child.stderr.take().map(|p| drain(Box::new(p)));
        ChildProcess {
            child: Some(child),
            stdout,
            stderr,
        }
    }

    fn has_exited(&mut self) -> bool {
        match &mut self.child {
            Some(child) => child.try_wait().expect("poll the child").is_some(),
            None => true,
        }
    }

    /// Waits for the child to exit (killing it after `timeout`) and collects its output.
    fn wait(mut self, timeout: Duration) -> ChildOutput {
        let mut child = self.child.take().expect("child not waited for yet");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll the child") {
                break status;
            }
            if started.elapsed() > timeout {
                let _ = child.kill();
                let status = child.wait().expect("reap the killed child");
                let out = self.collect(status);
                panic!(
                    "the child did not finish within {timeout:?}\n--- child stdout ---\n{}\n--- child stderr ---\n{}",
                    out.stdout, out.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        self.collect(status)
    }

    fn collect(&mut self, status: ExitStatus) -> ChildOutput {
        let join = |h: Option<std::thread::JoinHandle<String>>| {
            h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        ChildOutput {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl ChildOutput {
    /// Fails unless the child's test passed cleanly, without any storage error in its output.
    fn assert_clean(&self) {
        let report = format!(
            "child exit: {}\n--- child stdout ---\n{}\n--- child stderr ---\n{}",
            self.status, self.stdout, self.stderr
        );
        assert!(self.status.success(), "the child process failed\n{report}");
        assert!(
            self.stdout.contains("1 passed"),
            "the child did not run its test\n{report}"
        );
        for text in [&self.stdout, &self.stderr] {
            assert!(
                !text.contains("database is locked") && !text.contains("storage error"),
                "a storage error reached the child\n{report}"
            );
        }
    }
}

/// Waits until `path` exists; fails after [`HANDSHAKE_TIMEOUT`] or, in the parent, as soon as the
/// child exits without creating it.
async fn wait_for_file(path: &Path, mut child: Option<&mut ChildProcess>) {
    let started = Instant::now();
    while !path.exists() {
        if let Some(child) = child.as_deref_mut() {
            assert!(
                !child.has_exited(),
                "the child exited before creating {}",
                path.display()
            );
        }
        assert!(
            started.elapsed() < HANDSHAKE_TIMEOUT,
            "{} did not appear within {HANDSHAKE_TIMEOUT:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn touch(path: &Path) {
    std::fs::write(path, b"").expect("create a marker file");
}

/// What one process's increments did.
struct IncrementLog {
    /// The new counter value of every committed increment, in commit order.
    committed: Vec<u64>,
    /// Commits refused because the other process got there first.
    check_failures: usize,
}

fn counter_keys() -> [Vec<u8>; 2] {
    [
        encode_key(&key!["counter", "a"]).expect("encode a key"),
        encode_key(&key!["counter", "b"]).expect("encode a key"),
    ]
}

/// Reads both counters from one snapshot: (value, versionstamp) each, 0 / None when absent.
async fn read_counters(
    kv: &Checked<SqliteBackend>,
    keys: &[Vec<u8>; 2],
) -> Result<[(u64, Option<Versionstamp>); 2], KvError> {
    let read = SnapshotRead {
        ranges: keys
            .iter()
            .map(|k| ReadRange::single_encoded_key(k.clone()))
            .collect(),
        ..Default::default()
    };
    let outputs = kv.snapshot_read(read).await?;
    assert_eq!(outputs.len(), 2, "one output per range");
    let mut counters = [(0, None); 2];
    for (slot, output) in counters.iter_mut().zip(&outputs) {
        if let Some(entry) = output.entries.first() {
            let KvValue::U64(value) = entry.value else {
                panic!("a counter holds {:?}", entry.value);
            };
            *slot = (value, Some(entry.versionstamp));
        }
    }
    Ok(counters)
}

/// `count` optimistic increments of both counters: read both with their versionstamps, write
/// both + 1 checked against those versionstamps, retry when the check fails.
async fn increment(kv: &Checked<SqliteBackend>, count: usize) -> Result<IncrementLog, KvError> {
    let keys = counter_keys();
    let mut log = IncrementLog {
        committed: Vec::with_capacity(count),
        check_failures: 0,
    };
    for _ in 0..count {
        loop {
            let [(a, a_stamp), (b, b_stamp)] = read_counters(kv, &keys).await?;
            assert_eq!(a, b, "a snapshot saw the counters differ: {a} vs {b}");
            let write = AtomicWrite {
                checks: vec![
                    Check {
                        key: keys[0].clone(),
                        versionstamp: a_stamp,
                    },
                    Check {
                        key: keys[1].clone(),
                        versionstamp: b_stamp,
                    },
                ],
                mutations: vec![
                    Mutation::set(keys[0].clone(), KvValue::U64(a + 1)),
                    Mutation::set(keys[1].clone(), KvValue::U64(b + 1)),
                ],
                enqueues: vec![],
            };
            match kv.atomic_write(write).await? {
                Some(_) => {
                    log.committed.push(a + 1);
                    break;
                }
                None => log.check_failures += 1,
            }
        }
        // A client does something between writes. Without a pause, one process re-takes
        // SQLite's write lock the moment it commits while the other sleeps in its busy handler,
        // and can run all its increments before the other gets one in: the counters stay exact,
        // but nothing would be tested concurrently.
        tokio::time::sleep(PAUSE_BETWEEN_INCREMENTS).await;
    }
    Ok(log)
}

fn parse_values(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .map(|v| v.parse().expect("a committed value"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_stay_exact_across_two_processes() {
    if let Some(dir) = child_dir() {
        // Child half: open, say ready, wait for the start signal, increment, report.
        let kv = SqliteBackend::open_with(db_path(&dir), SqliteOptions::default())
            .expect("child: open the database");
        touch(&dir.join("ready"));
        wait_for_file(&dir.join("start"), None).await;
        let log = match increment(&kv, INCREMENTS).await {
            Ok(log) => log,
            Err(err) => panic!("child: an increment failed: {err}"),
        };
        kv.close().await.expect("child: close");
        let values: Vec<String> = log.committed.iter().map(u64::to_string).collect();
        std::fs::write(dir.join("child-values.txt"), values.join(" "))
            .expect("child: write its values");
        println!(
            "child {}: {} increments, {} check failures",
            std::process::id(),
            log.committed.len(),
            log.check_failures
        );
        return;
    }

    let dir = tempfile::tempdir().expect("temp dir");
    // The parent creates (and migrates) the file first; the child opens an existing database.
    let kv = SqliteBackend::open_with(db_path(dir.path()), SqliteOptions::default())
        .expect("open the database");
    let mut child = ChildProcess::spawn(COUNTERS_TEST, dir.path());
    wait_for_file(&dir.path().join("ready"), Some(&mut child)).await;
    touch(&dir.path().join("start"));
    let started = Instant::now();
    let parent_log = match increment(&kv, INCREMENTS).await {
        Ok(log) => log,
        Err(err) => panic!("parent: an increment failed: {err}"),
    };
    let output = child.wait(CHILD_TIMEOUT);
    let elapsed = started.elapsed();
    output.assert_clean();

    let child_values = parse_values(
        &std::fs::read_to_string(dir.path().join("child-values.txt")).expect("the child's values"),
    );
    let total = 2 * INCREMENTS as u64;
    let keys = counter_keys();
    let [(a, _), (b, _)] = read_counters(&kv, &keys)
        .await
        .expect("read the final counters");
    println!(
        "parent {}: {} increments, {} check failures; {}; counters a={a} b={b}; {:.2?}",
        std::process::id(),
        parent_log.committed.len(),
        parent_log.check_failures,
        output
            .stdout
            .lines()
            .find_map(|l| l.find("child ").map(|at| &l[at..]))
            .unwrap_or("?"),
        elapsed
    );
    assert_eq!(a, total, "counter a");
    assert_eq!(b, total, "counter b");

    // Every value 1..=total was committed exactly once, by one process or the other.
    assert_eq!(parent_log.committed.len(), INCREMENTS);
    assert_eq!(child_values.len(), INCREMENTS);
    let mut all: Vec<u64> = parent_log
        .committed
        .iter()
        .chain(&child_values)
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=total).collect::<Vec<_>>(),
        "lost or repeated increments"
    );

    // The processes really ran at the same time: each committed before the other's last commit.
    let (p_min, p_max) = (
        parent_log.committed[0],
        parent_log.committed[INCREMENTS - 1],
    );
    let (c_min, c_max) = (child_values[0], child_values[INCREMENTS - 1]);
    assert!(
        p_min < c_max && c_min < p_max,
        "the processes did not overlap: parent {p_min}..={p_max}, child {c_min}..={c_max}"
    );
    kv.close().await.expect("close");
}

const WATCHED_VALUE: &[u8] = b"set by the child process";
/// V8 serialization of the string "from the child".
const MESSAGE: &[u8] = b"\xff\x0f\x22\x0efrom the child";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_queue_see_another_process() {
    let watched = encode_key(&key!["watched"]).expect("encode a key");
    if let Some(dir) = child_dir() {
        // Child half: set the watched key, then enqueue a message, in two commits.
        let kv = SqliteBackend::open_with(db_path(&dir), SqliteOptions::default())
            .expect("child: open the database");
        let set = AtomicWrite {
            mutations: vec![Mutation::set(
                watched,
                KvValue::Bytes(WATCHED_VALUE.to_vec().into()),
            )],
            ..Default::default()
        };
        kv.atomic_write(set)
            .await
            .expect("child: set the watched key")
            .expect("child: the set committed");
        touch(&dir.join("set"));
        let enqueue = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: MESSAGE.to_vec(),
                ready_at: Utc::now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..Default::default()
        };
        kv.atomic_write(enqueue)
            .await
            .expect("child: enqueue")
            .expect("child: the enqueue committed");
        touch(&dir.join("enqueued"));
        kv.close().await.expect("child: close");
        println!("child {}: set and enqueued", std::process::id());
        return;
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let kv = std::sync::Arc::new(
        SqliteBackend::open_with(db_path(dir.path()), SqliteOptions::default())
            .expect("open the database"),
    );
    let mut watch = kv.watch(vec![watched.clone()]).expect("watch");
    let first = tokio::time::timeout(NOTIFY_TIMEOUT, watch.next())
        .await
        .expect("the first emission comes at once")
        .expect("the stream is open")
        .expect("the first emission");
    assert_eq!(first, vec![WatchKeyOutput::Changed(None)]);
    let consumer = {
        let kv = kv.clone();
        tokio::spawn(async move { kv.dequeue_next_message().await })
    };

    let mut child = ChildProcess::spawn(NOTIFY_TEST, dir.path());

    // The watch sees the child's set.
    wait_for_file(&dir.path().join("set"), Some(&mut child)).await;
    let set_at = Instant::now();
    let entry = loop {
        let emission = tokio::time::timeout_at((set_at + NOTIFY_TIMEOUT).into(), watch.next())
            .await
            .expect("the watch did not see the other process's write within 5 s")
            .expect("the watch stream ended")
            .expect("a watch emission");
        if let [WatchKeyOutput::Changed(Some(entry))] = emission.as_slice() {
            break entry.clone();
        }
    };
    let watch_latency = set_at.elapsed();
    assert_eq!(entry.key, watched);
    assert_eq!(entry.value, KvValue::Bytes(WATCHED_VALUE.to_vec().into()));

    // The consumer receives the child's message.
    wait_for_file(&dir.path().join("enqueued"), Some(&mut child)).await;
    let enqueued_at = Instant::now();
    let message = tokio::time::timeout_at((enqueued_at + NOTIFY_TIMEOUT).into(), consumer)
        .await
        .expect("the consumer did not receive the other process's message within 5 s")
        .expect("the consumer task")
        .expect("dequeue")
        .expect("a message, not the end of the queue");
    let queue_latency = enqueued_at.elapsed();
    assert_eq!(message.payload(), MESSAGE);
    message.finish(true).await.expect("finish the message");

    let output = child.wait(CHILD_TIMEOUT);
    output.assert_clean();
    println!(
        "parent {}: watch saw the child's set after {watch_latency:.2?}, consumer got its message after {queue_latency:.2?}",
        std::process::id()
    );
    kv.close().await.expect("close");
}

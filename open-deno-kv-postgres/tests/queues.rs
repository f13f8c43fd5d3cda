//! Queue consumers taking messages in batches must not starve each other. Each consumer here is
//! a handle of its own on one store — its own connection pool, committer, listener and
//! housekeeping, everything a second process would have — on one throwaway cluster per test.
//!
//! `two_consumers_on_two_processes_each_get_a_share` runs its consumers in two real OS
//! processes: it re-executes this test binary twice (the test's own name, `--exact`), with
//! [`CHILD_DIR`] naming a scratch directory, and the same `#[test]` fn then runs its child half.
//! Parent and children meet through marker files in that directory.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use open_deno_kv_engine_kit::{AtomicWrite, Backend, Enqueue, ManualClock};

mod common;
use common::{cluster, message_write, open, open_at, open_url};

/// `count` messages, one atomic write each, payloads `0..count` (8 bytes, little-endian).
async fn enqueue(kv: &dyn Backend, range: std::ops::Range<u64>) {
    for i in range {
        let write = AtomicWrite {
            enqueues: vec![Enqueue {
                payload: i.to_le_bytes().to_vec(),
                ready_at: chrono::Utc::now(),
                keys_if_undelivered: vec![],
                backoff_schedule: None,
            }],
            ..AtomicWrite::default()
        };
        kv.atomic_write(write)
            .await
            .expect("enqueue")
            .expect("an enqueue without checks commits");
    }
}

fn index(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload.try_into().expect("an 8-byte payload"))
}

/// Consumes until `until` says every message arrived (or `bound` passes), each taking `work`;
/// returns the payload indexes it finished, in order.
async fn consume(
    kv: Arc<dyn Backend>,
    work: Duration,
    seen: Arc<std::sync::Mutex<BTreeMap<u64, usize>>>,
    total: usize,
    bound: Duration,
) -> Vec<u64> {
    let started = Instant::now();
    let mut mine = Vec::new();
    while seen.lock().expect("not poisoned").len() < total && started.elapsed() < bound {
        let Ok(next) =
            tokio::time::timeout(Duration::from_millis(100), kv.dequeue_next_message()).await
        else {
            continue;
        };
        let message = next.expect("dequeue").expect("the handle is open");
        let i = index(message.payload());
        tokio::time::sleep(work).await;
        message.finish(true).await.expect("finish");
        *seen.lock().expect("not poisoned").entry(i).or_default() += 1;
        mine.push(i);
    }
    mine
}

/// What consumers A and B received (payload indexes, once per delivery), started together on
/// messages `0..total`: every message exactly once, and at least 30% to each.
fn assert_fair_shares(how: &str, got_a: &[u64], got_b: &[u64], total: u64) {
    eprintln!("shares on {how}: A {}, B {}", got_a.len(), got_b.len());
    let mut seen = BTreeMap::<u64, usize>::new();
    for i in got_a.iter().chain(got_b) {
        *seen.entry(*i).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "received twice: {twice:?}");
    assert_eq!(
        seen.keys().copied().collect::<Vec<_>>(),
        (0..total).collect::<Vec<_>>(),
        "every message received"
    );
    for (name, got) in [("A", got_a), ("B", got_b)] {
        assert!(
            got.len() as u64 * 10 >= total * 3,
            "consumer {name} got {} of {total} (A {}, B {})",
            got.len(),
            got_a.len(),
            got_b.len()
        );
    }
}

/// Two consumers on two handles, started together on 100 waiting messages, each spending 5 ms
/// per message: each gets a fair share (at least 30 of the 100), every message arrives exactly
/// once. A consumer that leased a large batch up front (`LIMIT 100`) would take them all and
/// leave the other idle; taking as many as the consumer's recent pace handles in 20 ms keeps
/// the batches at a few messages here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_on_two_handles_each_get_a_share() {
    const TOTAL: usize = 100;
    let Some(cluster) = cluster() else { return };
    let a: Arc<dyn Backend> = Arc::new(open(&cluster, "fair").await.unwrap());
    let b: Arc<dyn Backend> = Arc::new(open(&cluster, "fair").await.unwrap());
    enqueue(&*a, 0..TOTAL as u64).await;

    let seen = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let bound = Duration::from_secs(60);
    let work = Duration::from_millis(5);
    let (got_a, got_b) = tokio::join!(
        tokio::spawn(consume(a.clone(), work, seen.clone(), TOTAL, bound)),
        tokio::spawn(consume(b.clone(), work, seen.clone(), TOTAL, bound)),
    );
    let (got_a, got_b) = (got_a.unwrap(), got_b.unwrap());

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), TOTAL, "every message arrived within {bound:?}");
    assert_fair_shares("two handles", &got_a, &got_b, TOTAL as u64);
    assert!(a.queued_messages().await.unwrap().is_empty());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Set in a consumer child process: the scratch directory it meets the parent in.
const CHILD_DIR: &str = "KV_POSTGRES_FAIR_CHILD_DIR";
/// Set in a consumer child process: the store's URL.
const CHILD_URL: &str = "KV_POSTGRES_FAIR_CHILD_URL";
/// Set in a consumer child process: its name (`A` or `B`), which names its files.
const CHILD_NAME: &str = "KV_POSTGRES_FAIR_CHILD_NAME";
const PROCESSES_TEST: &str = "two_consumers_on_two_processes_each_get_a_share";
/// The schema the two processes share.
const PROCESSES_SCHEMA: &str = "fair_processes";
/// How long either side waits for the other's marker file.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long consuming may take, in the parent and in each child (only a hang reaches it).
const CONSUME_BOUND: Duration = Duration::from_secs(60);

/// A consumer child of this test binary, killed (by its own PID) and reaped when dropped, so no
/// early return or failed assertion leaves one running.
struct ConsumerProcess {
    name: &'static str,
    child: Option<Child>,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl ConsumerProcess {
    fn spawn(name: &'static str, dir: &Path, url: &str) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([PROCESSES_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .env(CHILD_URL, url)
            .env(CHILD_NAME, name)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a consumer process");
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        let stdout = child.stdout.take().map(|p| drain(Box::new(p)));
        let stderr = child.stderr.take().map(|p| drain(Box::new(p)));
        ConsumerProcess {
            name,
            child: Some(child),
            stdout,
            stderr,
        }
    }

    /// Panics (the guard then kills both children) if this child has exited: it was to wait
    /// for the parent.
    fn assert_running(&mut self, waiting_for: &str) {
        let child = self.child.as_mut().expect("not waited for yet");
        if let Some(status) = child.try_wait().expect("poll the child") {
            self.child = None;
            let output = self.output();
            panic!(
                "consumer process {} exited ({status}) while the parent waited for {waiting_for}\n{output}",
                self.name
            );
        }
    }

    /// Waits for the child to exit, and checks that it ran its test and that it passed.
    async fn wait_clean(&mut self, timeout: Duration) {
        let started = Instant::now();
        let status: ExitStatus = loop {
            let child = self.child.as_mut().expect("not waited for yet");
            if let Some(status) = child.try_wait().expect("poll the child") {
                self.child = None;
                break status;
            }
            assert!(
                started.elapsed() < timeout,
                "consumer process {} did not exit within {timeout:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let output = self.output();
        assert!(
            status.success() && output.contains("1 passed"),
            "consumer process {} failed ({status})\n{output}",
            self.name
        );
    }

    /// The child's stdout and stderr, once it has exited.
    fn output(&mut self) -> String {
        let join = |h: Option<std::thread::JoinHandle<String>>| {
            h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        format!(
            "--- stdout of {name} ---\n{}\n--- stderr of {name} ---\n{}",
            join(self.stdout.take()),
            join(self.stderr.take()),
            name = self.name
        )
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until `path` exists; fails after [`HANDSHAKE_TIMEOUT`], and in the parent as soon as a
/// child exits (it would never create it).
async fn wait_for_file(path: &Path, children: &mut [ConsumerProcess]) {
    let started = Instant::now();
    while !path.exists() {
        for child in children.iter_mut() {
            child.assert_running(&path.display().to_string());
        }
        assert!(
            started.elapsed() < HANDSHAKE_TIMEOUT,
            "{} did not appear within {HANDSHAKE_TIMEOUT:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn touch(path: &Path) {
    std::fs::write(path, b"").expect("create a marker file");
}

/// The child half of [`PROCESSES_TEST`], if this process is a consumer child: opens the store,
/// creates `ready-NAME`, waits for `go`, then takes, works on (`work`) and finishes messages until
/// `stop` appears; closes its handle (storing its successes) and writes the payload index of
/// every message it received, in order, one a line, to `got-NAME`.
async fn consumer_child(work: Duration) -> bool {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return false;
    };
    let url = std::env::var(CHILD_URL).expect("the parent names the store");
    let name = std::env::var(CHILD_NAME).expect("the parent names the child");
    let kv = open_url(&url, PROCESSES_SCHEMA)
        .await
        .expect("child: open the store");
    touch(&dir.join(format!("ready-{name}")));
    wait_for_file(&dir.join("go"), &mut []).await;
    let started = Instant::now();
    let stop = dir.join("stop");
    let mut got = Vec::new();
    while !stop.exists() {
        assert!(
            started.elapsed() < CONSUME_BOUND,
            "child {name}: no stop within {CONSUME_BOUND:?}"
        );
        let Ok(next) =
            tokio::time::timeout(Duration::from_millis(100), kv.dequeue_next_message()).await
        else {
            continue;
        };
        let message = next
            .expect("child: dequeue")
            .expect("child: the handle is open");
        // Recorded on receipt: a message received twice shows up twice.
        got.push(index(message.payload()));
        tokio::time::sleep(work).await;
        message.finish(true).await.expect("child: finish");
    }
    kv.close().await.expect("child: close");
    let lines: String = got.iter().map(|i| format!("{i}\n")).collect();
    std::fs::write(dir.join(format!("got-{name}")), lines).expect("child: write what it got");
    println!(
        "consumer {name} (pid {}): {} messages",
        std::process::id(),
        got.len()
    );
    true
}

/// The same as [`two_consumers_on_two_handles_each_get_a_share`], with each consumer in an OS
/// process of its own: both children open the store and report ready, then start together on
/// 100 waiting messages at 5 ms of work each. Each gets at least 30, every message is received
/// exactly once (no lease runs out here, so no redelivery either), and the queue is empty
/// afterwards, as a handle of the parent lists it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_on_two_processes_each_get_a_share() {
    const TOTAL: u64 = 100;
    let work = Duration::from_millis(5);
    if consumer_child(work).await {
        return;
    }
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, PROCESSES_SCHEMA).await.unwrap();
    enqueue(&kv, 0..TOTAL).await;
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = scratch.path();
    let url = cluster.store_url();
    let mut children = [
        ConsumerProcess::spawn("A", dir, &url),
        ConsumerProcess::spawn("B", dir, &url),
    ];
    for name in ["A", "B"] {
        wait_for_file(&dir.join(format!("ready-{name}")), &mut children).await;
    }
    touch(&dir.join("go"));

    // Every message finished (each child's successes stored) empties the queue.
    let started = Instant::now();
    while kv.queue_depth().await.unwrap() > 0 {
        for child in &mut children {
            child.assert_running("the queue to empty");
        }
        assert!(
            started.elapsed() < CONSUME_BOUND,
            "{} messages left after {CONSUME_BOUND:?}",
            kv.queue_depth().await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    touch(&dir.join("stop"));
    for child in &mut children {
        child.wait_clean(Duration::from_secs(30)).await;
    }

    let got = |name: &str| -> Vec<u64> {
        std::fs::read_to_string(dir.join(format!("got-{name}")))
            .expect("what the child got")
            .lines()
            .map(|line| line.parse().expect("a payload index"))
            .collect()
    };
    let (got_a, got_b) = (got("A"), got("B"));
    assert_fair_shares("two processes", &got_a, &got_b, TOTAL);
    assert!(kv.queued_messages().await.unwrap().is_empty());
    kv.close().await.unwrap();
}

/// A fast consumer takes messages ahead of its dequeues; when it stops asking (without closing:
/// its process lives on, renewing its leases), what it took ahead goes back within about a
/// second, and another consumer gets every message left — long before a lease could run out,
/// and although the first handle's leases are renewed all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_taken_ahead_by_a_consumer_that_stops_go_to_another() {
    const TOTAL: u64 = 400;
    const FIRST_TAKES: u64 = 200;
    let Some(cluster) = cluster() else { return };
    let fast = open(&cluster, "stopped").await.unwrap();
    let other = open(&cluster, "stopped").await.unwrap();
    enqueue(&fast, 0..TOTAL).await;

    let mut seen = BTreeMap::<u64, usize>::new();
    for _ in 0..FIRST_TAKES {
        let message = fast.dequeue_next_message().await.unwrap().unwrap();
        *seen.entry(index(message.payload())).or_default() += 1;
        message.finish(true).await.unwrap();
    }
    // The fast consumer stops here, with messages taken ahead (its pace was hundreds per
    // second at least). Its own successes stored, what is still leased was taken ahead.
    assert!(fast.queued_messages().await.unwrap().len() == (TOTAL - FIRST_TAKES) as usize);
    let started = Instant::now();
    let ahead: u64 = cluster
        .psql(
            "postgres",
            "SELECT count(*) FROM stopped.kv_queue WHERE lease IS NOT NULL",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(ahead > 0, "the fast consumer took no message ahead");
    // The other gets all the rest.
    let bound = Duration::from_secs(3);
    while seen.len() < TOTAL as usize {
        let message = tokio::time::timeout(bound, other.dequeue_next_message())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} messages stayed with the stopped consumer for {bound:?}",
                    TOTAL as usize - seen.len()
                )
            })
            .unwrap()
            .unwrap();
        *seen.entry(index(message.payload())).or_default() += 1;
        message.finish(true).await.unwrap();
    }
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert!(other.queued_messages().await.unwrap().is_empty());
    fast.close().await.unwrap();
    other.close().await.unwrap();
}

/// A success recorded just before its handle is dropped without `close` is still stored (the
/// finisher's work outlives the handle), so the message does not come back once its lease has
/// run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_just_before_the_handle_is_dropped_is_stored() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::at_test_epoch();
    let consumer = open_at(&cluster, "dropped", &clock).await;
    let other = open_at(&cluster, "dropped", &clock).await;
    consumer
        .atomic_write(message_write(b"done", &clock))
        .await
        .unwrap()
        .unwrap();
    let message = consumer.dequeue_next_message().await.unwrap().unwrap();
    message.finish(true).await.unwrap();
    drop(consumer);

    let stored = tokio::time::timeout(Duration::from_secs(5), async {
        while !other.queued_messages().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    stored
        .await
        .expect("the success recorded before the drop was stored");
    // Far past the lease: nothing comes back.
    clock.advance(Duration::from_secs(60));
    let again =
        tokio::time::timeout(Duration::from_millis(500), other.dequeue_next_message()).await;
    assert!(again.is_err(), "the finished message came back");
    other.close().await.unwrap();
}

//! Write load through `kv serve` processes for failover tests, and the ledger that proves
//! nothing acknowledged was lost.
//!
//! Each writer is a KV Connect client (open-deno-kv-remote, through `open_deno_kv::Kv`) on one
//! server, committing one atomic write after another:
//! `check(["w", s, writer, n] absent) + set(["w", s, writer, n]) + sum(["count", s], 1u64)`.
//! The client retries a 5xx answer (a commit the server could not finish, or whose outcome it
//! lost); the check makes such a retry harmless — if the first attempt landed, the retry's check
//! fails and writes nothing — so every `["count", s]` must equal the number of `["w", s, …]`
//! keys present, whatever the failover did. A write answered "committed" is *acknowledged*: its
//! key must be there afterwards.
//!
//! Every acknowledgement's instant is kept per server, so a test can tell when each server wrote
//! again after a kill ([`LoadLedger::served_again`]).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use open_deno_kv::{CommitOutcome, Key, Kv, KvValue, ListOptions, Selector, key};

use super::{Server, TOKEN};

/// How long a writer pauses after an error before its next write.
const PAUSE_AFTER_ERROR: Duration = Duration::from_millis(100);

/// What one writer did.
#[derive(Debug, Default)]
pub struct WriterLog {
    /// Keys of writes answered "committed".
    pub acknowledged: Vec<Key>,
    /// Keys of writes answered "check failed": an earlier attempt of the same write landed
    /// (the client retried after an answer it did not get), so the key must be there.
    pub landed_earlier: Vec<Key>,
    /// Errors (the client gave up): the write may or may not have landed.
    pub errors: Vec<String>,
}

/// Acknowledgement instants, per server.
#[derive(Debug, Clone)]
pub struct LoadLedger {
    acks: Arc<Vec<Mutex<Vec<Instant>>>>,
}

impl LoadLedger {
    fn new(servers: usize) -> Self {
        LoadLedger {
            acks: Arc::new((0..servers).map(|_| Mutex::new(Vec::new())).collect()),
        }
    }

    fn record(&self, server: usize) {
        self.acks[server]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }

    /// Server `server`'s acknowledgement instants so far.
    pub fn acks(&self, server: usize) -> Vec<Instant> {
        self.acks[server]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits until every server has acknowledged a write after `after`; panics (naming the
    /// servers that did not) after `within`: a server that never comes back.
    pub fn wait_until_all_acknowledge_after(&self, after: Instant, within: Duration) {
        let deadline = after + within;
        loop {
            let waiting: Vec<usize> = (0..self.acks.len())
                .filter(|&s| !self.acks(s).iter().any(|ack| *ack > after))
                .collect();
            if waiting.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "servers {waiting:?} acknowledged no write within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// When server `server` wrote again after a kill at `killed`: the acknowledgement that ends
    /// the longest pause between two of its acknowledgements in `[killed − 1 s, until)`, as a
    /// delay from `killed`. Before the kill acknowledgements come milliseconds apart; the
    /// failover is the one long pause. `None` if it acknowledged nothing after `killed`.
    pub fn served_again(&self, server: usize, killed: Instant, until: Instant) -> Option<Duration> {
        let from = killed.checked_sub(Duration::from_secs(1)).unwrap_or(killed);
        let mut acks: Vec<Instant> = self
            .acks(server)
            .into_iter()
            .filter(|ack| *ack >= from && *ack < until)
            .collect();
        acks.sort();
        let mut previous = *acks.first()?;
        let mut longest: Option<(Duration, Instant)> = None;
        for &ack in &acks {
            let pause = ack - previous;
            if ack > killed && longest.is_none_or(|(l, _)| pause > l) {
                longest = Some((pause, ack));
            }
            previous = ack;
        }
        longest.map(|(_, ack)| ack - killed)
    }
}

/// Writers running on a tokio runtime until [`WriteLoad::stop`].
pub struct WriteLoad {
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<WriterLog>>,
    clients: Vec<Kv>,
    /// When each server acknowledged.
    pub ledger: LoadLedger,
}

impl WriteLoad {
    /// Starts `per_server` writers on each of `servers` (on the current tokio runtime).
    pub async fn start(servers: &[Server], per_server: usize) -> WriteLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger = LoadLedger::new(servers.len());
        let mut clients = Vec::new();
        let mut writers = Vec::new();
        for (s, server) in servers.iter().enumerate() {
            let url = format!("{}?token={TOKEN}", server.url());
            let kv = Kv::open(&url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
            for w in 0..per_server {
                let (kv, stop, ledger) = (kv.clone(), stop.clone(), ledger.clone());
                writers.push(tokio::spawn(write_until_stopped(kv, s, w, stop, ledger)));
            }
            clients.push(kv);
        }
        WriteLoad {
            stop,
            writers,
            clients,
            ledger,
        }
    }

    /// Stops the writers (each finishes the write it is in) and returns what they did.
    pub async fn stop(self) -> Vec<WriterLog> {
        self.stop.store(true, Ordering::Relaxed);
        let mut logs = Vec::new();
        for writer in self.writers {
            logs.push(
                writer
                    .await
                    .unwrap_or_else(|e| panic!("a writer panicked: {e}")),
            );
        }
        for kv in self.clients {
            let _ = kv.close().await;
        }
        logs
    }
}

async fn write_until_stopped(
    kv: Kv,
    server: usize,
    writer: usize,
    stop: Arc<AtomicBool>,
    ledger: LoadLedger,
) -> WriterLog {
    let mut log = WriterLog::default();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = key!["w", server as u64, writer as u64, n];
        let outcome = kv
            .atomic()
            .check((key.clone(), None))
            .set(key.clone(), n)
            .sum(key!["count", server as u64], 1u64)
            .commit()
            .await;
        match outcome {
            Ok(CommitOutcome::Committed { .. }) => {
                ledger.record(server);
                log.acknowledged.push(key);
            }
            Ok(CommitOutcome::CheckFailed) => log.landed_earlier.push(key),
            Err(err) => {
                log.errors.push(err.to_string());
                tokio::time::sleep(PAUSE_AFTER_ERROR).await;
            }
        }
    }
    log
}

/// What the store holds after the load, read straight from PostgreSQL.
#[derive(Debug)]
pub struct Tally {
    /// Acknowledged writes, in all.
    pub acknowledged: usize,
    /// Writes answered "check failed" because an earlier attempt had landed.
    pub landed_earlier: usize,
    /// Writes whose client gave up (outcome unknown to the client).
    pub errors: usize,
    /// Acknowledged writes whose key is missing: must be 0.
    pub lost: usize,
    /// Keys present whose write was never acknowledged (landed, answer lost or given up on).
    pub unacknowledged_present: usize,
}

/// Reads every writer's keys and every counter from the store at `db` (a `postgres://` URL,
/// opened directly, not through a server) and checks them against the writers' `logs`: every
/// acknowledged key is there, every key answered "landed earlier" is there, and each server's
/// counter equals the number of its keys present. Panics naming what is wrong.
pub async fn verify(db: &str, servers: usize, logs: &[WriterLog]) -> Tally {
    let kv = Kv::open(db)
        .await
        .unwrap_or_else(|e| panic!("cannot open {db} to verify: {e}"));
    let present: HashSet<Key> = kv
        .list(Selector::prefix(key!["w"]), ListOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
        .map_ok(|entry| entry.key)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing the written keys: {e}"));
    let acknowledged: Vec<&Key> = logs.iter().flat_map(|l| &l.acknowledged).collect();
    let lost: Vec<&&Key> = acknowledged
        .iter()
        .filter(|key| !present.contains(**key))
        .collect();
    let landed_missing: Vec<&Key> = logs
        .iter()
        .flat_map(|l| &l.landed_earlier)
        .filter(|key| !present.contains(*key))
        .collect();
    for s in 0..servers {
        let counter = kv
            .get(key!["count", s as u64])
            .await
            .unwrap_or_else(|e| panic!("reading counter {s}: {e}"));
        let counted = match counter.value {
            Some(KvValue::U64(n)) => n,
            None => 0,
            Some(other) => panic!("counter {s} holds {other:?}"),
        };
        let server_part = key!["w", s as u64];
        let keys = present
            .iter()
            .filter(|key| key.parts().get(1) == server_part.parts().get(1))
            .count() as u64;
        assert_eq!(
            counted, keys,
            "server {s}'s counter must equal its writes present (each write sums 1 once)"
        );
    }
    let acknowledged_set: HashSet<&Key> = acknowledged.iter().copied().collect();
    let tally = Tally {
        acknowledged: acknowledged.len(),
        landed_earlier: logs.iter().map(|l| l.landed_earlier.len()).sum(),
        errors: logs.iter().map(|l| l.errors.len()).sum(),
        lost: lost.len(),
        unacknowledged_present: present
            .iter()
            .filter(|key| !acknowledged_set.contains(key))
            .count(),
    };
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes are missing, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        landed_missing.is_empty(),
        "writes answered \"check failed\" (so they had landed) are missing: {landed_missing:?}"
    );
    let _ = kv.close().await;
    tally
}

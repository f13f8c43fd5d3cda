//! A real HA manager: Patroni over etcd, three PostgreSQL nodes in synchronous mode, and the
//! leader killed five times under load through three `kv serve` — no acknowledged write lost.
//!
//! The test starts etcd (Debian's `etcd-server`) and three Patroni nodes (Debian's `patroni`)
//! itself, on free 127.0.0.1 ports in a temporary directory (`open_deno_kv_postgres::testing::
//! PatroniCluster`), with `synchronous_mode: true` and `ttl` 10 s, `loop_wait` 2 s,
//! `retry_timeout` 4 s. Three `kv serve` get a libpq multi-host URL naming the three nodes with
//! `target_session_attrs=read-write`, and twelve KV Connect writers commit without pause (see
//! `common::load`). Each round:
//!
//! 1. the leader's machine is lost: `SIGKILL` to its Patroni, then to its postmaster and every
//!    PostgreSQL process. Patroni goes first, and with it, because a Patroni that stays alive
//!    restarts its own crashed PostgreSQL while it still holds the leader key — a restart, not a
//!    failover, and the restart case has its own tests;
//! 2. the synchronous standby takes the leader key once the dead leader's key expires, and
//!    promotes itself; every server must acknowledge writes again (a hang fails the test after
//!    [`SERVE_AGAIN_WITHIN`]);
//! 3. the killed node's Patroni is started again: it rewinds its PostgreSQL onto the new
//!    timeline and rejoins as a standby, so the next round again has three nodes.
//!
//! After the rounds, every acknowledged write must be on the last leader and each server's `sum`
//! counter must equal its writes present. Printed per round: when the dead leader had last renewed
//! its key, when the new leader took the key and when its PostgreSQL accepted writes (from the
//! Patroni and PostgreSQL log timestamps), and when each server wrote again.
//!
//! **Time budget:** [`ROUNDS`] (5) rounds, each about 10 s of failover, 15–20 s of rejoin and
//! [`STEADY_LOAD`] of load: 122–138 s measured on two busy cores, cluster start included; the
//! budget stated for CI is 5 minutes.
//! For measuring, `KV_PATRONI_ROUNDS=N` runs N rounds instead, and `KV_PATRONI_TTL`,
//! `KV_PATRONI_LOOP_WAIT` and `KV_PATRONI_RETRY_TIMEOUT` replace the Patroni settings.
//!
//! Missing Patroni, etcd or PostgreSQL fails the test with the package to install, unless
//! `KV_POSTGRES_TESTS=skip` is set (then it says loudly that it skips).

mod common;

use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, NaiveDateTime, Utc};
use common::Server;
use common::load::{WriteLoad, verify};
use open_deno_kv_postgres::testing::{PatroniCluster, PatroniSettings};

/// Leader kills, unless `KV_PATRONI_ROUNDS` says otherwise.
const ROUNDS: usize = 5;
/// Servers sharing the cluster.
const SERVERS: usize = 3;
/// Writers per server.
const WRITERS_PER_SERVER: usize = 4;
/// Load between a round's recovery and the next kill.
const STEADY_LOAD: Duration = Duration::from_secs(2);
/// How long the servers may take to write again after a kill before the test fails: far above
/// the measured 8.8–11.7 s, only a hang fails it.
const SERVE_AGAIN_WITHIN: Duration = Duration::from_secs(90);
/// How long the killed node may take to rejoin as a standby.
const REJOIN_WITHIN: Duration = Duration::from_secs(180);

/// What one round saw.
struct Round {
    killed_node: usize,
    killed_at: DateTime<Utc>,
    killed: Instant,
    /// When every server had written again (the round's end for [`LoadLedger::served_again`]).
    end: Instant,
}

#[test]
fn patroni_leader_killed_five_times_loses_no_acknowledged_write() {
    let defaults = PatroniSettings::default();
    let settings = PatroniSettings {
        ttl: from_env("KV_PATRONI_TTL", defaults.ttl),
        loop_wait: from_env("KV_PATRONI_LOOP_WAIT", defaults.loop_wait),
        retry_timeout: from_env("KV_PATRONI_RETRY_TIMEOUT", defaults.retry_timeout),
    };
    let Some(mut cluster) = PatroniCluster::start_or_skip(settings) else {
        return;
    };
    let rounds = from_env("KV_PATRONI_ROUNDS", ROUNDS);
    let db = cluster.multi_host_url("postgres");
    let servers: Vec<Server> = (0..SERVERS).map(|_| Server::start(&db, &[])).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    // Instants of the ledger as wall-clock times, for the logs.
    let (base_instant, base_time) = (Instant::now(), SystemTime::now());
    let wall = |at: Instant| DateTime::<Utc>::from(base_time + (at - base_instant));

    let load = runtime.block_on(WriteLoad::start(&servers, WRITERS_PER_SERVER));
    let ledger = load.ledger.clone();
    let mut done: Vec<Round> = Vec::new();
    for round in 0..rounds {
        std::thread::sleep(STEADY_LOAD);
        let killed = Instant::now();
        let killed_node = cluster
            .kill_leader()
            .unwrap_or_else(|e| panic!("round {round}: killing the leader: {e}"));
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ledger.wait_until_all_acknowledge_after(
                killed + Duration::from_secs(1),
                SERVE_AGAIN_WITHIN,
            )
        }));
        if let Err(panic) = served {
            // Which node died, and what etcd and Patroni said meanwhile: a failure in CI must
            // say why the cluster did not serve again.
            eprintln!(
                "round {round}: node{killed_node} was killed; the cluster's last log lines:\n{}",
                cluster.log_tails()
            );
            std::panic::resume_unwind(panic);
        }
        // Every server acknowledged a write that needed the new leader: its recovery is over.
        let end = Instant::now();
        done.push(Round {
            killed_node,
            killed_at: wall(killed),
            killed,
            end,
        });
        cluster
            .restart_node(killed_node)
            .unwrap_or_else(|e| panic!("round {round}: restarting node{killed_node}: {e}"));
        cluster
            .wait_until_healthy(REJOIN_WITHIN)
            .unwrap_or_else(|e| panic!("round {round}: node{killed_node} rejoining: {e}"));
    }
    std::thread::sleep(STEADY_LOAD);
    let logs = runtime.block_on(load.stop());
    let tally = runtime.block_on(verify(&db, SERVERS, &logs));

    let node_logs: Vec<String> = (0..3).map(|node| cluster.log_of(node)).collect();
    for (index, round) in done.iter().enumerate() {
        // The next round's kill (or the end) bounds this round's acknowledgements.
        let until = done
            .get(index + 1)
            .map_or_else(Instant::now, |next| next.killed);
        let again: Vec<String> = (0..SERVERS)
            .map(|s| {
                ledger
                    .served_again(s, round.killed, until.max(round.end))
                    .map_or_else(|| "never".to_owned(), |d| secs(d.as_secs_f64()))
            })
            .collect();
        let since_kill = |at: Option<DateTime<Utc>>| {
            at.map_or_else(
                || "?".to_owned(),
                |at| secs((at - round.killed_at).as_seconds_f64()),
            )
        };
        let renewed = last_before(
            &node_logs[round.killed_node],
            "the leader with the lock",
            round.killed_at,
        );
        // The node that took the key first after the kill is the round's new leader.
        let (locked, ready) = node_logs
            .iter()
            .filter_map(|log| {
                let locked = first_after(
                    log,
                    "promoted self to leader by acquiring session lock",
                    round.killed_at,
                )?;
                let ready = first_after(
                    log,
                    "database system is ready to accept connections",
                    round.killed_at,
                );
                Some((locked, ready))
            })
            .min_by_key(|(locked, _)| *locked)
            .map_or((None, None), |(locked, ready)| (Some(locked), ready));
        eprintln!(
            "round {}: node{} killed; its last key renewal {}; new leader took the key at {} \
             and accepted writes at {}; servers wrote again at {}",
            index + 1,
            round.killed_node,
            since_kill(renewed),
            since_kill(locked),
            since_kill(ready),
            again.join(", "),
        );
    }
    // A leader change the test did not cause (a leader that stalled past retry_timeout on a
    // loaded machine) would show as more takeovers than kills.
    let takeovers: usize = node_logs
        .iter()
        .map(|log| {
            log.matches("promoted self to leader by acquiring session lock")
                .count()
        })
        .sum();
    eprintln!(
        "Patroni ttl {} s, loop_wait {} s, retry_timeout {} s; {} leader kills, {takeovers} \
         takeovers of the leader key; {} writes acknowledged, {} lost; {} answered \"check \
         failed\" because an earlier attempt had landed; {} given up by the client; {} present \
         but never acknowledged",
        settings.ttl,
        settings.loop_wait,
        settings.retry_timeout,
        done.len(),
        tally.acknowledged,
        tally.lost,
        tally.landed_earlier,
        tally.errors,
        tally.unacknowledged_present,
    );
}

/// The number in the environment variable `name`, else `default`.
fn from_env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

fn secs(seconds: f64) -> String {
    format!("{seconds:+.2} s")
}

/// The timestamp at the start of a Patroni (`2026-11-27 10:11:38,960`) or PostgreSQL
/// (`2026-11-27 10:11:38.960 UTC`) log line; both log in UTC here.
fn timestamp(line: &str) -> Option<DateTime<Utc>> {
    let stamp = line.get(..23)?.replace(',', ".");
    NaiveDateTime::parse_from_str(&stamp, "%Y-%m-%d %H:%M:%S%.3f")
        .ok()
        .map(|naive| naive.and_utc())
}

/// The time of the first line of `log` containing `text` stamped after `after`.
fn first_after(log: &str, text: &str, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    log.lines()
        .filter(|line| line.contains(text))
        .filter_map(timestamp)
        .find(|at| *at > after)
}

/// The time of the last line of `log` containing `text` stamped before `before`.
fn last_before(log: &str, text: &str, before: DateTime<Utc>) -> Option<DateTime<Utc>> {
    log.lines()
        .rev()
        .filter(|line| line.contains(text))
        .filter_map(timestamp)
        .find(|at| *at <= before)
}

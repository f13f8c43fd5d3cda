//! A primary that dies under load, and a synchronous standby promoted in its place: nothing
//! acknowledged is lost, every counter is exact, and every server writes again.
//!
//! A throwaway cluster (`open_deno_kv_postgres::testing`): a primary with `fsync` on and a
//! streaming standby made by `pg_basebackup -R` (which writes `standby.signal` and
//! `primary_conninfo`), named in the primary's `synchronous_standby_names` with
//! `synchronous_commit = on`, so a commit is answered only once the standby has flushed it. No HA
//! manager: the test is the operator. Three `kv serve` processes are given one libpq multi-host
//! URL naming both nodes with `target_session_attrs=read-write`, and twelve KV Connect writers
//! (four per server, see `common::load`) commit without pause. Then the primary's postmaster and
//! every PostgreSQL process are killed with `SIGKILL` (the loss of its machine) and the standby
//! is promoted with `pg_ctl promote`. Checked:
//!
//! - every server acknowledges writes again (a server that never comes back fails the test after
//!   [`SERVE_AGAIN_WITHIN`], a bound that only catches a hang); the delay is printed per server;
//! - every acknowledged write is on the promoted standby, and each server's `sum` counter equals
//!   the number of its writes present (each write's check makes a retried commit harmless, so any
//!   difference would be a write half-applied or applied twice);
//! - a watch and a queue listener opened on one server before the kill still work after it: a
//!   write and an enqueue through another server reach them (the LISTEN connection and the
//!   pooled queue connections moved to the new primary by themselves).
//!
//! Without PostgreSQL the test fails with what to install, unless `KV_POSTGRES_TESTS=skip`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::load::{WriteLoad, verify};
use common::{Server, TOKEN};
use futures::StreamExt as _;
use open_deno_kv::{Kv, KvValue, key};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};

/// Servers sharing the cluster.
const SERVERS: usize = 3;
/// Writers per server.
const WRITERS_PER_SERVER: usize = 4;
/// Load before the kill, and after every server wrote again.
const STEADY_LOAD: Duration = Duration::from_secs(3);
/// How long a server may take to write again before the test fails: far above what is measured
/// (about a second), only a hang fails it.
const SERVE_AGAIN_WITHIN: Duration = Duration::from_secs(60);
/// How long a watch or a queue message may take to arrive after the failover.
const DELIVERY_WITHIN: Duration = Duration::from_secs(30);

#[test]
fn primary_killed_and_standby_promoted_loses_no_acknowledged_write() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        synchronous_replica: true,
        ..ClusterOptions::default()
    }) else {
        return;
    };
    let db = cluster.multi_host_url("postgres");
    let servers: Vec<Server> = (0..SERVERS).map(|_| Server::start(&db, &[])).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    runtime.block_on(async {
        let watcher = remote(&servers[1]).await;
        let mut watch = watcher
            .watch([key!["note"]])
            .unwrap_or_else(|e| panic!("watch through server 1: {e}"));
        let first = watch.next().await;
        assert!(
            matches!(&first, Some(Ok(entries)) if entries[0].value.is_none()),
            "the watch's first emission: {first:?}"
        );
        let delivered = Arc::new(Mutex::new(Vec::<String>::new()));
        let listening = {
            let (kv, delivered) = (watcher.clone(), delivered.clone());
            tokio::spawn(async move {
                kv.listen_queue(move |message: KvValue| {
                    let text = open_deno_kv::v8::to_json(&message)
                        .map(|json| json.to_string())
                        .unwrap_or_default();
                    delivered
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(text);
                    std::future::ready(Ok::<(), String>(()))
                })
                .await
            })
        };

        let load = WriteLoad::start(&servers, WRITERS_PER_SERVER).await;
        tokio::time::sleep(STEADY_LOAD).await;
        let ledger = load.ledger.clone();
        let before: usize = (0..SERVERS).map(|s| ledger.acks(s).len()).sum();
        assert!(before > 0, "no write acknowledged before the kill");

        let killed = Instant::now();
        cluster
            .kill_primary()
            .unwrap_or_else(|e| panic!("killing the primary: {e}"));
        cluster
            .promote_replica()
            .unwrap_or_else(|e| panic!("promoting the standby: {e}"));
        let promoted = killed.elapsed();
        ledger.wait_until_all_acknowledge_after(Instant::now(), SERVE_AGAIN_WITHIN);
        tokio::time::sleep(STEADY_LOAD).await;
        let end = Instant::now();
        let logs = load.stop().await;

        // The watch and the queue listener on server 1 outlived the failover.
        let writer = remote(&servers[0]).await;
        writer
            .set(key!["note"], "after the failover")
            .await
            .unwrap_or_else(|e| panic!("write through server 0: {e}"));
        let seen = tokio::time::timeout(DELIVERY_WITHIN, async {
            while let Some(emission) = watch.next().await {
                let emission = emission.unwrap_or_else(|e| panic!("watch: {e}"));
                if emission[0].value.is_some() {
                    return emission[0].value.clone();
                }
            }
            None
        })
        .await;
        assert!(
            matches!(&seen, Ok(Some(KvValue::V8(_)))),
            "the watch opened before the kill saw the write after it: {seen:?}"
        );
        writer
            .enqueue("after the failover", Default::default())
            .await
            .unwrap_or_else(|e| panic!("enqueue through server 0: {e}"));
        let started = Instant::now();
        while delivered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            assert!(
                started.elapsed() < DELIVERY_WITHIN,
                "the queue listener opened before the kill got nothing"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        listening.abort();
        let _ = writer.close().await;
        let _ = watcher.close().await;

        let tally = verify(&db, SERVERS, &logs).await;
        let again: Vec<String> = (0..SERVERS)
            .map(|s| {
                ledger.served_again(s, killed, end).map_or_else(
                    || "never".to_owned(),
                    |d| format!("{:.2} s", d.as_secs_f64()),
                )
            })
            .collect();
        eprintln!(
            "failover (kill -9 of the primary, pg_ctl promote of the synchronous standby, \
             promoted {:.2} s after the kill): servers wrote again after {}; {} writes \
             acknowledged, {} lost; {} answered \"check failed\" because an earlier attempt had \
             landed; {} given up by the client; {} present but never acknowledged",
            promoted.as_secs_f64(),
            again.join(", "),
            tally.acknowledged,
            tally.lost,
            tally.landed_earlier,
            tally.errors,
            tally.unacknowledged_present,
        );
    });
}

/// `kv`'s KV Connect client on `server`.
async fn remote(server: &Server) -> Kv {
    Kv::open(&format!("{}?token={TOKEN}", server.url()))
        .await
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", server.url()))
}

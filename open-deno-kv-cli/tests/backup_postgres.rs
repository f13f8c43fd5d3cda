//! Two `kv serve --backup-to` on one PostgreSQL store: exactly one ships at a time (the
//! `ShippingLease` of open-deno-kv-postgres, read from each server's `kv_backup_shipping`
//! gauge), and when the shipping one is killed with SIGKILL under write load, the other takes
//! over; the bucket then holds every commit in one unbroken chain (the reader refuses a gap), and
//! its latest state is the store's.
//!
//! Without PostgreSQL the test fails with what to install, unless `KV_POSTGRES_TESTS=skip`.

#![allow(clippy::unwrap_used)]

mod common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::load::WriteLoad;
use common::{Server, kv_ok};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};

/// Far above the second a takeover takes: only a hang fails.
const WITHIN: Duration = Duration::from_secs(90);

/// The `kv_backup_shipping` and `kv_backup_commits_behind` samples of the server on `port`
/// (`None` when it does not answer).
fn shipping_state(port: u16) -> Option<(bool, f64)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = "GET /metrics HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    let sample = |name: &str| {
        body.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    Some((
        sample("kv_backup_shipping")? == 1.0,
        sample("kv_backup_commits_behind")?,
    ))
}

/// Waits until exactly one of `servers` ships, and returns its index.
fn the_one_shipping(servers: &[&Server]) -> usize {
    let started = Instant::now();
    loop {
        let shipping: Vec<usize> = servers
            .iter()
            .enumerate()
            .filter(|(_, s)| shipping_state(s.port).is_some_and(|(ships, _)| ships))
            .map(|(i, _)| i)
            .collect();
        assert!(shipping.len() <= 1, "servers {shipping:?} ship at once");
        if let [one] = shipping[..] {
            return one;
        }
        assert!(
            started.elapsed() < WITHIN,
            "no server took the shipping over"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn one_server_ships_and_another_takes_over_when_it_is_killed_leaving_no_gap() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    std::fs::create_dir(&bucket).unwrap();
    let to = format!("file://{}", bucket.display());
    let db = format!("{}?schema=shipped", cluster.store_url());
    let extra: Vec<&OsStr> = ["--metrics", "--backup-to", to.as_str()]
        .into_iter()
        .map(OsStr::new)
        .collect();
    let mut servers = vec![Server::start(&db, &extra), Server::start(&db, &extra)];

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let load = runtime.block_on(WriteLoad::start(&servers, 2));
    std::thread::sleep(Duration::from_secs(2));
    let shipper = the_one_shipping(&servers.iter().collect::<Vec<_>>());

    // SIGKILL: no goodbye; the server ends its session and with it the lease.
    servers[shipper].child.kill().unwrap();
    servers[shipper].child.wait().unwrap();
    let survivor = servers.remove(1 - shipper);
    drop(servers);
    let killed_at = Instant::now();
    assert_eq!(the_one_shipping(&[&survivor]), 0);
    eprintln!(
        "the other server took the shipping over after {:?}",
        killed_at.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    let logs = runtime.block_on(load.stop());
    let acknowledged: usize = logs.iter().map(|l| l.acknowledged.len()).sum();
    assert!(acknowledged > 0, "no write was acknowledged");

    // The survivor ships everything, then the bucket's latest state is the store's.
    let started = Instant::now();
    while shipping_state(survivor.port) != Some((true, 0.0)) {
        assert!(started.elapsed() < WITHIN, "the survivor never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed = kv_ok(dir.path(), &["backups", "list", &to]);
    assert!(listed.contains("recovery points"), "{listed}");
    kv_ok(
        dir.path(),
        &["--db", "sqlite:restored.sqlite3", "restore", "--from", &to],
    );
    let dump = |db: &str| -> Vec<String> {
        kv_ok(dir.path(), &["dump", db])
            .lines()
            .filter(|l| !l.contains("\"format\""))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(dump("sqlite:restored.sqlite3"), dump(&db));
    drop(survivor);
}

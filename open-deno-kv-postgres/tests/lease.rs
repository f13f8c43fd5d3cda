//! `ShippingLease`: one holder per store at a time, handed on when the holder's session ends
//! (released, dropped, or ended by the server as a dead process's is), and one lease per store
//! when several stores share a database.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use open_deno_kv_postgres::{PostgresError, ShippingLease};

mod common;
use common::{cluster, open};

/// The store URL of `schema` on `cluster`.
fn url_of(cluster: &open_deno_kv_postgres::testing::TestCluster, schema: &str) -> String {
    format!("{}?schema={schema}", cluster.store_url())
}

/// Tries to take the lease until it is taken; panics after `bound` (a hang, not a timing).
async fn take_within(url: &str, bound: Duration) -> ShippingLease {
    let start = Instant::now();
    loop {
        if let Some(lease) = ShippingLease::try_acquire(url).await.unwrap() {
            return lease;
        }
        assert!(
            start.elapsed() < bound,
            "the lease was not handed on within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_holder_at_a_time_and_the_next_takes_over_when_it_lets_go() {
    let Some(cluster) = cluster() else { return };
    let _store = open(&cluster, "leased").await.unwrap();
    let url = url_of(&cluster, "leased");

    let first = ShippingLease::try_acquire(&url)
        .await
        .unwrap()
        .expect("free");
    first.confirm().await.unwrap();
    assert_eq!(first.schema(), "leased");
    for _ in 0..3 {
        assert!(ShippingLease::try_acquire(&url).await.unwrap().is_none());
    }

    // Released: the next one takes it at once.
    first.release().await.unwrap();
    let second = ShippingLease::try_acquire(&url)
        .await
        .unwrap()
        .expect("released");
    assert!(ShippingLease::try_acquire(&url).await.unwrap().is_none());

    // Dropped: its connection closes, and the server lets go of the lock.
    drop(second);
    let third = take_within(&url, Duration::from_secs(30)).await;
    third.confirm().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_session_the_server_ended_learns_it_and_another_takes_over() {
    let Some(cluster) = cluster() else { return };
    let _store = open(&cluster, "ended").await.unwrap();
    let url = url_of(&cluster, "ended");
    let holder = ShippingLease::try_acquire(&url)
        .await
        .unwrap()
        .expect("free");

    // What the server does to the session of a process that died: end it. Found by the lock
    // it holds (advisory locks show in pg_locks with the holder's pid).
    let ended = cluster
        .psql(
            "postgres",
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted",
        )
        .unwrap();
    assert_eq!(ended.trim(), "1", "one session held an advisory lock");

    let next = take_within(&url, Duration::from_secs(30)).await;
    match holder.confirm().await {
        Err(PostgresError::LeaseLost { schema, .. }) => assert_eq!(schema, "ended"),
        other => panic!("the old holder was not told: {other:?}"),
    }
    next.confirm().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_of_one_database_have_two_leases_and_a_schema_without_a_store_has_none() {
    let Some(cluster) = cluster() else { return };
    let _a = open(&cluster, "store_a").await.unwrap();
    let _b = open(&cluster, "store_b").await.unwrap();
    let a = ShippingLease::try_acquire(&url_of(&cluster, "store_a"))
        .await
        .unwrap();
    let b = ShippingLease::try_acquire(&url_of(&cluster, "store_b"))
        .await
        .unwrap();
    assert!(a.is_some() && b.is_some(), "each store's lease is its own");

    cluster.psql("postgres", "CREATE SCHEMA empty").unwrap();
    match ShippingLease::try_acquire(&url_of(&cluster, "empty")).await {
        Err(PostgresError::NotOurs { reason }) => {
            assert!(reason.contains("no Deno KV store"), "{reason}")
        }
        other => panic!("a schema without a store gave a lease: {other:?}"),
    }
    match ShippingLease::try_acquire(&url_of(&cluster, "Not-An-Identifier")).await {
        Err(PostgresError::InvalidSchemaName { name }) => assert_eq!(name, "Not-An-Identifier"),
        other => panic!("a bad schema name was not refused: {other:?}"),
    }
}

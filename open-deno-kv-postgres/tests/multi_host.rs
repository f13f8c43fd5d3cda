//! libpq multi-host URLs, as `docs/postgres.md` describes them for failover: with
//! `target_session_attrs=read-write` every connection of the store goes to the primary wherever
//! it is listed; without it, the first node that accepts a connection is used, and an open that
//! lands on a standby is refused as `NotPrimary`;
//! libpq's `primary` / `standby` values are refused as an invalid URL.

use open_deno_kv_postgres::PostgresError;
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};

mod common;
use common::{get, open_url, postgres_error, set};

/// A URL naming the standby first, then the primary, with `query`.
fn standby_first(cluster: &TestCluster, query: &str) -> String {
    let replica = cluster.replica_port().expect("the cluster has a replica");
    format!(
        "postgres://postgres@127.0.0.1:{replica},127.0.0.1:{}/postgres{query}",
        cluster.port()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn read_write_finds_the_primary_listed_after_a_standby() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        replica: true,
        fsync: false,
        ..ClusterOptions::default()
    }) else {
        return;
    };

    // Without target_session_attrs the standby, listed first, is used: the open sees that it is
    // a standby and refuses it by name before creating anything anywhere.
    let refused = open_url(&standby_first(&cluster, ""), "public").await;
    let err = refused.expect_err("a store opened on a standby");
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::NotPrimary { .. })),
        "the standby's refusal: {err:?}"
    );

    let url = standby_first(&cluster, "?target_session_attrs=read-write");
    let kv = open_url(&url, "public").await.expect("open on the primary");
    set(&kv, "written", 7).await;
    assert_eq!(
        get(&kv, "written").await,
        Some(open_deno_kv_engine_kit::KvValue::U64(7))
    );
    // The write is on the primary (whose own psql sees it), not merely somewhere.
    let rows = cluster
        .psql("postgres", "select count(*) from public.kv")
        .expect("psql on the primary");
    assert_eq!(rows, "1");
}

#[tokio::test]
async fn libpq_only_session_attributes_are_an_invalid_url() {
    // Parsing fails before any connection: no server needed.
    let url = "postgres://postgres@127.0.0.1:1,127.0.0.1:2/postgres?target_session_attrs=primary";
    let err = open_url(url, "public")
        .await
        .expect_err("target_session_attrs=primary is not understood");
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::InvalidUrl { .. })),
        "{err:?}"
    );
}

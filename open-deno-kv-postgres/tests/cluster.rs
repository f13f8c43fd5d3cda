//! The throwaway cluster harness itself: it starts a reachable primary and a streaming replica,
//! survives restarts, and leaves nothing behind.

use open_deno_kv_postgres::testing::{ClusterOptions, Shutdown, TestCluster};

#[test]
fn a_cluster_with_a_replica_streams_restarts_and_cleans_up() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        replica: true,
        ..ClusterOptions::default()
    }) else {
        return;
    };
    let dir = cluster.dir().to_path_buf();
    assert!(cluster.url().starts_with("postgres://postgres@127.0.0.1:"));
    cluster
        .psql(
            "postgres",
            "create table t(x int); insert into t values (42)",
        )
        .unwrap();

    for how in [Shutdown::Fast, Shutdown::Immediate] {
        cluster.restart_primary(how).unwrap();
        assert_eq!(cluster.psql("postgres", "select x from t").unwrap(), "42");
    }
    assert!(cluster.replica_url().is_some());
    drop(cluster);
    assert!(!dir.exists(), "the cluster's directory is removed on drop");
}

//! Several stores in one database (the `schema` URL parameter), a store run by a role that owns
//! nothing but its schema, and a read-only open by a role that may only SELECT: the grants
//! docs/postgres.md lists, proven.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, KvError, KvValue, ManualClock, MutationKind, key,
};
use open_deno_kv_postgres::testing::TestCluster;
use open_deno_kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};

mod common;
use common::{cluster, get, k, message_write, postgres_error, set};

async fn open(url: &str) -> Result<open_deno_kv_engine_kit::Checked<PostgresBackend>, KvError> {
    PostgresBackend::open_with(url, PostgresOptions::default()).await
}

/// How many entries a schema's `kv` table holds.
fn rows(cluster: &TestCluster, schema: &str) -> String {
    cluster
        .psql("postgres", &format!("SELECT count(*) FROM {schema}.kv"))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_in_two_schemas_of_one_database_are_independent() {
    let Some(cluster) = cluster() else { return };
    let url = cluster.store_url();
    let a = open(&format!("{url}?schema=tenant_a")).await.unwrap();
    let b = open(&format!("{url}?schema=tenant_b")).await.unwrap();

    let first_a = set(&a, "shared", 1).await;
    let first_b = set(&b, "shared", 2).await;
    // Each store counts its own versions.
    assert_eq!(
        first_a, first_b,
        "each store's first commit has the same version"
    );
    set(&a, "only_a", 3).await;
    assert_eq!(get(&a, "shared").await, Some(KvValue::U64(1)));
    assert_eq!(get(&b, "shared").await, Some(KvValue::U64(2)));
    assert_eq!(get(&b, "only_a").await, None);
    assert_eq!(rows(&cluster, "tenant_a"), "2");
    assert_eq!(rows(&cluster, "tenant_b"), "1");

    // A message enqueued in one store is not delivered by the other.
    let clock = ManualClock::at_test_epoch();
    let enqueued = a.atomic_write(message_write(b"for a", &clock)).await;
    assert!(enqueued.unwrap().is_some());
    assert!(b.queued_messages().await.unwrap().is_empty());
    assert_eq!(a.queued_messages().await.unwrap().len(), 1);

    // A watch on one store does not wake for the other's commits.
    let mut watch = b.watch(vec![k("shared")]).unwrap();
    let initial = watch.next().await.unwrap().unwrap();
    set(&a, "shared", 10).await;
    let woke = tokio::time::timeout(Duration::from_millis(500), watch.next()).await;
    assert!(
        woke.is_err(),
        "b's watch woke for a's commit: {initial:?} then {woke:?}"
    );
    set(&b, "shared", 20).await;
    let woke = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("b's watch wakes for b's commit");
    assert!(woke.is_some());

    a.close().await.unwrap();
    b.close().await.unwrap();
    let tables = cluster
        .psql(
            "postgres",
            "SELECT table_schema || '.' || table_name FROM information_schema.tables \
             WHERE table_schema LIKE 'tenant_%' ORDER BY 1",
        )
        .unwrap();
    assert_eq!(
        tables.lines().count(),
        10,
        "five tables in each schema: {tables}"
    );
}

/// The least-privilege setup of the guide: a role that may log in and owns its schema, nothing
/// more (no CREATE on the database); and a reader with USAGE and SELECT only.
fn least_privilege(cluster: &TestCluster) {
    cluster
        .psql(
            "postgres",
            "CREATE ROLE kv_app LOGIN; \
             CREATE SCHEMA app AUTHORIZATION kv_app; \
             CREATE ROLE kv_reader LOGIN; \
             GRANT USAGE ON SCHEMA app TO kv_reader; \
             ALTER DEFAULT PRIVILEGES FOR ROLE kv_app IN SCHEMA app \
               GRANT SELECT ON TABLES TO kv_reader",
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_owns_only_its_schema_runs_the_store() {
    let Some(cluster) = cluster() else { return };
    least_privilege(&cluster);
    let url = cluster.role_url("kv_app", "postgres");
    let kv = open(&format!("{url}?schema=app")).await.unwrap();
    set(&kv, "a", 1).await;
    let sum = AtomicWrite {
        mutations: vec![support::mutation(
            &key!["a"],
            MutationKind::Sum {
                value: KvValue::U64(2),
                min_v8: Vec::new(),
                max_v8: Vec::new(),
                clamp: false,
            },
        )],
        ..AtomicWrite::default()
    };
    kv.atomic_write(sum).await.unwrap();
    assert_eq!(get(&kv, "a").await, Some(KvValue::U64(3)));
    let clock = ManualClock::at_test_epoch();
    let queued = kv.atomic_write(message_write(b"m", &clock)).await;
    assert!(queued.unwrap().is_some());
    assert!(kv.check_integrity().await.unwrap().is_ok());
    kv.close().await.unwrap();

    // It owns nothing outside its schema.
    let owned = cluster
        .psql(
            "postgres",
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_roles r ON r.oid = c.relowner WHERE r.rolname = 'kv_app' \
             AND n.nspname NOT IN ('app', 'pg_toast')",
        )
        .unwrap();
    assert_eq!(owned, "0");

    // Another schema it does not own: refused with the grant to give.
    let err = open(&format!("{url}?schema=elsewhere")).await.unwrap_err();
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::PermissionDenied { user, .. }) if user == "kv_app"),
        "{err:?}"
    );
    assert!(err.to_string().contains("AUTHORIZATION"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_open_needs_only_select() {
    let Some(cluster) = cluster() else { return };
    least_privilege(&cluster);
    let writer = open(&format!(
        "{}?schema=app",
        cluster.role_url("kv_app", "postgres")
    ))
    .await
    .unwrap();
    set(&writer, "a", 1).await;

    let reader_url = format!("{}?schema=app", cluster.role_url("kv_reader", "postgres"));
    // Writable, the reader is refused (it may not even take the version row's lock).
    let err = open(&reader_url).await.unwrap_err();
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::PermissionDenied { user, .. }) if user == "kv_reader"),
        "{err:?}"
    );
    assert!(err.to_string().contains("read_only"), "{err}");

    let reader = open(&format!("{reader_url}&read_only")).await.unwrap();
    assert!(reader.capabilities().read_only);
    assert_eq!(get(&reader, "a").await, Some(KvValue::U64(1)));
    assert!(reader.queued_messages().await.unwrap().is_empty());
    assert!(reader.check_integrity().await.unwrap().is_ok());
    let write = AtomicWrite {
        mutations: vec![support::mutation(&key!["a"], MutationKind::Delete)],
        ..AtomicWrite::default()
    };
    assert!(matches!(
        reader.atomic_write(write).await,
        Err(KvError::ReadOnly)
    ));

    // It sees the writer's commits, and its watches wake for them.
    let mut watch = reader.watch(vec![k("a")]).unwrap();
    watch.next().await.unwrap().unwrap();
    set(&writer, "a", 2).await;
    let woke = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("the reader's watch wakes");
    assert!(woke.is_some());
    assert_eq!(get(&reader, "a").await, Some(KvValue::U64(2)));

    // A read-only open creates nothing.
    let err = open(&format!(
        "{}?schema=nothing_here&read_only",
        cluster.role_url("kv_app", "postgres")
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::ReadOnlyOpen { .. })
        ),
        "{err:?}"
    );
    reader.close().await.unwrap();
    writer.close().await.unwrap();
}

//! Each way a server refuses a connection comes back as the `PostgresError` variant that names
//! its cause, with a message that says what to change; bad input in the URL is refused before
//! anything is connected to, and changes nothing.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{AtomicWrite, Backend, KvError, KvValue, MutationKind, key};
use open_deno_kv_postgres::testing::{ClusterOptions, STORE_ROLE, Shutdown, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};

mod common;
use common::postgres_error;

/// Opens `url` with the default options, expecting a refusal; returns it and its message.
async fn refused(url: &str) -> (KvError, String) {
    match PostgresBackend::open_with(url, PostgresOptions::default()).await {
        Ok(_) => panic!("{url} opened"),
        Err(err) => {
            let message = err.to_string();
            (err, message)
        }
    }
}

fn cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_an_unknown_role_and_an_unknown_database_are_named() {
    let Some(cluster) = cluster() else { return };
    cluster
        .psql(
            "postgres",
            "CREATE ROLE pw_user LOGIN PASSWORD 'right'; \
             CREATE SCHEMA pw AUTHORIZATION pw_user",
        )
        .unwrap();
    cluster
        .set_hba(&format!(
            "host all pw_user 127.0.0.1/32 scram-sha-256\n\
             host all {STORE_ROLE} 127.0.0.1/32 trust\n\
             host all nobody 127.0.0.1/32 trust"
        ))
        .unwrap();
    let port = cluster.port();

    let (err, message) = refused(&format!(
        "postgres://pw_user:wrong@127.0.0.1:{port}/postgres?schema=pw"
    ))
    .await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::WrongPassword { user }) if user == "pw_user"),
        "{err:?}"
    );
    assert!(
        message.contains("password") && message.contains("ALTER ROLE"),
        "{message}"
    );
    // The right one opens the store.
    let kv = PostgresBackend::open_with(
        &format!("postgres://pw_user:right@127.0.0.1:{port}/postgres?schema=pw"),
        PostgresOptions::default(),
    )
    .await
    .unwrap();
    kv.close().await.unwrap();

    let (err, message) = refused(&cluster.role_url("nobody", "postgres")).await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::UnknownRole { user }) if user == "nobody"),
        "{err:?}"
    );
    assert!(message.contains("CREATE ROLE \"nobody\""), "{message}");

    let (err, message) = refused(&cluster.role_url(STORE_ROLE, "no_such_db")).await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::UnknownDatabase { database }) if database == "no_such_db"),
        "{err:?}"
    );
    assert!(
        message.contains("CREATE DATABASE \"no_such_db\""),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_hba_refusals_are_named() {
    let Some(cluster) = cluster() else { return };
    cluster
        .psql(
            "postgres",
            "CREATE ROLE rejected LOGIN; CREATE ROLE unlisted LOGIN",
        )
        .unwrap();
    cluster
        .set_hba(&format!(
            "host all rejected 127.0.0.1/32 reject\n\
             host all {STORE_ROLE} 127.0.0.1/32 trust"
        ))
        .unwrap();
    for role in ["rejected", "unlisted"] {
        let (err, message) = refused(&cluster.role_url(role, "postgres")).await;
        assert!(
            matches!(postgres_error(&err), Some(PostgresError::HbaRefused { .. })),
            "{role}: {err:?}"
        );
        assert!(message.contains("pg_hba.conf"), "{message}");
        assert!(
            message.contains(role),
            "the server's words name the user: {message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_says_too_many_connections() {
    // 3 of the 6 slots are reserved for superusers (superuser_reserved_connections).
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        max_connections: 6,
        ..ClusterOptions::default()
    }) else {
        return;
    };
    let mut held = Vec::new();
    let url = cluster.store_url();
    for _ in 0..3 {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        held.push(client);
    }
    let (err, message) = refused(&format!("{url}?schema=full")).await;
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::TooManyConnections { .. })
        ),
        "{err:?}"
    );
    assert!(message.contains("max_connections"), "{message}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_where_the_primary_is_needed_is_named() {
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions {
        replica: true,
        ..ClusterOptions::default()
    }) else {
        return;
    };
    let replica = cluster.replica_url().unwrap();
    let (err, message) = refused(&format!("{replica}?schema=standby")).await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::NotPrimary { .. })),
        "{err:?}"
    );
    assert!(
        message.contains("target_session_attrs=read-write"),
        "{message}"
    );

    // A host list whose only server is a standby, with target_session_attrs=read-write.
    let port = replica
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let (err, _) = refused(&format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?target_session_attrs=read-write&schema=standby"
    ))
    .await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::NotPrimary { .. })),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_answer_is_unreachable() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (err, message) = refused(&format!("postgres://app@127.0.0.1:{port}/app")).await;
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::Unreachable { server, .. }) if server == &format!("127.0.0.1:{port}")),
        "{err:?}"
    );
    assert!(message.contains("listen_addresses"), "{message}");
}

/// An unknown sslmode, a certificate file that does not exist and a schema that is not an
/// identifier are refused before anything is connected to: the schema named beside them is
/// not created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let Some(cluster) = cluster() else { return };
    let url = cluster.store_url();
    let cases = [
        (
            format!("{url}?schema=untouched&sslmode=verify_full"),
            "sslmode",
        ),
        (
            format!("{url}?schema=untouched&sslmode=verify-ca&sslrootcert=/no/such/ca.crt"),
            "sslrootcert",
        ),
        (
            format!(
                "{url}?schema=untouched&sslcert=/no/such/client.crt&sslkey=/no/such/client.key"
            ),
            "sslcert",
        ),
        (format!("{url}?schema=Not-An-Identifier"), "schema"),
        (
            format!("{url}?schema=untouched&read_only=maybe"),
            "read_only",
        ),
    ];
    for (bad, parameter) in cases {
        let (err, message) = refused(&bad).await;
        let named = match postgres_error(&err) {
            Some(PostgresError::InvalidParameter { parameter, .. }) => parameter.clone(),
            Some(PostgresError::TlsFile { parameter, .. }) => (*parameter).to_owned(),
            Some(PostgresError::InvalidSchemaName { .. }) => "schema".to_owned(),
            _ => panic!("{bad}: {err:?}"),
        };
        assert_eq!(named, parameter, "{bad}: {message}");
        assert!(
            message.contains(parameter) || message.contains("schema name"),
            "{message}"
        );
    }
    // A replica URL naming another schema contradicts the store's.
    let options = PostgresOptions {
        schema: "untouched".to_owned(),
        replica_urls: vec![format!("{url}?schema=elsewhere")],
        ..PostgresOptions::default()
    };
    let err = PostgresBackend::open_with(&url, options).await.unwrap_err();
    assert!(
        matches!(postgres_error(&err), Some(PostgresError::InvalidParameter { parameter, .. }) if parameter == "schema"),
        "{err:?}"
    );
    let created = cluster
        .psql(
            "postgres",
            "SELECT count(*) FROM pg_namespace WHERE nspname IN ('untouched', 'elsewhere')",
        )
        .unwrap();
    assert_eq!(created, "0");
}

/// A refused connection that may pass by itself (here: nothing listens while the server is
/// down) does not fail the committer's writes at once: they wait for the server, up to the
/// committer's retry time, and commit when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waits_for_a_primary_that_is_down_and_commits_when_it_is_back() {
    let Some(cluster) = cluster() else { return };
    let cluster = Arc::new(cluster);
    let kv = common::open(&cluster, "waits").await.unwrap();
    common::set(&kv, "before", 1).await;
    cluster.stop_primary(Shutdown::Fast).unwrap();
    let write = tokio::spawn({
        let kv = Arc::new(kv);
        let writer = kv.clone();
        async move {
            let answer = support::commit(
                &*writer,
                AtomicWrite {
                    mutations: vec![support::mutation(
                        &key!["after"],
                        MutationKind::Set(KvValue::U64(2)),
                    )],
                    ..Default::default()
                },
            )
            .await;
            (kv, answer)
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let restart = cluster.clone();
    tokio::task::spawn_blocking(move || restart.start_primary())
        .await
        .unwrap()
        .unwrap();
    let (kv, _) = write
        .await
        .expect("the write committed once the primary was back");
    assert_eq!(common::get(&*kv, "after").await, Some(KvValue::U64(2)));
    kv.close().await.unwrap();
}

//! The store behind PgBouncer (Debian's `pgbouncer`, 1.18 on these machines). Each test starts a
//! throwaway cluster and its own PgBouncer on a free loopback port in front of it.
//!
//! - `pool_mode = session`: the store works — sets, gets, an atomic check-and-sum, a queue
//!   message from one handle to another, and a watch woken by the other handle's commit (its
//!   `LISTEN` has a session of its own).
//! - `pool_mode = transaction`: the store refuses to open, naming the pool mode and the fix: a
//!   session's `LISTEN` receives nothing there, and the statements the store prepares once per
//!   connection would be missing on the next transaction's server connection.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Enqueue, KvError, KvValue, Mutation, WatchKeyOutput, key,
};
use open_deno_kv_postgres::PostgresError;
use open_deno_kv_postgres::testing::{PoolMode, TestPgBouncer};

mod common;
use common::{cluster, get, k, open_url, postgres_error, set};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_works_behind_pgbouncer_in_session_mode() {
    let Some(cluster) = cluster() else { return };
    let Some(bouncer) = TestPgBouncer::start_or_skip(&cluster, PoolMode::Session) else {
        return;
    };
    let url = bouncer.url("postgres");
    let a = Arc::new(open_url(&url, "pooled").await.unwrap());
    let b = Arc::new(open_url(&url, "pooled").await.unwrap());

    // Set and get, and a check-and-sum against what was read.
    let stamp = set(&*a, "n", 1).await;
    assert_eq!(get(&*b, "n").await, Some(KvValue::U64(1)));
    let checked = AtomicWrite {
        checks: vec![Check {
            key: k("n"),
            versionstamp: Some(stamp),
        }],
        mutations: vec![Mutation::sum(k("n"), KvValue::U64(41))],
        ..AtomicWrite::default()
    };
    assert!(b.atomic_write(checked.clone()).await.unwrap().is_some());
    assert!(
        a.atomic_write(checked).await.unwrap().is_none(),
        "the check fails the second time"
    );
    assert_eq!(get(&*a, "n").await, Some(KvValue::U64(42)));

    // A watch on B sees A's commit (through B's LISTEN session).
    let mut watch = b.watch(vec![k("seen")]).unwrap();
    assert!(matches!(
        watch.next().await.unwrap().unwrap()[0],
        WatchKeyOutput::Changed(None)
    ));
    let seen = set(&*a, "seen", 7).await;
    let emitted = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .expect("B's watch sees A's commit")
        .unwrap()
        .unwrap();
    match &emitted[0] {
        WatchKeyOutput::Changed(Some(entry)) => assert_eq!(entry.versionstamp, seen),
        other => panic!("{other:?}"),
    }

    // A message enqueued through A is delivered through B, once.
    let consumer = {
        let b = b.clone();
        tokio::spawn(async move { b.dequeue_next_message().await })
    };
    let enqueue = AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![0xff, 0x0f, 0x49, 0x02],
            ready_at: chrono::Utc::now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    };
    a.atomic_write(enqueue).await.unwrap().unwrap();
    let message = tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .expect("B's waiting consumer is woken by A's enqueue")
        .unwrap()
        .unwrap()
        .expect("a message");
    assert_eq!(message.payload(), [0xff, 0x0f, 0x49, 0x02]);
    message.finish(true).await.unwrap();
    // B's listing sees its success at once, A's once B's finisher stored it (milliseconds).
    assert!(b.queued_messages().await.unwrap().is_empty());
    tokio::time::timeout(Duration::from_secs(5), async {
        while !a.queued_messages().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("B's success reached the store");
    assert_eq!(
        support::get_value(&*a, &key!["seen"]).await,
        Some(KvValue::U64(7))
    );

    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_refuses_to_open_behind_pgbouncer_in_transaction_mode() {
    let Some(cluster) = cluster() else { return };
    let Some(bouncer) = TestPgBouncer::start_or_skip(&cluster, PoolMode::Transaction) else {
        return;
    };
    let err = open_url(&bouncer.url("postgres"), "pooled")
        .await
        .expect_err("transaction pooling is refused at open");
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::NotificationsLost { .. })
        ),
        "{err:?}\nPgBouncer's log:\n{}",
        bouncer.log_tail()
    );
    let text = err.to_string();
    for words in ["pool_mode = transaction", "pool_mode = session", "directly"] {
        assert!(text.contains(words), "{words:?} is missing from: {text}");
    }
    assert!(matches!(err, KvError::Storage { .. }));
}

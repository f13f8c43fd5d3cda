//! What open-deno-kv-postgres adds beyond the conformance suite: its schema refusals, several handles (as
//! several processes would) sharing one store, batching, and closing. Each
//! test starts its own throwaway cluster.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Enqueue, KvError, KvValue, ManualClock, Mutation, SchemaTooNew,
    WatchKeyOutput,
};
use open_deno_kv_postgres::PostgresError;

mod common;
use common::{cluster, k, message_write, open, open_at, postgres_error, set};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_a_newer_schema_version_is_refused_untouched() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "newer").await.unwrap();
    set(&kv, "a", 1).await;
    kv.close().await.unwrap();
    cluster
        .psql("postgres", "UPDATE newer.kv_meta SET schema_version = 4")
        .unwrap();
    let before = cluster
        .psql(
            "postgres",
            "SELECT schema_version, data_version FROM newer.kv_meta",
        )
        .unwrap();

    let err = open(&cluster, "newer").await.unwrap_err();
    assert!(
        matches!(
            postgres_error(&err),
            Some(PostgresError::SchemaTooNew(SchemaTooNew {
                found: 4,
                supported: 3
            }))
        ),
        "{err}"
    );
    let after = cluster
        .psql(
            "postgres",
            "SELECT schema_version, data_version FROM newer.kv_meta",
        )
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_with_our_names_and_another_shape_are_refused_untouched() {
    let Some(cluster) = cluster() else { return };
    cluster
        .psql(
            "postgres",
            // Planted by the store's own role, which therefore sees them (a role sees no
            // columns of tables it has no privilege on).
            "SET ROLE kv_store; CREATE SCHEMA other; \
             CREATE TABLE other.kv (k text PRIMARY KEY, v text); \
             INSERT INTO other.kv VALUES ('theirs', 'data')",
        )
        .unwrap();
    let err = open(&cluster, "other").await.unwrap_err();
    assert!(matches!(err, KvError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("not a Deno KV store"), "{err}");
    let tables = cluster
        .psql(
            "postgres",
            "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
             WHERE table_schema = 'other'",
        )
        .unwrap();
    assert_eq!(tables, "kv", "nothing was created beside the foreign table");
    assert_eq!(
        cluster.psql("postgres", "SELECT v FROM other.kv").unwrap(),
        "data"
    );

    // All three names, one of them with a column of another type.
    let kv = open(&cluster, "altered").await.unwrap();
    kv.close().await.unwrap();
    cluster
        .psql(
            "postgres",
            "ALTER TABLE altered.kv_queue ALTER COLUMN ready_at TYPE numeric",
        )
        .unwrap();
    let err = open(&cluster, "altered").await.unwrap_err();
    assert!(err.to_string().contains("kv_queue"), "{err}");
}

/// Two handles stand for two processes: one store, one order of versionstamps, watches and
/// queues across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_share_one_store_its_order_its_watches_and_its_queue() {
    let Some(cluster) = cluster() else { return };
    let a = Arc::new(open(&cluster, "shared").await.unwrap());
    let b = Arc::new(open(&cluster, "shared").await.unwrap());

    let mut watch = b.watch(vec![k("seen")]).unwrap();
    assert!(matches!(
        watch.next().await.unwrap().unwrap()[0],
        WatchKeyOutput::Changed(None)
    ));
    let stamp = set(&*a, "seen", 7).await;
    let emitted = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("B's watch sees A's commit")
        .unwrap()
        .unwrap();
    match &emitted[0] {
        WatchKeyOutput::Changed(Some(entry)) => assert_eq!(entry.versionstamp, stamp),
        other => panic!("{other:?}"),
    }

    // Writers on both handles at once: every versionstamp distinct, each handle's increasing.
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .enumerate()
        .map(|(n, kv)| {
            tokio::spawn(async move {
                let mut stamps = Vec::new();
                for i in 0..50 {
                    stamps.push(set(&*kv, &format!("w{n}-{i}"), i).await);
                }
                stamps
            })
        })
        .collect();
    let mut all = Vec::new();
    for writer in writers {
        let stamps = writer.await.unwrap();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
        all.extend(stamps);
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 100);

    // A message enqueued through A is delivered through B.
    let write = AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![0xff, 0x0f, 0x49, 0x02],
            ready_at: chrono::Utc::now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    };
    let consumer = {
        let b = b.clone();
        tokio::spawn(async move { b.dequeue_next_message().await })
    };
    a.atomic_write(write).await.unwrap().unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), consumer)
        .await
        .expect("B's waiting consumer is woken by A's enqueue")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(message.payload(), &[0xff, 0x0f, 0x49, 0x02]);
    message.finish(true).await.unwrap();
    // B's own listing sees its success at once; A's once B's finisher has stored it (a batch
    // of successes behind the consumer: milliseconds, bounded here only to catch a hang).
    assert!(b.queued_messages().await.unwrap().is_empty());
    let stored = tokio::time::timeout(Duration::from_secs(5), async {
        while !a.queued_messages().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    stored.await.expect("B's success reached the store");
}

/// Check-and-set loops on one counter through two handles (as two processes would) count every
/// increment once. Each handle's committer stages a group against what its own last commit
/// left when it may (one flight, guarded by the version); here the other handle commits between
/// most of its groups, so its guesses are refused and run again reading the store. A guess
/// taken for the truth would let a stale check pass and lose an increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_set_loops_on_two_handles_count_every_increment_once() {
    const LOOPS: u64 = 4;
    const EACH: u64 = 40;
    let Some(cluster) = cluster() else { return };
    let a = Arc::new(open(&cluster, "counted").await.unwrap());
    let b = Arc::new(open(&cluster, "counted").await.unwrap());
    set(&*a, "counter", 0).await;
    let loops: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .flat_map(|kv| (0..LOOPS).map(move |_| kv.clone()))
        .map(|kv| {
            tokio::spawn(async move {
                let mut stamps = Vec::new();
                for _ in 0..EACH {
                    loop {
                        let entry = get_entry(&*kv, "counter").await;
                        let KvValue::U64(n) = entry.value else {
                            panic!("the counter holds {:?}", entry.value);
                        };
                        let write = AtomicWrite {
                            checks: vec![Check {
                                key: k("counter"),
                                versionstamp: Some(entry.versionstamp),
                            }],
                            mutations: vec![Mutation::set(k("counter"), KvValue::U64(n + 1))],
                            ..AtomicWrite::default()
                        };
                        if let Some(done) = kv.atomic_write(write).await.unwrap() {
                            stamps.push(done.versionstamp);
                            break;
                        }
                    }
                }
                stamps
            })
        })
        .collect();
    let mut all = Vec::new();
    for one in loops {
        let stamps = one.await.unwrap();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]));
        all.extend(stamps);
    }
    all.sort();
    all.dedup();
    assert_eq!(
        all.len() as u64,
        2 * LOOPS * EACH,
        "every commit its own versionstamp"
    );
    for kv in [&a, &b] {
        let entry = get_entry(&**kv, "counter").await;
        assert_eq!(
            entry.value,
            KvValue::U64(2 * LOOPS * EACH),
            "every increment once"
        );
        assert_eq!(
            Some(&entry.versionstamp),
            all.last(),
            "the last commit's value"
        );
    }
}

/// The entry at `[name]`, which must exist (a strong read).
async fn get_entry(kv: &dyn Backend, name: &str) -> open_deno_kv_engine_kit::KvEntry {
    let read = open_deno_kv_engine_kit::SnapshotRead {
        ranges: vec![open_deno_kv_engine_kit::ReadRange::single_encoded_key(k(
            name,
        ))],
        consistency: open_deno_kv_engine_kit::Consistency::Strong,
    };
    let mut outputs = kv.snapshot_read(read).await.expect("a strong read");
    outputs
        .pop()
        .and_then(|mut output| output.entries.pop())
        .unwrap_or_else(|| panic!("[{name}] is absent"))
}

/// A handle listens for other processes' commits only while it has a watch or a waiting dequeue
/// (and briefly after). Each time it starts listening again it wakes every waiter once, so a
/// watch or a dequeue that begins on a handle that has stopped listening misses nothing: here
/// the other handle commits at once, in the window where the `LISTEN` may not have taken
/// effect yet, after each pause long enough for the handle to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_that_stopped_listening_misses_nothing_when_a_waiter_comes() {
    let Some(cluster) = cluster() else { return };
    let a = Arc::new(open(&cluster, "quiet").await.unwrap());
    let b = Arc::new(open(&cluster, "quiet").await.unwrap());
    let quiet = open_deno_kv_postgres::testing::LISTEN_LINGER + Duration::from_millis(200);
    for round in 0..3u64 {
        tokio::time::sleep(quiet).await;
        let mut watch = b.watch(vec![k("seen")]).unwrap();
        let stamp = set(&*a, "seen", round).await;
        let seen = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match &watch.next().await.unwrap().unwrap()[0] {
                    WatchKeyOutput::Changed(Some(entry)) if entry.versionstamp == stamp => break,
                    _ => {}
                }
            }
        });
        seen.await
            .unwrap_or_else(|_| panic!("round {round}: B's new watch missed A's commit"));
        drop(watch);

        tokio::time::sleep(quiet).await;
        let consumer = {
            let b = b.clone();
            tokio::spawn(async move { b.dequeue_next_message().await })
        };
        let write = message_write(b"wake", &open_deno_kv_engine_kit::SystemClock);
        a.atomic_write(write).await.unwrap().unwrap();
        let message = tokio::time::timeout(Duration::from_secs(5), consumer)
            .await
            .unwrap_or_else(|_| panic!("round {round}: B's new dequeue missed A's enqueue"))
            .unwrap()
            .unwrap()
            .unwrap();
        message.finish(true).await.unwrap();
    }
}

/// Concurrent writes share transactions (rows written together share `xmin`), and a write whose
/// check fails inside a group fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_transactions_and_a_failed_check_fails_alone() {
    let Some(cluster) = cluster() else { return };
    let kv = Arc::new(open(&cluster, "batch").await.unwrap());
    const WRITERS: usize = 64;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|i| {
            let kv = kv.clone();
            tokio::spawn(async move {
                let write = if i % 2 == 0 {
                    // Everyone races to create the same key: exactly one may win.
                    AtomicWrite {
                        checks: vec![Check {
                            key: k("contended"),
                            versionstamp: None,
                        }],
                        mutations: vec![Mutation::set(k("contended"), KvValue::U64(i as u64))],
                        ..AtomicWrite::default()
                    }
                } else {
                    AtomicWrite {
                        mutations: vec![Mutation::set(k(&format!("own {i}")), KvValue::U64(1))],
                        ..AtomicWrite::default()
                    }
                };
                (i, kv.atomic_write(write).await.unwrap())
            })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        if i % 2 == 0 {
            winners += usize::from(outcome.is_some());
        } else {
            assert!(outcome.is_some(), "write {i} has no check and must commit");
        }
    }
    assert_eq!(winners, 1);
    let transactions: usize = cluster
        .psql(
            "postgres",
            "SELECT count(DISTINCT xmin::text) FROM batch.kv",
        )
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        transactions <= WRITERS / 2,
        "{} rows came from {transactions} transactions: writes were not grouped",
        WRITERS / 2 + 1
    );
}

/// Closing a handle gives back the messages it still holds as failed deliveries: another
/// consumer gets them after the first back-off interval (100 ms), long before the 5 s lease of
/// the closed handle would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_handle_gives_back_the_messages_it_holds() {
    let Some(cluster) = cluster() else { return };
    let clock = ManualClock::at_test_epoch();
    let first = open_at(&cluster, "closing", &clock).await;
    let second = open_at(&cluster, "closing", &clock).await;
    first
        .atomic_write(message_write(b"held at close", &clock))
        .await
        .unwrap()
        .unwrap();
    let held = first.dequeue_next_message().await.unwrap().unwrap();
    first.close().await.unwrap();

    // Past the back-off interval, well inside the lease.
    clock.advance(Duration::from_secs(1));
    let again = tokio::time::timeout(Duration::from_secs(5), second.dequeue_next_message())
        .await
        .expect("the message came back when its holder closed, not after its lease")
        .unwrap()
        .unwrap();
    assert_eq!(again.payload(), b"held at close");
    // The closed handle's late answer (an error or not) changes nothing.
    let _ = held.finish(true).await;
    assert_eq!(second.queued_messages().await.unwrap().len(), 1);
    again.finish(true).await.unwrap();
    assert!(second.queued_messages().await.unwrap().is_empty());
}

/// The integrity check decodes every row: a sound store reports its counts and no problem; a
/// row whose value no longer decodes, and a message whose back-off went negative, are named,
/// and the rows around them are still counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_integrity_check_names_rows_that_do_not_decode() {
    let Some(cluster) = cluster() else { return };
    let kv = open(&cluster, "damaged").await.unwrap();
    for (name, n) in [("a", 1), ("b", 2), ("c", 3)] {
        set(&kv, name, n).await;
    }
    kv.atomic_write(message_write(b"job", &open_deno_kv_engine_kit::SystemClock))
        .await
        .unwrap()
        .expect("committed");
    let sound = kv.check_integrity().await.unwrap();
    assert!(sound.is_ok(), "{:?}", sound.problems);
    assert_eq!((sound.entries_checked, sound.messages_checked), (3, 1));

    cluster
        .psql(
            "postgres",
            "UPDATE damaged.kv SET v_encoding = 99 WHERE v_encoding = 2 AND k = \
             (SELECT k FROM damaged.kv ORDER BY k OFFSET 1 LIMIT 1); \
             UPDATE damaged.kv_queue SET backoff_ms = ARRAY[-5]",
        )
        .unwrap();
    let damaged = kv.check_integrity().await.unwrap();
    assert_eq!(damaged.entries_checked, 2, "{:?}", damaged.problems);
    assert_eq!(damaged.messages_checked, 0, "{:?}", damaged.problems);
    assert_eq!(damaged.problems.len(), 2, "{:?}", damaged.problems);
    assert!(
        damaged.problems[0].starts_with("table kv, row 1 (key "),
        "{:?}",
        damaged.problems
    );
    assert!(
        damaged.problems[1].starts_with("table kv_queue, row 0: ")
            && damaged.problems[1].contains("negative back-off"),
        "{:?}",
        damaged.problems
    );
    kv.close().await.unwrap();
}

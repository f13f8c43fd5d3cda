use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};

use super::*;
use crate::{KvEntry, KvValue, QueuedMessage};

fn entry(key: u8, version: u64) -> SnapshotItem {
    SnapshotItem::Entry(KvEntry {
        key: vec![2, key, 0].into(),
        value: KvValue::U64(u64::from(key)),
        versionstamp: Versionstamp::from_version(version, 0),
        expires_at: None,
    })
}

fn message() -> SnapshotItem {
    SnapshotItem::Message(QueuedMessage::new(
        vec![1],
        crate::ms_to_datetime(0).unwrap_or_default(),
        vec![],
        vec![],
    ))
}

/// The export thread sends while its consumer reads, and stops at its next send once the
/// stream is dropped, so it never holds its snapshot for a consumer that went away.
#[tokio::test]
async fn dropping_an_export_stream_stops_its_thread() {
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = stopped.clone();
    let snapshot = blocking_export(move |sink| {
        sink.begin(None, Versionstamp::from_version(9, 0))?;
        let mut key = 0u8;
        let result = loop {
            key = key.wrapping_add(1);
            if let Err(err) = sink.send(entry(key, 1)) {
                break Err(err);
            }
        };
        flag.store(true, Ordering::SeqCst);
        result
    })
    .await
    .unwrap();
    assert_eq!(snapshot.versionstamp, Versionstamp::from_version(9, 0));
    let mut items = snapshot.items;
    assert_eq!(items.try_next().await.unwrap(), Some(entry(1, 1)));
    drop(items);
    for _ in 0..200 {
        if stopped.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the export thread still runs after its stream was dropped");
}

/// An export that sends until it is stopped, holding `storage` (a stand-in for the engine's
/// open file) meanwhile and counting its sends in `sent`.
async fn endless_export(
    transfers: &Transfers,
    storage: Arc<()>,
    sent: Arc<AtomicUsize>,
) -> Result<Snapshot, KvError> {
    transfers
        .export(move |sink| {
            let _held = storage;
            sink.begin(None, Versionstamp::from_version(9, 0))?;
            let mut key = 0u8;
            loop {
                key = key.wrapping_add(1);
                sink.send(entry(key, 1))?;
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await
}

/// Waits (at most 10 s) until `count` reaches `at_least`.
async fn wait_for_count(count: &AtomicUsize, at_least: usize, what: &str) {
    let reached = async {
        while count.load(Ordering::SeqCst) < at_least {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reached)
        .await
        .unwrap_or_else(|_| panic!("{what}"));
}

/// Closes `transfers` off the runtime; it must return within 10 s (`what` says why it would
/// not), with the work's hold on `storage` let go.
async fn close_releasing(transfers: &Transfers, storage: &Arc<()>, what: &str) {
    let closing = transfers.clone();
    let closed = tokio::task::spawn_blocking(move || closing.close());
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap();
    assert_eq!(
        Arc::strong_count(storage),
        1,
        "the work let go before close returned"
    );
}

/// Closing ends an export whose consumer is not reading (its thread waits for room in the
/// channel) and returns only once the work has let go of the storage. The consumer then reads
/// what was sent and an error: never an end that would look like a whole snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_an_export_whose_consumer_is_not_reading() {
    let transfers = Transfers::default();
    let storage = Arc::new(());
    let sent = Arc::new(AtomicUsize::new(0));
    let snapshot = endless_export(&transfers, storage.clone(), sent.clone())
        .await
        .unwrap();
    // The channel fills; the next send waits for room.
    wait_for_count(&sent, CHANNEL_ITEMS, "the export fills the channel").await;
    let waiting = "the close does not wait for a consumer that does not read";
    close_releasing(&transfers, &storage, waiting).await;
    let items: Vec<_> = snapshot.items.collect().await;
    let (last, sent) = items.split_last().expect("items");
    assert_eq!(sent.len(), CHANNEL_ITEMS, "the channel was full");
    assert!(sent.iter().all(Result::is_ok));
    assert!(matches!(last, Err(KvError::Closed)), "{last:?}");
}

/// After the close, a new export is refused, and closing again returns at once.
#[tokio::test]
async fn an_export_after_the_close_is_refused() {
    let transfers = Transfers::default();
    transfers.close();
    let sent = Arc::new(AtomicUsize::new(0));
    let err = endless_export(&transfers, Arc::new(()), sent.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, KvError::Closed), "{err:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    transfers.close();
}

/// An export that ends on its own (its consumer dropped the stream) no longer counts: the close
/// does not wait for anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_export_does_not_hold_the_close() {
    let transfers = Transfers::default();
    let storage = Arc::new(());
    let sent = Arc::new(AtomicUsize::new(0));
    let snapshot = endless_export(&transfers, storage.clone(), sent)
        .await
        .unwrap();
    drop(snapshot);
    let closing = transfers.clone();
    tokio::task::spawn_blocking(move || closing.close())
        .await
        .unwrap();
    assert_eq!(Arc::strong_count(&storage), 1);
}

#[tokio::test]
async fn an_export_failing_before_its_versionstamp_fails_the_call() {
    let err = blocking_export(|_| Err(KvError::invalid_argument("no snapshot")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no snapshot"));
}

/// The feed ends (`None`) only after the whole stream was passed; a failing stream reaches the
/// work as an error, so it never commits part of a snapshot.
#[tokio::test]
async fn an_import_sees_the_end_only_after_every_item() {
    let items = vec![entry(1, 1), message()];
    let snapshot = Snapshot::from_items(Versionstamp::from_version(3, 0), items.clone());
    let seen = blocking_import(snapshot, |versionstamp, feed| {
        assert_eq!(versionstamp, Versionstamp::from_version(3, 0));
        feed.collect::<Result<Vec<_>, _>>()
    })
    .await
    .unwrap();
    assert_eq!(seen, items);

    let failing = Snapshot {
        database: None,
        versionstamp: Versionstamp::from_version(3, 0),
        items: futures::stream::iter(vec![Ok(entry(1, 1)), Err(KvError::Closed)]).boxed(),
    };
    let outcome = blocking_import(failing, |_, feed| feed.collect::<Result<Vec<_>, _>>()).await;
    assert!(matches!(outcome, Err(KvError::Closed)));
}

/// An import future dropped half-way: the work sees an error instead of an end.
#[tokio::test]
async fn an_abandoned_import_fails_its_work() {
    let (outcome_tx, outcome_rx) = std::sync::mpsc::channel();
    let endless = futures::stream::unfold(0u8, |key| async move {
        if key == 2 {
            futures::future::pending::<()>().await;
        }
        Some((Ok(entry(key, 1)), key + 1))
    })
    .boxed();
    let snapshot = Snapshot {
        database: None,
        versionstamp: Versionstamp::from_version(3, 0),
        items: endless,
    };
    let import = blocking_import(snapshot, move |_, feed| {
        let all = feed.collect::<Result<Vec<_>, _>>();
        let _ = outcome_tx.send(all.is_err());
        all
    });
    let timed_out = tokio::time::timeout(Duration::from_millis(100), import).await;
    assert!(timed_out.is_err(), "the stream never ends");
    let failed =
        tokio::task::spawn_blocking(move || outcome_rx.recv_timeout(Duration::from_secs(5)))
            .await
            .unwrap();
    assert_eq!(failed, Ok(true), "the work saw an error, not an end");
}

/// A stream that yields `items` entries, then nothing ever again.
fn stalling(items: u8) -> Snapshot {
    let stream = futures::stream::unfold(0u8, move |key| async move {
        if key == items {
            futures::future::pending::<()>().await;
        }
        Some((Ok(entry(key, 1)), key + 1))
    })
    .boxed();
    Snapshot {
        database: None,
        versionstamp: Versionstamp::from_version(3, 0),
        items: stream,
    }
}

/// Closing ends an import whose stream stalls (its thread waits for the next item): the work
/// sees [`KvError::Closed`] instead of an end, so it commits nothing, and has let go of the
/// storage when the close returns; the import's caller gets `Closed`; a later import is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_an_import_waiting_for_its_stream() {
    let transfers = Transfers::default();
    let storage = Arc::new(());
    let received = Arc::new(AtomicUsize::new(0));
    let import = tokio::spawn({
        let (transfers, storage, received) = (transfers.clone(), storage.clone(), received.clone());
        async move {
            transfers
                .import(stalling(2), move |_, feed| {
                    let _held = storage;
                    let mut rows = Vec::new();
                    for item in feed {
                        rows.push(item?);
                        received.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(rows)
                })
                .await
        }
    });
    wait_for_count(&received, 2, "the import receives the stream's items").await;
    close_releasing(
        &transfers,
        &storage,
        "the close does not wait for a stream that stalls",
    )
    .await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), import)
        .await
        .expect("the import's caller is answered though its stream stalls")
        .unwrap();
    assert!(matches!(outcome, Err(KvError::Closed)), "{outcome:?}");
    let refused = transfers.import(stalling(0), |_, _| Ok(())).await;
    assert!(matches!(refused, Err(KvError::Closed)), "{refused:?}");
}

/// A work that fails before the stream ends answers its caller at once, though the stream stalls.
#[tokio::test]
async fn an_import_whose_work_fails_answers_without_waiting_for_the_stream() {
    let import = blocking_import(stalling(1), |_, feed| {
        let first = feed.next();
        assert!(matches!(first, Some(Ok(_))), "{first:?}");
        Err::<(), _>(KvError::invalid_argument("refused"))
    });
    let outcome = tokio::time::timeout(Duration::from_secs(10), import)
        .await
        .expect("answered though the stream stalls");
    assert!(outcome.unwrap_err().to_string().contains("refused"));
}

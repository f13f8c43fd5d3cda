use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::TryStreamExt;

use super::*;
use crate::KvValue;

fn entry(key: u8, version: u64) -> SnapshotItem {
    SnapshotItem::Entry(KvEntry {
        key: vec![2, key, 0],
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

async fn checked(items: Vec<SnapshotItem>) -> Result<Vec<SnapshotItem>, KvError> {
    let snapshot = Snapshot::from_items(Versionstamp::from_version(5, 0), items);
    ordered_import(snapshot).items.try_collect().await
}

#[tokio::test]
async fn ordered_items_pass_unchanged() {
    let items = vec![entry(1, 1), entry(2, 5), message(), message()];
    assert_eq!(checked(items.clone()).await.unwrap(), items);
}

#[tokio::test]
async fn each_order_rule_is_enforced() {
    let cases = [
        (vec![entry(2, 1), entry(1, 1)], "increasing key order"),
        (vec![entry(1, 1), entry(1, 2)], "increasing key order"),
        (vec![entry(1, 6)], "later than the snapshot"),
        (vec![message(), entry(1, 1)], "before its messages"),
    ];
    for (items, why) in cases {
        let err = checked(items).await.unwrap_err();
        assert!(err.to_string().contains(why), "{err} should say {why:?}");
    }
}

/// Issue 29: a backup whose header versionstamp was doctored to `fffffffffffffffe0000` restored
/// into redb, and every write after the first then failed. The lead rule refuses it, with
/// entries, without entries and with only messages, and only once the entries have passed.
#[tokio::test]
async fn a_versionstamp_beyond_what_the_entries_account_for_is_refused() {
    let doctored: Versionstamp = "fffffffffffffffe0000".parse().unwrap();
    for items in [vec![], vec![entry(1, 1), entry(2, 5)], vec![message()]] {
        let snapshot = Snapshot::from_items(doctored, items.clone());
        let outcome: Result<Vec<_>, _> = ordered_import(snapshot).items.try_collect().await;
        let err = outcome.unwrap_err().to_string();
        assert!(err.contains("largest version"), "{items:?}: {err}");
    }
    let far = Versionstamp::from_version(5 + MAX_VERSION_LEAD + 1, 0);
    let snapshot = Snapshot::from_items(far, vec![entry(1, 5), message()]);
    let passed: Vec<_> = ordered_import(snapshot)
        .items
        .take_while(|item| futures::future::ready(item.is_ok()))
        .collect()
        .await;
    assert_eq!(
        passed.len(),
        1,
        "the entry passes, the message finds the rule broken"
    );
    let near = Versionstamp::from_version(5 + MAX_VERSION_LEAD, 0);
    let snapshot = Snapshot::from_items(near, vec![entry(1, 5), message()]);
    let all: Vec<_> = ordered_import(snapshot).items.try_collect().await.unwrap();
    assert_eq!(all.len(), 2, "exactly the bound passes");
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

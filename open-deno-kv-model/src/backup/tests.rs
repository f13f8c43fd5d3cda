use futures::{StreamExt, TryStreamExt};

use super::*;
use crate::KvValue;

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

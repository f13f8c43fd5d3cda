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

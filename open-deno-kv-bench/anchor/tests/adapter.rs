//! The adapter translates every request kind to denokv_sqlite and back: reads, checks, each
//! mutation kind, expiry, enqueues, dequeue and finish, and the queue listing.

use std::path::PathBuf;
use std::sync::Arc;

use open_deno_kv_bench_anchor::{Denokv, FILE_NAME};
use open_deno_kv_engine_kit::chrono::{TimeDelta, Utc};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, Enqueue, KvValue, Mutation, MutationKind, ReadRange, SnapshotRead,
    Versionstamp, encode_key, key,
};

/// A fresh directory for one test (removed when dropped).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "open-deno-kv-bench-anchor-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join(FILE_NAME)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(scratch: &Scratch) -> Arc<dyn Backend> {
    Arc::new(Denokv::open(&scratch.file()).expect("denokv opens"))
}

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).expect("key")
}

fn write(mutations: Vec<Mutation>) -> AtomicWrite {
    AtomicWrite {
        mutations,
        ..Default::default()
    }
}

/// `mutation`, only if `key`'s versionstamp is `versionstamp` (`None`: only if absent).
fn checked(key: &[u8], versionstamp: Option<Versionstamp>, mutation: Mutation) -> AtomicWrite {
    AtomicWrite {
        checks: vec![Check {
            key: key.to_vec(),
            versionstamp,
        }],
        mutations: vec![mutation],
        enqueues: vec![],
    }
}

async fn get(kv: &Arc<dyn Backend>, key: &[u8]) -> Option<open_deno_kv_engine_kit::KvEntry> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key.to_vec())],
        ..Default::default()
    };
    kv.snapshot_read(read)
        .await
        .expect("read")
        .remove(0)
        .entries
        .pop()
}

#[tokio::test(flavor = "multi_thread")]
async fn values_versionstamps_and_ranges_round_trip() {
    let scratch = Scratch::new("values");
    let kv = open(&scratch);
    let values = [
        ("a", KvValue::Bytes(vec![1, 2, 3].into())),
        ("b", KvValue::V8(vec![0xff, 0x0f, 0x22, 0x01, 0x78].into())),
        ("c", KvValue::U64(42)),
    ];
    let mut stamps = Vec::new();
    for (name, value) in &values {
        let committed = kv
            .atomic_write(write(vec![Mutation::set(k(name), value.clone())]))
            .await
            .expect("write")
            .expect("no checks: committed");
        stamps.push(committed.versionstamp);
    }
    assert!(
        stamps.windows(2).all(|w| w[0] < w[1]),
        "versionstamps increase"
    );
    for ((name, value), stamp) in values.iter().zip(&stamps) {
        let entry = get(&kv, &k(name)).await.expect("present");
        assert_eq!(&entry.value, value);
        assert_eq!(entry.versionstamp, *stamp);
    }
    // Two ranges from one snapshot, one reversed and limited.
    let all = ReadRange {
        start: k("a"),
        end: k("z"),
        limit: 10,
        reverse: false,
    };
    let last = ReadRange {
        limit: 1,
        reverse: true,
        ..all.clone()
    };
    let out = kv
        .snapshot_read(SnapshotRead {
            ranges: vec![all, last],
            ..Default::default()
        })
        .await
        .expect("read");
    let keys: Vec<Vec<u8>> = out[0].entries.iter().map(|e| e.key.to_vec()).collect();
    assert_eq!(keys, vec![k("a"), k("b"), k("c")]);
    assert_eq!(out[1].entries.len(), 1);
    assert_eq!(out[1].entries[0].key, k("c"));
    kv.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread")]
async fn checks_decide_and_mutations_apply() {
    let scratch = Scratch::new("checks");
    let kv = open(&scratch);
    let n = k("n");
    let first = kv
        .atomic_write(checked(&n, None, Mutation::sum(n.clone(), KvValue::U64(5))))
        .await
        .expect("write")
        .expect("absent, as checked");
    // The same check again fails: the key exists now.
    let again = kv
        .atomic_write(checked(&n, None, Mutation::set(n.clone(), KvValue::U64(0))))
        .await
        .expect("write");
    assert_eq!(again, None, "a failed check commits nothing");
    let checked = AtomicWrite {
        checks: vec![Check {
            key: n.clone(),
            versionstamp: Some(first.versionstamp),
        }],
        mutations: vec![Mutation::sum(n.clone(), KvValue::U64(3))],
        enqueues: vec![],
    };
    kv.atomic_write(checked)
        .await
        .expect("write")
        .expect("current versionstamp");
    assert_eq!(get(&kv, &n).await.expect("n").value, KvValue::U64(8));
    let kind = |kind| Mutation {
        key: n.clone(),
        kind,
        expire_at: None,
    };
    kv.atomic_write(write(vec![kind(MutationKind::Min(KvValue::U64(4)))]))
        .await
        .expect("min")
        .expect("committed");
    assert_eq!(get(&kv, &n).await.expect("n").value, KvValue::U64(4));
    kv.atomic_write(write(vec![kind(MutationKind::Max(KvValue::U64(10)))]))
        .await
        .expect("max")
        .expect("committed");
    assert_eq!(get(&kv, &n).await.expect("n").value, KvValue::U64(10));
    kv.atomic_write(write(vec![Mutation::delete(n.clone())]))
        .await
        .expect("delete")
        .expect("committed");
    assert_eq!(get(&kv, &n).await, None);
    kv.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread")]
async fn expiry_reaches_denokv() {
    let scratch = Scratch::new("expiry");
    let kv = open(&scratch);
    let at = Utc::now() + TimeDelta::hours(1);
    let mutation = Mutation {
        expire_at: Some(at),
        ..Mutation::set(k("e"), KvValue::U64(1))
    };
    kv.atomic_write(write(vec![mutation]))
        .await
        .expect("write")
        .expect("committed");
    kv.close().await.expect("close");
    // denokv's entries do not carry their expiry: read its column.
    let conn = denokv_sqlite::Connection::open(scratch.file()).expect("open");
    let ms: i64 = conn
        .query_row(
            "select expiration_ms from kv where k = ?",
            [k("e")],
            |row| row.get(0),
        )
        .expect("row");
    assert_eq!(ms, at.timestamp_millis());
}

#[tokio::test(flavor = "multi_thread")]
async fn queue_enqueue_list_dequeue_finish() {
    let scratch = Scratch::new("queue");
    let kv = open(&scratch);
    let enqueue = |i: u8| Enqueue {
        payload: vec![i],
        ready_at: Utc::now(),
        keys_if_undelivered: vec![k("dead")],
        backoff_schedule: Some(vec![10, 20]),
    };
    for i in 0..3 {
        kv.atomic_write(AtomicWrite {
            enqueues: vec![enqueue(i)],
            ..Default::default()
        })
        .await
        .expect("enqueue")
        .expect("committed");
    }
    let listed = kv.queued_messages().await.expect("list");
    assert_eq!(listed.len(), 3);
    assert!(listed.iter().all(|m| m.backoff_schedule == vec![10, 20]));
    assert!(
        listed
            .iter()
            .all(|m| m.keys_if_undelivered == vec![k("dead")])
    );
    let mut payloads = Vec::new();
    for _ in 0..3 {
        let message = kv
            .dequeue_next_message()
            .await
            .expect("dequeue")
            .expect("a message");
        payloads.push(message.payload().to_vec());
        message.finish(true).await.expect("finish");
    }
    payloads.sort();
    assert_eq!(payloads, vec![vec![0], vec![1], vec![2]]);
    assert!(kv.queued_messages().await.expect("list").is_empty());
    kv.close().await.expect("close");
    assert!(matches!(kv.dequeue_next_message().await, Ok(None)));
}

#[test]
fn settings_are_denokvs_defaults() {
    let scratch = Scratch::new("settings");
    let kv = Denokv::open(&scratch.file()).expect("open");
    let settings = kv.settings().expect("settings");
    assert_eq!(settings.journal_mode, "wal");
    assert_eq!(settings.synchronous, 2, "SQLite's default, FULL");
    assert!(settings.sqlite_version.starts_with('3'));
}

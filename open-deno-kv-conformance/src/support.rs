//! Small helpers that keep cases short and readable: typed keys in, typed results out.

use std::time::Duration;

use chrono::TimeDelta;
use open_deno_kv_model::{
    AtomicWrite, Backend, Check, CommitResult, Key, KvEntry, KvError, KvValue, Mutation,
    MutationKind, ReadRange, SnapshotRead, Versionstamp, encode_key,
};

/// Encodes a key the test wrote itself (so it is always encodable).
pub fn enc(key: &Key) -> Vec<u8> {
    match encode_key(key) {
        Ok(bytes) => bytes,
        Err(e) => panic!("test key {key} does not encode: {e}"),
    }
}

/// A V8-serialized JavaScript string, the most common value Deno writes.
pub fn v8_string(text: &str) -> KvValue {
    let mut bytes = vec![0xff, 0x0f, b'"'];
    // One-byte (Latin-1) strings: length varint, then the bytes. Test strings are ASCII.
    assert!(
        text.is_ascii() && text.len() < 128,
        "keep test strings short ASCII"
    );
    bytes.push(u8::try_from(text.len()).unwrap_or(0));
    bytes.extend_from_slice(text.as_bytes());
    KvValue::V8(bytes.into())
}

/// Sets one key; panics if the write fails or does not commit.
pub async fn set(kv: &dyn Backend, key: &Key, value: KvValue) -> Versionstamp {
    commit(
        kv,
        AtomicWrite {
            mutations: vec![Mutation::set(enc(key), value)],
            ..Default::default()
        },
    )
    .await
}

/// Sets one key to expire `after` from `now`.
pub async fn set_expiring(
    kv: &dyn Backend,
    key: &Key,
    value: KvValue,
    now: chrono::DateTime<chrono::Utc>,
    after: Duration,
) -> Versionstamp {
    let expire_at = Some(now + TimeDelta::from_std(after).unwrap_or(TimeDelta::MAX));
    let mutation = Mutation {
        expire_at,
        ..Mutation::set(enc(key), value)
    };
    commit(
        kv,
        AtomicWrite {
            mutations: vec![mutation],
            ..Default::default()
        },
    )
    .await
}

/// Deletes one key.
pub async fn delete(kv: &dyn Backend, key: &Key) -> Versionstamp {
    commit(
        kv,
        AtomicWrite {
            mutations: vec![Mutation::delete(enc(key))],
            ..Default::default()
        },
    )
    .await
}

/// One mutation of the given kind on a key.
pub fn mutation(key: &Key, kind: MutationKind) -> Mutation {
    Mutation {
        key: enc(key),
        kind,
        expire_at: None,
    }
}

/// Commits a write that must succeed; returns its versionstamp.
pub async fn commit(kv: &dyn Backend, write: AtomicWrite) -> Versionstamp {
    match kv.atomic_write(write).await {
        Ok(Some(CommitResult { versionstamp })) => versionstamp,
        Ok(None) => panic!("write unexpectedly failed its checks"),
        Err(e) => panic!("write unexpectedly failed: {e}"),
    }
}

/// Runs a write expected to be refused; returns the error text.
pub async fn write_error(kv: &dyn Backend, write: AtomicWrite) -> String {
    match kv.atomic_write(write).await {
        Err(e) => e.to_string(),
        Ok(r) => panic!("write should have been refused, got {r:?}"),
    }
}

/// A check on a key.
pub fn check(key: &Key, versionstamp: Option<Versionstamp>) -> Check {
    Check {
        key: enc(key),
        versionstamp,
    }
}

/// Reads one key.
pub async fn get(kv: &dyn Backend, key: &Key) -> Option<KvEntry> {
    let ranges = vec![ReadRange::single_encoded_key(enc(key))];
    let mut out = read(kv, ranges).await;
    let entries = &mut out[0];
    assert!(
        entries.len() <= 1,
        "a single-key read returned {} entries",
        entries.len()
    );
    entries.pop()
}

/// Reads one key's value.
pub async fn get_value(kv: &dyn Backend, key: &Key) -> Option<KvValue> {
    get(kv, key).await.map(|e| e.value)
}

/// Reads ranges; panics on error.
pub async fn read(kv: &dyn Backend, ranges: Vec<ReadRange>) -> Vec<Vec<KvEntry>> {
    let count = ranges.len();
    match kv
        .snapshot_read(SnapshotRead {
            ranges,
            ..Default::default()
        })
        .await
    {
        Ok(out) => {
            assert_eq!(out.len(), count, "one output per range");
            out.into_iter().map(|o| o.entries).collect()
        }
        Err(e) => panic!("read unexpectedly failed: {e}"),
    }
}

/// Runs a read expected to be refused; returns the error.
pub async fn read_error(kv: &dyn Backend, ranges: Vec<ReadRange>) -> KvError {
    match kv
        .snapshot_read(SnapshotRead {
            ranges,
            ..Default::default()
        })
        .await
    {
        Err(e) => e,
        Ok(out) => panic!("read should have been refused, got {out:?}"),
    }
}

/// Lists every key strictly under `prefix` (forward, up to `limit`).
pub async fn list_prefix(
    kv: &dyn Backend,
    prefix: &Key,
    limit: u32,
    reverse: bool,
) -> Vec<KvEntry> {
    let mut range =
        ReadRange::prefix(prefix, limit).unwrap_or_else(|e| panic!("prefix {prefix}: {e}"));
    range.reverse = reverse;
    read(kv, vec![range]).await.remove(0)
}

/// The decoded keys of some entries.
pub fn keys_of(entries: &[KvEntry]) -> Vec<Key> {
    entries
        .iter()
        .map(|e| {
            open_deno_kv_model::decode_key(&e.key)
                .unwrap_or_else(|err| panic!("backend returned an undecodable key: {err}"))
        })
        .collect()
}

//! get, set, delete and overwrite.

use open_deno_kv_model::{KvValue, key};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        get_missing_key_is_none,
        set_then_get_returns_value_and_versionstamp,
        every_value_encoding_round_trips,
        overwrite_replaces_value_and_versionstamp,
        delete_removes_the_key,
        delete_missing_key_still_commits,
        get_does_not_return_neighbours,
    ]
}

async fn get_missing_key_is_none(env: Env) {
    assert_eq!(get(&*env.kv, &key!["missing"]).await, None);
}

async fn set_then_get_returns_value_and_versionstamp(env: Env) {
    let stamp = set(&*env.kv, &key!["a"], v8_string("hello")).await;
    let entry = get(&*env.kv, &key!["a"])
        .await
        .expect("the key was just set");
    assert_eq!(entry.key, enc(&key!["a"]));
    assert_eq!(entry.value, v8_string("hello"));
    assert_eq!(entry.versionstamp, stamp);
}

async fn every_value_encoding_round_trips(env: Env) {
    let values = [
        (key!["v8"], KvValue::V8(vec![0xff, 0x10, b'T'].into())),
        (key!["bytes"], KvValue::Bytes(vec![0, 1, 2, 0xff].into())),
        (key!["empty bytes"], KvValue::Bytes(vec![].into())),
        (key!["u64"], KvValue::U64(u64::MAX)),
        (key!["u64 zero"], KvValue::U64(0)),
    ];
    for (k, v) in &values {
        set(&*env.kv, k, v.clone()).await;
    }
    for (k, v) in &values {
        assert_eq!(
            get_value(&*env.kv, k).await.as_ref(),
            Some(v),
            "value at {k}"
        );
    }
}

async fn overwrite_replaces_value_and_versionstamp(env: Env) {
    let first = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    let second = set(&*env.kv, &key!["a"], KvValue::Bytes(vec![2].into())).await;
    assert!(second > first, "a later commit has a larger versionstamp");
    let entry = get(&*env.kv, &key!["a"]).await.expect("set");
    assert_eq!(entry.value, KvValue::Bytes(vec![2].into()));
    assert_eq!(entry.versionstamp, second);
}

async fn delete_removes_the_key(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    delete(&*env.kv, &key!["a"]).await;
    assert_eq!(get(&*env.kv, &key!["a"]).await, None);
}

async fn delete_missing_key_still_commits(env: Env) {
    let before = set(&*env.kv, &key!["other"], KvValue::U64(1)).await;
    let stamp = delete(&*env.kv, &key!["never set"]).await;
    assert!(stamp > before);
    assert_eq!(get(&*env.kv, &key!["never set"]).await, None);
}

async fn get_does_not_return_neighbours(env: Env) {
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    set(&*env.kv, &key!["a", "child"], KvValue::U64(2)).await;
    set(&*env.kv, &key!["a\u{0}"], KvValue::U64(3)).await;
    set(&*env.kv, &key!["b"], KvValue::U64(4)).await;
    assert_eq!(
        get(&*env.kv, &key!["a"]).await.map(|e| e.value),
        Some(KvValue::U64(1))
    );
    assert_eq!(
        get(&*env.kv, &key!["a", "child"]).await.map(|e| e.value),
        Some(KvValue::U64(2))
    );
}

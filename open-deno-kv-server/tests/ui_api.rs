//! The explorer's JSON API (`kv serve --ui`, issue 19): paging by prefix with a cursor both ways,
//! rendering of keys and values, the token on every call (401 without), 403 for writes unless
//! the explorer is read-write, 409 on a stale versionstamp with the store unchanged, counts, the
//! live event stream, a 404 naming the flag when the explorer is off, and the same behaviour on
//! SQLite as on the in-memory store.
//!
//! Run: `cargo test -p open-deno-kv-server --test ui_api`.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use hyper::StatusCode;
use open_deno_kv_model::{
    AtomicWrite, Backend, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key, v8,
};
use open_deno_kv_server::{Databases, Explorer};
use open_deno_kv_sqlite::FileEngine;
use serde_json::{Value as Json, json};

async fn start_ui(mode: Explorer) -> Running {
    let mut config = config();
    config.ui = mode;
    start_with(config, Databases::new(memory())).await
}

fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

/// `POST /ui/api/{operation}` with the token (or `auth`, if given).
async fn api_as(running: &Running, operation: &str, body: Json, auth: Option<&str>) -> Reply {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = auth {
        headers.push(("authorization", auth));
    }
    send(
        &http1_client(),
        "POST",
        url(running, &format!("/ui/api/{operation}")),
        &headers,
        body.to_string().into_bytes(),
    )
    .await
}

async fn api(running: &Running, operation: &str, body: Json) -> (StatusCode, Json) {
    let reply = api_as(running, operation, body, Some(BEARER)).await;
    let json = serde_json::from_slice(&reply.body)
        .unwrap_or_else(|_| panic!("{operation}: {} {}", reply.status, reply.text()));
    (reply.status, json)
}

fn js_value(json: Json) -> KvValue {
    v8::from_json(&json).unwrap()
}

/// 25 users (`["users", 0n]` … `["users", 24n]`) and two other entries.
async fn seed(backend: &dyn Backend) {
    let mut write = AtomicWrite::default();
    for i in 0..25 {
        let value = js_value(json!({"name": format!("user {i}"), "n": i}));
        write
            .mutations
            .push(Mutation::set(encode_key(&key!["users", i]).unwrap(), value));
    }
    write.mutations.push(Mutation::set(
        encode_key(&key!["other", vec![1u8, 2]]).unwrap(),
        KvValue::U64(7),
    ));
    write.mutations.push(Mutation::set(
        encode_key(&key!["other", "bytes"]).unwrap(),
        KvValue::Bytes(vec![1, 2, 3].into()),
    ));
    assert!(backend.atomic_write(write).await.unwrap().is_some());
}

async fn stored(backend: &dyn Backend, key: &open_deno_kv_model::Key) -> Option<KvValue> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_key(key).unwrap()],
        ..SnapshotRead::default()
    };
    let ranges = backend.snapshot_read(read).await.unwrap();
    ranges[0].entries.first().map(|entry| entry.value.clone())
}

fn keys_of(page: &Json) -> Vec<String> {
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["key"].as_str().unwrap().to_owned())
        .collect()
}

fn users(range: std::ops::Range<i32>) -> Vec<String> {
    range.map(|i| format!("[\"users\", {i}n]")).collect()
}

#[tokio::test]
async fn lists_a_prefix_page_by_page_both_ways() {
    let running = start_ui(Explorer::ReadOnly).await;
    seed(running.backend.as_ref()).await;

    let (status, first) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 10}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(keys_of(&first), users(0..10));
    let entry = &first["entries"][3];
    assert_eq!(entry["value"], "{ name: \"user 3\", n: 3 }");
    assert_eq!(entry["encoding"], "v8");
    assert_eq!(entry["versionstamp"].as_str().unwrap().len(), 20);
    assert_eq!(entry["expiresAt"], Json::Null);
    assert_eq!(entry["edit"]["type"], "json");

    let cursor = first["cursor"].clone();
    assert!(cursor.is_string());
    let (_, second) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 10, "cursor": cursor}),
    )
    .await;
    assert_eq!(keys_of(&second), users(10..20));
    let (_, third) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 10, "cursor": second["cursor"]}),
    )
    .await;
    assert_eq!(keys_of(&third), users(20..25));
    assert_eq!(third["cursor"], Json::Null, "the last page has no next one");

    let (_, reversed) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 10, "reverse": true}),
    )
    .await;
    let mut expected = users(15..25);
    expected.reverse();
    assert_eq!(keys_of(&reversed), expected);
    let (_, reversed2) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 10, "reverse": true, "cursor": reversed["cursor"]}),
    )
    .await;
    let mut expected = users(5..15);
    expected.reverse();
    assert_eq!(keys_of(&reversed2), expected);

    // Other encodings, and a bytes key part as Deno writes a Uint8Array.
    let (_, other) = api(&running, "list", json!({"prefix": "[\"other\"]"})).await;
    assert_eq!(
        keys_of(&other),
        [
            "[\"other\", new Uint8Array([1, 2])]",
            "[\"other\", \"bytes\"]"
        ]
    );
    assert_eq!(other["entries"][0]["value"], "new Deno.KvU64(7n)");
    assert_eq!(other["entries"][0]["encoding"], "u64");
    assert_eq!(other["entries"][1]["value"], "new Uint8Array([1, 2, 3])");
    assert_eq!(other["entries"][1]["encoding"], "bytes");

    // Every key under [] (the whole database), and a bad prefix explained.
    let (_, all) = api(&running, "list", json!({"prefix": "[]", "limit": 500})).await;
    assert_eq!(all["entries"].as_array().unwrap().len(), 27);
    let bad = api_as(&running, "list", json!({"prefix": "[users]"}), Some(BEARER)).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.text().contains("at character"), "{}", bad.text());
    // A cursor from another prefix is refused, not followed.
    let foreign = api_as(
        &running,
        "list",
        json!({"prefix": "[\"other\"]", "cursor": first["cursor"]}),
        Some(BEARER),
    )
    .await;
    assert_eq!(foreign.status, StatusCode::BAD_REQUEST);

    // Counts under the prefix, and the queue's depth.
    let (_, stats) = api(&running, "stats", json!({"prefix": "[\"users\"]"})).await;
    assert_eq!(stats["entries"], 25);
    assert_eq!(stats["complete"], true);
    assert_eq!(stats["queueDepth"], 0);
    let listed_bytes: u64 = all["entries"].as_array().unwrap()[2..]
        .iter()
        .map(|e| e["keyBytes"].as_u64().unwrap() + e["valueBytes"].as_u64().unwrap())
        .sum();
    assert_eq!(stats["bytes"].as_u64(), Some(listed_bytes));
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_call_needs_the_token_but_the_page_does_not() {
    let running = start_ui(Explorer::ReadWrite).await;
    for operation in ["info", "list", "get", "set", "delete", "stats", "watch"] {
        let without = api_as(&running, operation, json!({}), None).await;
        assert_eq!(without.status, StatusCode::UNAUTHORIZED, "{operation}");
        let wrong = api_as(
            &running,
            operation,
            json!({}),
            Some("Bearer wrong-token-0000000"),
        )
        .await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{operation}");
    }
    // GET is not how the API is called (a token-less link cannot trigger anything).
    let get = send(
        &http1_client(),
        "GET",
        url(&running, "/ui/api/list"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    for (path, kind) in [
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let reply = send(&http1_client(), "GET", url(&running, path), &[], Vec::new()).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert!(
            reply.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
        assert!(reply.headers.contains_key("content-security-policy"));
    }
    let (status, info) = api(&running, "info", json!({})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(info["writable"], true);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn writes_are_refused_unless_the_explorer_is_read_write() {
    let running = start_ui(Explorer::ReadOnly).await;
    seed(running.backend.as_ref()).await;
    let (_, page) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 1}),
    )
    .await;
    let entry = page["entries"][0].clone();
    let set = api_as(
        &running,
        "set",
        json!({"id": entry["id"], "versionstamp": entry["versionstamp"], "type": "json", "text": "1"}),
        Some(BEARER),
    )
    .await;
    assert_eq!(set.status, StatusCode::FORBIDDEN);
    assert!(set.text().contains("--ui-write"), "{}", set.text());
    let delete = api_as(
        &running,
        "delete",
        json!({"id": entry["id"], "versionstamp": entry["versionstamp"]}),
        Some(BEARER),
    )
    .await;
    assert_eq!(delete.status, StatusCode::FORBIDDEN);
    assert_eq!(
        stored(running.backend.as_ref(), &key!["users", 0]).await,
        Some(js_value(json!({"name": "user 0", "n": 0})))
    );
    let (_, info) = api(&running, "info", json!({})).await;
    assert_eq!(info["writable"], false);
    running.shutdown().await.unwrap();

    // No explorer at all: a 404 that names the flag.
    let off = start_ui(Explorer::Off).await;
    for path in ["/ui", "/ui/api/list"] {
        let reply = send(&http1_client(), "GET", url(&off, path), &[], Vec::new()).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        assert!(reply.text().contains("--ui"), "{}", reply.text());
    }
    off.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stale_versionstamp_is_refused_and_the_store_is_unchanged() {
    let running = start_ui(Explorer::ReadWrite).await;
    seed(running.backend.as_ref()).await;
    let backend = running.backend.clone();
    let (_, got) = api(&running, "get", json!({"key": "[\"users\", 1n]"})).await;
    let seen = got["entry"].clone();
    assert_eq!(seen["value"], "{ name: \"user 1\", n: 1 }");

    // Someone else writes the entry after the page read it.
    let behind = js_value(json!({"name": "changed behind the page"}));
    let mut write = AtomicWrite::default();
    write.mutations.push(Mutation::set(
        encode_key(&key!["users", 1]).unwrap(),
        behind.clone(),
    ));
    assert!(backend.atomic_write(write).await.unwrap().is_some());

    let (status, conflict) = api(
        &running,
        "set",
        json!({"id": seen["id"], "versionstamp": seen["versionstamp"], "type": "json",
               "text": "{\"name\": \"edited in the page\"}"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        conflict["error"]
            .as_str()
            .unwrap()
            .contains("changed since the page read it"),
        "{conflict}"
    );
    assert_eq!(
        conflict["current"]["value"],
        "{ name: \"changed behind the page\" }"
    );
    assert_eq!(
        stored(backend.as_ref(), &key!["users", 1]).await,
        Some(behind.clone())
    );

    let (status, _) = api(
        &running,
        "delete",
        json!({"id": seen["id"], "versionstamp": seen["versionstamp"]}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        stored(backend.as_ref(), &key!["users", 1]).await,
        Some(behind)
    );

    // With the current versionstamp the edit goes through, as each value type.
    let current = conflict["current"].clone();
    let (status, saved) = api(
        &running,
        "set",
        json!({"id": current["id"], "versionstamp": current["versionstamp"], "type": "u64",
               "text": "99"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["entry"]["value"], "new Deno.KvU64(99n)");
    assert_eq!(
        stored(backend.as_ref(), &key!["users", 1]).await,
        Some(KvValue::U64(99))
    );

    // A new entry must not exist yet; an existing one refuses a "new" write.
    let (status, created) = api(
        &running,
        "set",
        json!({"key": "[\"users\", \"new\"]", "versionstamp": null, "type": "string", "text": "hi"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(created["entry"]["value"], "\"hi\"");
    let (status, _) = api(
        &running,
        "set",
        json!({"key": "[\"users\", \"new\"]", "versionstamp": null, "type": "string", "text": "again"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);

    // A write without a versionstamp is refused outright.
    let blind = api_as(
        &running,
        "set",
        json!({"id": current["id"], "type": "json", "text": "1"}),
        Some(BEARER),
    )
    .await;
    assert_eq!(blind.status, StatusCode::BAD_REQUEST);

    let (status, deleted) = api(
        &running,
        "delete",
        json!({"id": saved["entry"]["id"], "versionstamp": saved["entry"]["versionstamp"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(stored(backend.as_ref(), &key!["users", 1]).await, None);
    running.shutdown().await.unwrap();
}

/// Reads server-sent events until one with `data:` arrives for `id`, and returns its entry.
async fn next_change(body: &mut hyper::body::Incoming, buffer: &mut String, id: &str) -> Json {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            if let Some(data) = event.trim_end().strip_prefix("data: ") {
                let change: Json = serde_json::from_str(data).unwrap();
                if change["id"] == id {
                    return change["entry"].clone();
                }
            }
        }
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("no event within 10 s")
            .expect("the stream ended")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buffer.push_str(std::str::from_utf8(&data).unwrap());
        }
    }
}

#[tokio::test]
async fn the_event_stream_follows_more_than_ten_keys() {
    let running = start_ui(Explorer::ReadOnly).await;
    seed(running.backend.as_ref()).await;
    let (_, page) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 25}),
    )
    .await;
    let ids: Vec<Json> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    let response = open(
        &http1_client(),
        "POST",
        url(&running, "/ui/api/watch"),
        &[("authorization", BEARER)],
        json!({ "ids": ids }).to_string().into_bytes(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut buffer = String::new();
    // The 23rd key is in the third group of ten: its first state, then its change.
    let id = ids[22].as_str().unwrap().to_owned();
    let first = next_change(&mut body, &mut buffer, &id).await;
    assert_eq!(first["value"], "{ name: \"user 22\", n: 22 }");
    let mut write = AtomicWrite::default();
    write.mutations.push(Mutation::set(
        encode_key(&key!["users", 22]).unwrap(),
        js_value(json!("live")),
    ));
    assert!(running.backend.atomic_write(write).await.unwrap().is_some());
    let changed = next_change(&mut body, &mut buffer, &id).await;
    assert_eq!(changed["value"], "\"live\"");
    assert_ne!(changed["versionstamp"], first["versionstamp"]);
    let mut write = AtomicWrite::default();
    write
        .mutations
        .push(Mutation::delete(encode_key(&key!["users", 22]).unwrap()));
    assert!(running.backend.atomic_write(write).await.unwrap().is_some());
    assert_eq!(next_change(&mut body, &mut buffer, &id).await, Json::Null);
    drop(body);
    running.shutdown().await.unwrap();
}

/// The explorer goes through the same `Arc<dyn Backend>` as KV Connect: on SQLite it pages,
/// refuses a stale write and counts exactly as on the in-memory store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_works_the_same_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: std::sync::Arc<dyn Backend> = std::sync::Arc::new(
        open_deno_kv_sqlite::SqliteBackend::open(dir.path().join("kv.sqlite3")).unwrap(),
    );
    let mut config = config();
    config.ui = Explorer::ReadWrite;
    let running = start_with(config, Databases::new(sqlite)).await;
    seed(running.backend.as_ref()).await;

    let (_, first) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 20}),
    )
    .await;
    assert_eq!(keys_of(&first), users(0..20));
    let (_, rest) = api(
        &running,
        "list",
        json!({"prefix": "[\"users\"]", "limit": 20, "cursor": first["cursor"]}),
    )
    .await;
    assert_eq!(keys_of(&rest), users(20..25));
    let seen = first["entries"][4].clone();
    let (status, _) = api(
        &running,
        "set",
        json!({"id": seen["id"], "versionstamp": seen["versionstamp"], "type": "json", "text": "1"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, conflict) = api(
        &running,
        "set",
        json!({"id": seen["id"], "versionstamp": seen["versionstamp"], "type": "json", "text": "2"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(conflict["current"]["value"], "1");
    assert_eq!(
        stored(running.backend.as_ref(), &key!["users", 4]).await,
        Some(js_value(json!(1)))
    );
    let (_, stats) = api(&running, "stats", json!({"prefix": "[]"})).await;
    assert_eq!(stats["entries"], 27);
    assert_eq!(stats["queueDepth"], 0);
    running.shutdown().await.unwrap();
    // The directory outlives the server that used it.
    drop(dir);
}

//! `GET /metrics` (issue 19): after a known workload over KV Connect (the metadata exchange,
//! sets, gets, checked writes of which some fail, a watch, an enqueue, a network delivery),
//! every counter and gauge is exactly what the workload implies; network deliveries are
//! counted by outcome; a backend failure counts as a storage error; without
//! `ServerConfig::metrics` the path is a 404; with it no token is needed.
//!
//! Run: `cargo test -p open-deno-kv-server --test metrics`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use common::*;
use http_body_util::BodyExt;
use hyper::StatusCode;
use open_deno_kv_connect::convert;
use open_deno_kv_connect::ext::{DequeueRequest, DequeueResponse, FinishRequest};
use open_deno_kv_connect::frames::FrameDecoder;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{
    AtomicWrite, Check, Enqueue, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_server::Databases;

const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;

fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).unwrap()
}

async fn post(running: &Running, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
    send(&http1_client(), "POST", url(running, path), headers, body).await
}

async fn write(running: &Running, write: &AtomicWrite) -> Reply {
    let body = convert::encode_atomic_write(write).encode_to_vec();
    post(running, "/v2/atomic_write", &data_headers(), body).await
}

/// Whether a write's answer says it committed (`false`: a check failed).
fn committed(reply: &Reply) -> bool {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    match convert::decode_atomic_write_output(&reply.body).unwrap() {
        convert::AtomicWriteResult::Committed(_) => true,
        convert::AtomicWriteResult::CheckFailed(_) => false,
    }
}

/// `GET /metrics` with no token: the samples, by series (`name{labels}`) and value.
async fn scrape(running: &Running) -> HashMap<String, f64> {
    let reply = send(
        &http1_client(),
        "GET",
        url(running, "/metrics"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        reply.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = reply.text();
    let mut samples = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample line: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not a number in {line:?}"));
        assert!(
            samples.insert(series.to_owned(), value).is_none(),
            "series {series} twice"
        );
    }
    samples
}

/// The value of `series`, which must be present.
fn value(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no series {series} in {samples:#?}"))
}

fn requests(endpoint: &str, status: u16) -> String {
    format!("kv_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}}")
}

#[tokio::test]
async fn metrics_count_a_known_workload_exactly() {
    let mut config = config();
    config.metrics = true;
    config.ephemeral = false;
    let running = start_with(config, Databases::new(memory())).await;

    // Before any request: every count zero, one database, no watch.
    let before = scrape(&running).await;
    assert_eq!(value(&before, "kv_commits_total"), 0.0);
    assert_eq!(value(&before, "kv_failed_checks_total"), 0.0);
    assert_eq!(value(&before, "kv_storage_errors_total"), 0.0);
    assert_eq!(value(&before, "kv_watches_open"), 0.0);
    assert_eq!(value(&before, "kv_databases_open"), 1.0);
    assert_eq!(value(&before, "kv_queue_depth{database=\"default\"}"), 0.0);
    assert!(
        !before.keys().any(|s| s.starts_with("kv_requests_total")),
        "the first scrape counts no request yet: {before:#?}"
    );

    // The metadata exchange, with the token.
    let reply = post(&running, "/", &[("authorization", BEARER)], OFFER.to_vec()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());

    // N = 3 sets; the first also enqueues a message due in an hour.
    const N: usize = 3;
    for i in 0..N {
        let mut set = AtomicWrite {
            mutations: vec![Mutation::set(k(&format!("n{i}")), KvValue::U64(i as u64))],
            ..Default::default()
        };
        if i == 0 {
            set.enqueues.push(Enqueue {
                payload: vec![0xff, 0x0f, 0x49, 0x02],
                ready_at: Utc::now() + chrono::TimeDelta::hours(1),
                keys_if_undelivered: Vec::new(),
                backoff_schedule: None,
            });
        }
        assert!(committed(&write(&running, &set).await));
    }

    // M = 2 gets.
    const M: usize = 2;
    for i in 0..M {
        let get = SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(k(&format!("n{i}")))],
            ..Default::default()
        };
        let body = convert::encode_snapshot_read(&get).encode_to_vec();
        let reply = post(&running, "/v2/snapshot_read", &data_headers(), body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }

    // K = 5 checked writes ("this key is absent"): J = 2 of them check a key that exists.
    const K: usize = 5;
    const J: usize = 2;
    for i in 0..K {
        let checked_key = if i < J {
            k(&format!("n{i}"))
        } else {
            k(&format!("fresh{i}"))
        };
        let checked = AtomicWrite {
            checks: vec![Check {
                key: checked_key.clone(),
                versionstamp: None,
            }],
            mutations: vec![Mutation::set(checked_key, KvValue::U64(99))],
            ..Default::default()
        };
        assert_eq!(committed(&write(&running, &checked).await), i >= J);
    }

    // One read with a wrong token: 401, counted under its endpoint.
    let mut wrong = data_headers();
    wrong[0] = ("authorization", "Bearer not-the-token-at-all");
    let body = convert::encode_snapshot_read(&SnapshotRead::default()).encode_to_vec();
    let reply = post(&running, "/v2/snapshot_read", &wrong, body).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);

    // A path nobody serves.
    let reply = send(
        &http1_client(),
        "GET",
        url(&running, "/nothing"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);

    // A watch, kept open until its first frame has arrived and the scrape is done.
    let body = convert::encode_watch(&[k("n0")]).encode_to_vec();
    let headers = data_headers();
    let watch_url = url(&running, "/v2/watch");
    let watch = open(&http1_client(), "POST", watch_url, &headers, body).await;
    assert_eq!(watch.status(), StatusCode::OK);
    let mut watch_body = watch.into_body();
    let mut decoder = FrameDecoder::default();
    let first = tokio::time::timeout(Duration::from_secs(10), watch_body.frame())
        .await
        .expect("no watch frame")
        .unwrap()
        .unwrap();
    decoder.push(&first.into_data().unwrap());
    assert!(decoder.next_frame().unwrap().is_some(), "a whole frame");

    let after = scrape(&running).await;
    assert_eq!(value(&after, &requests("metadata", 200)), 1.0);
    assert_eq!(
        value(&after, &requests("atomic_write", 200)),
        (N + K) as f64
    );
    assert_eq!(value(&after, &requests("snapshot_read", 200)), M as f64);
    assert_eq!(value(&after, &requests("snapshot_read", 401)), 1.0);
    assert_eq!(value(&after, &requests("watch", 200)), 1.0);
    assert_eq!(value(&after, &requests("other", 404)), 1.0);
    // The first scrape was counted once it was answered.
    assert_eq!(value(&after, &requests("metrics", 200)), 1.0);
    let request_series = after
        .keys()
        .filter(|s| s.starts_with("kv_requests_total"))
        .count();
    assert_eq!(request_series, 7, "no other request series: {after:#?}");
    assert_eq!(
        value(
            &after,
            "kv_request_duration_seconds_count{endpoint=\"atomic_write\"}"
        ),
        (N + K) as f64
    );
    assert_eq!(
        value(
            &after,
            "kv_request_duration_seconds_bucket{endpoint=\"snapshot_read\",le=\"+Inf\"}"
        ),
        (M + 1) as f64
    );
    assert_eq!(value(&after, "kv_commits_total"), (N + K - J) as f64);
    assert_eq!(value(&after, "kv_failed_checks_total"), J as f64);
    assert_eq!(value(&after, "kv_storage_errors_total"), 0.0);
    assert_eq!(value(&after, "kv_watches_open"), 1.0);
    assert!(value(&after, "kv_connections_open") >= 1.0);
    assert_eq!(value(&after, "kv_databases_open"), 1.0);
    assert_eq!(value(&after, "kv_queue_depth{database=\"default\"}"), 1.0);

    // The watch ends: its slot is given back.
    drop(watch_body);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = scrape(&running).await;
        if value(&now, "kv_watches_open") == 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed watch is still counted as open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn network_deliveries_are_counted_by_outcome() {
    let mut config = config();
    config.metrics = true;
    let running = start_with(config, Databases::new(memory())).await;
    let message = |byte: u8| Enqueue {
        payload: vec![0xff, 0x0f, 0x49, byte],
        ready_at: Utc::now(),
        keys_if_undelivered: Vec::new(),
        backoff_schedule: None,
    };
    let enqueue = AtomicWrite {
        enqueues: vec![message(2), message(4)],
        ..Default::default()
    };
    assert!(committed(&write(&running, &enqueue).await));
    assert_eq!(
        value(
            &scrape(&running).await,
            "kv_queue_depth{database=\"default\"}"
        ),
        2.0
    );
    for success in [true, false] {
        let body = DequeueRequest { wait_ms: 5_000 }.encode_to_vec();
        let reply = post(&running, "/v2/queue/dequeue", &data_headers(), body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        let delivery = DequeueResponse::decode(reply.body.as_ref()).unwrap();
        let body = FinishRequest {
            delivery_token: delivery.delivery_token,
            success,
        }
        .encode_to_vec();
        let reply = post(&running, "/v2/queue/finish", &data_headers(), body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    }
    let samples = scrape(&running).await;
    assert_eq!(
        value(&samples, "kv_queue_deliveries_total{outcome=\"ok\"}"),
        1.0
    );
    assert_eq!(
        value(&samples, "kv_queue_deliveries_total{outcome=\"failed\"}"),
        1.0
    );
    assert!(!samples.contains_key("kv_queue_deliveries_total{outcome=\"lease_expired\"}"));
    // The failed message is back in the queue for a retry (Deno's default back-off); the
    // delivered one is gone.
    assert_eq!(value(&samples, "kv_queue_depth{database=\"default\"}"), 1.0);
    assert_eq!(value(&samples, &requests("queue_dequeue", 200)), 2.0);
    assert_eq!(value(&samples, &requests("queue_finish", 200)), 2.0);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn metrics_are_off_unless_asked_for() {
    // The default configuration: /metrics is a 404 that names the flag, token or not.
    let running = start().await;
    for headers in [vec![], vec![("authorization", BEARER)]] {
        let reply = send(
            &http1_client(),
            "GET",
            url(&running, "/metrics"),
            &headers,
            Vec::new(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        assert!(reply.text().contains("--metrics"), "{}", reply.text());
    }
    running.shutdown().await.unwrap();

    // Turned on: no token needed (the scrape above asserts 200 without one), and only GET or HEAD.
    let mut config = config();
    config.metrics = true;
    let running = start_with(config, Databases::new(memory())).await;
    assert!(scrape(&running).await.contains_key("kv_commits_total"));
    let reply = send(
        &http1_client(),
        "POST",
        url(&running, "/metrics"),
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn backend_failures_count_as_storage_errors() {
    // Every /db/NAME fails to open: a backend failure, answered 500.
    let failing: open_deno_kv_server::DatabaseOpener = std::sync::Arc::new(|_name: &str| {
        Err(open_deno_kv_model::KvError::Storage {
            source: std::sync::Arc::new(std::io::Error::other("disk on fire")),
        })
    });
    let mut config = config();
    config.metrics = true;
    let running = start_with(config, Databases::new(memory()).with_opener(failing)).await;
    for _ in 0..2 {
        let reply = post(
            &running,
            "/db/broken",
            &[("authorization", BEARER)],
            OFFER.to_vec(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            !reply.text().contains("disk on fire"),
            "the cause stays in the log"
        );
    }
    let samples = scrape(&running).await;
    assert_eq!(value(&samples, "kv_storage_errors_total"), 2.0);
    assert_eq!(value(&samples, &requests("metadata", 500)), 2.0);
    assert_eq!(value(&samples, "kv_databases_open"), 1.0);
    running.shutdown().await.unwrap();
}

//! The endpoints over plain HTTP/1.1 (and one HTTP/2 prior-knowledge request), with a hyper
//! client: health, the metadata exchange, the data path, auth failures (401), oversize bodies
//! (413), bad protobuf (400), limits with denokv's texts, named and ephemeral databases, watch
//! frames, graceful shutdown, and the start-up refusal of open access off loopback.
//!
//! Run: `cargo test -p open-deno-kv-server --test http1`.

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::BodyExt;
use hyper::StatusCode;
use open_deno_kv_connect::convert;
use open_deno_kv_connect::frames::{Frame, FrameDecoder};
use open_deno_kv_connect::metadata::DatabaseMetadata;
use open_deno_kv_connect::pb;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{
    AtomicWrite, Check, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_server::{Access, Databases, Server, ServerConfig};

const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;

fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

async fn write(running: &Running, headers: &[(&str, &str)], write: &AtomicWrite) -> Reply {
    let body = convert::encode_atomic_write(write).encode_to_vec();
    send(
        &http1_client(),
        "POST",
        url(running, "/v2/atomic_write"),
        headers,
        body,
    )
    .await
}

async fn read(running: &Running, headers: &[(&str, &str)], read: &SnapshotRead) -> Reply {
    let body = convert::encode_snapshot_read(read).encode_to_vec();
    send(
        &http1_client(),
        "POST",
        url(running, "/v2/snapshot_read"),
        headers,
        body,
    )
    .await
}

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).unwrap()
}

#[tokio::test]
async fn health_and_unknown_paths() {
    let running = start().await;
    let client = http1_client();
    let reply = send(&client, "GET", url(&running, "/health"), &[], vec![]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text(), "ok\n");
    let reply = send(&client, "GET", url(&running, "/nope"), &[], vec![]).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.text(), "Resource not found.");
    let reply = send(&client, "GET", url(&running, "/"), &[], vec![]).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.headers["allow"], "POST");
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn metadata_exchange_negotiates_3_and_checks_the_token() {
    let running = start().await;
    let client = http1_client();
    let reply = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.headers["content-type"], "application/json");
    let meta = DatabaseMetadata::parse(&reply.body).unwrap();
    assert_eq!(meta.version, 3);
    assert!(meta.database_id.is_nil());
    assert_eq!(meta.endpoints[0].url, "/v2");
    assert_eq!(meta.endpoints[0].consistency, "strong");
    assert_eq!(meta.token, TOKEN);
    assert!(meta.expires_at > chrono::Utc::now() + chrono::TimeDelta::hours(1));

    let offer2 = br#"{"supportedVersions":[1,2]}"#.to_vec();
    let reply = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        offer2,
    )
    .await;
    assert_eq!(DatabaseMetadata::parse(&reply.body).unwrap().version, 2);
    let reply = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply
            .text()
            .starts_with("The server could not negotiate a protocol version.")
    );
    let reply = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        b"x".to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply
            .text()
            .starts_with("The server requires at least protocol version 2.")
    );

    // Auth failures: 401 with denokv's texts.
    for (auth, text) in [
        (None, "Malformed authorization header."),
        (Some("Bearer"), "Malformed authorization header."),
        (
            Some("Bearer wrong-token-0123456789abcdef"),
            "Invalid access token.",
        ),
        (
            Some("Basic test-token-0123456789abcdef"),
            "Invalid access token.",
        ),
        (
            Some("Bearer test-token-0123456789abcde"),
            "Invalid access token.",
        ),
    ] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let reply = send(
            &client,
            "POST",
            url(&running, "/"),
            &headers,
            OFFER.to_vec(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(reply.text(), text);
        assert!(!reply.text().contains(TOKEN));
    }
    // The scheme is case-insensitive.
    let reply = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", "bearer test-token-0123456789abcdef")],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    running.shutdown().await.unwrap();
}

/// Stock clients validate the metadata strictly (`@deno/kv` 0.14 refuses any field beyond the
/// five the protocol defines): extensions are listed only for a client that asks for them.
#[tokio::test]
async fn metadata_offers_extensions_only_when_asked() {
    let running = start().await;
    let client = http1_client();
    let fields = |reply: &Reply| -> Vec<String> {
        let json: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let plain = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.text());
    assert_eq!(
        fields(&plain),
        ["databaseId", "endpoints", "expiresAt", "token", "version"]
    );
    let endpoint: serde_json::Value = serde_json::from_slice(&plain.body).unwrap();
    let mut endpoint_fields: Vec<&String> = endpoint["endpoints"][0]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    endpoint_fields.sort();
    assert_eq!(endpoint_fields, ["consistency", "url"]);

    let asked = send(
        &client,
        "POST",
        url(&running, "/"),
        &[
            ("authorization", BEARER),
            ("x-kv-extensions", "expiry/1, no-such/1"),
            ("x-kv-extensions", "queue/1"),
        ],
        OFFER.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&asked.body).unwrap();
    assert_eq!(
        json["kvExtensions"],
        serde_json::json!(["queue/1", "expiry/1"])
    );

    // The range extensions too are listed only when asked for, and only those asked for.
    let ranged = send(
        &client,
        "POST",
        url(&running, "/"),
        &[
            ("authorization", BEARER),
            ("x-kv-extensions", "watch-range/1,count/1, range-delete/1"),
        ],
        OFFER.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&ranged.body).unwrap();
    assert_eq!(
        json["kvExtensions"],
        serde_json::json!(["range-delete/1", "count/1", "watch-range/1"])
    );
    // What a stock client sends (no header) still gets the protocol's five fields alone, with
    // every extension this server has on offer.
    assert_eq!(
        open_deno_kv_server::ServerConfig::new(open_deno_kv_server::Access::Open).extensions,
        open_deno_kv_connect::ext::EXTENSIONS.to_vec()
    );
    let plain_again = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER), ("x-kv-extensions", "")],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(
        fields(&plain_again),
        ["databaseId", "endpoints", "expiresAt", "token", "version"]
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn data_path_reads_writes_and_checks() {
    let running = start().await;
    let headers = data_headers();
    let set = AtomicWrite {
        mutations: vec![Mutation::set(k("a"), KvValue::U64(7))],
        ..Default::default()
    };
    let reply = write(&running, &headers, &set).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.headers["content-type"], "application/x-protobuf");
    let convert::AtomicWriteResult::Committed(commit) =
        convert::decode_atomic_write_output(&reply.body).unwrap()
    else {
        panic!("not committed")
    };

    let get = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(k("a"))],
        ..Default::default()
    };
    let reply = read(&running, &headers, &get).await;
    assert_eq!(reply.status, StatusCode::OK);
    let ranges = convert::decode_snapshot_read_output(&reply.body).unwrap();
    assert_eq!(ranges[0].entries[0].value, KvValue::U64(7));
    assert_eq!(ranges[0].entries[0].versionstamp, commit.versionstamp);

    // A failed check: AW_CHECK_FAILURE, nothing applied.
    let checked = AtomicWrite {
        checks: vec![Check {
            key: k("a"),
            versionstamp: None,
        }],
        mutations: vec![Mutation::set(k("a"), KvValue::U64(8))],
        ..Default::default()
    };
    let reply = write(&running, &headers, &checked).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(matches!(
        convert::decode_atomic_write_output(&reply.body).unwrap(),
        convert::AtomicWriteResult::CheckFailed(_)
    ));

    // A sum on a non-u64 value: 400 with Deno's text.
    let bad_sum = AtomicWrite {
        mutations: vec![
            Mutation::set(k("s"), KvValue::Bytes(vec![1].into())),
            Mutation::sum(k("s"), KvValue::U64(1)),
        ],
        ..Default::default()
    };
    let reply = write(&running, &headers, &bad_sum).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        "Failed to perform 'sum' mutation on a non-U64 value in the database"
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_requests_get_4xx_with_reasons() {
    let running = start().await;
    let client = http1_client();
    let headers = data_headers();
    let post = |path: &'static str, headers: Vec<(&'static str, &'static str)>, body: Vec<u8>| {
        let client = client.clone();
        let url = url(&running, path);
        async move { send(&client, "POST", url, &headers, body).await }
    };

    // Bad protobuf.
    let reply = post("/v2/snapshot_read", headers.clone(), vec![0x0a, 0x05, 0x01]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.text().starts_with("Request protobuf is invalid: "),
        "{}",
        reply.text()
    );
    // LE64 of the wrong length: 400, not a dropped connection.
    let body = pb::AtomicWrite {
        mutations: vec![pb::Mutation {
            key: k("x"),
            value: Some(pb::KvValue {
                data: vec![1, 2, 3],
                encoding: pb::ValueEncoding::VeLe64 as i32,
            }),
            mutation_type: pb::MutationType::MSum as i32,
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let reply = post("/v2/atomic_write", headers.clone(), body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "Invalid LE64 value: expected 8 bytes, got 3.");

    // Auth on the data path.
    let mut no_auth = headers.clone();
    no_auth.retain(|(name, _)| *name != "authorization");
    let reply = post("/v2/snapshot_read", no_auth, vec![]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let mut wrong = headers.clone();
    wrong[0] = ("authorization", "Bearer nope-nope-nope-nope");
    let reply = post("/v2/snapshot_read", wrong, vec![]).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.text(), "Invalid access token.");

    // Version and database id.
    let mut v1 = headers.clone();
    v1.retain(|(name, _)| *name != "x-denokv-version");
    let reply = post("/v2/snapshot_read", v1, vec![]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "Expected protocol version 2.");
    let mut unknown_db = headers.clone();
    unknown_db[3] = (
        "x-denokv-database-id",
        "11111111-1111-1111-1111-111111111111",
    );
    let reply = post("/v2/snapshot_read", unknown_db, vec![]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "Invalid database id.");

    // Oversize body: 413, declared or not.
    let big = vec![0u8; open_deno_kv_server::MAX_BODY_BYTES + 1];
    let reply = post("/v2/atomic_write", headers.clone(), big).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.text().starts_with("Request body too large"));

    // Limits, with denokv's texts: a value over 64 KiB, 11 ranges, 101 checks.
    let too_big = AtomicWrite {
        mutations: vec![Mutation::set(
            k("v"),
            KvValue::Bytes(vec![0; 65_537].into()),
        )],
        ..Default::default()
    };
    let reply = write(&running, &headers, &too_big).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "A value exceeds the value size limit.");
    let many = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(k("a")); 11],
        ..Default::default()
    };
    let reply = read(&running, &headers, &many).await;
    assert_eq!(
        reply.text(),
        "Too many read ranges requested in one read request."
    );
    let checks = |n: usize| AtomicWrite {
        checks: (0..n)
            .map(|i| Check {
                key: k(&format!("c{i}")),
                versionstamp: None,
            })
            .collect(),
        mutations: vec![Mutation::set(k("c"), KvValue::U64(1))],
        ..Default::default()
    };
    let reply = write(&running, &headers, &checks(100)).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "100 checks are allowed: {}",
        reply.text()
    );
    let reply = write(&running, &headers, &checks(101)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "Too many checks included in atomic write.");
    let long_key = encode_key(&key![String::from_utf8(vec![b'k'; 2100]).unwrap()]).unwrap();
    let reply = write(
        &running,
        &headers,
        &AtomicWrite {
            mutations: vec![Mutation::set(long_key, KvValue::U64(1))],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(reply.text(), "A key exceeds the key size limit.");
    running.shutdown().await.unwrap();
}

/// Each ephemeral open gets a fresh database, kept for its connection; named and default
/// databases are shared.
#[tokio::test]
async fn ephemeral_and_named_databases() {
    let named = memory();
    let mut databases = Databases::new(memory()).with_named("app", named.clone());
    databases = databases.with_opener(Arc::new(|_name: &str| Ok(memory())));
    let running = start_with(config(), databases).await;

    async fn exchange(
        client: &hyper_util::client::legacy::Client<
            hyper_util::client::legacy::connect::HttpConnector,
            http_body_util::Full<Bytes>,
        >,
        running: &Running,
        path: &str,
    ) -> DatabaseMetadata {
        let reply = send(
            client,
            "POST",
            url(running, path),
            &[("authorization", BEARER)],
            OFFER.to_vec(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text());
        DatabaseMetadata::parse(&reply.body).unwrap()
    }
    let client = http2_client(); // one connection, like Deno
    let a1 = exchange(&client, &running, "/ephemeral/:memory:").await;
    let a2 = exchange(&client, &running, "/ephemeral/:memory:").await;
    assert_eq!(
        a1.database_id, a2.database_id,
        "the refresher gets the same database"
    );
    let other_connection = http2_client();
    let b = exchange(&other_connection, &running, "/ephemeral/:memory:").await;
    assert_ne!(
        a1.database_id, b.database_id,
        "another connection gets a fresh one"
    );
    let s1 = exchange(&client, &running, "/ephemeral//tmp/x.db").await;
    let s2 = exchange(&other_connection, &running, "/ephemeral//tmp/x.db").await;
    assert_eq!(
        s1.database_id, s2.database_id,
        "scratch databases are shared by path"
    );
    let app = exchange(&client, &running, "/db/app").await;
    let other = exchange(&client, &running, "/db/other").await;
    assert_ne!(app.database_id, other.database_id);
    let reply = send(
        &client,
        "POST",
        url(&running, "/db/bad.name"),
        &[("authorization", BEARER)],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);

    // Write into the ephemeral database over connection A; connection B's does not see it, nor
    // does the default one.
    let id = a1.database_id.to_string();
    let headers_for = |id: &str| {
        let mut h: Vec<(String, String)> = data_headers()
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        h[3].1 = id.to_owned();
        h
    };
    let as_refs = |h: &Vec<(String, String)>| -> Vec<(String, String)> { h.clone() };
    let post = |client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<Bytes>,
    >,
                path: &str,
                h: Vec<(String, String)>,
                body: Vec<u8>| {
        let client = client.clone();
        let url = url(&running, path);
        async move {
            let refs: Vec<(&str, &str)> = h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            send(&client, "POST", url, &refs, body).await
        }
    };
    let set = convert::encode_atomic_write(&AtomicWrite {
        mutations: vec![Mutation::set(k("e"), KvValue::U64(1))],
        ..Default::default()
    })
    .encode_to_vec();
    let reply = post(
        &client,
        "/v2/atomic_write",
        as_refs(&headers_for(&id)),
        set.clone(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let get = convert::encode_snapshot_read(&SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(k("e"))],
        ..Default::default()
    })
    .encode_to_vec();
    let reply = post(&client, "/v2/snapshot_read", headers_for(&id), get.clone()).await;
    assert_eq!(
        convert::decode_snapshot_read_output(&reply.body).unwrap()[0]
            .entries
            .len(),
        1
    );
    // Another connection cannot use A's ephemeral database at all.
    let reply = post(
        &other_connection,
        "/v2/snapshot_read",
        headers_for(&id),
        get.clone(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let reply = post(
        &other_connection,
        "/v2/snapshot_read",
        headers_for(&b.database_id.to_string()),
        get.clone(),
    )
    .await;
    assert_eq!(
        convert::decode_snapshot_read_output(&reply.body).unwrap()[0]
            .entries
            .len(),
        0
    );
    // The fixed named database is the one given.
    let reply = post(
        &client,
        "/v2/atomic_write",
        headers_for(&app.database_id.to_string()),
        set,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let entries = named
        .snapshot_read(SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(k("e"))],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(entries[0].entries.len(), 1);
    running.shutdown().await.unwrap();
}

/// A watch answers with frames: the current state at once (every key changed=true with its
/// entry), again after a write, keep-alives in between; shutdown ends the stream cleanly.
#[tokio::test]
async fn watch_streams_frames_and_ends_on_shutdown() {
    let mut cfg = config();
    cfg.keep_alive_interval = Duration::from_millis(200);
    let running = start_with(cfg, Databases::new(memory())).await;
    let headers = data_headers();
    running
        .backend
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(k("w1"), KvValue::U64(1))],
            ..Default::default()
        })
        .await
        .unwrap();
    let body = convert::encode_watch(&[k("w1"), k("w2")]).encode_to_vec();
    let watch_url = url(&running, "/v2/watch");
    let response = open(&http1_client(), "POST", watch_url, &headers, body).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/octet-stream"
    );
    let mut body = response.into_body();
    let mut decoder = FrameDecoder::default();
    let mut outputs = Vec::new();
    let mut keep_alives = 0;
    let mut wrote = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while outputs.len() < 2 || keep_alives < 1 {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("watch too slow");
        let data = frame.unwrap().unwrap().into_data().unwrap();
        decoder.push(&data);
        while let Some(frame) = decoder.next_frame().unwrap() {
            match frame {
                Frame::KeepAlive => keep_alives += 1,
                Frame::Output(frame) => outputs.push(frame.output),
            }
        }
        if !outputs.is_empty() && !wrote {
            wrote = true;
            running
                .backend
                .atomic_write(AtomicWrite {
                    mutations: vec![Mutation::set(k("w2"), KvValue::U64(2))],
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }
    for output in &outputs {
        assert_eq!(output.status, pb::SnapshotReadStatus::SrSuccess as i32);
        assert!(
            output.keys.iter().all(|key| key.changed),
            "always changed=true"
        );
    }
    assert!(outputs[0].keys[0].entry_if_changed.is_some());
    assert!(outputs[0].keys[1].entry_if_changed.is_none());
    // The second frame still carries w1's full entry although only w2 changed.
    assert!(outputs[1].keys[0].entry_if_changed.is_some());
    assert!(outputs[1].keys[1].entry_if_changed.is_some());

    let server = tokio::spawn(running.shutdown());
    // The stream ends (no error) and the server finishes well within its grace period.
    let rest = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .expect("watch did not end");
    assert!(rest.is_ok());
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("shutdown hung")
        .unwrap()
        .unwrap();
}

/// In-flight requests finish during a graceful shutdown; new connections are refused after.
#[tokio::test]
async fn shutdown_is_graceful() {
    let running = start().await;
    let addr = running.addr;
    running.shutdown().await.unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// Deno speaks HTTP/2 with prior knowledge; the same port serves it.
#[tokio::test]
async fn http2_prior_knowledge_works() {
    let running = start().await;
    let reply = send(
        &http2_client(),
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn refuses_open_access_off_loopback_and_weak_tokens() {
    assert!(
        Server::new(
            ServerConfig::new(Access::Token("short".into())),
            Databases::new(memory())
        )
        .is_err()
    );
    assert!(
        Server::new(
            ServerConfig::new(Access::Token("has a space in it".into())),
            Databases::new(memory())
        )
        .is_err()
    );
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let server = Server::new(ServerConfig::new(Access::Open), Databases::new(memory())).unwrap();
    let err = server.serve(listener, async {}).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    // Open on loopback is fine: no authorization needed.
    let mut cfg = ServerConfig::new(Access::Open);
    cfg.log_errors = false;
    let running = start_with(cfg, Databases::new(memory())).await;
    let reply = send(
        &http1_client(),
        "POST",
        url(&running, "/"),
        &[],
        OFFER.to_vec(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    running.shutdown().await.unwrap();
}

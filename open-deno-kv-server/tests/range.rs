//! The range extensions at the HTTP level: `range-delete/1` bodies applied strictly (400 for a
//! list that does not fit, nothing applied), `POST /v2/range/count` and `/v2/range/watch` with
//! bad input, the watch cap, shutdown, metrics labels, and a server configured without them.
//!
//! Run: `cargo test -p open-deno-kv-server --test range`.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::*;
use http_body_util::BodyExt;
use hyper::StatusCode;
use open_deno_kv_connect::convert;
use open_deno_kv_connect::ext::{
    AtomicWriteExt, EXTENSIONS, RangeCountResponse, RangeDeleteExt, RangeRequest, RangeWatchFrame,
};
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{
    AtomicWrite, KeyRange, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_server::{Databases, ServerConfig};

fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

fn item(id: u64) -> Vec<u8> {
    encode_key(&key!["items", id]).unwrap()
}

fn items() -> KeyRange {
    KeyRange::prefix(&key!["items"]).unwrap()
}

async fn fill(running: &Running) {
    let write = AtomicWrite {
        mutations: (1..=4)
            .map(|id| Mutation::set(item(id), KvValue::U64(id)))
            .collect(),
        ..Default::default()
    };
    running.backend.atomic_write(write).await.unwrap().unwrap();
}

async fn stored(running: &Running) -> usize {
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: items().start,
            end: items().end,
            limit: 100,
            reverse: false,
        }],
        ..Default::default()
    };
    running.backend.snapshot_read(read).await.unwrap()[0]
        .entries
        .len()
}

/// An `atomic_write` of `mutations` carrying `ranges` as its `range-delete/1` list.
async fn write_with(
    running: &Running,
    mutations: Vec<Mutation>,
    ranges: Vec<RangeDeleteExt>,
) -> Reply {
    let write = AtomicWrite {
        mutations,
        ..Default::default()
    };
    let mut body = convert::encode_atomic_write(&write).encode_to_vec();
    let extension = AtomicWriteExt {
        enqueues_without_retries: Vec::new(),
        range_deletes: ranges,
    };
    body.extend_from_slice(&extension.encode_to_vec());
    let path = url(running, "/v2/atomic_write");
    send(&http1_client(), "POST", path, &data_headers(), body).await
}

fn to_end(mutation: u32) -> RangeDeleteExt {
    RangeDeleteExt {
        mutation,
        end: items().end,
    }
}

#[tokio::test]
async fn range_delete_bodies_are_applied_strictly() {
    let running = start().await;
    fill(&running).await;
    // A range delete is encoded as its placeholder; the list below supplies (or not) its end.
    let placeholder = || Mutation::delete_range(items());
    let set = || Mutation::set(item(9), KvValue::U64(9));
    let cases = [
        (
            vec![placeholder()],
            vec![to_end(1)],
            "Invalid range delete: mutation index 1 is out of range.",
        ),
        (
            vec![set(), placeholder()],
            vec![to_end(0)],
            "Invalid range delete: mutation 0 is not a range delete.",
        ),
        (
            vec![placeholder(), placeholder()],
            vec![to_end(0), to_end(0)],
            "Invalid range delete: mutation 0 is named twice.",
        ),
        (
            vec![placeholder()],
            vec![],
            "Invalid range delete: 1 range delete(s) for 0 end(s).",
        ),
        (
            vec![Mutation::delete(items().start)],
            vec![to_end(0)],
            "Invalid range delete: 0 range delete(s) for 1 end(s).",
        ),
    ];
    for (mutations, ranges, text) in cases {
        let reply = write_with(&running, mutations, ranges).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.text(), text);
        assert_eq!(stored(&running).await, 4, "nothing was applied");
    }
    // Bounds too long for a read are refused with the key size text.
    let huge = RangeDeleteExt {
        mutation: 0,
        end: vec![2; 5000],
    };
    let reply = write_with(&running, vec![placeholder()], vec![huge]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "A key exceeds the key size limit.");
    // A list that is not made of messages does not decode.
    let mut body = convert::encode_atomic_write(&AtomicWrite {
        mutations: vec![placeholder()],
        ..Default::default()
    })
    .encode_to_vec();
    open_deno_kv_connect::prost::encoding::uint32::encode(1002, &1, &mut body);
    let path = url(&running, "/v2/atomic_write");
    let reply = send(&http1_client(), "POST", path, &data_headers(), body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.text().starts_with("Request protobuf is invalid"),
        "{}",
        reply.text()
    );
    assert_eq!(stored(&running).await, 4);

    // A well-formed one deletes the range.
    let reply = write_with(&running, vec![placeholder()], vec![to_end(0)]).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(stored(&running).await, 0);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_server_without_the_extensions_refuses_their_requests() {
    let mut config = config();
    config.extensions = vec![];
    let running = start_with(config, Databases::new(memory())).await;
    fill(&running).await;
    let reply = write_with(&running, vec![Mutation::delete(item(1))], vec![to_end(0)]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        "This server does not offer the range-delete/1 extension."
    );
    assert_eq!(stored(&running).await, 4, "not even the placeholder's key");
    let body = RangeRequest::of(&items()).encode_to_vec();
    for (path, name) in [
        ("/v2/range/count", "count/1"),
        ("/v2/range/watch", "watch-range/1"),
    ] {
        let reply = send(
            &http1_client(),
            "POST",
            url(&running, path),
            &data_headers(),
            body.clone(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND);
        assert_eq!(
            reply.text(),
            format!("This server does not offer the {name} extension.")
        );
    }
    // Nor are they listed to a client that asks.
    let reply = send(
        &http1_client(),
        "POST",
        url(&running, "/"),
        &[
            ("authorization", BEARER),
            ("x-kv-extensions", &EXTENSIONS.join(",")),
        ],
        br#"{"supportedVersions":[1,2,3]}"#.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert!(json.get("kvExtensions").is_none(), "{json}");
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn range_count_answers_and_refuses_bad_input() {
    let mut config = config();
    config.metrics = true;
    let running = start_with(config, Databases::new(memory())).await;
    fill(&running).await;
    let count = |body: Vec<u8>| {
        let path = url(&running, "/v2/range/count");
        async move { send(&http1_client(), "POST", path, &data_headers(), body).await }
    };
    let reply = count(RangeRequest::of(&items()).encode_to_vec()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let answer = RangeCountResponse::decode(reply.body.as_ref()).unwrap();
    assert_eq!(answer.entries, 4);
    assert_eq!(answer.key_bytes, 4 * item(1).len() as u64);
    assert_eq!(answer.value_bytes, 4 * 8);

    let reply = count(vec![0x0a, 0xff, 0x01]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.text().starts_with("Request protobuf is invalid"));
    let huge = RangeRequest {
        start: vec![2; 5000],
        end: vec![3],
    };
    let reply = count(huge.encode_to_vec()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "A key exceeds the key size limit.");

    let path = url(&running, "/v2/range/count");
    let reply = send(&http1_client(), "GET", path, &data_headers(), vec![]).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);

    let metrics = send(
        &http1_client(),
        "GET",
        url(&running, "/metrics"),
        &[],
        vec![],
    )
    .await
    .text();
    assert!(
        metrics.contains("endpoint=\"range_count\",status=\"200\""),
        "{metrics}"
    );
    running.shutdown().await.unwrap();
}

/// Reads frames of a range watch until `count` of them (keep-alives left out) arrived.
async fn frames(
    body: &mut hyper::body::Incoming,
    decoder: &mut FrameDecoder,
    count: usize,
) -> Vec<RangeWatchFrame> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while out.len() < count {
        while let Some(frame) = decoder.next_payload().unwrap() {
            if let RawFrame::Payload(bytes) = frame {
                out.push(RangeWatchFrame::decode(bytes.as_slice()).unwrap());
            }
        }
        if out.len() >= count {
            break;
        }
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("range watch too slow");
        decoder.push(&frame.unwrap().unwrap().into_data().unwrap());
    }
    out
}

#[tokio::test]
async fn range_watches_share_the_watch_cap_and_end_on_shutdown() {
    let mut config: ServerConfig = config();
    config.resources.max_watches = 1;
    let running = start_with(config, Databases::new(memory())).await;
    let body = RangeRequest::of(&items()).encode_to_vec();
    let path = url(&running, "/v2/range/watch");
    let response = open(
        &http1_client(),
        "POST",
        path.clone(),
        &data_headers(),
        body.clone(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/octet-stream"
    );
    let mut stream = response.into_body();
    let mut decoder = FrameDecoder::default();
    let first = frames(&mut stream, &mut decoder, 1).await;
    assert!(first[0].reread && first[0].changes.is_empty());

    // The one slot is taken: another range watch and a key watch are refused alike.
    let text = "Too many watches on this server (the cap is 1); close some and try again.";
    let reply = send(&http1_client(), "POST", path, &data_headers(), body).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (StatusCode::TOO_MANY_REQUESTS, text)
    );
    let watch = convert::encode_watch(&[item(1)]).encode_to_vec();
    let path = url(&running, "/v2/watch");
    let reply = send(&http1_client(), "POST", path, &data_headers(), watch).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (StatusCode::TOO_MANY_REQUESTS, text)
    );

    // The keys a commit wrote in the range arrive as change frames.
    fill(&running).await;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    while keys.len() < 4 {
        for changed in frames(&mut stream, &mut decoder, 1).await {
            assert!(!changed.reread && !changed.continues);
            keys.extend(changed.changes.iter().map(|c| c.key.clone()));
        }
    }
    assert_eq!(keys, (1..=4).map(item).collect::<Vec<_>>());

    let server = tokio::spawn(running.shutdown());
    let rest = tokio::time::timeout(Duration::from_secs(5), stream.collect())
        .await
        .expect("range watch did not end");
    assert!(rest.is_ok());
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("shutdown hung")
        .unwrap()
        .unwrap();
}

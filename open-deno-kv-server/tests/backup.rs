//! The `snapshot/1` and `change-log/1` extensions at the HTTP level: an export's frames, an
//! import whose body is cut short (refused, nothing imported), the metadata a stock client gets
//! (unchanged), and a server configured without them.
//!
//! Run: `cargo test -p open-deno-kv-server --test backup`.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;
use hyper::StatusCode;
use open_deno_kv_connect::ext::{
    ChangeLogStatusResponse, ConfigureChangeLogRequest, EXTENSIONS, ImportResponse,
    ReadChangeLogRequest, ReadChangeLogResponse, SnapshotReader, SnapshotWriter,
};
use open_deno_kv_connect::frames::{FrameDecoder, RawFrame};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{
    AtomicWrite, Backend, KeyRange, KvEntry, KvValue, Mutation, SnapshotItem, Versionstamp,
    encode_key, key,
};
use open_deno_kv_server::{Databases, ServerConfig};

fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

const OFFER: &[u8] = br#"{"supportedVersions":[1,2,3]}"#;

fn entry(i: u32) -> SnapshotItem {
    SnapshotItem::Entry(KvEntry {
        key: encode_key(&key!["item", i]).unwrap().into(),
        value: KvValue::Bytes(vec![7; 1000].into()),
        versionstamp: Versionstamp::from_version(5, 0),
        expires_at: None,
    })
}

/// The encoded frames of a snapshot of `count` entries as of version 10; `with_end`: whether
/// its end frame is there.
fn import_body(count: u32, with_end: bool) -> Vec<u8> {
    let mut writer = SnapshotWriter::new(Versionstamp::from_version(10, 0));
    let mut frames = vec![writer.header()];
    for i in 0..count {
        frames.extend(writer.push(entry(i)));
    }
    let mut last = writer.finish();
    if !with_end {
        last.pop();
    }
    frames.extend(last);
    frames.iter().flat_map(|f| f.to_payload()).collect()
}

async fn entries_in(backend: &dyn Backend) -> u64 {
    let all = KeyRange::new(vec![], vec![0xff]);
    backend.count_range(all).await.unwrap().entries
}

#[tokio::test]
async fn a_stock_client_sees_nothing_new_in_the_metadata() {
    let running = start().await;
    let client = http1_client();
    let plain = send(
        &client,
        "POST",
        url(&running, "/"),
        &[("authorization", BEARER)],
        OFFER.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&plain.body).unwrap();
    let mut fields: Vec<&String> = json.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        ["databaseId", "endpoints", "expiresAt", "token", "version"]
    );
    // Asked for, the two are listed (the memory database has export, import and a log).
    let asked = send(
        &client,
        "POST",
        url(&running, "/"),
        &[
            ("authorization", BEARER),
            ("x-kv-extensions", "change-log/1, snapshot/1"),
        ],
        OFFER.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&asked.body).unwrap();
    assert_eq!(
        json["kvExtensions"],
        serde_json::json!(["snapshot/1", "change-log/1"])
    );
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_export_streams_its_header_items_and_end() {
    let running = start().await;
    let mut write = AtomicWrite::default();
    for i in 0..700u32 {
        write.mutations.push(Mutation::set(
            encode_key(&key!["item", i]).unwrap(),
            KvValue::Bytes(vec![1; 1000].into()),
        ));
        if write.mutations.len() == 500 {
            running
                .backend
                .atomic_write(std::mem::take(&mut write))
                .await
                .unwrap()
                .unwrap();
        }
    }
    running.backend.atomic_write(write).await.unwrap().unwrap();
    let reply = send(
        &http2_client(),
        "POST",
        url(&running, "/v2/snapshot/export"),
        &data_headers(),
        vec![],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let mut decoder = FrameDecoder::default();
    decoder.push(&reply.body);
    let mut reader = SnapshotReader::default();
    let mut items = Vec::new();
    let mut frames = 0;
    while let Some(RawFrame::Payload(bytes)) = decoder.next_payload().unwrap() {
        frames += 1;
        items.extend(reader.push_bytes(&bytes).unwrap());
    }
    assert!(reader.is_complete());
    assert_eq!(items.len(), 700);
    assert!(frames > 3, "700 KB of entries travel in several batches");
    // Cut before its end frame, the same bytes are an incomplete snapshot.
    let mut reader = SnapshotReader::default();
    let mut decoder = FrameDecoder::default();
    decoder.push(&reply.body[..reply.body.len() - 10]);
    while let Ok(Some(RawFrame::Payload(bytes))) = decoder.next_payload() {
        reader.push_bytes(&bytes).unwrap();
    }
    assert!(!reader.is_complete());
    running.shutdown().await.unwrap();
}

/// An export holds a watch slot while it streams; a client that drops it half read gives the
/// slot back (and the backend's snapshot with it).
#[tokio::test]
async fn an_export_dropped_half_read_gives_its_slot_back() {
    use http_body_util::BodyExt;
    let mut config = config();
    config.resources.max_watches = 1;
    let running = start_with(config, Databases::new(memory())).await;
    let mut write = AtomicWrite::default();
    for i in 0..500u32 {
        write.mutations.push(Mutation::set(
            encode_key(&key!["item", i]).unwrap(),
            KvValue::Bytes(vec![1; 20_000].into()),
        ));
        if write.mutations.len() == 40 {
            running
                .backend
                .atomic_write(std::mem::take(&mut write))
                .await
                .unwrap()
                .unwrap();
        }
    }
    let client = http2_client();
    let path = url(&running, "/v2/snapshot/export");
    let response = open(&client, "POST", path.clone(), &data_headers(), vec![]).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    body.frame().await.unwrap().unwrap();
    // 10 MB do not fit the connection's window: the export is still running.
    let second = send(&client, "POST", path.clone(), &data_headers(), vec![]).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    drop(body);
    let mut answered = None;
    for _ in 0..50 {
        let response = open(&client, "POST", path.clone(), &data_headers(), vec![]).await;
        if response.status() == StatusCode::OK {
            answered = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered.is_some(), "the dropped export's slot came back");
    drop(answered);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_import_cut_short_fails_and_leaves_the_store_empty() {
    let running = start().await;
    let import = |body: Vec<u8>| {
        let path = url(&running, "/v2/snapshot/import");
        async move { send(&http1_client(), "POST", path, &data_headers(), body).await }
    };
    // A whole body, but no end frame: refused, nothing imported.
    let reply = import(import_body(600, false)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(
        reply.text().contains("before its end frame"),
        "{}",
        reply.text()
    );
    assert_eq!(entries_in(&*running.backend).await, 0);

    // A connection that breaks off in the middle of the body (HTTP/1.1, a Content-Length the
    // client never sends in full).
    let body = import_body(600, true);
    let addr = running.addr;
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let mut head = format!(
            "POST /v2/snapshot/import HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (name, value) in data_headers() {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(&body[..body.len() / 2]).unwrap();
        stream.flush().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(stream);
    })
    .await
    .unwrap();
    // The server's import fails and rolls back: a whole import then succeeds (the store is
    // still empty, and the cut import holds nothing).
    let mut answer = None;
    for _ in 0..50 {
        let reply = import(import_body(600, true)).await;
        if reply.status == StatusCode::OK {
            answer = Some(ImportResponse::decode(reply.body.as_ref()).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = answer.expect("a whole import after the cut one succeeds");
    assert_eq!(answer.entries, 600);
    assert_eq!(entries_in(&*running.backend).await, 600);
    // Not empty any more: the next import is refused with NotEmpty's text.
    let reply = import(import_body(1, true)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        open_deno_kv_model::KvError::NotEmpty.to_string()
    );
    running.shutdown().await.unwrap();
}

/// Issue 29: an import through `kv serve` took a snapshot whose header versionstamp was doctored
/// to `fffffffffffffffe0000`. The server's backend applies the one rule of the data model
/// (`backup::check_lead`) to a raw stream no client checked: 400 with its text, nothing
/// imported, and the store's numbering untouched.
#[tokio::test]
async fn an_import_with_a_doctored_versionstamp_is_refused_by_the_server() {
    let running = start().await;
    let doctored: Versionstamp = "fffffffffffffffe0000".parse().unwrap();
    let mut writer = SnapshotWriter::new(doctored);
    let mut frames = vec![writer.header()];
    frames.extend(writer.push(entry(1)));
    frames.extend(writer.finish());
    let body: Vec<u8> = frames.iter().flat_map(|f| f.to_payload()).collect();
    let path = url(&running, "/v2/snapshot/import");
    let reply = send(&http1_client(), "POST", path, &data_headers(), body).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    assert!(
        reply.text().contains("damaged or was edited"),
        "{}",
        reply.text()
    );
    assert_eq!(entries_in(&*running.backend).await, 0);
    let mut write = AtomicWrite::default();
    write.mutations.push(Mutation::set(
        encode_key(&key!["after"]).unwrap(),
        KvValue::U64(1),
    ));
    let commit = running.backend.atomic_write(write).await.unwrap().unwrap();
    assert!(commit.versionstamp < Versionstamp::from_version(1_000, 0));
    running.shutdown().await.unwrap();
}

/// The identity of the served database travels in the export's header and the change log's
/// status.
#[tokio::test]
async fn the_database_is_named_in_the_export_and_the_status() {
    let running = start().await;
    let call = |path: &'static str, body: Vec<u8>| {
        let path = url(&running, path);
        async move { send(&http1_client(), "POST", path, &data_headers(), body).await }
    };
    let expected = running
        .backend
        .export_snapshot()
        .await
        .unwrap()
        .database
        .expect("the served database has an identity");
    let reply = call("/v2/snapshot/export", vec![]).await;
    assert_eq!(reply.status, StatusCode::OK);
    let mut decoder = FrameDecoder::default();
    let mut reader = SnapshotReader::default();
    decoder.push(&reply.body);
    let Some(RawFrame::Payload(first)) = decoder.next_payload().unwrap() else {
        panic!("the export starts with its header");
    };
    reader.push_bytes(&first).unwrap();
    assert_eq!(reader.database(), Some(expected));
    let reply = call("/v2/change_log/status", vec![]).await;
    let status = ChangeLogStatusResponse::decode(reply.body.as_ref())
        .unwrap()
        .into_status()
        .unwrap();
    assert_eq!(status.database, Some(expected));
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_change_log_endpoints_answer() {
    let running = start().await;
    let call = |path: &'static str, body: Vec<u8>| {
        let path = url(&running, path);
        async move { send(&http1_client(), "POST", path, &data_headers(), body).await }
    };
    let on = ConfigureChangeLogRequest::of(Some(Duration::from_secs(3600)));
    let reply = call("/v2/change_log/configure", on.encode_to_vec()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let too_short = ConfigureChangeLogRequest::of(Some(Duration::from_millis(10)));
    let reply = call("/v2/change_log/configure", too_short.encode_to_vec()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let mut write = AtomicWrite::default();
    write.mutations.push(Mutation::set(
        encode_key(&key!["a"]).unwrap(),
        KvValue::U64(1),
    ));
    let commit = running.backend.atomic_write(write).await.unwrap().unwrap();
    let reply = call("/v2/change_log/status", vec![]).await;
    let status = ChangeLogStatusResponse::decode(reply.body.as_ref())
        .unwrap()
        .into_status()
        .unwrap();
    assert_eq!(status.retention, Some(Duration::from_secs(3600)));
    assert_eq!(status.records, 1);
    let read = ReadChangeLogRequest::of(Versionstamp::ZERO, 10);
    let reply = call("/v2/change_log/read", read.encode_to_vec()).await;
    let records = ReadChangeLogResponse::decode(reply.body.as_ref())
        .unwrap()
        .into_records(Versionstamp::ZERO, 10)
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].versionstamp, commit.versionstamp);
    let reply = call("/v2/change_log/read", vec![0x0a, 0x01, 0x00]).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_server_without_the_extensions_neither_lists_nor_serves_them() {
    let mut config: ServerConfig = config();
    config.extensions = EXTENSIONS
        .iter()
        .copied()
        .filter(|name| !matches!(*name, "snapshot/1" | "change-log/1"))
        .collect();
    let running = start_with(config, Databases::new(memory())).await;
    for (path, name) in [
        ("/v2/snapshot/export", "snapshot/1"),
        ("/v2/snapshot/import", "snapshot/1"),
        ("/v2/change_log/status", "change-log/1"),
        ("/v2/change_log/read", "change-log/1"),
        ("/v2/change_log/configure", "change-log/1"),
    ] {
        let reply = send(
            &http1_client(),
            "POST",
            url(&running, path),
            &data_headers(),
            vec![],
        )
        .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            reply.text(),
            format!("This server does not offer the {name} extension.")
        );
    }
    let asked = send(
        &http1_client(),
        "POST",
        url(&running, "/"),
        &[
            ("authorization", BEARER),
            ("x-kv-extensions", "snapshot/1,change-log/1"),
        ],
        OFFER.to_vec(),
    )
    .await;
    let json: serde_json::Value = serde_json::from_slice(&asked.body).unwrap();
    assert!(json.get("kvExtensions").is_none(), "{json}");
    running.shutdown().await.unwrap();
}

/// A read-only database: exports and the log's status and records are served; an import and
/// `configure` are refused as writes are.
#[tokio::test]
async fn a_read_only_database_exports_but_refuses_imports_and_configure() {
    use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.sqlite3");
    SqliteBackend::open(&file).unwrap().close().await.unwrap();
    let options = SqliteOptions {
        read_only: true,
        ..Default::default()
    };
    let reader: Arc<dyn Backend> = Arc::new(SqliteBackend::open_with(&file, options).unwrap());
    let running = start_with(config(), Databases::new(reader)).await;
    let call = |path: &'static str, body: Vec<u8>| {
        let path = url(&running, path);
        async move { send(&http1_client(), "POST", path, &data_headers(), body).await }
    };
    let on = ConfigureChangeLogRequest::of(Some(Duration::from_secs(3600)));
    let reply = call("/v2/change_log/configure", on.encode_to_vec()).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "This database is read only.");
    let reply = call("/v2/snapshot/import", import_body(1, true)).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.text(), "This database is read only.");
    let reply = call("/v2/change_log/status", vec![]).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let reply = call("/v2/snapshot/export", vec![]).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    running.shutdown().await.unwrap();
}

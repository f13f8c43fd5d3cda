//! An atomic write whose outcome the store could not learn ([`KvError::OutcomeUnknown`]) is
//! answered 409 with its own text — not 5xx, which Deno's KV Connect client replays forever and
//! `@deno/kv` up to 10 times, applying a write that did land a second time — and counted as a
//! storage error.
//!
//! Run: `cargo test -p open-deno-kv-server --test outcome_unknown`.

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use hyper::StatusCode;
use open_deno_kv_connect::convert::{self, TEXT_OUTCOME_UNKNOWN};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::{
    AtomicWrite, Capabilities, Checked, CommitResult, Engine, KvError, KvValue, Limits, Mutation,
    ReadRangeOutput, SystemClock, ValidatedRead, ValidatedWrite, encode_key, key,
};
use open_deno_kv_server::Databases;

/// A store whose every commit loses its answer for good, counting the writes it was given.
#[derive(Default)]
struct LostCommits {
    writes: Arc<AtomicUsize>,
}

impl Engine for LostCommits {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none()
    }
    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        Ok(read
            .ranges
            .iter()
            .map(|_| ReadRangeOutput { entries: vec![] })
            .collect())
    }
    async fn atomic_write(&self, _: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        self.writes.fetch_add(1, Ordering::AcqRel);
        Err(KvError::outcome_unknown(std::io::Error::other(
            "the connection was lost at COMMIT and the database stayed unreachable",
        )))
    }
    async fn close(&self) -> Result<(), KvError> {
        Ok(())
    }
}

#[tokio::test]
async fn an_unknown_outcome_is_answered_409_and_not_as_a_server_error() {
    let engine = LostCommits::default();
    let writes = engine.writes.clone();
    let backend: Arc<dyn open_deno_kv_engine_kit::Backend> =
        Arc::new(Checked::new(engine, Limits::deno(), Arc::new(SystemClock)));
    let mut config = config();
    config.metrics = true;
    let running = start_with(config, Databases::new(backend)).await;

    let write = AtomicWrite {
        mutations: vec![Mutation::sum(
            encode_key(&key!["count"]).unwrap(),
            KvValue::U64(1),
        )],
        ..AtomicWrite::default()
    };
    let body = convert::encode_atomic_write(&write).encode_to_vec();
    let reply = send(
        &http1_client(),
        "POST",
        format!("http://{}/v2/atomic_write", running.addr),
        &data_headers(),
        body,
    )
    .await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert!(!reply.status.is_server_error());
    assert_eq!(reply.text(), TEXT_OUTCOME_UNKNOWN);
    assert!(
        !reply.text().contains("uthorization"),
        "Deno's client retries a 4xx whose text mentions authorization"
    );
    assert_eq!(
        writes.load(Ordering::Acquire),
        1,
        "the server itself did not retry"
    );

    let metrics = send(
        &http1_client(),
        "GET",
        format!("http://{}/metrics", running.addr),
        &[],
        Vec::new(),
    )
    .await
    .text();
    assert!(
        metrics.contains("kv_storage_errors_total 1"),
        "counted as a storage error:\n{metrics}"
    );
    running.shutdown().await.unwrap();
}

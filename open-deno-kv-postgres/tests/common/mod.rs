//! Helpers shared by this crate's integration tests.

#![allow(dead_code)] // Each test binary uses its own part.

use std::sync::Arc;

use open_deno_kv_conformance::support;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, Clock, Enqueue, KvError, KvValue, ManualClock, Versionstamp, key,
};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster};
use open_deno_kv_postgres::{PostgresBackend, PostgresError, PostgresOptions};

/// A primary alone, or `None` when PostgreSQL tests are skipped (it said so).
pub fn cluster() -> Option<TestCluster> {
    TestCluster::start_or_skip(ClusterOptions::default())
}

/// A handle on `schema` of the primary at `url`.
pub async fn open_url(url: &str, schema: &str) -> Result<Checked<PostgresBackend>, KvError> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(url, options).await
}

/// A handle on `schema` of the cluster's primary.
pub async fn open(
    cluster: &TestCluster,
    schema: &str,
) -> Result<Checked<PostgresBackend>, KvError> {
    open_url(&cluster.url(), schema).await
}

/// A handle on `schema` whose time is `clock`.
pub async fn open_at(
    cluster: &TestCluster,
    schema: &str,
    clock: &ManualClock,
) -> Checked<PostgresBackend> {
    let options = PostgresOptions {
        schema: schema.to_owned(),
        clock: Arc::new(clock.clone()),
        ..PostgresOptions::default()
    };
    PostgresBackend::open_with(&cluster.url(), options)
        .await
        .expect("open")
}

/// A message due now on `clock`, with the default back-off schedule.
pub fn message_write(payload: &[u8], clock: &dyn Clock) -> AtomicWrite {
    AtomicWrite {
        enqueues: vec![Enqueue {
            payload: payload.to_vec(),
            ready_at: clock.now(),
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..AtomicWrite::default()
    }
}

/// The key `[name]`, encoded.
pub fn k(name: &str) -> Vec<u8> {
    support::enc(&key![name])
}

/// Sets `[name]` to `value`.
pub async fn set(kv: &dyn Backend, name: &str, value: u64) -> Versionstamp {
    support::set(kv, &key![name], KvValue::U64(value)).await
}

/// The value of `[name]`, by a strong read.
pub async fn get(kv: &dyn Backend, name: &str) -> Option<KvValue> {
    support::get_value(kv, &key![name]).await
}

/// The PostgresError inside a KvError::Storage, if any.
pub fn postgres_error(err: &KvError) -> Option<&PostgresError> {
    match err {
        KvError::Storage { source } => source.downcast_ref::<PostgresError>(),
        _ => None,
    }
}

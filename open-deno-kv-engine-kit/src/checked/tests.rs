//! The layer's answers, pinned with an engine that records every call it receives.

use std::sync::Mutex;

use super::*;
use crate::{
    ManualClock, Mutation, ReadRange, ValidatedRead, ValidatedWatch, ValidatedWrite, encode_key,
    key,
};

/// Answers every method with a harmless value and writes down which ones were called.
struct Recorder {
    capabilities: Capabilities,
    calls: Arc<Mutex<Vec<&'static str>>>,
}

impl Recorder {
    fn record(&self, call: &'static str) {
        self.calls.lock().expect("calls").push(call);
    }
}

impl Engine for Recorder {
    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }
    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.record("snapshot_read");
        Ok(read
            .ranges
            .iter()
            .map(|_| ReadRangeOutput::default())
            .collect())
    }
    async fn atomic_write(&self, _: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        self.record("atomic_write");
        Ok(None)
    }
    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        self.record("dequeue_next_message");
        Ok(None)
    }
    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        self.record("queued_messages");
        Ok(vec![])
    }
    fn watch(&self, _: ValidatedWatch) -> Result<WatchStream, KvError> {
        self.record("watch");
        Ok(Box::pin(futures::stream::empty()))
    }
    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        self.record("check_integrity");
        Ok(IntegrityReport::default())
    }
    async fn close(&self) -> Result<(), KvError> {
        self.record("close");
        Ok(())
    }
    fn close_on_drop(&self) {
        self.record("close_on_drop");
    }
}

type Calls = Arc<Mutex<Vec<&'static str>>>;

fn layered(capabilities: Capabilities) -> (Checked<Recorder>, Calls) {
    let calls = Calls::default();
    let engine = Recorder {
        capabilities,
        calls: calls.clone(),
    };
    let clock = Arc::new(ManualClock::at_test_epoch());
    (Checked::new(engine, Limits::deno(), clock), calls)
}

fn everything() -> Capabilities {
    Capabilities::none()
        .with_queues(true)
        .with_queue_inspection(true)
        .with_watch(true)
        .with_integrity_check(true)
}

fn calls(calls: &Calls) -> Vec<&'static str> {
    calls.lock().expect("calls").clone()
}

fn a_read() -> SnapshotRead {
    SnapshotRead {
        ranges: vec![ReadRange::single_key(&key!["a"]).expect("key")],
        ..Default::default()
    }
}

fn a_write() -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key!["a"]).expect("key"),
            crate::KvValue::U64(1),
        )],
        ..Default::default()
    }
}

fn a_watch() -> Vec<Vec<u8>> {
    vec![encode_key(&key!["a"]).expect("key")]
}

/// Calls every method once; returns whether each was refused with `KvError::Unsupported`.
async fn unsupported_answers(kv: &Checked<Recorder>) -> [bool; 4] {
    let refused = |e: &KvError| matches!(e, KvError::Unsupported { .. });
    [
        kv.dequeue_next_message()
            .await
            .err()
            .is_some_and(|e| refused(&e)),
        kv.queued_messages()
            .await
            .err()
            .is_some_and(|e| refused(&e)),
        kv.watch(a_watch()).err().is_some_and(|e| refused(&e)),
        kv.check_integrity()
            .await
            .err()
            .is_some_and(|e| refused(&e)),
    ]
}

#[tokio::test]
async fn an_open_handle_passes_every_call_to_the_engine() {
    let (kv, log) = layered(everything());
    kv.snapshot_read(a_read()).await.expect("read");
    kv.atomic_write(a_write()).await.expect("write");
    assert_eq!(unsupported_answers(&kv).await, [false; 4]);
    assert_eq!(
        calls(&log),
        [
            "snapshot_read",
            "atomic_write",
            "dequeue_next_message",
            "queued_messages",
            "watch",
            "check_integrity"
        ]
    );
}

#[tokio::test]
async fn after_close_the_layer_answers_without_the_engine() {
    let (kv, log) = layered(everything());
    kv.close().await.expect("close");
    kv.close().await.expect("a second close is fine");
    assert!(kv.is_closed());
    let closed = |r: Result<(), KvError>| matches!(r, Err(KvError::Closed));
    assert!(closed(kv.snapshot_read(a_read()).await.map(drop)));
    assert!(closed(kv.atomic_write(a_write()).await.map(drop)));
    assert!(closed(kv.queued_messages().await.map(drop)));
    assert!(closed(kv.watch(a_watch()).map(drop)));
    assert!(closed(kv.check_integrity().await.map(drop)));
    assert!(matches!(kv.dequeue_next_message().await, Ok(None)));
    drop(kv);
    assert_eq!(
        calls(&log),
        ["close"],
        "closed once, nothing else, no drop hook"
    );
}

#[tokio::test]
async fn an_optional_method_without_its_capability_is_refused_before_the_engine() {
    let (kv, log) = layered(Capabilities::none());
    assert_eq!(unsupported_answers(&kv).await, [true; 4]);
    assert_eq!(calls(&log), Vec::<&str>::new());
    // Each flag opens exactly its own method.
    let (kv, _) = layered(Capabilities::none().with_queues(true));
    assert_eq!(unsupported_answers(&kv).await, [false, true, true, true]);
    let (kv, _) = layered(Capabilities::none().with_queue_inspection(true));
    assert_eq!(unsupported_answers(&kv).await, [true, false, true, true]);
    let (kv, _) = layered(Capabilities::none().with_watch(true));
    assert_eq!(unsupported_answers(&kv).await, [true, true, false, true]);
    let (kv, _) = layered(Capabilities::none().with_integrity_check(true));
    assert_eq!(unsupported_answers(&kv).await, [true, true, true, false]);
}

#[tokio::test]
async fn a_read_only_handle_refuses_writes_and_dequeues_and_serves_the_rest() {
    let (kv, log) = layered(everything().with_read_only(true));
    assert!(matches!(
        kv.atomic_write(a_write()).await,
        Err(KvError::ReadOnly)
    ));
    assert!(matches!(
        kv.dequeue_next_message().await,
        Err(KvError::ReadOnly)
    ));
    kv.snapshot_read(a_read()).await.expect("read");
    kv.queued_messages().await.expect("inspect");
    drop(kv.watch(a_watch()).expect("watch"));
    kv.check_integrity().await.expect("check");
    assert_eq!(
        calls(&log),
        [
            "snapshot_read",
            "queued_messages",
            "watch",
            "check_integrity"
        ]
    );
}

#[tokio::test]
async fn requests_beyond_the_limits_never_reach_the_engine() {
    let (kv, log) = layered(everything());
    let too_many = SnapshotRead {
        ranges: vec![ReadRange::single_key(&key!["a"]).expect("key"); 11],
        ..Default::default()
    };
    let err = kv.snapshot_read(too_many).await.expect_err("11 ranges");
    assert_eq!(err.to_string(), "Too many ranges (max 10)");
    let big = AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key!["a"]).expect("key"),
            crate::KvValue::Bytes(vec![0; 65_537].into()),
        )],
        ..Default::default()
    };
    let err = kv.atomic_write(big).await.expect_err("value too large");
    assert_eq!(err.to_string(), "Value too large (max 65536 bytes)");
    let err = kv
        .watch(vec![a_watch()[0].clone(); 11])
        .err()
        .expect("11 keys");
    assert_eq!(err.to_string(), "Too many keys (max 10)");
    assert_eq!(calls(&log), Vec::<&str>::new());
}

#[test]
fn a_handle_dropped_open_lets_its_engine_release() {
    let (kv, log) = layered(everything());
    drop(kv);
    assert_eq!(calls(&log), ["close_on_drop"]);
}

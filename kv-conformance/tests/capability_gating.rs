//! The suite gates its cases on the backend's capabilities: a case needing something the backend
//! does not report shows as **ignored**, never as passed. Checked by running the suite on a memory
//! engine that hides some of its capabilities.

use std::sync::Arc;

use async_trait::async_trait;
use kv_conformance::{TestContext, run_suite};
use kv_memory::MemoryBackend;
use kv_proto::{
    AtomicWrite, Backend, Capabilities, CommitResult, KvError, QueueMessageHandle, ReadRangeOutput,
    SnapshotRead,
};
use libtest_mimic::{Arguments, Conclusion};

/// A memory engine that reports only `shown` and refuses every optional method not in it.
struct Masked {
    inner: MemoryBackend,
    shown: Capabilities,
}

#[async_trait]
impl Backend for Masked {
    fn capabilities(&self) -> Capabilities {
        self.shown
    }

    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.inner.snapshot_read(read).await
    }

    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        if !self.shown.queues && !write.enqueues.is_empty() {
            return Err(KvError::Unsupported { feature: "queues" });
        }
        self.inner.atomic_write(write).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        if !self.shown.queues {
            return Err(KvError::Unsupported { feature: "queues" });
        }
        self.inner.dequeue_next_message().await
    }

    async fn close(&self) -> Result<(), KvError> {
        self.inner.close().await
    }
}

/// Runs the cases whose names contain `filter` on a memory engine showing only `shown`.
fn run(shown: Capabilities, filter: &str) -> Conclusion {
    let factory = kv_conformance::FnFactory::new(move |ctx: &TestContext| {
        let clock = Arc::new(ctx.clock().clone());
        let inner = MemoryBackend::open(&Default::default(), clock);
        async move { Ok(Arc::new(Masked { inner, shown }) as Arc<dyn Backend>) }
    });
    let args = Arguments {
        filter: Some(filter.to_owned()),
        test_threads: Some(1),
        ..Arguments::default()
    };
    run_suite(Arc::new(factory), &args).expect("the suite runs")
}

#[test]
fn queue_cases_are_ignored_without_queues() {
    let conclusion = run(Capabilities::none(), "queues::");
    assert!(conclusion.num_ignored > 20, "{conclusion:?}");
    assert_eq!(conclusion.num_passed, 0, "{conclusion:?}");
    assert_eq!(conclusion.num_failed, 0, "{conclusion:?}");
}

#[test]
fn enqueue_limit_cases_are_ignored_without_queues() {
    let conclusion = run(Capabilities::none(), "limits::enqueue");
    assert_eq!(conclusion.num_ignored, 2, "{conclusion:?}");
    assert_eq!(conclusion.num_passed, 0, "{conclusion:?}");
}

#[test]
fn queue_listing_case_is_ignored_without_queue_inspection() {
    let queues_only = Capabilities::none().with_queues(true);
    let conclusion = run(queues_only, "queues::queued_messages_lists");
    assert_eq!(conclusion.num_ignored, 1, "{conclusion:?}");
    assert_eq!(conclusion.num_passed, 0, "{conclusion:?}");
}

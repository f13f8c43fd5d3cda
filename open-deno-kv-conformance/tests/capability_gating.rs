//! The suite gates its cases on the backend's capabilities: a case needing something the backend
//! does not report shows as **ignored**, never as passed. Checked by running the suite on a memory
//! engine that hides some of its capabilities; open-deno-kv-engine-kit's `Checked` layer refuses the hidden
//! optional methods without calling the engine.

use std::sync::Arc;

use libtest_mimic::{Arguments, Conclusion};
use open_deno_kv_conformance::{TestContext, run_suite};
use open_deno_kv_engine_kit::{
    Backend, Capabilities, Checked, CommitResult, Engine, KvError, Limits, QueueMessageHandle,
    ReadRangeOutput, ValidatedRead, ValidatedWrite,
};
use open_deno_kv_memory::MemoryBackend;

/// A memory engine that reports only `shown`; the layer above it refuses the rest.
struct Masked {
    inner: Checked<MemoryBackend>,
    shown: Capabilities,
}

impl Engine for Masked {
    fn capabilities(&self) -> Capabilities {
        self.shown
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.inner.snapshot_read(read.into_inner()).await
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        if !self.shown.queues && !write.enqueues.is_empty() {
            return Err(KvError::Unsupported { feature: "queues" });
        }
        self.inner.atomic_write(write.into_inner()).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        self.inner.dequeue_next_message().await
    }

    async fn close(&self) -> Result<(), KvError> {
        self.inner.close().await
    }
}

/// Runs the cases whose names contain `filter` on a memory engine showing only `shown`.
fn run(shown: Capabilities, filter: &str) -> Conclusion {
    let factory = open_deno_kv_conformance::FnFactory::new(move |ctx: &TestContext| {
        let clock = Arc::new(ctx.clock().clone());
        let inner = MemoryBackend::open(&Default::default(), clock.clone());
        let masked = Checked::new(Masked { inner, shown }, Limits::deno(), clock);
        async move { Ok(Arc::new(masked) as Arc<dyn Backend>) }
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

/// With nothing offered, every optional method is refused (the case checks each one), and the
/// cases after close that need a capability are ignored rather than passed.
#[test]
fn hidden_methods_are_refused_and_their_close_cases_ignored() {
    let refusals = run(
        Capabilities::none(),
        "lifecycle::optional_methods_without_their_capability_refuse",
    );
    assert_eq!(refusals.num_passed, 1, "{refusals:?}");
    let closed = run(Capabilities::none(), "with_closed_after_close");
    assert_eq!(
        closed.num_passed, 1,
        "only reads and writes run: {closed:?}"
    );
    assert_eq!(
        closed.num_ignored, 3,
        "watch, listing, integrity: {closed:?}"
    );
}

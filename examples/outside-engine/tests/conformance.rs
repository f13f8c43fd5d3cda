//! The whole conformance suite against `BTreeEngine`: every case runs, none is ignored, since the
//! engine reports every capability (queues, queue inspection, watch, integrity check) and its
//! store lives in the test context, so that reopening finds it.

use std::sync::Arc;

use open_deno_kv_conformance::{FnFactory, TestContext};
use open_deno_kv_engine_kit::{Backend, Clock};
use outside_engine::{BTreeEngine, BTreeStore};

open_deno_kv_conformance::conformance_main!(
    factory = FnFactory::new(|ctx: &TestContext| {
        let clock: Arc<dyn Clock> = Arc::new(ctx.clock().clone());
        let store = ctx.slot(BTreeStore::default);
        let backend = BTreeEngine::open(&store, clock);
        async move { Ok(Arc::new(backend) as Arc<dyn Backend>) }
    })
    .reopens(true)
);

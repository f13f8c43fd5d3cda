//! open-deno-kv-memory runs the whole conformance suite. The store lives in the test's context, so reopening
//! a handle finds the same data and the reopen cases run too.
use std::sync::Arc;

use open_deno_kv_conformance::{FnFactory, TestContext};
use open_deno_kv_engine_kit::Backend;
use open_deno_kv_memory::{MemoryBackend, MemoryStore};

open_deno_kv_conformance::conformance_main!(
    factory = FnFactory::new(|ctx: &TestContext| {
        let backend =
            MemoryBackend::open(&ctx.slot(MemoryStore::new), Arc::new(ctx.clock().clone()));
        async move { Ok(Arc::new(backend) as Arc<dyn Backend>) }
    })
    .reopens(true)
);

//! The smallest complete use of the suite: run it against kv-memory.
use std::sync::Arc;

use kv_conformance::TestContext;
use kv_proto::Backend;

kv_conformance::conformance_main!(|ctx: &TestContext| {
    let clock = Arc::new(ctx.clock().clone());
    async move {
        Ok(
            Arc::new(kv_memory::MemoryBackend::open(&Default::default(), clock))
                as Arc<dyn Backend>,
        )
    }
});

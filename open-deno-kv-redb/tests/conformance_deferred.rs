//! The whole conformance suite again with `Durability::Deferred`: commits are acknowledged before
//! they are synced, and a clean close (every reopen case closes first) must still keep them all.
use std::sync::Arc;

use open_deno_kv_conformance::TestContext;
use open_deno_kv_engine_kit::Backend;
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};

open_deno_kv_conformance::conformance_main!(|ctx: &TestContext| {
    let options = RedbOptions {
        clock: Arc::new(ctx.clock().clone()),
        durability: Durability::Deferred,
        ..Default::default()
    };
    let opened = RedbBackend::open_with(ctx.dir().join("kv.redb"), options);
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
});

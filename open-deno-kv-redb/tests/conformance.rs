//! open-deno-kv-redb runs the whole conformance suite, reopen and durability cases included: each test gets
//! its own database file in the test's directory.
use std::sync::Arc;

use open_deno_kv_conformance::TestContext;
use open_deno_kv_engine_kit::Backend;
use open_deno_kv_redb::{FileEngine, RedbBackend, RedbOptions};

open_deno_kv_conformance::conformance_main!(|ctx: &TestContext| {
    let options = RedbOptions {
        clock: Arc::new(ctx.clock().clone()),
        ..Default::default()
    };
    let opened = RedbBackend::open_with(ctx.dir().join("kv.redb"), options);
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
});

//! open-deno-kv-sqlite runs the whole conformance suite, reopen and durability cases included: each test
//! gets its own database file in the test's directory.
use std::sync::Arc;

use open_deno_kv_conformance::TestContext;
use open_deno_kv_engine_kit::Backend;
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};

open_deno_kv_conformance::conformance_main!(|ctx: &TestContext| {
    let options = SqliteOptions {
        clock: Arc::new(ctx.clock().clone()),
        ..Default::default()
    };
    let opened = SqliteBackend::open_with(ctx.dir().join("kv.sqlite3"), options);
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
});

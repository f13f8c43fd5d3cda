//! open-deno-kv-redb under `kill -9`: the crash harness of open-deno-kv-conformance (see `open_deno_kv_conformance::crash`)
//! kills a child process committing sums, multi-key writes, overwrites and enqueues at random
//! moments, reopens the file, and checks that every acknowledged commit is there, whole, with its
//! message delivered exactly once.
//!
//! ```sh
//! cargo test -p open-deno-kv-redb --test crash                                   # 3 trials
//! KV_CRASH_TRIALS=20 cargo test --release -p open-deno-kv-redb --test crash      # a deep run
//! ```
//!
//! Durability is [`Durability::Immediate`] (the default): every commit group is synced before it
//! is acknowledged.
use std::path::Path;
use std::sync::Arc;

use open_deno_kv_engine_kit::Backend;
use open_deno_kv_redb::{Durability, FileEngine, RedbBackend, RedbOptions};

open_deno_kv_conformance::crash_main!(|dir: &Path| {
    let options = RedbOptions {
        durability: Durability::Immediate,
        ..Default::default()
    };
    let opened = RedbBackend::open_with(dir.join("kv.redb"), options);
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
});

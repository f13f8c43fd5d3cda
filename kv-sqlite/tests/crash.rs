//! kv-sqlite under `kill -9`: the crash harness of kv-conformance (see `kv_conformance::crash`)
//! kills a child process committing sums, multi-key writes, overwrites and enqueues at random
//! moments, reopens the file, and checks that every acknowledged commit is there, whole, with its
//! message delivered exactly once.
//!
//! ```sh
//! cargo test -p kv-sqlite --test crash                                   # 3 trials
//! KV_CRASH_TRIALS=20 cargo test --release -p kv-sqlite --test crash      # a deep run
//! ```
//!
//! Durability is [`Durability::Full`] (the default): every commit group is synced before it is
//! acknowledged.
use std::path::Path;
use std::sync::Arc;

use kv_proto::Backend;
use kv_sqlite::{Durability, FileEngine, SqliteBackend, SqliteOptions};

kv_conformance::crash_main!(|dir: &Path| {
    let options = SqliteOptions {
        durability: Durability::Full,
        ..Default::default()
    };
    let opened = SqliteBackend::open_with(dir.join("kv.sqlite3"), options);
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
});

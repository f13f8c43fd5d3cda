//! What the bucket tests share: stores, recorded states, a target whose store can be made to
//! fail.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use bytes::Bytes;
use futures::TryStreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use open_deno_kv::Kv;
use open_deno_kv_bucket::{ShipperConfig, Target};
use open_deno_kv_memory::MemoryBackend;
use open_deno_kv_model::{Backend, Clock, SnapshotItem, Versionstamp};

/// A fresh memory store and a handle on it.
pub fn memory_store(clock: Arc<dyn Clock>) -> (Arc<dyn Backend>, Kv) {
    let store = open_deno_kv_memory::MemoryStore::new();
    let backend: Arc<dyn Backend> = Arc::new(MemoryBackend::open(&store, clock.clone()));
    let kv = Kv::with_clock(backend.clone(), clock);
    (backend, kv)
}

/// Everything the store's export holds now.
pub async fn state(backend: &dyn Backend) -> (Versionstamp, Vec<SnapshotItem>) {
    let snapshot = backend.export_snapshot().await.expect("export");
    let stamp = snapshot.versionstamp;
    let items: Vec<SnapshotItem> = snapshot.items.try_collect().await.expect("items");
    (stamp, items.into_iter().map(to_ms).collect())
}

/// Expiry as Deno keeps it, in whole milliseconds (the memory engine keeps the clock's
/// nanoseconds when the system clock runs it).
fn to_ms(item: SnapshotItem) -> SnapshotItem {
    match item {
        SnapshotItem::Entry(mut entry) => {
            entry.expires_at = entry
                .expires_at
                .and_then(|at| open_deno_kv_model::ms_to_datetime(at.timestamp_millis()));
            SnapshotItem::Entry(entry)
        }
        other => other,
    }
}

/// A restored snapshot's items, its messages in the export's order (ready time, then id): a
/// replay lists the backup's messages, then those enqueued since, and an import does not mind.
pub async fn items(snapshot: open_deno_kv_model::Snapshot) -> Vec<SnapshotItem> {
    let mut items: Vec<SnapshotItem> = snapshot.items.try_collect().await.expect("restored items");
    let first_message = items
        .iter()
        .position(|item| matches!(item, SnapshotItem::Message(_)))
        .unwrap_or(items.len());
    items[first_message..].sort_by_key(|item| match item {
        SnapshotItem::Message(message) => (message.ready_at, message.id),
        SnapshotItem::Entry(_) => unreachable!("entries come first"),
    });
    items
}

/// States recorded after commits, by versionstamp.
#[derive(Default)]
pub struct History(pub BTreeMap<Versionstamp, Vec<SnapshotItem>>);

impl History {
    pub async fn record(&mut self, backend: &dyn Backend) {
        let (stamp, items) = state(backend).await;
        self.0.insert(stamp, items);
    }
}

/// A config for tests: the given clock, no periodic snapshots, no retention.
pub fn config(clock: Arc<dyn Clock>) -> ShipperConfig {
    let mut config = ShipperConfig::new(clock);
    config.snapshot_interval = None;
    config.retention = None;
    config
}

/// A memory target, and the store behind it.
pub fn memory_target() -> (Target, Arc<object_store::memory::InMemory>) {
    let store = Arc::new(object_store::memory::InMemory::new());
    (
        Target::from_store(store.clone(), "db/", "memory://test/db/"),
        store,
    )
}

/// An object store that fails every request while `failing` is set, and every put once
/// `puts_left` (when not negative) has run out: a process that dies between two writes.
#[derive(Debug)]
pub struct Flaky {
    pub inner: Arc<dyn ObjectStore>,
    pub failing: AtomicBool,
    pub puts_left: AtomicI64,
}

impl fmt::Display for Flaky {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flaky({})", self.inner)
    }
}

impl Flaky {
    fn check(&self) -> object_store::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            Err(object_store::Error::Generic {
                store: "flaky",
                source: "the bucket is unreachable (injected)".into(),
            })
        } else {
            Ok(())
        }
    }

    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Flaky {
            inner,
            failing: AtomicBool::new(false),
            puts_left: AtomicI64::new(-1),
        }
    }

    /// Lets `puts` more puts through, then fails every put; `-1`: no limit.
    pub fn allow_puts(&self, puts: i64) {
        self.puts_left.store(puts, Ordering::SeqCst);
    }

    pub fn set_failing(&self, yes: bool) {
        self.failing.store(yes, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl ObjectStore for Flaky {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check()?;
        if self.puts_left.load(Ordering::SeqCst) >= 0
            && self.puts_left.fetch_sub(1, Ordering::SeqCst) <= 0
        {
            self.puts_left.store(0, Ordering::SeqCst);
            return Err(object_store::Error::Generic {
                store: "flaky",
                source: "the process died before this write (injected)".into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check()?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check()?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.check()?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        if let Err(err) = self.check() {
            return Box::pin(futures::stream::once(async move { Err(err) }));
        }
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(err) = self.check() {
            return Box::pin(futures::stream::once(async move { Err(err) }));
        }
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.check()?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check()?;
        self.inner.copy_opts(from, to, options).await
    }
}

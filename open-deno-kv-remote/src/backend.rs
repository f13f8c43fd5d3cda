//! [`RemoteBackend`]: the [`Backend`] methods as KV Connect calls.

use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_connect::convert::{self, AtomicWriteResult};
use open_deno_kv_connect::prost::Message;
use open_deno_kv_engine_kit::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_engine_kit::{
    Capabilities, Checked, CommitResult, Engine, ImportSummary, KvError, QueueMessageHandle,
    QueuedMessage, RangeCount, RangeWatchStream, ReadRangeOutput, Snapshot, ValidatedRange,
    ValidatedRead, ValidatedWatch, ValidatedWrite, Versionstamp, WatchStream,
};

use crate::RemoteOptions;
use crate::ext::{AtomicWriteExt, SnapshotReadExpiry};
use crate::queue::RemoteQueue;
use crate::transport::{Inner, Replay, protocol};

/// A Deno KV database on a KV Connect server; see the [crate documentation](crate). The engine,
/// handed out behind open-deno-kv-engine-kit's [`Checked`] layer, which validates every request against
/// [`crate::RemoteOptions::limits`] before it is sent (as Deno's client does) and answers for the
/// closed state.
pub struct RemoteBackend {
    pub(crate) inner: Arc<Inner>,
    /// The `queue/1` client over the same connection.
    queue: Arc<RemoteQueue>,
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl RemoteBackend {
    /// Opens the database at `url` (`https://host:port/path` or `http://...`): runs the metadata exchange now,
    /// so a wrong token, a wrong path or an unreachable server is reported here (as
    /// [`KvError::Storage`] holding a [`crate::RemoteError`]). Needs a tokio runtime.
    pub async fn connect(url: &str, options: RemoteOptions) -> Result<Checked<Self>, KvError> {
        let backend = Self::connect_lazy(url, options)?;
        backend.inner.session(false, None).await?;
        Ok(backend)
    }

    /// Checks `url` but sends nothing: the metadata exchange happens on the first call (whose
    /// error then reports a wrong token). For callers that cannot wait at open, such as the
    /// synchronous `open_deno_kv::Kv::open_blocking`. Until then [`open_deno_kv_engine_kit::Backend::capabilities`]
    /// reports queues, watch, range deletes, counts and range watches as available; a server
    /// without the queue extension refuses the first dequeue, and the range operations run the
    /// metadata exchange first and fail with [`KvError::Unsupported`] if the server does not
    /// offer them (nothing is sent).
    pub fn connect_lazy(url: &str, options: RemoteOptions) -> Result<Checked<Self>, KvError> {
        let (limits, clock) = (options.limits.clone(), options.clock.clone());
        let inner = Arc::new(Inner::new(url, options)?);
        let engine = RemoteBackend {
            queue: Arc::new(RemoteQueue::new(inner.clone())),
            inner,
        };
        Ok(Checked::new(engine, limits, clock))
    }

    /// The metadata URL this backend was opened with.
    pub fn url(&self) -> &str {
        &self.inner.url
    }
}

impl Engine for RemoteBackend {
    /// Watch always; queues, range deletes, counts and range watches when the server offers
    /// their extensions (`queue/1`, `range-delete/1`, `count/1`, `watch-range/1`), export,
    /// import and queue inspection with `snapshot/1`, the change log with `change-log/1`;
    /// assumed until the metadata is known (each of these calls makes sure of it first, and
    /// refuses with [`KvError::Unsupported`], sending nothing, when the extension is missing). Never `durable`: durability is the server's business, and
    /// reopening the same URL reaches the same data only if the server keeps it.
    ///
    /// Assuming is safe for the range operations because it is never acted on: a write holding
    /// a range delete, a count and a range watch each first make sure the metadata is known
    /// (running the exchange if it is not) and refuse with [`KvError::Unsupported`] unless the
    /// server offered the extension. (A server that does not know `range-delete/1` would
    /// refuse the placeholder's unknown mutation type anyway; the client does not rely on it.)
    fn capabilities(&self) -> Capabilities {
        let known = self.inner.known_extensions();
        Capabilities::none()
            .with_queues(known.is_none_or(|e| e.queues))
            .with_watch(true)
            .with_range_delete(known.is_none_or(|e| e.range_delete))
            .with_count(known.is_none_or(|e| e.count))
            .with_watch_range(known.is_none_or(|e| e.watch_range))
            .with_backup(known.is_none_or(|e| e.snapshot))
            .with_queue_inspection(known.is_none_or(|e| e.snapshot))
            .with_change_log(known.is_none_or(|e| e.change_log))
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let body = convert::encode_snapshot_read(&read).encode_to_vec();
        let (session, bytes) = self
            .inner
            .call_for_bytes("snapshot_read", body, Replay::Safe)
            .await?;
        let mut ranges = convert::decode_snapshot_read_output(&bytes).map_err(protocol)?;
        if ranges.len() != read.ranges.len() {
            return Err(protocol(format!(
                "{} ranges requested, {} returned",
                read.ranges.len(),
                ranges.len()
            )));
        }
        for (asked, got) in read.ranges.iter().zip(&ranges) {
            if got.entries.len() > asked.limit as usize {
                return Err(protocol("more entries than the range's limit"));
            }
            let mut previous: Option<&[u8]> = None;
            for entry in &got.entries {
                let key = &entry.key[..];
                if key < asked.start.as_slice() || key >= asked.end.as_slice() {
                    return Err(protocol("an entry outside its range"));
                }
                if let Some(previous) = previous {
                    let ordered = if asked.reverse {
                        previous > key
                    } else {
                        previous < key
                    };
                    if !ordered {
                        return Err(protocol("entries out of order"));
                    }
                }
                previous = Some(key);
            }
        }
        if session.extensions.expiry {
            SnapshotReadExpiry::decode(bytes.as_ref())
                .map_err(protocol)?
                .apply_to(&mut ranges)
                .map_err(protocol)?;
        }
        Ok(ranges)
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        let mut body = convert::encode_atomic_write(&write).encode_to_vec();
        let extension = AtomicWriteExt::of(&write);
        if !extension.is_empty() {
            let session = self.inner.session(false, None).await?;
            if !extension.enqueues_without_retries.is_empty()
                && !session.extensions.enqueue_no_retry
            {
                return Err(KvError::Unsupported {
                    feature: "enqueue with an empty backoff schedule over KV Connect",
                });
            }
            // Sent only to a server that offered the extension (another refuses the
            // placeholder's mutation type, but a clear `Unsupported` beats its 400).
            if !extension.range_deletes.is_empty() && !session.extensions.range_delete {
                return Err(KvError::Unsupported {
                    feature: "range deletes (the server does not offer range-delete/1)",
                });
            }
            body.extend_from_slice(&extension.encode_to_vec());
        }
        let (_, bytes) = self
            .inner
            .call_for_bytes("atomic_write", body, Replay::OnlyIfNotDelivered)
            .await?;
        match convert::decode_atomic_write_output(&bytes).map_err(protocol)? {
            AtomicWriteResult::Committed(commit) => Ok(Some(commit)),
            AtomicWriteResult::CheckFailed(_) => Ok(None),
        }
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        crate::queue::dequeue(&self.queue).await
    }

    fn watch(&self, keys: ValidatedWatch) -> Result<WatchStream, KvError> {
        crate::watch::watch(self.inner.clone(), keys.into_inner())
    }

    async fn count_range(&self, range: ValidatedRange) -> Result<RangeCount, KvError> {
        crate::range::count(&self.inner, range.into_inner()).await
    }

    fn watch_range(&self, range: ValidatedRange) -> Result<RangeWatchStream, KvError> {
        crate::range::watch(self.inner.clone(), range.into_inner())
    }

    /// The server's export (`snapshot/1`), read as it streams: dropping the stream closes the
    /// request.
    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        crate::backup::export(self.inner.clone(), false).await
    }

    /// Listed from the server's export without its entries (`snapshot/1`).
    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        crate::backup::queued_messages(self.inner.clone()).await
    }

    /// Streams `snapshot` to the server's import (`snapshot/1`): all or nothing on the server.
    async fn import_snapshot(&self, snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        crate::backup::import(&self.inner, snapshot).await
    }

    async fn configure_change_log(&self, retention: Option<Duration>) -> Result<(), KvError> {
        crate::backup::configure(&self.inner, retention).await
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        crate::backup::status(&self.inner).await
    }

    async fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        crate::backup::read(&self.inner, after, limit).await
    }

    /// Reports every queue message this client still holds as failed (so the server retries it
    /// at once instead of after the lease), then ends watches and pending dequeues. Later calls
    /// fail with [`KvError::Closed`]. The server's data is untouched.
    async fn close(&self) -> Result<(), KvError> {
        crate::queue::release_all(&self.queue).await;
        self.inner.closed.send_replace(true);
        Ok(())
    }
}

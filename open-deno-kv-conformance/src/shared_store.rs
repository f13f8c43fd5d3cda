//! Running the suite against a store that is not the suite's own: a KV Connect server somewhere
//! (`kv conformance URL`), possibly holding other data, whose clock the suite cannot move.
//!
//! Two things make that possible without writing the cases again:
//!
//! - **A key prefix per case.** [`Prefixed`] puts every key a case writes, reads, watches or
//!   counts under a prefix of its own (an encoded tuple such as `["open-deno-kv-conformance",
//!   "<run>", 17]`) and takes it off again on the way back, so a case sees an empty store of its
//!   own even on a server full of other data, and [`Prefixed::clean_up`] deletes what it left.
//!   Methods that act on the whole database (export, import, change log, integrity check, queue
//!   listing) cannot be confined to a prefix: [`Prefixed`] does not offer them.
//! - **"Cannot run here" is not "failed".** A case that needs what the setup cannot give (moving
//!   the server's clock, a key that only fits the limit without the prefix) stops with a
//!   [`NotRunnable`] panic, which the runner reports as *not run*, with its reason.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use open_deno_kv_model::backup::ImportSummary;
use open_deno_kv_model::change_log::{ChangeLogStatus, ChangeRecord};
use open_deno_kv_model::{
    AtomicWrite, Backend, Bytes, Capabilities, Clock, CommitResult, IntegrityReport, KeyRange,
    KvError, Limits, MutationKind, QueueMessageHandle, QueuedMessage, RangeCount, RangeWatchEvent,
    RangeWatchStream, ReadRange, ReadRangeOutput, Snapshot, SnapshotRead, Versionstamp,
    WatchKeyOutput, WatchStream,
};

/// Why a case stopped without a verdict: the panic payload a case (or [`Prefixed`]) raises when
/// it needs something this setup cannot give. The runner reports the case as not run, with this
/// reason.
#[derive(Debug, Clone)]
pub struct NotRunnable(pub String);

impl NotRunnable {
    /// Stops the current case as not runnable here.
    pub fn stop(reason: impl Into<String>) -> ! {
        std::panic::panic_any(NotRunnable(reason.into()))
    }
}

/// The capabilities a [`Prefixed`] store offers out of those of the store below: everything that
/// works on keys and ranges, nothing that acts on the whole database.
pub fn confined(capabilities: Capabilities) -> Capabilities {
    let mut confined = capabilities;
    confined.queue_inspection = false;
    confined.integrity_check = false;
    confined.export = false;
    confined.import = false;
    confined.change_log = false;
    confined
}

/// A [`Backend`] that keeps everything under one key prefix of the store below it.
///
/// Keys, check keys, range bounds, watched keys, range-delete ends and the keys an undelivered
/// queue message is written to are prefixed; keys coming back are stripped. Requests are checked
/// against Deno's limits twice: as the case sent them (so a limit case gets Deno's error, as from
/// any backend) and as the server will see them: a request that is within the limits only
/// without the prefix stops the case as [`NotRunnable`].
pub struct Prefixed {
    inner: Arc<dyn Backend>,
    prefix: Vec<u8>,
    limits: Limits,
    clock: Arc<dyn Clock>,
}

impl Prefixed {
    /// Everything `inner` holds under the encoded key `prefix`, seen as a store of its own.
    /// Queue delays are checked against `clock` (the case's, so that a case asking for the
    /// longest delay plus one millisecond is refused, as by a local backend).
    pub fn new(inner: Arc<dyn Backend>, prefix: Vec<u8>, clock: Arc<dyn Clock>) -> Self {
        Prefixed {
            inner,
            prefix,
            limits: Limits::deno(),
            clock,
        }
    }

    /// The prefix's length: what every key loses of its limit.
    pub fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + key.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(key);
        out
    }

    fn range(&self, range: KeyRange) -> KeyRange {
        KeyRange::new(self.key(&range.start), self.key(&range.end))
    }

    fn too_long(&self, checked: Result<(), KvError>) {
        if let Err(e) = checked {
            NotRunnable::stop(format!(
                "within Deno's limits only without the case's {}-byte key prefix (the server \
                 would answer: {e})",
                self.prefix.len()
            ));
        }
    }

    fn prefix_write(&self, write: AtomicWrite) -> AtomicWrite {
        let mut write = write;
        for check in &mut write.checks {
            check.key = self.key(&check.key);
        }
        for mutation in &mut write.mutations {
            mutation.key = self.key(&mutation.key);
            if let MutationKind::DeleteRange { end } = &mut mutation.kind {
                *end = self.key(end);
            }
        }
        for enqueue in &mut write.enqueues {
            for key in &mut enqueue.keys_if_undelivered {
                *key = self.key(key);
            }
        }
        write
    }

    /// Deletes every key under the prefix (what a case left behind): with one range delete where
    /// the server offers it, else a page of keys at a time.
    pub async fn clean_up(&self) -> Result<(), KvError> {
        let mut end = self.prefix.clone();
        end.push(0xff);
        if self.inner.capabilities().range_delete {
            let write = AtomicWrite {
                mutations: vec![open_deno_kv_model::Mutation {
                    key: self.prefix.clone(),
                    kind: MutationKind::DeleteRange { end },
                    expire_at: None,
                }],
                ..AtomicWrite::default()
            };
            self.inner.atomic_write(write).await?;
            return Ok(());
        }
        loop {
            let read = SnapshotRead {
                ranges: vec![ReadRange {
                    start: self.prefix.clone(),
                    end: end.clone(),
                    limit: 500,
                    reverse: false,
                }],
                ..SnapshotRead::default()
            };
            let page = self.inner.snapshot_read(read).await?;
            let keys: Vec<Vec<u8>> = page
                .into_iter()
                .flat_map(|range| range.entries)
                .map(|entry| entry.key.to_vec())
                .collect();
            if keys.is_empty() {
                return Ok(());
            }
            let write = AtomicWrite {
                mutations: keys
                    .into_iter()
                    .map(|key| open_deno_kv_model::Mutation {
                        key,
                        kind: MutationKind::Delete,
                        expire_at: None,
                    })
                    .collect(),
                ..AtomicWrite::default()
            };
            self.inner.atomic_write(write).await?;
        }
    }
}

#[async_trait]
impl Backend for Prefixed {
    fn capabilities(&self) -> Capabilities {
        confined(self.inner.capabilities())
    }

    async fn snapshot_read(&self, read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        self.limits.validate_snapshot_read(&read)?;
        let prefixed = SnapshotRead {
            ranges: read
                .ranges
                .into_iter()
                .map(|range| ReadRange {
                    start: self.key(&range.start),
                    end: self.key(&range.end),
                    ..range
                })
                .collect(),
            ..read
        };
        self.too_long(self.limits.validate_snapshot_read(&prefixed));
        let outputs = self.inner.snapshot_read(prefixed).await?;
        outputs
            .into_iter()
            .map(|output| {
                let entries = output
                    .entries
                    .into_iter()
                    .map(|mut entry| {
                        entry.key = strip_shared(&self.prefix, &entry.key)?;
                        Ok(entry)
                    })
                    .collect::<Result<_, KvError>>()?;
                Ok(ReadRangeOutput { entries })
            })
            .collect()
    }

    async fn atomic_write(&self, write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        let now = self.clock.now();
        self.limits.validate_atomic_write(&write, now)?;
        let prefixed = self.prefix_write(write);
        self.too_long(self.limits.validate_atomic_write(&prefixed, now));
        self.inner.atomic_write(prefixed).await
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        self.inner.dequeue_next_message().await
    }

    async fn queued_messages(&self) -> Result<Vec<QueuedMessage>, KvError> {
        Err(KvError::Unsupported {
            feature: "listing the queue (it shows every message of the server, not only this prefix's)",
        })
    }

    async fn queue_depth(&self) -> Result<usize, KvError> {
        self.inner.queue_depth().await
    }

    fn watch(&self, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
        self.limits.validate_watch(&keys)?;
        let prefixed: Vec<Vec<u8>> = keys.iter().map(|key| self.key(key)).collect();
        self.too_long(self.limits.validate_watch(&prefixed));
        let prefix = self.prefix.clone();
        let stream = self.inner.watch(prefixed)?;
        Ok(stream
            .map(move |frame| {
                let frame = frame?;
                frame
                    .into_iter()
                    .map(|output| match output {
                        WatchKeyOutput::Changed(Some(mut entry)) => {
                            entry.key = strip_shared(&prefix, &entry.key)?;
                            Ok(WatchKeyOutput::Changed(Some(entry)))
                        }
                        other => Ok(other),
                    })
                    .collect()
            })
            .boxed())
    }

    async fn count_range(&self, range: KeyRange) -> Result<RangeCount, KvError> {
        let range = self.limits.accept_range(range)?.into_inner();
        let prefixed = self.range(range);
        self.too_long(self.limits.accept_range(prefixed.clone()).map(|_| ()));
        let mut count = self.inner.count_range(prefixed).await?;
        // The server counts the stored (prefixed) keys; the case expects its own key sizes.
        count.key_bytes = count
            .key_bytes
            .saturating_sub(count.entries * self.prefix.len() as u64);
        Ok(count)
    }

    fn watch_range(&self, range: KeyRange) -> Result<RangeWatchStream, KvError> {
        let range = self.limits.accept_range(range)?.into_inner();
        let prefixed = self.range(range);
        self.too_long(self.limits.accept_range(prefixed.clone()).map(|_| ()));
        let prefix = self.prefix.clone();
        let stream = self.inner.watch_range(prefixed)?;
        Ok(stream
            .map(move |event| match event? {
                RangeWatchEvent::Reread => Ok(RangeWatchEvent::Reread),
                RangeWatchEvent::Changed(changes) => changes
                    .into_iter()
                    .map(|mut change| {
                        change.key = strip_with(&prefix, change.key)?;
                        if let Some(entry) = &mut change.entry {
                            entry.key = strip_shared(&prefix, &entry.key)?;
                        }
                        Ok(change)
                    })
                    .collect::<Result<_, KvError>>()
                    .map(RangeWatchEvent::Changed),
            })
            .boxed())
    }

    async fn export_snapshot(&self) -> Result<Snapshot, KvError> {
        Err(whole_database(
            "export (it acts on the whole database, not only on a key prefix)",
        ))
    }

    async fn import_snapshot(&self, _snapshot: Snapshot) -> Result<ImportSummary, KvError> {
        Err(whole_database(
            "import (it acts on the whole database, not only on a key prefix)",
        ))
    }

    async fn configure_change_log(&self, _retention: Option<Duration>) -> Result<(), KvError> {
        Err(whole_database(
            "the change log (it covers the whole database, not only a key prefix)",
        ))
    }

    async fn change_log_status(&self) -> Result<ChangeLogStatus, KvError> {
        Err(whole_database(
            "the change log (it covers the whole database, not only a key prefix)",
        ))
    }

    async fn read_change_log(
        &self,
        _after: Versionstamp,
        _limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        Err(whole_database(
            "the change log (it covers the whole database, not only a key prefix)",
        ))
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        Err(whole_database(
            "the integrity check (it covers the whole database, not only a key prefix)",
        ))
    }

    async fn close(&self) -> Result<(), KvError> {
        self.inner.close().await
    }
}

fn strip_with(prefix: &[u8], key: Vec<u8>) -> Result<Vec<u8>, KvError> {
    match key.strip_prefix(prefix) {
        Some(rest) => Ok(rest.to_vec()),
        None => Err(outside_the_range()),
    }
}

/// An entry's key without `prefix`: a slice of the same bytes, not a copy.
fn strip_shared(prefix: &[u8], key: &Bytes) -> Result<Bytes, KvError> {
    if key.starts_with(prefix) {
        Ok(key.slice(prefix.len()..))
    } else {
        Err(outside_the_range())
    }
}

fn outside_the_range() -> KvError {
    KvError::storage(std::io::Error::other(
        "the server returned a key outside the range it was asked for",
    ))
}

fn whole_database(what: &'static str) -> KvError {
    KvError::Unsupported { feature: what }
}

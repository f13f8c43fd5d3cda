//! Seeded bugs, to measure the suite's teeth.
//!
//! [`FaultyFactory`] wraps any backend factory and plants one [`Fault`] in every backend it opens:
//! the kinds of bugs a real engine could have (a check ignored, a list entry dropped, a
//! versionstamp reused, a finished message delivered again, a write lost on reopen...). The test
//! `tests/teeth.rs` runs the whole suite against each fault and requires that some case fails for
//! every one of them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use futures::StreamExt;
use open_deno_kv_model::{
    AtomicWrite, Backend, Capabilities, CommitResult, IntegrityReport, KvError, MutationKind,
    QueueMessageHandle, ReadRangeOutput, SnapshotRead, Versionstamp, WatchStream,
};

use crate::{BackendFactory, TestContext};

/// One seeded bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Commits writes without evaluating their checks.
    IgnoresChecks,
    /// Reports a failed check as an error instead of "not committed".
    CheckFailureIsError,
    /// Drops the last entry of every read range that returned two or more.
    DropsLastListEntry,
    /// Swaps the first two entries of every read range that returned two or more.
    SwapsAdjacentEntries,
    /// Returns one entry more than the range limit allows.
    ExceedsReadLimit,
    /// Forgets the expiry of every set.
    ForgetsExpiry,
    /// Answers every commit after the first with the previous commit's versionstamp.
    ReusesVersionstamp,
    /// Applies a write's mutations in reverse order.
    AppliesMutationsOutOfOrder,
    /// Silently skips delete mutations.
    IgnoresDeletes,
    /// Drops every enqueue.
    DropsEnqueues,
    /// Delivers a successfully finished message once more.
    RedeliversFinishedMessages,
    /// Treats a failed delivery as a success, so the message is never retried.
    LosesFailedMessages,
    /// Emits a watch's first state and nothing after it.
    StaleWatch,
    /// Loses the most recent set when the data is reopened.
    LosesWriteOnReopen,
    /// Words errors differently from Deno (lower-cased).
    WrongErrorTexts,
    /// Deletes a range the naive way: lists its first 1,000 entries and deletes those, key by
    /// key.
    RangeDeleteAsPagedLoop,
    /// Applies a write's range deletes after its other mutations instead of in order.
    RangeDeleteOutOfOrder,
    /// Counts a range with its end key included (`[start, end]`).
    CountIncludesTheEnd,
    /// Leaves deleted keys out of a range watch's changes.
    RangeWatchDropsDeletions,
    /// Reads the change log without the ranges its commits deleted.
    ChangeLogDropsRangeDeletes,
    /// Leaves the second record of every page of the change log out.
    ChangeLogSkipsARecord,
}

impl Fault {
    /// Every seeded fault.
    pub const ALL: [Fault; 21] = [
        Fault::IgnoresChecks,
        Fault::CheckFailureIsError,
        Fault::DropsLastListEntry,
        Fault::SwapsAdjacentEntries,
        Fault::ExceedsReadLimit,
        Fault::ForgetsExpiry,
        Fault::ReusesVersionstamp,
        Fault::AppliesMutationsOutOfOrder,
        Fault::IgnoresDeletes,
        Fault::DropsEnqueues,
        Fault::RedeliversFinishedMessages,
        Fault::LosesFailedMessages,
        Fault::StaleWatch,
        Fault::LosesWriteOnReopen,
        Fault::WrongErrorTexts,
        Fault::RangeDeleteAsPagedLoop,
        Fault::RangeDeleteOutOfOrder,
        Fault::CountIncludesTheEnd,
        Fault::RangeWatchDropsDeletions,
        Fault::ChangeLogDropsRangeDeletes,
        Fault::ChangeLogSkipsARecord,
    ];
}

/// The key of the latest set, kept in the test's context so a reopen can lose it.
#[derive(Default)]
struct LastSet(Mutex<Option<Vec<u8>>>);

impl LastSet {
    fn record(&self, key: Vec<u8>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(key);
    }

    fn take(&self) -> Option<Vec<u8>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Opens backends through `inner` and plants `fault` in each.
pub struct FaultyFactory {
    inner: Arc<dyn BackendFactory>,
    fault: Fault,
}

impl FaultyFactory {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BackendFactory>, fault: Fault) -> Self {
        FaultyFactory { inner, fault }
    }
}

#[async_trait]
impl BackendFactory for FaultyFactory {
    async fn open(&self, ctx: &TestContext) -> Result<Arc<dyn Backend>, KvError> {
        let inner = self.inner.open(ctx).await?;
        let last_set = ctx.slot(LastSet::default);
        if self.fault == Fault::LosesWriteOnReopen
            && let Some(key) = last_set.take()
        {
            let lose = AtomicWrite {
                mutations: vec![open_deno_kv_model::Mutation::delete(key)],
                ..Default::default()
            };
            inner.atomic_write(lose).await?;
        }
        Ok(Arc::new(FaultyBackend {
            inner,
            fault: self.fault,
            last_set,
            last_stamp: Mutex::new(None),
            redeliver: Arc::new(Mutex::new(VecDeque::new())),
        }))
    }

    fn can_reopen(&self, capabilities: Capabilities) -> bool {
        self.inner.can_reopen(capabilities)
    }
}

struct FaultyBackend {
    inner: Arc<dyn Backend>,
    fault: Fault,
    last_set: Arc<LastSet>,
    last_stamp: Mutex<Option<Versionstamp>>,
    redeliver: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

impl FaultyBackend {
    fn reword(&self, err: KvError) -> KvError {
        if self.fault == Fault::WrongErrorTexts {
            KvError::invalid_argument(err.to_string().to_lowercase())
        } else {
            err
        }
    }
}

#[async_trait]
impl Backend for FaultyBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn check_integrity(&self) -> Result<IntegrityReport, KvError> {
        self.inner.check_integrity().await
    }

    async fn queued_messages(&self) -> Result<Vec<open_deno_kv_model::QueuedMessage>, KvError> {
        self.inner.queued_messages().await
    }

    async fn queue_depth(&self) -> Result<usize, KvError> {
        self.inner.queue_depth().await
    }

    async fn count_range(
        &self,
        mut range: open_deno_kv_model::KeyRange,
    ) -> Result<open_deno_kv_model::RangeCount, KvError> {
        if self.fault == Fault::CountIncludesTheEnd {
            range.end.push(0);
        }
        self.inner.count_range(range).await
    }

    async fn export_snapshot(&self) -> Result<open_deno_kv_model::Snapshot, KvError> {
        self.inner.export_snapshot().await
    }

    async fn import_snapshot(
        &self,
        snapshot: open_deno_kv_model::Snapshot,
    ) -> Result<open_deno_kv_model::ImportSummary, KvError> {
        self.inner.import_snapshot(snapshot).await
    }

    async fn configure_change_log(
        &self,
        retention: Option<std::time::Duration>,
    ) -> Result<(), KvError> {
        self.inner.configure_change_log(retention).await
    }

    async fn change_log_status(
        &self,
    ) -> Result<open_deno_kv_model::change_log::ChangeLogStatus, KvError> {
        self.inner.change_log_status().await
    }

    async fn read_change_log(
        &self,
        after: open_deno_kv_model::Versionstamp,
        limit: usize,
    ) -> Result<Vec<open_deno_kv_model::change_log::ChangeRecord>, KvError> {
        let mut records = self.inner.read_change_log(after, limit).await?;
        match self.fault {
            Fault::ChangeLogDropsRangeDeletes => records
                .iter_mut()
                .for_each(|record| record.changes.deleted_ranges.clear()),
            Fault::ChangeLogSkipsARecord if records.len() >= 2 => {
                records.remove(1);
            }
            _ => {}
        }
        Ok(records)
    }

    fn watch_range(
        &self,
        range: open_deno_kv_model::KeyRange,
    ) -> Result<open_deno_kv_model::RangeWatchStream, KvError> {
        let stream = self.inner.watch_range(range)?;
        if self.fault != Fault::RangeWatchDropsDeletions {
            return Ok(stream);
        }
        Ok(stream
            .map(|event| {
                event.map(|event| match event {
                    open_deno_kv_model::RangeWatchEvent::Changed(changes) => {
                        open_deno_kv_model::RangeWatchEvent::Changed(
                            changes.into_iter().filter(|c| c.entry.is_some()).collect(),
                        )
                    }
                    other => other,
                })
            })
            .boxed())
    }

    async fn snapshot_read(&self, mut read: SnapshotRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let limits: Vec<u32> = read.ranges.iter().map(|r| r.limit).collect();
        if self.fault == Fault::ExceedsReadLimit {
            for range in &mut read.ranges {
                range.limit = range.limit.saturating_add(1);
            }
        }
        let mut out = self
            .inner
            .snapshot_read(read)
            .await
            .map_err(|e| self.reword(e))?;
        for (range, limit) in out.iter_mut().zip(limits) {
            let entries = &mut range.entries;
            match self.fault {
                Fault::DropsLastListEntry if entries.len() >= 2 => {
                    entries.pop();
                }
                Fault::SwapsAdjacentEntries if entries.len() >= 2 => entries.swap(0, 1),
                Fault::ExceedsReadLimit if limit == 1 => entries.truncate(1), // keep single gets working
                _ => {}
            }
        }
        Ok(out)
    }

    async fn atomic_write(&self, mut write: AtomicWrite) -> Result<Option<CommitResult>, KvError> {
        match self.fault {
            Fault::IgnoresChecks => write.checks.clear(),
            Fault::ForgetsExpiry => write.mutations.iter_mut().for_each(|m| m.expire_at = None),
            Fault::AppliesMutationsOutOfOrder => write.mutations.reverse(),
            Fault::IgnoresDeletes => write.mutations.retain(|m| m.kind != MutationKind::Delete),
            Fault::DropsEnqueues => write.enqueues.clear(),
            Fault::RangeDeleteOutOfOrder => {
                let (ranges, others): (Vec<_>, Vec<_>) = write
                    .mutations
                    .into_iter()
                    .partition(|m| m.range().is_some());
                write.mutations = others.into_iter().chain(ranges).collect();
            }
            Fault::RangeDeleteAsPagedLoop => {
                let mut mutations = Vec::with_capacity(write.mutations.len());
                for mutation in write.mutations {
                    let Some(range) = mutation.range() else {
                        mutations.push(mutation);
                        continue;
                    };
                    let page = open_deno_kv_model::ReadRange {
                        start: range.start,
                        end: range.end,
                        limit: 1000,
                        reverse: false,
                    };
                    let read = SnapshotRead {
                        ranges: vec![page],
                        ..Default::default()
                    };
                    let found = self.inner.snapshot_read(read).await?;
                    mutations.extend(
                        found
                            .into_iter()
                            .flat_map(|r| r.entries)
                            .map(|e| open_deno_kv_model::Mutation::delete(e.key.to_vec())),
                    );
                }
                write.mutations = mutations;
            }
            _ => {}
        }
        let last_set = write
            .mutations
            .iter()
            .rev()
            .find(|m| matches!(m.kind, MutationKind::Set(_)))
            .map(|m| m.key.clone());
        let result = self
            .inner
            .atomic_write(write)
            .await
            .map_err(|e| self.reword(e))?;
        let Some(mut committed) = result else {
            return if self.fault == Fault::CheckFailureIsError {
                Err(KvError::invalid_argument("check failed"))
            } else {
                Ok(None)
            };
        };
        if let Some(key) = last_set {
            self.last_set.record(key);
        }
        if self.fault == Fault::ReusesVersionstamp {
            let mut last = self
                .last_stamp
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let real = committed.versionstamp;
            if let Some(previous) = *last {
                committed.versionstamp = previous;
            }
            *last = Some(real);
        }
        Ok(Some(committed))
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        let replay = self
            .redeliver
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        if let Some(payload) = replay {
            return Ok(Some(Box::new(ReplayedMessage { payload })));
        }
        let Some(inner) = self.inner.dequeue_next_message().await? else {
            return Ok(None);
        };
        Ok(Some(Box::new(FaultyMessage {
            inner,
            fault: self.fault,
            redeliver: self.redeliver.clone(),
        })))
    }

    fn watch(&self, keys: Vec<Vec<u8>>) -> Result<WatchStream, KvError> {
        let stream = self.inner.watch(keys).map_err(|e| self.reword(e))?;
        if self.fault == Fault::StaleWatch {
            return Ok(stream.take(1).chain(futures::stream::pending()).boxed());
        }
        Ok(stream)
    }

    async fn close(&self) -> Result<(), KvError> {
        self.inner.close().await
    }
}

struct FaultyMessage {
    inner: Box<dyn QueueMessageHandle>,
    fault: Fault,
    redeliver: Arc<Mutex<VecDeque<Vec<u8>>>>,
}

#[async_trait]
impl QueueMessageHandle for FaultyMessage {
    fn payload(&self) -> &[u8] {
        self.inner.payload()
    }

    async fn finish(self: Box<Self>, success: bool) -> Result<(), KvError> {
        let payload = self.inner.payload().to_vec();
        match self.fault {
            Fault::LosesFailedMessages => self.inner.finish(true).await,
            Fault::RedeliversFinishedMessages if success => {
                self.inner.finish(true).await?;
                self.redeliver
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_back(payload);
                Ok(())
            }
            _ => self.inner.finish(success).await,
        }
    }
}

/// A message handed out again by [`Fault::RedeliversFinishedMessages`].
struct ReplayedMessage {
    payload: Vec<u8>,
}

#[async_trait]
impl QueueMessageHandle for ReplayedMessage {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(self: Box<Self>, _success: bool) -> Result<(), KvError> {
        Ok(())
    }
}

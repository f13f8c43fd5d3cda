//! Replaying a change log over a backup: the state as of a later commit, as a [`Snapshot`] any
//! engine imports.
//!
//! [`Replay`] folds records into an overlay, in order, checking their chain: the final state of
//! every key they touched, the ranges they deleted, the messages they enqueued. It never reads
//! the backup: [`Replay::over`] then merges the overlay with the backup's stream, key by key, into
//! a new snapshot whose versionstamp is the last replayed commit's. Memory holds the keys the
//! replayed commits changed, not the store.
//!
//! For a backup key the merged state is the overlay's if a replayed commit set or deleted it
//! after its last range delete (such a commit's state is in the overlay), else absent if any
//! replayed range holds it, else the backup's: [`crate::StagedCommit::stage_delete_range`]
//! removes from the overlay what a range takes, so the rule holds whatever the order of sets and
//! range deletes.

use std::collections::btree_map;
use std::iter::Peekable;

use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::{ChangeRecord, MAX_READ};
use crate::queue::QueuedMessage;
use crate::{
    Backend, ImportSummary, KeyRange, KvEntry, KvError, Snapshot, SnapshotItem, SnapshotStream,
    StagedCommit, StoredEntry, Versionstamp,
};

/// The commit a restore stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePoint {
    /// This commit, which the log must hold (or the backup's own versionstamp).
    Commit(Versionstamp),
    /// The last commit that ran at or before this time: records are taken in commit order up to
    /// the first one later than it.
    Time(DateTime<Utc>),
}

/// Change records folded over a backup, in commit order (see the module documentation).
#[derive(Debug)]
pub struct Replay {
    backup: Versionstamp,
    last: Versionstamp,
    last_at: Option<DateTime<Utc>>,
    commits: u64,
    overlay: StagedCommit,
    /// Every range a replayed commit deleted; sorted and merged by [`Replay::over`].
    ranges: Vec<KeyRange>,
}

impl Replay {
    /// An empty replay over a backup whose last commit is `backup`.
    pub fn after(backup: Versionstamp) -> Self {
        Replay {
            backup,
            last: backup,
            last_at: None,
            commits: 0,
            overlay: StagedCommit::default(),
            ranges: Vec::new(),
        }
    }

    /// Applies the next record. It must follow the last one applied (or the backup):
    /// [`ChangeRecord::previous`] names it. Otherwise a commit is missing from the log and the
    /// record is refused with [`KvError::InvalidArgument`].
    pub fn apply(&mut self, record: ChangeRecord) -> Result<(), KvError> {
        if record.previous != self.last {
            return Err(KvError::invalid_argument(format!(
                "the change log has a gap: its commit {} follows commit {}, but the last commit \
                 replayed is {} ({}); commits that were not logged (the log was off, pruned past \
                 the backup, or another program such as Deno wrote the database) cannot be \
                 replayed",
                record.versionstamp,
                record.previous,
                self.last,
                if self.commits == 0 {
                    "the backup's"
                } else {
                    "from the log"
                },
            )));
        }
        let ChangeRecord {
            versionstamp,
            at,
            changes,
            ..
        } = record;
        for range in &changes.deleted_ranges {
            self.overlay.stage_delete_range(range);
            if !range.is_empty() {
                self.ranges.push(range.clone());
            }
        }
        for (key, state) in changes.writes {
            match state {
                Some(entry) => self.overlay.stage_put(&key, entry),
                None => self.overlay.stage_delete(&key),
            }
        }
        self.overlay.enqueued.extend(changes.enqueued);
        self.last = versionstamp;
        self.last_at = Some(at);
        self.commits += 1;
        Ok(())
    }

    /// The last commit applied (the backup's, before any).
    pub fn last(&self) -> Versionstamp {
        self.last
    }

    /// When the last commit applied ran, if any was.
    pub fn last_at(&self) -> Option<DateTime<Utc>> {
        self.last_at
    }

    /// How many commits were applied.
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// The state as of the last commit applied: `backup` (which must be the snapshot this replay
    /// started after) with the overlay merged in, as a snapshot to import. Its versionstamp is
    /// the last commit applied, so the restored store numbers on from it.
    pub fn over(self, backup: Snapshot) -> Result<Snapshot, KvError> {
        if backup.versionstamp != self.backup {
            return Err(KvError::invalid_argument(format!(
                "the replay was read after commit {}, but the backup is of commit {}",
                self.backup, backup.versionstamp
            )));
        }
        let StagedCommit {
            writes, enqueued, ..
        } = self.overlay;
        let merge = Merge {
            // Fused: the merge may look for messages after the entries ended the stream, and a
            // stream built with `unfold` (every blocking engine's export) panics if polled again.
            backup: backup.items.fuse().boxed(),
            next_backup: None,
            entries_done: false,
            first_message: None,
            overlay: writes.into_iter().peekable(),
            deleted: Deleted::new(self.ranges),
            enqueued: enqueued.into_iter(),
            failed: false,
        };
        let items = futures::stream::unfold(merge, |mut merge| async move {
            merge.next().await.map(|item| (item, merge))
        })
        .boxed();
        Ok(Snapshot {
            versionstamp: self.last,
            items,
        })
    }
}

/// Reads `source`'s change log after the backup's commit `backup` up to `point` and folds it
/// into a [`Replay`], a page ([`MAX_READ`] records) at a time.
///
/// Refused ([`KvError::InvalidArgument`]): a log that is off; a point before the backup; a
/// [`RestorePoint::Commit`] the log does not hold, or beyond its last record; a gap in the
/// chain (see [`Replay::apply`]).
pub async fn replay_log(
    source: &dyn Backend,
    backup: Versionstamp,
    point: RestorePoint,
) -> Result<Replay, KvError> {
    let status = source.change_log_status().await?;
    if status.retention.is_none() {
        return Err(KvError::invalid_argument(
            "the source database keeps no change log (switch it on with `kv log enable`)",
        ));
    }
    let mut replay = Replay::after(backup);
    if let RestorePoint::Commit(target) = point {
        if target < backup {
            return Err(KvError::invalid_argument(format!(
                "commit {target} is older than the backup (commit {backup}): restore from an \
                 older backup"
            )));
        }
        if target == backup {
            return Ok(replay);
        }
    }
    let mut cursor = backup;
    loop {
        let page = source.read_change_log(cursor, MAX_READ).await?;
        let Some(last) = page.last() else {
            return match point {
                RestorePoint::Time(_) => Ok(replay),
                RestorePoint::Commit(target) => Err(KvError::invalid_argument(format!(
                    "the change log ends at commit {}, before commit {target}",
                    replay.last()
                ))),
            };
        };
        cursor = last.versionstamp;
        for record in page {
            match point {
                RestorePoint::Time(time) if record.at > time => return Ok(replay),
                RestorePoint::Commit(target) if record.versionstamp > target => {
                    return Err(KvError::invalid_argument(format!(
                        "the change log holds no commit {target}: the commits around it are {} \
                         and {}",
                        replay.last(),
                        record.versionstamp
                    )));
                }
                _ => {}
            }
            let reached = matches!(point, RestorePoint::Commit(t) if t == record.versionstamp);
            replay.apply(record)?;
            if reached {
                return Ok(replay);
            }
        }
    }
}

/// What [`restore`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// The commit the target now stands at: the last one replayed, or the backup's.
    pub versionstamp: Versionstamp,
    /// When that commit ran, if it came from the log.
    pub at: Option<DateTime<Utc>>,
    /// How many commits of the log were replayed over the backup.
    pub commits: u64,
    /// What the import wrote.
    pub imported: ImportSummary,
}

/// A point-in-time restore: `backup`, with `source`'s change log replayed over it up to `point`
/// ([`replay_log`], [`Replay::over`]), imported into `target`, a new or empty store
/// ([`crate::Backend::import_snapshot`]: all or nothing). `source` is only read; `target` may
/// be any engine that imports.
pub async fn restore(
    backup: Snapshot,
    source: &dyn Backend,
    point: RestorePoint,
    target: &dyn Backend,
) -> Result<Restored, KvError> {
    let replay = replay_log(source, backup.versionstamp, point).await?;
    let (versionstamp, at, commits) = (replay.last(), replay.last_at(), replay.commits());
    let imported = target.import_snapshot(replay.over(backup)?).await?;
    Ok(Restored {
        versionstamp,
        at,
        commits,
        imported,
    })
}

/// The replayed ranges, sorted and merged, for a binary search per backup key.
struct Deleted(Vec<KeyRange>);

impl Deleted {
    fn new(mut ranges: Vec<KeyRange>) -> Self {
        ranges.sort_by(|a, b| a.start.cmp(&b.start));
        let mut merged: Vec<KeyRange> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match merged.last_mut() {
                Some(last) if range.start <= last.end => {
                    if range.end > last.end {
                        last.end = range.end;
                    }
                }
                _ => merged.push(range),
            }
        }
        Deleted(merged)
    }

    fn holds(&self, key: &[u8]) -> bool {
        // The last range starting at or before `key` is the only one that can hold it.
        let after = self
            .0
            .partition_point(|range| range.start.as_slice() <= key);
        after > 0 && self.0[after - 1].contains(key)
    }
}

/// The state of [`Replay::over`]'s stream: first the backup's entries merged with the overlay,
/// in key order, then the backup's messages, then the replayed commits' messages.
struct Merge {
    backup: SnapshotStream,
    /// The backup's next entry, read but not yet merged.
    next_backup: Option<KvEntry>,
    /// The backup's entries are all read; its first message, if any, waits here.
    entries_done: bool,
    first_message: Option<QueuedMessage>,
    overlay: Peekable<btree_map::IntoIter<Vec<u8>, Option<StoredEntry>>>,
    deleted: Deleted,
    enqueued: std::vec::IntoIter<QueuedMessage>,
    failed: bool,
}

impl Merge {
    async fn next(&mut self) -> Option<Result<SnapshotItem, KvError>> {
        if self.failed {
            return None;
        }
        loop {
            if !self.entries_done && self.next_backup.is_none() {
                match self.backup.next().await {
                    Some(Ok(SnapshotItem::Entry(entry))) => self.next_backup = Some(entry),
                    Some(Ok(SnapshotItem::Message(message))) => {
                        self.entries_done = true;
                        self.first_message = Some(message);
                    }
                    Some(Err(err)) => return self.fail(err),
                    None => self.entries_done = true,
                }
            }
            let Some(backup) = self.next_backup.take() else {
                // Only the overlay's entries are left, then the messages.
                match self.overlay.next() {
                    Some((key, Some(entry))) => return Some(Ok(entry_item(key, entry))),
                    Some((_, None)) => continue,
                    None => return self.next_message().await,
                }
            };
            match self.overlay.peek() {
                Some((key, _)) if *key < backup.key => {
                    self.next_backup = Some(backup);
                    if let Some((key, Some(entry))) = self.overlay.next() {
                        return Some(Ok(entry_item(key, entry)));
                    }
                }
                Some((key, _)) if *key == backup.key => {
                    if let Some((key, Some(entry))) = self.overlay.next() {
                        return Some(Ok(entry_item(key, entry)));
                    }
                }
                _ if self.deleted.holds(&backup.key) => {}
                _ => return Some(Ok(SnapshotItem::Entry(backup))),
            }
        }
    }

    /// The next message: the backup's, then the replayed commits'.
    async fn next_message(&mut self) -> Option<Result<SnapshotItem, KvError>> {
        if let Some(message) = self.first_message.take() {
            return Some(Ok(SnapshotItem::Message(message)));
        }
        match self.backup.next().await {
            Some(Ok(message @ SnapshotItem::Message(_))) => Some(Ok(message)),
            Some(Ok(SnapshotItem::Entry(entry))) => self.fail(KvError::invalid_argument(format!(
                "the backup holds the entry at key {} after its messages",
                hex::encode(&entry.key)
            ))),
            Some(Err(err)) => self.fail(err),
            None => self
                .enqueued
                .next()
                .map(|message| Ok(SnapshotItem::Message(message))),
        }
    }

    fn fail(&mut self, err: KvError) -> Option<Result<SnapshotItem, KvError>> {
        self.failed = true;
        Some(Err(err))
    }
}

fn entry_item(key: Vec<u8>, entry: StoredEntry) -> SnapshotItem {
    SnapshotItem::Entry(KvEntry::from_stored(key, entry))
}

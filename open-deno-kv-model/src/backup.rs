//! Whole-store snapshots: the export an online backup reads and the import a restore writes.
//!
//! A backup must be *consistent*: every entry and queued message as of one commit, while writers
//! keep committing. A dump read page by page is not (a commit between two pages shows half of
//! it), so engines offer an export that streams everything from one read snapshot
//! ([`crate::Backend::export_snapshot`]), together with the versionstamp of the last commit that
//! snapshot holds. The stream is read lazily: an engine holds its read snapshot (a SQLite or redb
//! read transaction, a PostgreSQL `REPEATABLE READ` transaction) while the stream lives, never a
//! copy of the whole store, and dropping the stream at any point releases it.
//!
//! A restore writes such a snapshot into a new or empty store in one transaction
//! ([`crate::Backend::import_snapshot`]), keeping every entry's versionstamp and expiry and every
//! message, and leaves the store's version counter at the snapshot's versionstamp: the next commit
//! gets a later one. So a later log of commits (each with its versionstamp) can be replayed on top
//! of a restored backup, from the first commit after [`Snapshot::versionstamp`].
//!
//! What a snapshot holds, in this order:
//!
//! 1. every entry visible at the snapshot (expired ones are left out), in key order, with its
//!    value as stored, its versionstamp and its expiry;
//! 2. every queued message, waiting or being delivered, by ready time and then id; a message
//!    being delivered is exported as ready at the time of the snapshot (as
//!    [`crate::Backend::queued_messages`] lists it), since its consumer does not carry over into
//!    the restored store.
//!
//! The engine kit's `Checked` layer checks what an import is given ([`ordered_import`]): keys strictly
//! increasing, no entry newer than the snapshot, entries before messages. A stream that breaks a
//! rule, fails, or is dropped half-way makes the import fail, and the engine then leaves the store
//! as it was.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), open_deno_kv_model::KvError> {
//! use futures::TryStreamExt;
//! use open_deno_kv_model::{KvEntry, KvValue, Snapshot, SnapshotItem, Versionstamp};
//!
//! let entry = KvEntry {
//!     key: vec![2, b'a', 0],
//!     value: KvValue::U64(1),
//!     versionstamp: Versionstamp::from_version(3, 0),
//!     expires_at: None,
//! };
//! let snapshot = Snapshot::from_items(
//!     Versionstamp::from_version(7, 0),
//!     vec![SnapshotItem::Entry(entry.clone())],
//! );
//! let items: Vec<SnapshotItem> = snapshot.items.try_collect().await?;
//! assert_eq!(items, vec![SnapshotItem::Entry(entry)]);
//! # Ok(()) }
//! ```

use futures::stream::{BoxStream, StreamExt};

use crate::queue::QueuedMessage;
use crate::{KvEntry, KvError, Versionstamp};

/// One thing a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotItem {
    /// An entry, exactly as stored.
    Entry(KvEntry),
    /// A queued message (its id included).
    Message(QueuedMessage),
}

/// The items of a [`Snapshot`], in the order the module documentation gives.
pub type SnapshotStream = BoxStream<'static, Result<SnapshotItem, KvError>>;

/// A whole store as of one commit: what [`crate::Backend::export_snapshot`] hands out and
/// [`crate::Backend::import_snapshot`] takes.
pub struct Snapshot {
    /// The last commit the snapshot holds: no entry's versionstamp is later, and every commit
    /// after the snapshot gets a later one. A store restored from the snapshot continues from it.
    pub versionstamp: Versionstamp,
    /// Entries, then messages (see the module documentation).
    pub items: SnapshotStream,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("versionstamp", &self.versionstamp)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// A snapshot of items already in memory (tests, small stores).
    pub fn from_items(versionstamp: Versionstamp, items: Vec<SnapshotItem>) -> Self {
        Snapshot {
            versionstamp,
            items: futures::stream::iter(items.into_iter().map(Ok)).boxed(),
        }
    }
}

/// What an import wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImportSummary {
    /// Entries written.
    pub entries: u64,
    /// Messages queued.
    pub messages: u64,
}

impl ImportSummary {
    /// Counts one item.
    pub fn count(&mut self, item: &SnapshotItem) {
        match item {
            SnapshotItem::Entry(_) => self.entries += 1,
            SnapshotItem::Message(_) => self.messages += 1,
        }
    }
}

/// The refusal of an import into a store that already holds entries or messages.
pub fn not_empty() -> KvError {
    KvError::NotEmpty
}

/// `snapshot`, with its items checked against the rules of an import as they pass: entries in
/// strictly increasing key order and none with a versionstamp later than the snapshot's, all
/// entries before the first message. The first item that breaks a rule becomes an
/// [`KvError::InvalidArgument`] error, and the stream ends there. [`crate::Checked`] applies it to
/// every import, so engines rely on it rather than check again.
pub fn ordered_import(snapshot: Snapshot) -> Snapshot {
    let Snapshot {
        versionstamp,
        items,
    } = snapshot;
    let mut rule = ImportOrder::new(versionstamp);
    let items = items
        .scan(false, move |failed, item| {
            if *failed {
                return futures::future::ready(None);
            }
            let checked = item.and_then(|item| rule.admit(item));
            *failed = checked.is_err();
            futures::future::ready(Some(checked))
        })
        .boxed();
    Snapshot {
        versionstamp,
        items,
    }
}

/// The order rule of [`ordered_import`], item by item.
struct ImportOrder {
    versionstamp: Versionstamp,
    last_key: Option<Vec<u8>>,
    messages_started: bool,
}

impl ImportOrder {
    fn new(versionstamp: Versionstamp) -> Self {
        ImportOrder {
            versionstamp,
            last_key: None,
            messages_started: false,
        }
    }

    fn admit(&mut self, item: SnapshotItem) -> Result<SnapshotItem, KvError> {
        match &item {
            SnapshotItem::Entry(entry) => {
                if self.messages_started {
                    return Err(KvError::invalid_argument(
                        "a snapshot holds its entries before its messages",
                    ));
                }
                if entry.key.is_empty() {
                    return Err(KvError::invalid_argument(
                        "a snapshot entry has an empty key",
                    ));
                }
                if self
                    .last_key
                    .as_ref()
                    .is_some_and(|last| *last >= entry.key)
                {
                    return Err(KvError::invalid_argument(format!(
                        "snapshot entries must be in strictly increasing key order (key {} \
                         comes after {})",
                        hex::encode(&entry.key),
                        hex::encode(self.last_key.as_deref().unwrap_or_default())
                    )));
                }
                if entry.versionstamp > self.versionstamp {
                    return Err(KvError::invalid_argument(format!(
                        "the entry at key {} has versionstamp {}, later than the snapshot's {}",
                        hex::encode(&entry.key),
                        entry.versionstamp,
                        self.versionstamp
                    )));
                }
                self.last_key = Some(entry.key.clone());
            }
            SnapshotItem::Message(_) => self.messages_started = true,
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests;

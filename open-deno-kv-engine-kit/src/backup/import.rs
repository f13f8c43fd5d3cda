//! The loop of every engine's import, written once: each item of a snapshot, in order, counted
//! and handed to the engine as what it stores (an entry's encoded key and stored form, or a
//! message). The engine supplies only the two writes; [`import_each`] runs over an
//! [`ImportFeed`](super::ImportFeed) on an import thread, [`import_each_async`] over a snapshot's
//! stream.

use std::future::Future;

use futures::{Stream, StreamExt};

use crate::{ImportSummary, KvError, QueuedMessage, SnapshotItem, StoredEntry};

/// What one snapshot item asks the engine to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportRow {
    /// An entry: its encoded key and stored form.
    Entry(Vec<u8>, StoredEntry),
    /// A queued message.
    Message(QueuedMessage),
}

/// Counts `item` into `summary` and turns it into what is stored.
fn counted(summary: &mut ImportSummary, item: SnapshotItem) -> ImportRow {
    summary.count(&item);
    match item {
        SnapshotItem::Entry(entry) => {
            let (key, stored) = entry.into_stored();
            ImportRow::Entry(key, stored)
        }
        SnapshotItem::Message(message) => ImportRow::Message(message),
    }
}

/// Writes every item of `items` in order through `write`. The first error (of the items or of a write) stops it and is returned; the
/// engine's transaction then rolls back. For engines whose writes block, on the thread of
/// [`blocking_import`](super::blocking_import).
///
/// ```
/// use open_deno_kv_engine_kit::backup::{ImportRow, import_each};
/// use open_deno_kv_engine_kit::{KvEntry, KvValue, SnapshotItem, Versionstamp};
///
/// let entry = KvEntry {
///     key: vec![2, b'a', 0].into(),
///     value: KvValue::U64(1),
///     versionstamp: Versionstamp::from_version(1, 0),
///     expires_at: None,
/// };
/// let mut stored = Vec::new();
/// let summary = import_each([Ok(SnapshotItem::Entry(entry))], |row| {
///     if let ImportRow::Entry(key, entry) = row {
///         stored.push((key, entry));
///     }
///     Ok(())
/// })?;
/// assert_eq!((summary.entries, summary.messages, stored.len()), (1, 0, 1));
/// # Ok::<(), open_deno_kv_engine_kit::KvError>(())
/// ```
pub fn import_each(
    items: impl IntoIterator<Item = Result<SnapshotItem, KvError>>,
    mut write: impl FnMut(ImportRow) -> Result<(), KvError>,
) -> Result<ImportSummary, KvError> {
    let mut summary = ImportSummary::default();
    for item in items {
        write(counted(&mut summary, item?))?;
    }
    Ok(summary)
}

/// Where an engine whose writes are async (or that gathers the items before taking a lock)
/// writes an import; see [`import_each_async`].
pub trait ImportWrites: Send {
    /// Stores one entry (its encoded key and stored form).
    fn entry(
        &mut self,
        key: Vec<u8>,
        stored: StoredEntry,
    ) -> impl Future<Output = Result<(), KvError>> + Send;

    /// Stores one queued message.
    fn message(
        &mut self,
        message: QueuedMessage,
    ) -> impl Future<Output = Result<(), KvError>> + Send;
}

/// [`import_each`] over a snapshot's stream, writing through `writes`: the same order, counting
/// and first-error rule.
pub async fn import_each_async(
    mut items: impl Stream<Item = Result<SnapshotItem, KvError>> + Unpin + Send,
    writes: &mut impl ImportWrites,
) -> Result<ImportSummary, KvError> {
    let mut summary = ImportSummary::default();
    while let Some(item) = items.next().await {
        match counted(&mut summary, item?) {
            ImportRow::Entry(key, stored) => writes.entry(key, stored).await?,
            ImportRow::Message(queued) => writes.message(queued).await?,
        }
    }
    Ok(summary)
}

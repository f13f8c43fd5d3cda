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
//! The engine kit's `Checked` layer checks what an import is given ([`ordered_import`]): keys
//! strictly increasing, no entry newer than the snapshot, entries before messages, and a snapshot
//! versionstamp that its entries can account for ([`check_lead`]). A stream that breaks a rule,
//! fails, or is dropped half-way makes the import fail, and the engine then leaves the store as
//! it was.
//!
//! A snapshot also names the database it is of ([`Snapshot::database`], see [`crate::identity`]):
//! an import does not need it (it splices nothing), a point-in-time restore does.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), open_deno_kv_model::KvError> {
//! use futures::TryStreamExt;
//! use open_deno_kv_model::{KvEntry, KvValue, Snapshot, SnapshotItem, Versionstamp};
//!
//! let entry = KvEntry {
//!     key: vec![2, b'a', 0].into(),
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
use crate::{DatabaseId, KvEntry, KvError, Versionstamp};

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
    /// The database the snapshot is of ([`crate::identity`]); `None` for a backup written before
    /// databases had identities, or a store that cannot record one (a Deno-written SQLite file
    /// read without ever being opened writable).
    pub database: Option<DatabaseId>,
    /// The last commit the snapshot holds: no entry's versionstamp is later, and every commit
    /// after the snapshot gets a later one. A store restored from the snapshot continues from it.
    pub versionstamp: Versionstamp,
    /// Entries, then messages (see the module documentation).
    pub items: SnapshotStream,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("database", &self.database)
            .field("versionstamp", &self.versionstamp)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    /// A snapshot of items already in memory (tests, small stores), of no named database (see
    /// [`Snapshot::of_database`]).
    pub fn from_items(versionstamp: Versionstamp, items: Vec<SnapshotItem>) -> Self {
        Snapshot {
            database: None,
            versionstamp,
            items: futures::stream::iter(items.into_iter().map(Ok)).boxed(),
        }
    }

    /// The same snapshot, naming `database` as the one it is of.
    pub fn of_database(mut self, database: Option<DatabaseId>) -> Self {
        self.database = database;
        self
    }
}

/// What a snapshot is of: its database and its last commit (a backup's header). A replay of a
/// change log starts from it ([`crate::change_log::replay_log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotOrigin {
    /// [`Snapshot::database`].
    pub database: Option<DatabaseId>,
    /// [`Snapshot::versionstamp`].
    pub versionstamp: Versionstamp,
}

impl Snapshot {
    /// Its database and last commit.
    pub fn origin(&self) -> SnapshotOrigin {
        SnapshotOrigin {
            database: self.database,
            versionstamp: self.versionstamp,
        }
    }
}

/// How far a snapshot's versionstamp may lie beyond the newest entry it holds, in commit
/// versions: 2^40 (about 1.1 × 10^12).
///
/// A snapshot's versionstamp may legitimately run ahead of its entries: commits that only
/// deleted keys or only enqueued messages leave no entry behind, and Deno advances its counter by
/// up to 9 per commit. But a store continues numbering from the snapshot's versionstamp, so one
/// far beyond anything its entries account for (a doctored or damaged header, such as
/// `fffffffffffffffe0000`) would leave the restored store without versions to hand out: every
/// write after the first would fail. 2^40 versions is more than a store committing 10,000 times
/// a second without keeping a single entry uses in three centuries, and leaves every engine
/// 2^63 − 2^40 versions to continue with.
pub const MAX_VERSION_LEAD: u64 = 1 << 40;

/// The largest commit version a snapshot (or any store) may hold: the largest a signed 64-bit
/// integer holds, which is how SQLite and PostgreSQL store it, so that a backup of any engine
/// restores into every other.
pub const MAX_VERSION: u64 = i64::MAX as u64;

/// The part of [`check_lead`] the header alone decides: `snapshot` must be a version a store can
/// hold ([`MAX_VERSION`]). The engine kit's `Checked` applies it before an engine sees the
/// import, so no engine meets such a header (nor words its refusal its own way).
pub fn check_version(snapshot: Versionstamp) -> Result<(), KvError> {
    if snapshot.version() > MAX_VERSION {
        return Err(KvError::invalid_argument(format!(
            "the snapshot's versionstamp {snapshot} is beyond the largest version a store can \
             hold ({MAX_VERSION:016x}); the backup's header is damaged or was edited"
        )));
    }
    Ok(())
}

/// The rule for a snapshot's versionstamp against its entries: `snapshot` must be a version a
/// store can hold ([`MAX_VERSION`]), and lie at most [`MAX_VERSION_LEAD`] versions beyond
/// `newest`, the newest versionstamp among its entries (`None`: it holds none, and the lead is
/// counted from version 0). [`ordered_import`] applies it once the entries have passed; refused
/// with [`KvError::InvalidArgument`].
///
/// ```
/// use open_deno_kv_model::Versionstamp;
/// use open_deno_kv_model::backup::{MAX_VERSION_LEAD, check_lead};
///
/// let newest = Versionstamp::from_version(500, 0);
/// let at = |version| Versionstamp::from_version(version, 0);
/// assert!(check_lead(at(900), Some(newest)).is_ok());
/// assert!(check_lead(at(500 + MAX_VERSION_LEAD), Some(newest)).is_ok());
/// assert!(check_lead(at(501 + MAX_VERSION_LEAD), Some(newest)).is_err());
/// let doctored: Versionstamp = "fffffffffffffffe0000".parse().unwrap();
/// assert!(check_lead(doctored, None).is_err());
/// ```
pub fn check_lead(snapshot: Versionstamp, newest: Option<Versionstamp>) -> Result<(), KvError> {
    check_version(snapshot)?;
    let floor = newest.map_or(0, |newest| newest.version());
    if snapshot.version().saturating_sub(floor) > MAX_VERSION_LEAD {
        return Err(KvError::invalid_argument(format!(
            "the snapshot's versionstamp {snapshot} lies {} versions beyond its newest entry \
             ({}), more than the {MAX_VERSION_LEAD} its commits can account for; the backup's \
             header is damaged or was edited",
            snapshot.version().saturating_sub(floor),
            newest.map_or_else(|| "none".to_owned(), |newest| newest.to_string()),
        )));
    }
    Ok(())
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
/// entries before the first message, and, once the entries have passed, the snapshot's
/// versionstamp within [`MAX_VERSION_LEAD`] of the newest of them ([`check_lead`]). The first
/// item that breaks a rule becomes an [`KvError::InvalidArgument`] error, and the stream ends
/// there. The engine kit's `Checked` applies it to every import, so engines rely on it rather
/// than check again.
pub fn ordered_import(snapshot: Snapshot) -> Snapshot {
    let Snapshot {
        database,
        versionstamp,
        items,
    } = snapshot;
    let rule = ImportOrder::new(versionstamp);
    let items = futures::stream::unfold(
        (items, rule, false),
        |(mut items, mut rule, failed)| async move {
            if failed {
                return None;
            }
            let checked = match items.next().await {
                Some(item) => item.and_then(|item| rule.admit(item)),
                // The end: the lead rule, unless a message already applied it.
                None => match rule.entries_ended() {
                    Ok(()) => return None,
                    Err(err) => Err(err),
                },
            };
            let failed = checked.is_err();
            Some((checked, (items, rule, failed)))
        },
    )
    .boxed();
    Snapshot {
        database,
        versionstamp,
        items,
    }
}

/// The order rule of [`ordered_import`], item by item.
struct ImportOrder {
    versionstamp: Versionstamp,
    last_key: Option<Vec<u8>>,
    /// The newest versionstamp among the entries so far.
    newest: Option<Versionstamp>,
    messages_started: bool,
}

impl ImportOrder {
    fn new(versionstamp: Versionstamp) -> Self {
        ImportOrder {
            versionstamp,
            last_key: None,
            newest: None,
            messages_started: false,
        }
    }

    /// The entries are over (a message came, or the stream ended): the lead rule, once.
    fn entries_ended(&mut self) -> Result<(), KvError> {
        if self.messages_started {
            return Ok(());
        }
        self.messages_started = true;
        check_lead(self.versionstamp, self.newest)
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
                self.last_key = Some(entry.key.to_vec());
                self.newest = self.newest.max(Some(entry.versionstamp));
            }
            SnapshotItem::Message(_) => self.entries_ended()?,
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests;

//! Which database a backup or a change log belongs to.
//!
//! A point-in-time restore splices two things together: a backup (the store as of one commit)
//! and the change log's records after that commit. Both must come from the *same* database: the
//! log of a sibling file, a staging copy or another tenant's store may well continue the backup's
//! versionstamps (every store counts from 1) and pass the chain check, and its commits spliced
//! onto the backup build a state no database ever had. So every database has an identity, a
//! random [`DatabaseId`] made when the database is created and kept in its own tables (each
//! engine says where); every backup header and every change-log record carries it, and a replay
//! refuses a backup and a log of two databases ([`same_database`]).
//!
//! A restore makes a *new* database: the target keeps its own identity, so its later log never
//! splices onto backups of the database it was restored from (its history forked at the
//! restore). A copy of a database's files (`cp`) is the same database as far as identities can
//! tell; restore copies with `kv restore`, not by copying files, where they must stay apart.
//!
//! Backups and records written before identities existed carry none. A backup without one still
//! restores alone (an import splices nothing), but not with a log: nothing proves which
//! database it is of.
//!
//! ```
//! use open_deno_kv_model::{DatabaseId, identity::same_database};
//!
//! let ours = DatabaseId::random();
//! let theirs = DatabaseId::random();
//! assert_eq!(same_database(Some(ours), Some(ours))?, ours);
//! let refused = same_database(Some(ours), Some(theirs)).unwrap_err().to_string();
//! assert!(refused.contains(&ours.to_string()) && refused.contains(&theirs.to_string()));
//! assert!(same_database(None, Some(theirs)).is_err(), "an old backup is not spliced");
//! # Ok::<(), open_deno_kv_model::KvError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

use crate::KvError;

/// A database's identity: a random (version 4) UUID made when the database is created, shown
/// hyphenated (`0b9f6c1e-…`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DatabaseId(Uuid);

impl DatabaseId {
    /// A new identity, for a database being created.
    pub fn random() -> Self {
        DatabaseId(Uuid::new_v4())
    }

    /// The identity of these 16 bytes (as [`DatabaseId::as_bytes`] gave them).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        DatabaseId(Uuid::from_bytes(bytes))
    }

    /// Its 16 bytes, as engines store it.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }

    /// The UUID.
    pub const fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for DatabaseId {
    fn from(uuid: Uuid) -> Self {
        DatabaseId(uuid)
    }
}

impl fmt::Display for DatabaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for DatabaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseId({self})")
    }
}

impl FromStr for DatabaseId {
    type Err = KvError;

    /// A UUID in any of its usual text forms; anything else is [`KvError::InvalidArgument`].
    fn from_str(text: &str) -> Result<Self, KvError> {
        Uuid::parse_str(text).map(DatabaseId).map_err(|_| {
            KvError::invalid_argument(format!("invalid database identity {text:?}: not a UUID"))
        })
    }
}

/// The rule of a splice: a change log replays only over a backup of its own database. `backup`
/// is the identity the backup's header carries, `log` the identity of the database whose log
/// (or log record) is replayed. Both must be known and equal; the identity is returned.
///
/// Refused with [`KvError::InvalidArgument`], naming both identities: two databases; a backup
/// without an identity (written before databases had one); a log without one.
pub fn same_database(
    backup: Option<DatabaseId>,
    log: Option<DatabaseId>,
) -> Result<DatabaseId, KvError> {
    match (backup, log) {
        (Some(backup), Some(log)) if backup == log => Ok(backup),
        (Some(backup), Some(log)) => Err(KvError::invalid_argument(format!(
            "the change log is of database {log}, but the backup is of database {backup}: a log \
             replays only over a backup of its own database"
        ))),
        (None, log) => Err(KvError::invalid_argument(format!(
            "the backup names no database (it was written before databases had identities), so \
             nothing proves the change log of database {} continues it: restore it without a \
             log, or take a new backup",
            shown(log)
        ))),
        (Some(backup), None) => Err(KvError::invalid_argument(format!(
            "the change log names no database (written before databases had identities), so \
             nothing proves it continues the backup of database {backup}"
        ))),
    }
}

fn shown(id: Option<DatabaseId>) -> String {
    id.map_or_else(|| "(unknown)".to_owned(), |id| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_bytes_round_trip() {
        let id = DatabaseId::random();
        assert_eq!(id.to_string().parse::<DatabaseId>().unwrap(), id);
        assert_eq!(DatabaseId::from_bytes(*id.as_bytes()), id);
        assert!("not-a-uuid".parse::<DatabaseId>().is_err());
    }

    #[test]
    fn a_log_without_an_identity_is_refused() {
        let err = same_database(Some(DatabaseId::random()), None).unwrap_err();
        assert!(err.to_string().contains("names no database"), "{err}");
    }
}

//! The crate's error type, and how it becomes a [`KvError`].
//!
//! Everything redb reports is gathered into [`redb::Error`] and wrapped in [`RedbError::Redb`].
//! The conversion into [`KvError`] sorts errors by what a caller can do about them: a file that
//! is not (or no longer) a valid Deno KV redb file is [`KvError::Corrupt`]; everything else the
//! engine reports (I/O, a file held by another process, a schema from a newer build) is
//! [`KvError::Storage`], with this error as its source.

use std::path::PathBuf;

use open_deno_kv_engine_kit::KvError;
use thiserror::Error;

/// Why a redb database could not be opened or used.
#[derive(Debug, Error)]
pub enum RedbError {
    /// redb itself failed: I/O, a damaged file, a transaction that could not commit.
    #[error("redb: {0}")]
    Redb(#[from] redb::Error),

    /// Another process has the file open. redb locks the file for one writing process at a time;
    /// handles opened in *this* process share one open file instead (see the crate docs).
    #[error("the database file {} is already open in another process", path.display())]
    AlreadyOpen {
        /// The file.
        path: PathBuf,
    },

    /// The file was written by a newer version of this crate's layout. It is left untouched.
    #[error(transparent)]
    SchemaTooNew(#[from] open_deno_kv_engine_kit::SchemaTooNew),

    /// The file is a redb database, but not one written by this crate (other tables, or a
    /// metadata table that does not hold what this crate writes). It is left untouched.
    #[error("not a Deno KV redb file: {reason}")]
    NotDenoKv {
        /// What gave it away.
        reason: String,
    },

    /// A read-only open of a file that was not closed cleanly: redb must recover it, which
    /// writes to it. It is left untouched.
    #[error(
        "the database file {} was not closed cleanly and needs recovery, which a read-only open \
         cannot do; open it writable once (for example with `kv set`) to recover it",
        path.display()
    )]
    NeedsRecovery {
        /// The file.
        path: PathBuf,
    },

    /// A writable open of a file this process already has open read-only.
    #[error(
        "the database file {} is open read-only in this process; close those handles first",
        path.display()
    )]
    OpenReadOnly {
        /// The file.
        path: PathBuf,
    },

    /// The writer thread could not be started.
    #[error("cannot start the writer thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl From<RedbError> for KvError {
    fn from(err: RedbError) -> Self {
        if is_corruption(&err) {
            KvError::Corrupt {
                message: err.to_string(),
            }
        } else {
            KvError::storage(err)
        }
    }
}

/// Whether the error says the file's contents are not what they should be.
fn is_corruption(err: &RedbError) -> bool {
    match err {
        RedbError::NotDenoKv { .. } => true,
        RedbError::Redb(inner) => match inner {
            redb::Error::Corrupted(_)
            | redb::Error::UpgradeRequired(_)
            | redb::Error::TableTypeMismatch { .. }
            | redb::Error::TableIsMultimap(_)
            | redb::Error::TableIsNotMultimap(_)
            | redb::Error::TypeDefinitionChanged { .. } => true,
            // redb reports a file without its magic number (not a redb file at all) as invalid data.
            redb::Error::Io(io) => io.kind() == std::io::ErrorKind::InvalidData,
            _ => false,
        },
        RedbError::AlreadyOpen { .. }
        | RedbError::SchemaTooNew(_)
        | RedbError::NeedsRecovery { .. }
        | RedbError::OpenReadOnly { .. }
        | RedbError::Thread(_) => false,
    }
}

/// Wraps any redb error (database, transaction, table, storage, commit) as a [`KvError`].
pub(crate) fn storage(err: impl Into<redb::Error>) -> KvError {
    KvError::from(RedbError::Redb(err.into()))
}

/// A stored record that does not decode.
pub(crate) fn corrupt(message: impl Into<String>) -> KvError {
    KvError::Corrupt {
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_or_foreign_files_are_corrupt_and_the_rest_storage() {
        let damaged = RedbError::Redb(redb::Error::Corrupted("bad page".into()));
        assert!(matches!(KvError::from(damaged), KvError::Corrupt { .. }));
        let not_redb = RedbError::Redb(redb::Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no magic number",
        )));
        assert!(matches!(KvError::from(not_redb), KvError::Corrupt { .. }));
        let foreign = RedbError::NotDenoKv {
            reason: "table x".into(),
        };
        assert!(matches!(KvError::from(foreign), KvError::Corrupt { .. }));
        let newer = RedbError::SchemaTooNew(open_deno_kv_engine_kit::SchemaTooNew {
            found: 9,
            supported: 1,
        });
        let text = newer.to_string();
        assert!(matches!(KvError::from(newer), KvError::Storage { .. }));
        assert!(text.contains("refusing to modify it"), "{text}");
    }
}

//! What a commit with checks comes to: `Deno.KvCommitResult` or `Deno.KvCommitError`.

use open_deno_kv_model::{CommitResult, Versionstamp};

/// The outcome of [`crate::AtomicOperation::commit`]: Deno's `{ ok: true, versionstamp }` or
/// `{ ok: false }`.
///
/// A failed check is not an error (the store is fine; someone else wrote first), so it is not
/// in the `Err` of the result; and since it means *nothing was written*, the outcome is
/// `#[must_use]`: `commit().await?;` alone is a warning.
///
/// ```
/// # async fn demo(kv: open_deno_kv::Kv) -> open_deno_kv::Result<()> {
/// use open_deno_kv::{CommitOutcome, key};
/// let entry = kv.get(key!["config"]).await?;
/// match kv.atomic().check(&entry).set(key!["config"], "v2").commit().await? {
///     CommitOutcome::Committed { versionstamp } => println!("written at {versionstamp}"),
///     CommitOutcome::CheckFailed => println!("changed since it was read: read again"),
/// }
/// # Ok(()) }
/// ```
///
/// Dropping the outcome is caught by the compiler (`unused_must_use`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn demo(kv: open_deno_kv::Kv, entry: open_deno_kv::MaybeEntry) -> open_deno_kv::Result<()> {
/// kv.atomic().check(&entry).set(open_deno_kv::key!["k"], 1).commit().await?; // error: unused outcome
/// # Ok(()) }
/// # fn main() {}
/// ```
#[must_use = "a failed check writes nothing: look at the outcome"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitOutcome {
    /// Everything was written; every key the commit wrote carries this versionstamp.
    Committed {
        /// The commit's versionstamp.
        versionstamp: Versionstamp,
    },
    /// A check failed: a key did not have the versionstamp it was checked against, and
    /// nothing was written.
    CheckFailed,
}

impl CommitOutcome {
    /// Whether the commit happened (Deno's `ok`).
    pub fn is_committed(&self) -> bool {
        matches!(self, CommitOutcome::Committed { .. })
    }

    /// The commit's versionstamp, `None` if a check failed.
    pub fn versionstamp(&self) -> Option<Versionstamp> {
        match self {
            CommitOutcome::Committed { versionstamp } => Some(*versionstamp),
            CommitOutcome::CheckFailed => None,
        }
    }
}

impl From<Option<CommitResult>> for CommitOutcome {
    /// A backend's answer: `None` is a failed check.
    fn from(result: Option<CommitResult>) -> Self {
        match result {
            Some(CommitResult { versionstamp }) => CommitOutcome::Committed { versionstamp },
            None => CommitOutcome::CheckFailed,
        }
    }
}

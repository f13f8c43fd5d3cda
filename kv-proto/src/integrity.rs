//! What a store's integrity check found ([`crate::Backend::check_integrity`]).

/// The outcome of an integrity check: how much was read, and every problem found.
///
/// A check reads the whole store: the engine's own structural check (SQLite's
/// `integrity_check`, redb's page checksums) where it has one, then every entry and queued
/// message, each decoded as a read would decode it. A damaged page, a row that does not decode, or
/// a scan that stops with an error is a problem; the check goes on where it can, so one run
/// lists as much as it can see.
///
/// ```
/// use kv_proto::IntegrityReport;
/// let mut report = IntegrityReport::default();
/// assert!(report.is_ok());
/// report.problem("kv: row 3 does not decode");
/// assert!(!report.is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntegrityReport {
    /// Entries read and decoded without a problem.
    pub entries_checked: u64,
    /// Queued messages (waiting or being delivered) read and decoded without a problem.
    pub messages_checked: u64,
    /// What is wrong, one sentence each; empty when the store is sound.
    pub problems: Vec<String>,
}

impl IntegrityReport {
    /// At most this many problems are kept: enough to show the extent of the damage, not a
    /// line per row of a destroyed file.
    pub const MAX_PROBLEMS: usize = 100;

    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// Records a problem (beyond [`IntegrityReport::MAX_PROBLEMS`], only a count is kept in the
    /// last one).
    pub fn problem(&mut self, problem: impl Into<String>) {
        match self.problems.len() {
            n if n < Self::MAX_PROBLEMS => self.problems.push(problem.into()),
            n if n == Self::MAX_PROBLEMS => self.problems.push("and more problems".into()),
            _ => {}
        }
    }
}

//! What a store's integrity check found ([`crate::Backend::check_integrity`]), and the table scan
//! every engine's check runs.

use std::fmt::Display;

use crate::KvError;

/// The outcome of an integrity check: how much was read, and every problem found.
///
/// A check reads the whole store: the engine's own structural check (SQLite's
/// `integrity_check`, redb's page checksums) where it has one, then every entry and queued
/// message, each decoded as a read would decode it. A damaged page, a row that does not decode, or
/// a scan that stops with an error is a problem; the check goes on where it can, so one run
/// lists as much as it can see.
///
/// ```
/// use open_deno_kv_model::IntegrityReport;
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

    /// Records that table `table` cannot be read at all.
    pub fn unreadable(&mut self, table: &str, err: impl Display) {
        self.problem(format!("table {table} cannot be read: {err}"));
    }

    /// Goes through the rows of table `table`, each already decoded by the engine: a row that
    /// decoded counts as `holds` says; a row that did not is a problem (named by its index and
    /// key) and the scan goes on; a scan that stops with an error (`Err` in place of a row) is a
    /// problem too, since the rows after it are unseen.
    ///
    /// ```
    /// use open_deno_kv_model::{IntegrityReport, KvError, TableHolds};
    /// let mut report = IntegrityReport::default();
    /// let bad = KvError::Corrupt { message: "no value".into() };
    /// let rows: Vec<Result<_, String>> = vec![Ok(Ok(())), Ok(Err((Some(vec![0xab]), bad)))];
    /// report.scan_rows("kv", TableHolds::Entries, rows);
    /// assert_eq!(report.entries_checked, 1);
    /// assert!(report.problems[0].starts_with("table kv, row 1 (key ab): "));
    /// ```
    pub fn scan_rows<E: Display>(
        &mut self,
        table: &str,
        holds: TableHolds,
        rows: impl IntoIterator<Item = Result<Result<(), RowProblem>, E>>,
    ) {
        self.scan_rows_from(table, holds, 0, rows);
    }

    /// [`IntegrityReport::scan_rows`] for a table read in batches: `first_index` is the index of
    /// the batch's first row in the table, so problems name the row wherever the batch began.
    ///
    /// ```
    /// use open_deno_kv_model::{IntegrityReport, KvError, TableHolds};
    /// let mut report = IntegrityReport::default();
    /// let bad = KvError::Corrupt { message: "no value".into() };
    /// let batch: Vec<Result<_, String>> = vec![Ok(Err((None, bad)))];
    /// report.scan_rows_from("kv", TableHolds::Entries, 1024, batch);
    /// assert!(report.problems[0].starts_with("table kv, row 1024: "));
    /// ```
    pub fn scan_rows_from<E: Display>(
        &mut self,
        table: &str,
        holds: TableHolds,
        first_index: usize,
        rows: impl IntoIterator<Item = Result<Result<(), RowProblem>, E>>,
    ) {
        for (offset, row) in rows.into_iter().enumerate() {
            let index = first_index + offset;
            match row {
                Ok(Ok(())) => match holds {
                    TableHolds::Entries => self.entries_checked += 1,
                    TableHolds::Messages => self.messages_checked += 1,
                    TableHolds::Index => {}
                },
                Ok(Err((key, err))) => {
                    let key = key.map_or_else(String::new, |key| {
                        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                        format!(" (key {hex})")
                    });
                    self.problem(format!("table {table}, row {index}{key}: {err}"));
                }
                Err(err) => {
                    return self.problem(format!(
                        "table {table}: the scan stopped after {index} rows: {err}"
                    ));
                }
            }
        }
    }
}

/// What a scanned table holds, for the counts of an [`IntegrityReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableHolds {
    /// Entries: each row read counts in [`IntegrityReport::entries_checked`].
    Entries,
    /// Queued messages: each row counts in [`IntegrityReport::messages_checked`].
    Messages,
    /// An index or other bookkeeping: rows are checked, not counted.
    Index,
}

/// A row that does not decode: its key, where the table has one, and why.
pub type RowProblem = (Option<Vec<u8>>, KvError);

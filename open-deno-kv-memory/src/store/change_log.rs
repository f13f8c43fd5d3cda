//! The change log of a [`MemoryStore`] (see `open_deno_kv_engine_kit::change_log`): records in a map
//! beside the entries, under the same lock, written by the commit that makes them. Not durable
//! (nothing here is), but the same rules as the durable engines', so the conformance suite and
//! its seeded faults run on it, and a program can roll an export forward in tests.
//!
//! Records are kept encoded ([`ChangeRecord::encode`]), as the durable engines keep them, with
//! their time beside them for pruning.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{
    ChangeLogStatus, ChangeRecord, LogMark, PRUNE_BATCH, PruneSchedule, prune_before,
};
use open_deno_kv_engine_kit::{KvError, Versionstamp};

use super::MemoryStore;

/// One record as the log keeps it: its commit's time (for pruning) and its bytes.
#[derive(Debug)]
struct Logged {
    at: DateTime<Utc>,
    bytes: Vec<u8>,
}

/// The log while it is on.
#[derive(Debug)]
pub(super) struct MemoryLog {
    retention: Duration,
    /// versionstamp → its record.
    records: BTreeMap<Versionstamp, Logged>,
    schedule: PruneSchedule,
}

impl MemoryLog {
    /// Stores `record`, then prunes when due.
    pub(super) fn append(&mut self, record: &ChangeRecord) {
        let logged = Logged {
            at: record.at,
            bytes: record.encode(),
        };
        self.records.insert(record.versionstamp, logged);
        if self.schedule.logged(1) {
            let before = prune_before(record.at, self.retention);
            let old: Vec<Versionstamp> = (self.records.iter())
                .take(PRUNE_BATCH)
                .take_while(|(_, logged)| logged.at < before)
                .map(|(versionstamp, _)| *versionstamp)
                .collect();
            for versionstamp in old {
                self.records.remove(&versionstamp);
            }
        }
    }

    fn mark(entry: Option<(&Versionstamp, &Logged)>) -> Option<LogMark> {
        entry.map(|(versionstamp, logged)| LogMark {
            versionstamp: *versionstamp,
            at: logged.at,
        })
    }
}

impl MemoryStore {
    /// Switches the log on (keeping its records if it was on) or off (dropping them).
    pub(crate) fn configure_change_log(&self, retention: Option<Duration>) {
        let mut state = self.lock();
        state.log = match (retention, state.log.take()) {
            (None, _) => None,
            (Some(retention), Some(log)) => Some(MemoryLog { retention, ..log }),
            (Some(retention), None) => Some(MemoryLog {
                retention,
                records: BTreeMap::new(),
                schedule: PruneSchedule::default(),
            }),
        };
    }

    pub(crate) fn change_log_status(&self) -> ChangeLogStatus {
        let state = self.lock();
        let Some(log) = &state.log else {
            return ChangeLogStatus::default();
        };
        ChangeLogStatus {
            retention: Some(log.retention),
            records: log.records.len() as u64,
            first: MemoryLog::mark(log.records.first_key_value()),
            last: MemoryLog::mark(log.records.last_key_value()),
        }
    }

    pub(crate) fn read_change_log(
        &self,
        after: Versionstamp,
        limit: usize,
    ) -> Result<Vec<ChangeRecord>, KvError> {
        let bytes: Vec<Vec<u8>> = {
            let state = self.lock();
            let Some(log) = &state.log else {
                return Ok(Vec::new());
            };
            (log.records
                .range((Bound::Excluded(after), Bound::Unbounded)))
            .take(limit)
            .map(|(_, logged)| logged.bytes.clone())
            .collect()
        };
        bytes
            .iter()
            .map(|bytes| ChangeRecord::decode(bytes))
            .collect()
    }
}

//! Checks the last commit already decided: what a committed group left at the keys it wrote,
//! and the writes waiting for the next group whose checks that commit made fail.
//!
//! Under contention on one key (check-and-set loops: counters, compare-and-swap), most writes
//! that wait for the next group read the key before the group in flight changed it. Their
//! checks cannot pass, yet each such group costs a round trip to find out, and a write that
//! *could* commit queues behind it. [`AfterCommit`] answers them without the round trip, and only
//! when the answer is one the store really gave:
//!
//! - the committer notes the instant just before it sends a group's `COMMIT`, and, once the
//!   group is known to have committed, the final state of every key it wrote (the entry's
//!   versionstamp and expiry, or a deletion) and the ranges it deleted;
//! - a later write was *invoked* (its `atomic_write` called) before that instant, so the
//!   commit happened while the call was in progress; at the commit, under the `kv_meta` row lock
//!   every writer of every process takes, the key held exactly what the group left there;
//! - if one of the write's checks expects something else at such a key (another versionstamp,
//!   or absent where the group left an entry visible at the write's `now`, or an entry where it
//!   left none), the check failed at that instant, and the write is answered "check failed" as
//!   if it had run right after the group. That is linearizable whatever happened since: another
//!   process's writes, a range delete or an import that put the old versionstamp back later
//!   change nothing about the state at the commit.
//!
//! A write invoked after the instant, or whose checks name keys the group did not write, runs as
//! before: only the store can answer it.

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{KeyRange, StoredEntry, Versionstamp, is_expired};

use crate::group::WriteRequest;

/// A key's state after the commit: the entry's versionstamp and expiry, or `None` (deleted).
type LeftState = Option<(Versionstamp, Option<DateTime<Utc>>)>;

/// What one committed group left behind (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct AfterCommit {
    /// Just before the group's `COMMIT` was sent: the commit happened after it.
    commit_sent: Instant,
    /// The final state of every key the group wrote.
    writes: BTreeMap<Vec<u8>, LeftState>,
    /// The ranges the group deleted (before its `writes`, which win inside them).
    deleted_ranges: Vec<KeyRange>,
}

impl AfterCommit {
    /// The state a group leaves, if it commits: its final writes and deleted ranges, its
    /// `COMMIT` about to be sent now.
    pub(crate) fn new(
        writes: &BTreeMap<Vec<u8>, Option<StoredEntry>>,
        deleted_ranges: &[KeyRange],
        commit_sent: Instant,
    ) -> Self {
        AfterCommit {
            commit_sent,
            writes: writes
                .iter()
                .map(|(key, entry)| {
                    let state = entry.as_ref().map(|e| (e.versionstamp, e.expires_at));
                    (key.clone(), state)
                })
                .collect(),
            deleted_ranges: deleted_ranges.to_vec(),
        }
    }

    /// The versionstamp a check at `now` saw at `key` right after the commit, if the group
    /// decided it: `Some(None)` for absent, `None` when the group did not touch the key.
    fn seen(&self, key: &[u8], now: DateTime<Utc>) -> Option<Option<Versionstamp>> {
        match self.writes.get(key) {
            Some(state) => Some(
                state
                    .filter(|(_, expires_at)| !is_expired(*expires_at, now))
                    .map(|(versionstamp, _)| versionstamp),
            ),
            None if self.deleted_ranges.iter().any(|r| r.contains(key)) => Some(None),
            None => None,
        }
    }

    /// Whether `item`'s checks failed at this commit: it was invoked before the commit, and one
    /// of its checks expects at a key the group decided something other than what it left.
    pub(crate) fn failed_checks_of(&self, item: &WriteRequest) -> bool {
        item.invoked < self.commit_sent
            && item.write.checks.iter().any(|check| {
                self.seen(&check.key, item.now)
                    .is_some_and(|seen| seen != check.versionstamp)
            })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use open_deno_kv_engine_kit::{AtomicWrite, Check, KvValue, Limits, Mutation};

    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).expect("time")
    }

    fn vs(version: u64) -> Versionstamp {
        Versionstamp::from_version(version, 0)
    }

    fn key(name: &str) -> Vec<u8> {
        open_deno_kv_engine_kit::encode_key(&open_deno_kv_engine_kit::key![name]).expect("key")
    }

    /// A write checking `key` at `expected`, invoked at `invoked`, applied at `now`.
    fn checking(
        name: &str,
        expected: Option<u64>,
        invoked: Instant,
        now: DateTime<Utc>,
    ) -> WriteRequest {
        let write = AtomicWrite {
            checks: vec![Check {
                key: key(name),
                versionstamp: expected.map(vs),
            }],
            mutations: vec![Mutation::set(key(name), KvValue::U64(1))],
            ..Default::default()
        };
        WriteRequest {
            write: Limits::deno()
                .accept_atomic_write(write, now)
                .expect("valid"),
            now,
            claim: None,
            invoked,
        }
    }

    fn entry(version: u64, expires_at: Option<DateTime<Utc>>) -> Option<StoredEntry> {
        Some(StoredEntry {
            value: KvValue::U64(1),
            versionstamp: vs(version),
            expires_at,
        })
    }

    /// The group set `counter` at 9 and `expiring` (until second 10) at 9, deleted `gone`, and
    /// deleted the range [r, s) except `r2`, which it set again.
    fn after(commit_sent: Instant) -> AfterCommit {
        let writes = BTreeMap::from([
            (key("counter"), entry(9, None)),
            (key("expiring"), entry(9, Some(at(10)))),
            (key("gone"), None),
            (key("r2"), entry(9, None)),
        ]);
        let ranges = [KeyRange::new(key("r"), key("s"))];
        AfterCommit::new(&writes, &ranges, commit_sent)
    }

    /// Whether a write invoked just before the commit, checking `name` at `expected` with its
    /// `now`, fails at the commit [`after`] describes.
    fn fails(name: &str, expected: Option<u64>, now: DateTime<Utc>) -> bool {
        let sent = Instant::now();
        let before = sent - Duration::from_millis(1);
        after(sent).failed_checks_of(&checking(name, expected, before, now))
    }

    #[test]
    fn a_write_invoked_before_the_commit_fails_where_the_commit_decided_otherwise() {
        // Another versionstamp, or expecting absent, where the group left an entry.
        assert!(fails("counter", Some(8), at(0)));
        assert!(fails("counter", None, at(0)));
        // An entry expected where the group deleted the key, or a range took it.
        assert!(fails("gone", Some(3), at(0)));
        assert!(fails("r1", Some(3), at(0)));
        // Expiry at the write's own time: visible before, absent after.
        assert!(fails("expiring", None, at(5)));
        assert!(fails("expiring", Some(9), at(10)));
    }

    #[test]
    fn a_check_the_commit_left_passing_or_did_not_decide_runs() {
        assert!(!fails("counter", Some(9), at(0)), "what the group left");
        assert!(!fails("gone", None, at(0)));
        assert!(!fails("r1", None, at(0)), "deleted by the range");
        assert!(!fails("r2", Some(9), at(0)), "set again after the range");
        assert!(!fails("expiring", Some(9), at(5)));
        assert!(
            !fails("expiring", None, at(10)),
            "expired at the write's now"
        );
        assert!(
            !fails("other", Some(1), at(0)),
            "a key the group did not touch"
        );
    }

    /// Invoked once the `COMMIT` was on its way, a write may have started after the commit, when
    /// anything may have changed: only the store can answer it.
    #[test]
    fn a_write_invoked_after_the_commit_was_sent_runs() {
        let sent = Instant::now();
        let after = after(sent);
        for invoked in [sent, sent + Duration::from_millis(1)] {
            let item = checking("counter", Some(8), invoked, at(0));
            assert!(!after.failed_checks_of(&item));
        }
    }
}

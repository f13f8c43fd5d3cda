//! What the last commit already decided: what a committed group left at the keys it wrote, the
//! writes waiting for the next group whose checks that commit made fail, and the point reads it
//! can answer.
//!
//! Under contention on one key (check-and-set loops: counters, compare-and-swap), most writes
//! that wait for the next group read the key before the group in flight changed it. Their
//! checks cannot pass, yet each such group costs a round trip to find out, and a write that
//! *could* commit queues behind it. [`AfterCommit`] answers them without the round trip, and only
//! when the answer is one the store really gave:
//!
//! - the committer notes the instant just before it sends a group's `COMMIT`, and, once the
//!   group is known to have committed, the final state of every key it wrote (the entry as the
//!   table holds it, or a deletion) and the ranges it deleted;
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
//! The same instant answers a point read ([`AfterCommit::read_points`]): a read invoked before
//! the `COMMIT` was sent, of keys the group decided, and answered after the commit, may return
//! what the group left — the store's state at an instant inside the read's call. The read waits
//! for the group to get there (the `in_flight` module).
//!
//! A write or read invoked after the instant, or naming keys the group did not decide, runs as
//! before: only the store can answer it.

use std::collections::BTreeMap;
use std::time::Instant;

use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::{
    KeyRange, KvEntry, ReadRange, ReadRangeOutput, StoredEntry, Versionstamp,
};

use crate::codec;
use crate::group::WriteRequest;

/// What one committed group left behind (see the module documentation). The committer keeps the
/// last one until the next group commits: at most a group's entries (`max_group` writes).
#[derive(Debug, Clone)]
pub(crate) struct AfterCommit {
    /// Just before the group's `COMMIT` was sent: the commit happened after it.
    commit_sent: Instant,
    /// The final state of every key the group wrote, as a read of the table returns it (expiry
    /// in whole milliseconds); `None` deleted.
    writes: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    /// The ranges the group deleted (before its `writes`, which win inside them).
    deleted_ranges: Vec<KeyRange>,
}

impl AfterCommit {
    /// The state a group leaves, if it commits: its final writes and deleted ranges, its
    /// `COMMIT` sent just after `commit_sent`.
    pub(crate) fn new(
        mut writes: BTreeMap<Vec<u8>, Option<StoredEntry>>,
        deleted_ranges: Vec<KeyRange>,
        commit_sent: Instant,
    ) -> Self {
        // The table keeps expiry in whole milliseconds: a read of it, and the expiry test at a
        // check's `now`, see that, not the instant the write computed.
        for entry in writes.values_mut().flatten() {
            entry.expires_at = entry.expires_at.map(codec::as_stored);
        }
        AfterCommit {
            commit_sent,
            writes,
            deleted_ranges,
        }
    }

    /// The row the group left at `key`, expired or not, if it decided the key: `Some(None)` for
    /// none, `None` when the group did not touch the key.
    fn decided(&self, key: &[u8]) -> Option<Option<&StoredEntry>> {
        match self.writes.get(key) {
            Some(entry) => Some(entry.as_ref()),
            None if self.deleted_ranges.iter().any(|r| r.contains(key)) => Some(None),
            None => None,
        }
    }

    /// The entry the group left at `key`, if it wrote one there without expiry: such an entry
    /// changes only by a later commit (expired entries are swept without one, and an import
    /// needs an empty store), which moves the store's version on.
    pub(crate) fn lasting(&self, key: &[u8]) -> Option<&StoredEntry> {
        self.writes
            .get(key)?
            .as_ref()
            .filter(|entry| entry.expires_at.is_none())
    }

    /// The entry a read at `now` saw at `key` right after the commit, if the group decided it
    /// (see [`AfterCommit::decided`]): an expired entry is absent.
    fn entry_at(&self, key: &[u8], now: DateTime<Utc>) -> Option<Option<&StoredEntry>> {
        self.decided(key)
            .map(|entry| entry.filter(|e| !e.is_expired(now)))
    }

    /// The versionstamp a check at `now` saw at `key` right after the commit, if the group
    /// decided it (see [`AfterCommit::entry_at`]).
    fn seen(&self, key: &[u8], now: DateTime<Utc>) -> Option<Option<Versionstamp>> {
        self.entry_at(key, now)
            .map(|entry| entry.map(|e| e.versionstamp))
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

    /// The answer to a read of `ranges` at `now` invoked at `invoked`, if this commit gives it:
    /// the read began before the `COMMIT` was sent, every range is one key (a `get`), and the
    /// group decided every one of those keys. `None` sends the read to the store.
    pub(crate) fn read_points(
        &self,
        ranges: &[ReadRange],
        invoked: Instant,
        now: DateTime<Utc>,
    ) -> Option<Vec<ReadRangeOutput>> {
        if invoked >= self.commit_sent {
            return None;
        }
        ranges
            .iter()
            .map(|range| {
                let key = range.point_key()?;
                let entry = self.entry_at(key, now)?;
                let entries = entry
                    .map(|e| KvEntry::from_stored(key.to_vec(), e.clone()))
                    .into_iter()
                    .collect();
                Some(ReadRangeOutput { entries })
            })
            .collect()
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
            queued: None,
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
        AfterCommit::new(writes, ranges.to_vec(), commit_sent)
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

    /// The answer of a read invoked just before the commit described by [`after`], at `now`.
    fn read(ranges: &[ReadRange], now: DateTime<Utc>) -> Option<Vec<ReadRangeOutput>> {
        let sent = Instant::now();
        after(sent).read_points(ranges, sent - Duration::from_millis(1), now)
    }

    fn get(name: &str) -> ReadRange {
        ReadRange::single_encoded_key(key(name))
    }

    /// The one entry each range of an answer holds: its versionstamp, or `None` for none.
    fn stamps(outputs: &[ReadRangeOutput]) -> Vec<Option<Versionstamp>> {
        outputs
            .iter()
            .map(|o| {
                assert!(o.entries.len() <= 1);
                o.entries.first().map(|e| e.versionstamp)
            })
            .collect()
    }

    #[test]
    fn a_get_invoked_before_the_commit_gets_what_the_group_left() {
        let answer = read(
            &[
                get("counter"),
                get("gone"),
                get("r1"),
                get("r2"),
                get("expiring"),
            ],
            at(5),
        )
        .expect("every key decided");
        assert_eq!(
            stamps(&answer),
            [Some(vs(9)), None, None, Some(vs(9)), Some(vs(9))]
        );
        assert_eq!(answer[0].entries[0].key, key("counter"));
        assert_eq!(answer[0].entries[0].value, KvValue::U64(1));
        // Expired at the read's own time.
        let answer = read(&[get("expiring")], at(10)).expect("decided");
        assert_eq!(stamps(&answer), [None]);
    }

    #[test]
    fn a_read_the_commit_did_not_wholly_decide_goes_to_the_store() {
        assert!(read(&[get("counter"), get("other")], at(0)).is_none());
        let scan = ReadRange {
            start: key("counter"),
            end: key("s"),
            limit: 10,
            reverse: false,
        };
        assert!(read(&[scan], at(0)).is_none(), "not a point read");
        let sent = Instant::now();
        for invoked in [sent, sent + Duration::from_millis(1)] {
            assert!(
                after(sent)
                    .read_points(&[get("counter")], invoked, at(0))
                    .is_none()
            );
        }
    }

    /// The table keeps expiry in milliseconds; what the commit left is what a read of it returns.
    #[test]
    fn expiry_is_kept_as_the_table_keeps_it() {
        let exact = at(10) + chrono::Duration::microseconds(1_700);
        let writes = BTreeMap::from([(key("k"), entry(9, Some(exact)))]);
        let sent = Instant::now();
        let after = AfterCommit::new(writes, Vec::new(), sent);
        let whole = at(10) + chrono::Duration::milliseconds(1);
        let answer = after
            .read_points(&[get("k")], sent - Duration::from_millis(1), at(0))
            .expect("decided");
        assert_eq!(answer[0].entries[0].expires_at, Some(whole));
        // At the whole millisecond it is gone, as the table's filter has it.
        let gone = after.read_points(&[get("k")], sent - Duration::from_millis(1), whole);
        assert_eq!(gone.map(|a| stamps(&a)), Some(vec![None]));
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

//! When the connection drops during `COMMIT`: finding out whether the group committed, so that
//! its callers get the true outcome instead of "unknown".
//!
//! **The record.** Before a group's transaction, the committer picks a random id. The group's
//! transaction writes one row `(version, id)` into `kv_commit_ids` in its first statement, the
//! version bump itself (no statement of its own), where `version` is what the bump took. If the
//! connection is lost after `COMMIT` was sent and before its answer, a fresh connection:
//!
//! 1. takes the `kv_meta` row lock in share mode (`SELECT … FOR SHARE`). The lost transaction
//!    took that row's lock with its first statement and holds it until it ends, so this waits
//!    until the server has either committed it or rolled it back — a `COMMIT` still travelling
//!    the network cannot land after the answer below. `lock_timeout` stops the wait at the
//!    deadline on the server's side too;
//! 2. looks the row `(version, id)` up, in a statement that sees every commit made before the
//!    lock was granted. Found: the group committed. Absent: it did not, and never will.
//!
//! Why a random id, and not the version alone: several processes commit into one store, and a
//! group that did not commit gives its versions back — the next writer, in any process, takes
//! the same numbers. "The store's version reached ours" says nothing about whose commit that was;
//! a row only our transaction could have written does. It also holds across a failover: on a
//! promoted standby the row is there exactly when the commit reached it.
//!
//! The lookup is retried on new connections until [`crate::PostgresOptions::commit_outcome_wait`]
//! has passed; only then do the group's callers get [`crate::PostgresError::OutcomeUnknown`].
//!
//! **Pruning.** A row is needed only while its own committer may still look it up, that is for
//! at most the outcome wait after its commit. Every handle samples the store's `data_version`
//! every [`SAMPLE_EVERY`] and deletes the rows of versions up to a sample taken at least
//! [`RECORD_RETENTION`] ago (by its own monotonic clock, so clocks of different machines never
//! meet). That is sound because a group that bumps the version after a sample saw `v` commits
//! with a version above `v`: every row at or below `v` committed before the sample was taken,
//! so it is at least [`RECORD_RETENTION`] old when deleted — twice the longest outcome wait
//! allowed ([`MAX_OUTCOME_WAIT`]).

use std::collections::VecDeque;
use std::time::Duration;

use deadpool_postgres::Pool;
use open_deno_kv_engine_kit::KvError;
use tokio::time::Instant;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::PostgresError;
use crate::connect::connect;
use crate::error::pg;
use crate::reader::pooled;
use crate::sql::Sql;
use crate::target::Target;

/// How long a group's record is kept at least.
pub(crate) const RECORD_RETENTION: Duration = Duration::from_secs(600);
/// The longest [`crate::PostgresOptions::commit_outcome_wait`] accepted: half the retention.
pub(crate) const MAX_OUTCOME_WAIT: Duration = Duration::from_secs(300);
/// How often a handle samples `data_version` for pruning.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// What a group writes to be found again: the version its bump returned, and its random id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommitMark {
    pub(crate) version: i64,
    pub(crate) id: Uuid,
}

/// What the lookup learnt.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The group's record is there: it committed.
    Committed,
    /// The lost transaction has ended and its record is not there: nothing was committed.
    NotCommitted,
    /// The server could not be asked within the wait; `last` is the last failure.
    Unknown { last: String },
}

/// Finds out whether the group marked `mark` committed, trying on new connections to `target`
/// for at most `wait`.
pub(crate) async fn look_up(
    target: &Target,
    sql: &Sql,
    mark: CommitMark,
    wait: Duration,
) -> Outcome {
    let started = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let left = wait.saturating_sub(started.elapsed());
        let last = match tokio::time::timeout(left, ask(target, sql, mark, left)).await {
            Ok(Ok(true)) => return Outcome::Committed,
            Ok(Ok(false)) => return Outcome::NotCommitted,
            Ok(Err(err)) => err.to_string(),
            Err(_) => format!("no answer within {wait:?}"),
        };
        let elapsed = started.elapsed();
        if elapsed >= wait {
            return Outcome::Unknown { last };
        }
        tokio::time::sleep(pause.min(wait - elapsed)).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// One lookup on a new connection (see the module docs).
async fn ask(
    target: &Target,
    sql: &Sql,
    mark: CommitMark,
    left: Duration,
) -> Result<bool, PostgresError> {
    let mut client = connect(target).await?;
    let tx = client.transaction().await?;
    let ms = left.as_millis().clamp(1, i32::MAX as u128);
    let timeout = format!("SET LOCAL lock_timeout = {ms}");
    // Sent together (unnamed statements, no preparing round trips): the server runs them in
    // order, so the lookup's snapshot is taken once the lock is granted.
    let params: [(&(dyn ToSql + Sync), Type); 2] =
        [(&mark.version, Type::INT8), (&mark.id, Type::UUID)];
    let (_, _, found) = tokio::try_join!(
        tx.batch_execute(&timeout),
        tx.query_typed(&sql.wait_for_writer, &[]),
        tx.query_typed_one(&sql.commit_lookup, &params),
    )?;
    let found: bool = found.try_get(0)?;
    // Read only; the answer stands whatever happens to the connection now.
    let _ = tx.rollback().await;
    Ok(found)
}

/// The samples of one handle's pruning (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Pruner {
    /// `(when, data_version)`, oldest first.
    samples: VecDeque<(Instant, i64)>,
}

impl Pruner {
    /// Keeps the sample `version` seen at `now`; returns the version up to which records may be
    /// deleted, when a sample has reached [`RECORD_RETENTION`].
    pub(crate) fn sample(&mut self, now: Instant, version: i64) -> Option<i64> {
        self.samples.push_back((now, version));
        let mut due = None;
        while let Some(&(at, seen)) = self.samples.front() {
            if now.saturating_duration_since(at) < RECORD_RETENTION {
                break;
            }
            due = Some(seen);
            self.samples.pop_front();
        }
        due
    }

    /// Takes a sample of the store's version and deletes the records a sample allows.
    pub(crate) async fn prune(&mut self, pool: &Pool, sql: &Sql) -> Result<(), KvError> {
        let client = pooled(pool).await?;
        let version: i64 = client
            .query_one(&sql.read_version, &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(pg)?;
        if let Some(up_to) = self.sample(Instant::now(), version) {
            client
                .execute(&sql.commit_prune, &[&up_to])
                .await
                .map_err(pg)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_once_a_sample_is_as_old_as_the_retention() {
        let start = Instant::now();
        let mut pruner = Pruner::default();
        assert_eq!(pruner.sample(start, 10), None);
        assert_eq!(pruner.sample(start + SAMPLE_EVERY, 20), None);
        let almost = start + RECORD_RETENTION - Duration::from_millis(1);
        assert_eq!(pruner.sample(almost, 30), None, "not yet as old");
        // The first sample is due: only what was committed when it was taken.
        assert_eq!(pruner.sample(start + RECORD_RETENTION, 40), Some(10));
        // Much later, every sample old enough is due at once; the newest of them counts.
        let late = start + RECORD_RETENTION * 3;
        assert_eq!(pruner.sample(late, 50), Some(40));
        assert_eq!(pruner.sample(late, 60), None, "the samples just taken stay");
    }
}

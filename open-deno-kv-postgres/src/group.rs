//! One group of atomic writes in one PostgreSQL transaction: the engine side of the
//! [batching committer](crate::committer).
//!
//! ```text
//! -- first flight (one round trip)
//! BEGIN                                        (READ COMMITTED)
//! UPDATE kv_meta SET data_version += n         the row lock FIRST: writers queue here, so
//!                                              versions follow commit order; it returns
//!                                              the change log's retention too, and in the
//!                                              same statement writes the group's record into
//!                                              kv_commit_ids: the version and a random id
//!                                              picked before the transaction (`outcome`)
//! DELETE the claimed queue messages            (dead letters: only while their lease holds)
//! SELECT the rows the checks and sums read     a fresh snapshot, taken under the lock
//! -- in Rust, write i of n against an overlay: open-deno-kv-model's write path with version base+i
//! -- second flight (one round trip, and the WAL flush of the commit)
//! DELETE ranges / INSERT … ON CONFLICT / DELETE / INSERT queue   the survivors' final state
//! INSERT kv_change_log … unnest(…)             the records, only while the log is on (below)
//! pg_notify                                    other processes wake their watches and consumers
//! COMMIT                                       (ROLLBACK instead, not waited for, when every
//!                                              write failed its checks)
//! ```
//!
//! Each flight's statements are sent together and run in order (see the `pipeline` module): a
//! group costs two round trips and one WAL flush, however many writes it holds, and a group whose
//! checks all fail costs one round trip and no flush. The first flight's read still comes after
//! the lock, since the server runs a flight's statements one after another.
//!
//! **One flight.** What the first flight reads, the committer often knows already: the version
//! its own last commit left, the retention it ran under, and the entries it wrote. When the
//! next group reads only keys that commit left an entry without expiry at, and depends on no
//! claim, it is staged against that ([`WriteGroup::foresee`]) and sent whole:
//!
//! ```text
//! BEGIN
//! UPDATE kv_meta SET data_version += n / (CASE WHEN data_version = foreseen
//!        AND change_log_ms IS NOT DISTINCT FROM foreseen THEN 1 ELSE 0 END)   (and the record)
//! the writes, the log, pg_notify, COMMIT       as in the second flight above
//! ```
//!
//! One round trip and the WAL flush. The guess is sound because such an entry changes only by
//! a commit, and every commit of every process moves `data_version` on under the row lock
//! (expired entries are swept without one, and an import needs an empty store). When another
//! writer has committed since, the bump divides by zero: the transaction aborts, its `COMMIT`
//! rolls back, and the group runs again reading the store (a round trip lost). So that a store
//! other writers are busy on does not lose one per group, the committer guesses only after a
//! commit that found the store where its previous commit had left it (or after its first); and
//! after any failure, or through a connection it has just made (it may reach another server
//! after a failover), only once a group has read the store again. A group the guess says would
//! commit nothing is not sent as a guess: the store answers it, as above.
//!
//! Checks, sums and versionstamped keys are decided by open-deno-kv-model ([`stage_atomic_write`]), never
//! in SQL. A write whose check fails, or whose mutation is refused, gets its own answer and
//! leaves no trace; the others commit. Why the lock comes first: under READ COMMITTED each
//! statement takes a new snapshot, so the SELECT after the lock sees every earlier writer's
//! commit (a check made before the lock, or in the same statement, could miss one).
//!
//! **The change log.** The version bump also returns `kv_meta.change_log_ms`, the log's
//! retention, read from the row it has just locked: a `configure_change_log` (which updates the
//! same row, so takes the same lock) is in effect for every group that locks the row after it
//! committed, in every process, at no cost to the commit when the log is off. While it is on,
//! each surviving write becomes one [`ChangeRecord`] (its effects as staged, its `now`, and the
//! write before it: the previous survivor of the group, or for the first one the version the
//! group started from, which is what an export would have reported), and the group stores them
//! all with one `INSERT … SELECT unnest(…)`. Versions of writes that fail are otherwise skipped;
//! while logging, when the last writes of a group fail, the group sets `data_version` back to its
//! last survivor, so the next commit (and any export) follows the last record and the chain holds.
//! Every [`PRUNE_EVERY`](open_deno_kv_engine_kit::change_log::PRUNE_EVERY) logged commits, the group
//! also deletes the oldest records older than the retention (at most [`PRUNE_BATCH`]).
//!
//! **Failures.** A connection or server failure before `COMMIT` was sent rolls everything back on
//! the server, so the group is run again on a new connection (for up to [`RETRY_FOR`]). A
//! statement of the second flight that the server refused aborted the transaction, so the
//! `COMMIT` behind it rolled back: not committed either. After any failure the connection is
//! dropped (a transaction left open on it ends with it). When the connection is lost after
//! `COMMIT` was sent and before every answer of its flight came, the committer looks the
//! group's record up on a new connection ([`outcome::look_up`]): committed, the writes get
//! their answers as if the commit had answered; not committed, the group runs again like any
//! group that surely did not commit. Only when the server cannot be asked within
//! [`crate::PostgresOptions::commit_outcome_wait`] does every write of the group get
//! [`PostgresError::OutcomeUnknown`].

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use open_deno_kv_engine_kit::change_log::{ChangeRecord, PRUNE_BATCH, PruneSchedule, prune_before};
use open_deno_kv_engine_kit::queue::QueuedMessage;
use open_deno_kv_engine_kit::{
    ChangedKeys, CommitResult, DatabaseId, Effects, KeyRange, KvError, MutationKind, StoredEntry,
    ValidatedWrite, Versionstamp, stage_atomic_write,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};
use uuid::Uuid;

use crate::PostgresError;
use crate::after_commit::AfterCommit;
use crate::codec::{self, EntryColumns};
use crate::committer::GroupTransaction;
use crate::connect::{connect, is_connection_failure};
use crate::events::{Events, payload};
use crate::in_flight::{AttemptGuard, InFlight, Queued};
use crate::outcome::{self, CommitMark, Outcome};
use crate::pipeline::Flight;
use crate::sql::Sql;
use crate::target::Target;

/// How long a group is retried on new connections while the server is unreachable.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(15);

/// One write for the committer.
#[derive(Debug)]
pub(crate) struct WriteRequest {
    /// The validated write.
    pub(crate) write: ValidatedWrite,
    /// The time it is applied at (expiry of what it reads).
    pub(crate) now: DateTime<Utc>,
    /// For a dead letter: the message (id, lease) whose deletion the write depends on. The write
    /// is skipped (answered "not committed") when the lease no longer holds.
    pub(crate) claim: Option<(Uuid, Uuid)>,
    /// When the write was asked for: a commit after this instant happened while it waited, and
    /// may have decided its checks ([`AfterCommit`]).
    pub(crate) invoked: Instant,
    /// Its keys, registered for the reads that wait for it until the committer takes it (the
    /// `in_flight` module); `None` for writes no read waits for.
    pub(crate) queued: Option<Queued>,
}

/// The answer to one [`WriteRequest`].
pub(crate) type WriteAnswer = Result<Option<CommitResult>, KvError>;

/// The committer's connection, its statements, and where it reports commits.
pub(crate) struct WriteGroup {
    target: Arc<Target>,
    sql: Arc<Sql>,
    events: Arc<Events>,
    origin: String,
    /// Raised to the last version of every group committed (read-your-writes on replicas).
    committed: Arc<AtomicU64>,
    /// How long a lost commit's outcome is looked for.
    outcome_wait: Duration,
    connection: Option<Prepared>,
    /// When the change log is next pruned.
    prune: PruneSchedule,
    /// The store's identity, which every change record names.
    identity: DatabaseId,
    /// What the last group known to have committed left at the keys it wrote: the checks it
    /// already failed are answered without a round trip.
    after_commit: Option<Arc<AfterCommit>>,
    /// Where point reads of the keys a group is writing wait for it.
    in_flight: Arc<InFlight>,
    /// The running attempt, as those reads see it.
    attempt: Option<AttemptGuard>,
    /// Whether the last run's commit answered reads that waited for it.
    woke_readers: bool,
    /// The version the store was left at by this committer's last commit, while no failure
    /// since leaves it in doubt.
    last_version: Option<i64>,
    /// What the next group may be staged against without reading the store (see "One flight"
    /// in the module documentation), when this committer is the store's only writer lately.
    foreseen: Option<Foreseen>,
}

/// The store as this committer's last commit left it: its version and change log retention
/// (the keys it wrote are in its [`AfterCommit`]).
#[derive(Debug, Clone, Copy)]
struct Foreseen {
    version: i64,
    retention_ms: Option<i64>,
}

/// The committer's connection with its statements prepared.
struct Prepared {
    client: Client,
    bump_version: Statement,
    bump_foreseen: Statement,
    set_version: Statement,
    log_insert: Statement,
    log_prune: Statement,
    claim_leased: Statement,
    read_keys: Statement,
    upsert: Statement,
    delete: Statement,
    delete_range: Statement,
    enqueue: Statement,
    notify: Statement,
}

/// A group whose `COMMIT` was sent: what its callers are told, and what this handle does, once
/// it is known to have committed.
struct Sent {
    answers: Vec<WriteAnswer>,
    /// The version the store is left at.
    final_version: i64,
    /// The version the store was at when the group began (its first write's is one more).
    base: i64,
    /// The change log's retention the group ran under.
    retention_ms: Option<i64>,
    /// Whether the group was staged against what the committer foresaw, in one flight.
    foreseen: bool,
    /// What this handle's watches and consumers are told.
    effects: Effects,
    /// What the group leaves at the keys it wrote, once committed.
    after: Arc<AfterCommit>,
}

/// Why a group did not commit.
enum GroupFailure {
    /// Nothing was committed; `retry` if running the group again may work.
    NotCommitted { error: PostgresError, retry: bool },
    /// The commit was sent and its answer lost: `mark` tells whether it landed.
    Unknown {
        source: tokio_postgres::Error,
        mark: CommitMark,
        sent: Sent,
    },
    /// Stored data did not decode; nothing was committed.
    Corrupt(KvError),
    /// The group was staged against what the committer foresaw, and the store had moved on:
    /// its transaction rolled back, and it is run again after reading the store.
    Mispredicted,
}

impl From<tokio_postgres::Error> for GroupFailure {
    fn from(err: tokio_postgres::Error) -> Self {
        GroupFailure::NotCommitted {
            retry: is_connection_failure(&err),
            error: PostgresError::Postgres(err),
        }
    }
}

impl From<PostgresError> for GroupFailure {
    fn from(error: PostgresError) -> Self {
        let retry = match &error {
            connect if connect.may_connect_later() => true,
            PostgresError::Postgres(err) => is_connection_failure(err),
            _ => false,
        };
        GroupFailure::NotCommitted { error, retry }
    }
}

impl WriteGroup {
    /// The engine for a committer on `target`'s database; it connects on its first group, and
    /// raises `committed` to the last version of each group it commits, and publishes each
    /// attempt in `in_flight` for the point reads of the keys it writes. A group whose commit's
    /// answer is lost is looked up for `outcome_wait`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        target: Arc<Target>,
        sql: Arc<Sql>,
        events: Arc<Events>,
        origin: String,
        committed: Arc<AtomicU64>,
        identity: DatabaseId,
        outcome_wait: Duration,
        in_flight: Arc<InFlight>,
    ) -> Self {
        WriteGroup {
            target,
            sql,
            events,
            origin,
            committed,
            outcome_wait,
            connection: None,
            prune: PruneSchedule::default(),
            identity,
            after_commit: None,
            in_flight,
            attempt: None,
            woke_readers: false,
            last_version: None,
            foreseen: None,
        }
    }

    /// The connection in `slot`, made and prepared first if there is none (or it closed).
    async fn connection<'a>(
        slot: &'a mut Option<Prepared>,
        target: &Target,
        sql: &Sql,
    ) -> Result<&'a mut Prepared, PostgresError> {
        if slot.as_ref().is_some_and(|c| c.client.is_closed()) {
            *slot = None;
        }
        if slot.is_none() {
            let client = connect(target).await?;
            // Prepared together: one round trip, not one each (a reconnection after a failover
            // or a lost commit waits for them).
            let (
                bump_version,
                bump_foreseen,
                set_version,
                log_insert,
                log_prune,
                claim_leased,
                read_keys,
                upsert,
                delete,
                delete_range,
                enqueue,
                notify,
            ) = tokio::try_join!(
                client.prepare(&sql.bump_version),
                client.prepare(&sql.bump_foreseen),
                client.prepare(&sql.set_version),
                client.prepare(&sql.log_insert),
                client.prepare(&sql.log_prune),
                client.prepare(&sql.claim_leased),
                client.prepare(&sql.read_keys),
                client.prepare(&sql.upsert),
                client.prepare(&sql.delete),
                client.prepare(&sql.delete_range),
                client.prepare(&sql.enqueue),
                client.prepare(&sql.notify),
            )?;
            let prepared = Prepared {
                client,
                bump_version,
                bump_foreseen,
                set_version,
                log_insert,
                log_prune,
                claim_leased,
                read_keys,
                upsert,
                delete,
                delete_range,
                enqueue,
                notify,
            };
            *slot = Some(prepared);
        }
        match slot.as_mut() {
            Some(prepared) => Ok(prepared),
            None => unreachable!("connected just above"),
        }
    }

    /// Runs the group once.
    async fn try_group(
        &mut self,
        items: &[WriteRequest],
    ) -> Result<Vec<WriteAnswer>, GroupFailure> {
        let channel = self.sql.channel.clone();
        let origin = self.origin.clone();
        // Picked before the transaction: only this attempt's transaction can write it.
        let id = Uuid::new_v4();
        let count = i64::try_from(items.len()).unwrap_or(i64::MAX);
        if self
            .connection
            .as_ref()
            .is_none_or(|conn| conn.client.is_closed())
        {
            // A new connection may reach another server (a failover): nothing is foreseen until
            // a group has read the store through it.
            self.foreseen = None;
            self.last_version = None;
        }
        // Staged against what the last commit left, when it may be: nothing is read, and the
        // version bump, the writes and COMMIT leave in one flight.
        let foreseen = self.foresee(items).and_then(|(foreseen, mut state)| {
            let base = u64::try_from(foreseen.version).unwrap_or(0);
            let logging = foreseen.retention_ms.map(|_| self.identity);
            // No claims here (`foresee`): every write is staged.
            let (outcome, answers, commits) =
                stage_group(items, &mut state, base, logging, &HashSet::new());
            // A group that would commit nothing is not worth a guess: the store answers it.
            commits.then_some((foreseen, outcome, answers))
        });
        let conn = Self::connection(&mut self.connection, &self.target, &self.sql).await?;
        let client = &conn.client;
        let (foreseen, base, last, retention_ms, mut outcome, answers) = match foreseen {
            Some((foreseen, outcome, answers)) => (
                true,
                foreseen.version,
                foreseen.version.saturating_add(count),
                foreseen.retention_ms,
                outcome,
                answers,
            ),
            None => {
                match read_and_stage(conn, items, count, &id, self.identity).await? {
                    Read::Staged {
                        base,
                        last,
                        retention_ms,
                        outcome,
                        answers,
                    } => (false, base, last, retention_ms, *outcome, answers),
                    Read::NothingCommitted {
                        base,
                        answers,
                        rollback_sent,
                    } => {
                        if !rollback_sent {
                            // The connection failed: the server rolls back, and the next group
                            // connects anew.
                            self.connection = None;
                        }
                        if self.last_version != Some(base) {
                            // Another writer committed since this committer's last commit.
                            self.foreseen = None;
                        }
                        return Ok(answers);
                    }
                }
            }
        };
        // The change log: the records, the version of the last one if later writes failed, and
        // a pruning when one is due. Nothing at all while the log is off.
        let mut final_version = last;
        let mut prune_cutoff: Option<i64> = None;
        if let Some(retention_ms) = retention_ms {
            final_version = i64::try_from(outcome.last_version).unwrap_or(i64::MAX);
            let logged = outcome.log.stamps.len();
            if logged > 0 && self.prune.logged(logged) {
                let now = items.iter().map(|i| i.now).max().unwrap_or_default();
                let retention = Duration::from_millis(u64::try_from(retention_ms).unwrap_or(0));
                prune_cutoff = Some(codec::ms(prune_before(now, retention)));
            }
        }
        // Kept for what the group leaves (`AfterCommit`); the flight sends copies.
        let writes = std::mem::take(&mut outcome.writes);
        let mut columns = EntryColumns::default();
        let mut deleted: Vec<&[u8]> = Vec::new();
        for (key, entry) in &writes {
            match entry {
                Some(entry) => columns.push(key, entry),
                None => deleted.push(key),
            }
        }
        let backoffs: Vec<_> = outcome
            .enqueued
            .iter()
            .map(|m| {
                (
                    codec::backoff_column(&m.backoff_schedule),
                    codec::ms(m.ready_at),
                )
            })
            .collect();
        let note = payload(
            &origin,
            !writes.is_empty() || !outcome.deleted_ranges.is_empty(),
            !outcome.enqueued.is_empty(),
        );
        let batch = i64::try_from(PRUNE_BATCH).unwrap_or(i64::MAX);

        // The second flight: every write in order (the range deletes first: the writes kept in
        // `outcome.writes` are those made after them), the log, the notification and COMMIT.
        let mut closing: Flight<'_, u64> = Flight::new();
        if foreseen {
            // BEGIN and the bump open this flight: the bump fails, and the COMMIT below rolls
            // back, unless the store is still at the version the group was staged from.
            closing
                .send(Box::pin(async move {
                    client.batch_execute("BEGIN").await.map(|()| 0)
                }))
                .await?;
            let (statement, count, id, base, retention) =
                (&conn.bump_foreseen, &count, &id, &base, &retention_ms);
            closing
                .send(Box::pin(async move {
                    let params: [&(dyn ToSql + Sync); 4] = [count, id, base, retention];
                    client.execute(statement, &params).await
                }))
                .await?;
        }
        for range in &outcome.deleted_ranges {
            let statement = &conn.delete_range;
            closing
                .send(Box::pin(async move {
                    client.execute(statement, &[&range.start, &range.end]).await
                }))
                .await?;
        }
        if !columns.is_empty() {
            let (statement, c) = (&conn.upsert, &columns);
            closing
                .send(Box::pin(async move {
                    let params: [&(dyn ToSql + Sync); 5] =
                        [&c.keys, &c.values, &c.encodings, &c.stamps, &c.expiries];
                    client.execute(statement, &params).await
                }))
                .await?;
        }
        if !deleted.is_empty() {
            let (statement, keys) = (&conn.delete, &deleted);
            closing
                .send(Box::pin(
                    async move { client.execute(statement, &[keys]).await },
                ))
                .await?;
        }
        for (m, (backoff, ready_at)) in outcome.enqueued.iter().zip(&backoffs) {
            let statement = &conn.enqueue;
            closing
                .send(Box::pin(async move {
                    let params: [&(dyn ToSql + Sync); 5] =
                        [&m.id, ready_at, &m.payload, &m.keys_if_undelivered, backoff];
                    client.execute(statement, &params).await
                }))
                .await?;
        }
        let log = &outcome.log;
        if !log.stamps.is_empty() {
            let statement = &conn.log_insert;
            closing
                .send(Box::pin(async move {
                    client
                        .execute(statement, &[&log.stamps, &log.times, &log.records])
                        .await
                }))
                .await?;
        }
        if let Some(cutoff) = &prune_cutoff {
            let (statement, batch) = (&conn.log_prune, &batch);
            closing
                .send(Box::pin(async move {
                    client.execute(statement, &[cutoff, batch]).await
                }))
                .await?;
        }
        if final_version != last {
            let (statement, version) = (&conn.set_version, &final_version);
            closing
                .send(Box::pin(async move {
                    client.execute(statement, &[version]).await
                }))
                .await?;
        }
        let (statement, channel, note) = (&conn.notify, &channel, &note);
        closing
            .send(Box::pin(async move {
                let params: [&(dyn ToSql + Sync); 2] = [channel, note];
                client.execute(statement, &params).await
            }))
            .await?;
        let mark = CommitMark { version: last, id };
        // Taken before the COMMIT is sent, so the commit surely comes after it.
        let commit_sent = Instant::now();
        // From here on the COMMIT may be on its way: a failure whose cause is not an answer of
        // the server leaves the outcome to be looked up.
        let commit = closing
            .send(Box::pin(async move {
                client.batch_execute("COMMIT").await.map(|()| 0)
            }))
            .await;
        let flown = match commit {
            Ok(()) => Ok(closing.answers().await),
            Err(source) => {
                drop(closing);
                Err(source)
            }
        };
        // The flight is over: what it borrowed from the group's writes goes to `AfterCommit`.
        drop(deleted);
        let sent = Sent {
            answers,
            final_version,
            base,
            retention_ms,
            foreseen,
            effects: Effects {
                queue: !outcome.enqueued.is_empty(),
                changed: outcome.changed,
            },
            after: Arc::new(AfterCommit::new(
                writes,
                outcome.deleted_ranges,
                commit_sent,
            )),
        };
        let flown = match flown {
            Ok(flown) => flown,
            Err(source) => return Err(GroupFailure::Unknown { source, mark, sent }),
        };
        // The foreseen bump refused: the store moved on since this committer's last commit.
        let bump_refused = foreseen
            && flown.get(1).is_some_and(|answer| {
                answer.as_ref().err().and_then(|err| err.code())
                    == Some(&SqlState::DIVISION_BY_ZERO)
            });
        let mut refused = None;
        let mut lost = None;
        for answer in flown {
            match answer {
                Ok(_) => {}
                Err(err) if err.as_db_error().is_some() => {
                    refused.get_or_insert(err);
                }
                Err(err) => {
                    lost.get_or_insert(err);
                }
            }
        }
        // A statement the server refused aborted the transaction: its COMMIT was answered as a
        // rollback. Otherwise an answer lost on the way leaves the outcome unknown.
        if let Some(source) = lost {
            return Err(GroupFailure::Unknown { source, mark, sent });
        }
        if bump_refused {
            return Err(GroupFailure::Mispredicted);
        }
        if let Some(err) = refused {
            return Err(err.into());
        }
        Ok(self.committed(sent))
    }

    /// What the next group may be staged against without reading the store: what this
    /// committer's last commit left, when it foresaw the store (see [`WriteGroup::committed`]),
    /// no write of the group depends on a claim, and every key the group reads is one that
    /// commit left an entry without expiry at. `None`: the group reads the store.
    fn foresee(&self, items: &[WriteRequest]) -> Option<(Foreseen, KeyStates)> {
        let foreseen = self.foreseen?;
        let after = self.after_commit.as_ref()?;
        if items.iter().any(|item| item.claim.is_some()) {
            return None;
        }
        let state = keys_read(items)
            .into_iter()
            .map(|key| after.lasting(key).map(|e| (key.to_vec(), Some(e.clone()))))
            .collect::<Option<KeyStates>>()?;
        Some((foreseen, state))
    }

    /// A group known to have committed: the version it reached, this handle's wake-ups, what
    /// it left for the next groups' checks, and its callers' answers.
    fn committed(&mut self, sent: Sent) -> Vec<WriteAnswer> {
        self.committed.fetch_max(
            u64::try_from(sent.final_version).unwrap_or(0),
            Ordering::AcqRel,
        );
        self.events.notifier.notify(&sent.effects);
        if let Some(attempt) = self.attempt.take() {
            self.woke_readers = attempt.committed(sent.after.clone());
        }
        self.after_commit = Some(sent.after);
        // The next group may be staged against this one's result when nothing else wrote
        // between this committer's last two commits (or this is its first): a store another
        // writer is busy on would refuse every guess, each a round trip lost.
        let quiet = sent.foreseen || self.last_version.is_none_or(|last| last == sent.base);
        self.last_version = Some(sent.final_version);
        self.foreseen = quiet.then_some(Foreseen {
            version: sent.final_version,
            retention_ms: sent.retention_ms,
        });
        sent.answers
    }

    /// Runs the group in one transaction, again on a new connection after a failure that
    /// surely did not commit, and looks its outcome up when a commit's answer was lost.
    async fn run_group(&mut self, items: Vec<WriteRequest>) -> Vec<WriteAnswer> {
        let started = Instant::now();
        let mut pause = Duration::from_millis(20);
        let failed: KvError = loop {
            self.attempt = Some(self.in_flight.begin(&items));
            let attempt = self.try_group(&items).await;
            // Committed, `committed` handed its readers what it left; else they ask the server.
            self.attempt = None;
            if matches!(&attempt, Err(failure) if !matches!(failure, GroupFailure::Mispredicted)) {
                // A failed attempt may have left a transaction open on the connection (its
                // flights stop at the first failure): only a new connection is surely clean (and
                // nothing is foreseen through it until a group has read the store: `try_group`).
                self.connection = None;
            }
            match attempt {
                Ok(answers) => return answers,
                // Rolled back, the connection clean: run it again, reading the store.
                Err(GroupFailure::Mispredicted) => self.foreseen = None,
                Err(GroupFailure::NotCommitted { retry: true, .. })
                    if started.elapsed() < RETRY_FOR =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(GroupFailure::NotCommitted { error, .. }) => break error.into(),
                Err(GroupFailure::Unknown { source, mark, sent }) => {
                    let wait = self.outcome_wait;
                    match outcome::look_up(&self.target, &self.sql, mark, wait).await {
                        Outcome::Committed => return self.committed(sent),
                        // Like any group that surely did not commit: run it again.
                        Outcome::NotCommitted => {}
                        Outcome::Unknown { last } => {
                            break PostgresError::OutcomeUnknown {
                                source,
                                waited: wait,
                                lookup: last,
                            }
                            .into();
                        }
                    }
                }
                Err(GroupFailure::Corrupt(error)) => break error,
            }
        };
        items.iter().map(|_| Err(failed.clone())).collect()
    }
}

impl Drop for WriteGroup {
    /// The committer stopped (its handles gone, or its task ended): no read waits for it.
    fn drop(&mut self) {
        self.in_flight.close();
    }
}

#[async_trait]
impl GroupTransaction for WriteGroup {
    type Item = WriteRequest;
    type Answer = WriteAnswer;

    /// Runs the writes whose checks the last commit has not already failed; those are
    /// answered "check failed" here ([`AfterCommit`]).
    async fn run(&mut self, mut items: Vec<WriteRequest>) -> Vec<WriteAnswer> {
        // Taken: reads of their keys no longer wait for them as queued writes.
        self.in_flight.take(&mut items);
        self.woke_readers = false;
        self.answer(items).await
    }

    fn woke_others(&self) -> bool {
        self.woke_readers
    }

    /// The reads that waited for writes answered without an attempt ask the server.
    fn idle(&mut self) {
        self.in_flight.idle();
    }
}

impl WriteGroup {
    /// Answers the writes whose checks the last commit has already failed, and runs the others.
    async fn answer(&mut self, items: Vec<WriteRequest>) -> Vec<WriteAnswer> {
        let failed: Vec<bool> = match &self.after_commit {
            Some(after) => items.iter().map(|i| after.failed_checks_of(i)).collect(),
            None => return self.run_group(items).await,
        };
        if !failed.contains(&true) {
            return self.run_group(items).await;
        }
        let undecided: Vec<WriteRequest> = items
            .into_iter()
            .zip(&failed)
            .filter(|(_, failed)| !**failed)
            .map(|(item, _)| item)
            .collect();
        let mut ran = if undecided.is_empty() {
            Vec::new()
        } else {
            self.run_group(undecided).await
        }
        .into_iter();
        failed
            .iter()
            .map(|failed| {
                if *failed {
                    Ok(None)
                } else {
                    ran.next().unwrap_or_else(|| {
                        Err(KvError::from(PostgresError::Internal {
                            message: "the group answered fewer writes than it ran".to_owned(),
                        }))
                    })
                }
            })
            .collect()
    }
}

/// The entries of the keys a group reads, as its writes are staged against them (`None`:
/// absent), with the earlier writes' effects.
type KeyStates = BTreeMap<Vec<u8>, Option<StoredEntry>>;

/// What the first flight of a group that reads the store found, staged.
enum Read {
    /// Something commits: the version the store was at (`base`) and the last one the group
    /// took, the change log's retention, what the group leaves, and each write's answer.
    Staged {
        base: i64,
        last: i64,
        retention_ms: Option<i64>,
        outcome: Box<Staged>,
        answers: Vec<WriteAnswer>,
    },
    /// Nothing commits (every write failed a check or was refused): the transaction is rolled
    /// back; `rollback_sent` is false when the connection failed (the server rolls back then).
    NothingCommitted {
        base: i64,
        answers: Vec<WriteAnswer>,
        rollback_sent: bool,
    },
}

/// The first flight of a group that reads the store, on `conn`: BEGIN, the version bump (the
/// row lock), the claims and the rows the checks and sums read, in that order: the read runs
/// after the lock is granted, so under READ COMMITTED its snapshot holds every earlier writer's
/// commit. Then the writes staged against it.
async fn read_and_stage(
    conn: &Prepared,
    items: &[WriteRequest],
    count: i64,
    id: &Uuid,
    identity: DatabaseId,
) -> Result<Read, GroupFailure> {
    let client = &conn.client;
    let claims: Vec<(Uuid, Uuid)> = items.iter().filter_map(|i| i.claim).collect();
    let (claim_ids, claim_leases): (Vec<Uuid>, Vec<Uuid>) = claims.iter().copied().unzip();
    let wanted: Vec<&[u8]> = keys_read(items).into_iter().collect();

    let mut opening: Flight<'_, Vec<Row>> = Flight::new();
    opening
        .send(Box::pin(async move {
            client.batch_execute("BEGIN").await.map(|()| Vec::new())
        }))
        .await?;
    let bump = &conn.bump_version;
    opening
        .send(Box::pin(
            async move { client.query(bump, &[&count, id]).await },
        ))
        .await?;
    if !claims.is_empty() {
        let (claim, ids, leases) = (&conn.claim_leased, &claim_ids, &claim_leases);
        opening
            .send(Box::pin(async move {
                client.query(claim, &[ids, leases]).await
            }))
            .await?;
    }
    if !wanted.is_empty() {
        let (read, keys) = (&conn.read_keys, &wanted);
        opening
            .send(Box::pin(async move { client.query(read, &[keys]).await }))
            .await?;
    }
    let mut answers = opening.answers().await.into_iter();
    let mut next = || answers.next().unwrap_or_else(|| Ok(Vec::new()));
    next()?; // BEGIN
    let bumped = next()?;
    let bumped = bumped.first().ok_or_else(|| PostgresError::Internal {
        message: "the version bump returned no row".to_owned(),
    })?;
    let last: i64 = bumped.try_get(0)?;
    let retention_ms: Option<i64> = bumped.try_get(1)?;
    // Versions are positive and only grow; the row holds the last one handed out.
    let base = last - count;
    let first = u64::try_from(base).unwrap_or(0);
    let claimed: HashSet<Uuid> = if claims.is_empty() {
        HashSet::new()
    } else {
        next()?
            .iter()
            .map(|row| row.try_get::<_, Uuid>(0))
            .collect::<Result<_, _>>()?
    };
    let mut state: KeyStates = wanted.iter().map(|k| (k.to_vec(), None)).collect();
    if !wanted.is_empty() {
        for row in next()? {
            let (key, entry) = codec::stored_entry(&row).map_err(GroupFailure::Corrupt)?;
            state.insert(key, Some(entry));
        }
    }

    let logging = retention_ms.map(|_| identity);
    let (outcome, answers, commits) = stage_group(items, &mut state, first, logging, &claimed);
    if !commits {
        // Nothing committed (every write failed a check or was refused): give the version
        // row back. The ROLLBACK is sent, not waited for: it is on its way before anything
        // this connection sends next, and a connection that fails before the server reads it
        // rolls the transaction back all the same.
        let mut closing: Flight<'_, ()> = Flight::new();
        let sent = closing
            .send(Box::pin(client.batch_execute("ROLLBACK")))
            .await;
        drop(closing);
        return Ok(Read::NothingCommitted {
            base,
            answers,
            rollback_sent: sent.is_ok(),
        });
    }
    Ok(Read::Staged {
        base,
        last,
        retention_ms,
        outcome: Box::new(outcome),
        answers,
    })
}

/// Runs the group's writes through open-deno-kv-model's write path over `state` (the rows they
/// read), write *i* at version `base + i + 1`; a dead letter whose claim is not in `claimed` is
/// answered "not committed" and staged not at all. Also says whether the group commits
/// anything: a surviving write, or a claimed message to delete. A write that changes nothing (no
/// mutations, or a range delete of an empty range) still commits: its versionstamp was handed
/// out and the next commit must get a later one.
fn stage_group(
    items: &[WriteRequest],
    state: &mut KeyStates,
    base: u64,
    logging: Option<DatabaseId>,
    claimed: &HashSet<Uuid>,
) -> (Staged, Vec<WriteAnswer>, bool) {
    let mut outcome = Staged::new(base, logging);
    let answers: Vec<WriteAnswer> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if item.claim.is_some_and(|(id, _)| !claimed.contains(&id)) {
                return Ok(None);
            }
            outcome.stage(state, item, base + i as u64 + 1)
        })
        .collect();
    let commits = !outcome.is_empty()
        || !claimed.is_empty()
        || answers.iter().any(|answer| matches!(answer, Ok(Some(_))));
    (outcome, answers, commits)
}

/// Every key the group's writes read: the checked keys and those of sum, min and max.
fn keys_read(items: &[WriteRequest]) -> BTreeSet<&[u8]> {
    let mut keys = BTreeSet::new();
    for item in items {
        keys.extend(item.write.checks.iter().map(|c| c.key.as_slice()));
        keys.extend(item.write.mutations.iter().filter_map(|m| match m.kind {
            MutationKind::Sum { .. } | MutationKind::Min(_) | MutationKind::Max(_) => {
                Some(m.key.as_slice())
            }
            _ => None,
        }));
    }
    keys
}

/// The change records of a group as the columns of one `INSERT … unnest`.
#[derive(Default)]
struct LogColumns {
    stamps: Vec<Vec<u8>>,
    times: Vec<i64>,
    records: Vec<Vec<u8>>,
}

impl LogColumns {
    fn push(&mut self, record: &ChangeRecord) {
        self.stamps.push(record.versionstamp.as_bytes().to_vec());
        self.times.push(codec::ms(record.at));
        self.records.push(record.encode());
    }
}

/// What the surviving writes of a group leave to store.
struct Staged {
    /// The ranges deleted as a whole, deleted before `writes` are stored.
    deleted_ranges: Vec<KeyRange>,
    /// The final state of every key written: `None` deletes.
    writes: BTreeMap<Vec<u8>, Option<StoredEntry>>,
    enqueued: Vec<QueuedMessage>,
    changed: ChangedKeys,
    /// While the change log is on, the store's identity: each survivor then leaves its record
    /// in `log`, naming it.
    logging: Option<DatabaseId>,
    /// The version of the last survivor so far (the group's base before the first).
    last_version: u64,
    log: LogColumns,
}

impl Staged {
    /// Nothing staged yet, over a store whose last version is `base`.
    fn new(base: u64, logging: Option<DatabaseId>) -> Self {
        Staged {
            deleted_ranges: Vec::new(),
            writes: BTreeMap::new(),
            enqueued: Vec::new(),
            changed: ChangedKeys::default(),
            logging,
            last_version: base,
            log: LogColumns::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.enqueued.is_empty() && self.deleted_ranges.is_empty()
    }

    /// Runs one write through open-deno-kv-model's path over `state` (the rows read under the lock, with
    /// the earlier survivors' effects) at `version`, and keeps its effects (and, while logging,
    /// its record) if it commits.
    fn stage(&mut self, state: &mut KeyStates, item: &WriteRequest, version: u64) -> WriteAnswer {
        let stamp = Versionstamp::from_version(version, 0);
        let read = |key: &[u8]| match state.get(key) {
            Some(entry) => Ok(entry.clone()),
            None => Err(PostgresError::Internal {
                message: format!("key {key:x?} was not read under the lock"),
            }
            .into()),
        };
        let Some(mut staged) = stage_atomic_write(read, &item.write, stamp, item.now)? else {
            return Ok(None);
        };
        if let Some(database) = self.logging {
            // Encoded here, the staged effects lent to the record and taken back: no copy.
            let record = ChangeRecord {
                database: Some(database),
                versionstamp: stamp,
                previous: Versionstamp::from_version(self.last_version, 0),
                at: item.now,
                changes: staged,
            };
            self.log.push(&record);
            staged = record.changes;
        }
        self.last_version = version;
        self.changed.merge(staged.changed());
        for range in staged.deleted_ranges {
            if range.is_empty() {
                continue; // `BTreeMap::range_mut` refuses an inverted range
            }
            // What earlier survivors wrote inside the range goes with it, and the rows read under
            // the lock are gone for the writes after this one.
            self.writes.retain(|key, _| !range.contains(key));
            for (_, entry) in state.range_mut(range.start.clone()..range.end.clone()) {
                *entry = None;
            }
            self.deleted_ranges.push(range);
        }
        for (key, entry) in staged.writes {
            state.insert(key.clone(), entry.clone());
            self.writes.insert(key, entry);
        }
        self.enqueued.extend(staged.enqueued);
        Ok(Some(CommitResult {
            versionstamp: stamp,
        }))
    }
}

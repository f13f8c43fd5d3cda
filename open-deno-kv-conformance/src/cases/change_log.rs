//! Beyond Deno KV: the change log and point-in-time restores ([`Backend::configure_change_log`],
//! [`Backend::read_change_log`], [`open_deno_kv_model::change_log::restore`]). Cases run only
//! where the backend reports [`Capabilities::change_log`](open_deno_kv_model::Capabilities::change_log); restores also need backups.
//!
//! The log must hold every commit's effects exactly (a `sum` as the value it stored, a range
//! delete as its range), nothing of a write whose check failed, in commit order with an unbroken
//! chain; and a restore to any logged commit must give the store exactly as it was right after
//! that commit, which the last case checks against states it recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use open_deno_kv_model::change_log::{ChangeRecord, MAX_READ, PRUNE_EVERY, RestorePoint, restore};
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, Enqueue, KeyRange, KvEntry, KvValue, Mutation, MutationKind,
    Snapshot, SnapshotItem, SnapshotOrigin, StoredEntry, Versionstamp, key,
};

use crate::cases::need;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        need::CHANGE_LOG.case(
            "the_log_is_off_until_switched_on",
            the_log_is_off_until_switched_on,
        ),
        need::CHANGE_LOG.case(
            "a_record_holds_what_its_commit_stored",
            a_record_holds_what_its_commit_stored,
        ),
        need::CHANGE_LOG
            .and(need::RANGE_DELETE)
            .and(need::QUEUES)
            .case(
                "range_deletes_and_enqueues_are_logged",
                range_deletes_and_enqueues_are_logged,
            ),
        need::CHANGE_LOG.case(
            "concurrent_commits_are_logged_in_an_unbroken_chain",
            concurrent_commits_are_logged_in_an_unbroken_chain,
        ),
        need::CHANGE_LOG.case(
            "switching_the_log_off_deletes_it",
            switching_the_log_off_deletes_it,
        ),
        need::CHANGE_LOG.and(need::REOPEN).case(
            "the_setting_and_the_records_survive_a_reopen",
            the_setting_and_the_records_survive_a_reopen,
        ),
        need::CHANGE_LOG.case(
            "records_older_than_the_retention_are_pruned",
            records_older_than_the_retention_are_pruned,
        ),
        need::CHANGE_LOG
            .and(need::BACKUP)
            .case(
                "a_restore_to_twenty_random_past_commits_gives_the_states_recorded",
                a_restore_to_twenty_random_past_commits_gives_the_states_recorded,
            )
            .with_timeout(Duration::from_secs(120)),
        need::CHANGE_LOG
            .and(need::BACKUP)
            .and(need::QUEUE_INSPECTION)
            .case(
                "a_restore_holds_the_messages_enqueued_up_to_its_commit",
                a_restore_holds_the_messages_enqueued_up_to_its_commit,
            ),
        need::CHANGE_LOG.and(need::BACKUP).case(
            "a_replay_never_crosses_an_import",
            a_replay_never_crosses_an_import,
        ),
        need::CHANGE_LOG.and(need::BACKUP).case(
            "a_restore_refuses_points_the_log_cannot_reach",
            a_restore_refuses_points_the_log_cannot_reach,
        ),
        need::CHANGE_LOG
            .and(need::EXPORT)
            .case("records_name_their_database", records_name_their_database),
        need::CHANGE_LOG.and(need::BACKUP).case(
            "a_restore_refuses_a_log_or_backup_of_another_database",
            a_restore_refuses_a_log_or_backup_of_another_database,
        ),
        need::CHANGE_LOG.and(need::BACKUP).case(
            "a_time_before_the_backup_is_refused_like_a_commit_before_it",
            a_time_before_the_backup_is_refused_like_a_commit_before_it,
        ),
    ]
}

const HOUR: Duration = Duration::from_secs(3600);

async fn switch_on(kv: &dyn Backend, retention: Duration) {
    kv.configure_change_log(Some(retention))
        .await
        .unwrap_or_else(|e| panic!("configure_change_log(on) failed: {e}"));
}

/// Every record of the log after `after`, page by page.
async fn log_after(kv: &dyn Backend, after: Versionstamp) -> Vec<ChangeRecord> {
    let mut records = Vec::new();
    let mut cursor = after;
    loop {
        let page = kv
            .read_change_log(cursor, MAX_READ)
            .await
            .unwrap_or_else(|e| panic!("read_change_log failed: {e}"));
        let Some(last) = page.last() else {
            return records;
        };
        cursor = last.versionstamp;
        records.extend(page);
    }
}

async fn whole_log(kv: &dyn Backend) -> Vec<ChangeRecord> {
    log_after(kv, Versionstamp::ZERO).await
}

fn stored_at(record: &ChangeRecord, key: &open_deno_kv_model::Key) -> Option<StoredEntry> {
    record
        .changes
        .writes
        .get(&enc(key))
        .unwrap_or_else(|| panic!("the record of {} does not name {key}", record.versionstamp))
        .clone()
}

async fn the_log_is_off_until_switched_on(env: Env) {
    let kv = &*env.kv;
    let status = kv.change_log_status().await.expect("status");
    assert_eq!(
        (status.retention, status.records),
        (None, 0),
        "off by default"
    );
    set(kv, &key!["before"], KvValue::U64(1)).await;
    assert!(whole_log(kv).await.is_empty(), "nothing logged while off");
    switch_on(kv, HOUR).await;
    let status = kv.change_log_status().await.expect("status");
    assert_eq!((status.retention, status.records), (Some(HOUR), 0));
    let stamp = set(kv, &key!["after"], KvValue::U64(2)).await;
    let log = whole_log(kv).await;
    assert_eq!(log.len(), 1, "exactly the commit after switching on");
    assert_eq!(log[0].versionstamp, stamp);
    let status = kv.change_log_status().await.expect("status");
    assert_eq!(status.records, 1);
    let first = status.first.expect("a first record");
    assert_eq!(status.last, Some(first));
    assert_eq!(first.versionstamp, stamp);
    assert_eq!(
        first.at,
        env.clock().now(),
        "the commit's time on the store's clock"
    );
}

async fn a_record_holds_what_its_commit_stored(env: Env) {
    let kv = &*env.kv;
    let seed = set(kv, &key!["n"], KvValue::U64(40)).await;
    switch_on(kv, HOUR).await;
    let expires = env.clock().now() + chrono::TimeDelta::minutes(5);
    let sum = commit(
        kv,
        AtomicWrite {
            mutations: vec![
                mutation(
                    &key!["n"],
                    MutationKind::Sum {
                        value: KvValue::U64(2),
                        min_v8: vec![],
                        max_v8: vec![],
                        clamp: false,
                    },
                ),
                Mutation {
                    expire_at: Some(expires),
                    ..Mutation::set(enc(&key!["brief"]), v8_string("soon gone"))
                },
            ],
            ..Default::default()
        },
    )
    .await;
    // A write whose check fails is not a commit: not logged.
    let refused = kv
        .atomic_write(AtomicWrite {
            checks: vec![check(&key!["n"], Some(seed))],
            mutations: vec![Mutation::set(enc(&key!["n"]), KvValue::U64(0))],
            ..Default::default()
        })
        .await
        .expect("a failed check is an answer");
    assert!(refused.is_none(), "the check must fail");
    env.advance(Duration::from_secs(3));
    let deleted = delete(kv, &key!["n"]).await;
    let log = whole_log(kv).await;
    assert_eq!(
        log.iter().map(|r| r.versionstamp).collect::<Vec<_>>(),
        vec![sum, deleted],
        "the two commits, in order, and not the refused write"
    );
    assert_eq!(log[0].previous, seed, "the sum follows the seed's commit");
    assert_eq!(log[1].previous, sum);
    assert_eq!(
        stored_at(&log[0], &key!["n"]),
        Some(StoredEntry {
            value: KvValue::U64(42),
            versionstamp: sum,
            expires_at: None,
        }),
        "a sum is logged as the value it stored"
    );
    assert_eq!(
        stored_at(&log[0], &key!["brief"]).and_then(|e| e.expires_at),
        Some(expires)
    );
    assert_eq!(stored_at(&log[1], &key!["n"]), None, "a deletion");
    assert_eq!(log[1].at - log[0].at, chrono::TimeDelta::seconds(3));
}

async fn range_deletes_and_enqueues_are_logged(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    let range = KeyRange::new(enc(&key!["a"]), enc(&key!["m"]));
    let stamp = commit(
        kv,
        AtomicWrite {
            mutations: vec![
                Mutation::set(enc(&key!["b"]), KvValue::U64(1)),
                Mutation::delete_range(range.clone()),
                Mutation::set(enc(&key!["c"]), KvValue::U64(2)),
            ],
            enqueues: vec![Enqueue {
                payload: match v8_string("job") {
                    KvValue::V8(bytes) => bytes.to_vec(),
                    _ => unreachable!("v8_string is V8"),
                },
                ready_at: env.clock().now() + chrono::TimeDelta::hours(1),
                keys_if_undelivered: vec![enc(&key!["failed"])],
                backoff_schedule: Some(vec![5, 50]),
            }],
            ..Default::default()
        },
    )
    .await;
    let log = whole_log(kv).await;
    assert_eq!(log.len(), 1);
    let changes = &log[0].changes;
    assert_eq!(log[0].versionstamp, stamp);
    assert_eq!(changes.deleted_ranges, vec![range]);
    assert_eq!(
        changes.writes.keys().cloned().collect::<Vec<_>>(),
        vec![enc(&key!["c"])],
        "the key set before the range delete went with it; the one set after stays"
    );
    assert_eq!(changes.enqueued.len(), 1);
    let message = &changes.enqueued[0];
    assert_eq!(message.keys_if_undelivered, vec![enc(&key!["failed"])]);
    assert_eq!(message.backoff_schedule, vec![5, 50]);
    let queued = kv.queued_messages().await.expect("queue");
    assert_eq!(queued.len(), 1);
    assert_eq!(
        queued[0].id, message.id,
        "the logged message is the queued one"
    );
}

async fn concurrent_commits_are_logged_in_an_unbroken_chain(env: Env) {
    let kv = env.kv.clone();
    let before = set(&*kv, &key!["start"], KvValue::U64(0)).await;
    switch_on(&*kv, HOUR).await;
    let writers: Vec<_> = (0..64u64)
        .map(|i| {
            let kv = kv.clone();
            tokio::spawn(async move { set(&*kv, &key!["w", i], KvValue::U64(i)).await })
        })
        .collect();
    let mut stamps = Vec::new();
    for writer in writers {
        stamps.push(writer.await.unwrap_or_else(|e| panic!("writer: {e}")));
    }
    stamps.sort();
    let log = whole_log(&*kv).await;
    assert_eq!(
        log.iter().map(|r| r.versionstamp).collect::<Vec<_>>(),
        stamps,
        "every commit once, in commit order"
    );
    let mut previous = before;
    for record in &log {
        assert_eq!(
            record.previous, previous,
            "the chain at {}",
            record.versionstamp
        );
        previous = record.versionstamp;
    }
    // Pages: reading after each record gives the rest.
    let tail = log_after(&*kv, log[40].versionstamp).await;
    assert_eq!(tail, log[41..].to_vec());
    let page = kv.read_change_log(before, 10).await.expect("page");
    assert_eq!(page, log[..10].to_vec());
}

async fn switching_the_log_off_deletes_it(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    for i in 0..5u64 {
        set(kv, &key!["k", i], KvValue::U64(i)).await;
    }
    assert_eq!(whole_log(kv).await.len(), 5);
    kv.configure_change_log(None).await.expect("switch off");
    let status = kv.change_log_status().await.expect("status");
    assert_eq!((status.retention, status.records), (None, 0));
    assert!(whole_log(kv).await.is_empty(), "the records are deleted");
    set(kv, &key!["later"], KvValue::U64(9)).await;
    assert!(whole_log(kv).await.is_empty(), "nothing logged while off");
}

async fn the_setting_and_the_records_survive_a_reopen(mut env: Env) {
    switch_on(&*env.kv, HOUR).await;
    let first = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    env.reopen().await.expect("reopen");
    let status = env.kv.change_log_status().await.expect("status");
    assert_eq!((status.retention, status.records), (Some(HOUR), 1));
    let second = set(&*env.kv, &key!["b"], KvValue::U64(2)).await;
    let log = whole_log(&*env.kv).await;
    assert_eq!(
        log.iter()
            .map(|r| (r.previous, r.versionstamp))
            .collect::<Vec<_>>()[1..],
        [(first, second)],
        "the reopened handle keeps logging, in the same chain"
    );
}

async fn records_older_than_the_retention_are_pruned(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, Duration::from_secs(60)).await;
    let mut old = Vec::new();
    for i in 0..10u64 {
        old.push(set(kv, &key!["old", i], KvValue::U64(i)).await);
    }
    env.advance(Duration::from_secs(120));
    // Enough commits for the writer's pruning to come due, however it counts.
    let mut new = Vec::new();
    for i in 0..u64::from(PRUNE_EVERY) * 2 {
        new.push(set(kv, &key!["new", i % 8], KvValue::U64(i)).await);
    }
    let log = whole_log(kv).await;
    let logged: Vec<Versionstamp> = log.iter().map(|r| r.versionstamp).collect();
    assert!(
        old.iter().all(|stamp| !logged.contains(stamp)),
        "records older than the retention are pruned"
    );
    assert_eq!(logged, new, "records within the retention all stay");
    let status = kv.change_log_status().await.expect("status");
    assert_eq!(status.records, new.len() as u64);
    assert_eq!(status.first.map(|m| m.versionstamp), new.first().copied());
}

/// The store as [`Backend::export_snapshot`] gives it, entries only.
async fn entries_now(kv: &dyn Backend) -> (Versionstamp, Vec<KvEntry>) {
    let snapshot = kv.export_snapshot().await.expect("export");
    let items: Vec<SnapshotItem> = snapshot.items.try_collect().await.expect("export stream");
    let entries = items
        .into_iter()
        .filter_map(|item| match item {
            SnapshotItem::Entry(entry) => Some(entry),
            SnapshotItem::Message(_) => None,
        })
        .collect();
    (snapshot.versionstamp, entries)
}

/// A backup held in memory, to restore from many times: its header and items.
async fn backup_items(kv: &dyn Backend) -> (SnapshotOrigin, Vec<SnapshotItem>) {
    let snapshot = kv.export_snapshot().await.expect("export");
    let origin = snapshot.origin();
    let items = snapshot.items.try_collect().await.expect("export stream");
    (origin, items)
}

/// The backup `origin` and `items` describe, as a snapshot to restore.
fn backup_of(origin: SnapshotOrigin, items: Vec<SnapshotItem>) -> Snapshot {
    Snapshot::from_items(origin.versionstamp, items).of_database(origin.database)
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One random commit over a small key space: sets, sums, deletes and (where offered) range
/// deletes.
fn random_write(dice: &mut Dice, range_delete: bool) -> AtomicWrite {
    let key = |dice: &mut Dice| enc(&key!["k", dice.below(16)]);
    let mutations = (0..1 + dice.below(3))
        .map(|_| match dice.below(if range_delete { 5 } else { 4 }) {
            0 => Mutation::delete(key(dice)),
            1 => Mutation {
                key: key(dice),
                kind: MutationKind::Max(KvValue::U64(dice.below(1000))),
                expire_at: None,
            },
            4 => {
                let (a, b) = (key(dice), key(dice));
                Mutation::delete_range(KeyRange::new(a.clone().min(b.clone()), a.max(b)))
            }
            _ => Mutation::set(key(dice), KvValue::U64(dice.below(1000))),
        })
        .collect();
    AtomicWrite {
        mutations,
        ..Default::default()
    }
}

async fn a_restore_to_twenty_random_past_commits_gives_the_states_recorded(env: Env) {
    let kv = &*env.kv;
    let range_delete = env.offered.capabilities.range_delete;
    let mut dice = Dice(0x5eed_0018);
    for _ in 0..10 {
        commit(kv, random_write(&mut dice, range_delete)).await;
    }
    switch_on(kv, HOUR).await;
    for _ in 0..5 {
        commit(kv, random_write(&mut dice, range_delete)).await;
    }
    let (origin, backup_items) = backup_items(kv).await;
    let backup = origin.versionstamp;
    // The state right after each commit from the backup on, as the store showed it then.
    let mut states: BTreeMap<Versionstamp, Vec<KvEntry>> = BTreeMap::new();
    states.insert(backup, entries_now(kv).await.1);
    let mut times = BTreeMap::new();
    for _ in 0..60 {
        env.advance(Duration::from_secs(1));
        let stamp = commit(kv, random_write(&mut dice, range_delete)).await;
        let (at, entries) = entries_now(kv).await;
        assert_eq!(at, stamp, "nothing else commits");
        states.insert(stamp, entries);
        times.insert(stamp, env.clock().now());
    }
    let commits: Vec<Versionstamp> = states.keys().copied().collect();
    for round in 0..20 {
        let point = commits[dice.below(commits.len() as u64) as usize];
        let target = env.fresh().await.expect("a fresh store");
        let snapshot = backup_of(origin, backup_items.clone());
        // Half the rounds name the commit, half its time.
        let by_time = round % 2 == 1 && point != backup;
        let wanted = if by_time {
            RestorePoint::Time(times[&point])
        } else {
            RestorePoint::Commit(point)
        };
        let restored = restore(snapshot, kv, wanted, &*target.kv)
            .await
            .unwrap_or_else(|e| panic!("restore to {point} ({wanted:?}) failed: {e}"));
        assert_eq!(restored.versionstamp, point, "round {round}: {wanted:?}");
        let (versionstamp, entries) = entries_now(&*target.kv).await;
        assert_eq!(
            versionstamp, point,
            "the restored store stands at the commit"
        );
        assert_eq!(
            entries, states[&point],
            "round {round}: the restore to {point} differs from the state recorded then"
        );
        target.kv.close().await.expect("close");
    }
}

async fn a_restore_holds_the_messages_enqueued_up_to_its_commit(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    let later = env.clock().now() + chrono::TimeDelta::hours(1);
    let enqueue = |text: &str| AtomicWrite {
        enqueues: vec![Enqueue {
            payload: match v8_string(text) {
                KvValue::V8(bytes) => bytes.to_vec(),
                _ => unreachable!("v8_string is V8"),
            },
            ready_at: later,
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..Default::default()
    };
    let ids = || async {
        let mut ids: Vec<_> = kv
            .queued_messages()
            .await
            .expect("queue")
            .into_iter()
            .map(|m| m.id)
            .collect();
        ids.sort();
        ids
    };
    commit(kv, enqueue("in the backup")).await;
    let (origin, items) = backup_items(kv).await;
    let second = commit(kv, enqueue("logged")).await;
    let expected = ids().await;
    commit(kv, enqueue("after the point")).await;
    assert_eq!(ids().await.len(), 3);
    let target = env.fresh().await.expect("a fresh store");
    restore(
        backup_of(origin, items),
        kv,
        RestorePoint::Commit(second),
        &*target.kv,
    )
    .await
    .expect("restore");
    let mut restored: Vec<_> = target
        .kv
        .queued_messages()
        .await
        .expect("queue")
        .into_iter()
        .map(|m| m.id)
        .collect();
    restored.sort();
    assert_eq!(
        restored, expected,
        "the backup's message and the logged one, not the later one"
    );
}

async fn a_restore_refuses_points_the_log_cannot_reach(env: Env) {
    let kv = &*env.kv;
    let early = set(kv, &key!["a"], KvValue::U64(0)).await;
    set(kv, &key!["a"], KvValue::U64(1)).await; // the backup's commit
    switch_on(kv, HOUR).await;
    let (origin, items) = backup_items(kv).await;
    let one = set(kv, &key!["a"], KvValue::U64(2)).await;
    let two = set(kv, &key!["a"], KvValue::U64(3)).await;
    let env = &env;
    let attempt = |point: RestorePoint| {
        let items = items.clone();
        async move {
            let target = env.fresh().await.expect("a fresh store");
            let result = restore(backup_of(origin, items), kv, point, &*target.kv).await;
            let (_, entries) = entries_now(&*target.kv).await;
            (result, entries)
        }
    };
    let (result, entries) = attempt(RestorePoint::Commit(early)).await;
    let err = result.expect_err("a point before the backup");
    assert!(err.to_string().contains("older than the backup"), "{err}");
    assert!(entries.is_empty(), "a refused restore writes nothing");
    let beyond = Versionstamp::from_version(two.version() + 100, 0);
    let err = attempt(RestorePoint::Commit(beyond))
        .await
        .0
        .expect_err("beyond the log");
    assert!(err.to_string().contains("ends at commit"), "{err}");
    let between = Versionstamp::from_version(one.version(), 1);
    if between < two {
        let err = attempt(RestorePoint::Commit(between))
            .await
            .0
            .expect_err("no such commit");
        assert!(err.to_string().contains("holds no commit"), "{err}");
    }
    // Off and on again: the commits in between are not logged, and the chain shows it.
    kv.configure_change_log(None).await.expect("off");
    set(kv, &key!["unlogged"], KvValue::U64(4)).await;
    switch_on(kv, HOUR).await;
    let three = set(kv, &key!["a"], KvValue::U64(5)).await;
    let err = attempt(RestorePoint::Commit(three))
        .await
        .0
        .expect_err("a gap");
    assert!(err.to_string().contains("gap"), "{err}");
}

/// An import is not a commit and has no record: a replay from a backup taken before it is
/// refused at the import (it would miss the imported data), one from a backup taken after it
/// replays.
async fn a_replay_never_crosses_an_import(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    set(kv, &key!["a"], KvValue::U64(1)).await;
    let (old_backup, old_items) = backup_items(kv).await;
    set(kv, &key!["b"], KvValue::U64(2)).await;
    let (snapshot, snapshot_items) = backup_items(kv).await;
    let snapshot = snapshot.versionstamp;
    // Emptied by commits, then the snapshot imported back.
    let emptied = commit(
        kv,
        AtomicWrite {
            mutations: vec![
                Mutation::delete(enc(&key!["a"])),
                Mutation::delete(enc(&key!["b"])),
            ],
            ..Default::default()
        },
    )
    .await;
    kv.import_snapshot(Snapshot::from_items(snapshot, snapshot_items))
        .await
        .expect("import into the emptied store");
    let after_import = set(kv, &key!["c"], KvValue::U64(3)).await;
    assert!(
        after_import > emptied,
        "a versionstamp is never handed out twice: {after_import} after {emptied}"
    );
    let target = env.fresh().await.expect("a fresh store");
    let err = restore(
        backup_of(old_backup, old_items),
        kv,
        RestorePoint::Commit(after_import),
        &*target.kv,
    )
    .await
    .expect_err("across the import");
    assert!(err.to_string().contains("gap"), "{err}");
    let (new_backup, new_items) = backup_items(kv).await;
    let later = set(kv, &key!["d"], KvValue::U64(4)).await;
    let (_, expected) = entries_now(kv).await;
    let target = env.fresh().await.expect("a fresh store");
    restore(
        backup_of(new_backup, new_items),
        kv,
        RestorePoint::Commit(later),
        &*target.kv,
    )
    .await
    .expect("a backup taken after the import replays");
    assert_eq!(entries_now(&*target.kv).await.1, expected);
}

/// Every record names the database it was made in, the one its status and its exports name.
async fn records_name_their_database(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    set(kv, &key!["a"], KvValue::U64(1)).await;
    set(kv, &key!["b"], KvValue::U64(2)).await;
    let status = kv.change_log_status().await.expect("status");
    let database = status.database.expect("the status names the database");
    let (origin, _) = backup_items(kv).await;
    assert_eq!(origin.database, Some(database), "the export names the same");
    let log = whole_log(kv).await;
    assert_eq!(log.len(), 2);
    for record in log {
        assert_eq!(record.database, Some(database), "{}", record.versionstamp);
    }
}

/// Issue 29: `kv restore --at V --log OTHER` spliced another database's log onto the backup
/// and reported success. Two stores that made the same commits have logs that chain from
/// either one's backup; the identities tell them apart. A backup that names no database
/// (written before identities) is refused for a splice too, and still restores alone.
async fn a_restore_refuses_a_log_or_backup_of_another_database(env: Env) {
    let kv = &*env.kv;
    let other = env.fresh().await.expect("a second store");
    for store in [kv, &*other.kv] {
        switch_on(store, HOUR).await;
        set(store, &key!["a"], KvValue::U64(1)).await;
    }
    let (origin, items) = backup_items(kv).await;
    let (other_origin, _) = backup_items(&*other.kv).await;
    let ours = origin.database.expect("our identity");
    let theirs = other_origin.database.expect("their identity");
    let mut their_last = origin.versionstamp;
    for i in 0..3u64 {
        set(kv, &key!["ours", i], KvValue::U64(i)).await;
        their_last = set(&*other.kv, &key!["theirs", i], KvValue::U64(i)).await;
    }
    let attempt = |source: &'static str, backup: Snapshot, point: Versionstamp| {
        let log: &dyn Backend = if source == "ours" { kv } else { &*other.kv };
        let env = &env;
        async move {
            let target = env.fresh().await.expect("a fresh store");
            let result = restore(backup, log, RestorePoint::Commit(point), &*target.kv).await;
            let (_, entries) = entries_now(&*target.kv).await;
            (result, entries)
        }
    };
    let (result, entries) = attempt(
        "theirs",
        backup_of(origin, items.clone()),
        their_last.max(origin.versionstamp),
    )
    .await;
    let err = result.expect_err("another database's log").to_string();
    assert!(
        err.contains(&ours.to_string()) && err.contains(&theirs.to_string()),
        "the refusal names both databases: {err}"
    );
    assert!(entries.is_empty(), "a refused restore writes nothing");

    let unnamed = Snapshot::from_items(origin.versionstamp, items.clone());
    let (result, _) = attempt("ours", unnamed, their_last.max(origin.versionstamp)).await;
    let err = result.expect_err("a backup naming no database").to_string();
    assert!(err.contains("names no database"), "{err}");
    let target = env.fresh().await.expect("a fresh store");
    target
        .kv
        .import_snapshot(Snapshot::from_items(origin.versionstamp, items))
        .await
        .expect("a backup naming no database still imports alone");
}

/// Issue 29: `--at TIME` before the backup restored the backup's later state, while the same
/// point as a versionstamp was refused. A time is compared with the time of the backup's own
/// commit: before it is refused, at or after it gives the backup (or a later commit).
async fn a_time_before_the_backup_is_refused_like_a_commit_before_it(env: Env) {
    let kv = &*env.kv;
    switch_on(kv, HOUR).await;
    set(kv, &key!["a"], KvValue::U64(1)).await;
    let early = env.clock().now();
    env.advance(Duration::from_secs(10));
    let backup_commit = set(kv, &key!["a"], KvValue::U64(2)).await;
    let backup_at = env.clock().now();
    let (origin, items) = backup_items(kv).await;
    assert_eq!(origin.versionstamp, backup_commit);
    env.advance(Duration::from_secs(10));
    let later = set(kv, &key!["a"], KvValue::U64(3)).await;
    let env = &env;
    let attempt = |at: chrono::DateTime<chrono::Utc>, items: Vec<SnapshotItem>| async move {
        let target = env.fresh().await.expect("a fresh store");
        let result = restore(
            backup_of(origin, items),
            kv,
            RestorePoint::Time(at),
            &*target.kv,
        )
        .await;
        let (_, entries) = entries_now(&*target.kv).await;
        (result, entries)
    };
    for before in [early, backup_at - chrono::TimeDelta::milliseconds(1)] {
        let (result, entries) = attempt(before, items.clone()).await;
        let err = result.expect_err("a time before the backup").to_string();
        assert!(err.contains("before the backup"), "{err}");
        assert!(entries.is_empty(), "a refused restore writes nothing");
    }
    let (result, _) = attempt(backup_at, items.clone()).await;
    assert_eq!(
        result.expect("the backup's own time").versionstamp,
        backup_commit
    );
    let (result, _) = attempt(backup_at + chrono::TimeDelta::seconds(5), items.clone()).await;
    assert_eq!(
        result.expect("between two commits").versionstamp,
        backup_commit
    );
    let (result, _) = attempt(backup_at + chrono::TimeDelta::seconds(10), items).await;
    assert_eq!(result.expect("the later commit").versionstamp, later);
}

use std::time::Duration;

use open_deno_kv_engine_kit::{
    AtomicWrite, Check, CommitResult, Enqueue, KvValue, ManualClock, MutationKind, Versionstamp,
    encode_key, key,
};
use redb::ReadableDatabase;
use tokio::sync::oneshot;

use super::*;
use crate::codec::EntryRecord;
use crate::schema::{ENTRIES, EXPIRY, QUEUE_READY, QUEUE_RUNNING};

fn k(name: &str) -> Vec<u8> {
    encode_key(&key![name]).expect("key")
}

fn set(name: &str, n: u64) -> open_deno_kv_engine_kit::Mutation {
    open_deno_kv_engine_kit::Mutation::set(k(name), KvValue::U64(n))
}

fn thread_on(path: &std::path::Path, clock: &ManualClock) -> GroupState {
    thread_with(path, clock, Durability::Immediate)
}

fn thread_with(path: &std::path::Path, clock: &ManualClock, durability: Durability) -> GroupState {
    let db = Arc::new(
        crate::file::DbSlot::open_writable(path, Arc::new(crate::file::FileStorage), false)
            .expect("open"),
    );
    GroupState::prepare(
        db,
        Arc::new(clock.clone()),
        durability,
        Arc::new(Notifier::new()),
        Arc::new(ReadSnapshot::default()),
        Arc::new(crate::commit_clock::CommitClock::default()),
    )
    .expect("prepare")
}

fn write_command(
    write: AtomicWrite,
    now: DateTime<Utc>,
) -> (
    Command,
    oneshot::Receiver<Result<Option<CommitResult>, KvError>>,
) {
    let write = open_deno_kv_engine_kit::Limits::deno()
        .accept_atomic_write(write, now)
        .expect("valid");
    let (reply, answer) = oneshot::channel();
    (Change::Write { write, now, reply }, answer)
}

/// A take by handle 1 at `now`, and where its answer arrives.
fn take_command(
    now: DateTime<Utc>,
) -> (
    Command,
    oneshot::Receiver<Result<Taken<queue::Engine>, KvError>>,
) {
    let (reply, answer) = oneshot::channel();
    let take: Command = Change::Take {
        owner: 1,
        now,
        engine: Arc::new(queue::SettlesNothing),
        reply,
    };
    (take, answer)
}

fn stored(db: &Database, name: &str) -> Option<(u64, Versionstamp)> {
    let txn = db.begin_read().expect("read");
    let table = txn.open_table(ENTRIES).expect("table");
    let guard = table.get(k(name).as_slice()).expect("get")?;
    let record = EntryRecord::decode(guard.value()).expect("decode");
    match record.value().expect("value") {
        KvValue::U64(n) => Some((n, record.versionstamp)),
        other => panic!("unexpected {other:?}"),
    }
}

fn rows(db: &Database, table: redb::TableDefinition<&[u8], &[u8]>) -> usize {
    let txn = db.begin_read().expect("read");
    let table = txn.open_table(table).expect("table");
    table.iter().expect("iter").count()
}

/// One group holding a commit, a failed check, a refused write and another commit: the
/// failures leave no trace, the commits land with consecutive versionstamps, and the failed
/// check saw the group's earlier write.
#[test]
fn a_failed_or_refused_write_does_not_disturb_its_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let mut thread = thread_on(&dir.path().join("kv.redb"), &clock);
    let now = clock.now();
    let text = KvValue::V8(vec![0xff, 0x0f, b'"', 1, b'x'].into());
    let first = AtomicWrite {
        mutations: vec![
            set("a", 1),
            open_deno_kv_engine_kit::Mutation::set(k("text"), text.clone()),
        ],
        ..Default::default()
    };
    let check_fails = AtomicWrite {
        checks: vec![Check {
            key: k("a"),
            versionstamp: None,
        }],
        mutations: vec![set("b", 2)],
        enqueues: vec![Enqueue {
            payload: vec![1],
            ready_at: now,
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
    };
    let refused = AtomicWrite {
        mutations: vec![
            set("c", 3),
            open_deno_kv_engine_kit::Mutation {
                key: k("text"),
                kind: MutationKind::Sum {
                    value: KvValue::U64(1),
                    min_v8: vec![],
                    max_v8: vec![],
                    clamp: false,
                },
                expire_at: None,
            },
        ],
        ..Default::default()
    };
    let second = AtomicWrite {
        checks: vec![Check {
            key: k("a"),
            versionstamp: Some(Versionstamp::from_version(1, 0)),
        }],
        mutations: vec![set("d", 4)],
        ..Default::default()
    };
    let mut answers = Vec::new();
    let mut group = Vec::new();
    for write in [first, check_fails, refused, second] {
        let (command, answer) = write_command(write, now);
        group.push(command);
        answers.push(answer);
    }
    thread.run_group(group);
    let results: Vec<_> = answers
        .into_iter()
        .map(|mut a| a.try_recv().expect("answered"))
        .collect();
    let stamp = |n| Versionstamp::from_version(n, 0);
    assert_eq!(
        results[0].as_ref().expect("first").map(|c| c.versionstamp),
        Some(stamp(1))
    );
    assert_eq!(results[1].as_ref().expect("check fails"), &None);
    assert!(matches!(results[2], Err(KvError::Mutation { .. })));
    assert_eq!(
        results[3].as_ref().expect("second").map(|c| c.versionstamp),
        Some(stamp(2)),
        "a failed write hands out no versionstamp"
    );
    assert_eq!(stored(&thread.test_db(), "a"), Some((1, stamp(1))));
    assert_eq!(stored(&thread.test_db(), "d"), Some((4, stamp(2))));
    assert_eq!(stored(&thread.test_db(), "b"), None);
    assert_eq!(stored(&thread.test_db(), "c"), None);
    assert_eq!(
        rows(&thread.test_db(), QUEUE_READY),
        0,
        "nothing was enqueued"
    );
}

/// A file as a crashed process leaves it (a message moved to running, never finished) gets
/// the message requeued, as a failed delivery, when it is opened again.
#[test]
fn a_message_left_running_by_a_crash_is_requeued_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let thread = thread_on(&path, &clock);
        let txn = thread.test_db().begin_write().expect("txn");
        {
            let mut tables = Tables::new(&txn);
            let message = open_deno_kv_engine_kit::queue::QueuedMessage::new(
                vec![7],
                clock.now(),
                vec![],
                vec![100, 1_000],
            );
            tables.insert_ready(&message).expect("enqueue");
            let mut last_version = 0;
            let mut queue = RedbQueue {
                tables: &mut tables,
                last_version: &mut last_version,
            };
            let taken = kit::take_due(&mut queue, clock.now());
            assert!(matches!(taken, Ok(kit::Due::Message(..))));
        }
        txn.commit().expect("commit");
        assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 1);
        assert_eq!(rows(&thread.test_db(), QUEUE_READY), 0);
    }
    clock.advance(Duration::from_secs(30));
    let mut thread = thread_on(&path, &clock);
    assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 0);
    assert_eq!(rows(&thread.test_db(), QUEUE_READY), 1);
    let take = |thread: &mut GroupState, now| {
        let (command, mut answer) = take_command(now);
        thread.run_group(vec![command]);
        answer.try_recv().expect("answered").expect("take")
    };
    match take(&mut thread, clock.now()) {
        Taken::NextAt(Some(at)) => {
            assert_eq!(at, clock.now() + chrono::TimeDelta::milliseconds(100));
        }
        _ => panic!("the retry waits for its first interval"),
    }
    clock.advance(Duration::from_millis(100));
    match take(&mut thread, clock.now()) {
        Taken::Message(delivery) => assert_eq!(delivery.hand_over().payload(), vec![7]),
        _ => panic!("the message is delivered again"),
    }
}

/// In Immediate mode a write is synced at its commit; a take and a finish are queue
/// bookkeeping, committed unsynced until the next synced commit or the idle sync.
#[test]
fn writes_are_synced_and_queue_bookkeeping_is_not() {
    let (clock, dir) = (
        ManualClock::at_test_epoch(),
        tempfile::tempdir().expect("tempdir"),
    );
    let (mut thread, now) = (thread_on(&dir.path().join("kv.redb"), &clock), clock.now());
    let enqueue = || AtomicWrite {
        enqueues: vec![Enqueue {
            payload: vec![1],
            ready_at: now,
            keys_if_undelivered: vec![],
            backoff_schedule: None,
        }],
        ..Default::default()
    };
    let (command, _answer) = write_command(enqueue(), now);
    thread.run_group(vec![command]);
    assert!(!thread.unsynced.pending(), "an enqueue is a write: synced");

    let (command, mut answer) = take_command(now);
    thread.run_group(vec![command]);
    let Ok(Ok(Taken::Message(delivery))) = answer.try_recv() else {
        panic!("the message is due");
    };
    assert!(thread.unsynced.pending(), "a take is bookkeeping");
    assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 1, "yet committed");
    let ticket = *delivery.ticket().expect("held");
    drop(delivery.hand_over());
    thread.run_group(vec![Change::Settle {
        ticket,
        outcome: DeliveryOutcome::Succeeded,
        now,
        reply: None,
    }]);
    assert!(thread.unsynced.pending(), "so is a finish");
    assert_eq!(rows(&thread.test_db(), QUEUE_RUNNING), 0);

    let (command, _answer) = write_command(enqueue(), now);
    thread.run_group(vec![command]);
    assert!(!thread.unsynced.pending(), "the next write syncs them all");

    thread.run_group(vec![take_command(now).0]);
    assert!(thread.unsynced.pending());
    thread.sync_if_needed().expect("sync");
    assert!(!thread.unsynced.pending(), "the idle sync");
}

/// Expired entries are deleted through the expiry index by the next group after their time,
/// and an index row made stale by an overwrite deletes nothing.
#[test]
fn expired_entries_are_swept_through_the_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let mut thread = thread_on(&dir.path().join("kv.redb"), &clock);
    let now = clock.now();
    let expiring = |name: &str, secs: i64| open_deno_kv_engine_kit::Mutation {
        expire_at: Some(now + chrono::TimeDelta::seconds(secs)),
        ..set(name, 1)
    };
    let write = AtomicWrite {
        mutations: vec![expiring("soon", 10), expiring("later", 100), set("kept", 1)],
        ..Default::default()
    };
    let (command, _answer) = write_command(write, now);
    thread.run_group(vec![command]);
    // "later" is rewritten without expiry: its index row goes with the rewrite.
    let (command, _answer) = write_command(
        AtomicWrite {
            mutations: vec![set("later", 2)],
            ..Default::default()
        },
        now,
    );
    thread.run_group(vec![command]);
    let index_rows = |db: &Database| {
        let txn = db.begin_read().expect("read");
        let table = txn.open_table(EXPIRY).expect("table");
        table.iter().expect("iter").count()
    };
    assert_eq!(index_rows(&thread.test_db()), 1);
    assert_eq!(
        thread.next_expiry,
        Some(now + chrono::TimeDelta::seconds(10))
    );

    clock.advance(Duration::from_secs(10));
    thread.idle();
    assert_eq!(stored(&thread.test_db(), "soon"), None, "swept at its time");
    assert_eq!(index_rows(&thread.test_db()), 0);
    assert_eq!(thread.next_expiry, None);
    assert!(stored(&thread.test_db(), "later").is_some());
    assert!(stored(&thread.test_db(), "kept").is_some());
}

/// Runs one write of `name` = `n` in its own group and returns its versionstamp's version.
fn write_one(state: &mut GroupState, name: &str, n: u64, now: DateTime<Utc>) -> u64 {
    let (command, mut answer) = write_command(
        AtomicWrite {
            mutations: vec![set(name, n)],
            ..Default::default()
        },
        now,
    );
    state.run_group(vec![command]);
    let committed = answer.try_recv().expect("answered").expect("write");
    committed.expect("no checks").versionstamp.version()
}

fn recorded_ceiling(db: &Database) -> u64 {
    let txn = db.begin_read().expect("read");
    let meta = txn.open_table(schema::META).expect("meta");
    meta.get(schema::META_LAST_VERSION)
        .expect("get")
        .expect("row")
        .value()
}

/// Commits write the version ceiling only when they cross it; after a crash (no clean
/// close) numbering continues above the ceiling, so no version is handed out twice.
#[test]
fn after_a_crash_versions_continue_above_the_ceiling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let mut state = thread_on(&path, &clock);
        assert_eq!(write_one(&mut state, "a", 1, clock.now()), 1);
        assert_eq!(recorded_ceiling(&state.test_db()), 1 + VERSION_RESERVATION);
        assert_eq!(write_one(&mut state, "b", 2, clock.now()), 2);
        assert_eq!(write_one(&mut state, "c", 3, clock.now()), 3);
        assert_eq!(
            recorded_ceiling(&state.test_db()),
            1 + VERSION_RESERVATION,
            "below the ceiling, commits do not touch meta"
        );
        // Dropped without `close`, as a killed process would leave it.
    }
    let mut state = thread_on(&path, &clock);
    let next = write_one(&mut state, "d", 4, clock.now());
    assert_eq!(next, VERSION_RESERVATION + 2);
    assert_eq!(
        recorded_ceiling(&state.test_db()),
        next + VERSION_RESERVATION
    );
}

/// A clean close records the exact last version, so the next open continues without a gap.
#[test]
fn after_a_clean_close_versions_continue_without_a_gap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let mut state = thread_on(&path, &clock);
        write_one(&mut state, "a", 1, clock.now());
        assert_eq!(write_one(&mut state, "b", 2, clock.now()), 2);
        state.close().expect("close");
        assert_eq!(recorded_ceiling(&state.test_db()), 2);
    }
    let mut state = thread_on(&path, &clock);
    assert_eq!(write_one(&mut state, "c", 3, clock.now()), 3);
}

/// A switch of the change log, as its own command.
fn configure_command(
    retention: Option<Duration>,
) -> (Command, oneshot::Receiver<Result<(), KvError>>) {
    let (reply, answer) = oneshot::channel();
    (
        Change::Engine(Own::Configure(Configure { retention, reply })),
        answer,
    )
}

fn logged(db: &Database) -> Vec<open_deno_kv_engine_kit::change_log::ChangeRecord> {
    change_log::read(db, Versionstamp::ZERO, 1000).expect("read log")
}

/// A switch takes effect between two commands of one group: the write before it is not
/// logged, the one after it is, and names the one before as its previous commit.
#[test]
fn a_switch_applies_to_the_commands_after_it_in_its_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = ManualClock::at_test_epoch();
    let mut state = thread_on(&dir.path().join("kv.redb"), &clock);
    let now = clock.now();
    let one = |name: &str| AtomicWrite {
        mutations: vec![set(name, 1)],
        ..Default::default()
    };
    let (before, _a) = write_command(one("before"), now);
    let (switch, mut switched) = configure_command(Some(Duration::from_secs(60)));
    let (after, _b) = write_command(one("after"), now);
    state.run_group(vec![before, switch, after]);
    switched.try_recv().expect("answered").expect("switched");
    let records = logged(&state.test_db());
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].previous, Versionstamp::from_version(1, 0));
    assert_eq!(records[0].versionstamp, Versionstamp::from_version(2, 0));
    assert!(records[0].changes.writes.contains_key(&k("after")));
}

/// After a crash (no clean close, so the file's ceiling is far above the last commit), a
/// file whose log is on numbers on from its last record: the chain goes on unbroken. With
/// the log off, numbering continues above the ceiling as before.
#[test]
fn after_a_crash_a_logged_file_numbers_on_from_its_last_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let mut state = thread_on(&path, &clock);
        let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
        state.run_group(vec![switch]);
        for n in 1..=3 {
            assert_eq!(write_one(&mut state, "a", n, clock.now()), n);
        }
        // Dropped without `close`, as a killed process would leave it.
    }
    {
        let mut state = thread_on(&path, &clock);
        assert_eq!(write_one(&mut state, "b", 4, clock.now()), 4);
        let records = logged(&state.test_db());
        assert_eq!(records.len(), 4);
        assert_eq!(records[3].previous, records[2].versionstamp);
        let (switch, _answer) = configure_command(None);
        state.run_group(vec![switch]);
        assert_eq!(write_one(&mut state, "c", 5, clock.now()), 5);
        // Crashes again, with the log off.
    }
    // The ceiling the first commit of the first run raised, never crossed since.
    let mut state = thread_on(&path, &clock);
    assert_eq!(
        write_one(&mut state, "d", 6, clock.now()),
        1 + VERSION_RESERVATION + 1
    );
}

/// A `Deferred` store may have acknowledged commits a crash lost: even with the log on, it
/// numbers on above the ceiling after a crash, never reusing a version it may have handed
/// out (its log then has a gap at the crash).
#[test]
fn after_a_crash_a_deferred_store_never_reuses_a_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let mut state = thread_with(&path, &clock, Durability::Deferred);
        let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
        state.run_group(vec![switch]);
        assert_eq!(write_one(&mut state, "a", 1, clock.now()), 1);
        // Dropped without `close`, as a killed process would leave it.
    }
    let mut state = thread_with(&path, &clock, Durability::Deferred);
    assert_eq!(
        write_one(&mut state, "b", 2, clock.now()),
        1 + VERSION_RESERVATION + 1,
        "above the ceiling, not after the last record"
    );
}

/// An import is not a commit and leaves no record, only its version as the log's floor: after
/// a crash, numbering continues above the floor when it is above the last record.
#[test]
fn after_a_crash_numbering_continues_above_an_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kv.redb");
    let clock = ManualClock::at_test_epoch();
    {
        let mut state = thread_on(&path, &clock);
        let (switch, _answer) = configure_command(Some(Duration::from_secs(60)));
        state.run_group(vec![switch]);
        write_one(&mut state, "a", 1, clock.now());
        // What `backup::import_into` leaves beside its entries.
        let txn = state.test_db().begin_write().expect("txn");
        change_log::note_import(&mut Tables::new(&txn), 50).expect("note");
        txn.commit().expect("commit");
    }
    let mut state = thread_on(&path, &clock);
    assert_eq!(write_one(&mut state, "b", 2, clock.now()), 51);
    let records = logged(&state.test_db());
    assert_eq!(records[1].previous, Versionstamp::from_version(50, 0));
}

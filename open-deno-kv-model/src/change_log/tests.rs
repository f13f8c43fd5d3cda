use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;

use super::*;
use crate::queue::QueuedMessage;
use crate::{DatabaseId, KeyRange, KvEntry, KvValue, Snapshot, SnapshotItem, StoredEntry};

/// The database every record and backup of these tests is of.
const DB: DatabaseId = DatabaseId::from_bytes([7; 16]);

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + seconds, 123_456_789).expect("time")
}

fn vs(version: u64) -> Versionstamp {
    Versionstamp::from_version(version, 0)
}

fn stored(n: u64, version: u64) -> StoredEntry {
    StoredEntry {
        value: KvValue::U64(n),
        versionstamp: vs(version),
        expires_at: None,
    }
}

fn entry(key: &[u8], n: u64, version: u64) -> KvEntry {
    KvEntry::from_stored(key.to_vec(), stored(n, version))
}

/// A record of commit `version` (after `version - 1`) that sets and deletes keys.
fn record(version: u64, sets: &[(&[u8], u64)], deletes: &[&[u8]]) -> ChangeRecord {
    let mut changes = StagedCommit::default();
    for (key, n) in sets {
        changes.stage_put(key, stored(*n, version));
    }
    for key in deletes {
        changes.stage_delete(key);
    }
    ChangeRecord {
        database: Some(DB),
        versionstamp: vs(version),
        previous: vs(version - 1),
        at: at(version as i64),
        changes,
    }
}

/// Every kind of content survives the bytes: ranges, sets with and without expiry, deletions,
/// all value encodings, messages with every field.
#[test]
fn a_record_reads_back_as_written() {
    let mut changes = StagedCommit::default();
    changes.stage_delete_range(&KeyRange::new(b"a".to_vec(), b"b".to_vec()));
    changes.stage_put(
        b"v8",
        StoredEntry {
            value: KvValue::V8(vec![0xff, 0x0f, 0x22, 0x01, 0x61].into()),
            versionstamp: vs(9),
            expires_at: Some(at(60)),
        },
    );
    changes.stage_put(b"bytes", stored(1, 9));
    changes.stage_put(
        b"raw",
        StoredEntry {
            value: KvValue::Bytes(vec![1, 2, 3].into()),
            versionstamp: vs(9),
            expires_at: None,
        },
    );
    changes.stage_delete(b"gone");
    changes.stage_enqueue(QueuedMessage::new(
        vec![0xff, 0x0f, 0x49, 0x02],
        at(5),
        vec![b"dead".to_vec(), b"letter".to_vec()],
        vec![100, 1000, 10_000],
    ));
    let record = ChangeRecord {
        database: Some(DB),
        versionstamp: vs(9),
        previous: Versionstamp::from_version(7, 3),
        at: at(1),
        changes,
    };
    assert_eq!(
        ChangeRecord::decode(&record.encode()).expect("decodes"),
        record
    );
}

/// Bytes that are not a whole record are corrupt, whatever is wrong with them; a record never
/// decodes from part of itself.
#[test]
fn a_damaged_record_is_reported_as_corrupt() {
    let bytes = record(3, &[(b"a", 1)], &[b"b"]).encode();
    for cut in 0..bytes.len() {
        assert!(
            matches!(
                ChangeRecord::decode(&bytes[..cut]),
                Err(KvError::Corrupt { .. })
            ),
            "cut at {cut}"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        ChangeRecord::decode(&longer),
        Err(KvError::Corrupt { .. })
    ));
    let mut other_layout = bytes;
    other_layout[0] = 4;
    let err = ChangeRecord::decode(&other_layout).expect_err("refused");
    assert!(err.to_string().contains("unknown layout 4"), "{err}");
}

/// `bytes`, the `records` back to back, each ending at its `ends`: cut at an end, the records
/// before it; cut anywhere else, corrupt.
fn assert_whole_only_at_ends(bytes: &[u8], ends: &[usize], records: &[ChangeRecord]) {
    for cut in 0..bytes.len() {
        let decoded = ChangeRecord::decode_all(&bytes[..cut]);
        match ends.iter().position(|end| *end == cut) {
            Some(whole) => assert_eq!(decoded.expect("whole records"), records[..=whole]),
            None => assert!(
                matches!(decoded, Err(KvError::Corrupt { .. })),
                "cut at {cut}"
            ),
        }
    }
}

/// Records stored back to back read back in order; one alone is the same bytes as
/// [`ChangeRecord::encode`]'s; a cut anywhere but between records, and empty bytes, are corrupt.
#[test]
fn records_back_to_back_read_back_in_order() {
    let records = [
        record(3, &[(b"a", 1)], &[b"b"]),
        record(4, &[], &[b"a"]),
        record(5, &[(b"c", 7), (b"d", 8)], &[]),
    ];
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    for record in &records {
        record.encode_into(&mut bytes);
        ends.push(bytes.len());
    }
    assert_eq!(ChangeRecord::decode_all(&bytes).expect("decodes"), records);
    assert_eq!(&bytes[..ends[0]], records[0].encode().as_slice());
    assert_eq!(
        ChangeRecord::decode_all(&bytes[..ends[0]]).expect("decodes"),
        records[..1]
    );
    assert_whole_only_at_ends(&bytes, &ends, &records);
    assert!(
        ChangeRecord::decode(&bytes).is_err(),
        "decode takes exactly one record"
    );
}

/// Records continued after the one before them read back whole: database and previous commit
/// from that record, entries stamped with their own commit without the stamp. A record that does
/// not follow the one before it is stored whole. A continued record cannot come first or stand
/// alone, and cut anywhere but between records, the bytes are corrupt.
#[test]
fn continued_records_read_back_whole() {
    let mut with_old_entry = record(6, &[(b"e", 1)], &[]);
    with_old_entry.changes.stage_put(b"old", stored(2, 3)); // an entry stamped by an earlier commit
    // Lengths of one, two and three varint bytes, and a message.
    let mut big = record(7, &[], &[]);
    big.changes.stage_put(
        &[b'k'; 200],
        StoredEntry {
            value: KvValue::Bytes(vec![9; 20_000].into()),
            versionstamp: vs(7),
            expires_at: Some(at(99)),
        },
    );
    big.changes.stage_enqueue(QueuedMessage::new(
        vec![1; 130],
        at(5),
        vec![b"dead".to_vec()],
        vec![100, 1000],
    ));
    let records = [
        record(3, &[(b"a", 1)], &[b"b"]),
        record(4, &[(b"b", 2)], &[]),
        record(5, &[], &[b"a"]),
        with_old_entry,
        big,
        // Does not follow: 9's previous is 8, not 7.
        record(9, &[(b"c", 3)], &[]),
    ];
    let mut bytes = Vec::new();
    let mut ends = Vec::new();
    let mut before = None;
    for record in &records {
        record.encode_after_into(before, &mut bytes);
        ends.push(bytes.len());
        before = Some(RecordHead {
            database: record.database,
            versionstamp: record.versionstamp,
        });
    }
    assert_eq!(ChangeRecord::decode_all(&bytes).expect("decodes"), records);
    let whole: usize = records.iter().map(|r| r.encode().len()).sum();
    assert!(
        bytes.len() < whole,
        "{} continued, {whole} whole",
        bytes.len()
    );
    assert_eq!(
        bytes[ends[4]], 2,
        "the record that does not follow is stored whole"
    );
    assert_whole_only_at_ends(&bytes, &ends, &records);
    let second = &bytes[ends[0]..ends[1]];
    assert_eq!(second[0], 3, "continued");
    for alone in [
        ChangeRecord::decode(second),
        ChangeRecord::decode_all(second).map(|_| records[0].clone()),
    ] {
        let err = alone.expect_err("a continued record alone");
        assert!(err.to_string().contains("continued"), "{err}");
    }
}

/// A continued record whose length does not fit 64 bits is corrupt, not read as another length.
#[test]
fn an_overlong_varint_is_corrupt() {
    let first = record(3, &[], &[]);
    let mut bytes = first.encode();
    bytes.push(3); // continued
    bytes.extend_from_slice(vs(4).as_bytes());
    bytes.extend_from_slice(&[0; 12]); // time
    // Ranges: a count of ten 0xff bytes then 0x7f: 70 bits.
    bytes.extend_from_slice(&[0xff; 9]);
    bytes.push(0x7f);
    let err = ChangeRecord::decode_all(&bytes).expect_err("refused");
    assert!(err.to_string().contains("longer than 64 bits"), "{err}");
}

mod plain_writes {
    //! A plain write's record, built from the write, is byte for byte the record of the changes
    //! the write stages; other writes are not plain.

    use proptest::prelude::*;

    use super::*;
    use crate::{AtomicWrite, Enqueue, Limits, Mutation, encode_key, key, stage_atomic_write};

    fn key_of(n: u8) -> Vec<u8> {
        encode_key(&key!["k", i64::from(n)]).expect("key")
    }

    fn value_of(kind: u8, n: u8) -> KvValue {
        match kind % 3 {
            0 => KvValue::U64(u64::from(n)),
            1 => KvValue::Bytes(vec![n; usize::from(n % 7)].into()),
            _ => KvValue::V8(vec![0xff, 0x0f, 0x49, n].into()),
        }
    }

    /// (key, set or delete, value kind, expiry) per mutation; few keys, so that keys repeat.
    fn mutations() -> impl Strategy<Value = Vec<(u8, bool, u8, Option<u8>)>> {
        prop::collection::vec(
            (0u8..5, any::<bool>(), any::<u8>(), any::<Option<u8>>()),
            1..8,
        )
    }

    proptest! {
        #[test]
        fn a_plain_writes_record_is_the_record_of_what_it_staged(mutations in mutations()) {
            let now = at(0);
            let write = AtomicWrite {
                mutations: mutations
                    .iter()
                    .map(|&(k, set, kind, expiry)| {
                        let mut mutation = if set {
                            Mutation::set(key_of(k), value_of(kind, k))
                        } else {
                            Mutation::delete(key_of(k))
                        };
                        mutation.expire_at = expiry.map(|s| at(1000 + i64::from(s)));
                        mutation
                    })
                    .collect(),
                ..Default::default()
            };
            let write = Limits::deno().accept_atomic_write(write, now).expect("valid");
            let (stamp, previous) = (vs(9), Versionstamp::from_version(7, 2));
            let staged = stage_atomic_write(|_| Ok(None), &write, stamp, now)
                .expect("applies")
                .expect("no checks");
            let expected = ChangeRecord {
                database: Some(DB),
                versionstamp: stamp,
                previous,
                at: now,
                changes: staged,
            }
            .encode();
            let plain = PlainWrite::of(&write).expect("only sets and deletes");
            let mut bytes = vec![0xaa]; // appended after what is there
            plain.encode_record_into(None, Some(DB), stamp, previous, now, &mut bytes);
            prop_assert_eq!(&bytes[1..], expected.as_slice());

            // Continued after the record of `previous`: the bytes of the general path continued
            // the same way, and they read back as the record.
            let first = ChangeRecord {
                database: Some(DB),
                versionstamp: previous,
                previous: vs(1),
                at: now,
                changes: StagedCommit::default(),
            };
            let record = ChangeRecord::decode(&expected).expect("decodes");
            let head = RecordHead { database: Some(DB), versionstamp: previous };
            let mut general = first.encode();
            record.encode_after_into(Some(head), &mut general);
            let mut from_write = first.encode();
            plain.encode_record_into(Some(head), Some(DB), stamp, previous, now, &mut from_write);
            prop_assert_eq!(&from_write, &general);
            prop_assert!(general.len() < first.encode().len() + expected.len(), "shorter");
            prop_assert_eq!(
                ChangeRecord::decode_all(&general).expect("reads back"),
                vec![first, record]
            );
        }
    }

    #[test]
    fn writes_with_other_effects_are_not_plain() {
        let now = at(0);
        let accept = |write| {
            Limits::deno()
                .accept_atomic_write(write, now)
                .expect("valid")
        };
        let others = [
            AtomicWrite {
                mutations: vec![Mutation::sum(key_of(1), KvValue::U64(1))],
                ..Default::default()
            },
            AtomicWrite {
                mutations: vec![Mutation::delete_range(KeyRange::new(key_of(1), key_of(2)))],
                ..Default::default()
            },
            AtomicWrite {
                mutations: vec![Mutation {
                    key: key_of(1),
                    kind: crate::MutationKind::SetSuffixVersionstampedKey(KvValue::U64(1)),
                    expire_at: None,
                }],
                ..Default::default()
            },
            AtomicWrite {
                enqueues: vec![Enqueue {
                    payload: vec![1],
                    ready_at: now,
                    keys_if_undelivered: vec![],
                    backoff_schedule: None,
                }],
                ..Default::default()
            },
        ];
        for write in others {
            let write = accept(write);
            assert!(PlainWrite::of(&write).is_none(), "{write:?}");
        }
    }
}

async fn items(snapshot: Snapshot) -> Vec<SnapshotItem> {
    snapshot.items.try_collect().await.expect("stream")
}

/// The merge: overlay keys before, between, equal to and after the backup's; a deletion of a
/// backup key; a range that takes backup keys and an overlay key set before it, while a key set
/// after it stays; the backup's messages, then the log's.
#[tokio::test]
async fn a_replay_merges_the_log_into_the_backup_key_by_key() {
    let backup_message = QueuedMessage::new(vec![1], at(0), vec![], vec![]);
    let backup = Snapshot::from_items(
        vs(2),
        vec![
            SnapshotItem::Entry(entry(b"b", 1, 1)),
            SnapshotItem::Entry(entry(b"d", 2, 1)),
            SnapshotItem::Entry(entry(b"r1", 3, 2)),
            SnapshotItem::Entry(entry(b"r3", 4, 2)),
            SnapshotItem::Entry(entry(b"z", 5, 2)),
            SnapshotItem::Message(backup_message.clone()),
        ],
    )
    .of_database(Some(DB));
    let mut replay = Replay::after(DB, vs(2));
    replay
        .apply(record(
            3,
            &[(b"a", 10), (b"c", 11), (b"d", 12), (b"r2", 13)],
            &[b"b"],
        ))
        .expect("follows the backup");
    let mut range_delete = record(4, &[], &[]);
    range_delete
        .changes
        .stage_delete_range(&KeyRange::new(b"r".to_vec(), b"s".to_vec()));
    range_delete.changes.stage_put(b"r4", stored(14, 4));
    let log_message = QueuedMessage::new(vec![2], at(4), vec![], vec![]);
    range_delete.changes.stage_enqueue(log_message.clone());
    replay.apply(range_delete).expect("follows");
    replay
        .apply(record(5, &[(b"zz", 15)], &[]))
        .expect("follows");
    assert_eq!((replay.last(), replay.commits()), (vs(5), 3));
    let restored = replay.over(backup).expect("same backup");
    assert_eq!(restored.versionstamp, vs(5));
    assert_eq!(
        items(restored).await,
        vec![
            SnapshotItem::Entry(entry(b"a", 10, 3)),
            SnapshotItem::Entry(entry(b"c", 11, 3)),
            SnapshotItem::Entry(entry(b"d", 12, 3)),
            SnapshotItem::Entry(entry(b"r4", 14, 4)),
            SnapshotItem::Entry(entry(b"z", 5, 2)),
            SnapshotItem::Entry(entry(b"zz", 15, 5)),
            SnapshotItem::Message(backup_message),
            SnapshotItem::Message(log_message),
        ]
    );
}

/// A record that does not follow the last one (a commit the log lacks) is refused, and so is a
/// backup other than the one the replay started after.
#[tokio::test]
async fn a_gap_in_the_chain_or_another_backup_is_refused() {
    let mut replay = Replay::after(DB, vs(2));
    let err = replay.apply(record(4, &[], &[])).expect_err("3 is missing");
    assert!(err.to_string().contains("gap"), "{err}");
    replay.apply(record(3, &[], &[])).expect("follows");
    let err = Replay::after(DB, vs(2))
        .over(Snapshot::from_items(vs(1), vec![]).of_database(Some(DB)))
        .expect_err("another backup");
    assert!(err.to_string().contains("backup is of commit"), "{err}");
}

/// Issue 29: another database's log continues the backup's versionstamps and passes the chain
/// check, so its records must be refused by the database they name; a record that names none
/// (written before identities) too. The message names both databases.
#[tokio::test]
async fn a_record_or_backup_of_another_database_is_refused() {
    let other = DatabaseId::from_bytes([9; 16]);
    let mut foreign = record(3, &[(b"a", 1)], &[]);
    foreign.database = Some(other);
    let mut replay = Replay::after(DB, vs(2));
    let err = replay
        .apply(foreign)
        .expect_err("another database")
        .to_string();
    assert!(
        err.contains(&DB.to_string()) && err.contains(&other.to_string()),
        "{err}"
    );
    let mut old = record(3, &[(b"a", 1)], &[]);
    old.database = None;
    let err = replay.apply(old).expect_err("no database").to_string();
    assert!(err.contains("names no database"), "{err}");
    assert_eq!(replay.commits(), 0, "nothing was applied");

    let err = Replay::after(DB, vs(2))
        .over(Snapshot::from_items(vs(2), vec![]).of_database(Some(other)))
        .expect_err("a backup of another database");
    assert!(err.to_string().contains(&other.to_string()), "{err}");
    let err = Replay::after(DB, vs(2))
        .over(Snapshot::from_items(vs(2), vec![]))
        .expect_err("a backup of no database");
    assert!(err.to_string().contains("names no database"), "{err}");
}

/// A record written before identities (layout 1) still reads, as a record of no database, and
/// one without a database is written in that layout, byte for byte.
#[test]
fn a_record_without_a_database_keeps_the_first_layout() {
    let mut old = record(3, &[(b"a", 1)], &[b"b"]);
    old.database = None;
    let bytes = old.encode();
    assert_eq!(bytes[0], 1);
    assert_eq!(ChangeRecord::decode(&bytes).expect("decodes"), old);
    let new = record(3, &[(b"a", 1)], &[b"b"]).encode();
    assert_eq!(new[0], 2);
    assert_eq!(&new[1..17], DB.as_bytes());
    assert_eq!(new.len(), bytes.len() + 16);
}

/// Against a model: random sets, deletes and range deletes over a small key space, the state
/// after each commit recorded; a replay from every earlier point to every later one gives that
/// state exactly.
#[tokio::test]
async fn replays_match_the_states_they_replay_to() {
    let mut seed = 18u64;
    // xorshift: reproducible and good enough to pick operations.
    let mut below = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let keys: Vec<Vec<u8>> = (0..12u8).map(|k| vec![b'k', k]).collect();
    let mut state: BTreeMap<Vec<u8>, StoredEntry> = BTreeMap::new();
    let mut states = vec![state.clone()];
    let mut records = Vec::new();
    for version in 1..=40u64 {
        let mut changes = StagedCommit::default();
        for _ in 0..1 + below(3) {
            let key = &keys[below(keys.len())];
            match below(4) {
                0 => changes.stage_delete(key),
                1 => {
                    let end = &keys[below(keys.len())];
                    changes.stage_delete_range(&KeyRange::new(key.clone(), end.clone()));
                }
                _ => changes.stage_put(key, stored(below(100) as u64, version)),
            }
        }
        for range in &changes.deleted_ranges {
            state.retain(|key, _| !range.contains(key));
        }
        for (key, value) in &changes.writes {
            match value {
                Some(value) => state.insert(key.clone(), value.clone()),
                None => state.remove(key),
            };
        }
        states.push(state.clone());
        records.push(ChangeRecord {
            database: Some(DB),
            versionstamp: vs(version),
            previous: vs(version - 1),
            at: at(version as i64),
            changes,
        });
    }
    for from in (0..states.len()).step_by(5) {
        for to in from..states.len() {
            let backup_items = states[from]
                .iter()
                .map(|(k, e)| SnapshotItem::Entry(KvEntry::from_stored(k.clone(), e.clone())))
                .collect();
            let backup = Snapshot::from_items(vs(from as u64), backup_items).of_database(Some(DB));
            let mut replay = Replay::after(DB, vs(from as u64));
            for record in &records[from..to] {
                replay.apply(record.clone()).expect("chained");
            }
            let expected: Vec<SnapshotItem> = states[to]
                .iter()
                .map(|(k, e)| SnapshotItem::Entry(KvEntry::from_stored(k.clone(), e.clone())))
                .collect();
            assert_eq!(
                items(replay.over(backup).expect("same")).await,
                expected,
                "from {from} to {to}"
            );
        }
    }
}

#[test]
fn retention_is_at_least_a_second_and_pruning_keeps_up() {
    assert!(check_retention(std::time::Duration::from_millis(999)).is_err());
    assert!(check_retention(std::time::Duration::from_secs(1)).is_ok());
    assert!(check_retention(std::time::Duration::MAX).is_err());
    assert_eq!(
        prune_before(at(100), std::time::Duration::from_secs(40)),
        at(60)
    );
    let mut schedule = PruneSchedule::default();
    let due: usize = (0..1000).filter(|_| schedule.logged(1)).count();
    assert_eq!(due, 1000 / PRUNE_EVERY as usize);
    const { assert!(PRUNE_BATCH > PRUNE_EVERY as usize) };
}

/// A backup stream that must not be polled after its end (as `futures::stream::unfold`, which
/// the blocking engines' exports are built on): the merge reads past the entries to look for
/// messages, and must stop at the end.
#[tokio::test]
async fn a_backup_stream_is_not_polled_after_its_end() {
    use futures::StreamExt;
    let backup_items = vec![SnapshotItem::Entry(entry(b"a", 1, 1))];
    let stream = futures::stream::unfold(backup_items.into_iter(), |mut rest| async move {
        rest.next().map(|item| (Ok(item), rest))
    })
    .boxed();
    let backup = Snapshot {
        database: Some(DB),
        versionstamp: vs(1),
        items: stream,
    };
    let mut replay = Replay::after(DB, vs(1));
    replay.apply(record(2, &[(b"b", 2)], &[])).expect("follows");
    assert_eq!(
        items(replay.over(backup).expect("same")).await,
        vec![
            SnapshotItem::Entry(entry(b"a", 1, 1)),
            SnapshotItem::Entry(entry(b"b", 2, 2)),
        ]
    );
}

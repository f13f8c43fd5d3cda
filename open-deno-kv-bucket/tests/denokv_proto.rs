//! What this crate writes, read with denokv's own generated types of `backup.proto`
//! (denokv_proto 0.14), and what those types write, read by this crate: the two agree on every
//! field of the layout.

// Helpers of a test binary outside `#[test]` functions: a failure is the test failing.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use chrono::DateTime;
use denokv_proto::backup::{
    BackupKvMutationKind, BackupKvPair, BackupMutationRange, BackupReplicationLogEntry,
    BackupSnapshotRange,
};
use open_deno_kv_bucket::layout::{
    KeyMetadata, SegmentName, change_stamp, decode_segment, decode_snapshot_range, encode_segment,
    encode_snapshot_range,
};
use open_deno_kv_model::change_log::ChangeRecord;
use open_deno_kv_model::{DatabaseId, KvEntry, KvValue, StagedCommit, StoredEntry, Versionstamp};
use prost::Message;

/// One change as denokv reads it: versionstamp, kind, key, value, value encoding, expiry.
type Change = (Vec<u8>, BackupKvMutationKind, Vec<u8>, Vec<u8>, i32, u64);

fn commit(version: u64, writes: Vec<(&[u8], Option<KvValue>)>) -> ChangeRecord {
    let stamp = Versionstamp::from_version(version, 0);
    ChangeRecord {
        database: Some(DatabaseId::random()),
        versionstamp: stamp,
        previous: Versionstamp::from_version(version - 1, 0),
        at: DateTime::from_timestamp_millis(1_700_000_000_000 + version as i64).unwrap(),
        changes: StagedCommit {
            writes: writes
                .into_iter()
                .map(|(key, value)| {
                    (
                        key.to_vec(),
                        value.map(|value| StoredEntry {
                            value,
                            versionstamp: stamp,
                            expires_at: DateTime::from_timestamp_millis(1_800_000_000_000),
                        }),
                    )
                })
                .collect::<BTreeMap<_, _>>(),
            ..Default::default()
        },
    }
}

#[test]
fn denokv_reads_our_segments_as_we_mean_them() {
    let records = vec![
        commit(
            5,
            vec![
                (b"\x02a\x00", Some(KvValue::U64(7))),
                (b"\x02b\x00", None),
                (
                    b"\x02c\x00",
                    Some(KvValue::V8(vec![0xff, 0x0f, 0x49, 0x02].into())),
                ),
            ],
        ),
        commit(
            6,
            vec![(b"\x02d\x00", Some(KvValue::Bytes(vec![1, 2, 3].into())))],
        ),
    ];
    let closed = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let encoded = encode_segment(&records, closed).unwrap();
    let theirs = BackupMutationRange::decode(encoded.segment.as_slice()).unwrap();
    assert_eq!(theirs.timestamp_ms, 1_700_000_000_123);
    let seen: Vec<Change> = theirs
        .entries
        .iter()
        .map(|entry| {
            (
                entry.versionstamp.clone(),
                entry.kind(),
                entry.key.clone(),
                entry.value.clone(),
                entry.value_encoding,
                entry.expire_at_ms,
            )
        })
        .collect();
    let five = Versionstamp::from_version(5, 0);
    let six = Versionstamp::from_version(6, 0);
    let expected = vec![
        (
            change_stamp(five, 0).to_vec(),
            BackupKvMutationKind::MkSet,
            b"\x02a\x00".to_vec(),
            7u64.to_le_bytes().to_vec(),
            2,
            1_800_000_000_000,
        ),
        (
            change_stamp(five, 1).to_vec(),
            BackupKvMutationKind::MkClear,
            b"\x02b\x00".to_vec(),
            vec![],
            0,
            0,
        ),
        (
            change_stamp(five, 0xffff).to_vec(),
            BackupKvMutationKind::MkSet,
            b"\x02c\x00".to_vec(),
            vec![0xff, 0x0f, 0x49, 0x02],
            1,
            1_800_000_000_000,
        ),
        (
            change_stamp(six, 0xffff).to_vec(),
            BackupKvMutationKind::MkSet,
            b"\x02d\x00".to_vec(),
            vec![1, 2, 3],
            3,
            1_800_000_000_000,
        ),
    ];
    assert_eq!(seen, expected);
}

#[test]
fn we_read_segments_denokvs_types_write() {
    let five = Versionstamp::from_version(5, 0);
    let theirs = BackupMutationRange {
        entries: vec![
            BackupReplicationLogEntry {
                versionstamp: change_stamp(five, 0).to_vec(),
                kind: BackupKvMutationKind::MkSum as i32,
                key: b"\x02n\x00".to_vec(),
                value: 3u64.to_le_bytes().to_vec(),
                value_encoding: 2,
                expire_at_ms: 0,
            },
            BackupReplicationLogEntry {
                versionstamp: change_stamp(five, 0xffff).to_vec(),
                kind: BackupKvMutationKind::MkClear as i32,
                key: b"\x02z\x00".to_vec(),
                value: vec![],
                value_encoding: 0,
                expire_at_ms: 0,
            },
        ],
        timestamp_ms: 1_700_000_000_000,
    };
    let bytes = theirs.encode_to_vec();
    let name = SegmentName {
        format_version: 0,
        monoseq: 1 << 32,
        first: change_stamp(five, 0),
        last: change_stamp(five, 0xffff),
    };
    let records = decode_segment("logs/x.bin", &name, &bytes, None).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].versionstamp, five);
    assert_eq!(
        records[0].changes.writes,
        BTreeMap::from([
            (
                b"\x02n\x00".to_vec(),
                Some(StoredEntry {
                    value: KvValue::U64(3),
                    versionstamp: five,
                    expires_at: None
                })
            ),
            (b"\x02z\x00".to_vec(), None),
        ])
    );
}

#[test]
fn snapshot_ranges_agree_both_ways() {
    let entries = vec![
        KvEntry {
            key: b"\x02a\x00".to_vec().into(),
            value: KvValue::U64(1),
            versionstamp: Versionstamp::from_version(3, 2),
            expires_at: DateTime::from_timestamp_millis(1_800_000_000_000),
        },
        KvEntry {
            key: b"\x02b\x00".to_vec().into(),
            value: KvValue::Bytes(vec![9].into()),
            versionstamp: Versionstamp::from_version(4, 0),
            expires_at: None,
        },
    ];
    let ours = encode_snapshot_range(&entries);
    let theirs = BackupSnapshotRange::decode(ours.as_slice()).unwrap();
    assert_eq!(theirs.data_list.len(), 2);
    for (entry, (data, meta)) in entries
        .iter()
        .zip(theirs.data_list.iter().zip(&theirs.metadata_list))
    {
        assert_eq!(data.key[0], b'd');
        assert_eq!(meta.key[0], b'm');
        assert_eq!(&data.key[1..], &entry.key[..]);
        assert_eq!(&meta.key[1..], &entry.key[..]);
        // denokv reads the metadata this way: 10 bytes, one, then 8 little-endian bytes.
        assert_eq!(&meta.value[..10], entry.versionstamp.as_bytes());
        assert_eq!(meta.value[10] as i64, entry.value.encoding().id());
        let expiry = i64::from_le_bytes(meta.value[11..19].try_into().unwrap());
        assert_eq!(
            expiry,
            entry.expires_at.map_or(-1, |at| at.timestamp_millis())
        );
    }
    // And back: a range written by denokv's types, with 11-byte metadata (no expiry).
    let written = BackupSnapshotRange {
        data_list: vec![BackupKvPair {
            key: b"d\x02k\x00".to_vec(),
            value: vec![5],
        }],
        metadata_list: vec![BackupKvPair {
            key: b"m\x02k\x00".to_vec(),
            value: {
                let mut value = Versionstamp::from_version(8, 0).as_bytes().to_vec();
                value.push(3);
                value
            },
        }],
    }
    .encode_to_vec();
    let read = decode_snapshot_range("snapshots/x.bin", &written).unwrap();
    assert_eq!(
        read,
        vec![KvEntry {
            key: b"\x02k\x00".to_vec().into(),
            value: KvValue::Bytes(vec![5].into()),
            versionstamp: Versionstamp::from_version(8, 0),
            expires_at: None,
        }]
    );
    assert_eq!(
        KeyMetadata::decode(&theirs.metadata_list[1].value)
            .unwrap()
            .expire_at_ms,
        None
    );
}

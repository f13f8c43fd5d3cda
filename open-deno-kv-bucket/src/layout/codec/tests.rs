//! Golden bytes: objects this crate writes, compared byte for byte with what the layout's
//! protocol buffer schema (denokv_proto's `backup.proto`) prescribes, assembled here by hand
//! from the wire format's rules (a tag byte `field << 3 | wire type`; varints; length-prefixed
//! bytes and messages; fields in number order; zero values left out).

use std::collections::BTreeMap;

use chrono::DateTime;
use open_deno_kv_model::change_log::ChangeRecord;
use open_deno_kv_model::{DatabaseId, KvEntry, KvValue, StagedCommit, StoredEntry, Versionstamp};

use super::*;

/// A length-delimited field (wire type 2).
fn bytes_field(field: u8, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128, "one-byte lengths only");
    let mut out = vec![(field << 3) | 2, bytes.len() as u8];
    out.extend_from_slice(bytes);
    out
}

/// A varint field (wire type 0).
fn varint_field(field: u8, mut value: u64) -> Vec<u8> {
    let mut out = vec![field << 3];
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

#[test]
fn a_segment_is_the_backup_proto_mutation_range_byte_for_byte() {
    let stamp = Versionstamp::from_version(7, 0);
    let key_a = b"\x02a\x00".to_vec();
    let key_b = b"\x02b\x00".to_vec();
    let at = DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
    let record = ChangeRecord {
        database: Some(DatabaseId::random()),
        versionstamp: stamp,
        previous: Versionstamp::from_version(6, 0),
        at,
        changes: StagedCommit {
            writes: BTreeMap::from([
                (
                    key_a.clone(),
                    Some(StoredEntry {
                        value: KvValue::U64(5),
                        versionstamp: stamp,
                        expires_at: DateTime::from_timestamp_millis(1_000),
                    }),
                ),
                (key_b.clone(), None),
            ]),
            ..Default::default()
        },
    };
    let encoded = encode_segment(std::slice::from_ref(&record), at).unwrap();

    // Entry 1: the set, numbered 0000; entry 2: the clear, the commit's last, numbered ffff.
    let mut stamp_0 = stamp.as_bytes().to_vec();
    stamp_0.extend_from_slice(&[0, 0]);
    let mut stamp_last = stamp.as_bytes().to_vec();
    stamp_last.extend_from_slice(&[0xff, 0xff]);
    let mut set = bytes_field(1, &stamp_0);
    set.extend(varint_field(2, 1)); // MK_SET
    set.extend(bytes_field(3, &key_a));
    set.extend(bytes_field(4, &5u64.to_le_bytes()));
    set.extend(varint_field(5, 2)); // little-endian u64
    set.extend(varint_field(6, 1_000));
    let mut clear = bytes_field(1, &stamp_last);
    clear.extend(varint_field(2, 2)); // MK_CLEAR
    clear.extend(bytes_field(3, &key_b));
    let mut expected = bytes_field(1, &set);
    expected.extend(bytes_field(1, &clear));
    expected.extend(varint_field(2, 1_700_000_000_000));
    assert_eq!(encoded.segment, expected);
    assert_eq!(
        encoded.name.file(),
        "0001_0000000000000007_000000000000000700000000_00000000000000070000ffff.bin"
    );

    // And it reads back, with and without its side object.
    let side = ("side", encoded.side.as_slice());
    let back = decode_segment("segment", &encoded.name, &encoded.segment, Some(side)).unwrap();
    assert_eq!(back, vec![record.clone()]);
    let bare = decode_segment("segment", &encoded.name, &encoded.segment, None).unwrap();
    assert_eq!(bare[0].changes.writes, record.changes.writes);
    assert_eq!(bare[0].database, None);
}

#[test]
fn a_snapshot_range_is_the_backup_proto_snapshot_range_byte_for_byte() {
    let entry = KvEntry {
        key: b"\x02k\x00".to_vec().into(),
        value: KvValue::Bytes(vec![9, 8].into()),
        versionstamp: Versionstamp::from_version(3, 1),
        expires_at: None,
    };
    let bytes = encode_snapshot_range(std::slice::from_ref(&entry));
    let mut metadata = entry.versionstamp.as_bytes().to_vec();
    metadata.push(3); // bytes
    metadata.extend_from_slice(&(-1i64).to_le_bytes()); // no expiry
    let mut data = bytes_field(1, b"d\x02k\x00");
    data.extend(bytes_field(2, &[9, 8]));
    let mut meta = bytes_field(1, b"m\x02k\x00");
    meta.extend(bytes_field(2, &metadata));
    let mut expected = bytes_field(1, &data);
    expected.extend(bytes_field(2, &meta));
    assert_eq!(bytes, expected);
    assert_eq!(decode_snapshot_range("range", &bytes).unwrap(), vec![entry]);
}

#[test]
fn every_truncation_of_a_segment_is_refused() {
    let stamp = Versionstamp::from_version(9, 0);
    let at = DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
    let writes = (0..5u8)
        .map(|i| {
            (
                vec![2, b'k', i, 0],
                Some(StoredEntry {
                    value: KvValue::Bytes(vec![i; 3].into()),
                    versionstamp: stamp,
                    expires_at: None,
                }),
            )
        })
        .collect();
    let record = ChangeRecord {
        database: Some(DatabaseId::random()),
        versionstamp: stamp,
        previous: Versionstamp::from_version(8, 0),
        at,
        changes: StagedCommit {
            writes,
            ..Default::default()
        },
    };
    let encoded = encode_segment(&[record], at).unwrap();
    for cut in 0..encoded.segment.len() {
        let short = &encoded.segment[..cut];
        assert!(
            decode_segment("s", &encoded.name, short, Some(("side", &encoded.side))).is_err(),
            "cut at {cut} read with its side object"
        );
        assert!(
            decode_segment("s", &encoded.name, short, None).is_err(),
            "cut at {cut} read without a side object"
        );
    }
    for cut in 0..encoded.side.len() {
        let side = &encoded.side[..cut];
        assert!(
            decode_segment("s", &encoded.name, &encoded.segment, Some(("side", side))).is_err(),
            "side object cut at {cut}"
        );
    }
}

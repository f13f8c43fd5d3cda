use chrono::DateTime;
use open_deno_kv_model::{AtomicWrite, KvEntry, KvValue, Mutation, Versionstamp};

use super::*;
use crate::convert::{decode_atomic_write, encode_atomic_write};
use crate::ext::AtomicWriteExt;

fn k(name: &str) -> Vec<u8> {
    let mut key = vec![2];
    key.extend_from_slice(name.as_bytes());
    key.push(0);
    key
}

fn all() -> KeyRange {
    KeyRange::new(vec![2], vec![3])
}

fn entry(name: &str, value: KvValue, expires_ms: Option<i64>) -> KvEntry {
    KvEntry {
        key: k(name).into(),
        value,
        versionstamp: Versionstamp::from_version(9, 0),
        expires_at: expires_ms.and_then(DateTime::from_timestamp_millis),
    }
}

/// What a server decodes from the body a client encoded for `write`.
fn through_the_wire(write: &AtomicWrite) -> Result<AtomicWrite, ProtocolError> {
    let mut body = encode_atomic_write(write).encode_to_vec();
    body.extend_from_slice(&AtomicWriteExt::of(write).encode_to_vec());
    let mut decoded = decode_atomic_write(&body)?;
    AtomicWriteExt::decode(body.as_slice())
        .map_err(|e| ProtocolError::new(e.to_string()))?
        .apply_to(&mut decoded, true)?;
    Ok(decoded)
}

#[test]
fn a_range_delete_travels_as_a_placeholder_and_comes_back_whole() {
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(k("a"), KvValue::U64(1)),
            Mutation::delete_range(KeyRange::new(k("b"), k("m"))),
            Mutation::delete(k("x")),
        ],
        ..Default::default()
    };
    assert_eq!(through_the_wire(&write).unwrap(), write);
    // On the wire the placeholder has a mutation type KV Connect does not have, so a server
    // that does not know the extension refuses the write instead of applying something else.
    let pb = encode_atomic_write(&write);
    assert_eq!(
        pb.mutations[1].mutation_type,
        crate::ext::RANGE_DELETE_MUTATION_TYPE
    );
    assert!(crate::pb::MutationType::try_from(pb.mutations[1].mutation_type).is_err());
    // Decoded without the extension field, it is a range delete with no end: refused, never
    // applied as anything.
    let mut plain = decode_atomic_write(&pb.encode_to_vec()).unwrap();
    let refused = AtomicWriteExt::default().apply_to(&mut plain, true);
    assert_eq!(
        refused.map_err(|e| e.message),
        Err("Invalid range delete: 1 range delete(s) for 0 end(s).".to_owned())
    );
}

#[test]
fn a_write_without_extensions_adds_no_bytes() {
    let write = AtomicWrite {
        mutations: vec![Mutation::delete(k("a"))],
        ..Default::default()
    };
    assert!(AtomicWriteExt::of(&write).is_empty());
    assert!(AtomicWriteExt::of(&write).encode_to_vec().is_empty());
}

fn placeholder_write() -> AtomicWrite {
    AtomicWrite {
        mutations: vec![
            // A placeholder as decoded: a range delete without its end.
            Mutation::delete_range(KeyRange::new(k("a"), Vec::new())),
            Mutation::set(k("b"), KvValue::U64(1)),
        ],
        ..Default::default()
    }
}

fn apply(ranges: Vec<RangeDeleteExt>, offered: bool) -> Result<AtomicWrite, String> {
    let mut write = placeholder_write();
    AtomicWriteExt {
        enqueues_without_retries: Vec::new(),
        range_deletes: ranges,
    }
    .apply_to(&mut write, offered)
    .map_err(|e| e.message)?;
    Ok(write)
}

fn range_delete(mutation: u32) -> RangeDeleteExt {
    RangeDeleteExt {
        mutation,
        end: k("z"),
    }
}

#[test]
fn malformed_range_deletes_are_refused() {
    assert!(apply(vec![range_delete(0)], true).is_ok());
    assert_eq!(
        apply(vec![range_delete(2)], true).unwrap_err(),
        "Invalid range delete: mutation index 2 is out of range."
    );
    assert_eq!(
        apply(vec![range_delete(u32::MAX)], true).unwrap_err(),
        format!(
            "Invalid range delete: mutation index {} is out of range.",
            u32::MAX
        )
    );
    assert_eq!(
        apply(vec![range_delete(1)], true).unwrap_err(),
        "Invalid range delete: mutation 1 is not a range delete."
    );
    assert_eq!(
        apply(vec![range_delete(0), range_delete(0)], true).unwrap_err(),
        "Invalid range delete: 1 range delete(s) for 2 end(s)."
    );
    assert_eq!(
        apply(vec![], true).unwrap_err(),
        "Invalid range delete: 1 range delete(s) for 0 end(s)."
    );
    let mut two = placeholder_write();
    two.mutations[1] = two.mutations[0].clone();
    let named_twice = AtomicWriteExt {
        enqueues_without_retries: Vec::new(),
        range_deletes: vec![range_delete(0), range_delete(0)],
    }
    .apply_to(&mut two, true);
    assert_eq!(
        named_twice.map_err(|e| e.message),
        Err("Invalid range delete: mutation 0 is named twice.".to_owned())
    );
    assert_eq!(
        apply(vec![range_delete(0)], false).unwrap_err(),
        "This server does not offer the range-delete/1 extension."
    );
}

#[test]
fn a_range_delete_field_of_the_wrong_wire_type_does_not_decode() {
    // Field 1002 as a varint instead of a message.
    let mut body = encode_atomic_write(&placeholder_write()).encode_to_vec();
    prost::encoding::uint32::encode(1002, &7, &mut body);
    assert!(AtomicWriteExt::decode(body.as_slice()).is_err());
    // A message whose inner end field is a varint.
    let mut inner = Vec::new();
    prost::encoding::uint32::encode(2, &7, &mut inner);
    let mut body = encode_atomic_write(&placeholder_write()).encode_to_vec();
    prost::encoding::bytes::encode(1002, &inner, &mut body);
    assert!(AtomicWriteExt::decode(body.as_slice()).is_err());
}

#[test]
fn range_requests_and_counts_round_trip() {
    let range = KeyRange::new(k("a"), k("b"));
    let body = RangeRequest::of(&range).encode_to_vec();
    assert_eq!(RangeRequest::decode_range(&body).unwrap(), range);
    let err = RangeRequest::decode_range(&[0x0a, 0xff]).unwrap_err();
    assert!(
        err.message.starts_with("Request protobuf is invalid"),
        "{err}"
    );
    let count = RangeCount {
        entries: 3,
        key_bytes: 12,
        value_bytes: 1 << 40,
    };
    let wire = RangeCountResponse::from(count).encode_to_vec();
    let back = RangeCountResponse::decode(wire.as_slice()).unwrap();
    assert_eq!(RangeCount::from(back), count);
}

fn assemble(assembler: &mut RangeWatchAssembler, event: &RangeWatchEvent) -> Vec<RangeWatchEvent> {
    let mut events = Vec::new();
    for frame in range_watch_frames(event) {
        // Through the bytes, as a client reads them.
        let frame = RangeWatchFrame::decode(frame.encode_to_vec().as_slice()).unwrap();
        events.extend(assembler.push(frame).unwrap());
    }
    events
}

#[test]
fn a_large_change_list_is_split_and_reassembled_into_one_event() {
    let changes: Vec<RangeChange> = (0..60)
        .map(|i| {
            let name = format!("k{i:03}");
            let value = KvValue::Bytes(vec![i as u8; 60 * 1024].into());
            let expiry = (i % 2 == 0).then_some(1_700_000_000_000 + i64::from(i));
            RangeChange {
                key: k(&name),
                entry: (i % 5 != 0).then(|| entry(&name, value, expiry)),
            }
        })
        .collect();
    let event = RangeWatchEvent::Changed(changes);
    let frames = range_watch_frames(&event);
    assert!(frames.len() >= 3, "{} frames", frames.len());
    assert!(frames[..frames.len() - 1].iter().all(|f| f.continues));
    assert!(!frames[frames.len() - 1].continues);
    assert!(
        frames
            .iter()
            .all(|f| f.encoded_len() <= RANGE_WATCH_FRAME_BYTES + 70 * 1024)
    );

    let mut assembler = RangeWatchAssembler::new(all());
    assert_eq!(
        assemble(&mut assembler, &RangeWatchEvent::Reread),
        vec![RangeWatchEvent::Reread]
    );
    assert_eq!(assemble(&mut assembler, &event), vec![event]);
}

fn change_frame(keys: &[Vec<u8>]) -> RangeWatchFrame {
    RangeWatchFrame {
        reread: false,
        changes: keys
            .iter()
            .map(|key| RangeWatchChange {
                key: key.clone(),
                entry: None,
                expires_at_ms: 0,
            })
            .collect(),
        continues: false,
    }
}

fn reread() -> RangeWatchFrame {
    RangeWatchFrame {
        reread: true,
        changes: Vec::new(),
        continues: false,
    }
}

fn refusal(frames: Vec<RangeWatchFrame>) -> String {
    let mut assembler = RangeWatchAssembler::new(KeyRange::new(k("a"), k("m")));
    for frame in frames {
        if let Err(err) = assembler.push(frame) {
            return err.message;
        }
    }
    panic!("every frame was accepted")
}

#[test]
fn malformed_range_watch_streams_are_refused() {
    let prefix = "invalid range watch frame: ";
    let cases: Vec<(Vec<RangeWatchFrame>, &str)> = vec![
        (
            vec![change_frame(&[k("b")])],
            "the stream does not start with reread",
        ),
        (
            vec![reread(), change_frame(&[k("x")])],
            "a key outside the watched range",
        ),
        (
            vec![reread(), change_frame(&[k("c"), k("b")])],
            "keys out of order",
        ),
        (vec![reread(), change_frame(&[])], "no changes"),
        (
            vec![RangeWatchFrame {
                changes: change_frame(&[k("b")]).changes,
                ..reread()
            }],
            "a reread frame with changes",
        ),
        (
            vec![
                reread(),
                RangeWatchFrame {
                    continues: true,
                    ..change_frame(&[k("b")])
                },
                reread(),
            ],
            "a reread in the middle of a change list",
        ),
        (
            vec![
                reread(),
                RangeWatchFrame {
                    continues: true,
                    ..change_frame(&[k("c")])
                },
                change_frame(&[k("b")]),
            ],
            "keys out of order",
        ),
    ];
    for (frames, expected) in cases {
        assert_eq!(refusal(frames), format!("{prefix}{expected}"));
    }
    // An entry filed under another key.
    let mut frame = change_frame(&[k("b")]);
    frame.changes[0].entry = Some(entry_to_pb(&entry("c", KvValue::U64(1), None)));
    assert_eq!(
        refusal(vec![reread(), frame]),
        format!("{prefix}an entry under another key")
    );
    // A broken entry is the entry decoder's error.
    let mut frame = change_frame(&[k("b")]);
    let mut broken = entry_to_pb(&entry("b", KvValue::U64(1), None));
    broken.versionstamp.truncate(3);
    frame.changes[0].entry = Some(broken);
    assert_eq!(refusal(vec![reread(), frame]), "Invalid versionstamp.");
}

#[test]
fn a_restarted_stream_must_start_with_reread_again_and_drops_a_partial_list() {
    let mut assembler = RangeWatchAssembler::new(all());
    assembler.push(reread()).unwrap();
    let partial = RangeWatchFrame {
        continues: true,
        ..change_frame(&[k("b")])
    };
    assert_eq!(assembler.push(partial).unwrap(), None);
    assembler.restart();
    assert!(assembler.push(change_frame(&[k("c")])).is_err());
    assembler.restart();
    assert_eq!(
        assembler.push(reread()).unwrap(),
        Some(RangeWatchEvent::Reread)
    );
    assert_eq!(
        assembler.push(change_frame(&[k("c")])).unwrap(),
        Some(RangeWatchEvent::Changed(vec![RangeChange {
            key: k("c"),
            entry: None
        }]))
    );
}

//! Versionstamps: one per commit, strictly increasing, shared by every key the commit writes, and
//! the keys of versionstamped sets.

use open_deno_kv_model::{
    AtomicWrite, Backend, Key, KeyPart, KvValue, Mutation, MutationKind, ReadRange, Versionstamp,
    key,
};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        versionstamps_strictly_increase_across_commits,
        one_commit_stamps_every_key_it_writes,
        failed_writes_leave_every_versionstamp_as_it_was,
        versionstamp_is_ten_bytes_shown_as_twenty_hex_digits,
        versionstamped_set_appends_the_commit_versionstamp,
        two_versionstamped_sets_with_one_prefix_make_one_key,
        versionstamped_keys_sort_in_commit_order,
        versionstamped_set_with_empty_prefix_is_refused,
        a_write_that_changes_nothing_still_takes_a_later_versionstamp,
    ]
}

/// A versionstamped set under `prefix`.
fn stamped_set(prefix: &Key, value: KvValue) -> Mutation {
    mutation(prefix, MutationKind::SetSuffixVersionstampedKey(value))
}

/// Commits some mutations.
async fn commit_all(kv: &dyn Backend, mutations: Vec<Mutation>) -> Versionstamp {
    commit(
        kv,
        AtomicWrite {
            mutations,
            ..Default::default()
        },
    )
    .await
}

/// Every entry in the store (keys sort between the empty key and `FF`).
async fn everything(kv: &dyn Backend) -> Vec<open_deno_kv_model::KvEntry> {
    let range = ReadRange {
        start: Vec::new(),
        end: vec![0xff],
        limit: 1000,
        reverse: false,
    };
    read(kv, vec![range]).await.remove(0)
}

/// Whatever the kind of write (set, delete of a missing key, sum, a write guarded by a passing
/// check), each commit's versionstamp is larger than the one before. No step size is assumed.
async fn versionstamps_strictly_increase_across_commits(env: Env) {
    let kv = &*env.kv;
    let mut last = Versionstamp::ZERO;
    for round in 0..10u32 {
        let k = key!["k", round % 3];
        let stamps = [
            set(kv, &k, KvValue::U64(1)).await,
            commit_all(kv, vec![Mutation::sum(enc(&k), KvValue::U64(1))]).await,
            delete(kv, &key!["never set"]).await,
            commit(
                kv,
                AtomicWrite {
                    checks: vec![check(&key!["never set"], None)],
                    mutations: vec![Mutation::delete(enc(&k))],
                    ..Default::default()
                },
            )
            .await,
        ];
        for stamp in stamps {
            assert!(stamp > last, "{stamp} after {last} (round {round})");
            last = stamp;
        }
    }
}

/// Sets, sums, min/max and versionstamped sets of one write all carry the returned versionstamp.
async fn one_commit_stamps_every_key_it_writes(env: Env) {
    let kv = &*env.kv;
    let earlier = set(kv, &key!["c", "counter"], KvValue::U64(1)).await;
    let untouched = set(kv, &key!["c", "untouched"], KvValue::U64(1)).await;
    let stamp = commit_all(
        kv,
        vec![
            Mutation::set(enc(&key!["c", "a"]), KvValue::U64(1)),
            Mutation::set(enc(&key!["c", "b"]), v8_string("b")),
            Mutation::sum(enc(&key!["c", "counter"]), KvValue::U64(1)),
            mutation(&key!["c", "min"], MutationKind::Min(KvValue::U64(1))),
            stamped_set(&key!["c", "log"], KvValue::U64(1)),
            stamped_set(&key!["other log"], KvValue::U64(1)),
        ],
    )
    .await;
    assert!(stamp > earlier);

    let written = list_prefix(kv, &key!["c"], 100, false).await;
    assert_eq!(written.len(), 6, "five written keys and one untouched");
    for entry in &written {
        let k = open_deno_kv_model::decode_key(&entry.key).expect("valid key");
        let expected = if k == key!["c", "untouched"] {
            untouched
        } else {
            stamp
        };
        assert_eq!(entry.versionstamp, expected, "versionstamp of {k}");
    }
    let other = list_prefix(kv, &key!["other log"], 100, false).await;
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].versionstamp, stamp);
}

/// A write that fails its check or a mutation changes no entry's versionstamp, and the next
/// commit still comes after the last successful one.
async fn failed_writes_leave_every_versionstamp_as_it_was(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["a"], KvValue::U64(1)).await;
    set(kv, &key!["bytes"], KvValue::Bytes(vec![1].into())).await;
    let last = set(kv, &key!["b"], KvValue::U64(1)).await;
    let before = everything(kv).await;

    let failed_check = AtomicWrite {
        checks: vec![check(&key!["a"], None)],
        mutations: vec![
            Mutation::set(enc(&key!["a"]), KvValue::U64(2)),
            stamped_set(&key!["log"], KvValue::U64(1)),
        ],
        ..Default::default()
    };
    assert_eq!(kv.atomic_write(failed_check).await.expect("valid"), None);
    let failed_mutation = AtomicWrite {
        mutations: vec![
            Mutation::set(enc(&key!["b"]), KvValue::U64(2)),
            stamped_set(&key!["log"], KvValue::U64(1)),
            Mutation::sum(enc(&key!["bytes"]), KvValue::U64(1)),
        ],
        ..Default::default()
    };
    write_error(kv, failed_mutation).await;
    assert_eq!(everything(kv).await, before);

    let next = set(kv, &key!["c"], KvValue::U64(1)).await;
    assert!(next > last);
}

async fn versionstamp_is_ten_bytes_shown_as_twenty_hex_digits(env: Env) {
    let stamp = set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    assert_ne!(
        stamp,
        Versionstamp::ZERO,
        "no commit gets the zero versionstamp"
    );
    let text = stamp.to_string();
    assert_eq!(text.len(), 20);
    assert!(
        text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "lowercase hex: {text}"
    );
    assert_eq!(text.parse::<Versionstamp>(), Ok(stamp));
    assert_eq!(stamp.as_bytes().len(), 10);
    let read = get(&*env.kv, &key!["a"]).await.expect("set");
    assert_eq!(read.versionstamp.as_bytes(), stamp.as_bytes());
}

/// `["log", kv.commitVersionstamp()]`: the key is the prefix plus a string part holding the
/// commit's versionstamp as 20 lowercase hex digits (bytes `02`, the digits, `00`). Several
/// commits, so that some versionstamps hold hex letters whose case matters.
async fn versionstamped_set_appends_the_commit_versionstamp(env: Env) {
    let kv = &*env.kv;
    let mut stamps = Vec::new();
    for i in 0..40u64 {
        let stamp = commit_all(kv, vec![stamped_set(&key!["log"], KvValue::U64(i))]).await;
        let entries = list_prefix(kv, &key!["log", stamp.to_string()], 1, false).await;
        assert_eq!(entries, Vec::new(), "nothing lies under the written key");
        let entry = get(kv, &key!["log", stamp.to_string()])
            .await
            .unwrap_or_else(|| panic!("no entry at [\"log\", \"{stamp}\"]"));
        let mut raw = enc(&key!["log"]);
        raw.push(0x02);
        raw.extend_from_slice(stamp.to_string().as_bytes());
        raw.push(0x00);
        assert_eq!(entry.key, raw);
        assert_eq!(entry.value, KvValue::U64(i));
        assert_eq!(entry.versionstamp, stamp);
        stamps.push(stamp);
    }
    let all = list_prefix(kv, &key!["log"], 100, false).await;
    let expected: Vec<Key> = stamps.iter().map(|s| key!["log", s.to_string()]).collect();
    assert_eq!(keys_of(&all), expected, "exactly one key per commit");
    // The prefix itself is not written.
    assert_eq!(get(kv, &key!["log"]).await, None);
}

/// Both sets get the same key; the later one wins, as with two plain sets of one key.
async fn two_versionstamped_sets_with_one_prefix_make_one_key(env: Env) {
    let kv = &*env.kv;
    let stamp = commit_all(
        kv,
        vec![
            stamped_set(&key!["log"], v8_string("one")),
            stamped_set(&key!["log"], v8_string("two")),
        ],
    )
    .await;
    let entries = list_prefix(kv, &key!["log"], 100, false).await;
    assert_eq!(keys_of(&entries), vec![key!["log", stamp.to_string()]]);
    assert_eq!(entries[0].value, v8_string("two"));
}

/// An append-only log: keys from successive commits list in commit order.
async fn versionstamped_keys_sort_in_commit_order(env: Env) {
    let kv = &*env.kv;
    let mut stamps = Vec::new();
    for i in 0..8u64 {
        if i % 3 == 1 {
            // Unrelated commits in between must not disturb the order.
            set(kv, &key!["noise"], KvValue::U64(i)).await;
        }
        stamps.push(commit_all(kv, vec![stamped_set(&key!["log"], KvValue::U64(i))]).await);
    }
    let entries = list_prefix(kv, &key!["log"], 100, false).await;
    let values: Vec<KvValue> = entries.iter().map(|e| e.value.clone()).collect();
    assert_eq!(values, (0..8).map(KvValue::U64).collect::<Vec<_>>());
    let suffixes: Vec<KeyPart> = keys_of(&entries)
        .into_iter()
        .map(|k| k.into_parts().pop().expect("two parts"))
        .collect();
    let expected: Vec<KeyPart> = stamps
        .iter()
        .map(|s| KeyPart::String(s.to_string()))
        .collect();
    assert_eq!(suffixes, expected);
}

async fn versionstamped_set_with_empty_prefix_is_refused(env: Env) {
    let kv = &*env.kv;
    let write = AtomicWrite {
        mutations: vec![Mutation {
            key: Vec::new(),
            kind: MutationKind::SetSuffixVersionstampedKey(KvValue::U64(1)),
            expire_at: None,
        }],
        ..Default::default()
    };
    assert_eq!(write_error(kv, write).await, "key cannot be empty");
    assert_eq!(everything(kv).await, Vec::new());
}

/// `kv.atomic().commit()` with nothing in it commits (Deno answers `ok` with a versionstamp), and
/// the commits after it get later versionstamps: a versionstamp handed out is never handed out
/// again, whether or not its write changed anything.
async fn a_write_that_changes_nothing_still_takes_a_later_versionstamp(env: Env) {
    let kv = &*env.kv;
    let mut last = set(kv, &key!["before"], KvValue::U64(1)).await;
    for round in 0..3 {
        let empty = commit(kv, AtomicWrite::default()).await;
        assert!(
            empty > last,
            "an empty write: {empty} after {last} (round {round})"
        );
        let only_check = commit(
            kv,
            AtomicWrite {
                checks: vec![check(&key!["never set"], None)],
                ..Default::default()
            },
        )
        .await;
        assert!(
            only_check > empty,
            "a check alone: {only_check} after {empty}"
        );
        let next = set(kv, &key!["after"], KvValue::U64(1)).await;
        assert!(next > only_check, "the next set: {next} after {only_check}");
        last = next;
    }
}

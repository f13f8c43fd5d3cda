//! Lists: prefix and range selectors, limit, reverse, cursor paging, several ranges in one
//! snapshot, and what a list shows after deletes and overwrites.

use std::collections::HashSet;

use open_deno_kv_model::{Backend, Key, KvEntry, KvValue, ListSelector, ReadRange, key};

use super::cases;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    cases![NOTHING =>
        prefix_list_excludes_the_prefix_key_itself,
        empty_prefix_lists_every_key,
        limit_returns_the_first_entries,
        reverse_lists_in_descending_order,
        reverse_with_limit_returns_the_last_entries_descending,
        prefix_and_start_begins_at_start_inclusive,
        prefix_and_end_stops_before_end,
        start_and_end_select_a_half_open_range,
        start_alone_selects_only_that_key,
        forward_cursor_pages_cover_every_key_once,
        reverse_cursor_pages_cover_every_key_once,
        cursor_paging_works_for_bounded_selectors,
        several_ranges_in_one_read_are_answered_in_order,
        empty_or_inverted_range_returns_nothing,
        limit_above_entry_count_returns_every_entry,
        listed_entries_carry_their_versionstamps,
        deleted_keys_disappear_from_lists,
        overwritten_key_is_listed_once_with_its_new_value,
        zero_limit_is_refused,
        start_outside_prefix_is_refused,
        end_outside_prefix_is_refused,
        start_after_end_is_refused,
        malformed_cursor_is_refused,
        cursor_outside_the_selector_is_refused,
    ]
}

/// Builds a selector the test expects to be valid.
fn selector(prefix: Option<&Key>, start: Option<&Key>, end: Option<&Key>) -> ListSelector {
    ListSelector::new(prefix, start, end).unwrap_or_else(|e| panic!("selector refused: {e}"))
}

/// The read range for one page of `selector`, resuming after `cursor` if given.
fn page_range(
    selector: &ListSelector,
    limit: u32,
    reverse: bool,
    cursor: Option<&str>,
) -> ReadRange {
    let (start, end) = selector
        .range(reverse, cursor)
        .unwrap_or_else(|e| panic!("cursor {cursor:?} refused: {e}"));
    ReadRange {
        start,
        end,
        limit,
        reverse,
    }
}

/// One page of `selector`, as `Deno.Kv.list` would read it.
async fn list_page(
    kv: &dyn Backend,
    selector: &ListSelector,
    limit: u32,
    reverse: bool,
    cursor: Option<&str>,
) -> Vec<KvEntry> {
    let range = page_range(selector, limit, reverse, cursor);
    read(kv, vec![range]).await.remove(0)
}

/// Every page of `selector`, `page_size` entries at a time, each page resuming from the cursor of
/// the previous page's last key. Stops at a short or empty page.
async fn all_pages(
    kv: &dyn Backend,
    selector: &ListSelector,
    page_size: u32,
    reverse: bool,
) -> Vec<Vec<Key>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        assert!(pages.len() < 100, "paging does not end");
        let page = list_page(kv, selector, page_size, reverse, cursor.as_deref()).await;
        let Some(last) = page.last() else { break };
        cursor = Some(
            selector
                .encode_cursor(&last.key)
                .unwrap_or_else(|e| panic!("a listed key is outside its selector: {e}")),
        );
        let full = page.len() == page_size as usize;
        pages.push(keys_of(&page));
        if !full {
            break;
        }
    }
    pages
}

/// Writes each key (valued with its position in `keys`), one commit per key.
async fn set_all(kv: &dyn Backend, keys: &[Key]) {
    for (i, k) in (0u64..).zip(keys) {
        set(kv, k, KvValue::U64(i)).await;
    }
}

fn reversed(keys: &[Key]) -> Vec<Key> {
    keys.iter().rev().cloned().collect()
}

/// The error text of a selector that must be refused.
fn selector_error(prefix: Option<&Key>, start: Option<&Key>, end: Option<&Key>) -> String {
    match ListSelector::new(prefix, start, end) {
        Err(e) => {
            assert!(e.is_invalid_input(), "{e} should be an input error");
            e.to_string()
        }
        Ok(s) => panic!("selector should have been refused, got {s:?}"),
    }
}

/// `{prefix}` covers the keys strictly under the prefix: not the prefix key itself, nor a sibling
/// whose last part merely starts with the prefix's text.
async fn prefix_list_excludes_the_prefix_key_itself(env: Env) {
    let kv = &*env.kv;
    set_all(
        kv,
        &[
            key!["a"],
            key!["a", b""],
            key!["a", "x"],
            key!["a", "x", 1],
            key!["a", true],
            key!["a\u{0}"],
            key!["ab"],
            key![""],
            key!["b"],
        ],
    )
    .await;
    let listed = list_prefix(kv, &key!["a"], 100, false).await;
    assert_eq!(
        keys_of(&listed),
        [
            key!["a", b""],
            key!["a", "x"],
            key!["a", "x", 1],
            key!["a", true]
        ]
    );
}

/// The empty prefix `[]` lists every key, from the smallest (empty bytes) to the largest (true...).
async fn empty_prefix_lists_every_key(env: Env) {
    let kv = &*env.kv;
    let all = [
        key![b""],
        key![b"\xff"],
        key![""],
        key!["z"],
        key![-1],
        key![0],
        key![f64::NEG_INFINITY],
        key![f64::NAN],
        key![false],
        key![true],
        key![true, true],
    ];
    set_all(kv, &all).await;
    assert_eq!(keys_of(&list_prefix(kv, &key![], 100, false).await), all);
}

async fn limit_returns_the_first_entries(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = (0..6).map(|i| key!["p", i]).collect();
    set_all(kv, &keys).await;
    let listed = list_prefix(kv, &key!["p"], 4, false).await;
    assert_eq!(keys_of(&listed), keys[..4]);
    let one = list_prefix(kv, &key!["p"], 1, false).await;
    assert_eq!(keys_of(&one), [key!["p", 0]]);
    assert_eq!(one[0].value, KvValue::U64(0));
}

async fn reverse_lists_in_descending_order(env: Env) {
    let kv = &*env.kv;
    let keys = [
        key!["p", b"\x00"],
        key!["p", "m"],
        key!["p", "m", 1],
        key!["p", -5],
        key!["p", 2.5],
        key!["p", false],
    ];
    set_all(kv, &keys).await;
    set(kv, &key!["q"], KvValue::U64(99)).await;
    set(kv, &key!["p"], KvValue::U64(98)).await;
    let listed = list_prefix(kv, &key!["p"], 100, true).await;
    assert_eq!(keys_of(&listed), reversed(&keys));
}

/// A reverse list with a limit takes the entries from the end of the range: the last N keys, in
/// descending order (not the first N reversed).
async fn reverse_with_limit_returns_the_last_entries_descending(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = (0..10).map(|i| key!["p", i]).collect();
    set_all(kv, &keys).await;
    let listed = list_prefix(kv, &key!["p"], 3, true).await;
    assert_eq!(keys_of(&listed), [key!["p", 9], key!["p", 8], key!["p", 7]]);
}

/// `{prefix, start}`: from `start` (included) to the end of the prefix.
async fn prefix_and_start_begins_at_start_inclusive(env: Env) {
    let kv = &*env.kv;
    let keys = [
        key!["p", "a"],
        key!["p", "c"],
        key!["p", "c", "child"],
        key!["p", "d"],
        key!["p", true],
    ];
    set_all(kv, &keys).await;
    set(kv, &key!["q", "c"], KvValue::U64(99)).await;
    let from_c = selector(Some(&key!["p"]), Some(&key!["p", "c"]), None);
    assert_eq!(
        keys_of(&list_page(kv, &from_c, 100, false, None).await),
        keys[1..]
    );
    // A start that is not a stored key begins at the next key.
    let from_b = selector(Some(&key!["p"]), Some(&key!["p", "b"]), None);
    assert_eq!(
        keys_of(&list_page(kv, &from_b, 100, true, None).await),
        reversed(&keys[1..])
    );
}

/// `{prefix, end}`: from the start of the prefix up to `end` (excluded), and `end`'s children are
/// excluded too since they sort after it.
async fn prefix_and_end_stops_before_end(env: Env) {
    let kv = &*env.kv;
    let keys = [
        key!["p", "a"],
        key!["p", "b"],
        key!["p", "c"],
        key!["p", "c", "child"],
        key!["p", "d"],
    ];
    set_all(kv, &keys).await;
    set(kv, &key!["p"], KvValue::U64(99)).await;
    let to_c = selector(Some(&key!["p"]), None, Some(&key!["p", "c"]));
    assert_eq!(
        keys_of(&list_page(kv, &to_c, 100, false, None).await),
        [key!["p", "a"], key!["p", "b"]]
    );
    assert_eq!(
        keys_of(&list_page(kv, &to_c, 100, true, None).await),
        [key!["p", "b"], key!["p", "a"]]
    );
}

/// `{start, end}` is `[start, end)` over all keys: it includes `start` itself and its children,
/// crosses top-level keys, and excludes `end`.
async fn start_and_end_select_a_half_open_range(env: Env) {
    let kv = &*env.kv;
    let keys = [
        key!["a"],
        key!["b"],
        key!["b", "child"],
        key!["b\u{0}"],
        key!["c"],
        key!["c", "child"],
        key!["d"],
    ];
    set_all(kv, &keys).await;
    let b_to_c = selector(None, Some(&key!["b"]), Some(&key!["c"]));
    assert_eq!(
        keys_of(&list_page(kv, &b_to_c, 100, false, None).await),
        [key!["b"], key!["b", "child"], key!["b\u{0}"]]
    );
    assert_eq!(
        keys_of(&list_page(kv, &b_to_c, 2, true, None).await),
        [key!["b\u{0}"], key!["b", "child"]]
    );
}

/// `{start}` alone selects exactly the key `start` (the range `[start, start+00)`), not its
/// children.
async fn start_alone_selects_only_that_key(env: Env) {
    let kv = &*env.kv;
    set_all(
        kv,
        &[key!["k"], key!["k", "child"], key!["k\u{0}"], key!["l"]],
    )
    .await;
    let only_k = selector(None, Some(&key!["k"]), None);
    let listed = list_page(kv, &only_k, 100, false, None).await;
    assert_eq!(keys_of(&listed), [key!["k"]]);
    assert_eq!(listed[0].value, KvValue::U64(0));
    let missing = selector(None, Some(&key!["j"]), None);
    assert_eq!(list_page(kv, &missing, 100, false, None).await, []);
}

/// Paging forward with cursors: the pages joined equal the full list, with no key twice and none
/// missing, and the last page is the short one.
async fn forward_cursor_pages_cover_every_key_once(env: Env) {
    let kv = &*env.kv;
    let keys = [
        key!["p", b"\x00"],
        key!["p", ""],
        key!["p", "a"],
        key!["p", "a", "child"],
        key!["p", "a\u{0}"],
        key!["p", -1],
        key!["p", 1],
        key!["p", 1.0],
        key!["p", true],
        key!["p", true, "x"],
    ];
    set_all(kv, &keys).await;
    set(kv, &key!["p"], KvValue::U64(99)).await;
    set(kv, &key!["q"], KvValue::U64(99)).await;
    let p = selector(Some(&key!["p"]), None, None);
    let full = keys_of(&list_page(kv, &p, 100, false, None).await);
    assert_eq!(full, keys);
    let pages = all_pages(kv, &p, 3, false).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3, 3, 3, 1], "page sizes");
    assert_eq!(pages.concat(), full);
    let exact = all_pages(kv, &p, 5, false).await;
    assert_eq!(
        exact.concat(),
        full,
        "pages that end exactly at the last key"
    );
}

/// Paging in reverse with cursors: each page continues below the previous one's last key.
async fn reverse_cursor_pages_cover_every_key_once(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = [key!["p", "s"], key!["p", "s", 0]]
        .into_iter()
        .chain((-3..4).map(|i| key!["p", i]))
        .collect();
    set_all(kv, &keys).await;
    set(kv, &key!["o"], KvValue::U64(99)).await;
    let p = selector(Some(&key!["p"]), None, None);
    let pages = all_pages(kv, &p, 2, true).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [2, 2, 2, 2, 1], "page sizes");
    let joined = pages.concat();
    let distinct: HashSet<&Key> = joined.iter().collect();
    assert_eq!(distinct.len(), joined.len(), "no key on two pages");
    assert_eq!(joined, reversed(&keys));
}

/// Cursors of `{prefix, start}`, `{prefix, end}` and `{start, end}` selectors (the last relative to
/// the bytes start and end share) page through exactly the selected keys, both ways.
async fn cursor_paging_works_for_bounded_selectors(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = ["a", "b", "ba", "c", "d", "e", "f", "g"]
        .into_iter()
        .map(|s| key!["user", s])
        .collect();
    set_all(kv, &keys).await;
    set(kv, &key!["user"], KvValue::U64(99)).await;
    set(kv, &key!["users"], KvValue::U64(99)).await;
    let user = key!["user"];
    let (b, f) = (key!["user", "b"], key!["user", "f"]);
    let selectors = [
        (selector(Some(&user), Some(&b), None), &keys[1..]),
        (selector(Some(&user), None, Some(&f)), &keys[..6]),
        (selector(None, Some(&b), Some(&f)), &keys[1..6]),
    ];
    for (sel, expected) in selectors {
        for page_size in [1, 2, 4] {
            let forward = all_pages(kv, &sel, page_size, false).await.concat();
            assert_eq!(forward, expected, "{sel:?} forward by {page_size}");
            let backward = all_pages(kv, &sel, page_size, true).await.concat();
            assert_eq!(
                backward,
                reversed(expected),
                "{sel:?} reverse by {page_size}"
            );
        }
    }
}

/// One snapshot read with several ranges answers each range, in the order given, with its own
/// limit and direction.
async fn several_ranges_in_one_read_are_answered_in_order(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = ["a", "b", "c"]
        .into_iter()
        .flat_map(|p| (0..4).map(move |i| key![p, i]))
        .collect();
    set_all(kv, &keys).await;
    let range = |prefix: &str, limit: u32, reverse: bool| {
        let mut r = ReadRange::prefix(&key![prefix], limit).expect("prefix encodes");
        r.reverse = reverse;
        r
    };
    let out = read(
        kv,
        vec![
            range("c", 2, false),
            range("a", 10, true),
            ReadRange::single_key(&key!["b", 2]).expect("key encodes"),
            range("zzz", 5, false),
            range("c", 10, false),
        ],
    )
    .await;
    let listed: Vec<Vec<Key>> = out.iter().map(|entries| keys_of(entries)).collect();
    assert_eq!(
        listed,
        [
            vec![key!["c", 0], key!["c", 1]],
            vec![key!["a", 3], key!["a", 2], key!["a", 1], key!["a", 0]],
            vec![key!["b", 2]],
            vec![],
            vec![key!["c", 0], key!["c", 1], key!["c", 2], key!["c", 3]],
        ]
    );
}

/// A range whose start is not below its end holds nothing; the backend answers with no entries
/// (not an error, not a panic), in both directions, next to a normal range.
async fn empty_or_inverted_range_returns_nothing(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["a"], key!["b"], key!["c"]]).await;
    let (a, c) = (enc(&key!["a"]), enc(&key!["c"]));
    let raw = |start: &[u8], end: &[u8], reverse: bool| ReadRange {
        start: start.to_vec(),
        end: end.to_vec(),
        limit: 10,
        reverse,
    };
    let out = read(
        kv,
        vec![
            raw(&a, &a, false),
            raw(&c, &a, false),
            raw(&c, &a, true),
            raw(&a, &c, false),
        ],
    )
    .await;
    assert_eq!(out[0], [], "start == end");
    assert_eq!(out[1], [], "start > end");
    assert_eq!(out[2], [], "start > end, reverse");
    assert_eq!(keys_of(&out[3]), [key!["a"], key!["b"]]);
    // Through a selector: start == end is allowed and empty.
    let nothing = selector(None, Some(&key!["b"]), Some(&key!["b"]));
    assert_eq!(list_page(kv, &nothing, 10, false, None).await, []);
}

async fn limit_above_entry_count_returns_every_entry(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = (0..3).map(|i| key!["p", i]).collect();
    set_all(kv, &keys).await;
    assert_eq!(
        keys_of(&list_prefix(kv, &key!["p"], 1000, false).await),
        keys
    );
    assert_eq!(
        keys_of(&list_prefix(kv, &key!["p"], 4, true).await),
        reversed(&keys)
    );
}

/// Each listed entry carries the versionstamp of the commit that last wrote it; keys written in
/// one commit share it.
async fn listed_entries_carry_their_versionstamps(env: Env) {
    let kv = &*env.kv;
    let first = set(kv, &key!["p", 1], KvValue::U64(1)).await;
    let both = commit(
        kv,
        open_deno_kv_model::AtomicWrite {
            mutations: vec![
                open_deno_kv_model::Mutation::set(enc(&key!["p", 2]), KvValue::U64(2)),
                open_deno_kv_model::Mutation::set(enc(&key!["p", 3]), KvValue::U64(3)),
            ],
            ..Default::default()
        },
    )
    .await;
    let last = set(kv, &key!["p", 0], KvValue::U64(0)).await;
    assert!(first < both && both < last);
    let listed = list_prefix(kv, &key!["p"], 10, false).await;
    let seen: Vec<(Key, KvValue, _)> = keys_of(&listed)
        .into_iter()
        .zip(&listed)
        .map(|(k, e)| (k, e.value.clone(), e.versionstamp))
        .collect();
    assert_eq!(
        seen,
        [
            (key!["p", 0], KvValue::U64(0), last),
            (key!["p", 1], KvValue::U64(1), first),
            (key!["p", 2], KvValue::U64(2), both),
            (key!["p", 3], KvValue::U64(3), both),
        ]
    );
}

/// Deleted keys are gone from lists, and do not use up a limit (no tombstones are counted).
async fn deleted_keys_disappear_from_lists(env: Env) {
    let kv = &*env.kv;
    let keys: Vec<Key> = (0..6).map(|i| key!["p", i]).collect();
    set_all(kv, &keys).await;
    for i in [0, 1, 3, 5] {
        delete(kv, &key!["p", i]).await;
    }
    assert_eq!(
        keys_of(&list_prefix(kv, &key!["p"], 100, false).await),
        [key!["p", 2], key!["p", 4]]
    );
    assert_eq!(
        keys_of(&list_prefix(kv, &key!["p"], 1, false).await),
        [key!["p", 2]],
        "a limit of 1 skips the deleted first keys"
    );
    assert_eq!(
        keys_of(&list_prefix(kv, &key!["p"], 1, true).await),
        [key!["p", 4]],
        "a reverse limit of 1 skips the deleted last key"
    );
    delete(kv, &key!["p", 2]).await;
    delete(kv, &key!["p", 4]).await;
    assert_eq!(list_prefix(kv, &key!["p"], 100, false).await, []);
}

async fn overwritten_key_is_listed_once_with_its_new_value(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["p", "a"], v8_string("first")).await;
    set(kv, &key!["p", "b"], v8_string("other")).await;
    set(kv, &key!["p", "a"], v8_string("second")).await;
    let latest = set(
        kv,
        &key!["p", "a"],
        KvValue::Bytes(b"third".to_vec().into()),
    )
    .await;
    let listed = list_prefix(kv, &key!["p"], 100, false).await;
    assert_eq!(keys_of(&listed), [key!["p", "a"], key!["p", "b"]]);
    assert_eq!(listed[0].value, KvValue::Bytes(b"third".to_vec().into()));
    assert_eq!(listed[0].versionstamp, latest);
    let reverse = list_prefix(kv, &key!["p"], 100, true).await;
    assert_eq!(keys_of(&reverse), [key!["p", "b"], key!["p", "a"]]);
}

/// A range with limit 0 is refused with Deno's text, even next to valid ranges.
async fn zero_limit_is_refused(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["p", 1], KvValue::U64(1)).await;
    let zero = ReadRange::prefix(&key!["p"], 0).expect("prefix encodes");
    let err = read_error(kv, vec![zero.clone()]).await;
    assert_eq!(err.to_string(), "limit must be greater than 0");
    assert!(err.is_invalid_input());
    let valid = ReadRange::prefix(&key!["p"], 10).expect("prefix encodes");
    let err = read_error(kv, vec![valid, zero]).await;
    assert_eq!(err.to_string(), "limit must be greater than 0");
}

/// `start` must lie strictly inside `prefix`: neither outside it nor the prefix key itself.
async fn start_outside_prefix_is_refused(_env: Env) {
    let text = "Start key is not in the keyspace defined by prefix";
    let p = key!["p"];
    assert_eq!(selector_error(Some(&p), Some(&key!["q"]), None), text);
    assert_eq!(selector_error(Some(&p), Some(&key!["o", "x"]), None), text);
    assert_eq!(selector_error(Some(&p), Some(&p), None), text);
}

/// `end` must lie strictly inside `prefix`.
async fn end_outside_prefix_is_refused(_env: Env) {
    let text = "End key is not in the keyspace defined by prefix";
    let p = key!["p"];
    assert_eq!(selector_error(Some(&p), None, Some(&key!["q"])), text);
    assert_eq!(selector_error(Some(&p), None, Some(&key!["pp", 1])), text);
    assert_eq!(selector_error(Some(&p), None, Some(&p)), text);
}

/// `{start, end}` with start after end is refused (start == end is an empty, valid range).
async fn start_after_end_is_refused(_env: Env) {
    assert_eq!(
        selector_error(None, Some(&key!["b"]), Some(&key!["a"])),
        "Start key is greater than end key"
    );
    assert_eq!(
        selector_error(None, Some(&key!["a", 1]), Some(&key!["a"])),
        "Start key is greater than end key",
        "a child sorts after its parent"
    );
}

/// A cursor that is not padded URL-safe base64 is refused with "invalid cursor".
async fn malformed_cursor_is_refused(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["users", "alice"], key!["users", "bob"]]).await;
    let users = selector(Some(&key!["users"]), None, None);
    let page = list_page(kv, &users, 1, false, None).await;
    let cursor = users.encode_cursor(&page[0].key).expect("listed key");
    assert!(users.range(false, Some(&cursor)).is_ok());
    let unpadded = cursor.trim_end_matches('=');
    assert_ne!(unpadded, cursor, "this cursor has padding to strip");
    for bad in [unpadded, "not a cursor!", "//8=", "+A=="] {
        for reverse in [false, true] {
            let err = users
                .range(reverse, Some(bad))
                .expect_err("malformed cursor accepted");
            assert_eq!(err.to_string(), "invalid cursor", "cursor {bad:?}");
        }
    }
}

/// A cursor pointing outside a bounded selector (here: one taken from a wider listing) is refused
/// with "cursor out of bounds".
async fn cursor_outside_the_selector_is_refused(env: Env) {
    let kv = &*env.kv;
    set_all(kv, &[key!["p", "a"], key!["p", "m"], key!["p", "z"]]).await;
    let wide = selector(Some(&key!["p"]), None, None);
    let listed = list_page(kv, &wide, 10, false, None).await;
    let cursor_a = wide.encode_cursor(&listed[0].key).expect("listed key");
    let cursor_z = wide.encode_cursor(&listed[2].key).expect("listed key");

    let from_m = selector(Some(&key!["p"]), Some(&key!["p", "m"]), None);
    let err = from_m
        .range(false, Some(&cursor_a))
        .expect_err("cursor before start accepted");
    assert_eq!(err.to_string(), "cursor out of bounds");

    let to_m = selector(Some(&key!["p"]), None, Some(&key!["p", "m"]));
    let err = to_m
        .range(true, Some(&cursor_z))
        .expect_err("cursor after end accepted");
    assert_eq!(err.to_string(), "cursor out of bounds");

    // The same cursors are fine where they do fall inside the selector.
    assert_eq!(
        keys_of(&list_page(kv, &from_m, 10, true, Some(&cursor_z)).await),
        [key!["p", "m"]]
    );
    assert_eq!(
        keys_of(&list_page(kv, &to_m, 10, false, Some(&cursor_a)).await),
        Vec::<Key>::new()
    );
}

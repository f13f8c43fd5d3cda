//! Beyond Deno KV: online backups and restores, through [`Backend::export_snapshot`] and
//! [`Backend::import_snapshot`]. Cases run only where the backend reports the capabilities
//! ([`Capabilities::export`](open_deno_kv_model::Capabilities::export), and [`import`](open_deno_kv_model::Capabilities::import) for restores); queue parts also need queues.
//!
//! An export must be one snapshot while writers commit: a writer keeps two keys at both ends of
//! the key order equal (one atomic write adds one to each), with many entries between them, so
//! an export read page by page, or one that lets a commit land in the middle, shows them apart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::TimeDelta;
use futures::{StreamExt, TryStreamExt};
use open_deno_kv_model::queue::QueuedMessage;
use open_deno_kv_model::{
    AtomicWrite, Backend, Clock, Enqueue, Key, KvEntry, KvError, KvValue, Mutation, Snapshot,
    SnapshotItem, Versionstamp, key,
};

use crate::cases::need;
use crate::support::*;
use crate::{Case, Env};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        need::EXPORT.case(
            "an_export_taken_during_writes_holds_whole_commits",
            an_export_taken_during_writes_holds_whole_commits,
        ),
        need::EXPORT.and(need::QUEUES).case(
            "an_export_holds_waiting_and_in_delivery_messages",
            an_export_holds_waiting_and_in_delivery_messages,
        ),
        need::BACKUP.and(need::QUEUE_INSPECTION).case(
            "an_import_restores_entries_messages_and_versionstamps",
            an_import_restores_entries_messages_and_versionstamps,
        ),
        need::BACKUP.case(
            "an_import_into_a_store_that_is_not_empty_is_refused_and_changes_nothing",
            an_import_into_a_store_that_is_not_empty_is_refused_and_changes_nothing,
        ),
        need::BACKUP.case(
            "an_import_into_an_emptied_store_never_reuses_a_versionstamp",
            an_import_into_an_emptied_store_never_reuses_a_versionstamp,
        ),
        need::BACKUP.case(
            "an_import_that_fails_half_way_leaves_the_store_empty",
            an_import_that_fails_half_way_leaves_the_store_empty,
        ),
        need::EXPORT.case("an_export_names_its_database", an_export_names_its_database),
        need::BACKUP.case(
            "an_import_refuses_a_versionstamp_its_entries_cannot_account_for",
            an_import_refuses_a_versionstamp_its_entries_cannot_account_for,
        ),
        need::BACKUP.and(need::REOPEN).case(
            "closing_a_handle_ends_its_running_import",
            closing_a_handle_ends_its_running_import,
        ),
    ]
}

/// Entries between the two counters, so that an export takes many items.
const FILLER: u32 = 600;

/// Every item of an export, with its versionstamp.
async fn export_all(kv: &dyn Backend) -> (Versionstamp, Vec<SnapshotItem>) {
    let snapshot = kv
        .export_snapshot()
        .await
        .unwrap_or_else(|e| panic!("export_snapshot failed: {e}"));
    let items = snapshot
        .items
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("the export stream failed: {e}"));
    (snapshot.versionstamp, items)
}

fn entries_of(items: &[SnapshotItem]) -> Vec<KvEntry> {
    items
        .iter()
        .filter_map(|item| match item {
            SnapshotItem::Entry(entry) => Some(entry.clone()),
            SnapshotItem::Message(_) => None,
        })
        .collect()
}

fn messages_of(items: &[SnapshotItem]) -> Vec<QueuedMessage> {
    items
        .iter()
        .filter_map(|item| match item {
            SnapshotItem::Message(message) => Some(message.clone()),
            SnapshotItem::Entry(_) => None,
        })
        .collect()
}

fn find(entries: &[KvEntry], key: &Key) -> KvEntry {
    let wanted = enc(key);
    entries
        .iter()
        .find(|e| e.key == wanted)
        .cloned()
        .unwrap_or_else(|| panic!("the export has no entry at {key}"))
}

/// One commit that adds one to both counters.
fn bump_both() -> AtomicWrite {
    AtomicWrite {
        mutations: vec![
            Mutation::sum(enc(&key!["a"]), KvValue::U64(1)),
            Mutation::sum(enc(&key!["z"]), KvValue::U64(1)),
        ],
        ..Default::default()
    }
}

async fn an_export_taken_during_writes_holds_whole_commits(env: Env) {
    let kv = env.kv.clone();
    for i in 0..FILLER {
        set(&*kv, &key!["m", i], KvValue::U64(u64::from(i))).await;
    }
    commit(&*kv, bump_both()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (kv, stop) = (kv.clone(), stop.clone());
        tokio::spawn(async move {
            let mut commits = 0u64;
            while !stop.load(Ordering::SeqCst) {
                commit(&*kv, bump_both()).await;
                commits += 1;
                tokio::task::yield_now().await;
            }
            commits
        })
    };
    // Exports after which the counters had moved on: they were read while commits landed.
    let mut overlapped = 0;
    for _ in 0..4 {
        let snapshot = kv
            .export_snapshot()
            .await
            .unwrap_or_else(|e| panic!("export_snapshot failed: {e}"));
        let versionstamp = snapshot.versionstamp;
        // Take the items slowly, so commits land while the export is being read.
        let mut items = Vec::new();
        let mut stream = snapshot.items;
        while let Some(item) = stream.next().await {
            items.push(item.unwrap_or_else(|e| panic!("the export stream failed: {e}")));
            if items.len() % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let entries = entries_of(&items);
        assert_eq!(entries.len(), FILLER as usize + 2, "every entry, once");
        let (a, z) = (find(&entries, &key!["a"]), find(&entries, &key!["z"]));
        assert_eq!(a.value, z.value, "both counters come from the same commit");
        assert_eq!(a.versionstamp, z.versionstamp, "written by one commit");
        assert_eq!(
            versionstamp, a.versionstamp,
            "the snapshot's versionstamp is its last commit, the one that wrote the counters"
        );
        for entry in &entries {
            assert!(
                entry.versionstamp <= versionstamp,
                "an entry ({}) is later than the snapshot ({versionstamp})",
                entry.versionstamp
            );
        }
        let keys: Vec<&[u8]> = entries.iter().map(|e| &e.key[..]).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "entries in key order");
        let now = get(&*kv, &key!["a"]).await.map(|e| e.versionstamp);
        overlapped += usize::from(now != Some(a.versionstamp));
    }
    stop.store(true, Ordering::SeqCst);
    let commits = writer.await.unwrap_or_else(|e| panic!("writer: {e}"));
    assert!(commits > 0, "the writer committed while the exports ran");
    assert!(
        overlapped > 0,
        "no export was read while commits landed: the case proved nothing"
    );
}

fn enqueue_at(env: &Env, text: &str, delay: Duration) -> Enqueue {
    Enqueue {
        payload: match v8_string(text) {
            KvValue::V8(bytes) => bytes.to_vec(),
            _ => unreachable!("v8_string is V8"),
        },
        ready_at: env.clock().now() + TimeDelta::from_std(delay).unwrap_or(TimeDelta::MAX),
        keys_if_undelivered: vec![enc(&key!["dead", text])],
        backoff_schedule: Some(vec![10, 20]),
    }
}

async fn enqueue_all(kv: &dyn Backend, enqueues: Vec<Enqueue>) {
    commit(
        kv,
        AtomicWrite {
            enqueues,
            ..Default::default()
        },
    )
    .await;
}

async fn an_export_holds_waiting_and_in_delivery_messages(env: Env) {
    let kv = env.kv.clone();
    let now_msg = enqueue_at(&env, "now", Duration::ZERO);
    let later_msg = enqueue_at(&env, "later", Duration::from_secs(3600));
    enqueue_all(&*kv, vec![now_msg.clone(), later_msg.clone()]).await;
    let held = match tokio::time::timeout(Duration::from_secs(5), kv.dequeue_next_message()).await {
        Ok(Ok(Some(handle))) => handle,
        other => panic!(
            "the due message was not delivered: {:?}",
            other.map(|r| r.is_ok())
        ),
    };
    assert_eq!(held.payload(), now_msg.payload.as_slice());
    let (_, items) = export_all(&*kv).await;
    let messages = messages_of(&items);
    let order: Vec<_> = messages.iter().map(|m| (m.ready_at, m.id)).collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "messages by ready time, then id: {order:?}"
    );
    let payloads: Vec<&[u8]> = messages.iter().map(|m| m.payload.as_slice()).collect();
    assert_eq!(
        payloads,
        vec![now_msg.payload.as_slice(), later_msg.payload.as_slice()],
        "the waiting message and the one being delivered"
    );
    let later = &messages[1];
    assert_eq!(
        later.ready_at, later_msg.ready_at,
        "a waiting message keeps its time"
    );
    assert_eq!(later.backoff_schedule, vec![10, 20]);
    assert_eq!(later.keys_if_undelivered, later_msg.keys_if_undelivered);
    assert!(
        messages[0].ready_at <= env.clock().now(),
        "a message being delivered is exported as ready"
    );
    if let Err(e) = held.finish(true).await {
        panic!("finish failed: {e}");
    }
}

/// Every visible entry, through an ordinary read.
async fn all_entries(kv: &dyn Backend) -> Vec<KvEntry> {
    list_prefix(kv, &key![], 1000, false).await
}

async fn an_import_restores_entries_messages_and_versionstamps(env: Env) {
    let kv = env.kv.clone();
    set(&*kv, &key!["u64"], KvValue::U64(7)).await;
    set(&*kv, &key!["bytes"], KvValue::Bytes(vec![0, 1, 2].into())).await;
    set(&*kv, &key!["v8"], v8_string("hello")).await;
    let now = env.clock().now();
    set_expiring(
        &*kv,
        &key!["soon"],
        v8_string("bye"),
        now,
        Duration::from_secs(600),
    )
    .await;
    delete(&*kv, &key!["v8"]).await;
    set(&*kv, &key!["v8"], v8_string("again")).await;
    enqueue_all(
        &*kv,
        vec![
            enqueue_at(&env, "first", Duration::from_secs(60)),
            enqueue_at(&env, "second", Duration::from_secs(120)),
        ],
    )
    .await;
    let (versionstamp, items) = export_all(&*kv).await;
    let source_entries = all_entries(&*kv).await;
    assert_eq!(
        entries_of(&items),
        source_entries,
        "the export holds every entry"
    );

    let fresh = env
        .fresh()
        .await
        .unwrap_or_else(|e| panic!("opening a fresh store failed: {e}"));
    let summary = fresh
        .kv
        .import_snapshot(Snapshot::from_items(versionstamp, items.clone()))
        .await
        .unwrap_or_else(|e| panic!("import_snapshot failed: {e}"));
    assert_eq!((summary.entries, summary.messages), (4, 2));

    let restored = all_entries(&*fresh.kv).await;
    assert_eq!(
        restored, source_entries,
        "every entry with its value, versionstamp and expiry"
    );
    let mut queued = fresh
        .kv
        .queued_messages()
        .await
        .unwrap_or_else(|e| panic!("queued_messages failed: {e}"));
    let mut exported = messages_of(&items);
    queued.sort_by_key(|m| m.id);
    exported.sort_by_key(|m| m.id);
    assert_eq!(
        queued, exported,
        "every message, with its id, time, keys and schedule"
    );

    let (again, reexported) = export_all(&*fresh.kv).await;
    assert_eq!(
        again, versionstamp,
        "the restored store continues from the snapshot"
    );
    assert_eq!(entries_of(&reexported), source_entries);

    let next = set(&*fresh.kv, &key!["after"], KvValue::U64(1)).await;
    assert!(
        next > versionstamp,
        "the first commit after a restore ({next}) is later than the snapshot ({versionstamp})"
    );
    let _ = fresh.kv.close().await;
}

fn one_entry(name: &str, version: u64) -> SnapshotItem {
    SnapshotItem::Entry(KvEntry {
        key: enc(&key![name]).into(),
        value: KvValue::U64(1),
        versionstamp: Versionstamp::from_version(version, 0),
        expires_at: None,
    })
}

async fn an_import_into_a_store_that_is_not_empty_is_refused_and_changes_nothing(env: Env) {
    let kv = env.kv.clone();
    let written = set(&*kv, &key!["there"], KvValue::U64(5)).await;
    let snapshot = Snapshot::from_items(
        Versionstamp::from_version(1_000, 0),
        vec![one_entry("imported", 900)],
    );
    match kv.import_snapshot(snapshot).await {
        Err(KvError::NotEmpty) => {}
        other => panic!("an import into a store with an entry must be refused: {other:?}"),
    }
    let entries = all_entries(&*kv).await;
    assert_eq!(
        keys_of(&entries),
        vec![key!["there"]],
        "nothing was imported"
    );
    assert_eq!(entries[0].versionstamp, written);
    let next = set(&*kv, &key!["next"], KvValue::U64(1)).await;
    assert!(
        next < Versionstamp::from_version(1_000, 0),
        "the refused import did not move the version counter to its snapshot"
    );
}

async fn an_import_that_fails_half_way_leaves_the_store_empty(env: Env) {
    let kv = env.kv.clone();
    let good = (0..50).map(|i| one_entry(&format!("k{i:03}"), 10));
    let failing = Snapshot {
        database: None,
        versionstamp: Versionstamp::from_version(10, 0),
        items: futures::stream::iter(
            good.map(Ok)
                .chain(std::iter::once(Err(KvError::invalid_argument("cut short")))),
        )
        .boxed(),
    };
    let outcome = kv.import_snapshot(failing).await;
    assert!(outcome.is_err(), "a stream that fails fails the import");
    let out_of_order = Snapshot::from_items(
        Versionstamp::from_version(10, 0),
        vec![one_entry("b", 1), one_entry("a", 1)],
    );
    assert!(
        kv.import_snapshot(out_of_order).await.is_err(),
        "entries out of key order are refused"
    );
    assert!(all_entries(&*kv).await.is_empty(), "nothing was imported");
    // Still empty, so a whole import succeeds now.
    let whole = Snapshot::from_items(Versionstamp::from_version(10, 0), vec![one_entry("a", 3)]);
    let summary = kv
        .import_snapshot(whole)
        .await
        .unwrap_or_else(|e| panic!("importing into the still empty store failed: {e}"));
    assert_eq!(summary.entries, 1);
    let entries = all_entries(&*kv).await;
    assert_eq!(keys_of(&entries), vec![key!["a"]]);
    assert_eq!(entries[0].versionstamp, Versionstamp::from_version(3, 0));
}

/// A store emptied after later commits, then given an older snapshot: its next commit still
/// gets a versionstamp later than every one it handed out (a check naming an old one must not
/// match a new write).
async fn an_import_into_an_emptied_store_never_reuses_a_versionstamp(env: Env) {
    let kv = &*env.kv;
    set(kv, &key!["a"], KvValue::U64(1)).await;
    let (versionstamp, items) = export_all(kv).await;
    set(kv, &key!["a"], KvValue::U64(2)).await;
    let emptied = delete(kv, &key!["a"]).await;
    kv.import_snapshot(Snapshot::from_items(versionstamp, items))
        .await
        .expect("import into the emptied store");
    let next = set(kv, &key!["b"], KvValue::U64(3)).await;
    assert!(
        next > emptied,
        "the commit after the import ({next}) is not later than one before it ({emptied})"
    );
}

/// Every database has an identity, made with it: every export names it, the same each time
/// (and after a reopen, where the store can be reopened), and another store's differs. An
/// import does not take the snapshot's identity: a restored store is a database of its own.
async fn an_export_names_its_database(mut env: Env) {
    let named = |kv: Arc<dyn Backend>| async move {
        let snapshot = kv.export_snapshot().await.expect("export");
        snapshot.database.expect("an export names its database")
    };
    let first = named(env.kv.clone()).await;
    set(&*env.kv, &key!["a"], KvValue::U64(1)).await;
    assert_eq!(
        named(env.kv.clone()).await,
        first,
        "the identity never changes"
    );
    if env.offered.can_reopen {
        env.reopen().await.expect("reopen");
        assert_eq!(named(env.kv.clone()).await, first, "kept by the store");
    }
    let other = env.fresh().await.expect("a fresh store");
    let second = named(other.kv.clone()).await;
    assert_ne!(first, second, "two databases, two identities");
    if env.kv.capabilities().import {
        let snapshot = env.kv.export_snapshot().await.expect("export");
        other.kv.import_snapshot(snapshot).await.expect("import");
        assert_eq!(
            named(other.kv.clone()).await,
            second,
            "a restored store keeps its own identity"
        );
    }
}

/// Issue 29: a backup whose header versionstamp was doctored to `fffffffffffffffe0000`
/// restored into redb with success, and every write after the first then failed. The rule of
/// `open_deno_kv_model::backup::check_lead` refuses it on every engine, the store stays empty
/// and numbering stays where it was; a snapshot just within the bound imports.
async fn an_import_refuses_a_versionstamp_its_entries_cannot_account_for(env: Env) {
    let kv = env.kv.clone();
    let doctored: Versionstamp = "fffffffffffffffe0000".parse().expect("versionstamp");
    let items = vec![one_entry("a", 3), one_entry("b", 5)];
    let err = kv
        .import_snapshot(Snapshot::from_items(doctored, items.clone()))
        .await
        .expect_err("a versionstamp beyond what the entries account for");
    assert!(matches!(err, KvError::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("damaged or was edited"), "{err}");
    let far = Versionstamp::from_version(5 + open_deno_kv_model::backup::MAX_VERSION_LEAD + 1, 0);
    let err = kv
        .import_snapshot(Snapshot::from_items(far, items.clone()))
        .await
        .expect_err("one version beyond the bound");
    assert!(err.to_string().contains("beyond its newest entry"), "{err}");
    let (_, left) = export_all(&*kv).await;
    assert!(left.is_empty(), "a refused import writes nothing");
    let first = set(&*kv, &key!["next"], KvValue::U64(1)).await;
    let second = set(&*kv, &key!["next"], KvValue::U64(2)).await;
    assert!(
        first < Versionstamp::from_version(1_000, 0) && second > first,
        "numbering continues where it was: {first}, {second}"
    );
}

/// A handle closed while its import runs, the import's stream stalled (a slow download, a stuck
/// producer): the close ends the import instead of waiting for the stream, the import's caller
/// gets an error, the data reopens (nothing of the closed handle holds it), and nothing of the
/// import was kept.
async fn closing_a_handle_ends_its_running_import(mut env: Env) {
    let first = (0..5).map(|i| Ok(one_entry(&format!("k{i:03}"), 10)));
    let stalling = Snapshot {
        database: None,
        versionstamp: Versionstamp::from_version(10, 0),
        items: futures::stream::iter(first)
            .chain(futures::stream::pending())
            .boxed(),
    };
    let import = tokio::spawn({
        let kv = env.kv.clone();
        async move { kv.import_snapshot(stalling).await }
    });
    // Time for the import to begin and take the stream's first items.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let within = Duration::from_secs(5);
    tokio::time::timeout(within, env.reopen())
        .await
        .expect("the close and the reopen do not wait for a stream that stalls")
        .expect("reopen");
    let outcome = tokio::time::timeout(within, import)
        .await
        .expect("the import's caller is answered though its stream stalls")
        .expect("the import's task");
    assert!(
        outcome.is_err(),
        "an import its handle's close cut short cannot have succeeded"
    );
    assert!(
        all_entries(&*env.kv).await.is_empty(),
        "nothing of the import was kept"
    );
}

//! Range deletes, counts and range watches through the network: open-deno-kv-remote →
//! open-deno-kv-server → open-deno-kv-memory, with the `range-delete/1`, `count/1` and
//! `watch-range/1` extensions, and against a server that does not offer them; and snapshots
//! (`snapshot/1`) exported and imported through the network.

#![allow(clippy::unwrap_used)]

#[path = "support/conformance_server.rs"]
mod conformance_server;

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use futures::StreamExt;
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Check, KeyRange, KvError, KvValue, ManualClock, Mutation, RangeChange,
    RangeCount, RangeWatchEvent, RangeWatchStream, ReadRange, SnapshotRead, encode_key, key,
};
use open_deno_kv_remote::ext::{CHANGE_LOG, EXTENSIONS, RANGE_DELETE, SNAPSHOT};
use open_deno_kv_remote::{RemoteBackend, RemoteOptions};
use open_deno_kv_server::{Access, Databases, Server, ServerConfig};

const TOKEN: &str = "range-test-token-0123456789";

struct Served {
    url: String,
    /// The server's own backend, to write and read around the network.
    local: Arc<dyn Backend>,
    clock: ManualClock,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A server over a fresh memory store with a manual clock, offering `extensions`.
async fn serve(extensions: Vec<&'static str>) -> Served {
    let clock = ManualClock::at_test_epoch();
    let store = open_deno_kv_memory::MemoryStore::new();
    let local: Arc<dyn Backend> = Arc::new(open_deno_kv_memory::MemoryBackend::open(
        &store,
        Arc::new(clock.clone()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = ServerConfig::new(Access::Token(TOKEN.into()));
    config.log_errors = false;
    config.shutdown_grace = Duration::from_millis(100);
    config.extensions = extensions;
    let server = Server::new(config, Databases::new(local.clone())).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    Served {
        url: format!("http://{addr}/"),
        local,
        clock,
        _stop: stop,
    }
}

fn options(served: &Served) -> RemoteOptions {
    let mut options = RemoteOptions::new(TOKEN);
    options.clock = Arc::new(served.clock.clone());
    options
}

async fn connect(served: &Served) -> Arc<dyn Backend> {
    Arc::new(
        RemoteBackend::connect(&served.url, options(served))
            .await
            .unwrap(),
    )
}

fn users(id: u64) -> Vec<u8> {
    encode_key(&key!["users", id]).unwrap()
}

fn users_range() -> KeyRange {
    KeyRange::prefix(&key!["users"]).unwrap()
}

fn outside() -> Vec<Vec<u8>> {
    vec![
        encode_key(&key!["users"]).unwrap(),
        encode_key(&key!["usersX", 1u64]).unwrap(),
        encode_key(&key!["a"]).unwrap(),
    ]
}

async fn set(kv: &dyn Backend, keys: &[Vec<u8>]) {
    let write = AtomicWrite {
        mutations: keys
            .iter()
            .map(|k| Mutation::set(k.clone(), KvValue::U64(1)))
            .collect(),
        ..Default::default()
    };
    kv.atomic_write(write).await.unwrap().unwrap();
}

/// Every key of `range`, read on `kv`.
async fn keys_in(kv: &dyn Backend, range: &KeyRange) -> Vec<Vec<u8>> {
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: range.start.clone(),
            end: range.end.clone(),
            limit: 1000,
            reverse: false,
        }],
        ..Default::default()
    };
    let mut out = kv.snapshot_read(read).await.unwrap();
    out.remove(0)
        .entries
        .into_iter()
        .map(|e| e.key.to_vec())
        .collect()
}

fn everything() -> KeyRange {
    KeyRange::new(vec![0], vec![0xff])
}

async fn next_event(stream: &mut RangeWatchStream) -> RangeWatchEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("an event within 10 s")
        .expect("the stream goes on")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_delete_with_a_check_runs_on_the_server() {
    let served = serve(EXTENSIONS.to_vec()).await;
    let kv = connect(&served).await;
    assert!(kv.capabilities().range_delete);
    let inside: Vec<Vec<u8>> = (1..=5).map(users).collect();
    set(&*kv, &inside).await;
    set(&*kv, &outside()).await;
    let guard = encode_key(&key!["guard"]).unwrap();

    // A failed check deletes nothing.
    let write = AtomicWrite {
        checks: vec![Check {
            key: users(1),
            versionstamp: None, // "must not exist": it does
        }],
        mutations: vec![Mutation::delete_range(users_range())],
        ..Default::default()
    };
    assert_eq!(kv.atomic_write(write).await.unwrap(), None);
    assert_eq!(keys_in(&*served.local, &users_range()).await, inside);

    // A check that holds: the range goes, with the write's other mutations.
    let write = AtomicWrite {
        checks: vec![Check {
            key: guard.clone(),
            versionstamp: None,
        }],
        mutations: vec![
            Mutation::delete_range(users_range()),
            Mutation::set(guard.clone(), KvValue::U64(9)),
        ],
        ..Default::default()
    };
    assert!(kv.atomic_write(write).await.unwrap().is_some());
    assert!(keys_in(&*served.local, &users_range()).await.is_empty());
    let mut kept = outside();
    kept.push(guard);
    kept.sort();
    assert_eq!(keys_in(&*served.local, &everything()).await, kept);
    kv.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_leaves_out_expired_entries() {
    let served = serve(EXTENSIONS.to_vec()).await;
    let kv = connect(&served).await;
    assert!(kv.capabilities().count);
    let soon = open_deno_kv_engine_kit::Clock::now(&served.clock) + TimeDelta::seconds(10);
    let write = AtomicWrite {
        mutations: vec![
            Mutation::set(users(1), KvValue::U64(1)),
            Mutation::set(users(2), KvValue::Bytes(vec![0; 100].into())),
            Mutation {
                expire_at: Some(soon),
                ..Mutation::set(users(3), KvValue::Bytes(vec![0; 50].into()))
            },
            Mutation::set(outside()[1].clone(), KvValue::U64(1)),
        ],
        ..Default::default()
    };
    kv.atomic_write(write).await.unwrap().unwrap();
    let key_len = users(1).len() as u64;
    assert_eq!(
        kv.count_range(users_range()).await.unwrap(),
        RangeCount {
            entries: 3,
            key_bytes: 3 * key_len,
            value_bytes: 8 + 100 + 50,
        }
    );
    served.clock.advance(Duration::from_secs(11));
    let after = kv.count_range(users_range()).await.unwrap();
    assert_eq!(
        after,
        RangeCount {
            entries: 2,
            key_bytes: 2 * key_len,
            value_bytes: 8 + 100,
        }
    );
    // The same as the server's own backend counts.
    assert_eq!(
        served.local.count_range(users_range()).await.unwrap(),
        after
    );
    // An empty or inverted range holds nothing.
    let inverted = KeyRange::new(users(9), users(1));
    assert_eq!(
        kv.count_range(inverted).await.unwrap(),
        RangeCount::default()
    );
    // Oversized bounds are refused before anything is sent, with the read-key text.
    let huge = KeyRange::new(vec![2; 5000], vec![3]);
    assert!(matches!(
        kv.count_range(huge).await.unwrap_err(),
        KvError::Limit(_)
    ));
    kv.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_watch_rereads_then_follows_changes_and_rereads_after_a_range_delete() {
    let served = serve(EXTENSIONS.to_vec()).await;
    let kv = connect(&served).await;
    assert!(kv.capabilities().watch_range);
    let mut stream = kv.watch_range(users_range()).unwrap();
    assert_eq!(next_event(&mut stream).await, RangeWatchEvent::Reread);

    // A write outside the range, then one inside (on the server's side): only the latter.
    set(&*served.local, &outside()).await;
    let write = AtomicWrite {
        mutations: vec![Mutation::set(users(7), KvValue::U64(70))],
        ..Default::default()
    };
    served.local.atomic_write(write).await.unwrap().unwrap();
    match next_event(&mut stream).await {
        RangeWatchEvent::Changed(changes) => {
            let [
                RangeChange {
                    key,
                    entry: Some(entry),
                },
            ] = &changes[..]
            else {
                panic!("one change with an entry expected, got {changes:?}");
            };
            assert_eq!(key, &users(7));
            assert_eq!(entry.value, KvValue::U64(70));
        }
        other => panic!("expected a change, got {other:?}"),
    }

    // A delete of the key: reported with no entry.
    kv.atomic_write(AtomicWrite {
        mutations: vec![Mutation::delete(users(7))],
        ..Default::default()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        next_event(&mut stream).await,
        RangeWatchEvent::Changed(vec![RangeChange {
            key: users(7),
            entry: None
        }])
    );

    // A range delete overlapping the watched range: which keys went is unknown, so reread.
    kv.atomic_write(AtomicWrite {
        mutations: vec![Mutation::delete_range(KeyRange::new(users(1), users(3)))],
        ..Default::default()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(next_event(&mut stream).await, RangeWatchEvent::Reread);
    drop(stream);
    kv.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_watch_that_reconnects_rereads_and_goes_on() {
    let served = serve(EXTENSIONS.to_vec()).await;
    let mut options = options(&served);
    // The server's keep-alives come every 5 s: a stream is dropped and reopened every 300 ms.
    options.watch_idle_timeout = Duration::from_millis(300);
    let kv = RemoteBackend::connect(&served.url, options).await.unwrap();
    let mut stream = kv.watch_range(users_range()).unwrap();
    assert_eq!(next_event(&mut stream).await, RangeWatchEvent::Reread);
    // Nothing changed, yet the client must reread: the stream was reopened and what happened in
    // between is unknown.
    assert_eq!(next_event(&mut stream).await, RangeWatchEvent::Reread);
    // And it resumes: a change still arrives (possibly after more rereads).
    set(&*served.local, &[users(4)]).await;
    let changed = loop {
        match next_event(&mut stream).await {
            RangeWatchEvent::Reread => continue,
            RangeWatchEvent::Changed(changes) => break changes,
        }
    };
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].key, users(4));
    drop(stream);
    kv.close().await.unwrap();
}

/// A server configured without `range-delete/1` stands for one that does not know it (an older
/// open-deno-kv-server, or denokv): the client refuses before sending anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_range_delete_gets_none_and_nothing_is_deleted() {
    let offered: Vec<&'static str> = EXTENSIONS
        .iter()
        .copied()
        .filter(|name| *name != RANGE_DELETE)
        .collect();
    let served = serve(offered).await;
    let inside: Vec<Vec<u8>> = (1..=3).map(users).collect();
    set(&*served.local, &inside).await;
    let range_delete = || AtomicWrite {
        mutations: vec![Mutation::delete_range(users_range())],
        ..Default::default()
    };

    // Opened eagerly: the capability is off, and the Checked layer refuses.
    let kv = connect(&served).await;
    let capabilities = kv.capabilities();
    assert!(!capabilities.range_delete);
    assert!(capabilities.count && capabilities.watch_range);
    let err = kv.atomic_write(range_delete()).await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    kv.close().await.unwrap();

    // Opened lazily: the capability is assumed, and the write learns the truth before it sends.
    let lazy = RemoteBackend::connect_lazy(&served.url, options(&served)).unwrap();
    assert!(lazy.capabilities().range_delete);
    let err = lazy.atomic_write(range_delete()).await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    assert!(!lazy.capabilities().range_delete);
    lazy.close().await.unwrap();

    assert_eq!(keys_in(&*served.local, &users_range()).await, inside);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_range_watches_are_refused_when_not_offered() {
    let served = serve(vec![]).await;
    let lazy = RemoteBackend::connect_lazy(&served.url, options(&served)).unwrap();
    // Not known yet: the watch starts, and its task delivers the refusal.
    let mut stream = lazy.watch_range(users_range()).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(first, Err(KvError::Unsupported { .. })),
        "{first:?}"
    );
    let err = lazy.count_range(users_range()).await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    // Known now: refused by the Checked layer.
    let capabilities = lazy.capabilities();
    assert!(!capabilities.count && !capabilities.watch_range && !capabilities.range_delete);
    assert!(matches!(
        lazy.watch_range(users_range()).err(),
        Some(KvError::Unsupported { .. })
    ));
    lazy.close().await.unwrap();
}

/// The conformance suite runs its range delete, count and range watch cases on a backend only
/// if it reports the capabilities: the remote backend of `tests/conformance.rs` must.
#[test]
fn the_conformance_backend_reports_the_range_capabilities() {
    let factory: Arc<dyn open_deno_kv_conformance::BackendFactory> =
        Arc::new(conformance_server::factory(None));
    let offered = open_deno_kv_conformance::probe_backend(&factory).unwrap();
    let capabilities = offered.capabilities;
    assert!(capabilities.range_delete, "{offered:?}");
    assert!(capabilities.count, "{offered:?}");
    assert!(capabilities.watch_range, "{offered:?}");
}

/// Backups travel over the network when the server offers `snapshot/1`: an export from one
/// server imports into another, item for item; a server that does not offer it gets no request
/// and the capabilities say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_travel_between_servers_and_are_refused_when_not_offered() {
    use futures::TryStreamExt;
    let source = serve(EXTENSIONS.to_vec()).await;
    let many: Vec<Vec<u8>> = (1..=2000).map(users).collect();
    for chunk in many.chunks(500) {
        set(&*source.local, chunk).await;
    }
    let from = connect(&source).await;
    let capabilities = from.capabilities();
    assert!(capabilities.export && capabilities.import && capabilities.change_log);
    let target = serve(EXTENSIONS.to_vec()).await;
    let to = connect(&target).await;
    let summary = to
        .import_snapshot(from.export_snapshot().await.unwrap())
        .await
        .unwrap();
    assert_eq!(summary.entries, 2000);
    let local: Vec<_> = source
        .local
        .export_snapshot()
        .await
        .unwrap()
        .items
        .try_collect()
        .await
        .unwrap();
    let copied: Vec<_> = target
        .local
        .export_snapshot()
        .await
        .unwrap()
        .items
        .try_collect()
        .await
        .unwrap();
    assert_eq!(copied, local);
    // Dropping an export half read closes its request: the server's slot comes back.
    let mut export = from.export_snapshot().await.unwrap();
    export.items.next().await.unwrap().unwrap();
    drop(export);
    from.close().await.unwrap();
    to.close().await.unwrap();

    let offered: Vec<&'static str> = EXTENSIONS
        .iter()
        .copied()
        .filter(|name| *name != SNAPSHOT && *name != CHANGE_LOG)
        .collect();
    let served = serve(offered).await;
    let kv = connect(&served).await;
    let capabilities = kv.capabilities();
    assert!(!capabilities.export && !capabilities.import && !capabilities.change_log);
    let err = kv.export_snapshot().await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    let empty = open_deno_kv_engine_kit::Snapshot::from_items(Default::default(), vec![]);
    let err = kv.import_snapshot(empty).await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    let err = kv.change_log_status().await.unwrap_err();
    assert!(matches!(err, KvError::Unsupported { .. }), "{err:?}");
    kv.close().await.unwrap();
}

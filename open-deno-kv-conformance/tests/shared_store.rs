//! `Prefixed`, the confinement `kv conformance URL` runs each case in: a case sees only its own
//! prefix of a store holding other data, its keys come back without the prefix, clean-up deletes
//! only what is under it, and a key that fits Deno's limit only without the prefix stops the case
//! as not runnable rather than failing it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use open_deno_kv_conformance::{NotRunnable, Prefixed};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, KvValue, ManualClock, Mutation, ReadRange, SnapshotRead, encode_key, key,
};

fn everything() -> SnapshotRead {
    SnapshotRead {
        ranges: vec![ReadRange {
            start: vec![0x00],
            end: vec![0xff],
            limit: 100,
            reverse: false,
        }],
        ..SnapshotRead::default()
    }
}

async fn keys(kv: &dyn Backend) -> Vec<Vec<u8>> {
    let ranges = kv.snapshot_read(everything()).await.expect("read");
    ranges[0].entries.iter().map(|e| e.key.to_vec()).collect()
}

async fn set(kv: &dyn Backend, key: Vec<u8>) -> Result<(), open_deno_kv_engine_kit::KvError> {
    let write = AtomicWrite {
        mutations: vec![Mutation::set(key, KvValue::U64(1))],
        ..AtomicWrite::default()
    };
    kv.atomic_write(write).await.map(|_| ())
}

#[tokio::test]
async fn a_prefix_is_a_store_of_its_own_and_is_cleaned_up() {
    let clock = Arc::new(ManualClock::at_test_epoch());
    let store: Arc<dyn Backend> = Arc::new(open_deno_kv_memory::MemoryBackend::open(
        &Default::default(),
        clock.clone(),
    ));
    let theirs = encode_key(&key!["theirs"]).expect("key");
    set(&*store, theirs.clone()).await.expect("their write");
    let prefix = encode_key(&key!["kv-conformance", "run", 1]).expect("key");
    let case = Prefixed::new(store.clone(), prefix.clone(), clock);

    assert!(
        keys(&case).await.is_empty(),
        "the case must not see other data"
    );
    let mine = encode_key(&key!["a"]).expect("key");
    set(&case, mine.clone()).await.expect("write");
    assert_eq!(
        keys(&case).await,
        vec![mine.clone()],
        "keys come back without the prefix"
    );
    let stored = [prefix.clone(), mine.clone()].concat();
    assert_eq!(keys(&*store).await, vec![stored, theirs.clone()]);

    // Over Deno's limit as the case wrote it: Deno's own error, as from any backend.
    let too_long = vec![0x01; 2049];
    let refused = set(&case, too_long).await.expect_err("2049-byte key");
    assert!(refused.to_string().contains("max 2048 bytes"), "{refused}");
    // Within the limit only without the prefix: not runnable here, not failed.
    let fits_alone = [vec![0x01], vec![0x61; 2046], vec![0x00]].concat();
    assert_eq!(fits_alone.len(), 2048);
    let stopped = AssertUnwindSafe(set(&case, fits_alone))
        .catch_unwind()
        .await;
    let payload = stopped.expect_err("must stop the case");
    let reason = payload
        .downcast_ref::<NotRunnable>()
        .expect("a NotRunnable stop");
    assert!(reason.0.contains("key prefix"), "{}", reason.0);

    case.clean_up().await.expect("clean up");
    assert_eq!(
        keys(&*store).await,
        vec![theirs],
        "only the case's keys are deleted"
    );
}

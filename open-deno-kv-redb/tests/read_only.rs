//! Issue 14, defect 10: reading a redb file never writes to it. A read-only handle opens a file
//! the process may not write (checked as `nobody` when tests run as root), leaves every byte as
//! it was, refuses writes, and refuses a file that would need recovery instead of repairing it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use open_deno_kv_conformance::unprivileged::{assert_succeeds_in_read_only_dirs, child_argument};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvError, KvValue, Mutation, ReadRange, SnapshotRead, encode_key,
    key,
};
use open_deno_kv_redb::{FileEngine, RedbBackend, RedbOptions};

fn read_only(path: &Path) -> Result<Checked<RedbBackend>, KvError> {
    let options = RedbOptions {
        read_only: true,
        ..Default::default()
    };
    RedbBackend::open_with(path, options)
}

fn set_a() -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key!["a"]).expect("key"),
            KvValue::U64(1),
        )],
        ..Default::default()
    }
}

/// Reads `["a"]` through a read-only handle; checks its integrity too.
fn read_a(path: &Path) -> Result<Option<KvValue>, KvError> {
    futures::executor::block_on(async {
        let kv = read_only(path)?;
        let read = SnapshotRead {
            ranges: vec![ReadRange::single_encoded_key(encode_key(&key!["a"])?)],
            ..Default::default()
        };
        let out = kv.snapshot_read(read).await?;
        assert!(kv.check_integrity().await?.is_ok());
        assert!(matches!(
            kv.atomic_write(set_a()).await,
            Err(KvError::ReadOnly)
        ));
        kv.close().await?;
        Ok(out[0].entries.first().map(|entry| entry.value.clone()))
    })
}

#[test]
fn a_read_only_file_in_a_read_only_directory_is_read_untouched() {
    if let Some(path) = child_argument() {
        match read_a(Path::new(&path)) {
            Ok(Some(KvValue::U64(1))) => return,
            other => panic!("the read-only handle failed: {other:?}"),
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let path = data.join("kv.redb");
    futures::executor::block_on(async {
        let kv = RedbBackend::open(&path)?;
        kv.atomic_write(set_a()).await?;
        kv.close().await
    })
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let before = std::fs::read(&path).expect("read");
    assert_succeeds_in_read_only_dirs(
        "a_read_only_file_in_a_read_only_directory_is_read_untouched",
        &path,
        &[dir.path(), &data],
    );
    // And as this process (root on CI), which could write: still not a byte changed.
    assert_eq!(read_a(&path).expect("read"), Some(KvValue::U64(1)));
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[test]
fn a_file_that_needs_recovery_or_was_never_initialised_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = dir.path().join("live.redb");
    let copy = dir.path().join("copy.redb");
    // A copy taken while the file is open writable: it is marked as needing recovery.
    futures::executor::block_on(async {
        let kv = RedbBackend::open(&live)?;
        kv.atomic_write(set_a()).await?;
        std::fs::copy(&live, &copy).map_err(KvError::storage)?;
        kv.close().await
    })
    .expect("copy while open");
    let before = std::fs::read(&copy).expect("read");
    let err = read_only(&copy).expect_err("needs recovery");
    assert!(err.to_string().contains("needs recovery"), "{err}");
    assert_eq!(std::fs::read(&copy).expect("read"), before);

    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").expect("create");
    read_only(&empty).expect_err("nothing to read");
    assert_eq!(std::fs::read(&empty).expect("read").len(), 0);
}

//! Damaged and foreign files, through the `kv` binary: reading commands refuse a damaged
//! database instead of answering short, `kv check` reports the damage, and reading never
//! changes a file.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs `kv --db DB ARGS...` in `dir`.
fn kv(dir: &Path, db: &str, args: &[&str]) -> Output {
    let mut all = vec!["--db", db];
    all.extend_from_slice(args);
    common::kv(dir, &all)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The payload every entry carries, so its pages can be told apart from others.
const MARKER: &str = "integrity-test-payload";

/// A dump of `count` entries with values of about 200 bytes.
fn dump_lines(count: usize) -> String {
    (0..count)
        .map(|i| {
            format!(
                r#"{{"key":[{{"string":"item"}},{{"int":"{i}"}}],"value":{{"string":"{MARKER}-{i:04}-{}"}}}}"#,
                "x".repeat(160)
            ) + "\n"
        })
        .collect()
}

/// Loads `count` entries into a new database `db` in `dir`.
fn load(dir: &Path, db: &str, count: usize) {
    let dump = dir.join("input.jsonl");
    std::fs::write(&dump, dump_lines(count)).expect("write dump");
    let out = kv(dir, db, &["load", "input.jsonl"]);
    assert!(out.status.success(), "load: {}", text(&out.stderr));
}

/// Overwrites two B-tree leaf pages holding entries (page type 0x0a: a `WITHOUT ROWID` table's
/// leaf), found by page arithmetic from the header's page size, with garbage behind a header
/// that still reads as an empty leaf: SQLite's scans then skip those entries without an error,
/// which is how the issue's dump came out short and "successful".
fn damage_two_leaf_pages(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let page_size = match u16::from_be_bytes([bytes[16], bytes[17]]) {
        1 => 65536,
        n => usize::from(n),
    };
    let leaves: Vec<usize> = (1..bytes.len() / page_size)
        .map(|page| page * page_size)
        .filter(|&offset| {
            let page = &bytes[offset..offset + page_size];
            page[0] == 0x0a && page.windows(MARKER.len()).any(|w| w == MARKER.as_bytes())
        })
        .collect();
    assert!(leaves.len() >= 4, "only {} leaf pages", leaves.len());
    for &offset in &[leaves[1], leaves[leaves.len() / 2]] {
        let page = &mut bytes[offset..offset + page_size];
        for (i, byte) in page.iter_mut().enumerate() {
            *byte = (i * 151 % 251) as u8;
        }
        // Leaf, no free block, no cells, content area at the page's end, no fragments.
        let content_start = u16::try_from(page_size % 65536).expect("fits");
        page[..8].copy_from_slice(&[0x0a, 0, 0, 0, 0, 0, 0, 0]);
        page[5..7].copy_from_slice(&content_start.to_be_bytes());
    }
    std::fs::write(path, bytes).expect("write");
}

/// Issue 14, defect 7: a SQLite file with two damaged pages made `dump`, `stats` and `migrate`
/// exit 0 with entries missing. Each must now fail, and `kv check` must report the damage.
#[test]
fn a_damaged_sqlite_file_is_refused_by_dump_stats_and_migrate_and_reported_by_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path(), "sqlite:kv.sqlite3", 400);
    let healthy = kv(dir.path(), "sqlite:kv.sqlite3", &["check"]);
    assert!(healthy.status.success(), "{}", text(&healthy.stderr));
    assert!(
        text(&healthy.stdout).contains(r#""entries":400"#),
        "{}",
        text(&healthy.stdout)
    );

    damage_two_leaf_pages(&dir.path().join("kv.sqlite3"));
    for args in [
        &["dump"][..],
        &["stats"][..],
        &["migrate", "sqlite:copy.sqlite3"][..],
    ] {
        let out = kv(dir.path(), "sqlite:kv.sqlite3", args);
        assert!(
            !out.status.success(),
            "kv {args:?} succeeded on a damaged file:\n{}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stderr).contains("is damaged"),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(!dir.path().join("copy.sqlite3").exists(), "no partial copy");
    let check = kv(dir.path(), "sqlite:kv.sqlite3", &["check"]);
    assert!(!check.status.success());
    assert!(!text(&check.stdout).is_empty(), "the problems are listed");
}

/// Issue 29: `kv list` on a damaged SQLite file printed 104 of 400 entries and exited 0, since
/// a damaged leaf reads as an empty one. Every reading command (`list`, `get`, `watch`, also by
/// prefix, and `stats --prefix`) must refuse the file with the integrity message, as `dump` does,
/// and print no entry.
#[test]
fn a_damaged_sqlite_file_is_refused_by_list_get_and_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path(), "sqlite:kv.sqlite3", 400);
    let listed = kv(dir.path(), "sqlite:kv.sqlite3", &["list"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert_eq!(text(&listed.stdout).lines().count(), 400);

    damage_two_leaf_pages(&dir.path().join("kv.sqlite3"));
    let mut answered = Vec::new();
    for args in [
        &["list"][..],
        &["list", r#"["item"]"#][..],
        &["get", r#"["item", 1n]"#][..],
        &["watch", "--count", "1", r#"["item", 1n]"#][..],
        &["watch", "--count", "1", "--prefix", r#"["item"]"#][..],
        &["stats", "--prefix", r#"["item"]"#][..],
    ] {
        let out = kv(dir.path(), "sqlite:kv.sqlite3", args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        if out.status.success() || !stderr.contains("is damaged") || stdout.contains(MARKER) {
            answered.push(format!(
                "kv {args:?}: exit {:?}, {} lines out, stderr {stderr:?}",
                out.status.code(),
                stdout.lines().count()
            ));
        }
    }
    assert!(
        answered.is_empty(),
        "reading commands answered a damaged file:\n{}",
        answered.join("\n")
    );
}

/// A healthy redb file passes `kv check` too, with its counts.
#[test]
fn check_counts_a_healthy_redb_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path(), "redb:kv.redb", 10);
    let out = kv(dir.path(), "redb:kv.redb", &["check"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(r#""entries":10"#),
        "{}",
        text(&out.stdout)
    );
}

fn files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|entry| {
            let path = entry.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// Issue 14, defect 10: `stats`, `dump`, `list`, `get` and `check` leave a redb file byte for
/// byte as it was, and do not initialise a zero-length one.
#[test]
fn reading_commands_do_not_change_redb_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    load(dir.path(), "redb:kv.redb", 20);
    std::fs::remove_file(dir.path().join("input.jsonl")).expect("rm");
    let before = files_in(dir.path());
    for args in [
        &["list"][..],
        &["get", r#"["item", 3n]"#][..],
        &["stats"][..],
        &["dump"][..],
        &["check"][..],
    ] {
        let out = kv(dir.path(), "redb:kv.redb", args);
        assert!(out.status.success(), "kv {args:?}: {}", text(&out.stderr));
        assert_eq!(
            files_in(dir.path()),
            before,
            "kv {args:?} changed the directory"
        );
    }

    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").expect("create");
    let out = kv(dir.path(), "redb:empty.redb", &["stats"]);
    assert!(
        !out.status.success(),
        "stats of a zero-length file has nothing to read"
    );
    assert_eq!(
        std::fs::read(&empty).expect("read").len(),
        0,
        "it was initialised"
    );
}

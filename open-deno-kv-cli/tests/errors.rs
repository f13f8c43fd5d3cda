//! A newcomer's mistakes (issue 32), each answered with what to do next: a key typed with the
//! wrong kind of number, a key literal with an error, a file of another kind than its URL says,
//! a new plain path named `*.redb`, and a server address without `http://`. Every refused file
//! is left byte for byte as it was.

mod common;

use std::path::Path;

use common::{kv, kv_fails, kv_ok};

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_missing_key_names_the_near_key_that_exists() {
    let dir = temp_dir();
    let db = dir.path().join("app.sqlite3");
    let db = db
        .to_str()
        .unwrap_or_else(|| panic!("a non-UTF-8 temp path"));
    kv_ok(
        dir.path(),
        &[
            "--db",
            db,
            "set",
            r#"["users", 2n]"#,
            "Ada",
            "--type",
            "string",
        ],
    );
    kv_ok(
        dir.path(),
        &[
            "--db",
            db,
            "set",
            r#"["ids", "7"]"#,
            "seven",
            "--type",
            "string",
        ],
    );

    let near = kv(dir.path(), &["--db", db, "get", r#"["users", 2]"#]);
    let stderr = String::from_utf8_lossy(&near.stderr);
    assert!(
        stderr.contains(
            r#"no entry at ["users", 2]; did you mean ["users", 2n]? (2 is a number, 2n a bigint)"#
        ),
        "{stderr}"
    );
    let stderr = kv_fails(dir.path(), &["--db", db, "get", r#"["ids", 7n]"#]);
    assert!(
        stderr.contains(r#"did you mean ["ids", "7"]? (7n is a bigint, "7" a string)"#),
        "{stderr}"
    );
    // Nothing near: the plain message, and the same exit status as with a hint.
    let far = kv(dir.path(), &["--db", db, "get", r#"["users", 3]"#]);
    let stderr = String::from_utf8_lossy(&far.stderr);
    assert!(stderr.contains(r#"no entry at ["users", 3]"#), "{stderr}");
    assert!(!stderr.contains("did you mean"), "{stderr}");
    assert!(!far.status.success());
    assert_eq!(near.status.code(), far.status.code());
}

#[test]
fn key_literal_errors_point_at_the_offending_character() {
    let dir = temp_dir();
    for (key, expected) in [
        (
            "[users]",
            r#""users" is not a number: a string needs quotes, "users" (at character 2)"#,
        ),
        (
            r#"["a", 1 2]"#,
            "expected ',' or ']', found '2' (at character 9)",
        ),
        (r#"["a""#, "the key is not closed with ']' (at character 5)"),
    ] {
        let stderr = kv_fails(dir.path(), &["--db", "memory:", "get", key]);
        assert!(stderr.contains(expected), "{key}: {stderr}");
    }
}

#[test]
fn a_file_of_another_kind_is_named_with_the_url_to_use_and_left_untouched() {
    let dir = temp_dir();
    kv_ok(
        dir.path(),
        &["--db", "redb:copy.redb", "set", r#"["a"]"#, "1"],
    );
    kv_ok(dir.path(), &["--db", "app.sqlite3", "set", r#"["a"]"#, "1"]);
    std::fs::write(dir.path().join("notes.txt"), "not a database\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let files = ["copy.redb", "app.sqlite3", "notes.txt"];
    let before: Vec<Vec<u8>> = files.iter().map(|f| read(&dir.path().join(f))).collect();

    for (db, expected) in [
        (
            "copy.redb",
            "copy.redb is a redb file: open it as redb:copy.redb",
        ),
        (
            "sqlite:copy.redb",
            "copy.redb is a redb file: open it as redb:copy.redb",
        ),
        (
            "redb:app.sqlite3",
            "app.sqlite3 is an SQLite file: open it as sqlite:app.sqlite3",
        ),
        (
            "notes.txt",
            "notes.txt is not a database (neither SQLite nor redb)",
        ),
        (
            "redb:notes.txt",
            "notes.txt is not a database (neither SQLite nor redb)",
        ),
    ] {
        for command in [&["list", "[]"][..], &["set", r#"["b"]"#, "2"][..]] {
            let mut args = vec!["--db", db];
            args.extend(command);
            let stderr = kv_fails(dir.path(), &args);
            assert!(stderr.contains(expected), "kv {args:?}: {stderr}");
        }
    }
    let after: Vec<Vec<u8>> = files.iter().map(|f| read(&dir.path().join(f))).collect();
    assert!(before == after, "a refused file changed");
}

#[test]
fn a_new_plain_path_named_redb_is_refused_with_both_urls() {
    let dir = temp_dir();
    let stderr = kv_fails(dir.path(), &["--db", "kv.redb", "set", r#"["a"]"#, "1"]);
    assert!(
        stderr.contains("use redb:kv.redb for a redb file, or sqlite:kv.redb for an SQLite one"),
        "{stderr}"
    );
    assert!(!dir.path().join("kv.redb").exists());
}

#[test]
fn a_server_address_is_answered_with_its_http_url() {
    let dir = temp_dir();
    for address in ["localhost:4512", "127.0.0.1:4512"] {
        let stderr = kv_fails(dir.path(), &["--db", address, "set", r#"["a"]"#, "1"]);
        assert!(
            stderr.contains(&format!("use http://{address}/ for a KV Connect server")),
            "{stderr}"
        );
    }
    let left = std::fs::read_dir(dir.path()).map_or(0, Iterator::count);
    assert_eq!(left, 0, "an address became a file");
}

//! What `Kv::open` does with a path that is not what its URL says: a file of another kind is
//! named (with the URL to open it by) and left byte for byte as it was, a new plain path named
//! `*.redb` is refused instead of quietly becoming an SQLite file, and a server address given
//! without `http://` is answered with the URL it means.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use open_deno_kv::{BackendUrl, Error, FileKind, Kv, key};

/// The error of an open that must fail.
async fn open_fails(url: &str) -> Error {
    match Kv::open(url).await {
        Ok(_) => panic!("{url} opened"),
        Err(err) => err,
    }
}

/// Every file in `dir`, with its bytes: what an open must leave as it was.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_named_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "shopping: milk, eggs\n").unwrap();
    let before = snapshot(dir.path());
    for url in [
        text.display().to_string(),
        format!("sqlite:{}", text.display()),
    ] {
        let err = open_fails(&url).await;
        assert!(matches!(err, Error::BadUrl { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("is not a database (neither SQLite nor redb)")
                && message.contains("left untouched")
                && message.contains("name a path that does not exist yet"),
            "{message}"
        );
        assert!(Kv::open_blocking(&url).is_err(), "{url} opened blocking");
    }
    assert_eq!(
        snapshot(dir.path()),
        before,
        "the text file or its directory changed"
    );
    assert_eq!(FileKind::of(&text).unwrap(), FileKind::Other);
}

#[tokio::test]
async fn another_applications_sqlite_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("create table people (name text); insert into people values ('Ada');")
        .unwrap();
    drop(conn);
    let before = snapshot(dir.path());
    assert_eq!(FileKind::of(&other).unwrap(), FileKind::Sqlite);
    let message = open_fails(&other.display().to_string()).await.to_string();
    assert!(
        message.contains("an SQLite database, but not a Deno KV one")
            && message.contains("people")
            && message.contains("left untouched"),
        "{message}"
    );
    assert_eq!(snapshot(dir.path()), before, "the foreign database changed");
}

#[tokio::test]
async fn a_redb_file_given_as_a_plain_path_names_the_redb_url() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.redb");
    // redb's header; the rest is never read.
    let mut bytes = vec![b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
    bytes.resize(4096, 0);
    std::fs::write(&file, &bytes).unwrap();
    let shown = file.display();
    for url in [shown.to_string(), format!("sqlite:{shown}")] {
        let message = open_fails(&url).await.to_string();
        assert!(
            message.contains(&format!("{shown} is a redb file: open it as redb:{shown}")),
            "{message}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    assert_eq!(
        snapshot(dir.path()).len(),
        1,
        "an open left a file beside it"
    );
}

#[tokio::test]
async fn a_new_plain_path_named_redb_is_refused_with_both_urls() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("kv.redb");
    let shown = file.display();
    let err = open_fails(&shown.to_string()).await;
    assert!(matches!(err, Error::BadUrl { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!(
            "use redb:{shown} for a redb file, or sqlite:{shown} for an SQLite one"
        )),
        "{err}"
    );
    assert!(shown.to_string().parse::<BackendUrl>().is_err());
    assert!(!file.exists(), "the refused open created {shown}");
    // Asked for by name, an SQLite file may have any name; and then the plain path opens it.
    let kv = Kv::open(&format!("sqlite:{shown}")).await.unwrap();
    kv.set(key!["a"], 1.0).await.unwrap();
    kv.close().await.unwrap();
    assert_eq!(FileKind::of(&file).unwrap(), FileKind::Sqlite);
    let kv = Kv::open(&shown.to_string()).await.unwrap();
    assert!(kv.get(key!["a"]).await.unwrap().exists());
    kv.close().await.unwrap();
}

#[tokio::test]
async fn an_empty_file_and_a_new_path_start_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.sqlite3");
    std::fs::write(&empty, b"").unwrap();
    for path in [empty, dir.path().join("new.sqlite3")] {
        let kv = Kv::open(&path.display().to_string()).await.unwrap();
        kv.set(key!["a"], 1.0).await.unwrap();
        kv.close().await.unwrap();
        assert_eq!(FileKind::of(&path).unwrap(), FileKind::Sqlite);
    }
}

#[tokio::test]
async fn a_server_address_without_a_scheme_is_answered_with_its_http_url() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    for address in [
        "localhost:4512",
        "127.0.0.1:4512",
        "kv.example.com:443",
        "[::1]:4512",
    ] {
        let err = open_fails(address).await;
        assert!(matches!(err, Error::BadUrl { .. }), "{address}: {err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("use http://{address}/ for a KV Connect server")),
            "{message}"
        );
    }
    assert!(snapshot(dir.path()).is_empty(), "an address became a file");
    // A scheme and a number stay what they are: a file named 4512.
    assert!("sqlite:4512".parse::<BackendUrl>().is_ok());
}

//! Reading a database that Deno wrote: opens it read-only (nothing in the file changes) and
//! prints every entry with its key, versionstamp and value — V8 values as JavaScript literals,
//! the way Deno would show them.
//!
//! ```text
//! cargo run -p open-deno-kv --example read_deno_file [PATH]
//! ```
//!
//! PATH defaults to the fixture `fixtures/deno-2.9.6/values.sqlite` in the repository (written by Deno
//! 2.9.6; `KV_FIXTURES_DIR` names another folder), copied to a temp dir first: a read-only open of a file in WAL mode still needs to
//! create its `-shm` file beside it.

use futures::TryStreamExt;
use open_deno_kv::{Kv, ListOptions, Selector};

#[tokio::main]
async fn main() -> open_deno_kv::Result<()> {
    let dir = tempfile::tempdir().map_err(open_deno_kv::Error::storage)?;
    let path = match std::env::args().nth(1) {
        Some(path) => path,
        None => {
            let fixtures = std::env::var_os("KV_FIXTURES_DIR").map_or_else(
                || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deno-2.9.6"),
                std::path::PathBuf::from,
            );
            let fixture = fixtures.join("values.sqlite");
            let copy = dir.path().join("values.sqlite");
            std::fs::copy(&fixture, &copy).map_err(|e| {
                open_deno_kv::Error::invalid_argument(format!(
                    "cannot copy {}: {e}",
                    fixture.display()
                ))
            })?;
            copy.display().to_string()
        }
    };
    let kv = Kv::open(&format!("sqlite:{path}?read_only")).await?;
    // The empty prefix selects every key, as `kv.list({ prefix: [] })` does.
    let mut entries = kv.list(
        Selector::prefix(open_deno_kv::key![]),
        ListOptions::default(),
    )?;
    let mut count = 0;
    while let Some(entry) = entries.try_next().await? {
        println!(
            "{} @{}  {}",
            entry.key,
            entry.versionstamp,
            open_deno_kv::v8::to_js_literal(&entry.value)?
        );
        count += 1;
    }
    println!("{count} entries");
    kv.close().await?;
    Ok(())
}

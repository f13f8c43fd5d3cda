//! The real Deno 2.9.6 against our server: `Deno.openKv("http://127.0.0.1:PORT/")` over h2c,
//! with a temporary SQLite file as the default database, `/db/NAME` in memory, and ephemeral
//! databases on. `tests/deno/client.ts` exercises get, set, getMany, list with cursors, batches,
//! reverse and ranges, atomic checks (100 of them too), u64 and V8 sum/min/max, versionstamped
//! keys, expireIn, watch, limits, and fresh ephemeral / shared named databases, and prints one
//! JSON object of check results that is asserted here.
//!
//! Deno is found through `DENO_BIN`, or installed from the npm registry by `.ci/install-deno`
//! (cached in `target/deno-2.9.6`). If neither works the test fails: it never skips.
//!
//! Run: `cargo test -p open-deno-kv-server --test deno_client -- --nocapture`.

// Test helpers outside #[test] functions may unwrap: a failure is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use open_deno_kv_server::Databases;
use open_deno_kv_sqlite::FileEngine;

const DENO_TIMEOUT: Duration = Duration::from_secs(120);

/// The checks the script must report, each `true`.
const EXPECTED: &[&str] = &[
    "set_ok",
    "get",
    "get_missing",
    "bytes_value",
    "delete",
    "getMany",
    "list_cursor_pages",
    "list_batches",
    "list_reverse",
    "list_range",
    "atomic_check_ok",
    "atomic_check_fails",
    "atomic_check_absent",
    "atomic_100_checks",
    "sum_u64",
    "max_u64",
    "min_u64",
    "sum_u64_wraps",
    "sum_v8_number",
    "sum_v8_bigint",
    "sum_wrong_type_error",
    "versionstamped_key",
    "expire_in",
    "watch_initial",
    "watch_sees_change",
    "watch_keeps_unchanged_key",
    "limit_value_size",
    "limit_key_size",
    "limit_ranges",
    "enqueue_refused_by_client",
    "ephemeral_fresh",
    "named_shared",
];

fn deno() -> PathBuf {
    open_deno_kv_conformance::deno::deno_binary().unwrap_or_else(|reason| panic!("{reason}"))
}

/// Runs the script against `base_url`; returns (stdout, stderr), killing Deno after the timeout.
fn run_script(deno: &Path, base_url: &str) -> (String, String, Option<std::process::ExitStatus>) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/deno/client.ts");
    let mut child = Command::new(deno)
        .args(["run", "--unstable-kv", "-A"])
        .arg(&script)
        .arg(base_url)
        .env("DENO_KV_ACCESS_TOKEN", TOKEN)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DENO_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (stdout.join().unwrap(), stderr.join().unwrap(), status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deno_drives_the_server_over_kv_connect() {
    let deno = tokio::task::spawn_blocking(deno).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn open_deno_kv_model::Backend> =
        Arc::new(open_deno_kv_sqlite::SqliteBackend::open(dir.path().join("kv.sqlite3")).unwrap());
    let databases = Databases::new(sqlite).with_opener(Arc::new(|_name: &str| Ok(memory())));
    let running = start_with(config(), databases).await;
    let base = format!("http://{}/", running.addr);

    let (stdout, stderr, status) = tokio::task::spawn_blocking(move || run_script(&deno, &base))
        .await
        .unwrap();
    let context = format!("--- deno stderr ---\n{stderr}\n--- deno stdout ---\n{stdout}");
    assert!(
        status.is_some(),
        "Deno did not finish in {DENO_TIMEOUT:?}\n{context}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "Deno failed\n{context}"
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from Deno\n{context}"));
    let results: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON ({e})\n{context}"));
    let failures: Vec<String> = results
        .iter()
        .filter(|(_, v)| **v != serde_json::Value::Bool(true))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let missing: Vec<&&str> = EXPECTED
        .iter()
        .filter(|k| !results.contains_key(**k))
        .collect();
    assert!(
        failures.is_empty() && missing.is_empty(),
        "failed checks: {failures:#?}\nmissing checks: {missing:?}\n{context}"
    );
    running.shutdown().await.unwrap();
}

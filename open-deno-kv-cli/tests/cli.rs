//! The `kv` binary, run as a user runs it.
//!
//! - `kv dump` of every Deno-written fixture equals its manifest: keys, encodings, versionstamps,
//!   expiry and `value_json`;
//! - `kv key encode` reproduces every key vector Deno wrote, from the typed form and from the
//!   literal `kv key decode` prints;
//! - dump → load → dump is identical apart from versionstamps, and migrate carries entries and
//!   queued messages;
//! - failures (missing file, foreign file, bad key, unknown backend, non-empty target, a bad dump
//!   line) exit non-zero with a clear message, never a panic, and leave no partial target.
//!
//! Fixtures: `fixtures/deno-2.9.6` in the repository, or `KV_FIXTURES_DIR`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{kv, kv_fails, kv_ok};
use serde_json::{Value as Json, json};

fn fixtures() -> PathBuf {
    std::env::var_os("KV_FIXTURES_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deno-2.9.6"),
        PathBuf::from,
    )
}

fn read_json(path: &Path) -> Json {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("no temp dir: {e}"))
}

/// A copy of a fixture database in `dir` (opening a WAL file, even read-only, writes beside it).
fn copy_fixture(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(fixtures().join(name), &to)
        .unwrap_or_else(|e| panic!("cannot copy fixture {name}: {e}"));
    to
}

/// The names of the files in `dir`.
fn file_names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn lines(text: &str) -> Vec<Json> {
    text.lines()
        .map(|line| {
            serde_json::from_str(&without_lone_surrogates(line))
                .unwrap_or_else(|e| panic!("{line}: {e}"))
        })
        .collect()
}

/// The entry lines of a dump (not its header, queued messages or end line).
fn entry_lines(text: &str) -> Vec<Json> {
    lines(text)
        .into_iter()
        .filter(|line| line.get("key").is_some())
        .collect()
}

/// JavaScript's JSON may hold a lone UTF-16 surrogate escape (`"\ud800"`), which no Rust string
/// can: it becomes U+FFFD, as Deno stores it. Surrogate pairs are kept.
fn without_lone_surrogates(line: &str) -> String {
    let unit_at = |i: usize| -> Option<u16> {
        line.get(i..i + 2)
            .filter(|p| *p == "\\u")
            .and_then(|_| line.get(i + 2..i + 6))
            .and_then(|h| u16::from_str_radix(h, 16).ok())
    };
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        match unit_at(i) {
            Some(high @ 0xD800..=0xDBFF)
                if unit_at(i + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) =>
            {
                out.push_str(&line[i..i + 12]);
                let _ = high;
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.push_str("\\ufffd");
                i += 6;
            }
            _ => {
                let c = line[i..].chars().next().unwrap_or_default();
                out.push(c);
                i += c.len_utf8().max(1);
            }
        }
    }
    out
}

#[test]
fn dump_of_every_fixture_equals_its_manifest() {
    let dir = temp_dir();
    for name in ["keys", "values", "special"] {
        let manifest = read_json(&fixtures().join(format!("{name}.manifest.json")));
        let db = copy_fixture(dir.path(), &format!("{name}.sqlite"));
        let dumped = entry_lines(&kv_ok(
            dir.path(),
            &["--db", &format!("sqlite:{}", db.display()), "dump"],
        ));
        // Entries already expired now are invisible, as on any read.
        let now_ms = chrono::Utc::now().timestamp_millis();
        let expected: Vec<&Json> = manifest["entries"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no entries"))
            .iter()
            .filter(|e| {
                let at = e["expiration_ms"].as_i64().unwrap_or(-1);
                at < 0 || at > now_ms
            })
            .collect();
        assert_eq!(dumped.len(), expected.len(), "{name}: entry count");
        for (line, entry) in dumped.iter().zip(expected) {
            let label = format!("{name} {}", entry["key"]);
            assert_eq!(line["key"], entry["key"], "{label}: key");
            assert_eq!(line["encoding"], entry["encoding"], "{label}: encoding");
            assert_eq!(
                line["versionstamp"], entry["versionstamp"],
                "{label}: versionstamp"
            );
            assert_eq!(line["value"], entry["value_json"], "{label}: value");
            let expiry = entry["expiration_ms"].as_i64().filter(|ms| *ms >= 0);
            assert_eq!(line["expires_at"].as_i64(), expiry, "{label}: expires_at");
        }
    }
}

#[test]
fn key_encode_reproduces_every_key_vector() {
    let dir = temp_dir();
    let text = std::fs::read_to_string(fixtures().join("key_vectors.jsonl"))
        .unwrap_or_else(|e| panic!("key_vectors.jsonl: {e}"));
    let mut checked = 0;
    for vector in lines(&text) {
        let hex = vector["hex"].as_str().unwrap_or_default();
        // The key as written (where JavaScript reads back something else: a NaN's sign, a lone
        // surrogate, another kind of byte view) encodes to the stored bytes.
        let written = vector
            .get("input_key")
            .unwrap_or(&vector["key"])
            .to_string();
        assert_eq!(
            kv_ok(dir.path(), &["key", "encode", &written]).trim(),
            hex,
            "{written}"
        );
        // What `kv key decode` prints, as a literal or typed JSON, encodes to the same bytes.
        // (A literal, like JavaScript, has one NaN: a stored NaN with its sign bit set comes back
        // as plain NaN, so that vector round-trips only through the typed form.)
        let literal = kv_ok(dir.path(), &["key", "decode", hex]);
        if hex != "210007ffffffffffff" {
            assert_eq!(
                kv_ok(dir.path(), &["key", "encode", literal.trim()]).trim(),
                hex,
                "{literal}"
            );
        }
        let typed = kv_ok(dir.path(), &["key", "decode", "--json", hex]);
        assert_eq!(
            kv_ok(dir.path(), &["key", "encode", typed.trim()]).trim(),
            hex,
            "{typed}"
        );
        // And it is what Deno reads back, except that JavaScript cannot see a NaN's sign.
        let decoded: Json = serde_json::from_str(&typed).unwrap_or_default();
        if !typed.contains("NaN") {
            assert_eq!(decoded, vector["key"], "decode --json of {hex}");
        }
        checked += 1;
    }
    assert_eq!(checked, 203, "every vector");
}

#[test]
fn default_database_is_created_on_first_write_and_serves_every_command() {
    let dir = temp_dir();
    let db = dir.path().join("kv.sqlite3");
    // Reading commands do not create it.
    let err = kv_fails(dir.path(), &["get", r#"["users", 1n]"#]);
    assert!(err.contains("no database at ./kv.sqlite3"), "{err}");
    assert!(!db.exists());

    kv_ok(
        dir.path(),
        &["set", r#"["users", 1n]"#, r#"{"name": "Alice", "age": 30}"#],
    );
    assert!(db.exists(), "the first write creates ./kv.sqlite3");
    kv_ok(
        dir.path(),
        &["set", r#"["users", 2n]"#, "Bob", "--type", "string"],
    );
    kv_ok(dir.path(), &["set", r#"["hits"]"#, "41", "--type", "u64"]);
    kv_ok(
        dir.path(),
        &[
            "set",
            r#"["blob"]"#,
            "00ff",
            "--type",
            "bytes",
            "--expire-in",
            "3600000",
        ],
    );

    let alice = kv_ok(dir.path(), &["get", r#"["users", 1n]"#]);
    assert!(
        alice.starts_with(r#"["users", 1n] = { name: "Alice", age: 30 }"#),
        "{alice}"
    );
    let hits = kv_ok(dir.path(), &["get", "--format", "json", r#"["hits"]"#]);
    assert_eq!(lines(&hits)[0]["value"], json!({"u64": "41"}));

    let users = kv_ok(dir.path(), &["list", r#"["users"]"#]);
    assert_eq!(users.lines().count(), 2, "{users}");
    let limited = kv(dir.path(), &["list", r#"["users"]"#, "--limit", "1"]);
    let cursor_line = String::from_utf8_lossy(&limited.stderr).into_owned();
    let cursor = cursor_line
        .trim()
        .strip_prefix("cursor: ")
        .unwrap_or_else(|| panic!("a limited list prints its cursor: {cursor_line}"));
    let rest = kv_ok(dir.path(), &["list", r#"["users"]"#, "--cursor", cursor]);
    assert!(rest.starts_with(r#"["users", 2n] = "Bob""#), "{rest}");

    let stats = lines(&kv_ok(dir.path(), &["stats"]))[0].clone();
    assert_eq!(stats["entries"], 4);
    assert_eq!(stats["expiring"], 1);
    kv_ok(
        dir.path(),
        &["enqueue", r#"{"job": 1}"#, "--delay", "60000"],
    );
    let stats = lines(&kv_ok(dir.path(), &["stats"]))[0].clone();
    assert_eq!(stats["queued_messages"], 1);

    kv_ok(dir.path(), &["delete", r#"["users", 2n]"#]);
    let err = kv_fails(dir.path(), &["get", r#"["users", 2n]"#]);
    assert!(err.contains(r#"no entry at ["users", 2n]"#), "{err}");

    // A watch prints the current state; --count ends it.
    let watched = kv_ok(dir.path(), &["watch", "--count", "1", r#"["hits"]"#]);
    assert!(
        watched.starts_with(r#"["hits"] = new Deno.KvU64(41n)"#),
        "{watched}"
    );
}

#[test]
fn dump_load_dump_is_identical_and_migrate_carries_the_queue() {
    let dir = temp_dir();
    let values = copy_fixture(dir.path(), "values.sqlite");
    let source = format!("sqlite:{}", values.display());
    let first = kv_ok(dir.path(), &["--db", &source, "dump"]);
    let dump_file = dir.path().join("values.jsonl");
    kv_ok(
        dir.path(),
        &["--db", &source, "dump", "--output", "values.jsonl"],
    );
    assert_eq!(
        std::fs::read_to_string(&dump_file).unwrap_or_default(),
        first
    );

    kv_ok(
        dir.path(),
        &["--db", "sqlite:loaded.sqlite3", "load", "values.jsonl"],
    );
    let second = kv_ok(dir.path(), &["--db", "sqlite:loaded.sqlite3", "dump"]);
    // Load and migrate make new commits and new message ids, into databases of their own
    // (another identity in the header); the rest is the same.
    let without_versionstamps = |text: &str| -> Vec<Json> {
        lines(text)
            .into_iter()
            .map(|mut line| {
                if let Some(object) = line.as_object_mut() {
                    object.remove("versionstamp");
                    object.remove("id");
                    object.remove("database");
                }
                line
            })
            .collect()
    };
    assert_eq!(
        without_versionstamps(&second),
        without_versionstamps(&first)
    );

    // special.sqlite holds three queued messages and entries with expiry.
    let special = copy_fixture(dir.path(), "special.sqlite");
    let special_url = format!("sqlite:{}", special.display());
    kv_ok(
        dir.path(),
        &["--db", &special_url, "migrate", "sqlite:migrated.sqlite3"],
    );
    let from = lines(&kv_ok(dir.path(), &["--db", &special_url, "stats"]))[0].clone();
    let to = lines(&kv_ok(
        dir.path(),
        &["--db", "sqlite:migrated.sqlite3", "stats"],
    ))[0]
        .clone();
    assert_eq!(from["queued_messages"], 3);
    assert_eq!(
        to, from,
        "the same entries, sizes, expiring entries and queue"
    );
    assert_eq!(
        without_versionstamps(&kv_ok(
            dir.path(),
            &["--db", "sqlite:migrated.sqlite3", "dump"]
        )),
        without_versionstamps(&kv_ok(dir.path(), &["--db", &special_url, "dump"]))
    );
}

#[test]
fn failures_are_clear_and_leave_no_partial_target() {
    let dir = temp_dir();
    let path = dir.path();

    let err = kv_fails(path, &["--db", "sqlite:missing.sqlite3", "list"]);
    assert!(err.contains("no database at missing.sqlite3"), "{err}");

    std::fs::write(
        path.join("foreign.sqlite3"),
        b"this is not a database at all, just text",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["--db", "sqlite:foreign.sqlite3", "dump"]);
    assert!(err.starts_with("kv: "), "{err}");
    assert!(
        err.to_lowercase().contains("not a database") || err.contains("corrupt"),
        "{err}"
    );

    let err = kv_fails(path, &["key", "encode", r#"["users", 42x]"#]);
    assert!(err.contains("bad key"), "{err}");
    let err = kv_fails(path, &["--db", "cassandra://x", "get", r#"["a"]"#]);
    assert!(err.contains("unknown backend \"cassandra\""), "{err}");
    let err = kv_fails(path, &["set", r#"["a"]"#, "{not json"]);
    assert!(err.contains("bad value"), "{err}");

    // A dump with a bad line creates nothing.
    std::fs::write(
        path.join("bad.jsonl"),
        "{\"key\":[{\"string\":\"a\"}],\"encoding\":\"u64\",\"value\":{\"u64\":\"1\"}}\nnot json\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["--db", "sqlite:new.sqlite3", "load", "bad.jsonl"]);
    assert!(err.contains("bad.jsonl, line 2"), "{err}");
    let leftovers = file_names(path);
    assert!(
        !leftovers.iter().any(|n| n.starts_with("new.sqlite3")),
        "no target, no temporary file: {leftovers:?}"
    );

    // A non-empty target is refused and left as it was.
    kv_ok(
        path,
        &["--db", "sqlite:full.sqlite3", "set", r#"["keep"]"#, "1"],
    );
    std::fs::write(
        path.join("good.jsonl"),
        "{\"key\":[{\"string\":\"b\"}],\"encoding\":\"u64\",\"value\":{\"u64\":\"2\"}}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["--db", "sqlite:full.sqlite3", "load", "good.jsonl"]);
    assert!(err.contains("already holds data"), "{err}");
    let kept = kv_ok(path, &["--db", "sqlite:full.sqlite3", "list"]);
    assert_eq!(kept.lines().count(), 1, "{kept}");
}

#[test]
fn load_splits_a_large_dump_into_commits_within_denos_limits() {
    let dir = temp_dir();
    // 1500 entries with 1 KiB keys and 10 KiB values: far beyond one commit's 1000 mutations,
    // 80 KiB of keys and 800 KiB in all.
    let padding = "k".repeat(1000);
    let value = hex::encode(vec![7u8; 10 * 1024]);
    let mut dump = String::new();
    for i in 0..1500 {
        let line = json!({
            "key": [{"string": "big"}, {"string": format!("{padding}{i:05}")}],
            "encoding": "bytes",
            "value": {"view": {"type": "Uint8Array", "bytes": value}},
        });
        dump.push_str(&line.to_string());
        dump.push('\n');
    }
    std::fs::write(dir.path().join("big.jsonl"), dump).unwrap_or_else(|e| panic!("{e}"));
    kv_ok(
        dir.path(),
        &["--db", "sqlite:big.sqlite3", "load", "big.jsonl"],
    );
    let stats = lines(&kv_ok(dir.path(), &["--db", "sqlite:big.sqlite3", "stats"]))[0].clone();
    assert_eq!(stats["entries"], 1500);
    assert_eq!(stats["value_bytes"], 1500 * 10 * 1024);
}

#[test]
fn migrate_moves_everything_between_engines_and_back() {
    let dir = temp_dir();
    let special = copy_fixture(dir.path(), "special.sqlite");
    let source = format!("sqlite:{}", special.display());
    kv_ok(dir.path(), &["--db", &source, "migrate", "redb:copy.redb"]);
    kv_ok(
        dir.path(),
        &["--db", "redb:copy.redb", "migrate", "sqlite:back.sqlite3"],
    );
    kv_ok(dir.path(), &["--db", &source, "migrate", "memory:"]);

    let stats = |url: &str| lines(&kv_ok(dir.path(), &["--db", url, "stats"]))[0].clone();
    assert_eq!(stats("redb:copy.redb"), stats(&source));
    assert_eq!(stats("sqlite:back.sqlite3"), stats(&source));
    let dump = |url: &str| -> Vec<Json> {
        lines(&kv_ok(dir.path(), &["--db", url, "dump"]))
            .into_iter()
            .map(|mut line| {
                // Migrate makes new commits and new message ids, in a database of its own.
                if let Some(object) = line.as_object_mut() {
                    object.remove("versionstamp");
                    object.remove("id");
                    object.remove("database");
                }
                line
            })
            .collect()
    };
    assert_eq!(dump("redb:copy.redb"), dump(&source));
    assert_eq!(dump("sqlite:back.sqlite3"), dump(&source));
}

/// What a database holds, as its backend stores it: every live entry (key, encoding and stored
/// bytes, expiry) and every queued message (payload bytes, ready time, undelivered keys, backoff
/// schedule; not the id, which a load makes anew).
#[derive(Debug, PartialEq)]
struct Stored {
    entries: Vec<(open_deno_kv::Key, open_deno_kv::KvValue, Option<i64>)>,
    messages: Vec<StoredMessage>,
}

/// A queued message without its id: payload, ready time (ms), undelivered keys, schedule.
type StoredMessage = (Vec<u8>, i64, Vec<Vec<u8>>, Vec<u32>);

/// Runs a future to completion, for tests that use the `open-deno-kv` crate directly.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("no runtime: {e}"))
        .block_on(future)
}

fn stored(url: &str) -> Stored {
    use futures::TryStreamExt;
    block_on(async {
        let kv = open_deno_kv::Kv::open(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let entries: Vec<open_deno_kv::Entry> = kv
            .list(
                open_deno_kv::Selector::prefix(open_deno_kv::key![]),
                open_deno_kv::ListOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        let mut messages: Vec<_> = kv
            .queued_messages()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .into_iter()
            .map(|m| {
                (
                    m.payload,
                    m.ready_at.timestamp_millis(),
                    m.keys_if_undelivered,
                    m.backoff_schedule,
                )
            })
            .collect();
        messages.sort();
        kv.close().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        Stored {
            entries: entries
                .into_iter()
                .map(|e| (e.key, e.value, e.expires_at.map(|at| at.timestamp_millis())))
                .collect(),
            messages,
        }
    })
}

/// `kv dump -o` of `url`, then `kv load` of that file into a new SQLite database in `dir`;
/// returns the new database's URL.
fn dump_and_load(dir: &Path, url: &str, name: &str) -> String {
    let dump = format!("{name}.jsonl");
    kv_ok(dir, &["--db", url, "dump", "-o", &dump]);
    let loaded = format!(
        "sqlite:{}",
        dir.join(format!("{name}-loaded.sqlite3")).display()
    );
    kv_ok(dir, &["--db", &loaded, "load", &dump]);
    loaded
}

#[test]
fn dump_then_load_reproduces_every_fixture_byte_for_byte_with_its_queue() {
    let dir = temp_dir();
    for name in ["keys", "values", "special", "key_vectors"] {
        let db = copy_fixture(dir.path(), &format!("{name}.sqlite"));
        let source = format!("sqlite:{}", db.display());
        let loaded = dump_and_load(dir.path(), &source, name);
        let (from, to) = (stored(&source), stored(&loaded));
        assert!(!from.entries.is_empty(), "{name}: no entries");
        let queued = if name == "special" { 3 } else { 0 };
        assert_eq!(from.messages.len(), queued, "{name}: queued messages");
        assert_eq!(to, from, "{name}: stored bytes, expiry and queue");
    }
}

#[test]
fn dump_then_load_keeps_what_the_tagged_form_drops() {
    // Bytes Deno 2.9.6 wrote (kv.set) for values whose tagged JSON is not the whole story:
    let deno_values = [
        // { window: new Uint16Array(buf, 4, 3), view: new DataView(buf, 2, 5), whole: new
        // Uint8Array(buf) }, buf a 16-byte ArrayBuffer: windows sharing one buffer.
        "ff106f220677696e646f774210000102030405060708090a0b0c0d0e0f56570406002204766965775e01563f020500220577686f6c655e0156420010007b03",
        // new TypeError("boom", { cause: 42 }): a stack and a primitive cause.
        "ff1072546d2204626f6f6d732236547970654572726f723a20626f6f6d0a2020202061742066696c653a2f2f2f746d702f636c692d67656e2f67656e2e74733a373a31336349542e",
        // new Error("outer", { cause: "text cause" }).
        "ff10726d22056f757465727322334572726f723a206f757465720a2020202061742066696c653a2f2f2f746d702f636c692d67656e2f67656e2e74733a393a313463220a746578742063617573652e",
        // [new Uint8Array(buf, 8, 4)]: a window at an offset into a larger buffer.
        "ff1041014210000102030405060708090a0b0c0d0e0f5642080400240001",
    ];
    let dir = temp_dir();
    let source = format!("sqlite:{}", dir.path().join("lossy.sqlite3").display());
    block_on(async {
        let kv = open_deno_kv::Kv::open(&source)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for (i, hex_bytes) in deno_values.iter().enumerate() {
            let bytes = hex::decode(hex_bytes).unwrap_or_else(|e| panic!("{e}"));
            kv.set(
                open_deno_kv::key!["lossy", i as i64],
                open_deno_kv::KvValue::V8(bytes.clone().into()),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            kv.enqueue(
                open_deno_kv::KvValue::V8(bytes.into()),
                open_deno_kv::EnqueueOptions::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
        kv.close().await.unwrap_or_else(|e| panic!("{e}"));
    });
    let loaded = dump_and_load(dir.path(), &source, "lossy");
    let (from, to) = (stored(&source), stored(&loaded));
    assert_eq!(from.entries.len(), deno_values.len());
    assert_eq!(from.messages.len(), deno_values.len());
    assert_eq!(to, from);
}

/// Runs a system tool (mknod, mkfifo) that must succeed.
fn run_tool(dir: &Path, program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        status.success(),
        "{program} {args:?} failed (root is needed for mknod)"
    );
}

#[cfg(unix)]
#[test]
fn dump_output_streams_into_special_files_and_never_replaces_them() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let dir = temp_dir();
    let path = dir.path();
    let file_type = |name: &str| {
        std::fs::symlink_metadata(path.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .file_type()
    };
    kv_ok(path, &["set", r#"["a"]"#, "1"]);
    let expected = kv_ok(path, &["dump"]);

    // A character device like /dev/null (1, 3), made here: written into, still a device.
    run_tool(path, "mknod", &["null", "c", "1", "3"]);
    let device = std::fs::metadata(path.join("null")).map_or(0, |m| m.rdev());
    kv_ok(path, &["dump", "-o", "null"]);
    assert!(file_type("null").is_char_device(), "the device is gone");
    assert_eq!(
        std::fs::metadata(path.join("null")).map_or(0, |m| m.rdev()),
        device
    );

    // A FIFO: its reader gets the whole dump, and it stays a FIFO.
    run_tool(path, "mkfifo", &["fifo"]);
    let fifo = path.join("fifo");
    let reader = std::thread::spawn(move || std::fs::read_to_string(fifo));
    kv_ok(path, &["dump", "-o", "fifo"]);
    assert!(file_type("fifo").is_fifo(), "the FIFO was replaced");
    let streamed = reader
        .join()
        .unwrap_or_else(|_| panic!("the reader panicked"));
    assert_eq!(streamed.unwrap_or_else(|e| panic!("{e}")), expected);

    // A link to a regular file: the file gets the dump (keeping its permissions), the link
    // stays a link.
    std::fs::write(path.join("real.jsonl"), "old").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(path.join("real.jsonl"), PermissionsExt::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("real.jsonl", path.join("link.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    kv_ok(path, &["dump", "-o", "link.jsonl"]);
    assert!(
        file_type("link.jsonl").is_symlink(),
        "the link was replaced"
    );
    assert_eq!(
        std::fs::read_to_string(path.join("real.jsonl")).unwrap_or_default(),
        expected
    );
    let mode = std::fs::metadata(path.join("real.jsonl")).map_or(0, |m| m.mode());
    assert_eq!(
        mode & 0o777,
        0o600,
        "the replaced file keeps its permissions"
    );

    // A link to nothing and a directory are refused, and nothing is created.
    std::os::unix::fs::symlink("nowhere.jsonl", path.join("dangling.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["dump", "-o", "dangling.jsonl"]);
    assert!(err.contains("symbolic link to nothing"), "{err}");
    assert!(!path.join("nowhere.jsonl").exists());
    std::fs::create_dir(path.join("folder")).unwrap_or_else(|e| panic!("{e}"));
    let err = kv_fails(path, &["dump", "-o", "folder"]);
    assert!(err.contains("is a directory"), "{err}");
    let leftovers = file_names(path);
    assert!(
        !leftovers.iter().any(|n| n.contains(".partial-")),
        "no temporary file: {leftovers:?}"
    );
}

#[test]
fn load_refuses_disagreeing_cut_or_newer_dumps_and_warns_about_tagged_values() {
    let dir = temp_dir();
    let path = dir.path();
    kv_ok(
        path,
        &["set", r#"["greeting"]"#, "hello", "--type", "string"],
    );
    kv_ok(path, &["enqueue", r#"{"job": 1}"#, "--delay", "60000"]);
    let dump = kv_ok(path, &["dump"]);
    // Loads `text` as the file `name` into `sqlite:NAME.sqlite3`: whether it succeeded, its
    // stderr, the database URL.
    let load = |name: &str, text: &str| {
        std::fs::write(path.join(name), text).unwrap_or_else(|e| panic!("{e}"));
        let db = format!("sqlite:{name}.sqlite3");
        let output = kv(path, &["--db", &db, "load", name]);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.success(), stderr, db)
    };
    let refused = |name: &str, text: &str, reason: &str| {
        let (ok, stderr, _) = load(name, text);
        assert!(!ok && stderr.contains(reason), "{name}: {stderr}");
    };

    // The dump as written loads without a warning.
    let (ok, stderr, _) = load("as-is.jsonl", &dump);
    assert!(ok && !stderr.contains("warning"), "{stderr}");

    // An edited value whose bytes were left as they were: refused.
    let edited = dump.replace(r#"{"string":"hello"}"#, r#"{"string":"howdy"}"#);
    assert_ne!(edited, dump);
    refused(
        "edited.jsonl",
        &edited,
        "edited.jsonl, line 2: \"value\" does not describe \"bytes\"",
    );

    // The same edit with the bytes deleted: loaded from the tagged form, with a warning.
    let without_bytes: String = edited
        .lines()
        .map(|line| {
            let mut json: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}"));
            if line.contains("greeting")
                && let Some(object) = json.as_object_mut()
            {
                object.remove("bytes");
            }
            format!("{json}\n")
        })
        .collect();
    let (ok, stderr, db) = load("rebuilt.jsonl", &without_bytes);
    assert!(
        ok && stderr
            .contains("warning: 1 V8 value had no \"bytes\" and was rebuilt from its tagged form"),
        "{stderr}"
    );
    let howdy = kv_ok(path, &["--db", &db, "get", r#"["greeting"]"#]);
    assert!(howdy.starts_with(r#"["greeting"] = "howdy""#), "{howdy}");

    // A dump cut before its end line (here: its queued message too) is refused.
    let cut: String = dump
        .lines()
        .take(2)
        .map(|line| format!("{line}\n"))
        .collect();
    refused("cut.jsonl", &cut, "incomplete");

    // A dump of a newer format is refused, saying which versions this kv reads.
    let newer = dump.replacen(r#""version":3"#, r#""version":4"#, 1);
    assert_ne!(newer, dump, "the dump announces format 3");
    refused(
        "newer.jsonl",
        &newer,
        "this dump is format version 4; this kv reads versions 1 to 3",
    );
    let leftovers = file_names(path);
    for name in ["edited", "cut", "newer"] {
        assert!(
            !leftovers
                .iter()
                .any(|n| n.starts_with(&format!("{name}.jsonl.sqlite3"))),
            "{name}: no target: {leftovers:?}"
        );
    }
}

//! Opens the SQLite files written by the real Deno 2.9.6 (`fixtures/deno-2.9.6` in the
//! repository; `KV_FIXTURES_DIR` overrides the location) through [`SqliteBackend`] and checks them
//! against their manifests:
//!
//! - every manifest entry reads back with its exact value bytes, encoding and versionstamp, and a
//!   full list returns exactly the manifest's entries in byte order, minus those already expired
//!   at the backend's (manual) clock time; `absent_keys` are absent;
//! - `key_vectors.sqlite` holds exactly the keys of `key_vectors.jsonl`, in the same order;
//! - the queue rows of `special.sqlite` are delivered in `ts` order, not before their time, with
//!   their exact payload, and a failed delivery of the message with a custom backoff schedule is
//!   retried after each interval and finally dead-lettered to its `keys_if_undelivered`;
//! - a read-only open reads everything and refuses writes with [`KvError::ReadOnly`];
//! - a write through the backend keeps `migration_state` at 3 and advances `data_version`.
//!
//! Every test works on a copy of the fixture in a temporary directory; the committed files are
//! never opened for writing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, KvEntry, KvError, KvValue, ManualClock, Mutation,
    QueueMessageHandle, ReadRange, SnapshotRead, Versionstamp, encode_key, key, ms_to_datetime,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend, SqliteOptions};
use serde_json::Value;

/// Deno's `expireIn` of ten years, as the generator used it.
const TEN_YEARS_MS: i64 = 315_360_000_000;
/// How long "nothing is delivered" is waited for.
const QUIET_WAIT: Duration = Duration::from_millis(300);
/// How long a delivery that is due may take at most.
const DUE_WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Locating and reading the fixtures
// ---------------------------------------------------------------------------------------------

fn fixtures_dir() -> PathBuf {
    let dir = match std::env::var_os("KV_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/deno-2.9.6"),
    };
    assert!(
        dir.join("special.manifest.json").is_file() && dir.join("special.sqlite").is_file(),
        "Deno fixtures not found at {} (they are committed under fixtures/deno-2.9.6; or set KV_FIXTURES_DIR)",
        dir.display()
    );
    dir
}

/// Every `*.sqlite` in the fixtures directory, by file name, sorted.
fn fixture_databases() -> Vec<String> {
    let dir = fixtures_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").file_name())
        .filter_map(|name| name.to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".sqlite"))
        .collect();
    names.sort();
    assert!(
        names.len() >= 4,
        "expected keys, values, special and key_vectors databases in {}, found {names:?}",
        dir.display()
    );
    names
}

/// The `*.sqlite` files that have a `*.manifest.json`.
fn manifest_databases() -> Vec<String> {
    let dir = fixtures_dir();
    let names: Vec<String> = fixture_databases()
        .into_iter()
        .filter(|db| dir.join(manifest_name(db)).is_file())
        .collect();
    for expected in ["keys.sqlite", "values.sqlite", "special.sqlite"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} or its manifest is missing from {}",
            dir.display()
        );
    }
    names
}

fn manifest_name(db: &str) -> String {
    format!("{}.manifest.json", db.trim_end_matches(".sqlite"))
}

fn read_json(name: &str) -> Value {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn hex_field(value: &Value, field: &str) -> Vec<u8> {
    let text = value[field]
        .as_str()
        .unwrap_or_else(|| panic!("missing hex field {field} in {value}"));
    hex::decode(text).unwrap_or_else(|e| panic!("bad hex in {field}: {e}"))
}

fn int_field(value: &Value, field: &str) -> i64 {
    value[field]
        .as_i64()
        .unwrap_or_else(|| panic!("missing integer field {field} in {value}"))
}

/// Parses a line of JSON written by JavaScript. A lone UTF-16 surrogate escape (valid in a JS
/// string, impossible in a Rust one) is replaced by U+FFFD, which is what Deno stores for it.
fn parse_js_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        let mut fixed = text.to_owned();
        for unit in 0xd800u32..=0xdfff {
            fixed = fixed.replace(&format!("\\u{unit:04x}"), "\\ufffd");
        }
        serde_json::from_str(&fixed).unwrap_or_else(|e| panic!("bad JSON {text}: {e}"))
    })
}

/// One manifest entry, as the raw row Deno stored.
#[derive(Debug, Clone)]
struct Expected {
    /// For messages: the fixture and the typed key.
    label: String,
    key: Vec<u8>,
    value: Vec<u8>,
    v_encoding: i64,
    encoding: String,
    versionstamp: Versionstamp,
    expiration_ms: i64,
}

impl Expected {
    fn visible_at(&self, now_ms: i64) -> bool {
        self.expiration_ms < 0 || self.expiration_ms > now_ms
    }
}

struct Manifest {
    db: String,
    entries: Vec<Expected>,
    absent_keys: Vec<Vec<u8>>,
    data_version: i64,
    json: Value,
}

fn load_manifest(db: &str) -> Manifest {
    let json = read_json(&manifest_name(db));
    let entries: Vec<Expected> = json["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{db}: manifest has no entries[]"))
        .iter()
        .map(|e| Expected {
            label: format!("{db} {}", e["key"]),
            key: hex_field(e, "key_hex"),
            value: hex_field(e, "value_hex"),
            v_encoding: int_field(e, "v_encoding"),
            encoding: e["encoding"].as_str().expect("encoding").to_owned(),
            versionstamp: e["versionstamp"]
                .as_str()
                .expect("versionstamp")
                .parse()
                .expect("a 20-hex-digit versionstamp"),
            expiration_ms: int_field(e, "expiration_ms"),
        })
        .collect();
    assert!(!entries.is_empty(), "{db}: manifest lists no entries");
    let absent_keys = json["absent_keys"]
        .as_array()
        .map(|keys| keys.iter().map(typed_key_bytes).collect::<Vec<Vec<u8>>>())
        .unwrap_or_default();
    let data_version = json["data_version"][0][1]
        .as_i64()
        .unwrap_or_else(|| panic!("{db}: manifest data_version is not [[0, version, seq]]"));
    Manifest {
        db: db.to_owned(),
        entries,
        absent_keys,
        data_version,
        json,
    }
}

/// Encodes a key given in the manifests' typed form. Only the part types `absent_keys` use are
/// needed here (strings and bigints); anything else fails loudly.
fn typed_key_bytes(parts: &Value) -> Vec<u8> {
    let mut key = open_deno_kv_engine_kit::Key::new(Vec::new());
    for part in parts.as_array().expect("a typed key is an array") {
        if let Some(s) = part.get("string").and_then(Value::as_str) {
            key = key.push(s);
        } else if let Some(n) = part.get("int").and_then(Value::as_str) {
            let n: open_deno_kv_engine_kit::num_bigint::BigInt =
                n.parse().expect("a decimal bigint");
            key = key.push(open_deno_kv_engine_kit::KeyPart::Int(n));
        } else {
            panic!("unsupported key part in absent_keys: {part}");
        }
    }
    encode_key(&key).expect("an encodable key")
}

/// The time the fixtures were generated, in Unix ms: when the queue messages of `special` were
/// enqueued (`ts - delay_ms`; the latest of them). The `["exp","past"]` row (`expireIn: 1`) was
/// written before, so it is expired then; the 10-year entries are not.
fn generation_time_ms() -> i64 {
    let special = read_json("special.manifest.json");
    special["queue"]
        .as_array()
        .expect("special.manifest.json has queue[]")
        .iter()
        .map(|m| int_field(m, "ts") - int_field(m, "delay_ms"))
        .max()
        .expect("special.manifest.json has queue messages")
}

// ---------------------------------------------------------------------------------------------
// Copies, handles, reads
// ---------------------------------------------------------------------------------------------

/// A private copy of a fixture database (with its `-wal`/`-shm` files, if any).
struct FixtureCopy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn copy_fixture(db: &str) -> FixtureCopy {
    let source_dir = fixtures_dir();
    let dir = tempfile::tempdir().expect("a temporary directory");
    for suffix in ["", "-wal", "-shm"] {
        let name = format!("{db}{suffix}");
        let from = source_dir.join(&name);
        if !from.exists() {
            assert!(!suffix.is_empty(), "{} is missing", from.display());
            continue;
        }
        let to = dir.path().join(&name);
        std::fs::copy(&from, &to)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
        // A checkout may have the files read-only; `fs::copy` carries the mode over.
        let mut permissions = std::fs::metadata(&to).expect("metadata").permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        permissions.set_readonly(false);
        std::fs::set_permissions(&to, permissions).expect("making the copy writable");
    }
    let path = dir.path().join(db);
    FixtureCopy { _dir: dir, path }
}

fn at(ms: i64) -> chrono::DateTime<chrono::Utc> {
    ms_to_datetime(ms).unwrap_or_else(|| panic!("{ms} ms is out of range"))
}

fn open(path: &Path, clock: &ManualClock, read_only: bool) -> Checked<SqliteBackend> {
    let options = SqliteOptions {
        clock: Arc::new(clock.clone()),
        read_only,
        ..Default::default()
    };
    SqliteBackend::open_with(path, options)
        .unwrap_or_else(|e| panic!("opening {} (read_only: {read_only}): {e}", path.display()))
}

async fn get(kv: &Checked<SqliteBackend>, key: &[u8]) -> Option<KvEntry> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_encoded_key(key.to_vec())],
        ..Default::default()
    };
    let mut outputs = kv
        .snapshot_read(read)
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", hex::encode(key)));
    assert_eq!(outputs.len(), 1, "one range, one output");
    let mut entries = outputs.remove(0).entries;
    assert!(entries.len() <= 1, "a point read returned {entries:?}");
    let entry = entries.pop();
    if let Some(entry) = &entry {
        assert_eq!(entry.key, key, "a point read returned another key");
    }
    entry
}

/// Every entry of the database in ascending byte order, read in pages of 1000 (Deno's limit).
async fn list_all(kv: &Checked<SqliteBackend>) -> Vec<KvEntry> {
    const PAGE: u32 = 1000;
    let mut all: Vec<KvEntry> = Vec::new();
    let mut start = Vec::new();
    loop {
        let read = SnapshotRead {
            ranges: vec![ReadRange {
                start: start.clone(),
                end: vec![0xff],
                limit: PAGE,
                reverse: false,
            }],
            ..Default::default()
        };
        let mut outputs = kv.snapshot_read(read).await.expect("listing all keys");
        let page = outputs.remove(0).entries;
        let full = page.len() == PAGE as usize;
        if let Some(last) = page.last() {
            start = last.key.to_vec();
            start.push(0);
        }
        all.extend(page);
        if !full {
            return all;
        }
    }
}

fn assert_entry(actual: &KvEntry, expected: &Expected) {
    let label = &expected.label;
    assert_eq!(
        hex::encode(&actual.key),
        hex::encode(&expected.key),
        "{label}: key bytes"
    );
    let (bytes, encoding) = actual.value.encode();
    assert_eq!(
        hex::encode(&bytes),
        hex::encode(&expected.value),
        "{label}: value bytes"
    );
    assert_eq!(encoding.id(), expected.v_encoding, "{label}: v_encoding");
    assert_eq!(encoding.name(), expected.encoding, "{label}: encoding name");
    assert_eq!(
        actual.versionstamp, expected.versionstamp,
        "{label}: versionstamp"
    );
}

/// Checks the whole database against the manifest as seen at `now_ms` (the clock the backend
/// was opened with must show that time): visible entries read back exactly, expired ones and
/// `absent_keys` are absent, and the full list is exactly the visible entries in byte order.
async fn check_manifest_at(kv: &Checked<SqliteBackend>, manifest: &Manifest, now_ms: i64) {
    let db = &manifest.db;
    for expected in &manifest.entries {
        let found = get(kv, &expected.key).await;
        match (expected.visible_at(now_ms), found) {
            (true, Some(actual)) => assert_entry(&actual, expected),
            (true, None) => panic!("{} is missing at {now_ms}", expected.label),
            (false, None) => {}
            (false, Some(actual)) => panic!(
                "{} expired at {} but is still visible at {now_ms}: {actual:?}",
                expected.label, expected.expiration_ms
            ),
        }
    }
    for absent in &manifest.absent_keys {
        assert_eq!(
            get(kv, absent).await,
            None,
            "{db}: absent key {} is present",
            hex::encode(absent)
        );
    }

    let mut visible: Vec<&Expected> = manifest
        .entries
        .iter()
        .filter(|e| e.visible_at(now_ms))
        .collect();
    visible.sort_by(|a, b| a.key.cmp(&b.key));
    let listed = list_all(kv).await;
    let listed_keys: Vec<String> = listed.iter().map(|e| hex::encode(&e.key)).collect();
    let expected_keys: Vec<String> = visible.iter().map(|e| hex::encode(&e.key)).collect();
    assert_eq!(
        listed_keys, expected_keys,
        "{db}: the full list at {now_ms} must be the manifest's unexpired entries in byte order"
    );
    for (actual, expected) in listed.iter().zip(&visible) {
        assert_entry(actual, expected);
    }
}

fn find<'a>(manifest: &'a Manifest, key: &open_deno_kv_engine_kit::Key) -> &'a Expected {
    let bytes = encode_key(key).expect("encodable");
    manifest
        .entries
        .iter()
        .find(|e| e.key == bytes)
        .unwrap_or_else(|| panic!("{}: no entry for {key:?}", manifest.db))
}

fn raw_connection(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| panic!("raw open of {}: {e}", path.display()))
}

/// `(migration_state version, data_version version)` read with a plain SQLite connection.
fn raw_state(path: &Path) -> (i64, i64) {
    let conn = raw_connection(path);
    let migration: i64 = conn
        .query_row(
            "select version from migration_state where k = 0",
            [],
            |row| row.get(0),
        )
        .expect("migration_state row");
    let version: i64 = conn
        .query_row("select version from data_version where k = 0", [], |row| {
            row.get(0)
        })
        .expect("data_version row");
    (migration, version)
}

// ---------------------------------------------------------------------------------------------
// Entries, lists and expiry
// ---------------------------------------------------------------------------------------------

#[test]
fn every_fixture_database_has_a_reference() {
    let dir = fixtures_dir();
    for db in fixture_databases() {
        let has_manifest = dir.join(manifest_name(&db)).is_file();
        let is_key_vectors = db == "key_vectors.sqlite" && dir.join("key_vectors.jsonl").is_file();
        assert!(
            has_manifest || is_key_vectors,
            "{db} has neither a manifest nor key vectors; these tests would not check it"
        );
    }
}

#[tokio::test]
async fn every_manifest_entry_reads_back_exactly() {
    let now_ms = generation_time_ms();
    for db in manifest_databases() {
        let manifest = load_manifest(&db);
        let copy = copy_fixture(&db);
        let clock = ManualClock::new(at(now_ms));
        let kv = open(&copy.path, &clock, false);
        check_manifest_at(&kv, &manifest, now_ms).await;
        kv.close().await.expect("close");
    }
}

#[tokio::test]
async fn key_vectors_database_holds_the_vectors_in_order() {
    let dir = fixtures_dir();
    let text = std::fs::read_to_string(dir.join("key_vectors.jsonl")).expect("key_vectors.jsonl");
    let vectors: Vec<(Vec<u8>, u64)> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let vector = parse_js_json(line);
            let gen_index = vector["gen_index"]
                .as_u64()
                .unwrap_or_else(|| panic!("no gen_index in {line}"));
            (hex_field(&vector, "hex"), gen_index)
        })
        .collect();
    assert_eq!(vectors.len(), 203, "the README promises 203 vectors");

    let copy = copy_fixture("key_vectors.sqlite");
    let clock = ManualClock::new(at(generation_time_ms()));
    let kv = open(&copy.path, &clock, false);
    let listed = list_all(&kv).await;
    let listed_keys: Vec<String> = listed.iter().map(|e| hex::encode(&e.key)).collect();
    let expected_keys: Vec<String> = vectors.iter().map(|(k, _)| hex::encode(k)).collect();
    assert_eq!(
        listed_keys, expected_keys,
        "key_vectors.sqlite lists the vectors' keys in the file's order"
    );
    let (_, data_version) = raw_state(&copy.path);
    for (entry, (key, gen_index)) in listed.iter().zip(&vectors) {
        // The generator stored each vector's index as a JavaScript number: V8 `ff 10`, then an
        // int32 (`I`) as a zigzag varint.
        let mut expected = vec![0xff, 0x10, b'I'];
        let mut zigzag = gen_index << 1;
        loop {
            let byte = (zigzag & 0x7f) as u8;
            zigzag >>= 7;
            if zigzag == 0 {
                expected.push(byte);
                break;
            }
            expected.push(byte | 0x80);
        }
        assert_eq!(
            entry.value,
            KvValue::V8(expected.into()),
            "value of key {}",
            hex::encode(key)
        );
        assert!(
            entry.versionstamp > Versionstamp::ZERO
                && entry.versionstamp.version() <= data_version as u64,
            "versionstamp {} of key {} is outside (0, data_version {data_version}]",
            entry.versionstamp,
            hex::encode(key)
        );
        let point = get(&kv, key)
            .await
            .unwrap_or_else(|| panic!("key {} listed but not readable", hex::encode(key)));
        assert_eq!(&point, entry, "point read and list agree");
    }
    kv.close().await.expect("close");
}

#[tokio::test]
async fn special_expiry_follows_the_backend_clock() {
    let manifest = load_manifest("special.sqlite");
    let generated = generation_time_ms();
    let past = find(&manifest, &key!["exp", "past"]).clone();
    let future = find(&manifest, &key!["exp", "future"]).clone();
    assert!(
        past.expiration_ms >= 0 && past.expiration_ms <= generated,
        "[\"exp\",\"past\"] must be expired at the generation time {generated}"
    );
    assert!(
        future.expiration_ms > generated + TEN_YEARS_MS - 60_000,
        "[\"exp\",\"future\"] must expire about ten years after generation"
    );

    // Read-only first: nothing is swept, so hiding is the reader's doing alone. Just before
    // `exp/past` expires, every row of the file is visible.
    {
        let copy = copy_fixture("special.sqlite");
        let clock = ManualClock::new(at(past.expiration_ms - 1));
        let kv = open(&copy.path, &clock, true);
        check_manifest_at(&kv, &manifest, past.expiration_ms - 1).await;
        assert!(get(&kv, &past.key).await.is_some());
        clock.set(at(past.expiration_ms));
        check_manifest_at(&kv, &manifest, past.expiration_ms).await;
        assert!(get(&kv, &past.key).await.is_none());
        kv.close().await.expect("close");
    }

    // Writable, at generation time: `exp/past` hidden, `exp/future` visible.
    let copy = copy_fixture("special.sqlite");
    let clock = ManualClock::new(at(generated));
    let kv = open(&copy.path, &clock, false);
    check_manifest_at(&kv, &manifest, generated).await;
    assert!(get(&kv, &past.key).await.is_none(), "exp/past is hidden");
    assert_entry(
        &get(&kv, &future.key).await.expect("exp/future is visible"),
        &future,
    );

    // Walk the clock over every later expiry: one millisecond before, still there; at the
    // expiry, gone (an entry is expired once `expiration_ms <= now`).
    let mut expiries: Vec<i64> = manifest
        .entries
        .iter()
        .map(|e| e.expiration_ms)
        .filter(|&ms| ms > generated)
        .collect();
    expiries.sort_unstable();
    expiries.dedup();
    assert!(
        expiries.contains(&future.expiration_ms),
        "the walk covers exp/future"
    );
    for ms in expiries {
        clock.set(at(ms - 1));
        check_manifest_at(&kv, &manifest, ms - 1).await;
        clock.set(at(ms));
        check_manifest_at(&kv, &manifest, ms).await;
    }
    assert!(
        get(&kv, &future.key).await.is_none(),
        "exp/future is gone after its 10-year expiry"
    );
    let remaining = list_all(&kv).await.len();
    let never_expiring = manifest
        .entries
        .iter()
        .filter(|e| e.expiration_ms < 0)
        .count();
    assert_eq!(
        remaining, never_expiring,
        "only entries without expiry remain"
    );
    kv.close().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// Queue
// ---------------------------------------------------------------------------------------------

struct QueueRow {
    ts: i64,
    data: Vec<u8>,
    keys_if_undelivered: Vec<Vec<u8>>,
    backoff_schedule: Vec<i64>,
    custom_schedule: bool,
}

fn queue_rows(manifest: &Manifest) -> Vec<QueueRow> {
    let mut rows: Vec<QueueRow> = manifest.json["queue"]
        .as_array()
        .expect("special.manifest.json has queue[]")
        .iter()
        .map(|m| QueueRow {
            ts: int_field(m, "ts"),
            data: hex_field(m, "data_hex"),
            keys_if_undelivered: m["keys_if_undelivered_hex"]
                .as_array()
                .expect("keys_if_undelivered_hex")
                .iter()
                .map(|k| hex::decode(k.as_str().expect("hex key")).expect("hex key"))
                .collect(),
            backoff_schedule: serde_json::from_str::<Vec<i64>>(
                m["backoff_schedule_text"]
                    .as_str()
                    .expect("backoff_schedule_text"),
            )
            .expect("backoff_schedule_text is a JSON list"),
            custom_schedule: !m["requested_backoff_schedule"].is_null(),
        })
        .collect();
    rows.sort_by_key(|r| r.ts);
    assert!(
        !rows.is_empty(),
        "special.manifest.json lists no queue rows"
    );
    assert!(
        manifest.json["queue_running"]
            .as_array()
            .is_some_and(|r| r.is_empty()),
        "queue_running is empty in the fixture"
    );
    rows
}

/// Asserts that no message is delivered at the clock's current time.
async fn assert_nothing_due(kv: &Checked<SqliteBackend>, when: &str) {
    if let Ok(result) = tokio::time::timeout(QUIET_WAIT, kv.dequeue_next_message()).await {
        match result {
            Ok(Some(message)) => {
                let payload = hex::encode(message.payload());
                message.finish(false).await.expect("finish");
                panic!("{when}: a message was delivered early: payload {payload}");
            }
            Ok(None) => panic!("{when}: dequeue_next_message returned None (handle closed?)"),
            Err(e) => panic!("{when}: dequeue_next_message failed: {e}"),
        }
    }
}

/// With the clock at `ts - 1` nothing is delivered; a consumer already waiting then receives the
/// message as soon as the clock reaches `ts`. Checks the payload and returns the message.
async fn deliver_at(
    kv: &Arc<Checked<SqliteBackend>>,
    clock: &ManualClock,
    ts: i64,
    payload: &[u8],
    what: &str,
) -> Box<dyn QueueMessageHandle> {
    clock.set(at(ts - 1));
    assert_nothing_due(kv, &format!("{what} at ts - 1 ms")).await;
    let waiting = {
        let kv = kv.clone();
        tokio::spawn(async move { kv.dequeue_next_message().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !waiting.is_finished(),
        "{what}: delivered while the clock shows ts - 1 ms"
    );
    clock.set(at(ts));
    let message = tokio::time::timeout(DUE_WAIT, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}: not delivered once the clock reached ts {ts}"))
        .expect("the consumer task")
        .unwrap_or_else(|e| panic!("{what}: dequeue failed: {e}"))
        .unwrap_or_else(|| panic!("{what}: dequeue returned None"));
    assert_eq!(
        hex::encode(message.payload()),
        hex::encode(payload),
        "{what}: payload"
    );
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_queue_messages_arrive_at_their_time_in_order() {
    let manifest = load_manifest("special.sqlite");
    let rows = queue_rows(&manifest);
    assert!(
        rows.iter().any(|r| r.custom_schedule),
        "one message has a custom backoff schedule"
    );
    let copy = copy_fixture("special.sqlite");
    let clock = ManualClock::new(at(generation_time_ms()));
    let kv = Arc::new(open(&copy.path, &clock, false));
    assert_nothing_due(&kv, "at generation time").await;

    let mut dead_letter_versionstamps = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        let what = format!("queue message {index} (ts {})", row.ts);
        let message = deliver_at(&kv, &clock, row.ts, &row.data, &what).await;
        if !row.custom_schedule {
            message.finish(true).await.expect("finish(true)");
            continue;
        }
        // Fail it through its whole schedule: each retry comes exactly one interval after the
        // failure, then the payload lands under `keys_if_undelivered`.
        let mut message = message;
        let mut now = row.ts;
        for (attempt, &interval) in row.backoff_schedule.iter().enumerate() {
            message.finish(false).await.expect("finish(false)");
            now += interval;
            if let Some(next) = rows.get(index + 1) {
                assert!(now < next.ts, "the retries fit before the next message");
            }
            message = deliver_at(
                &kv,
                &clock,
                now,
                &row.data,
                &format!("{what}, retry {} after {interval} ms", attempt + 1),
            )
            .await;
        }
        message.finish(false).await.expect("final finish(false)");
        for key in &row.keys_if_undelivered {
            let entry = get(&kv, key).await.unwrap_or_else(|| {
                panic!("{what}: dead letter not written to {}", hex::encode(key))
            });
            assert_eq!(
                entry.value,
                KvValue::V8(row.data.clone().into()),
                "{what}: dead letter value"
            );
            assert!(
                entry.versionstamp.version() > manifest.data_version as u64,
                "{what}: dead letter committed after the fixture's last commit"
            );
            dead_letter_versionstamps.push(entry.versionstamp);
        }
        assert_nothing_due(&kv, &format!("{what} after its retries ran out")).await;
    }
    // All keys of one dead letter are written by one commit.
    dead_letter_versionstamps.dedup();
    assert!(dead_letter_versionstamps.len() <= 1);

    clock.set(at(rows.last().expect("rows").ts + TEN_YEARS_MS));
    assert_nothing_due(&kv, "after every message was settled").await;
    let kv = Arc::into_inner(kv).expect("no consumer task holds the handle any more");
    kv.close().await.expect("close");
    drop(kv);

    let conn = raw_connection(&copy.path);
    let (queued, running): (i64, i64) = conn
        .query_row(
            "select (select count(*) from queue), (select count(*) from queue_running)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .expect("count queue rows");
    assert_eq!(
        (queued, running),
        (0, 0),
        "queue tables are empty at the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_queue_messages_all_due_come_in_ts_order() {
    let manifest = load_manifest("special.sqlite");
    let rows = queue_rows(&manifest);
    let copy = copy_fixture("special.sqlite");
    let clock = ManualClock::new(at(rows.last().expect("rows").ts + 1));
    let kv = open(&copy.path, &clock, false);
    for (index, row) in rows.iter().enumerate() {
        let message = tokio::time::timeout(DUE_WAIT, kv.dequeue_next_message())
            .await
            .unwrap_or_else(|_| panic!("message {index} not delivered although due"))
            .expect("dequeue")
            .expect("a message");
        assert_eq!(
            hex::encode(message.payload()),
            hex::encode(&row.data),
            "message {index} in ts order (ts {})",
            row.ts
        );
        message.finish(true).await.expect("finish(true)");
    }
    assert_nothing_due(&kv, "after all messages were taken").await;
    kv.close().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// Read-only opens and the file's bookkeeping
// ---------------------------------------------------------------------------------------------

fn test_write() -> AtomicWrite {
    AtomicWrite {
        mutations: vec![Mutation::set(
            encode_key(&key!["open-deno-kv-sqlite", "fixture-test"]).expect("key"),
            KvValue::Bytes(b"written by open-deno-kv-sqlite".to_vec().into()),
        )],
        ..Default::default()
    }
}

#[tokio::test]
async fn read_only_open_reads_every_entry_and_refuses_writes() {
    let now_ms = generation_time_ms();
    for db in manifest_databases() {
        let manifest = load_manifest(&db);
        let copy = copy_fixture(&db);
        let before = std::fs::read(&copy.path).expect("read the copy");
        let clock = ManualClock::new(at(now_ms));
        let kv = open(&copy.path, &clock, true);
        check_manifest_at(&kv, &manifest, now_ms).await;
        match kv.atomic_write(test_write()).await {
            Err(KvError::ReadOnly) => {}
            other => panic!("{db}: a write to a read-only handle gave {other:?}"),
        }
        assert_eq!(
            get(&kv, &test_write().mutations[0].key).await,
            None,
            "{db}: the refused write left nothing behind"
        );
        kv.close().await.expect("close");
        drop(kv);
        let after = std::fs::read(&copy.path).expect("read the copy");
        assert!(
            before == after,
            "{db}: a read-only session changed the database file"
        );
        assert_eq!(
            raw_state(&copy.path),
            (3, manifest.data_version),
            "{db}: state after a read-only session"
        );
    }
}

#[tokio::test]
async fn a_write_keeps_migration_state_and_advances_data_version() {
    let now_ms = generation_time_ms();
    for db in fixture_databases() {
        let copy = copy_fixture(&db);
        let (migration, version_before) = raw_state(&copy.path);
        assert_eq!(migration, 3, "{db}: Deno 2.9.6 leaves migration_state at 3");
        let manifest = manifest_databases()
            .contains(&db)
            .then(|| load_manifest(&db));
        if let Some(manifest) = &manifest {
            assert_eq!(
                version_before, manifest.data_version,
                "{db}: data_version as in the manifest"
            );
        }

        let clock = ManualClock::new(at(now_ms));
        let kv = open(&copy.path, &clock, false);
        let write = test_write();
        let committed = kv
            .atomic_write(write.clone())
            .await
            .unwrap_or_else(|e| panic!("{db}: write failed: {e}"))
            .unwrap_or_else(|| panic!("{db}: a write without checks reported a failed check"));
        assert!(
            committed.versionstamp.version() > version_before as u64,
            "{db}: the commit's versionstamp {} follows the file's data_version {version_before}",
            committed.versionstamp
        );
        let written = get(&kv, &write.mutations[0].key)
            .await
            .expect("the written key");
        assert_eq!(written.versionstamp, committed.versionstamp);
        assert_eq!(
            written.value,
            KvValue::Bytes(b"written by open-deno-kv-sqlite".to_vec().into())
        );
        if let Some(manifest) = &manifest {
            // Everything Deno wrote is still there, untouched.
            for expected in manifest.entries.iter().filter(|e| e.visible_at(now_ms)) {
                let actual = get(&kv, &expected.key)
                    .await
                    .unwrap_or_else(|| panic!("{} lost after a write", expected.label));
                assert_entry(&actual, expected);
            }
        }
        kv.close().await.expect("close");
        drop(kv);

        let (migration, version_after) = raw_state(&copy.path);
        assert_eq!(
            migration, 3,
            "{db}: migration_state after a write through open-deno-kv-sqlite"
        );
        assert!(
            version_after > version_before,
            "{db}: data_version {version_after} did not grow past {version_before}"
        );
        assert_eq!(
            version_after as u64,
            committed.versionstamp.version(),
            "{db}: data_version is the last commit's version"
        );
    }
}

/// Issue 29: a Deno-written file gets an identity on its first writable open, in a table of this
/// crate's own; Deno's tables (their schema and `migration_state`) stay exactly as Deno wrote
/// them. A read-only open before that names no database and writes nothing; the identity, once
/// made, is the one every later open, export and status names.
#[tokio::test]
async fn a_deno_file_gets_an_identity_on_its_first_writable_open_and_nothing_else() {
    let copy = copy_fixture("special.sqlite");
    let deno_schema = |path: &Path| -> Vec<(String, String)> {
        let conn = raw_connection(path);
        let mut stmt = conn
            .prepare(
                "select name, sql from sqlite_master where name not like 'odkv_%' \
                 and sql is not null order by name",
            )
            .expect("schema query");
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("schema rows")
            .collect::<Result<_, _>>()
            .expect("schema rows")
    };
    let before = deno_schema(&copy.path);
    let bytes_before = std::fs::read(&copy.path).expect("read");
    let clock = ManualClock::new(at(generation_time_ms()));

    let reader = open(&copy.path, &clock, true);
    let exported = reader.export_snapshot().await.expect("export");
    assert_eq!(
        exported.database, None,
        "a Deno file only read has no identity"
    );
    drop(exported);
    assert_eq!(
        reader.change_log_status().await.expect("status").database,
        None
    );
    reader.close().await.expect("close");
    drop(reader);
    assert_eq!(
        std::fs::read(&copy.path).expect("read"),
        bytes_before,
        "a read-only open writes nothing"
    );

    let writer = open(&copy.path, &clock, false);
    let identity = writer
        .change_log_status()
        .await
        .expect("status")
        .database
        .expect("the first writable open made an identity");
    let exported = writer.export_snapshot().await.expect("export");
    assert_eq!(exported.database, Some(identity));
    drop(exported);
    writer.close().await.expect("close");
    drop(writer);

    assert_eq!(
        deno_schema(&copy.path),
        before,
        "Deno's tables are as Deno wrote them"
    );
    assert_eq!(raw_state(&copy.path).0, 3, "migration_state stays Deno's");
    let again = open(&copy.path, &clock, true);
    assert_eq!(
        again.change_log_status().await.expect("status").database,
        Some(identity),
        "kept by the file"
    );
    again.close().await.expect("close");
}

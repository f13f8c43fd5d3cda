//! Interop with the real Deno CLI 2.9.6, both directions, on one SQLite file.
//!
//! - **A, Rust writes, Deno reads**: open-deno-kv-sqlite writes every key part type, every value encoding,
//!   a far-future and an already-expired entry, a versionstamped key and a delayed queue message;
//!   `tests/interop/read_rust_file.ts` opens the file with `Deno.openKv(path)`, lists it, receives
//!   the message with `listenQueue`, and prints tagged JSON that is checked here.
//! - **B, Deno writes, Rust reads**: `tests/interop/write_for_rust.ts` writes the same variety
//!   (plus `Deno.KvU64` sums, a check+set, `expireIn`, `kv.commitVersionstamp()` and an
//!   `enqueue`) and prints what it wrote; open-deno-kv-sqlite opens the file, checks every entry and
//!   dequeues the message.
//! - **C, a file whose change log is on**: Deno opens it, writes and lists as usual (the log's
//!   tables are not Deno's, and Deno ignores them); its commit is not logged, so a point-in-time
//!   restore across it is refused as a gap, and one up to the commit before it works
//!   (`tests/interop/write_into_logged_file.ts`).
//!
//! Deno is found through `DENO_BIN`, or installed from the npm registry by `.ci/install-deno`
//! (cached in `target/deno-2.9.6`). If neither works the tests fail: they never skip.
//!
//! Behaviour observed with Deno 2.9.6 and asserted here:
//! - Deno does not hide expired entries on read, but deletes them when it opens the file: a row
//!   open-deno-kv-sqlite wrote already expired is still in the file when Deno starts, is absent from Deno's
//!   first `list`, and is gone from the file afterwards. open-deno-kv-sqlite hides expired entries on read
//!   and also deletes them when it opens a file (a row Deno wrote with `expireIn: 1` is in the
//!   file until open-deno-kv-sqlite opens it, and never visible to it).
//! - Deno's commits carry on from open-deno-kv-sqlite's versionstamps and the other way round.
//!
//! Run: `cargo test -p open-deno-kv-sqlite --test deno_interop -- --nocapture`.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use open_deno_kv_engine_kit::num_bigint::BigInt;
use open_deno_kv_engine_kit::rules::{v8_bigint, v8_number};
use open_deno_kv_engine_kit::{
    AtomicWrite, Backend, Checked, Enqueue, Key, KeyPart, KvValue, Mutation, MutationKind,
    ReadRange, SnapshotRead, Versionstamp, decode_key, encode_key, key,
};
use open_deno_kv_sqlite::{FileEngine, SqliteBackend};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{Value as Json, json};
use v8_valueserializer::{
    ArrayBufferViewKind, Date, DenseArray, Heap, HeapValue, Object, PropertyKey, StringValue,
    TwoByteString, Value, ValueDeserializer, ValueSerializer,
};

const DENO_VERSION: &str = "2.9.6";
/// The longest a Deno script may run before it is killed and the test fails.
const DENO_TIMEOUT: Duration = Duration::from_secs(120);
/// How long Deno's `listenQueue` waits for the message in test A.
const QUEUE_WAIT_MS: u64 = 5_000;
/// The delay of test A's message.
const QUEUE_DELAY_MS: i64 = 500;

// ---- finding and running Deno ------------------------------------------------------------------

/// The Deno binary: `DENO_BIN`, else whatever `.ci/install-deno` installs. Panics (the test fails)
/// with the reason when neither gives a Deno 2.9.6.
fn deno() -> &'static Path {
    static DENO: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match DENO.get_or_init(find_deno) {
        Ok(path) => path,
        Err(message) => panic!("{message}"),
    }
}

fn find_deno() -> Result<PathBuf, String> {
    let bin = match std::env::var_os("DENO_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => install_deno()?,
    };
    let output = Command::new(&bin)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run Deno at {}: {e}", bin.display()))?;
    let version = String::from_utf8_lossy(&output.stdout);
    let first = version.lines().next().unwrap_or_default();
    if !first.starts_with(&format!("deno {DENO_VERSION} ")) {
        return Err(format!(
            "{} is not Deno {DENO_VERSION} (it says {first:?}); these tests assert the behaviour \
             of {DENO_VERSION}: unset DENO_BIN or point it at a {DENO_VERSION} binary",
            bin.display()
        ));
    }
    eprintln!("deno_interop: using {} ({first})", bin.display());
    Ok(bin)
}

fn install_deno() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/install-deno");
    let output = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} to install Deno: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let path = stdout.lines().rev().find(|l| !l.trim().is_empty());
    match path {
        Some(path) if output.status.success() => Ok(PathBuf::from(path.trim())),
        _ => Err(format!(
            "cannot obtain Deno {DENO_VERSION}: {} failed ({}). It fetches \
             @deno/linux-x64-glibc@{DENO_VERSION} from the npm registry, so it needs npm and \
             network access; alternatively set DENO_BIN to a Deno {DENO_VERSION} binary.\n\
             --- stderr ---\n{stderr}\n--- stdout ---\n{stdout}",
            script.display(),
            output.status
        )),
    }
}

/// A finished Deno run: the JSON it printed, and its stderr for failure messages.
struct DenoRun {
    json: Json,
    stderr: String,
}

/// Runs `deno run -A --unstable-kv tests/interop/<script> <args>` and parses the last line of
/// its stdout as JSON. Panics with Deno's stderr if it fails, hangs or prints no JSON.
fn run_deno(script: &str, args: &[&OsStr]) -> DenoRun {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let mut child = Command::new(deno())
        .args(["run", "-A", "--unstable-kv"])
        .arg(&script)
        .args(args)
        .env("NO_COLOR", "1")
        .env("DENO_NO_UPDATE_CHECK", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", deno().display()));
    let pipe_reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = pipe_reader(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = pipe_reader(Box::new(child.stderr.take().expect("stderr is piped")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for deno") {
            break Some(status);
        }
        if started.elapsed() > DENO_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let fail = |why: String| -> ! {
        panic!(
            "deno {} {why}\n--- deno stderr ---\n{stderr}\n--- deno stdout ---\n{stdout}",
            script.display()
        )
    };
    match status {
        None => fail(format!(
            "did not finish within {DENO_TIMEOUT:?} and was killed"
        )),
        Some(status) if !status.success() => fail(format!("failed: {status}")),
        Some(_) => {}
    }
    let Some(line) = stdout.lines().rev().find(|l| l.starts_with('{')) else {
        fail("printed no JSON line".into())
    };
    match serde_json::from_str(line) {
        Ok(json) => {
            if !stderr.trim().is_empty() {
                eprintln!("deno stderr ({}):\n{stderr}", script.display());
            }
            if std::env::var_os("DENO_INTEROP_VERBOSE").is_some() {
                eprintln!("deno printed ({}):\n{json:#}", script.display());
            }
            DenoRun { json, stderr }
        }
        Err(e) => fail(format!("printed invalid JSON ({e})")),
    }
}

// ---- collecting mismatches ----------------------------------------------------------------------

/// Collects every mismatch, then fails once with all of them and Deno's stderr.
#[derive(Default)]
struct Checks {
    failures: Vec<String>,
}

impl Checks {
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, what: impl AsRef<str>, expected: T, got: T) {
        if expected != got {
            self.failures.push(format!(
                "{}:\n    expected {expected:?}\n    got      {got:?}",
                what.as_ref()
            ));
        }
    }

    fn ok(&mut self, what: impl AsRef<str>, condition: bool) {
        if !condition {
            self.failures.push(what.as_ref().to_owned());
        }
    }

    fn finish(self, test: &str, deno_stderr: &str) {
        if !self.failures.is_empty() {
            panic!(
                "{test}: {} mismatch(es):\n- {}\n--- deno stderr ---\n{deno_stderr}",
                self.failures.len(),
                self.failures.join("\n- ")
            );
        }
    }
}

// ---- tagged JSON, as tests/interop/typed.ts prints it -------------------------------------------

/// JavaScript's `String(x)` for a number (shortest round-trip digits, as both languages use).
fn js_number(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else if x == 0.0 {
        if x.is_sign_negative() { "-0" } else { "0" }.into()
    } else if (1e-6..1e21).contains(&x.abs()) {
        format!("{x}")
    } else {
        let text = format!("{x:e}");
        match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => text,
        }
    }
}

fn typed_number(x: f64) -> Json {
    json!({ "number": js_number(x), "bits": format!("{:016x}", x.to_bits()) })
}

fn typed_part(part: &KeyPart) -> Json {
    match part {
        KeyPart::Bytes(b) => json!({ "bytes": hex::encode(b) }),
        KeyPart::String(s) => json!({ "string": s }),
        KeyPart::Int(i) => json!({ "int": i.to_string() }),
        KeyPart::Float(x) => {
            json!({ "float": js_number(*x), "bits": format!("{:016x}", x.to_bits()) })
        }
        KeyPart::Bool(b) => json!({ "bool": b }),
    }
}

fn typed_key(key: &Key) -> Json {
    Json::Array(key.parts().iter().map(typed_part).collect())
}

fn typed_value(value: &KvValue) -> Json {
    match value {
        KvValue::U64(n) => json!({ "u64": n.to_string() }),
        KvValue::Bytes(b) => json!({ "bytes": hex::encode(b) }),
        KvValue::V8(bytes) => match ValueDeserializer::default().read(bytes) {
            Ok((value, heap)) => typed_v8(&value, &heap),
            Err(e) => json!({ "invalid_v8": format!("{e:?}"), "hex": hex::encode(bytes) }),
        },
    }
}

fn typed_v8(value: &Value, heap: &Heap) -> Json {
    match value {
        Value::Undefined => json!({ "undefined": null }),
        Value::Null => json!({ "null": null }),
        Value::Bool(b) => json!({ "bool": b }),
        Value::I32(x) => typed_number(f64::from(*x)),
        Value::U32(x) => typed_number(f64::from(*x)),
        Value::Double(x) => typed_number(*x),
        Value::BigInt(x) => json!({ "bigint": x.to_string() }),
        Value::String(s) => json!({ "string": s.to_string() }),
        Value::HeapReference(r) => match r.open(heap) {
            HeapValue::Date(d) => json!({
                "date": d.ms_since_epoch().map_or_else(|| "NaN".to_owned(), |ms| ms.to_string())
            }),
            HeapValue::DenseArray(a) => json!({
                "array": a.elements.iter().map(|e| match e {
                    Some(v) => typed_v8(v, heap),
                    None => json!({ "hole": null }),
                }).collect::<Vec<_>>()
            }),
            HeapValue::Object(o) => json!({
                "object": o.properties.iter()
                    .map(|(k, v)| json!([property_name(k), typed_v8(v, heap)]))
                    .collect::<Vec<_>>()
            }),
            HeapValue::Map(m) => json!({
                "map": m.entries.iter()
                    .map(|(k, v)| json!([typed_v8(k, heap), typed_v8(v, heap)]))
                    .collect::<Vec<_>>()
            }),
            HeapValue::Set(s) => json!({
                "set": s.values.iter().map(|v| typed_v8(v, heap)).collect::<Vec<_>>()
            }),
            HeapValue::ArrayBufferView(view) if view.kind == ArrayBufferViewKind::Uint8Array => {
                let buffer = match view.buffer.open(heap) {
                    HeapValue::ArrayBuffer(b) => b.as_u8_slice(),
                    _ => &[],
                };
                let start = view.byte_offset as usize;
                let end = start + view.length as usize;
                json!({ "bytes": hex::encode(buffer.get(start..end).unwrap_or_default()) })
            }
            other => json!({ "unsupported": format!("{other:?}") }),
        },
    }
}

fn property_name(key: &PropertyKey) -> String {
    match key {
        PropertyKey::I32(i) => i.to_string(),
        PropertyKey::U32(u) => u.to_string(),
        PropertyKey::Double(d) => js_number(*d),
        PropertyKey::String(s) => s.to_string().into_owned(),
    }
}

/// Turns Deno's typed key back into a [`Key`] (so it can be encoded and ordered).
fn key_from_typed(typed: &Json) -> Key {
    let parts = typed.as_array().expect("a typed key is an array");
    parts
        .iter()
        .map(|part| {
            let obj = part.as_object().expect("a typed key part is an object");
            if let Some(s) = obj.get("string") {
                KeyPart::String(s.as_str().expect("string part").to_owned())
            } else if let Some(i) = obj.get("int") {
                KeyPart::Int(i.as_str().expect("int part").parse().expect("decimal"))
            } else if let Some(bits) = obj.get("bits") {
                let bits = u64::from_str_radix(bits.as_str().expect("bits"), 16).expect("hex");
                KeyPart::Float(f64::from_bits(bits))
            } else if let Some(b) = obj.get("bool") {
                KeyPart::Bool(b.as_bool().expect("bool part"))
            } else if let Some(b) = obj.get("bytes") {
                KeyPart::Bytes(hex::decode(b.as_str().expect("bytes part")).expect("hex"))
            } else {
                panic!("unknown typed key part {part}")
            }
        })
        .collect()
}

// ---- V8 values built on the Rust side ------------------------------------------------------------

/// A one-byte (ASCII) string as V8 serializes it: `FF 0F 22 <len> <bytes>`.
fn v8_ascii(s: &str) -> Vec<u8> {
    assert!(s.is_ascii() && s.len() < 128);
    let mut out = vec![0xff, 0x0f, 0x22, s.len() as u8];
    out.extend_from_slice(s.as_bytes());
    out
}

fn v8_serialize(heap: &Heap, value: &Value) -> Vec<u8> {
    ValueSerializer::default()
        .finish(heap, value)
        .expect("serializable")
}

fn v8_two_byte(s: &str) -> Vec<u8> {
    let value = Value::String(StringValue::TwoByte(TwoByteString::new(
        s.encode_utf16().collect(),
    )));
    v8_serialize(&Heap::default(), &value)
}

fn v8_utf8(s: &str) -> Vec<u8> {
    v8_serialize(
        &Heap::default(),
        &Value::String(StringValue::new(s.to_owned())),
    )
}

fn js_string(s: &str) -> Value {
    Value::String(StringValue::new(s.to_owned()))
}

/// `{ a: 1, b: [true, "x"], when: new Date(1700000000123) }`
fn v8_object() -> Vec<u8> {
    let mut heap = Heap::default();
    let array = heap.insert(HeapValue::DenseArray(DenseArray {
        elements: vec![Some(Value::Bool(true)), Some(js_string("x"))],
        properties: vec![],
    }));
    let date = heap.insert(HeapValue::Date(Date::new(1_700_000_000_123.0)));
    let object = heap.insert(HeapValue::Object(Object {
        properties: vec![
            (
                PropertyKey::String(StringValue::new("a".into())),
                Value::I32(1),
            ),
            (
                PropertyKey::String(StringValue::new("b".into())),
                Value::HeapReference(array),
            ),
            (
                PropertyKey::String(StringValue::new("when".into())),
                Value::HeapReference(date),
            ),
        ],
    }));
    v8_serialize(&heap, &Value::HeapReference(object))
}

// ---- helpers on the Rust side --------------------------------------------------------------------

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn set(key: &Key, value: KvValue) -> Mutation {
    Mutation::set(encode_key(key).expect("encodable key"), value)
}

async fn commit(kv: &Checked<SqliteBackend>, write: AtomicWrite) -> Versionstamp {
    kv.atomic_write(write)
        .await
        .expect("write succeeds")
        .expect("write commits")
        .versionstamp
}

async fn commit_mutations(kv: &Checked<SqliteBackend>, mutations: Vec<Mutation>) -> Versionstamp {
    commit(
        kv,
        AtomicWrite {
            mutations,
            ..Default::default()
        },
    )
    .await
}

/// Every entry, in key order.
async fn list_all(kv: &Checked<SqliteBackend>) -> Vec<open_deno_kv_engine_kit::KvEntry> {
    let range = ReadRange::prefix(&key![], 1000).expect("empty prefix");
    let mut out = kv
        .snapshot_read(SnapshotRead {
            ranges: vec![range],
            ..Default::default()
        })
        .await
        .expect("list");
    out.pop().expect("one range").entries
}

/// Raw rows, read without going through open-deno-kv-sqlite: `(expiration_ms)` of a key, and the queues.
struct Raw {
    conn: Connection,
}

impl Raw {
    fn open(path: &Path) -> Raw {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("raw read-only open");
        Raw { conn }
    }

    fn expiration_ms(&self, key: &Key) -> Option<i64> {
        self.conn
            .query_row(
                "select expiration_ms from kv where k = ?1",
                [encode_key(key).expect("key")],
                |row| row.get(0),
            )
            .optional()
            .expect("raw kv query")
    }

    fn count(&self, table: &str) -> i64 {
        self.conn
            .query_row(&format!("select count(*) from {table}"), [], |row| {
                row.get(0)
            })
            .expect("raw count")
    }

    fn queue_ts(&self) -> Vec<i64> {
        let mut stmt = self.conn.prepare("select ts from queue").expect("prepare");
        stmt.query_map([], |row| row.get(0))
            .expect("raw queue")
            .collect::<Result<_, _>>()
            .expect("raw queue rows")
    }

    fn data_version(&self) -> i64 {
        self.conn
            .query_row("select version from data_version where k = 0", [], |row| {
                row.get(0)
            })
            .expect("data_version")
    }
}

/// The entries Deno printed, by position: (typed key, typed value, versionstamp).
fn deno_entries(json: &Json) -> Vec<(Json, Json, String)> {
    json["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["key"].clone(),
                e["value"].clone(),
                e["versionstamp"].as_str().expect("versionstamp").to_owned(),
            )
        })
        .collect()
}

// ---- A: Rust writes, Deno reads -----------------------------------------------------------------

/// One entry test A writes and expects Deno to read back.
struct Expected {
    key: Key,
    value: Json,
    versionstamp: Versionstamp,
}

#[test]
fn rust_writes_deno_reads() {
    deno();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rust-written.sqlite3");
    let rt = runtime();

    let two_64: BigInt = BigInt::from(1u8) << 64_u32;
    let key_cases: Vec<Key> = vec![
        key![b""],
        key![vec![0u8, 0xff, 1]],
        Key::new(vec![KeyPart::Bytes((0..=255u8).collect())]),
        key!["s", ""],
        key!["s", "\0"],
        key!["s", "a\0b"],
        key!["s", "héllo wörld ✓ 🦕"],
        key!["s", "\u{10ffff}"],
        key!["i", 0],
        key!["i", -1],
        key!["i", 255],
        key!["i", u64::MAX],
        key!["i", two_64.clone()],
        key!["i", BigInt::from(1u8) << 100_u32],
        key!["i", -two_64.clone() - 1],
        key!["i", -(BigInt::from(1u8) << 80_u32)],
        key!["i", i64::MIN],
        key!["f", 0.0],
        key!["f", -0.0],
        key!["f", 1.5],
        key!["f", -2.25],
        key!["f", f64::NAN],
        key!["f", f64::INFINITY],
        key!["f", f64::NEG_INFINITY],
        key!["f", f64::from_bits(1)],
        key!["f", f64::MAX],
        key!["bool", false],
        key!["bool", true],
        key![false],
        key![true],
        key!["multi", "users", 42, 42.0, true, b"\x01\x02"],
        key!["multi", "users", 42],
    ];

    let two_byte = "héllo wörld ✓ 🦕";
    let value_cases: Vec<(&str, KvValue, Json)> = vec![
        (
            "one-byte string (hand-built)",
            KvValue::V8(v8_ascii("hello").into()),
            json!({ "string": "hello" }),
        ),
        (
            "empty string",
            KvValue::V8(v8_ascii("").into()),
            json!({ "string": "" }),
        ),
        (
            "two-byte string",
            KvValue::V8(v8_two_byte(two_byte).into()),
            json!({ "string": two_byte }),
        ),
        (
            "utf-8 string",
            KvValue::V8(v8_utf8("ünïcødé 🦀").into()),
            json!({ "string": "ünïcødé 🦀" }),
        ),
        (
            "number",
            KvValue::V8(v8_number(3.25).into()),
            typed_number(3.25),
        ),
        (
            "number -0",
            KvValue::V8(v8_number(-0.0).into()),
            typed_number(-0.0),
        ),
        (
            "number NaN",
            KvValue::V8(v8_number(f64::NAN).into()),
            typed_number(f64::NAN),
        ),
        (
            "number Infinity",
            KvValue::V8(v8_number(f64::INFINITY).into()),
            typed_number(f64::INFINITY),
        ),
        (
            "int32 (hand-built)",
            KvValue::V8(vec![0xff, 0x0f, b'I', 0x0e].into()),
            typed_number(7.0),
        ),
        (
            "bigint 2^100",
            KvValue::V8(
                v8_bigint(&(BigInt::from(1u8) << 100_u32))
                    .expect("bigint")
                    .into(),
            ),
            json!({ "bigint": (BigInt::from(1u8) << 100_u32).to_string() }),
        ),
        (
            "bigint -5",
            KvValue::V8(v8_bigint(&BigInt::from(-5)).expect("bigint").into()),
            json!({ "bigint": "-5" }),
        ),
        (
            "true",
            KvValue::V8(vec![0xff, 0x0f, b'T'].into()),
            json!({ "bool": true }),
        ),
        (
            "false",
            KvValue::V8(vec![0xff, 0x0f, b'F'].into()),
            json!({ "bool": false }),
        ),
        (
            "null",
            KvValue::V8(vec![0xff, 0x0f, b'0'].into()),
            json!({ "null": null }),
        ),
        (
            "undefined",
            KvValue::V8(vec![0xff, 0x0f, b'_'].into()),
            json!({ "undefined": null }),
        ),
        (
            "object",
            KvValue::V8(v8_object().into()),
            json!({ "object": [
                ["a", typed_number(1.0)],
                ["b", { "array": [{ "bool": true }, { "string": "x" }] }],
                ["when", { "date": "1700000000123" }],
            ] }),
        ),
        (
            "bytes",
            KvValue::Bytes(vec![0, 1, 2, 0xff].into()),
            json!({ "bytes": "000102ff" }),
        ),
        (
            "empty bytes",
            KvValue::Bytes(vec![].into()),
            json!({ "bytes": "" }),
        ),
        ("u64 0", KvValue::U64(0), json!({ "u64": "0" })),
        ("u64 42", KvValue::U64(42), json!({ "u64": "42" })),
        (
            "u64 max",
            KvValue::U64(u64::MAX),
            json!({ "u64": u64::MAX.to_string() }),
        ),
    ];

    let exp_future = key!["exp", "future"];
    let exp_past = key!["exp", "past"];
    let queue_payload = v8_ascii("hello from rust");

    let (expected, ready_at_ms, future_expiry_ms) = rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("open");
        let mut expected = Vec::new();

        // Every key part type, in one commit; the value is the case's index as a JS number.
        let mutations = key_cases
            .iter()
            .enumerate()
            .map(|(i, k)| set(k, KvValue::V8(v8_number(i as f64).into())))
            .collect();
        let vs = commit_mutations(&kv, mutations).await;
        for (i, k) in key_cases.iter().enumerate() {
            expected.push(Expected {
                key: k.clone(),
                value: typed_number(i as f64),
                versionstamp: vs,
            });
        }

        // Every value encoding, one commit per value so each has its own versionstamp.
        for (name, value, json) in &value_cases {
            let k = key!["v", *name];
            let vs = commit_mutations(&kv, vec![set(&k, value.clone())]).await;
            expected.push(Expected {
                key: k,
                value: json.clone(),
                versionstamp: vs,
            });
        }

        // Expiry: a day from now (visible), and an hour ago (already expired when written).
        let now = Utc::now();
        let future_at = now + TimeDelta::days(1);
        let mut future = set(&exp_future, KvValue::V8(v8_ascii("stays").into()));
        future.expire_at = Some(future_at);
        let mut past = set(&exp_past, KvValue::V8(v8_ascii("gone").into()));
        past.expire_at = Some(now - TimeDelta::hours(1));
        let vs = commit_mutations(&kv, vec![future, past]).await;
        expected.push(Expected {
            key: exp_future.clone(),
            value: json!({ "string": "stays" }),
            versionstamp: vs,
        });

        // A versionstamped key: ["vs", <the commit's versionstamp>].
        let stamped = Mutation {
            key: encode_key(&key!["vs"]).expect("key"),
            kind: MutationKind::SetSuffixVersionstampedKey(KvValue::V8(v8_ascii("stamped").into())),
            expire_at: None,
        };
        let vs = commit_mutations(&kv, vec![stamped]).await;
        expected.push(Expected {
            key: key!["vs", vs.to_string()],
            value: json!({ "string": "stamped" }),
            versionstamp: vs,
        });

        // A message due in 500 ms, no retries, dead-lettered to ["dlq"] if undelivered.
        let ready_at = Utc::now() + TimeDelta::milliseconds(QUEUE_DELAY_MS);
        commit(
            &kv,
            AtomicWrite {
                enqueues: vec![Enqueue {
                    payload: queue_payload.clone(),
                    ready_at,
                    keys_if_undelivered: vec![encode_key(&key!["dlq"]).expect("key")],
                    backoff_schedule: Some(vec![]),
                }],
                ..Default::default()
            },
        )
        .await;

        // open-deno-kv-sqlite itself never shows the expired entry.
        let visible: Vec<Key> = list_all(&kv)
            .await
            .iter()
            .map(|e| decode_key(&e.key).expect("decodable"))
            .collect();
        assert!(
            visible.contains(&exp_future),
            "open-deno-kv-sqlite hides a live entry"
        );
        assert!(
            !visible.contains(&exp_past),
            "open-deno-kv-sqlite shows an expired entry"
        );
        assert_eq!(
            visible.len(),
            expected.len(),
            "open-deno-kv-sqlite's own view"
        );
        kv.close().await.expect("close");
        (
            expected,
            ready_at.timestamp_millis(),
            future_at.timestamp_millis(),
        )
    });

    // The file as Deno will find it: the expired row is still there, the message queued.
    let raw = Raw::open(&path);
    assert!(
        raw.expiration_ms(&exp_past).is_some(),
        "the expired row should still be in the file before Deno opens it"
    );
    assert_eq!(raw.expiration_ms(&exp_future), Some(future_expiry_ms));
    assert_eq!(raw.queue_ts(), vec![ready_at_ms]);
    drop(raw);

    let run = run_deno(
        "read_rust_file.ts",
        &[path.as_os_str(), OsStr::new(&QUEUE_WAIT_MS.to_string())],
    );
    eprintln!(
        "deno read {} entries",
        run.json["entries"].as_array().map_or(0, Vec::len)
    );
    let mut checks = Checks::default();

    // Every entry, in open-deno-kv-sqlite's key order, with its value and its commit's versionstamp.
    let mut sorted: Vec<&Expected> = expected.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let got = deno_entries(&run.json);
    checks.eq(
        "Deno's keys, in order",
        sorted.iter().map(|e| typed_key(&e.key)).collect::<Vec<_>>(),
        got.iter().map(|(k, _, _)| k.clone()).collect::<Vec<_>>(),
    );
    for e in &sorted {
        let want_key = typed_key(&e.key);
        match got.iter().find(|(k, _, _)| *k == want_key) {
            None => checks.ok(format!("Deno does not list {}", e.key), false),
            Some((_, value, versionstamp)) => {
                checks.eq(format!("value of {}", e.key), &e.value, value);
                checks.eq(
                    format!("versionstamp of {}", e.key),
                    e.versionstamp.to_string(),
                    versionstamp.clone(),
                );
            }
        }
    }

    // Expiry: Deno deleted the expired row when it opened the file, before its first list.
    checks.ok(
        "Deno lists the already-expired entry",
        !got.iter().any(|(k, _, _)| *k == typed_key(&exp_past)),
    );
    let raw = Raw::open(&path);
    checks.eq(
        "the expired row after Deno opened the file (Deno deletes expired rows at open)",
        None,
        raw.expiration_ms(&exp_past),
    );
    checks.eq(
        "the live row's expiry after Deno",
        Some(future_expiry_ms),
        raw.expiration_ms(&exp_future),
    );

    // The queue message: delivered once it was due, with its payload; Deno then removed it.
    let queue = &run.json["queue"];
    if queue.is_null() {
        checks.ok(
            format!("Deno's listenQueue received nothing within {QUEUE_WAIT_MS} ms"),
            false,
        );
    } else {
        checks.eq(
            "queue payload",
            &json!({ "string": "hello from rust" }),
            &queue["payload"],
        );
        let received_at = queue["received_at_ms"].as_i64().expect("received_at_ms");
        let opened_at = run.json["opened_at_ms"].as_i64().unwrap_or_default();
        eprintln!(
            "queue: due at {ready_at_ms}, Deno opened the file {:+} ms from then, received the \
             message {:+} ms from then",
            opened_at - ready_at_ms,
            received_at - ready_at_ms
        );
        checks.ok(
            format!("message delivered at {received_at}, before it was due at {ready_at_ms}"),
            received_at >= ready_at_ms,
        );
        checks.eq("queue rows after delivery", 0, raw.count("queue"));
        checks.eq(
            "queue_running rows after delivery",
            0,
            raw.count("queue_running"),
        );
        checks.eq("dead-letter key", None, raw.expiration_ms(&key!["dlq"]));
    }
    drop(raw);

    // open-deno-kv-sqlite still reads the file Deno has opened, and continues its versionstamps.
    rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("reopen");
        let entries = list_all(&kv).await;
        checks.eq(
            "open-deno-kv-sqlite's keys after Deno",
            sorted.iter().map(|e| e.key.clone()).collect::<Vec<_>>(),
            entries
                .iter()
                .map(|e| decode_key(&e.key).expect("decodable"))
                .collect(),
        );
        let last = expected
            .iter()
            .map(|e| e.versionstamp)
            .max()
            .expect("entries");
        let vs = commit_mutations(&kv, vec![set(&key!["after"], KvValue::U64(1))]).await;
        checks.ok(format!("new commit {vs} after {last}"), vs > last);
        kv.close().await.expect("close");
    });

    checks.finish("rust_writes_deno_reads", &run.stderr);
}

// ---- B: Deno writes, Rust reads -----------------------------------------------------------------

#[test]
fn deno_writes_rust_reads() {
    deno();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("deno-written.sqlite3");
    let rt = runtime();

    let run = run_deno("write_for_rust.ts", &[path.as_os_str()]);
    let out = &run.json;
    let commits = &out["commits"];
    let commit_vs = |name: &str| -> String {
        commits[name]
            .as_str()
            .unwrap_or_else(|| panic!("commit {name} has no versionstamp: {out}"))
            .to_owned()
    };
    let mut checks = Checks::default();

    let exp_long = key!["exp", "long"];
    let exp_short = key!["exp", "short"];
    let deno_list = deno_entries(out);
    eprintln!("deno wrote {} entries", deno_list.len());

    // Deno itself still lists the entry whose expiry has passed (it does not hide them on read).
    checks.ok(
        "Deno's own list after the short expiry passed has [\"exp\", \"short\"]",
        deno_list
            .iter()
            .any(|(k, _, _)| *k == typed_key(&exp_short)),
    );

    // The raw file before open-deno-kv-sqlite opens it.
    let raw = Raw::open(&path);
    let before = out["expiry"]["before_ms"].as_i64().expect("before_ms");
    let after = out["expiry"]["after_ms"].as_i64().expect("after_ms");
    let long_at = raw.expiration_ms(&exp_long);
    checks.ok(
        format!("expiration_ms of [\"exp\", \"long\"] = {long_at:?}, not within [{before}, {after}] + 1 h"),
        long_at.is_some_and(|at| (before + 3_600_000..=after + 3_600_000).contains(&at)),
    );
    let short_at = raw.expiration_ms(&exp_short);
    checks.ok(
        format!("expiration_ms of [\"exp\", \"short\"] = {short_at:?}, not within [{before}, {after}] + 1 ms"),
        short_at.is_some_and(|at| (before + 1..=after + 1).contains(&at)),
    );
    let enqueue_vs: Versionstamp = commit_vs("enqueue").parse().expect("versionstamp");
    checks.eq(
        "data_version after Deno's last commit (the enqueue)",
        enqueue_vs.version() as i64,
        raw.data_version(),
    );
    let queue_ts = raw.queue_ts();
    let enqueued_after = out["queue"]["enqueued_after_ms"]
        .as_i64()
        .expect("enqueued_after_ms");
    checks.ok(
        format!("one queued message due about when Deno enqueued it (at {enqueued_after}), got ts {queue_ts:?}"),
        queue_ts.len() == 1 && queue_ts[0] >= enqueued_after && queue_ts[0] <= enqueued_after + 5_000,
    );
    drop(raw);

    let (entries, message) = rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("open Deno's file");
        let entries = list_all(&kv).await;
        let message = tokio::time::timeout(Duration::from_secs(5), kv.dequeue_next_message()).await;
        let message = match message {
            Ok(Ok(Some(handle))) => {
                let payload = handle.payload().to_vec();
                handle.finish(true).await.expect("finish");
                Some(payload)
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => panic!("dequeue failed: {e}"),
            Err(_) => None,
        };
        kv.close().await.expect("close");
        (entries, message)
    });

    // Every entry Deno listed, except the expired one, in the same order, same versionstamps and
    // same values.
    let want: Vec<&(Json, Json, String)> = deno_list
        .iter()
        .filter(|(k, _, _)| *k != typed_key(&exp_short))
        .collect();
    let got: Vec<(Json, Json, String)> = entries
        .iter()
        .map(|e| {
            (
                typed_key(&decode_key(&e.key).expect("decodable key")),
                typed_value(&e.value),
                e.versionstamp.to_string(),
            )
        })
        .collect();
    checks.eq(
        "open-deno-kv-sqlite's keys, in order",
        want.iter().map(|(k, _, _)| k.clone()).collect::<Vec<_>>(),
        got.iter().map(|(k, _, _)| k.clone()).collect::<Vec<_>>(),
    );
    for (key, value, versionstamp) in &want {
        match got.iter().find(|(k, _, _)| k == key) {
            None => checks.ok(format!("open-deno-kv-sqlite does not see {key}"), false),
            Some((_, v, vs)) => {
                checks.eq(format!("value of {key}"), value, v);
                checks.eq(format!("versionstamp of {key}"), versionstamp, vs);
            }
        }
    }

    // The typed keys Deno wrote come back as the same Key values (encode/decode agree).
    for typed in out["keys"].as_array().expect("keys") {
        let k = key_from_typed(typed);
        let stored = entries
            .iter()
            .find(|e| decode_key(&e.key).expect("decodable") == k);
        match stored {
            None => checks.ok(format!("key {k} Deno wrote is missing"), false),
            Some(e) => checks.eq(
                format!("versionstamp of {k}"),
                commit_vs("keys"),
                e.versionstamp.to_string(),
            ),
        }
    }

    // Specific entries, by their stored encoding.
    let get = |k: &Key| {
        let enc = encode_key(k).expect("key");
        entries.iter().find(|e| e.key == enc)
    };
    let expect_value = |checks: &mut Checks, k: Key, value: KvValue, vs: &str| match get(&k) {
        None => checks.ok(format!("{k} is missing"), false),
        Some(e) => {
            checks.eq(format!("stored value of {k}"), &value, &e.value);
            checks.eq(
                format!("versionstamp of {k}"),
                vs.to_owned(),
                e.versionstamp.to_string(),
            );
        }
    };
    let values_vs = commit_vs("values");
    let sum_vs = commit_vs("sum");
    expect_value(
        &mut checks,
        key!["v", "bytes"],
        KvValue::Bytes(vec![0, 1, 2, 0xff].into()),
        &values_vs,
    );
    expect_value(
        &mut checks,
        key!["v", "empty bytes"],
        KvValue::Bytes(vec![].into()),
        &values_vs,
    );
    expect_value(
        &mut checks,
        key!["v", "u64 zero"],
        KvValue::U64(0),
        &values_vs,
    );
    expect_value(
        &mut checks,
        key!["v", "u64 max"],
        KvValue::U64(u64::MAX),
        &values_vs,
    );
    expect_value(
        &mut checks,
        key!["u64", "counter"],
        KvValue::U64(15),
        &sum_vs,
    );
    expect_value(&mut checks, key!["u64", "fresh"], KvValue::U64(7), &sum_vs);
    expect_value(&mut checks, key!["u64", "wrap"], KvValue::U64(1), &sum_vs);
    for name in [
        "ascii string",
        "unicode string",
        "bigint",
        "object",
        "date",
        "map",
    ] {
        match get(&key!["v", name]) {
            Some(e) => checks.ok(
                format!(
                    "[\"v\", {name:?}] is stored as V8: {:?}",
                    e.value.encoding()
                ),
                matches!(e.value, KvValue::V8(_)),
            ),
            None => checks.ok(format!("[\"v\", {name:?}] is missing"), false),
        }
    }

    // Check + set: the stale check failed, so "second" (from the current check) is stored.
    checks.eq(
        "the stale check+set committed",
        Some(false),
        commits["cas_stale_ok"].as_bool(),
    );
    checks.ok(
        "the first check+set committed",
        commits["cas_first"].is_string(),
    );
    match get(&key!["cas"]) {
        Some(e) => {
            checks.eq(
                "value of [\"cas\"]",
                json!({ "string": "second" }),
                typed_value(&e.value),
            );
            checks.eq(
                "versionstamp of [\"cas\"]",
                commit_vs("cas_second"),
                e.versionstamp.to_string(),
            );
        }
        None => checks.ok("[\"cas\"] is missing", false),
    }

    // expireIn: the live one is seen, the expired one is not (and open-deno-kv-sqlite deleted it at open).
    match get(&exp_long) {
        Some(e) => {
            checks.eq(
                "value of [\"exp\", \"long\"]",
                json!({ "string": "stays" }),
                typed_value(&e.value),
            );
            checks.eq(
                "versionstamp of [\"exp\", \"long\"]",
                commit_vs("exp_long"),
                e.versionstamp.to_string(),
            );
        }
        None => checks.ok(
            "open-deno-kv-sqlite does not show [\"exp\", \"long\"]",
            false,
        ),
    }
    checks.ok(
        "open-deno-kv-sqlite shows [\"exp\", \"short\"] after it expired",
        get(&exp_short).is_none(),
    );

    // The versionstamped key carries its commit's versionstamp as its last part.
    let stamped = commit_vs("stamped");
    match get(&key!["vs", stamped.clone()]) {
        Some(e) => {
            checks.eq(
                "versionstamp of the stamped key",
                stamped.clone(),
                e.versionstamp.to_string(),
            );
            checks.eq(
                "value of the stamped key",
                json!({ "string": "stamped" }),
                typed_value(&e.value),
            );
        }
        None => checks.ok(format!("[\"vs\", {stamped:?}] is missing"), false),
    }

    // The message Deno enqueued (delay 0), dequeued by open-deno-kv-sqlite.
    match &message {
        None => checks.ok("open-deno-kv-sqlite dequeued no message within 5 s", false),
        Some(payload) => checks.eq(
            "queue payload",
            &out["queue"]["payload"],
            &typed_value(&KvValue::V8(payload.clone().into())),
        ),
    }

    let raw = Raw::open(&path);
    checks.eq(
        "[\"exp\", \"short\"] row after open-deno-kv-sqlite opened the file (open-deno-kv-sqlite sweeps at open)",
        None,
        raw.expiration_ms(&exp_short),
    );
    checks.eq(
        "queue rows after open-deno-kv-sqlite finished the message",
        0,
        raw.count("queue"),
    );
    checks.eq(
        "queue_running rows after open-deno-kv-sqlite finished the message",
        0,
        raw.count("queue_running"),
    );
    checks.eq(
        "dead-letter key",
        None,
        raw.expiration_ms(&key!["dlq", "m1"]),
    );
    drop(raw);

    // open-deno-kv-sqlite continues Deno's versionstamps.
    rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("reopen");
        let vs = commit_mutations(&kv, vec![set(&key!["after"], KvValue::U64(1))]).await;
        checks.ok(
            format!("new commit {vs} after Deno's last {enqueue_vs}"),
            vs > enqueue_vs,
        );
        kv.close().await.expect("close");
    });

    checks.finish("deno_writes_rust_reads", &run.stderr);
}

/// The change log's tables do not disturb Deno, and Deno's own commits, which it does not log,
/// make a gap that a point-in-time restore refuses to cross (while a restore up to the last
/// logged commit before it still works).
#[test]
fn deno_writes_into_a_file_whose_change_log_is_on() {
    use futures::TryStreamExt;
    use open_deno_kv_engine_kit::change_log::{RestorePoint, restore};
    use open_deno_kv_engine_kit::{Snapshot, SnapshotItem};

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("logged.sqlite3");
    let rt = runtime();
    let (backup, items, before_deno) = rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("open");
        kv.configure_change_log(Some(Duration::from_secs(3600)))
            .await
            .expect("log on");
        commit_mutations(&kv, vec![set(&key!["a"], KvValue::U64(1))]).await;
        let snapshot = kv.export_snapshot().await.expect("export");
        let backup = snapshot.origin();
        let items: Vec<SnapshotItem> = snapshot.items.try_collect().await.expect("items");
        let before_deno = commit_mutations(&kv, vec![set(&key!["a"], KvValue::U64(2))]).await;
        kv.close().await.expect("close");
        (backup, items, before_deno)
    });
    let run = run_deno("write_into_logged_file.ts", &[path.as_os_str()]);
    let deno_stamp = run.json["versionstamp"]
        .as_str()
        .expect("versionstamp")
        .to_owned();
    assert_eq!(
        run.json["keys"],
        json!([["a"], ["from_deno"]]),
        "Deno reads the file as its own"
    );
    rt.block_on(async {
        let kv = SqliteBackend::open(&path).expect("reopen");
        let after_deno = commit_mutations(&kv, vec![set(&key!["a"], KvValue::U64(3))]).await;
        let log = kv
            .read_change_log(Versionstamp::ZERO, 100)
            .await
            .expect("log");
        let stamps: Vec<String> = log.iter().map(|r| r.versionstamp.to_string()).collect();
        assert!(!stamps.contains(&deno_stamp), "Deno's commit is not logged");
        assert_eq!(log.last().map(|r| r.previous.to_string()), Some(deno_stamp));

        let target = SqliteBackend::open(dir.path().join("ok.sqlite3")).expect("target");
        let restored = restore(
            Snapshot::from_items(backup.versionstamp, items.clone()).of_database(backup.database),
            &kv,
            RestorePoint::Commit(before_deno),
            &target,
        )
        .await
        .expect("up to the last commit before Deno's");
        assert_eq!(restored.versionstamp, before_deno);
        target.close().await.expect("close");

        let target = SqliteBackend::open(dir.path().join("refused.sqlite3")).expect("target");
        let err = restore(
            Snapshot::from_items(backup.versionstamp, items).of_database(backup.database),
            &kv,
            RestorePoint::Commit(after_deno),
            &target,
        )
        .await
        .expect_err("across Deno's commit");
        assert!(err.to_string().contains("gap"), "{err}");
        target.close().await.expect("close");
        kv.close().await.expect("close");
    });
}

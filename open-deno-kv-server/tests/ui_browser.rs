//! The explorer in a real browser (issue 19): Debian's headless Chromium, driven by
//! chromedriver through the WebDriver protocol (plain HTTP with the hyper client the tests
//! already use: a handful of commands do not justify a WebDriver crate). It enters the token,
//! lists a prefix, pages, opens an entry with the keyboard, edits it, sees a conflicting edit
//! refused (the entry changed behind the page's back: the store keeps the other write), closes
//! the editor with Escape, sees a live change appear in place, and checks that a 390-px-wide
//! window has no horizontal scroll.
//!
//! Chromium and chromedriver come from Debian (`apt-get install chromium chromium-driver`), at
//! /usr/bin/chromium and /usr/bin/chromedriver, or where `CHROMIUM_BIN` and `CHROMEDRIVER_BIN`
//! say. When they are missing the test FAILS, saying what to install, unless
//! `KV_BROWSER_TESTS=skip` is set (then it says loudly that it skipped), as the PostgreSQL tests
//! do with `KV_POSTGRES_TESTS=skip`.
//!
//! With `KV_UI_SCREENSHOTS=DIR` it also writes the screenshots of docs/screenshots/ into DIR:
//! `KV_UI_SCREENSHOTS=docs/screenshots cargo test -p open-deno-kv-server --test ui_browser`
//! (run from the repository; the path is taken relative to this crate's directory).
//!
//! Run: `cargo test -p open-deno-kv-server --test ui_browser`.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use chrono::Utc;
use common::*;
use open_deno_kv_model::{
    AtomicWrite, Backend, Key, KvValue, Mutation, ReadRange, SnapshotRead, encode_key, key, v8,
};
use open_deno_kv_server::{Databases, Explorer};
use serde_json::{Value as Json, json};

/// The WebDriver id of an element in a command's answer.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const ENTER: &str = "\u{E007}";
const ESCAPE: &str = "\u{E00C}";

fn program(variable: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(variable).map_or_else(|| PathBuf::from(default), PathBuf::from);
    path.is_file().then_some(path)
}

/// chromedriver, killed when dropped.
struct Driver {
    child: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    /// Ends the browser session (chromedriver then stops Chromium, which killing chromedriver
    /// alone would leave running), also when a test fails half-way, then stops chromedriver.
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let address = self.base.trim_start_matches("http://").to_owned();
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nhost: {address}\r\ncontent-length: 0\r\n\
                 connection: close\r\n\r\n",
                self.session
            );
            if let Ok(mut stream) = std::net::TcpStream::connect(&address) {
                use std::io::{Read, Write};
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                // Wait for the answer's head (the browser has quit by then); chromedriver may
                // keep the connection open after it.
                if stream.write_all(request.as_bytes()).is_ok() {
                    let mut answer = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => answer.extend_from_slice(&chunk[..n]),
                        }
                    }
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Starts chromedriver on a free port and opens a session of headless Chromium with a fresh
    /// profile and no network beyond this machine.
    async fn start(chromium: PathBuf, chromedriver: PathBuf) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}"));
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
            session: String::new(),
            _profile: profile,
        };
        let started = Instant::now();
        loop {
            let ready = tokio::time::timeout(Duration::from_secs(2), async {
                let reply = send_plain(&driver.base, "GET", "/status", None).await;
                reply.is_some_and(|r| r["value"]["ready"] == true)
            })
            .await
            .unwrap_or(false);
            if ready {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "chromedriver never became ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let args = [
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", driver._profile.path().display()),
        ];
        let created = driver
            .command(
                "POST",
                "/session",
                json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
                }}}),
            )
            .await;
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        driver
    }

    /// A command of the session (`path` after `/session/{id}`, or a whole path before there is
    /// a session): its answer's `value`.
    async fn command(&self, method: &str, path: &str, body: Json) -> Json {
        let path = if self.session.is_empty() {
            path.to_owned()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let body = (method == "POST").then_some(body);
        let reply = send_plain(&self.base, method, &path, body)
            .await
            .unwrap_or_else(|| panic!("{method} {path}: no answer"));
        if reply["value"].get("error").is_some() {
            panic!("{method} {path}: {}", reply["value"]);
        }
        reply["value"].clone()
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_owned()
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.command("POST", &format!("/element/{id}/click"), json!({}))
            .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.command(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    async fn replace_text(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.command("POST", &format!("/element/{id}/clear"), json!({}))
            .await;
        self.command(
            "POST",
            &format!("/element/{id}/value"),
            json!({ "text": text }),
        )
        .await;
    }

    async fn script(&self, script: &str) -> Json {
        self.command(
            "POST",
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Waits (10 s at most) until `script` returns true; fails with `what` and the page's
    /// text otherwise.
    async fn wait_for(&self, what: &str, script: &str) {
        let started = Instant::now();
        loop {
            if self.script(script).await == true {
                return;
            }
            if started.elapsed() > Duration::from_secs(10) {
                let text = self.script("return document.body.innerText").await;
                panic!(
                    "timed out waiting for {what}; the page shows:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A screenshot: checked to be a PNG, and written to $KV_UI_SCREENSHOTS/name if set.
    async fn screenshot(&self, name: &str) {
        let encoded = self.command("GET", "/screenshot", Json::Null).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is not a PNG");
        if let Some(dir) = std::env::var_os("KV_UI_SCREENSHOTS") {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), png).unwrap();
        }
    }
}

/// One request to chromedriver; `None` if it did not answer (not started yet).
async fn send_plain(base: &str, method: &str, path: &str, body: Option<Json>) -> Option<Json> {
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let request = request
        .body(http_body_util::Full::new(bytes::Bytes::from(bytes)))
        .unwrap();
    let response = http1_client().request(request).await.ok()?;
    use http_body_util::BodyExt;
    let body = response.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

async fn put(backend: &dyn Backend, key: &Key, value: KvValue, expires_in: Option<Duration>) {
    let mut mutation = Mutation::set(encode_key(key).unwrap(), value);
    mutation.expire_at = expires_in.map(|d| Utc::now() + chrono::TimeDelta::from_std(d).unwrap());
    let write = AtomicWrite {
        mutations: vec![mutation],
        ..AtomicWrite::default()
    };
    assert!(backend.atomic_write(write).await.unwrap().is_some());
}

async fn stored(backend: &dyn Backend, key: &Key) -> Option<KvValue> {
    let read = SnapshotRead {
        ranges: vec![ReadRange::single_key(key).unwrap()],
        ..SnapshotRead::default()
    };
    backend.snapshot_read(read).await.unwrap()[0]
        .entries
        .first()
        .map(|entry| entry.value.clone())
}

fn js(json: Json) -> KvValue {
    v8::from_json(&json).unwrap()
}

/// The CSS selector of the row of `key`.
fn row(key: &Key) -> String {
    format!(
        "button.row[data-id='{}']",
        hex::encode(encode_key(key).unwrap())
    )
}

/// The JavaScript expression of that row's element.
fn row_js(key: &Key) -> String {
    format!("document.querySelector(\"{}\")", row(key))
}

/// Chromium and chromedriver; `None` (after saying so loudly) when they are missing and
/// `KV_BROWSER_TESTS=skip` is set; a failure naming what to install when they are missing
/// otherwise.
fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    let chromium = program("CHROMIUM_BIN", "/usr/bin/chromium");
    let chromedriver = program("CHROMEDRIVER_BIN", "/usr/bin/chromedriver");
    if let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) {
        return Some((chromium, chromedriver));
    }
    if std::env::var("KV_BROWSER_TESTS").is_ok_and(|v| v == "skip") {
        eprintln!(
            "\n*** SKIPPED: no chromium/chromedriver on this machine (KV_BROWSER_TESTS=skip) ***\n"
        );
        return None;
    }
    panic!(
        "the explorer's browser test needs Chromium and chromedriver: apt-get install \
         chromium chromium-driver (or set CHROMIUM_BIN and CHROMEDRIVER_BIN; \
         KV_BROWSER_TESTS=skip skips this test)"
    );
}

/// Whether the element `id` takes no room on the page (hidden, or not displayed).
fn invisible(id: &str) -> String {
    format!(
        "const e = document.getElementById('{id}'); \
         return e.hidden || getComputedStyle(e).display === 'none' || e.getClientRects().length === 0"
    )
}

/// Opens the page and enters the token; returns once the first listing shows `rows` rows.
/// On the way: before the token there is no empty badge in the header, and an empty token is
/// answered with what to enter, not silently ignored.
async fn log_in(driver: &Driver, running: &Running, rows: usize) {
    let page = format!("http://{}/ui", running.addr);
    driver.command("POST", "/url", json!({ "url": page })).await;
    driver
        .wait_for(
            "the token form",
            "return !document.getElementById('login').hidden",
        )
        .await;
    assert_eq!(
        driver.script(&invisible("mode")).await,
        true,
        "the header shows a badge before the token is entered"
    );
    driver.click("#token-save").await;
    driver
        .wait_for(
            "the empty token's message",
            "return document.getElementById('login-error').textContent.includes('Enter the token')",
        )
        .await;
    assert_eq!(
        driver
            .script("return document.getElementById('login').hidden")
            .await,
        false
    );
    driver.type_into("#token", TOKEN).await;
    driver.click("#token-save").await;
    driver
        .wait_for(
            "the first listing",
            &format!("return document.querySelectorAll('button.row').length === {rows}"),
        )
        .await;
    let address = driver.command("GET", "/url", Json::Null).await;
    assert!(!address.as_str().unwrap().contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_lists_pages_edits_refuses_conflicts_and_follows_changes() {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return;
    };

    let mut config = config();
    config.ui = Explorer::ReadWrite;
    let running = start_with(config, Databases::new(memory())).await;
    let backend = running.backend.clone();
    for i in 0..25 {
        let expiry = (i == 0).then_some(Duration::from_secs(2 * 3600 + 5 * 60));
        put(
            backend.as_ref(),
            &key!["users", i],
            js(json!({"name": format!("user {i}"), "n": i})),
            expiry,
        )
        .await;
    }
    put(
        backend.as_ref(),
        &key!["config", "limit"],
        KvValue::U64(10),
        None,
    )
    .await;
    put(
        backend.as_ref(),
        &key!["config", vec![1u8, 2]],
        KvValue::Bytes(vec![9, 8, 7].into()),
        None,
    )
    .await;

    let driver = Driver::start(chromium, chromedriver).await;
    // The token, asked for first and kept out of the URL.
    log_in(&driver, &running, 27).await;

    // A prefix, ten to a page.
    driver.replace_text("#prefix", "[\"users\"]").await;
    driver
        .script("document.getElementById('limit').value = '10'")
        .await;
    driver.click("#list").await;
    driver
        .wait_for(
            "page 1 of users",
            "const rows = document.querySelectorAll('button.row'); return rows.length === 10 \
             && rows[0].querySelector('.key').textContent === '[\"users\", 0n]'",
        )
        .await;
    driver
        .wait_for(
            "the counts",
            "return document.getElementById('stat-entries').textContent === '25'",
        )
        .await;
    let first = driver
        .script(&format!("return {}.innerText", row_js(&key!["users", 0])))
        .await;
    let first = first.as_str().unwrap();
    assert!(first.contains("{ name: \"user 0\", n: 0 }"), "{first}");
    assert!(first.contains("expires in 2h"), "{first}");
    assert!(first.contains("v8"), "{first}");
    assert_eq!(
        driver
            .script("return document.getElementById('stat-queue').textContent")
            .await,
        "0"
    );
    driver.screenshot("explorer-list.png").await;

    // The next page.
    driver.click("#next").await;
    driver
        .wait_for(
            "page 2",
            "const rows = document.querySelectorAll('button.row'); return rows.length === 10 \
             && rows[0].querySelector('.key').textContent === '[\"users\", 10n]' \
             && document.getElementById('page').textContent === 'Page 2'",
        )
        .await;

    // Open an entry with the keyboard, edit it.
    let editor_open = "return document.getElementById('editor').open";
    let editor_closed = "return !document.getElementById('editor').open";
    driver.type_into(&row(&key!["users", 12]), ENTER).await;
    driver.wait_for("the editor", editor_open).await;
    let shown = driver
        .script("return document.getElementById('editor-value').textContent")
        .await;
    assert_eq!(shown, "{ name: \"user 12\", n: 12 }");
    // Only what applies is shown: no key box for an existing entry, no expiry to keep.
    for hidden in ["new-key-field", "keep-expiry", "conflict"] {
        let display = driver
            .script(&format!(
                "const e = document.getElementById('{hidden}'); \
                 return e.offsetParent === null"
            ))
            .await;
        assert_eq!(display, true, "#{hidden} is visible");
    }
    driver
        .replace_text("#edit-text", "{\"name\": \"edited in the browser\"}")
        .await;
    driver.screenshot("explorer-editor.png").await;
    driver.click("#save").await;
    driver.wait_for("the editor to close", editor_closed).await;
    driver
        .wait_for(
            "the edited row",
            &format!(
                "const row = {}; return row.innerText.includes('edited in the browser') \
                 && !row.classList.contains('changed')",
                row_js(&key!["users", 12])
            ),
        )
        .await;
    assert_eq!(
        stored(backend.as_ref(), &key!["users", 12]).await,
        Some(js(json!({"name": "edited in the browser"})))
    );

    // A conflicting edit: the entry changes behind the page's back after it was opened.
    driver.type_into(&row(&key!["users", 13]), ENTER).await;
    driver.wait_for("the editor", editor_open).await;
    let behind = js(json!({"name": "changed behind the page"}));
    put(backend.as_ref(), &key!["users", 13], behind.clone(), None).await;
    driver
        .replace_text("#edit-text", "{\"name\": \"stale edit\"}")
        .await;
    driver.click("#save").await;
    driver
        .wait_for(
            "the conflict",
            "return !document.getElementById('conflict').hidden",
        )
        .await;
    let conflict = driver
        .script("return document.getElementById('conflict').innerText")
        .await;
    let conflict = conflict.as_str().unwrap();
    assert!(
        conflict.contains("changed since the page read it"),
        "{conflict}"
    );
    assert!(conflict.contains("changed behind the page"), "{conflict}");
    assert_eq!(
        stored(backend.as_ref(), &key!["users", 13]).await,
        Some(behind)
    );
    driver.screenshot("explorer-conflict.png").await;
    driver.type_into("#edit-text", ESCAPE).await;
    driver
        .wait_for("Escape to close the editor", editor_closed)
        .await;

    // A live change to a row on screen appears in place, marked.
    put(
        backend.as_ref(),
        &key!["users", 15],
        js(json!("a live change")),
        None,
    )
    .await;
    driver
        .wait_for(
            "the live change",
            &format!(
                "const row = {}; return row.innerText.includes('\"a live change\"') \
                 && row.classList.contains('changed')",
                row_js(&key!["users", 15])
            ),
        )
        .await;
    let no_sideways = "return document.documentElement.scrollWidth <= window.innerWidth";
    assert_eq!(driver.script(no_sideways).await, true);

    // A phone-sized window: everything fits its width.
    driver
        .command("POST", "/window/rect", json!({"width": 390, "height": 844}))
        .await;
    driver
        .wait_for("a narrow window", "return window.innerWidth <= 400")
        .await;
    assert_eq!(
        driver.script(no_sideways).await,
        true,
        "the page scrolls sideways at 390 px"
    );
    driver.script("window.scrollTo(0, 0)").await;
    driver.screenshot("explorer-phone.png").await;

    drop(driver);
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_explorer_shows_no_edit_controls() {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return;
    };
    let mut config = config();
    config.ui = Explorer::ReadOnly;
    let running = start_with(config, Databases::new(memory())).await;
    put(
        running.backend.as_ref(),
        &key!["a"],
        js(json!({"x": 1})),
        None,
    )
    .await;
    let driver = Driver::start(chromium, chromedriver).await;
    log_in(&driver, &running, 1).await;
    assert_eq!(
        driver
            .script("return document.getElementById('mode').textContent")
            .await,
        "read-only"
    );
    driver.type_into(&row(&key!["a"]), ENTER).await;
    driver
        .wait_for(
            "the editor",
            "return document.getElementById('editor').open",
        )
        .await;
    assert_eq!(
        driver
            .script("return document.getElementById('editor-value').textContent")
            .await,
        "{ x: 1 }"
    );
    for hidden in ["new-entry", "edit-controls", "save", "delete"] {
        let invisible = driver
            .script(&format!(
                "return document.getElementById('{hidden}').offsetParent === null"
            ))
            .await;
        assert_eq!(
            invisible, true,
            "#{hidden} is visible in the read-only explorer"
        );
    }
    driver.type_into("#close", ESCAPE).await;
    driver
        .wait_for(
            "Escape to close the editor",
            "return !document.getElementById('editor').open",
        )
        .await;
    drop(driver);
    running.shutdown().await.unwrap();
}

/// With `--open-loopback` the server needs no token: the page opens the database at once,
/// without the token form (which let any text in) and without a "Forget token" button.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_explorer_opens_directly_when_the_server_needs_no_token() {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return;
    };
    let mut config = config();
    config.access = open_deno_kv_server::Access::Open;
    config.ui = Explorer::ReadWrite;
    let running = start_with(config, Databases::new(memory())).await;
    put(
        running.backend.as_ref(),
        &key!["open", 1],
        js(json!({"x": 1})),
        None,
    )
    .await;
    let driver = Driver::start(chromium, chromedriver).await;
    let page = format!("http://{}/ui", running.addr);
    driver.command("POST", "/url", json!({ "url": page })).await;
    driver
        .wait_for(
            "the first listing, without a token",
            "return document.querySelectorAll('button.row').length === 1",
        )
        .await;
    for id in ["login", "forget"] {
        assert_eq!(
            driver.script(&invisible(id)).await,
            true,
            "#{id} is shown though the server needs no token"
        );
    }
    assert_eq!(
        driver
            .script("return document.getElementById('mode').textContent")
            .await,
        "read-write"
    );
    assert_eq!(driver.script(&invisible("mode")).await, false);
    drop(driver);
    running.shutdown().await.unwrap();
}

//! `kv serve --tls-cert --tls-key`, the binary, over HTTPS: the real Deno 2.9.6 (trusting the
//! test's CA through `DENO_CERT`) and `kv --db https://…` through it; SIGHUP reloading the
//! certificate while an open connection keeps working; a plaintext client on the TLS port and a
//! TLS client on a plaintext port refused at once, clearly, on both sides; a wrong CA refused;
//! the warning for plaintext off loopback. Certificates are made by each test (open-deno-kv-server's
//! `tests/support/pki.rs`): a root CA, an intermediate, server certificates for `localhost`.
//!
//! Deno comes from `DENO_BIN` or `.ci/install-deno` (see `open_deno_kv_conformance::deno`).

#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../open-deno-kv-server/tests/support/pki.rs"]
mod pki;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Server, TOKEN, assert_client_checks, deno_client, free_port, healthy, run};
use pki::{Ca, HttpsConnection, KeyFormat, ServerCert, write};

/// How long a refusal may take to count as fast (the client's retry budget is 30 s).
const FAST: Duration = Duration::from_secs(5);

/// A test's certificates: a root CA (what clients trust) and an intermediate that signs the
/// server certificates (served as a chain).
struct Pki {
    dir: tempfile::TempDir,
    root: Ca,
    intermediate: Ca,
}

impl Pki {
    fn new() -> Pki {
        let root = Ca::root("kv serve test root");
        let intermediate = root.intermediate("kv serve test intermediate");
        Pki {
            dir: tempfile::tempdir().unwrap(),
            root,
            intermediate,
        }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The root CA's file.
    fn ca_file(&self) -> PathBuf {
        write(self.dir(), "ca.pem", &self.root.pem())
    }

    /// A new server certificate, written (with the intermediate after it) as cert.pem and
    /// key.pem, replacing what was there.
    fn server_files(&self, name: &str, format: KeyFormat) -> ServerCert {
        let cert = self.intermediate.server(name, format);
        let chain = format!("{}{}", cert.cert_pem, self.intermediate.pem());
        write(self.dir(), "cert.pem", &chain);
        write(self.dir(), "key.pem", &cert.key_pem);
        cert
    }

    fn cert_path(&self) -> PathBuf {
        self.dir().join("cert.pem")
    }

    fn key_path(&self) -> PathBuf {
        self.dir().join("key.pem")
    }
}

/// Starts `kv --db DB serve --addr ADDR EXTRA...` with its stderr in `log`, and waits until
/// `ready` says it answers.
fn serve(addr: SocketAddr, extra: &[&OsStr], log: &Path, ready: impl Fn() -> bool) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_kv"))
        .args(["--db", "memory:", "serve", "--addr"])
        .arg(addr.to_string())
        .args(extra)
        .env_remove("KV_CA_FILE")
        .env("KV_ACCESS_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start kv serve: {e}"));
    let server = Server {
        child,
        port: addr.port(),
    };
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kv serve never became ready:\n{}",
            read(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// `kv serve` over TLS on a free loopback port with the files of `pki`.
fn serve_tls(pki: &Pki, log: &Path, extra: &[&OsStr]) -> Server {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let ca = pki.root.pem();
    let (cert, key) = (pki.cert_path(), pki.key_path());
    let mut args: Vec<&OsStr> = vec![
        "--tls-cert".as_ref(),
        cert.as_os_str(),
        "--tls-key".as_ref(),
        key.as_os_str(),
    ];
    args.extend_from_slice(extra);
    serve(addr, &args, log, || {
        HttpsConnection::open(addr, &ca, &[b"http/1.1"])
            .and_then(|mut c| c.health())
            .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200"))
    })
}

/// `kv serve` in plaintext on a free loopback port.
fn serve_plain(log: &Path) -> Server {
    let port = free_port();
    serve(SocketAddr::from(([127, 0, 0, 1], port)), &[], log, || {
        healthy(port)
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits (at most 10 s) until `log` contains `text`.
fn wait_for_log(log: &Path, text: &str) {
    let started = Instant::now();
    while !read(log).contains(text) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the log never said {text:?}:\n{}",
            read(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `kv --db URL ARGS...` with the token and `envs`: (success, stdout, stderr, time taken).
fn kv(url: &str, args: &[&str], envs: &[(&str, &OsStr)]) -> (bool, String, String, Duration) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kv"));
    command
        .args(["--db", url])
        .args(args)
        .env_remove("KV_CA_FILE")
        .env("KV_ACCESS_TOKEN", TOKEN);
    for (name, value) in envs {
        command.env(name, value);
    }
    let started = Instant::now();
    let (ok, out, err) = run(command);
    (ok, out, err, started.elapsed())
}

fn addr(server: &Server) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port))
}

#[test]
fn deno_and_kv_use_kv_serve_over_tls() {
    let pki = Pki::new();
    pki.server_files("kv serve test server", KeyFormat::EcPkcs8);
    let ca = pki.ca_file();
    let dbs = pki.dir().join("dbs");
    let log = pki.dir().join("serve.log");
    let server = serve_tls(
        &pki,
        &log,
        &["--ephemeral".as_ref(), "--db-dir".as_ref(), dbs.as_ref()],
    );
    assert!(
        read(&log).contains(&format!("at https://127.0.0.1:{}/", server.port)),
        "{}",
        read(&log)
    );

    // Deno trusts the test's CA through its own DENO_CERT; get/set/atomic/watch and the rest.
    let url = format!("https://localhost:{}/", server.port);
    let mut deno = deno_client(&url);
    deno.env("DENO_CERT", &ca);
    assert_client_checks("Deno over TLS", deno, 30);

    // kv --db https://… with --ca, then with KV_CA_FILE (and the certificate's IP name).
    let ca_flag = ca.to_string_lossy().into_owned();
    let (ok, _, err, _) = kv(
        &url,
        &["--ca", &ca_flag, "set", r#"["tls"]"#, r#""over https""#],
        &[],
    );
    assert!(ok, "kv set over https: {err}");
    let url_by_ip = format!("https://127.0.0.1:{}/", server.port);
    let (ok, out, err, _) = kv(
        &url_by_ip,
        &["get", r#"["tls"]"#],
        &[("KV_CA_FILE", ca.as_os_str())],
    );
    assert!(
        ok && out.contains("over https"),
        "kv get over https: {out}{err}"
    );
}

#[test]
fn sighup_reloads_the_certificate_and_open_connections_keep_working() {
    let pki = Pki::new();
    let first = pki.server_files("first", KeyFormat::RsaPkcs1);
    let log = pki.dir().join("serve.log");
    // The connection kept open across the reloads asks `/health`, without the token: on a busy
    // machine the reloads may take longer than the admission deadline (5 s) that closes such a
    // connection, so it is given ten minutes.
    let mut server = serve_tls(&pki, &log, &["--auth-timeout".as_ref(), "600".as_ref()]);
    let (addr, ca) = (addr(&server), pki.root.pem());
    let mut open = HttpsConnection::open(addr, &ca, &[b"http/1.1"]).unwrap();
    assert_eq!(open.certificate(), first.der);
    assert!(open.health().unwrap().starts_with("HTTP/1.1 200"));

    let hangup = |server: &Server| {
        let (sent, _, _) = run({
            let mut kill = Command::new("kill");
            kill.args(["-HUP", &server.child.id().to_string()]);
            kill
        });
        assert!(sent, "cannot send SIGHUP");
    };
    let second = pki.server_files("second", KeyFormat::EcSec1);
    hangup(&server);
    wait_for_log(&log, "reloaded the TLS certificate");
    let fresh = HttpsConnection::open(addr, &ca, &[b"http/1.1"]).unwrap();
    assert_eq!(
        fresh.certificate(),
        second.der,
        "a new connection gets the new certificate"
    );
    // The connection opened before the reload goes on, with the certificate it was opened with.
    assert_eq!(open.certificate(), first.der);
    let answer = open.health().unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A broken file: refused with a logged error, the certificate in force stays.
    write(
        pki.dir(),
        "key.pem",
        "-----BEGIN PRIVATE KEY-----\nbroken\n",
    );
    hangup(&server);
    wait_for_log(&log, "TLS reload refused");
    let fresh = HttpsConnection::open(addr, &ca, &[b"http/1.1"]).unwrap();
    assert_eq!(fresh.certificate(), second.der);
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "kv serve still runs"
    );
    assert!(open.health().unwrap().starts_with("HTTP/1.1 200"));
}

#[test]
fn each_port_refuses_the_other_protocol_fast_and_clearly() {
    let pki = Pki::new();
    pki.server_files("server", KeyFormat::EcPkcs8);
    let ca = pki.ca_file();
    let (tls_log, plain_log) = (pki.dir().join("tls.log"), pki.dir().join("plain.log"));
    let tls = serve_tls(&pki, &tls_log, &[]);
    let plain = serve_plain(&plain_log);

    // Plaintext HTTP to the TLS port: a plaintext 400 saying what the port speaks.
    let started = Instant::now();
    let mut tcp = TcpStream::connect(addr(&tls)).unwrap();
    tcp.set_read_timeout(Some(FAST)).unwrap();
    tcp.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    assert!(started.elapsed() < FAST);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("This port speaks HTTPS"), "{answer}");
    // kv --db http://… (HTTP/2) to the TLS port: fails at once with the server's words.
    let (ok, _, err, took) = kv(&format!("http://{}/", addr(&tls)), &["get", "[1]"], &[]);
    assert!(!ok && took < FAST, "took {took:?}: {err}");
    assert!(
        err.contains("TLS") && err.contains("This port speaks HTTPS"),
        "{err}"
    );
    wait_for_log(&tls_log, "plaintext on this TLS port");

    // A TLS handshake to the plaintext port: a TLS alert, and kv says what to do.
    let https_to_plain = format!("https://localhost:{}/", plain.port);
    let ca_flag = ca.to_string_lossy().into_owned();
    let (ok, _, err, took) = kv(&https_to_plain, &["--ca", &ca_flag, "get", "[1]"], &[]);
    assert!(!ok && took < FAST, "took {took:?}: {err}");
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(err.contains("use an http:// URL"), "{err}");
    wait_for_log(&plain_log, "a TLS handshake on this plaintext port");
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    pki.server_files("server", KeyFormat::EcPkcs8);
    let other = write(pki.dir(), "other-ca.pem", &Ca::root("some other CA").pem());
    let log = pki.dir().join("serve.log");
    let server = serve_tls(&pki, &log, &[]);
    let url = format!("https://localhost:{}/", server.port);
    let other_flag = other.to_string_lossy().into_owned();
    let (ok, _, err, took) = kv(&url, &["--ca", &other_flag, "get", "[1]"], &[]);
    assert!(!ok && took < FAST, "took {took:?}: {err}");
    assert!(
        err.contains("TLS handshake") && err.contains("not trusted"),
        "{err}"
    );
    // No --ca: the system's roots, which do not know the test's CA either.
    let (ok, _, err, took) = kv(&url, &["get", "[1]"], &[]);
    assert!(!ok && took < FAST, "took {took:?}: {err}");
    assert!(err.contains("TLS"), "{err}");
}

#[test]
fn plaintext_off_loopback_warns_and_tls_does_not() {
    let pki = Pki::new();
    pki.server_files("server", KeyFormat::EcPkcs8);
    let cert = pki.cert_path();
    let key = pki.key_path();
    let tls_args: [&OsStr; 4] = [
        "--tls-cert".as_ref(),
        cert.as_ref(),
        "--tls-key".as_ref(),
        key.as_ref(),
    ];
    for (name, extra) in [("plain", &[][..]), ("tls", &tls_args[..])] {
        let log = pki.dir().join(format!("{name}.log"));
        // Bound on every interface (nothing connects to it); the log tells when it serves.
        let _server = serve(
            SocketAddr::from(([0, 0, 0, 0], free_port())),
            extra,
            &log,
            || read(&log).contains("serving memory:"),
        );
        let text = read(&log);
        assert_eq!(
            text.contains("WARNING: serving plaintext HTTP"),
            name == "plain",
            "{name}:\n{text}"
        );
    }
}

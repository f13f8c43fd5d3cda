//! [`S3TestServer`]: moto in server mode on a free loopback port, with a bucket.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::TestServiceError;
use crate::error::moto;
use crate::moto::moto_server_binary;
use crate::skip::{self, S3_SKIP_VARIABLE};

/// The access key id the tests use (moto accepts any).
pub const ACCESS_KEY_ID: &str = "open-deno-kv-test";
/// The secret access key the tests use (moto accepts any).
pub const SECRET_ACCESS_KEY: &str = "open-deno-kv-test-secret";
/// The region the tests name (moto's default).
pub const REGION: &str = "us-east-1";
/// The bucket [`S3TestServer::start`] creates.
pub const BUCKET: &str = "kv-backups";

/// How long a started moto has to answer.
const START_WAIT: Duration = Duration::from_secs(60);
/// How often to try another port when the one picked was taken meanwhile.
const PORT_ATTEMPTS: usize = 5;
/// How long one request to moto may take.
const REQUEST_WAIT: Duration = Duration::from_secs(30);

/// A running moto server (its S3 API) on 127.0.0.1, with the bucket [`BUCKET`] created;
/// dropping it stops the server (moto keeps everything in memory, so nothing is left behind).
///
/// moto accepts any credentials and answers path-style requests (`http://127.0.0.1:PORT/BUCKET/KEY`).
#[derive(Debug)]
pub struct S3TestServer {
    child: Child,
    port: u16,
    bucket: String,
    /// moto's output, for diagnostics.
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl S3TestServer {
    /// Starts moto (found by [`moto_server_binary`](crate::moto_server_binary)) on a free
    /// port of 127.0.0.1, waits until it answers, and creates the bucket [`BUCKET`].
    pub fn start() -> Result<Self, TestServiceError> {
        let bin = moto_server_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("kv-moto-")
            .tempdir()
            .map_err(|e| moto("creating a temporary directory", e))?;
        let log = dir.path().join("moto.log");
        let mut last_failure = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().map_err(|e| moto("finding a free port", e))?;
            let log_file =
                std::fs::File::create(&log).map_err(|e| moto("creating its log file", e))?;
            let log_copy = log_file
                .try_clone()
                .map_err(|e| moto("opening its log file", e))?;
            let mut child = Command::new(&bin)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(log_copy)
                .spawn()
                .map_err(|e| moto(format!("starting {}", bin.display()), e))?;
            match wait_until_it_answers(&mut child, port, &log) {
                Ok(()) => {
                    return Ok(S3TestServer {
                        child,
                        port,
                        bucket: BUCKET.to_owned(),
                        log,
                        _dir: dir,
                    });
                }
                // Exited (the port was taken meanwhile, most likely): another port.
                Err(WaitFailure::Exited(output)) => last_failure = output,
                Err(WaitFailure::Error(err)) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(err);
                }
            }
        }
        Err(moto(
            format!("starting on a free port ({PORT_ATTEMPTS} tries)"),
            last_failure,
        ))
    }

    /// [`S3TestServer::start`] for a test: `None` (after saying so loudly on stderr) when moto
    /// is missing and `KV_S3_TESTS=skip` is set; panics with what to install when it is missing
    /// otherwise, or with the reason when it does not start.
    pub fn start_or_skip() -> Option<Self> {
        match Self::start() {
            Ok(server) => Some(server),
            Err(err @ TestServiceError::MotoMissing { .. })
                if skip::requested(S3_SKIP_VARIABLE) =>
            {
                skip::announce(
                    "S3 tests do not run on this machine",
                    &err,
                    S3_SKIP_VARIABLE,
                );
                None
            }
            Err(err) => panic!("cannot start the S3 test server: {err}"),
        }
    }

    /// The server's endpoint: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The bucket [`S3TestServer::start`] created.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The `s3://` URL of `prefix` in the bucket (`s3://kv-backups/PREFIX`); give it with
    /// [`S3TestServer::env`], which says where the server is.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{}", self.bucket, prefix.trim_start_matches('/'))
    }

    /// The environment that points an S3 client at this server: the credentials, the region,
    /// the endpoint (`AWS_ENDPOINT_URL`, which the AWS SDKs and the `object_store` crate read)
    /// and `AWS_ALLOW_HTTP=true` (the endpoint is plain HTTP).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_DEFAULT_REGION", REGION.to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// The arguments that make denokv 0.14 follow `prefix` of the bucket as a read replica
    /// (`--sync-from-s3 --s3-bucket B --s3-prefix P --s3-endpoint E`); give it
    /// [`S3TestServer::env`] too (denokv reads the credentials and region from it).
    pub fn denokv_args(&self, prefix: &str) -> Vec<String> {
        vec![
            "--sync-from-s3".to_owned(),
            "--s3-bucket".to_owned(),
            self.bucket.clone(),
            "--s3-prefix".to_owned(),
            prefix.to_owned(),
            "--s3-endpoint".to_owned(),
            self.endpoint(),
        ]
    }

    /// Creates another bucket (`PUT /NAME`).
    pub fn create_bucket(&self, name: &str) -> Result<(), TestServiceError> {
        let (status, body) = request(self.port, "PUT", &format!("/{name}"))?;
        if status == 200 {
            Ok(())
        } else {
            Err(moto(
                format!("creating bucket {name:?}"),
                format!("HTTP {status}: {body}"),
            ))
        }
    }

    /// Freezes the server (SIGSTOP): it accepts connections but answers nothing, as an
    /// unreachable object store does, until [`S3TestServer::resume`].
    pub fn pause(&self) -> Result<(), TestServiceError> {
        self.signal("STOP")
    }

    /// Lets a [paused](S3TestServer::pause) server answer again (SIGCONT), with everything it
    /// held.
    pub fn resume(&self) -> Result<(), TestServiceError> {
        self.signal("CONT")
    }

    /// What moto printed so far (its request log), for a failing test's message.
    pub fn log(&self) -> String {
        read_log(&self.log)
    }

    fn signal(&self, signal: &str) -> Result<(), TestServiceError> {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .map_err(|e| moto(format!("sending SIG{signal}"), e))?;
        if status.success() {
            Ok(())
        } else {
            Err(moto(format!("sending SIG{signal}"), status))
        }
    }
}

impl Drop for S3TestServer {
    fn drop(&mut self) {
        // A paused server would not die of SIGTERM; SIGKILL ends it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why moto did not come up.
enum WaitFailure {
    /// It exited, with this output.
    Exited(String),
    /// Something else.
    Error(TestServiceError),
}

/// A port nothing listens on now (the OS's pick for port 0).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// Polls until moto (`child`, on `port`) creates the bucket [`BUCKET`], or exits, or
/// [`START_WAIT`] passes.
fn wait_until_it_answers(
    child: &mut Child,
    port: u16,
    log: &std::path::Path,
) -> Result<(), WaitFailure> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(WaitFailure::Exited(format!(
                "moto exited ({status}): {}",
                read_log(log)
            )));
        }
        match request(port, "PUT", &format!("/{BUCKET}")) {
            Ok((200, _)) => return Ok(()),
            Ok((status, body)) => {
                return Err(WaitFailure::Error(moto(
                    format!("creating bucket {BUCKET:?}"),
                    format!("HTTP {status}: {body}"),
                )));
            }
            Err(_) if start.elapsed() < START_WAIT => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(err) => {
                return Err(WaitFailure::Error(moto(
                    format!("waiting {START_WAIT:?} for it to answer"),
                    format!("{err}; its log: {}", read_log(log)),
                )));
            }
        }
    }
}

/// One plain HTTP/1.1 request without a body to moto on `port`: the status and the body. (moto
/// creates a bucket for an unsigned `PUT /NAME`; everything else goes through a real S3 client,
/// which signs its requests.)
fn request(port: u16, method: &str, path: &str) -> Result<(u16, String), TestServiceError> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let step = || format!("{method} {path}");
    let mut stream =
        TcpStream::connect_timeout(&address, REQUEST_WAIT).map_err(|e| moto(step(), e))?;
    stream
        .set_read_timeout(Some(REQUEST_WAIT))
        .map_err(|e| moto(step(), e))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )
    .map_err(|e| moto(step(), e))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| moto(step(), e))?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| moto(step(), format!("not an HTTP answer: {answer:?}")))?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// moto's output so far.
fn read_log(log: &std::path::Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

//! Load on a KV Connect server: many concurrent clients doing mixed reads and writes over h2c,
//! reporting requests/s and latency percentiles. Runs the same workload, in the same run, on
//! `kv serve` and — if you give its binary — on denokv, and prints the ratio.
//!
//! ```text
//! cargo build --release -p open-deno-kv-cli
//! cargo install denokv --version 0.14.0 --locked --root /tmp/denokv   # optional, for the comparison
//! cargo run --release -p open-deno-kv-server --example connect_load -- \
//!     --kv target/release/kv --denokv /tmp/denokv/bin/denokv [--clients 64] [--connections 8] \
//!     [--seconds 10] [--keys 10000] [--write-percent 20] [--db URL] [--servers N]
//! ```
//!
//! Each server gets a fresh SQLite file in a temp dir (both store in SQLite, synchronous as each
//! does by default), `--keys` entries preloaded (100-byte values), then `--clients` tasks share
//! `--connections` HTTP/2 connections and loop for `--seconds`: a random point read (a
//! `snapshot_read` of one key), or with `--write-percent` probability a random single-key set
//! (an `atomic_write`). Every response must be `200` with a success status, or the run fails.
//!
//! `--db URL` makes `kv serve` use that database instead of its fresh SQLite file (any URL `kv
//! --db` takes, e.g. `postgres://user@host/db?schema=load`); the keys are written over whatever
//! the store holds. `--servers N` starts N `kv serve` processes on the same database (on one
//! SQLite file without `--db`) and spreads the connections over them in turn, as a load
//! balancer would. denokv, when given, still runs alone on its own SQLite file.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use open_deno_kv_connect::pb;
use open_deno_kv_connect::prost::Message;
use open_deno_kv_model::{encode_key, key};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type HttpClient = Client<HttpConnector, Full<Bytes>>;

const TOKEN: &str = "connect-load-benchmark-token";
const VALUE_SIZE: usize = 100;

struct Args {
    kv: PathBuf,
    denokv: Option<PathBuf>,
    clients: usize,
    connections: usize,
    seconds: u64,
    keys: usize,
    write_percent: u32,
    /// The database `kv serve` uses (`--db`); a fresh SQLite file when `None`.
    db: Option<String>,
    /// How many `kv serve` processes share that database.
    servers: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        kv: PathBuf::from("target/release/kv"),
        denokv: None,
        clients: 64,
        connections: 8,
        seconds: 10,
        keys: 10_000,
        write_percent: 20,
        db: None,
        servers: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--kv" => args.kv = PathBuf::from(value),
            "--denokv" => args.denokv = Some(PathBuf::from(value)),
            "--clients" => args.clients = number(&value)?.max(1) as usize,
            "--connections" => args.connections = number(&value)?.max(1) as usize,
            "--seconds" => args.seconds = number(&value)?.max(1),
            "--keys" => args.keys = number(&value)?.max(1) as usize,
            "--write-percent" => args.write_percent = number(&value)?.min(100) as u32,
            "--db" => args.db = Some(value),
            "--servers" => args.servers = number(&value)?.clamp(1, 64) as usize,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

/// A server process, killed when dropped.
struct ServerProcess {
    child: Child,
    url: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, BoxError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `kv serve` on `db`, or on a SQLite file in `dir` when `db` is `None`.
fn start_kv(binary: &Path, dir: &Path, db: Option<&str>) -> Result<ServerProcess, BoxError> {
    let port = free_port()?;
    let db = match db {
        Some(url) => url.to_owned(),
        None => format!("sqlite:{}", dir.join("ours.sqlite3").display()),
    };
    let child = Command::new(binary)
        .args(["--db", &db])
        .args(["serve", "--addr", &format!("127.0.0.1:{port}")])
        .env("KV_ACCESS_TOKEN", TOKEN)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok(ServerProcess {
        child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

fn start_denokv(binary: &Path, dir: &Path) -> Result<ServerProcess, BoxError> {
    let port = free_port()?;
    let child = Command::new(binary)
        .args([
            "--sqlite-path",
            &dir.join("denokv.sqlite3").display().to_string(),
        ])
        .args([
            "serve",
            "--access-token",
            TOKEN,
            "--addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    Ok(ServerProcess {
        child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

/// One HTTP/2 connection's client, with the data-path endpoint and database id from metadata.
#[derive(Clone)]
struct Connection {
    client: HttpClient,
    endpoint: String,
    database_id: String,
}

/// An HTTP/2-only client on its own connection, with Nagle off (as Deno's client has it: HTTP/2
/// writes a request's HEADERS and DATA frames separately, and Nagle would hold the second until
/// the server's delayed ACK).
fn new_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector)
}

async fn post(
    client: &HttpClient,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<(u16, Bytes), BoxError> {
    let mut request = hyper::Request::post(url).header("authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::from(body)))?)
        .await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Waits for the server to answer, then runs the metadata exchange on a new connection.
async fn connect(base: &str) -> Result<Connection, BoxError> {
    let client = new_client();
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = br#"{"supportedVersions":[1,2,3]}"#.to_vec();
    let (status, answer) = loop {
        match post(
            &client,
            base,
            &[("content-type", "application/json")],
            body.clone(),
        )
        .await
        {
            Ok(answer) => break answer,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(format!("{base} did not answer: {e}").into()),
        }
    };
    if status != 200 {
        return Err(format!(
            "metadata exchange: {status} {}",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    let metadata = open_deno_kv_connect::metadata::DatabaseMetadata::parse(&answer)?;
    let endpoint = metadata
        .endpoints
        .first()
        .ok_or("no endpoint in the metadata")?
        .url
        .clone();
    let endpoint = if endpoint.starts_with("http") {
        endpoint
    } else {
        format!("{base}{endpoint}")
    };
    Ok(Connection {
        client,
        endpoint,
        database_id: metadata.database_id.to_string(),
    })
}

impl Connection {
    async fn call(&self, method: &str, body: Vec<u8>) -> Result<Bytes, BoxError> {
        let url = format!("{}/{method}", self.endpoint);
        let headers = [
            ("content-type", "application/x-protobuf"),
            ("x-denokv-version", "3"),
            ("x-denokv-database-id", self.database_id.as_str()),
        ];
        let (status, answer) = post(&self.client, &url, &headers, body).await?;
        if status != 200 {
            return Err(format!("{method}: {status} {}", String::from_utf8_lossy(&answer)).into());
        }
        Ok(answer)
    }

    async fn set(&self, keys: &[Vec<u8>]) -> Result<(), BoxError> {
        let write = pb::AtomicWrite {
            mutations: keys
                .iter()
                .map(|key| pb::Mutation {
                    key: key.clone(),
                    value: Some(pb::KvValue {
                        data: vec![7; VALUE_SIZE],
                        encoding: pb::ValueEncoding::VeBytes as i32,
                    }),
                    mutation_type: pb::MutationType::MSet as i32,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let answer =
            pb::AtomicWriteOutput::decode(self.call("atomic_write", write.encode_to_vec()).await?)?;
        if answer.status != pb::AtomicWriteStatus::AwSuccess as i32 {
            return Err(format!("atomic_write status {}", answer.status).into());
        }
        Ok(())
    }

    async fn get(&self, key: &[u8]) -> Result<(), BoxError> {
        let mut end = key.to_vec();
        end.push(0);
        let read = pb::SnapshotRead {
            ranges: vec![pb::ReadRange {
                start: key.to_vec(),
                end,
                limit: 1,
                reverse: false,
            }],
        };
        let answer = pb::SnapshotReadOutput::decode(
            self.call("snapshot_read", read.encode_to_vec()).await?,
        )?;
        let found = answer.ranges.first().map_or(0, |r| r.values.len());
        if found != 1 {
            return Err(format!("a preloaded key was not found ({found} entries)").into());
        }
        Ok(())
    }
}

/// A small xorshift generator: enough to spread keys, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

struct Outcome {
    requests: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

/// The load on the servers at `bases` (one or more serving the same database): the
/// connections go to them in turn.
async fn run_load(bases: &[String], args: &Args) -> Result<Outcome, BoxError> {
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..args.keys)
            .map(|i| encode_key(&key!["load", i as u64]))
            .collect::<Result<_, _>>()?,
    );
    let mut connections = Vec::new();
    for base in bases.iter().cycle().take(args.connections.max(bases.len())) {
        connections.push(connect(base).await?);
    }
    for batch in keys.chunks(500) {
        connections[0].set(batch).await?;
    }
    let stop = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..args.clients {
        let connection = connections[client % connections.len()].clone();
        let keys = keys.clone();
        let write_percent = args.write_percent;
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (client as u64 + 1));
            let mut latencies = Vec::new();
            while Instant::now() < stop {
                let key = &keys[(rng.next() % keys.len() as u64) as usize];
                let begun = Instant::now();
                if (rng.next() % 100) < u64::from(write_percent) {
                    connection.set(std::slice::from_ref(key)).await?;
                } else {
                    connection.get(key).await?;
                }
                latencies.push(begun.elapsed());
            }
            Ok::<_, BoxError>(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    Ok(Outcome {
        requests: latencies.len(),
        elapsed,
        p50: at(0.50),
        p99: at(0.99),
    })
}

fn report(name: &str, outcome: &Outcome) -> f64 {
    let rate = outcome.requests as f64 / outcome.elapsed.as_secs_f64();
    println!(
        "{name:<10} {:>9} requests in {:>5.1}s  {:>9.0} req/s  p50 {:>8.2} ms  p99 {:>8.2} ms",
        outcome.requests,
        outcome.elapsed.as_secs_f64(),
        rate,
        outcome.p50.as_secs_f64() * 1e3,
        outcome.p99.as_secs_f64() * 1e3
    );
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = parse_args().map_err(|e| {
        format!("{e}\nusage: see the comment at the top of examples/connect_load.rs")
    })?;
    let dir = tempfile::tempdir()?;
    println!(
        "KV Connect load: {} clients on {} h2c connections, {} s each, {} keys, {}% writes, cpus={}",
        args.clients,
        args.connections,
        args.seconds,
        args.keys,
        args.write_percent,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!(
        "kv serve: {} process(es) on {}",
        args.servers,
        args.db.as_deref().unwrap_or("a fresh SQLite file")
    );
    let ours = {
        let servers = (0..args.servers)
            .map(|_| start_kv(&args.kv, dir.path(), args.db.as_deref()))
            .collect::<Result<Vec<_>, _>>()?;
        let bases: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
        run_load(&bases, &args).await?
    };
    let our_rate = report("kv serve", &ours);
    if let Some(denokv) = &args.denokv {
        let theirs = {
            let server = start_denokv(denokv, dir.path())?;
            run_load(std::slice::from_ref(&server.url), &args).await?
        };
        let their_rate = report("denokv", &theirs);
        println!(
            "kv serve / denokv: {:.2}x the requests/s, p99 {:.2}x",
            our_rate / their_rate,
            ours.p99.as_secs_f64() / theirs.p99.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

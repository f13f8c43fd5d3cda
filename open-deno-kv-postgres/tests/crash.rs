//! open-deno-kv-postgres under `kill -9` of a client process (the server keeps running; `tests/faults.rs`
//! restarts the server):
//!
//! - `crash_trials`: open-deno-kv-conformance's crash harness (see `open_deno_kv_conformance::crash`) kills a child
//!   process committing sums, multi-key writes, overwrites and enqueues at random moments,
//!   reopens the store, and checks that every acknowledged commit is there, whole, with its
//!   message delivered exactly once;
//! - `a_consumer_killed_holding_a_message_leaves_it_to_the_next`: a child process that holds a
//!   message when it is killed leaves it to the next consumer once its lease has run out.
//!
//! The parent starts one throwaway cluster and hands its URL to the children in
//! [`URL_VARIABLE`]. Each crash trial's directory names the PostgreSQL schema its store lives
//! in, so trials do not see each other.
//!
//! ```sh
//! cargo test -p open-deno-kv-postgres --test crash                       # 3 crash trials
//! KV_CRASH_TRIALS=20 cargo test -p open-deno-kv-postgres --test crash    # a deep run
//! ```

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use libtest_mimic::{Arguments, Failed, Trial};
use open_deno_kv_conformance::crash::{CrashConfig, child_main_if_requested, run_crash_trials};
use open_deno_kv_engine_kit::{Backend, Clock, KvError, ManualClock, SystemClock};
use open_deno_kv_postgres::testing::{ClusterOptions, TestCluster, schema_for_path};
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};

mod common;
use common::message_write;

/// The cluster's URL, from the parent to its children.
const URL_VARIABLE: &str = "KV_POSTGRES_CRASH_URL";
/// Set (to anything) in a child that is to take a message and hold it until killed.
const CONSUMER_VARIABLE: &str = "KV_POSTGRES_CRASH_CONSUMER";
/// The schema of the killed-consumer test.
const CONSUMER_SCHEMA: &str = "killed_consumer";
/// What the consumer child prints once it holds the message.
const HOLDING: &str = "holding";

fn main() -> ExitCode {
    if let Ok(url) = std::env::var(URL_VARIABLE) {
        if let Some(code) = child_main_if_requested(&|dir: &Path| open(&url, dir)) {
            return code;
        }
        if std::env::var_os(CONSUMER_VARIABLE).is_some() {
            return consumer_child(&url);
        }
    }
    let Some(cluster) = TestCluster::start_or_skip(ClusterOptions::default()) else {
        return ExitCode::SUCCESS;
    };
    let url = cluster.url();
    let mut args = Arguments::from_args();
    // The trials start child processes of their own: one at a time.
    args.test_threads = Some(1);
    let crash_url = url.clone();
    let trials = vec![
        Trial::test("crash_trials", move || {
            let config = CrashConfig {
                child_env: vec![(URL_VARIABLE.into(), crash_url.clone().into())],
                ..CrashConfig::default()
            }
            .with_env()?;
            let report = run_crash_trials(&config, &|dir: &Path| open(&crash_url, dir))?;
            report.check().map_err(Failed::from)
        }),
        Trial::test(
            "a_consumer_killed_holding_a_message_leaves_it_to_the_next",
            move || killed_consumer(&url),
        ),
    ];
    let code = libtest_mimic::run(&args, trials).exit_code();
    // Stops the server and removes its files.
    drop(cluster);
    code
}

/// Opens the store of the crash trial whose directory is `dir`.
fn open(url: &str, dir: &Path) -> impl Future<Output = Result<Arc<dyn Backend>, KvError>> + use<> {
    open_schema(url, schema_for_path(dir), Arc::new(SystemClock))
}

/// Opens the store in `schema`, on `clock`.
fn open_schema(
    url: &str,
    schema: String,
    clock: Arc<dyn Clock>,
) -> impl Future<Output = Result<Arc<dyn Backend>, KvError>> + use<> {
    let url = url.to_owned();
    let options = PostgresOptions {
        schema,
        clock,
        ..PostgresOptions::default()
    };
    async move {
        let backend = PostgresBackend::open_with(&url, options).await?;
        Ok(Arc::new(backend) as Arc<dyn Backend>)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Failed> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("cannot start a tokio runtime: {e}")))
}

/// The consumer child: takes a message, says so, and waits to be killed.
fn consumer_child(url: &str) -> ExitCode {
    let outcome: Result<(), Failed> = runtime().and_then(|runtime| {
        runtime.block_on(async {
            let kv = open_schema(url, CONSUMER_SCHEMA.to_owned(), Arc::new(SystemClock)).await?;
            let message = kv.dequeue_next_message().await?.ok_or("closed")?;
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "{HOLDING} {}",
                String::from_utf8_lossy(message.payload())
            )
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())?;
            drop(out);
            tokio::time::sleep(Duration::from_secs(600)).await;
            Err(Failed::from("the parent never killed this child"))
        })
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            eprintln!("open-deno-kv-postgres consumer child: {failed:?}");
            ExitCode::FAILURE
        }
    }
}

/// A child takes a message and is killed holding it; the parent's clock then moves past the
/// child's lease (no sleeping): the next dequeue gets the message, and it is finished once.
fn killed_consumer(url: &str) -> Result<(), Failed> {
    let clock = ManualClock::new(SystemClock.now());
    runtime()?.block_on(async {
        let kv = open_schema(url, CONSUMER_SCHEMA.to_owned(), Arc::new(clock.clone())).await?;
        kv.atomic_write(message_write(b"orphaned", &clock))
            .await?
            .ok_or("no checks, yet not committed")?;

        let mut child = Command::new(std::env::current_exe()?)
            .env(URL_VARIABLE, url)
            .env(CONSUMER_VARIABLE, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await??;
        child.kill()?;
        child.wait()?;
        if line.trim_end() != format!("{HOLDING} orphaned") {
            return Err(format!("the child said {line:?}").into());
        }
        let listed = kv.queued_messages().await?;
        if listed.len() != 1 {
            return Err(format!("{} messages listed, not 1", listed.len()).into());
        }

        // The child's lease (5 s, renewed every 2 s while it lived) has run out by then.
        clock.advance(Duration::from_secs(30));
        let message = tokio::time::timeout(Duration::from_secs(10), kv.dequeue_next_message())
            .await
            .map_err(|_| "the killed consumer's message is stuck")??
            .ok_or("closed")?;
        if message.payload() != b"orphaned" {
            return Err("another message came".into());
        }
        message.finish(true).await?;
        if !kv.queued_messages().await?.is_empty() {
            return Err("the message is still queued after its success".into());
        }
        kv.close().await?;
        Ok(())
    })
}

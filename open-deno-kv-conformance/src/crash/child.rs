//! The child process: opens the backend, then commits the write stream from several tasks at
//! once, announcing each write before it is issued and acknowledging it after it returns, until
//! the parent kills it.

use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use open_deno_kv_model::{Backend, KvError};

use super::check::{ACK, BEGIN, READY};
use super::workload::WriteSpec;

/// Set in the child's environment to the data directory: its presence makes a test binary act as
/// the child.
pub const CHILD_ENV: &str = "KV_CRASH_CHILD";
const SEED_ENV: &str = "KV_CRASH_CHILD_SEED";
const FIRST_ID_ENV: &str = "KV_CRASH_CHILD_FIRST_ID";
const WRITERS_ENV: &str = "KV_CRASH_CHILD_WRITERS";
const MAX_WRITES_ENV: &str = "KV_CRASH_CHILD_MAX_WRITES";
const QUEUES_ENV: &str = "KV_CRASH_CHILD_QUEUES";

/// How long a child that has written all it was allowed to waits for its kill before giving up.
const IDLE_LIMIT: Duration = Duration::from_secs(600);

/// What the parent tells one child run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChildSettings {
    /// The directory the backend keeps its files in.
    pub(crate) dir: PathBuf,
    /// The trial's workload seed.
    pub(crate) seed: u64,
    /// The first write id of this run (runs of one trial use disjoint ids).
    pub(crate) first_id: u64,
    /// How many tasks commit at once.
    pub(crate) writers: usize,
    /// How many writes the run may begin in all.
    pub(crate) max_writes: u64,
    /// Whether writes enqueue messages.
    pub(crate) queues: bool,
}

impl ChildSettings {
    /// The environment variables that carry these settings.
    pub(crate) fn to_env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            (CHILD_ENV, self.dir.clone().into_os_string()),
            (SEED_ENV, self.seed.to_string().into()),
            (FIRST_ID_ENV, self.first_id.to_string().into()),
            (WRITERS_ENV, self.writers.to_string().into()),
            (MAX_WRITES_ENV, self.max_writes.to_string().into()),
            (QUEUES_ENV, u8::from(self.queues).to_string().into()),
        ]
    }

    /// The settings in this process's environment: `None` if this is not a child.
    pub(crate) fn from_env() -> Option<Result<Self, String>> {
        let dir = PathBuf::from(std::env::var_os(CHILD_ENV)?);
        Some(Self::read_rest(dir))
    }

    fn read_rest(dir: PathBuf) -> Result<Self, String> {
        fn number(name: &str) -> Result<u64, String> {
            let text =
                std::env::var(name).map_err(|e| format!("the child needs {name} set: {e}"))?;
            text.parse()
                .map_err(|_| format!("{name}={text:?} is not a number"))
        }
        Ok(ChildSettings {
            dir,
            seed: number(SEED_ENV)?,
            first_id: number(FIRST_ID_ENV)?,
            writers: usize::try_from(number(WRITERS_ENV)?.max(1)).unwrap_or(1),
            max_writes: number(MAX_WRITES_ENV)?,
            queues: number(QUEUES_ENV)? != 0,
        })
    }
}

/// Prints one protocol line and flushes it, so it reaches the parent before the next step.
/// Holding the stdout lock keeps lines of concurrent writers whole and totally ordered.
fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        // The parent is gone: nobody is listening, stop.
        std::process::exit(2);
    }
}

fn die(message: &str) -> ! {
    eprintln!("kv-crash child: {message}");
    std::process::exit(3);
}

/// Runs the child: never returns while things go well (the parent kills it).
pub(crate) fn run_child<F, Fut>(open: &F, settings: &ChildSettings) -> ExitCode
where
    F: Fn(&Path) -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => die(&format!("cannot start a tokio runtime: {e}")),
    };
    let outcome: Result<(), String> = runtime.block_on(async {
        let kv = open(&settings.dir)
            .await
            .map_err(|e| format!("opening the backend failed: {e}"))?;
        emit(READY);
        let next = Arc::new(AtomicU64::new(settings.first_id));
        let end = settings.first_id.saturating_add(settings.max_writes);
        let tasks: Vec<_> = (0..settings.writers)
            .map(|_| {
                let kv = kv.clone();
                let next = next.clone();
                let seed = settings.seed;
                let queues = settings.queues;
                tokio::spawn(async move {
                    loop {
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        if id >= end {
                            return;
                        }
                        let write = WriteSpec::generate(seed, id, queues).atomic_write();
                        // Announced before it is issued, acknowledged after it returns: the
                        // parent learns which writes were in flight at the kill.
                        emit(&format!("{BEGIN}{id}"));
                        match kv.atomic_write(write).await {
                            Ok(Some(done)) => emit(&format!("{ACK}{id} {}", done.versionstamp)),
                            Ok(None) => die(&format!(
                                "write {id} has no checks, yet the backend reported a failed check"
                            )),
                            Err(e) => die(&format!("write {id} failed: {e}")),
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await
                .map_err(|e| format!("a writer task failed: {e}"))?;
        }
        // Everything allowed is written: wait for the kill.
        emit("kv-crash done");
        tokio::time::sleep(IDLE_LIMIT).await;
        Err("the parent never killed this child".to_owned())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => die(&message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_survive_the_environment_round_trip() {
        let settings = ChildSettings {
            dir: PathBuf::from("/tmp/some dir"),
            seed: u64::MAX,
            first_id: 1 << 32,
            writers: 3,
            max_writes: 10,
            queues: false,
        };
        let env: std::collections::HashMap<_, _> = settings.to_env().into_iter().collect();
        assert_eq!(env[SEED_ENV], OsString::from(u64::MAX.to_string()));
        assert_eq!(env[CHILD_ENV], OsString::from("/tmp/some dir"));
        assert_eq!(env[QUEUES_ENV], OsString::from("0"));
    }
}

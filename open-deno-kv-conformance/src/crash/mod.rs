//! # Crash harness: do acknowledged commits survive `kill -9`?
//!
//! A durable backend promises that a commit which returned `Ok` is in the store, whole, when the
//! data is opened again after the process dies at any moment. This module checks that promise
//! with real processes and real kills:
//!
//! 1. The parent (your test binary) starts a copy of itself as a *child* (it re-executes
//!    [`std::env::current_exe`] with [`CHILD_ENV`] set to a data directory).
//! 2. The child opens your backend on that directory and commits a stream of atomic writes from
//!    several tasks at once: `sum`s into shared `u64` counters, groups of keys that must appear
//!    together, overwrites of shared slots, and enqueues. Before issuing write `n` it prints
//!    `kv-crash begin n`; after the commit returns `Ok` it prints `kv-crash ack n <versionstamp>`
//!    (flushed at once), so the parent knows exactly which writes were acknowledged and which
//!    were in flight.
//! 3. After a random, seeded delay the parent kills the child with `SIGKILL`
//!    ([`std::process::Child::kill`]), reopens the directory with your backend, reads everything
//!    back, dequeues every message (finishing each with success), and commits a probe write.
//! 4. The checker compares what it found with what was acknowledged. Each trial repeats steps
//!    1–4 [`CrashConfig::kills_per_trial`] times on the same data, so recovery itself is crashed
//!    into and later recoveries must agree with earlier ones.
//!
//! ## What is checked
//!
//! Every write sets its own *marker* key in the same atomic write as everything else it does, so
//! "is write `n` in the store" has an exact answer, and every other part of write `n` must be
//! present exactly when its marker is:
//!
//! - **no loss**: every acknowledged write's marker is stored with the acknowledged
//!   versionstamp, with all its group keys (exact values), and its message is delivered;
//! - **no partial commit**: for every write, acknowledged or in flight, all of its parts are
//!   visible or none (group keys without marker, a message without its write, a marker without
//!   its group keys are all reported);
//! - **sums are exact**: each counter equals the sum of the operands of the writes whose markers
//!   are visible (so it is at least the acknowledged sum and at most acknowledged + in flight),
//!   and carries the versionstamp of the last of them; each slot holds the visible write with the
//!   greatest versionstamp;
//! - **queues lose and duplicate nothing**: after reopening, every visible write's message is
//!   delivered exactly once (acknowledged or not), none is delivered twice, none that an earlier
//!   recovery finished comes back, none without its write;
//! - **versionstamps**: distinct for distinct acknowledged commits, increasing in real time (a
//!   write that began after another's acknowledgment gets a greater one; with one writer that is
//!   "strictly increasing in ack order"), stored exactly as acknowledged, and below the
//!   versionstamp of the parent's first commit after recovery (they never go back);
//! - **stability**: a write visible after one recovery stays visible after the next, an absent
//!   one stays absent; no key under `["kv-crash"]` that no write made.
//!
//! It tests *process* crashes: the operating system survives, so data written to the OS but not
//! yet synced to the disk survives too. Power loss is out of its reach.
//!
//! ## Hooking a backend up
//!
//! One test file, with `harness = false` in its `[[test]]` entry:
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::Arc;
//! use open_deno_kv_model::{Backend, KvError};
//! # fn open_my_engine(_path: &Path) -> Result<Arc<dyn Backend>, KvError> { unimplemented!() }
//!
//! open_deno_kv_conformance::crash_main!(|dir: &Path| {
//!     // Open synchronously here, or compute the paths here and open inside `async move`:
//!     // the future must not borrow `dir`.
//!     let opened = open_my_engine(&dir.join("data.db"));
//!     async move { opened }
//! });
//! ```
//!
//! The same closure opens the store in the child (to write) and in the parent (to check), so the
//! closure must open the data under `dir` with the same options both times. Run it with
//! `cargo test --test crash`; `KV_CRASH_TRIALS=20` for a deep run (see [`CrashConfig`] for every
//! knob). For a custom `main`, call [`child_main_if_requested`] first and [`run_crash_trials`]
//! after.

mod check;
mod child;
#[cfg(test)]
mod tests;
mod workload;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use open_deno_kv_model::{
    AtomicWrite, Backend, KvEntry, KvError, KvValue, Mutation, ReadRange, SnapshotRead,
};

pub use check::{Violation, ViolationKind};
pub use child::CHILD_ENV;

use check::{History, READY, Recovered, RecoveryStats};
use child::ChildSettings;
use workload::{SplitMix64, prefix_key, probe_key};

/// Environment variable: number of trials (default 3).
pub const TRIALS_ENV: &str = "KV_CRASH_TRIALS";
/// Environment variable: kills per trial (default 2).
pub const KILLS_ENV: &str = "KV_CRASH_KILLS";
/// Environment variable: the run's seed, decimal or `0x` hex (default: from the clock).
pub const SEED_ENV: &str = "KV_CRASH_SEED";
/// Environment variable: concurrent writer tasks in the child (default 4).
pub const WRITERS_ENV: &str = "KV_CRASH_WRITERS";
/// Environment variable: the longest kill delay in milliseconds (default 700).
pub const MAX_DELAY_ENV: &str = "KV_CRASH_MAX_DELAY_MS";

/// How a crash run goes. [`CrashConfig::default`] is the short run `cargo test` does;
/// [`CrashConfig::from_env`] applies the `KV_CRASH_*` variables on top.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Independent trials, each on a fresh directory ([`TRIALS_ENV`]).
    pub trials: usize,
    /// Child runs killed per trial, all on the trial's directory ([`KILLS_ENV`]).
    pub kills_per_trial: usize,
    /// Seed of everything random: kill delays and the writes themselves ([`SEED_ENV`]). Timing
    /// still varies between runs, so a seed reproduces the choices, not the exact interleaving.
    pub seed: u64,
    /// Writer tasks committing at once in the child ([`WRITERS_ENV`]); more than one exercises
    /// group commit and concurrent acknowledgments.
    pub writers: usize,
    /// The shortest delay between the child reporting its backend open and the kill.
    pub min_kill_delay: Duration,
    /// The longest such delay ([`MAX_DELAY_ENV`]); each kill picks uniformly in between.
    pub max_kill_delay: Duration,
    /// The most writes one child run begins (it then waits to be killed).
    pub max_writes_per_run: u64,
    /// How long the child may take to open the backend.
    pub startup_timeout: Duration,
    /// How long the parent waits for each message it knows must still be in the queue.
    pub message_timeout: Duration,
    /// How long the parent keeps dequeuing once every expected message arrived, to catch
    /// duplicates.
    pub extra_message_wait: Duration,
    /// How long reopening and checking one kill may take.
    pub recovery_timeout: Duration,
    /// Arguments for the child (e.g. a libtest filter if the child branch lives in a `#[test]`).
    pub child_args: Vec<OsString>,
    /// Extra environment for the child (e.g. options your open closure reads).
    pub child_env: Vec<(OsString, OsString)>,
    /// Print one line per kill and the totals (to stdout).
    pub verbose: bool,
}

impl Default for CrashConfig {
    fn default() -> Self {
        CrashConfig {
            trials: 3,
            kills_per_trial: 2,
            seed: clock_seed(),
            writers: 4,
            min_kill_delay: Duration::from_millis(20),
            max_kill_delay: Duration::from_millis(700),
            max_writes_per_run: 200_000,
            startup_timeout: Duration::from_secs(60),
            message_timeout: Duration::from_secs(10),
            extra_message_wait: Duration::from_millis(250),
            recovery_timeout: Duration::from_secs(300),
            child_args: Vec::new(),
            child_env: Vec::new(),
            verbose: true,
        }
    }
}

impl CrashConfig {
    /// The default configuration with the `KV_CRASH_*` variables applied.
    pub fn from_env() -> Result<Self, String> {
        Self::default().with_env()
    }

    /// Applies [`TRIALS_ENV`], [`KILLS_ENV`], [`SEED_ENV`], [`WRITERS_ENV`] and
    /// [`MAX_DELAY_ENV`] where set; an unreadable value is an error, not a silent default.
    pub fn with_env(mut self) -> Result<Self, String> {
        if let Some(n) = env_number(TRIALS_ENV)? {
            self.trials = to_usize(n);
        }
        if let Some(n) = env_number(KILLS_ENV)? {
            self.kills_per_trial = to_usize(n).max(1);
        }
        if let Some(n) = env_number(SEED_ENV)? {
            self.seed = n;
        }
        if let Some(n) = env_number(WRITERS_ENV)? {
            self.writers = to_usize(n).max(1);
        }
        if let Some(n) = env_number(MAX_DELAY_ENV)? {
            self.max_kill_delay = Duration::from_millis(n);
            self.min_kill_delay = self.min_kill_delay.min(self.max_kill_delay);
        }
        Ok(self)
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn env_number(name: &str) -> Result<Option<u64>, String> {
    let Some(value) = std::env::var_os(name) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .ok_or_else(|| format!("{name} is not valid UTF-8"))?
        .trim();
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed
        .map(Some)
        .map_err(|_| format!("{name}={text:?} is not a number"))
}

fn clock_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SplitMix64::new(nanos ^ u64::from(std::process::id())).next_u64()
}

/// What a crash run did and found.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// The run's seed.
    pub seed: u64,
    /// Trials run.
    pub trials: usize,
    /// Children killed.
    pub kills: usize,
    /// Writes the children began.
    pub begun: usize,
    /// Writes acknowledged before a kill.
    pub acked: usize,
    /// Unacknowledged writes found committed after a kill.
    pub landed_unacked: usize,
    /// Unacknowledged writes found absent after a kill.
    pub vanished_unacked: usize,
    /// Queue messages delivered by the recoveries.
    pub messages: usize,
    /// Everything the checker found wrong; empty for a correct backend.
    pub violations: Vec<Violation>,
    /// Data directories kept for inspection because their trial found a violation.
    pub kept_dirs: Vec<std::path::PathBuf>,
}

impl CrashReport {
    /// How many violations of one kind were found.
    pub fn count(&self, kind: ViolationKind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    /// The one-line summary printed at the end of a run.
    pub fn totals(&self) -> String {
        let others = self.count(ViolationKind::Versionstamp) + self.count(ViolationKind::Corrupt);
        format!(
            "crash totals: {} trials, {} kills, {} writes begun, {} acknowledged, {} unacknowledged \
             landed, {} unacknowledged vanished, {} messages delivered | losses {}, partial commits \
             {}, duplicate messages {}, other violations {} (seed {:#x})",
            self.trials,
            self.kills,
            self.begun,
            self.acked,
            self.landed_unacked,
            self.vanished_unacked,
            self.messages,
            self.count(ViolationKind::Loss),
            self.count(ViolationKind::PartialCommit),
            self.count(ViolationKind::DuplicateMessage),
            others,
            self.seed,
        )
    }

    /// `Ok` if no violation was found; otherwise an error listing them (the first 30).
    pub fn check(&self) -> Result<(), String> {
        if self.violations.is_empty() {
            return Ok(());
        }
        let mut text = format!(
            "the backend broke its durability promises {} times\n{}\n",
            self.violations.len(),
            self.totals()
        );
        for v in self.violations.iter().take(30) {
            let _ = writeln!(text, "  {v}");
        }
        if self.violations.len() > 30 {
            let _ = writeln!(text, "  … and {} more", self.violations.len() - 30);
        }
        for dir in &self.kept_dirs {
            let _ = writeln!(text, "data kept for inspection: {}", dir.display());
        }
        let _ = write!(
            text,
            "rerun the same choices with {SEED_ENV}={:#x} {TRIALS_ENV}={}",
            self.seed, self.trials
        );
        Err(text)
    }
}

/// If this process was started as a crash child (it has [`CHILD_ENV`]), runs the child with
/// `open` and returns its exit code (normally it is killed before); otherwise `None`. Call it
/// first thing in `main` (or in the `#[test]` named by [`CrashConfig::child_args`]).
pub fn child_main_if_requested<F, Fut>(open: &F) -> Option<ExitCode>
where
    F: Fn(&Path) -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    let settings = ChildSettings::from_env()?;
    Some(match settings {
        Ok(settings) => child::run_child(open, &settings),
        Err(message) => {
            eprintln!("kv-crash child: {message}");
            ExitCode::FAILURE
        }
    })
}

/// `main` for a crash test target (`harness = false`): acts as the child if this process is one,
/// otherwise runs [`run_crash_trials`] with [`CrashConfig::from_env`] as one libtest-style test
/// named `crash_trials` (so `--list` and filters work) and fails on any violation.
pub fn crash_main<F, Fut>(open: F) -> ExitCode
where
    F: Fn(&Path) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    crash_main_with(CrashConfig::default(), open)
}

/// [`crash_main`] starting from `config` instead of the default (the `KV_CRASH_*` variables
/// still apply on top).
pub fn crash_main_with<F, Fut>(config: CrashConfig, open: F) -> ExitCode
where
    F: Fn(&Path) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    if let Some(code) = child_main_if_requested(&open) {
        return code;
    }
    let mut args = libtest_mimic::Arguments::from_args();
    args.test_threads = args.test_threads.or(Some(1));
    let trial = libtest_mimic::Trial::test("crash_trials", move || {
        let config = config.with_env()?;
        let report = run_crash_trials(&config, &open)?;
        report.check().map_err(Into::into)
    });
    libtest_mimic::run(&args, vec![trial]).exit_code()
}

/// Defines `fn main` for a crash test target; see the [module documentation](crate::crash).
///
/// `crash_main!(open)` or `crash_main!(config = CrashConfig { .. }, open)`, where `open` is a
/// closure `|dir: &Path| async { Ok(Arc<dyn Backend>) }` that opens the backend on files under
/// `dir` (it must not borrow `dir` in the future: compute paths first, then `async move`).
#[macro_export]
macro_rules! crash_main {
    (config = $config:expr, $open:expr $(,)?) => {
        fn main() -> ::std::process::ExitCode {
            $crate::crash::crash_main_with($config, $open)
        }
    };
    ($open:expr $(,)?) => {
        fn main() -> ::std::process::ExitCode {
            $crate::crash::crash_main($open)
        }
    };
}

/// Runs every trial of `config` against the backend `open` opens, killing child copies of the
/// current executable (which must call [`child_main_if_requested`] with the same `open` before
/// anything else).
///
/// `Err` means the harness could not do its job (the child failed to start, exited by itself,
/// the backend failed to reopen); what the backend got wrong is in
/// [`CrashReport::violations`] (see [`CrashReport::check`]).
pub fn run_crash_trials<F, Fut>(config: &CrashConfig, open: &F) -> Result<CrashReport, String>
where
    F: Fn(&Path) -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let mut report = CrashReport {
        seed: config.seed,
        ..Default::default()
    };
    if config.verbose {
        println!(
            "crash harness: {} trials x {} kills, {} writers, kill {:?}..{:?} after open, seed {:#x}",
            config.trials,
            config.kills_per_trial,
            config.writers,
            config.min_kill_delay,
            config.max_kill_delay,
            config.seed
        );
    }
    for trial in 0..config.trials {
        run_trial(config, open, &runtime, trial, &mut report)?;
        report.trials += 1;
    }
    if config.verbose {
        println!("{}", report.totals());
    }
    Ok(report)
}

fn run_trial<F, Fut>(
    config: &CrashConfig,
    open: &F,
    runtime: &tokio::runtime::Runtime,
    trial: usize,
    report: &mut CrashReport,
) -> Result<(), String>
where
    F: Fn(&Path) -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    let trial_seed = workload::mix(config.seed, trial as u64);
    let mut rng = SplitMix64::new(trial_seed);
    let dir = tempfile::Builder::new()
        .prefix("kv-crash-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let data = dir.path().join("data");
    std::fs::create_dir(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;

    // Create the store in the parent first (like a real deployment, and to learn whether the
    // backend has queues).
    let queues = runtime.block_on(async {
        let kv = open(&data)
            .await
            .map_err(|e| format!("opening a fresh store failed: {e}"))?;
        let caps = kv.capabilities();
        kv.close()
            .await
            .map_err(|e| format!("closing a fresh store failed: {e}"))?;
        if !caps.durable {
            return Err("the backend does not report itself durable".to_owned());
        }
        Ok(caps.queues)
    })?;

    let mut history = History::new(trial_seed, queues);
    let label = format!(
        "trial {}/{} (seed {trial_seed:#x})",
        trial + 1,
        config.trials
    );
    for kill in 0..config.kills_per_trial {
        let span = config.max_kill_delay.saturating_sub(config.min_kill_delay);
        let span_ms = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
        let delay = config.min_kill_delay + Duration::from_millis(rng.below(span_ms + 1));
        let settings = ChildSettings {
            dir: data.clone(),
            seed: trial_seed,
            first_id: (kill as u64) << 32,
            writers: config.writers,
            max_writes: config.max_writes_per_run,
            queues,
        };
        let run = run_child_and_kill(config, &settings, delay)
            .map_err(|e| format!("{label}, kill {}: {e}", kill + 1))?;
        let mut violations = history
            .record_child_output(&run.stdout)
            .map_err(|e| format!("{label}, kill {}: {e}", kill + 1))?;
        let started = Instant::now();
        let recovered = runtime
            .block_on(async {
                tokio::time::timeout(
                    config.recovery_timeout,
                    recover(open, &data, &history, config),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "recovery took longer than {:?}",
                        config.recovery_timeout
                    ))
                })
            })
            .map_err(|e| format!("{label}, kill {}: {e}", kill + 1))?;
        let recovery_time = started.elapsed();
        let (found, stats) = history.check(&recovered);
        violations.extend(found);
        record(report, &stats);
        report.kills += 1;
        if config.verbose {
            println!(
                "{label} kill {}/{}: killed {:?} after open; {} writes begun, {} acked, {} \
                 unacked landed, {} unacked vanished; {} messages delivered ({} expected); \
                 recovery {:.0?}; {}",
                kill + 1,
                config.kills_per_trial,
                run.delay,
                stats.begun,
                stats.acked,
                stats.landed_unacked,
                stats.vanished_unacked,
                stats.messages,
                stats.expected_messages,
                recovery_time,
                if violations.is_empty() {
                    "ok".to_owned()
                } else {
                    format!("{} VIOLATIONS", violations.len())
                }
            );
        }
        if !violations.is_empty() {
            let context = format!("{label}, kill {}: ", kill + 1);
            report
                .violations
                .extend(violations.into_iter().map(|mut v| {
                    v.message.insert_str(0, &context);
                    v
                }));
            // Later kills would only repeat what is already broken; keep the data to look at.
            report.kept_dirs.push(dir.keep());
            return Ok(());
        }
    }
    Ok(())
}

fn record(report: &mut CrashReport, stats: &RecoveryStats) {
    report.begun += stats.begun;
    report.acked += stats.acked;
    report.landed_unacked += stats.landed_unacked;
    report.vanished_unacked += stats.vanished_unacked;
    report.messages += stats.messages;
}

/// What one killed child printed.
struct ChildRun {
    stdout: String,
    /// How long after the child's "ready" line the kill came.
    delay: Duration,
}

/// Reads a pipe to its end on a thread, forwarding each line (lossily decoded, with its newline
/// if it had one) through a channel.
fn forward_lines(pipe: impl Read + Send + 'static) -> (mpsc::Receiver<String>, JoinHandle<()>) {
    let (send, receive) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if send
                        .send(String::from_utf8_lossy(&line).into_owned())
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    (receive, thread)
}

/// Kills and reaps the child when dropped, so no early return leaves one running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_child_and_kill(
    config: &CrashConfig,
    settings: &ChildSettings,
    delay: Duration,
) -> Result<ChildRun, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the test binary: {e}"))?;
    let mut command = Command::new(exe);
    command
        .args(&config.child_args)
        .envs(config.child_env.iter().map(|(k, v)| (k, v)))
        .envs(settings.to_env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = Reaped(
        command
            .spawn()
            .map_err(|e| format!("cannot start the child process: {e}"))?,
    );
    let stdout = child
        .0
        .stdout
        .take()
        .ok_or("the child has no stdout pipe")?;
    let stderr = child
        .0
        .stderr
        .take()
        .ok_or("the child has no stderr pipe")?;
    let (lines, stdout_thread) = forward_lines(stdout);
    let (err_lines, stderr_thread) = forward_lines(stderr);
    let mut out = String::new();

    // Wait for "ready".
    let started = Instant::now();
    loop {
        match lines.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => {
                out.push_str(&line);
                if line.trim_end() == READY {
                    break;
                }
            }
            // Stdout closed: the child is exiting; `try_wait` below reports it.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            let _ = stdout_thread.join();
            let _ = stderr_thread.join();
            out.extend(lines.try_iter());
            let err: String = err_lines.try_iter().collect();
            return Err(format!(
                "the child exited ({status}) before opening the backend\n--- child stdout ---\n{out}\n--- child stderr ---\n{err}"
            ));
        }
        if started.elapsed() > config.startup_timeout {
            return Err(format!(
                "the child did not open the backend within {:?}",
                config.startup_timeout
            ));
        }
    }

    // Let it write, then kill it.
    let ready_at = Instant::now();
    let deadline = ready_at + delay;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(5)));
        if let Ok(Some(status)) = child.0.try_wait() {
            let _ = stdout_thread.join();
            let _ = stderr_thread.join();
            out.extend(lines.try_iter());
            let err: String = err_lines.try_iter().collect();
            let tail: String = out.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
            return Err(format!(
                "the child exited ({status}) before it was killed; its last lines (newest first): \
                 {tail}\n--- child stderr ---\n{err}"
            ));
        }
    }
    child
        .0
        .kill()
        .map_err(|e| format!("cannot kill the child: {e}"))?;
    let killed_after = ready_at.elapsed();
    child
        .0
        .wait()
        .map_err(|e| format!("cannot reap the killed child: {e}"))?;
    // The pipes close with the process; everything it wrote before dying is still readable.
    let _ = stdout_thread.join();
    let _ = stderr_thread.join();
    out.extend(lines.try_iter());
    Ok(ChildRun {
        stdout: out,
        delay: killed_after,
    })
}

/// Reopens the store after a kill and gathers what the checker needs.
async fn recover<F, Fut>(
    open: &F,
    data: &Path,
    history: &History,
    config: &CrashConfig,
) -> Result<Recovered, String>
where
    F: Fn(&Path) -> Fut,
    Fut: Future<Output = Result<Arc<dyn Backend>, KvError>>,
{
    let kv = open(data)
        .await
        .map_err(|e| format!("reopening the store after the kill failed: {e}"))?;
    let entries = scan(&*kv).await?;
    let messages = if history.queues() {
        let expected = history.expected_messages(&entries);
        drain(&*kv, expected, config).await?
    } else {
        Vec::new()
    };
    let probe = kv
        .atomic_write(AtomicWrite {
            mutations: vec![Mutation::set(probe_key(), KvValue::U64(0))],
            ..Default::default()
        })
        .await
        .map_err(|e| format!("the parent's write after recovery failed: {e}"))?
        .ok_or("the parent's write after recovery (no checks) reported a failed check")?;
    kv.close()
        .await
        .map_err(|e| format!("closing the recovered store failed: {e}"))?;
    Ok(Recovered {
        entries,
        messages,
        probe: probe.versionstamp,
    })
}

/// Every entry under `["kv-crash"]`, page by page, from one snapshot per page. (Nothing writes
/// while the parent reads, so pages agree.)
async fn scan(kv: &dyn Backend) -> Result<Vec<KvEntry>, String> {
    const PAGE: u32 = 500;
    let mut range = ReadRange::prefix(&prefix_key(), PAGE).map_err(|e| e.to_string())?;
    let mut entries: Vec<KvEntry> = Vec::new();
    let mut seen = BTreeSet::new();
    loop {
        let mut out = kv
            .snapshot_read(SnapshotRead {
                ranges: vec![range.clone()],
                ..Default::default()
            })
            .await
            .map_err(|e| format!("reading the recovered store failed: {e}"))?;
        let page = out.pop().map(|o| o.entries).unwrap_or_default();
        let full = page.len() >= PAGE as usize;
        for entry in page {
            if !seen.insert(entry.key.clone()) {
                return Err(format!(
                    "a list returned the key {:?} twice while paging",
                    entry.key
                ));
            }
            entries.push(entry);
        }
        match entries.last() {
            Some(last) if full => {
                range.start = last.key.to_vec();
                range.start.push(0);
            }
            _ => return Ok(entries),
        }
    }
}

/// Dequeues until `expected` messages arrived and then no more come for
/// [`CrashConfig::extra_message_wait`], finishing each with success.
async fn drain(
    kv: &dyn Backend,
    expected: usize,
    config: &CrashConfig,
) -> Result<Vec<Vec<u8>>, String> {
    let mut messages = Vec::new();
    // A backend that redelivers forever must not hang the harness: far more than expected is
    // enough to report duplicates.
    let cap = expected * 2 + 100;
    while messages.len() < cap {
        let wait = if messages.len() < expected {
            config.message_timeout
        } else {
            config.extra_message_wait
        };
        match tokio::time::timeout(wait, kv.dequeue_next_message()).await {
            Err(_) | Ok(Ok(None)) => break,
            Ok(Err(e)) => return Err(format!("dequeuing after recovery failed: {e}")),
            Ok(Ok(Some(message))) => {
                messages.push(message.payload().to_vec());
                message
                    .finish(true)
                    .await
                    .map_err(|e| format!("finishing a message after recovery failed: {e}"))?;
            }
        }
    }
    Ok(messages)
}

//! The crash harness's teeth, end to end: real child processes, real `SIGKILL`s.
//!
//! A toy durable engine, `LogBackend`, keeps its data in memory and appends every commit to a
//! log file (one text line per record, a `C` line closing each commit); reopening replays the
//! complete commits. Written correctly it survives `kill -9` and the harness must pass it. Then
//! each of four classic durability bugs is planted in it, and the harness must report the right
//! kind of violation:
//!
//! | bug | what the harness must report |
//! |---|---|
//! | `acks-before-persisting`: commits sit in a buffer flushed only by `close` | losses |
//! | `torn-commits`: records written one by one, replay ignores commit boundaries | partial commits |
//! | `forgets-finished-messages`: finishing a message is not logged | duplicate messages |
//! | `restarts-versionstamps`: the version counter restarts at 0 on reopen | versionstamp errors |
//!
//! The bug travels to the child in an environment variable ([`CrashConfig::child_env`]).
//! `TEETH_DEBUG=1` prints every violation found, not just the first of the expected kind.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use open_deno_kv_conformance::crash::{self, CrashConfig, ViolationKind};
use open_deno_kv_engine_kit::chrono::Utc;
use open_deno_kv_engine_kit::{
    Backend, Capabilities, Checked, CommitResult, Engine, KvEntry, KvError, KvValue, Limits,
    QueueMessageHandle, ReadRangeOutput, StoredEntry, SystemClock, ValidatedRead, ValidatedWrite,
    Versionstamp, stage_atomic_write,
};

/// Tells the child which bug to plant.
const BUG_ENV: &str = "KV_CRASH_TOY_BUG";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    AcksBeforePersisting,
    TornCommits,
    ForgetsFinishedMessages,
    RestartsVersionstamps,
}

impl Bug {
    const ALL: [Bug; 5] = [
        Bug::None,
        Bug::AcksBeforePersisting,
        Bug::TornCommits,
        Bug::ForgetsFinishedMessages,
        Bug::RestartsVersionstamps,
    ];

    fn name(self) -> &'static str {
        match self {
            Bug::None => "none",
            Bug::AcksBeforePersisting => "acks-before-persisting",
            Bug::TornCommits => "torn-commits",
            Bug::ForgetsFinishedMessages => "forgets-finished-messages",
            Bug::RestartsVersionstamps => "restarts-versionstamps",
        }
    }

    /// What the harness must report for this bug.
    fn expected(self) -> Option<ViolationKind> {
        match self {
            Bug::None => None,
            Bug::AcksBeforePersisting => Some(ViolationKind::Loss),
            Bug::TornCommits => Some(ViolationKind::PartialCommit),
            Bug::ForgetsFinishedMessages => Some(ViolationKind::DuplicateMessage),
            Bug::RestartsVersionstamps => Some(ViolationKind::Versionstamp),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, KvError> {
    let bad = || KvError::invalid_argument(format!("bad hex in the log: {text:?}"));
    if !text.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// One log record.
#[derive(Debug, Clone)]
enum Record {
    /// `P key encoding value version`
    Put(Vec<u8>, KvValue, u64),
    /// `D key`
    Delete(Vec<u8>),
    /// `Q id payload`
    Enqueue(String, Vec<u8>),
    /// `F id`: a message finished with success.
    Finish(String),
    /// `C version`: the records since the previous `C` form one commit.
    Commit(u64),
}

impl Record {
    fn line(&self) -> String {
        match self {
            Record::Put(key, value, version) => {
                let (bytes, encoding) = value.encode();
                format!(
                    "P {} {} {} {version}\n",
                    hex(key),
                    encoding.id(),
                    hex(&bytes)
                )
            }
            Record::Delete(key) => format!("D {}\n", hex(key)),
            Record::Enqueue(id, payload) => format!("Q {id} {}\n", hex(payload)),
            Record::Finish(id) => format!("F {id}\n"),
            Record::Commit(version) => format!("C {version}\n"),
        }
    }

    fn parse(line: &str) -> Result<Record, KvError> {
        let fields: Vec<&str> = line.split(' ').collect();
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|_| KvError::invalid_argument(format!("bad log line {line:?}")))
        };
        Ok(match fields.as_slice() {
            ["P", key, encoding, value, version] => {
                let encoding = i64::try_from(number(encoding)?).unwrap_or(-1);
                let value = KvValue::decode(unhex(value)?, encoding)
                    .map_err(|e| KvError::invalid_argument(e.to_string()))?;
                Record::Put(unhex(key)?, value, number(version)?)
            }
            ["D", key] => Record::Delete(unhex(key)?),
            ["Q", id, payload] => Record::Enqueue((*id).to_owned(), unhex(payload)?),
            ["F", id] => Record::Finish((*id).to_owned()),
            ["C", version] => Record::Commit(number(version)?),
            _ => return Err(KvError::invalid_argument(format!("bad log line {line:?}"))),
        })
    }
}

struct Message {
    id: String,
    payload: Vec<u8>,
}

struct State {
    entries: BTreeMap<Vec<u8>, StoredEntry>,
    pending: VecDeque<Message>,
    held: HashMap<String, Vec<u8>>,
    version: u64,
    log: File,
    /// Records written by a commit but not yet handed to the file (the lazy bug).
    unflushed: Vec<u8>,
    /// Set by close, so that dequeues waiting in their polling loop return `Ok(None)`.
    closed: bool,
}

impl State {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Put(key, value, version) => {
                self.entries.insert(
                    key,
                    StoredEntry {
                        value,
                        versionstamp: Versionstamp::from_version(version, 0),
                        expires_at: None,
                    },
                );
            }
            Record::Delete(key) => {
                self.entries.remove(&key);
            }
            Record::Enqueue(id, payload) => self.pending.push_back(Message { id, payload }),
            Record::Finish(id) => self.pending.retain(|m| m.id != id),
            Record::Commit(version) => self.version = self.version.max(version),
        }
    }
}

/// The toy engine. Correct (`Bug::None`) for process crashes: a commit's records and its `C`
/// line reach the file in one `write` before the commit is acknowledged, and replay applies only
/// commits whose `C` line is complete, and cuts whatever follows the last one off the file. (It never fsyncs: a process crash does not lose what the
/// OS already has.)
struct LogBackend {
    bug: Bug,
    state: Arc<Mutex<State>>,
}

static MESSAGE_IDS: AtomicU64 = AtomicU64::new(0);

impl LogBackend {
    fn open(path: &Path, bug: Bug) -> Result<Self, KvError> {
        let mut log = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(KvError::storage)?;
        let mut text = String::new();
        log.read_to_string(&mut text).map_err(KvError::storage)?;
        let mut state = State {
            entries: BTreeMap::new(),
            pending: VecDeque::new(),
            held: HashMap::new(),
            version: 0,
            log,
            unflushed: Vec::new(),
            closed: false,
        };
        // Only complete lines, and of those only up to the last complete commit: the kill may
        // have cut the last line, or a commit's `write` between two of its lines (the kernel
        // stops a write at a page boundary for a fatal signal). What follows is removed from the
        // file too, or the next line appended would be glued onto a cut one, and the next commit
        // replayed would take the orphaned records of the cut one for its own.
        let mut commit = Vec::new();
        let mut read = 0;
        let mut keep = 0;
        for line in text.split_inclusive('\n') {
            if !line.ends_with('\n') {
                break;
            }
            read += line.len();
            let record = Record::parse(line.trim_end_matches('\n'))?;
            match record {
                Record::Commit(_) => {
                    commit.drain(..).for_each(|r| state.apply(r));
                    state.apply(record);
                }
                Record::Finish(_) => state.apply(record),
                // The torn-commits bug: every record counts as soon as its line is complete.
                _ if bug == Bug::TornCommits => state.apply(record),
                _ => commit.push(record),
            }
            if commit.is_empty() {
                keep = read;
            }
        }
        if keep < text.len() {
            truncate_log(&state.log, keep)?;
        }
        if bug == Bug::RestartsVersionstamps {
            state.version = 0;
        }
        Ok(LogBackend {
            bug,
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// Cuts the log file back to its first `len` bytes.
fn truncate_log(log: &std::fs::File, len: usize) -> Result<(), KvError> {
    log.set_len(len as u64).map_err(KvError::storage)?;
    log.sync_all().map_err(KvError::storage)
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Hands records to the log file the way `bug` does.
fn persist(bug: Bug, state: &mut State, records: &[Record]) -> Result<(), KvError> {
    match bug {
        Bug::AcksBeforePersisting => {
            for record in records {
                state.unflushed.extend_from_slice(record.line().as_bytes());
            }
            Ok(())
        }
        Bug::TornCommits => {
            for (i, record) in records.iter().enumerate() {
                if i > 0 {
                    // Widen the window in which a kill finds the commit half written.
                    std::thread::sleep(Duration::from_micros(300));
                }
                state
                    .log
                    .write_all(record.line().as_bytes())
                    .map_err(KvError::storage)?;
            }
            Ok(())
        }
        _ => {
            // The whole commit, `C` line included, in one write.
            let text: String = records.iter().map(Record::line).collect();
            state
                .log
                .write_all(text.as_bytes())
                .map_err(KvError::storage)
        }
    }
}

impl Engine for LogBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities::none().with_durable(true).with_queues(true)
    }

    async fn snapshot_read(&self, read: ValidatedRead) -> Result<Vec<ReadRangeOutput>, KvError> {
        let state = self.lock();
        Ok(read
            .ranges
            .iter()
            .map(|range| {
                let found = state
                    .entries
                    .range(range.start.clone()..range.end.clone())
                    .map(|(key, e)| KvEntry::from_stored(key.clone(), e.clone()));
                let limit = range.limit as usize;
                let entries = if range.reverse {
                    found.rev().take(limit).collect()
                } else {
                    found.take(limit).collect()
                };
                ReadRangeOutput { entries }
            })
            .collect())
    }

    async fn atomic_write(&self, write: ValidatedWrite) -> Result<Option<CommitResult>, KvError> {
        let mut state = self.lock();
        let version = state.version + 1;
        let versionstamp = Versionstamp::from_version(version, 0);
        let stored = |key: &[u8]| Ok(state.entries.get(key).cloned());
        let Some(staged) = stage_atomic_write(stored, &write, versionstamp, Utc::now())? else {
            return Ok(None);
        };
        let mut records: Vec<Record> = staged
            .writes
            .into_iter()
            .map(|(key, entry)| match entry {
                Some(entry) => Record::Put(key, entry.value, version),
                None => Record::Delete(key),
            })
            .collect();
        for message in staged.enqueued {
            let id = format!(
                "{}-{}",
                std::process::id(),
                MESSAGE_IDS.fetch_add(1, Ordering::Relaxed)
            );
            records.push(Record::Enqueue(id, message.payload));
        }
        records.push(Record::Commit(version));
        persist(self.bug, &mut state, &records)?;
        for record in records {
            state.apply(record);
        }
        Ok(Some(CommitResult { versionstamp }))
    }

    async fn dequeue_next_message(&self) -> Result<Option<Box<dyn QueueMessageHandle>>, KvError> {
        loop {
            {
                let mut state = self.lock();
                if state.closed {
                    return Ok(None);
                }
                if let Some(message) = state.pending.pop_front() {
                    state
                        .held
                        .insert(message.id.clone(), message.payload.clone());
                    return Ok(Some(Box::new(Held {
                        state: self.state.clone(),
                        bug: self.bug,
                        id: message.id,
                        payload: message.payload,
                    })));
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn close(&self) -> Result<(), KvError> {
        let mut state = self.lock();
        state.closed = true; // ends the dequeues waiting in their loop
        let unflushed = std::mem::take(&mut state.unflushed);
        state.log.write_all(&unflushed).map_err(KvError::storage)
    }
}

/// A message handed to a consumer.
struct Held {
    state: Arc<Mutex<State>>,
    bug: Bug,
    id: String,
    payload: Vec<u8>,
}

#[async_trait]
impl QueueMessageHandle for Held {
    fn payload(&self) -> &[u8] {
        &self.payload
    }

    async fn finish(self: Box<Self>, success: bool) -> Result<(), KvError> {
        let mut state = lock(&self.state);
        state.held.remove(&self.id);
        if !success {
            state.pending.push_front(Message {
                id: self.id,
                payload: self.payload,
            });
            return Ok(());
        }
        if self.bug == Bug::ForgetsFinishedMessages {
            return Ok(());
        }
        persist(self.bug, &mut state, &[Record::Finish(self.id)])
    }
}

/// Opens the toy with `bug` on the log under `dir`.
fn open_toy(
    dir: &Path,
    bug: Bug,
) -> impl Future<Output = Result<Arc<dyn Backend>, KvError>> + use<> {
    let opened = LogBackend::open(&dir.join("toy.log"), bug)
        .map(|engine| Checked::new(engine, Limits::deno(), Arc::new(SystemClock)));
    async move { Ok(Arc::new(opened?) as Arc<dyn Backend>) }
}

/// The child's open: the bug comes from the environment the parent set.
fn open_from_env(dir: &Path) -> impl Future<Output = Result<Arc<dyn Backend>, KvError>> + use<> {
    let name = std::env::var(BUG_ENV).unwrap_or_default();
    let bug = Bug::ALL
        .into_iter()
        .find(|b| b.name() == name)
        .unwrap_or(Bug::None);
    open_toy(dir, bug)
}

/// How many times a planted bug's run may come out without the expected violation before the
/// harness counts as having missed it. Kills land at random moments, so a torn commit can show
/// only as a counter mismatch (a torn `sum` without its marker) in one run; the harness must still
/// name it as a partial commit in one of these runs, and the correct engine gets one run only.
const ATTEMPTS_PER_BUG: usize = 3;

/// The toy's replay keeps only complete commits: records a kill left without their `C` line are
/// cut off the file, so the next session's commit cannot take them for its own. (A kill that
/// stopped a commit's `write` at a page boundary once made the harness report the correct toy.)
fn orphaned_records_are_cut_off() -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("log");
    let put = |key: &[u8], version| Record::Put(key.to_vec(), KvValue::U64(version), version);
    let append = |text: String| -> Result<(), String> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| e.to_string())?;
        log.write_all(text.as_bytes()).map_err(|e| e.to_string())
    };
    // A whole commit, then a commit cut after its first record.
    append(put(b"a", 1).line() + &Record::Commit(1).line() + &put(b"orphan", 2).line())?;
    let keys = |backend: &LogBackend| backend.lock().entries.keys().cloned().collect::<Vec<_>>();
    let reopened = LogBackend::open(&path, Bug::None).map_err(|e| e.to_string())?;
    if keys(&reopened) != [b"a".to_vec()] {
        return Err(format!("after the cut: {:?}", keys(&reopened)));
    }
    drop(reopened);
    // The next session's commit, appended as the toy appends.
    append(put(b"b", 2).line() + &Record::Commit(2).line())?;
    let reopened = LogBackend::open(&path, Bug::None).map_err(|e| e.to_string())?;
    match keys(&reopened).as_slice() {
        [a, b] if a == b"a" && b == b"b" => Ok(()),
        other => Err(format!("the orphan joined the next commit: {other:?}")),
    }
}

/// Runs the harness on the toy with `bug` planted and checks its verdict.
fn trial(bug: Bug) -> Result<(), String> {
    let config = CrashConfig {
        // 6 kills: a torn commit is caught by most single kills, and by one of six all but
        // certainly.
        trials: 2,
        kills_per_trial: 3,
        writers: 3,
        min_kill_delay: Duration::from_millis(100),
        max_kill_delay: Duration::from_millis(250),
        // The toy polls its queue; nothing comes late.
        extra_message_wait: Duration::from_millis(100),
        message_timeout: Duration::from_secs(2),
        child_env: vec![(BUG_ENV.into(), bug.name().into())],
        ..CrashConfig::default()
    }
    .with_env()?;
    let mut attempt = 1;
    loop {
        // The parent opens the same buggy engine as the child (recovery bugs live in the parent).
        let report = crash::run_crash_trials(&config, &|dir: &Path| open_toy(dir, bug))?;
        for dir in &report.kept_dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        match bug.expected() {
            None => return report.check(),
            Some(kind) if report.count(kind) > 0 => {
                let first = report
                    .violations
                    .iter()
                    .find(|v| v.kind == kind)
                    .map(ToString::to_string)
                    .unwrap_or_default();
                println!("{}: caught as expected, e.g. {first}", bug.name());
                if std::env::var_os("TEETH_DEBUG").is_some() {
                    for v in &report.violations {
                        println!("  {v}");
                    }
                }
                return Ok(());
            }
            Some(kind) if attempt < ATTEMPTS_PER_BUG => {
                println!(
                    "{}: run {attempt} of {ATTEMPTS_PER_BUG} reported no {kind} (kills land at \
                     random moments); running again",
                    bug.name()
                );
                attempt += 1;
            }
            Some(kind) => {
                return Err(format!(
                    "the harness missed the {} bug: no {kind} reported in {ATTEMPTS_PER_BUG} runs\n{}",
                    bug.name(),
                    report.totals()
                ));
            }
        }
    }
}

fn main() -> ExitCode {
    if let Some(code) = crash::child_main_if_requested(&open_from_env) {
        return code;
    }
    let mut args = libtest_mimic::Arguments::from_args();
    // One at a time: each trial already runs a child and a parent on a small machine, and the
    // per-kill lines stay readable.
    args.test_threads = args.test_threads.or(Some(1));
    let mut trials: Vec<_> = Bug::ALL
        .into_iter()
        .map(|bug| {
            let name = match bug {
                Bug::None => "correct_log_backend_passes".to_owned(),
                bug => format!("catches_{}", bug.name().replace('-', "_")),
            };
            libtest_mimic::Trial::test(name, move || trial(bug).map_err(Into::into))
        })
        .collect();
    trials.push(libtest_mimic::Trial::test(
        "orphaned_records_are_cut_off",
        || orphaned_records_are_cut_off().map_err(Into::into),
    ));
    libtest_mimic::run(&args, trials).exit_code()
}

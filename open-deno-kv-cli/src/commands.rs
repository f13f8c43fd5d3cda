//! What each subcommand does.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::Utc;
use futures::{StreamExt, TryStreamExt};
use open_deno_kv::{EnqueueOptions, Entry, Kv, KvValue, ListOptions, MaybeEntry, Selector, key};
use open_deno_kv_model::{
    AtomicWrite, Enqueue, IntegrityReport, Mutation, MutationKind, encode_key,
};
use serde_json::{Value as Json, json};

use crate::cli::{Format, KeyAction, ValueType};
use crate::dump::{self, DumpEntry, DumpItem, DumpReader, ValueSource};
use crate::duration::plural;
use crate::error::CliError;
use crate::key_syntax::{parse_key, typed_json};
use crate::output_file::OutputFile;
use crate::plain_json;
use crate::progress::Progress;
use crate::store::{Access, Target, open};

/// Mutations per commit when loading or migrating (Deno allows 1000).
const BATCH_MUTATIONS: usize = 500;
/// A commit's size as Deno counts it (keys twice, values once, payloads), kept well under its
/// 800 KiB.
const BATCH_BYTES: usize = 600 * 1024;
/// Bytes of keys receiving a value per commit, kept well under Deno's 80 KiB.
const BATCH_KEY_BYTES: usize = 60 * 1024;
/// Enqueues per commit when migrating.
const BATCH_ENQUEUES: usize = 50;

/// Reads a value given on the command line.
pub fn parse_value(text: &str, value_type: ValueType) -> Result<KvValue, CliError> {
    Ok(match value_type {
        ValueType::Json => {
            let json: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                CliError::BadValue(format!("not JSON ({e}); use --type string for text"))
            })?;
            open_deno_kv::v8::from_json(&json).map_err(open_deno_kv::Error::from)?
        }
        ValueType::String => {
            open_deno_kv::v8::from_json(&serde_json::Value::String(text.to_owned()))
                .map_err(open_deno_kv::Error::from)?
        }
        ValueType::U64 => KvValue::U64(text.trim().parse().map_err(|_| {
            CliError::BadValue(format!("{text:?} is not a u64 (0 to 18446744073709551615)"))
        })?),
        ValueType::Bytes => KvValue::Bytes(
            hex::decode(text.trim())
                .map_err(|_| CliError::BadValue(format!("{text:?} is not hex bytes")))?
                .into(),
        ),
        ValueType::Tagged => {
            let json: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| CliError::BadValue(format!("not JSON: {e}")))?;
            open_deno_kv::v8::from_tagged_json(&json).map_err(open_deno_kv::Error::from)?
        }
    })
}

/// One key's state as a format renders it.
pub(crate) enum Rendered {
    /// `--format js`: a line for people.
    Line(String),
    /// The JSON formats: a value, printed on its own line or inside a watch emission's array.
    Json(Json),
}

impl std::fmt::Display for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rendered::Line(line) => f.write_str(line),
            Rendered::Json(json) => write!(f, "{json}"),
        }
    }
}

/// Renders one entry in the chosen format.
fn render_entry(entry: &Entry, format: Format) -> Result<Rendered, CliError> {
    Ok(match format {
        Format::Json => Rendered::Json(DumpEntry::from_entry(entry.clone()).to_json()?),
        Format::PlainJson => Rendered::Json(plain_json::entry(entry)?),
        Format::Js => {
            let value =
                open_deno_kv::v8::to_js_literal(&entry.value).map_err(open_deno_kv::Error::from)?;
            let expiry = entry
                .expires_at
                .map(|at| format!(", expires {}", at.to_rfc3339()))
                .unwrap_or_default();
            Rendered::Line(format!(
                "{} = {value}  ({}{expiry})",
                entry.key, entry.versionstamp
            ))
        }
    })
}

/// Renders a key's state, present or absent, in the chosen format.
pub(crate) fn render_maybe(entry: &MaybeEntry, format: Format) -> Result<Rendered, CliError> {
    match (&entry.value, entry.versionstamp) {
        (Some(value), Some(versionstamp)) => render_entry(
            &Entry {
                key: entry.key.clone(),
                value: value.clone(),
                versionstamp,
                expires_at: entry.expires_at,
            },
            format,
        ),
        _ => Ok(match format {
            Format::Json => Rendered::Json(json!({"key": typed_json(&entry.key), "value": null})),
            Format::PlainJson => Rendered::Json(plain_json::absent(&entry.key)?),
            Format::Js => Rendered::Line(format!("{} = (absent)", entry.key)),
        }),
    }
}

/// Prints one watch emission: for `js` a line per key and a `--` line, for the JSON formats
/// one line holding an array with an element per key, so a reader sees where it ends.
fn print_emission(
    out: &mut impl Write,
    state: &[MaybeEntry],
    format: Format,
) -> Result<(), CliError> {
    let rendered = state
        .iter()
        .map(|entry| render_maybe(entry, format))
        .collect::<Result<Vec<_>, _>>()?;
    if format == Format::Js {
        for line in rendered {
            writeln!(out, "{line}").map_err(stdout_error)?;
        }
        writeln!(out, "--").map_err(stdout_error)?;
    } else {
        let array: Vec<Json> = rendered
            .into_iter()
            .map(|r| match r {
                Rendered::Json(json) => json,
                Rendered::Line(line) => Json::String(line),
            })
            .collect();
        writeln!(out, "{}", Json::Array(array)).map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

pub(crate) fn stdout_error(source: std::io::Error) -> CliError {
    CliError::Io {
        path: PathBuf::from("<stdout>"),
        source,
    }
}

/// `kv get`.
pub async fn get(db: &str, key: &str, format: Format) -> Result<(), CliError> {
    let key = parse_key(key)?;
    let kv = open_intact(db, Access::Read).await?;
    let entry = kv.get(key).await?;
    if !entry.exists() {
        // One more read, only on a miss: a key that differs by a number's type.
        let near = crate::near_key::find_near(&kv, &entry.key).await?;
        kv.close().await?;
        return Err(CliError::NotFound {
            key: entry.key.to_string(),
            near,
        });
    }
    kv.close().await?;
    let rendered = render_maybe(&entry, format)?;
    writeln!(std::io::stdout().lock(), "{rendered}").map_err(stdout_error)
}

/// `kv set`.
pub async fn set(
    db: &str,
    key: &str,
    value: &str,
    value_type: ValueType,
    expire_in: Option<Duration>,
) -> Result<(), CliError> {
    let key = parse_key(key)?;
    let value = parse_value(value, value_type)?;
    let kv = open(db, Access::Write)?;
    let commit = match expire_in {
        Some(expire_in) => kv.set_expiring(key.clone(), value, expire_in).await,
        None => kv.set(key.clone(), value).await,
    };
    kv.close().await?;
    print_versionstamp(&format!("set {key}"), commit?.versionstamp)
}

/// Prints the versionstamp of a commit: on a terminal with what it is (`set ["hello"]:
/// committed at versionstamp 0000000000000001000`), into a pipe or file bare, one line, for
/// scripts (`v=$(kv set ...)`).
pub(crate) fn print_versionstamp(
    what: &str,
    versionstamp: open_deno_kv::Versionstamp,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if out.is_terminal() {
        writeln!(out, "{what}: committed at versionstamp {versionstamp}")
    } else {
        writeln!(out, "{versionstamp}")
    }
    .map_err(stdout_error)
}

/// `kv delete`.
pub async fn delete(db: &str, key: &str) -> Result<(), CliError> {
    let key = parse_key(key)?;
    let kv = open(db, Access::Write)?;
    let result = kv.delete(key).await;
    kv.close().await?;
    Ok(result?)
}

/// The selector of `kv list`.
pub struct ListArgs {
    /// Positional prefix.
    pub prefix: Option<String>,
    /// `--start`.
    pub start: Option<String>,
    /// `--end`.
    pub end: Option<String>,
    /// `--limit`.
    pub limit: Option<usize>,
    /// `--reverse`.
    pub reverse: bool,
    /// `--cursor`.
    pub cursor: Option<String>,
}

/// `kv list`.
pub async fn list(db: &str, args: ListArgs, format: Format) -> Result<(), CliError> {
    let parse = |text: Option<String>| text.as_deref().map(parse_key).transpose();
    let mut selector = Selector {
        prefix: parse(args.prefix)?,
        start: parse(args.start)?,
        end: parse(args.end)?,
    };
    if selector.prefix.is_none() && (selector.start.is_none() || selector.end.is_none()) {
        // `kv list` alone, or with one bound: everything under the empty prefix.
        selector.prefix = Some(key![]);
    }
    let kv = open_intact(db, Access::Read).await?;
    let options = ListOptions {
        limit: args.limit,
        reverse: args.reverse,
        cursor: args.cursor,
        ..Default::default()
    };
    let result = async {
        let mut entries = kv.list(selector, options)?;
        let mut out = std::io::stdout().lock();
        let mut count = 0;
        while let Some(entry) = entries.try_next().await? {
            writeln!(out, "{}", render_entry(&entry, format)?).map_err(stdout_error)?;
            count += 1;
        }
        if args.limit == Some(count)
            && let Some(cursor) = entries.cursor()
        {
            eprintln!("cursor: {cursor}");
        }
        Ok::<(), CliError>(())
    }
    .await;
    kv.close().await?;
    result
}

/// `kv watch`.
pub async fn watch(
    db: &str,
    keys: &[String],
    count: Option<usize>,
    format: Format,
) -> Result<(), CliError> {
    let keys = keys
        .iter()
        .map(|k| parse_key(k))
        .collect::<Result<Vec<_>, _>>()?;
    let kv = open_intact(db, Access::Observe).await?;
    let mut stream = kv.watch(keys)?;
    let mut seen = 0;
    let result = loop {
        if count.is_some_and(|count| seen >= count) {
            break Ok(());
        }
        let next = tokio::select! {
            next = stream.next() => next,
            _ = tokio::signal::ctrl_c() => break Ok(()),
        };
        let Some(state) = next else { break Ok(()) };
        let state = match state {
            Ok(state) => state,
            Err(err) => break Err(err.into()),
        };
        if let Err(err) = print_emission(&mut std::io::stdout().lock(), &state, format) {
            break Err(err);
        }
        seen += 1;
    };
    drop(stream);
    kv.close().await?;
    result
}

/// `kv enqueue`.
pub async fn enqueue(
    db: &str,
    value: &str,
    value_type: ValueType,
    delay: Duration,
    if_undelivered: &[String],
) -> Result<(), CliError> {
    let message = parse_value(value, value_type)?;
    let keys_if_undelivered = if_undelivered
        .iter()
        .map(|k| parse_key(k))
        .collect::<Result<Vec<_>, _>>()?;
    let kv = open(db, Access::Write)?;
    let options = EnqueueOptions {
        delay,
        keys_if_undelivered,
        backoff_schedule: None,
    };
    let commit = kv.enqueue(message, options).await;
    kv.close().await?;
    print_versionstamp("enqueued", commit?.versionstamp)
}

/// Every entry of a database, a page at a time.
fn all_entries(kv: &Kv) -> Result<open_deno_kv::ListStream, CliError> {
    Ok(kv.list(
        Selector::prefix(key![]),
        ListOptions {
            batch_size: Some(1000),
            ..Default::default()
        },
    )?)
}

/// The integrity check of `kv`, or `None` if its backend has none (a remote database).
async fn integrity(kv: &Kv) -> Result<Option<IntegrityReport>, CliError> {
    let backend = kv.backend();
    if !backend.capabilities().integrity_check {
        return Ok(None);
    }
    Ok(Some(backend.check_integrity().await?))
}

/// Opens `db` for reading: runs the integrity check first and refuses a damaged database, so a
/// dump, a count, a copy, a listing, a `get` or a watch never answers short. A damaged page can
/// read as an empty one without any error from the storage (SQLite skips it), so only a check of
/// the whole file tells; its cost, a read of the file, is the price of never printing a partial
/// answer as a whole one.
pub(crate) async fn open_intact(db: &str, access: Access) -> Result<Kv, CliError> {
    let kv = open(db, access)?;
    match integrity(&kv).await {
        Ok(report) if report.as_ref().is_none_or(IntegrityReport::is_ok) => Ok(kv),
        failed => {
            kv.close().await?;
            Err(match failed {
                Ok(report) => CliError::Damaged {
                    db: db.to_owned(),
                    problems: report.map(|r| r.problems).unwrap_or_default(),
                },
                Err(err) => err,
            })
        }
    }
}

/// `kv check`.
pub async fn check(db: &str) -> Result<(), CliError> {
    let kv = open(db, Access::Read)?;
    let report = kv.backend().check_integrity().await;
    kv.close().await?;
    let report = report?;
    if !report.is_ok() {
        let mut out = std::io::stdout().lock();
        for problem in &report.problems {
            writeln!(out, "{problem}").map_err(stdout_error)?;
        }
        return Err(CliError::Damaged {
            db: db.to_owned(),
            problems: report.problems,
        });
    }
    println!(
        "{}",
        json!({
            "ok": true,
            "entries": report.entries_checked,
            "queued_messages": report.messages_checked,
        })
    );
    Ok(())
}

/// `kv dump`.
pub async fn dump(db: &str, output: Option<&Path>) -> Result<(), CliError> {
    let kv = open_intact(db, Access::Read).await?;
    let result = match output {
        None => dump_to(&kv, &mut std::io::stdout().lock(), Path::new("<stdout>")).await,
        Some(path) => {
            async {
                let mut file = OutputFile::create(path)?;
                let counts = dump_to(&kv, file.writer(), path).await?;
                file.finish()?;
                Ok(counts)
            }
            .await
        }
    };
    kv.close().await?;
    let (entries, messages) = result?;
    if let Some(path) = output {
        eprintln!(
            "dumped {} and {} into {}",
            plural(entries, "entry", "entries"),
            plural(messages, "queued message", "queued messages"),
            path.display()
        );
    }
    Ok(())
}

/// Writes the dump of `kv` (see [`crate::dump`]) to `out`, named `file` in messages; returns
/// how many entries and queued messages it holds.
async fn dump_to(kv: &Kv, out: &mut impl Write, file: &Path) -> Result<(u64, u64), CliError> {
    let write_error = |source| CliError::Io {
        path: file.to_path_buf(),
        source,
    };
    if kv.backend().capabilities().export {
        // One snapshot of the whole database, whatever writers do meanwhile.
        let snapshot = kv.backend().export_snapshot().await?;
        return crate::backup::write_snapshot(snapshot, out, file, "dump").await;
    }
    let progress = Progress::new("dump", None);
    writeln!(out, "{}", dump::header_line(None, None)).map_err(write_error)?;
    let mut entries = all_entries(kv)?;
    let mut count = 0;
    while let Some(entry) = entries.try_next().await? {
        let line = DumpEntry::from_entry(entry).to_json()?;
        writeln!(out, "{line}").map_err(write_error)?;
        count += 1;
        progress.inc(1);
    }
    let messages = kv.queued_messages().await?;
    for message in &messages {
        writeln!(out, "{}", dump::message_json(message)?).map_err(write_error)?;
        progress.inc(1);
    }
    let queued = messages.len() as u64;
    writeln!(out, "{}", dump::end_line(count, queued)).map_err(write_error)?;
    out.flush().map_err(write_error)?;
    progress.finish();
    Ok((count, queued))
}

/// Writes sets (and enqueues) in commits that stay inside Deno's limits.
struct BatchWriter<'a> {
    kv: &'a Kv,
    write: AtomicWrite,
    /// The pending commit's size, counted as `Limits` counts it.
    bytes: usize,
    /// The pending commit's bytes of keys receiving a value.
    key_bytes: usize,
    written: usize,
}

impl<'a> BatchWriter<'a> {
    fn new(kv: &'a Kv) -> Self {
        BatchWriter {
            kv,
            write: AtomicWrite::default(),
            bytes: 0,
            key_bytes: 0,
            written: 0,
        }
    }

    async fn set(&mut self, entry: DumpEntry) -> Result<(), CliError> {
        let key = encode_key(&entry.key)?;
        let size = 2 * key.len() + entry.value.encoded_len();
        if self.write.mutations.len() >= BATCH_MUTATIONS
            || self.bytes + size > BATCH_BYTES
            || self.key_bytes + key.len() > BATCH_KEY_BYTES
        {
            self.flush().await?;
        }
        self.bytes += size;
        self.key_bytes += key.len();
        self.write.mutations.push(Mutation {
            key,
            kind: MutationKind::Set(entry.value),
            expire_at: entry.expires_at,
        });
        Ok(())
    }

    async fn enqueue(&mut self, enqueue: Enqueue) -> Result<(), CliError> {
        let size = enqueue.payload.len()
            + 4 * enqueue.backoff_schedule.as_ref().map_or(0, Vec::len)
            + enqueue
                .keys_if_undelivered
                .iter()
                .map(Vec::len)
                .sum::<usize>();
        if self.write.enqueues.len() >= BATCH_ENQUEUES || self.bytes + size > BATCH_BYTES {
            self.flush().await?;
        }
        self.bytes += size;
        self.write.enqueues.push(enqueue);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), CliError> {
        if self.write.mutations.is_empty() && self.write.enqueues.is_empty() {
            return Ok(());
        }
        let write = std::mem::take(&mut self.write);
        self.written += write.mutations.len();
        self.bytes = 0;
        self.key_bytes = 0;
        // A batch has no checks, so its outcome is always `Committed`.
        let _ = self.kv.write(write).await?;
        Ok(())
    }
}

/// `kv load`.
pub async fn load(db: &str, input: &Path) -> Result<(), CliError> {
    let name = input.display().to_string();
    let reader: Box<dyn BufRead> = if name == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(input).map_err(|source| CliError::Io {
            path: input.to_path_buf(),
            source,
        })?;
        Box::new(std::io::BufReader::new(file))
    };
    let size = std::fs::metadata(input).ok().map(|m| m.len());
    let target = Target::create(db).await?;
    let progress = Progress::new("load", size);
    let now = Utc::now();
    let mut writer = BatchWriter::new(target.kv()?);
    let mut dump = DumpReader::new();
    let (mut expired, mut messages, mut rebuilt, mut lines) = (0, 0, 0, 0);
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| CliError::Io {
            path: input.to_path_buf(),
            source,
        })?;
        lines = index + 1;
        progress.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let item = dump
            .read_line(&line)
            .map_err(|reason| CliError::BadDumpLine {
                file: name.clone(),
                line: lines,
                reason,
            })?;
        match item {
            None => {}
            Some(DumpItem::Entry(entry, source)) => {
                rebuilt += usize::from(source == ValueSource::Tagged);
                if entry.expires_at.is_some_and(|at| at <= now) {
                    expired += 1;
                    continue;
                }
                writer.set(entry).await?;
            }
            Some(DumpItem::Message(message, source)) => {
                rebuilt += usize::from(source == ValueSource::Tagged);
                messages += 1;
                writer.enqueue(message.enqueue).await?;
            }
        }
    }
    dump.finish().map_err(|reason| CliError::BadDumpLine {
        file: name.clone(),
        line: lines + 1,
        reason,
    })?;
    writer.flush().await?;
    let written = writer.written;
    progress.finish();
    let url = target.url().to_owned();
    target.commit().await?;
    if dump.version() < 2 {
        eprintln!(
            "kv: warning: {name} is a format {} dump, from before dumps held queued messages",
            dump.version()
        );
    }
    if rebuilt > 0 {
        eprintln!(
            "kv: warning: {} no \"bytes\" and {} rebuilt from {} tagged \
             form, which does not hold an error's stack and cause, the rest of the buffer a typed \
             array or DataView looks into, or which views share a buffer",
            plural(rebuilt as u64, "V8 value had", "V8 values had"),
            if rebuilt == 1 { "was" } else { "were" },
            if rebuilt == 1 { "its" } else { "their" },
        );
    }
    eprintln!(
        "loaded {} and {} into {url} ({} already expired, skipped)",
        plural(written as u64, "entry", "entries"),
        plural(messages, "queued message", "queued messages"),
        expired
    );
    Ok(())
}

/// `kv migrate`.
pub async fn migrate(db: &str, target_url: &str) -> Result<(), CliError> {
    let source = open_intact(db, Access::Read).await?;
    let result = async {
        let target = Target::create(target_url).await?;
        let progress = Progress::new("migrate", None);
        let mut writer = BatchWriter::new(target.kv()?);
        let mut entries = all_entries(&source)?;
        let now = Utc::now();
        while let Some(entry) = entries.try_next().await? {
            progress.inc(1);
            if entry.expires_at.is_some_and(|at| at <= now) {
                continue;
            }
            writer.set(DumpEntry::from_entry(entry)).await?;
        }
        let messages = source.queued_messages().await?;
        for message in &messages {
            writer
                .enqueue(Enqueue {
                    payload: message.payload.clone(),
                    ready_at: message.ready_at,
                    keys_if_undelivered: message.keys_if_undelivered.clone(),
                    backoff_schedule: Some(message.backoff_schedule.clone()),
                })
                .await?;
        }
        writer.flush().await?;
        let written = writer.written;
        progress.finish();
        target.commit().await?;
        eprintln!(
            "migrated {} and {} into {target_url}",
            plural(written as u64, "entry", "entries"),
            plural(messages.len() as u64, "queued message", "queued messages"),
        );
        Ok::<(), CliError>(())
    }
    .await;
    source.close().await?;
    result
}

/// `kv stats`.
pub async fn stats(db: &str) -> Result<(), CliError> {
    let kv = open_intact(db, Access::Read).await?;
    let result = async {
        let mut entries = all_entries(&kv)?;
        let (mut count, mut key_bytes, mut value_bytes, mut expiring) = (0u64, 0u64, 0u64, 0u64);
        while let Some(entry) = entries.try_next().await? {
            count += 1;
            key_bytes += encode_key(&entry.key)?.len() as u64;
            value_bytes += entry.value.encoded_len() as u64;
            expiring += u64::from(entry.expires_at.is_some());
        }
        let queued = kv.queued_messages().await?.len();
        println!(
            "{}",
            json!({
                "entries": count,
                "key_bytes": key_bytes,
                "value_bytes": value_bytes,
                "expiring": expiring,
                "queued_messages": queued,
            })
        );
        Ok::<(), CliError>(())
    }
    .await;
    kv.close().await?;
    result
}

/// `kv key encode` / `kv key decode`.
pub fn key(action: KeyAction) -> Result<(), CliError> {
    match action {
        KeyAction::Encode { key } => println!("{}", hex::encode(encode_key(&parse_key(&key)?)?)),
        KeyAction::Decode { hex: text, json } => {
            let bytes = hex::decode(text.trim()).map_err(|_| CliError::BadKey {
                input: text.clone(),
                reason: "not hex".into(),
            })?;
            let key = open_deno_kv_model::decode_key(&bytes).map_err(|e| CliError::BadKey {
                input: text.clone(),
                reason: e.to_string(),
            })?;
            if json {
                println!("{}", typed_json(&key));
            } else {
                println!("{key}");
            }
        }
    }
    Ok(())
}

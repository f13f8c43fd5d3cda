//! `kv backup` and `kv restore`: a consistent snapshot of a live database in the dump format
//! (version 3, see [`crate::dump`]), and its restore, versionstamps included.
//!
//! `kv backup` asks the engine for one read snapshot ([`open_deno_kv_model::Backend::export_snapshot`])
//! and writes it line by line as the engine streams it: writers keep committing meanwhile, and
//! the file holds every entry and queued message as of one commit, whose versionstamp the header
//! records. A backend without an export (a KV Connect server: the protocol has no export
//! endpoint) is refused; `kv dump` still copies it page by page.
//!
//! `kv restore` streams the file into a new or empty database through
//! [`open_deno_kv_model::Backend::import_snapshot`] (one transaction), beside the target file and
//! moved into place only once complete ([`crate::store::Target`]): a truncated or damaged file, or
//! any failure, leaves no target behind.

use std::io::{BufRead, Write};
use std::path::Path;

use chrono::SecondsFormat;
use futures::StreamExt;
use open_deno_kv_model::change_log::{self, RestorePoint};
use open_deno_kv_model::{
    KvEntry, KvError, Snapshot, SnapshotItem, SnapshotOrigin, decode_key, encode_key,
};

use crate::dump::{self, DumpEntry, DumpItem, DumpReader};
use crate::duration::plural;
use crate::error::CliError;
use crate::output_file::OutputFile;
use crate::progress::Progress;
use crate::store::{Access, Target, open};

/// Writes `snapshot` in the dump format to `out` (named `file` in messages), counting `what`
/// in the progress bar; returns how many entries and messages it wrote.
pub async fn write_snapshot(
    snapshot: Snapshot,
    out: &mut impl Write,
    file: &Path,
    what: &str,
) -> Result<(u64, u64), CliError> {
    let write_error = |source| CliError::Io {
        path: file.to_path_buf(),
        source,
    };
    let progress = Progress::new(what, None);
    let Snapshot {
        database,
        versionstamp,
        mut items,
    } = snapshot;
    writeln!(out, "{}", dump::header_line(Some(versionstamp), database)).map_err(write_error)?;
    let (mut entries, mut messages) = (0u64, 0u64);
    while let Some(item) = items.next().await {
        let line = match item? {
            SnapshotItem::Entry(entry) => {
                entries += 1;
                DumpEntry {
                    key: decode_key(&entry.key)?,
                    value: entry.value,
                    versionstamp: Some(entry.versionstamp),
                    expires_at: entry.expires_at,
                }
                .to_json()?
            }
            SnapshotItem::Message(message) => {
                messages += 1;
                dump::message_json(&message)?
            }
        };
        writeln!(out, "{line}").map_err(write_error)?;
        progress.inc(1);
    }
    writeln!(out, "{}", dump::end_line(entries, messages)).map_err(write_error)?;
    out.flush().map_err(write_error)?;
    progress.finish();
    Ok((entries, messages))
}

/// `kv backup`: writes a consistent snapshot of `db` to `output` (`-`: standard output).
pub async fn backup(db: &str, output: &Path) -> Result<(), CliError> {
    let kv = open(db, Access::Read)?;
    let result = async {
        if !kv.backend().capabilities().export {
            return Err(CliError::NoExport { db: db.to_owned() });
        }
        let snapshot = kv.backend().export_snapshot().await?;
        let versionstamp = snapshot.versionstamp;
        let counts = if output == Path::new("-") {
            let stdout = &mut std::io::stdout().lock();
            write_snapshot(snapshot, stdout, Path::new("<stdout>"), "backup").await?
        } else {
            let mut file = OutputFile::create(output)?;
            let counts = write_snapshot(snapshot, file.writer(), output, "backup").await?;
            file.finish()?;
            counts
        };
        Ok((versionstamp, counts))
    }
    .await;
    kv.close().await?;
    let (versionstamp, (entries, messages)) = result?;
    eprintln!(
        "backed up {} and {} as of versionstamp {versionstamp} into {}",
        plural(entries, "entry", "entries"),
        plural(messages, "queued message", "queued messages"),
        output.display()
    );
    Ok(())
}

/// The items of a backup file after its header, read as the import takes them. A line that
/// does not parse, or a file that stops before its end line, ends the stream with an error, so
/// the import writes nothing.
struct BackupLines {
    lines: std::io::Lines<Box<dyn BufRead + Send>>,
    /// Bytes read so far, shown on a terminal's stderr.
    progress: Progress,
    reader: DumpReader,
    name: String,
    line: usize,
    done: bool,
}

impl BackupLines {
    fn fail(&mut self, line: usize, reason: String) -> Option<Result<SnapshotItem, KvError>> {
        self.done = true;
        self.progress.finish();
        let err = CliError::BadDumpLine {
            file: self.name.clone(),
            line,
            reason,
        };
        Some(Err(KvError::invalid_argument(err.to_string())))
    }
}

impl Iterator for BackupLines {
    type Item = Result<SnapshotItem, KvError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let Some(line) = self.lines.next() else {
                self.done = true;
                self.progress.finish();
                return match self.reader.finish() {
                    Ok(()) => None,
                    Err(reason) => self.fail(self.line + 1, reason),
                };
            };
            self.line += 1;
            let text = match line {
                Ok(text) => text,
                Err(err) => return self.fail(self.line, err.to_string()),
            };
            self.progress.inc(text.len() as u64 + 1);
            if text.trim().is_empty() {
                continue;
            }
            let item = match self.reader.read_line(&text) {
                Ok(None) => continue,
                Ok(Some(item)) => to_snapshot_item(item),
                Err(reason) => Err(reason),
            };
            return match item {
                Ok(item) => Some(Ok(item)),
                Err(reason) => self.fail(self.line, reason),
            };
        }
        None
    }
}

/// A parsed backup line as the import takes it: entries keep their versionstamps (a backup
/// line must have one), messages their ids.
fn to_snapshot_item(item: DumpItem) -> Result<SnapshotItem, String> {
    Ok(match item {
        DumpItem::Entry(entry, _) => SnapshotItem::Entry(KvEntry {
            key: encode_key(&entry.key).map_err(|e| e.to_string())?.into(),
            versionstamp: entry
                .versionstamp
                .ok_or("a backup entry needs its \"versionstamp\"")?,
            value: entry.value,
            expires_at: entry.expires_at,
        }),
        DumpItem::Message(message, _) => SnapshotItem::Message(message.into_queued()),
    })
}

/// Opens `input` and reads its header: the snapshot's database and versionstamp, and the lines
/// after it.
fn open_backup(input: &Path) -> Result<(SnapshotOrigin, BackupLines), CliError> {
    let name = input.display().to_string();
    let file = std::fs::File::open(input).map_err(|source| CliError::Io {
        path: input.to_path_buf(),
        source,
    })?;
    let size = file.metadata().ok().map(|m| m.len());
    let reader: Box<dyn BufRead + Send> = Box::new(std::io::BufReader::new(file));
    let mut lines = BackupLines {
        progress: Progress::new("restore", size),
        lines: reader.lines(),
        reader: DumpReader::new(),
        name: name.clone(),
        line: 0,
        done: false,
    };
    let not_a_backup = |reason: String| CliError::NotABackup {
        file: name.clone(),
        reason,
    };
    let header = loop {
        match lines.lines.next() {
            None => return Err(not_a_backup("it is empty".into())),
            Some(line) => {
                lines.line += 1;
                let text = line.map_err(|source| CliError::Io {
                    path: input.to_path_buf(),
                    source,
                })?;
                if !text.trim().is_empty() {
                    break text;
                }
            }
        }
    };
    match lines.reader.read_line(&header) {
        Ok(None) => {}
        Ok(Some(_)) => return Err(not_a_backup("it has no header line".into())),
        Err(reason) => return Err(not_a_backup(reason)),
    }
    let versionstamp = lines.reader.snapshot().ok_or_else(|| {
        not_a_backup(format!(
            "its header does not say it is one consistent snapshot (format {}); load a dump \
             with `kv load`",
            lines.reader.version()
        ))
    })?;
    let origin = SnapshotOrigin {
        database: lines.reader.database(),
        versionstamp,
    };
    Ok((origin, lines))
}

/// `kv restore --at POINT --log SOURCE`: the backup `input` with `source`'s change log replayed
/// over it up to `point`, into the new or empty database `db`, all or nothing.
pub async fn restore_at(
    input: &Path,
    db: &str,
    point: RestorePoint,
    source: &str,
) -> Result<(), CliError> {
    let (origin, lines) = open_backup(input)?;
    let versionstamp = origin.versionstamp;
    let log = open(source, Access::Read)?;
    let target = Target::create(db).await?;
    let backend = target.kv()?.backend().clone();
    if !backend.capabilities().import {
        return Err(CliError::NoImport { db: db.to_owned() });
    }
    let backup = Snapshot {
        database: origin.database,
        versionstamp,
        items: futures::stream::iter(lines).boxed(),
    };
    let restored = change_log::restore(backup, &**log.backend(), point, &*backend).await;
    log.close().await?;
    let restored = restored?;
    drop(backend);
    target.commit().await?;
    let when = restored
        .at
        .map(|at| format!(" ({})", at.to_rfc3339_opts(SecondsFormat::AutoSi, true)))
        .unwrap_or_default();
    eprintln!(
        "restored {} and {} into {db}: the backup (versionstamp {versionstamp}) and {} after \
         it, up to versionstamp {}{when}",
        plural(restored.imported.entries, "entry", "entries"),
        plural(
            restored.imported.messages,
            "queued message",
            "queued messages"
        ),
        plural(restored.commits, "logged commit", "logged commits"),
        restored.versionstamp
    );
    Ok(())
}

/// `kv restore`: writes the backup `input` into the new or empty database `db`, all or nothing.
pub async fn restore(input: &Path, db: &str) -> Result<(), CliError> {
    let (origin, lines) = open_backup(input)?;
    let versionstamp = origin.versionstamp;
    let target = Target::create(db).await?;
    let backend = target.kv()?.backend().clone();
    if !backend.capabilities().import {
        return Err(CliError::NoImport { db: db.to_owned() });
    }
    // A plain import splices nothing: a backup of any database, or of none named, restores.
    let snapshot = Snapshot {
        database: origin.database,
        versionstamp,
        items: futures::stream::iter(lines).boxed(),
    };
    let summary = backend.import_snapshot(snapshot).await?;
    drop(backend);
    target.commit().await?;
    eprintln!(
        "restored {} and {} into {db}; its next commit follows versionstamp {versionstamp}",
        plural(summary.entries, "entry", "entries"),
        plural(summary.messages, "queued message", "queued messages"),
    );
    Ok(())
}

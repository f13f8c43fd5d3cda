//! The commands beyond Deno KV that work on a whole prefix or range: `kv delete --prefix`,
//! `kv stats --prefix`, `kv watch --prefix`.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use futures::{StreamExt, TryStreamExt};
use open_deno_kv::{Key, Kv, ListOptions, MaybeEntry, RangeEvent, Selector, Versionstamp};
use serde_json::{Value as Json, json};

use crate::cli::Format;
use crate::commands::{Rendered, render_maybe, stdout_error};
use crate::duration::plural;
use crate::error::CliError;
use crate::key_syntax::parse_key;
use crate::store::{Access, open};

/// The range of `kv delete`: `--prefix`, or `--start` and `--end` (clap makes sure one of
/// them is given, and both bounds together).
pub struct RangeArgs {
    /// `--prefix`.
    pub prefix: Option<String>,
    /// `--start`.
    pub start: Option<String>,
    /// `--end`.
    pub end: Option<String>,
}

impl RangeArgs {
    /// The selector, and how to name it in a question or a refusal.
    fn selector(&self) -> Result<(Selector, String), CliError> {
        match (&self.prefix, &self.start, &self.end) {
            (Some(prefix), _, _) => Ok((
                Selector::prefix(parse_key(prefix)?),
                format!("under {prefix}"),
            )),
            (None, Some(start), Some(end)) => Ok((
                Selector::range(parse_key(start)?, parse_key(end)?),
                format!("from {start} up to {end}"),
            )),
            _ => Err(CliError::BadKey {
                input: String::new(),
                reason: "give a key, --prefix, or --start and --end".into(),
            }),
        }
    }
}

/// `kv delete --prefix P` / `kv delete --start A --end B`: counts the range, asks (unless
/// `yes`), deletes it in one commit and prints the versionstamp.
pub async fn delete_range(db: &str, range: &RangeArgs, yes: bool) -> Result<(), CliError> {
    let (selector, what) = range.selector()?;
    let kv = open(db, Access::Write)?;
    let result = async {
        if !yes {
            let counted = kv.count(selector.clone()).await?;
            if !confirm(counted.entries, &what)? {
                return Err(CliError::NotConfirmed {
                    entries: counted.entries,
                    what: what.clone(),
                });
            }
        }
        Ok(kv.delete_range(selector).await?)
    }
    .await;
    kv.close().await?;
    crate::commands::print_versionstamp(&format!("deleted {what}"), result?.versionstamp)
}

/// Asks on stderr, reads one answer line from stdin: `y` or `yes` confirms; anything else, or
/// no answer at all (stdin closed), does not.
fn confirm(entries: u64, what: &str) -> Result<bool, CliError> {
    eprint!(
        "delete {} {what}? [y/N] ",
        plural(entries, "entry", "entries")
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|source| CliError::Io {
            path: "<stdin>".into(),
            source,
        })?;
    if !std::io::stdin().is_terminal() {
        eprintln!(); // the answer was not echoed: end the question's line
    }
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// `kv stats --prefix P`: the backend's count of the entries under the prefix.
pub async fn stats_prefix(db: &str, prefix: &str) -> Result<(), CliError> {
    let selector = Selector::prefix(parse_key(prefix)?);
    let kv = crate::commands::open_intact(db, Access::Read).await?;
    let counted = kv.count(selector).await;
    kv.close().await?;
    let counted = counted?;
    println!(
        "{}",
        json!({
            "prefix": prefix,
            "entries": counted.entries,
            "key_bytes": counted.key_bytes,
            "value_bytes": counted.value_bytes,
        })
    );
    Ok(())
}

/// `kv watch --prefix P`: prints what changes under the prefix until interrupted (or `count`
/// events printed).
///
/// A range watch either names the keys a commit changed, or says "read the range again" (its
/// first event, and whenever it cannot name them: another process's commit to an SQLite file,
/// a range delete, a slow reader). On such a reread the prefix is listed again and compared
/// with what was printed before, so only the entries that are new, changed (another
/// versionstamp) or deleted (printed as absent) are printed, like any other event; a reread
/// that finds nothing changed prints nothing. The first event is therefore every entry under
/// the prefix. Remembering what was printed costs a key and a versionstamp per entry under the
/// prefix.
pub async fn watch_prefix(
    db: &str,
    prefix: &str,
    count: Option<usize>,
    format: Format,
) -> Result<(), CliError> {
    let selector = Selector::prefix(parse_key(prefix)?);
    let kv = crate::commands::open_intact(db, Access::Observe).await?;
    let result = async {
        let mut events = kv.watch_range(selector.clone())?;
        let mut shown = Shown::default();
        let mut seen = 0;
        loop {
            if count.is_some_and(|count| seen >= count) {
                return Ok(());
            }
            let next = tokio::select! {
                next = events.next() => next,
                _ = tokio::signal::ctrl_c() => return Ok(()),
            };
            let Some(event) = next else { return Ok(()) };
            let changed = match event? {
                RangeEvent::Reread => shown.reread(&kv, &selector).await?,
                RangeEvent::Changed(entries) => {
                    shown.note(&entries);
                    entries
                }
            };
            if changed.is_empty() {
                continue;
            }
            print_changes(&mut std::io::stdout().lock(), &changed, format)?;
            seen += 1;
        }
    }
    .await;
    kv.close().await?;
    result
}

/// The state of a watched prefix as last printed: each key's versionstamp.
#[derive(Default)]
struct Shown(BTreeMap<Key, Versionstamp>);

impl Shown {
    /// Records the entries of a `Changed` event as printed.
    fn note(&mut self, entries: &[MaybeEntry]) {
        for entry in entries {
            match entry.versionstamp {
                Some(versionstamp) => self.0.insert(entry.key.clone(), versionstamp),
                None => self.0.remove(&entry.key),
            };
        }
    }

    /// Lists `selector` again and returns, in key order, every entry that differs from what
    /// was printed (new or with another versionstamp), and every printed key now gone (absent);
    /// the listing becomes what was printed.
    async fn reread(&mut self, kv: &Kv, selector: &Selector) -> Result<Vec<MaybeEntry>, CliError> {
        let options = ListOptions {
            batch_size: Some(1000),
            ..Default::default()
        };
        let mut listed = kv.list(selector.clone(), options)?;
        let mut now = BTreeMap::new();
        let mut changed = BTreeMap::new();
        while let Some(entry) = listed.try_next().await? {
            if self.0.get(&entry.key) != Some(&entry.versionstamp) {
                changed.insert(
                    entry.key.clone(),
                    MaybeEntry {
                        key: entry.key.clone(),
                        value: Some(entry.value),
                        versionstamp: Some(entry.versionstamp),
                        expires_at: entry.expires_at,
                    },
                );
            }
            now.insert(entry.key, entry.versionstamp);
        }
        for key in self.0.keys().filter(|key| !now.contains_key(*key)) {
            changed.insert(
                key.clone(),
                MaybeEntry {
                    key: key.clone(),
                    value: None,
                    versionstamp: None,
                    expires_at: None,
                },
            );
        }
        self.0 = now;
        Ok(changed.into_values().collect())
    }
}

/// One event's changed keys: for `js` a line per key (`KEY = (absent)` once deleted), then
/// `--`; for the JSON formats one object per line, `{"changed":[...]}`.
fn print_changes(
    out: &mut impl Write,
    entries: &[MaybeEntry],
    format: Format,
) -> Result<(), CliError> {
    if format == Format::Js {
        for entry in entries {
            writeln!(out, "{}", render_maybe(entry, format)?).map_err(stdout_error)?;
        }
        writeln!(out, "--").map_err(stdout_error)?;
    } else {
        let changed = entries
            .iter()
            .map(|entry| {
                Ok(match render_maybe(entry, format)? {
                    Rendered::Json(json) => json,
                    Rendered::Line(line) => Json::String(line),
                })
            })
            .collect::<Result<Vec<Json>, CliError>>()?;
        writeln!(out, "{}", json!({ "changed": changed })).map_err(stdout_error)?;
    }
    out.flush().map_err(stdout_error)
}

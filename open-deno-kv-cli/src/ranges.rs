//! The commands beyond Deno KV that work on a whole prefix or range: `kv delete --prefix`,
//! `kv stats --prefix`, `kv watch --prefix`.

use std::io::{BufRead, IsTerminal, Write};

use futures::StreamExt;
use open_deno_kv::{RangeEvent, Selector};
use serde_json::{Value as Json, json};

use crate::cli::Format;
use crate::commands::{Rendered, render_maybe, stdout_error};
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
                    what,
                });
            }
        }
        Ok(kv.delete_range(selector).await?)
    }
    .await;
    kv.close().await?;
    println!("{}", result?.versionstamp);
    Ok(())
}

/// Asks on stderr, reads one answer line from stdin: `y` or `yes` confirms; anything else, or
/// no answer at all (stdin closed), does not.
fn confirm(entries: u64, what: &str) -> Result<bool, CliError> {
    eprint!("delete {entries} entries {what}? [y/N] ");
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

/// `kv watch --prefix P`: prints each event of a range watch until interrupted (or `count`
/// events).
pub async fn watch_prefix(
    db: &str,
    prefix: &str,
    count: Option<usize>,
    format: Format,
) -> Result<(), CliError> {
    let selector = Selector::prefix(parse_key(prefix)?);
    let kv = crate::commands::open_intact(db, Access::Observe).await?;
    let result = async {
        let mut events = kv.watch_range(selector)?;
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
            print_event(&mut std::io::stdout().lock(), &event?, format)?;
            seen += 1;
        }
    }
    .await;
    kv.close().await?;
    result
}

/// One range watch event: for `js` a `reread` line, or a line per changed key, then `--`; for
/// the JSON formats one object per line.
fn print_event(out: &mut impl Write, event: &RangeEvent, format: Format) -> Result<(), CliError> {
    match (event, format) {
        (RangeEvent::Reread, Format::Js) => writeln!(out, "reread\n--").map_err(stdout_error)?,
        (RangeEvent::Reread, _) => {
            writeln!(out, "{}", json!({"reread": true})).map_err(stdout_error)?
        }
        (RangeEvent::Changed(entries), Format::Js) => {
            for entry in entries {
                writeln!(out, "{}", render_maybe(entry, format)?).map_err(stdout_error)?;
            }
            writeln!(out, "--").map_err(stdout_error)?;
        }
        (RangeEvent::Changed(entries), _) => {
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
    }
    out.flush().map_err(stdout_error)
}

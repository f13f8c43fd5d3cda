//! `kv conformance URL`: the conformance kit's cases, run through the KV Connect client against
//! any server.
//!
//! The cases are the kit's own ([`open_deno_kv_conformance::all_cases`], the list its
//! `conformance_main!` macro runs for a Rust engine): nothing is written twice. Each runs on a
//! [`target::ServerUnderTest`] connection confined to a key prefix of its own and cleaned up
//! afterwards, with a clock that starts at the real time and cannot be moved (a case that moves
//! time is reported as not run). Cases needing what the server does not offer are not run, with
//! the reason.

mod report;
mod target;

use std::sync::Arc;

use open_deno_kv_conformance::shared_store::confined;
use open_deno_kv_conformance::{BackendFactory, Offered, Outcome, all_cases, run_case_outcome};
use open_deno_kv_model::{Backend, Capabilities, KvError, ReadRange, SnapshotRead};
use open_deno_kv_remote::RemoteOptions;

use crate::cli::{ConformanceArgs, ReportFormat};
use crate::error::CliError;
use report::{CaseReport, Report};
use target::ServerUnderTest;

/// Runs the suite against `args.url` and prints the report; an error when a case failed or the
/// server cannot be used at all.
pub async fn conformance(args: ConformanceArgs) -> Result<(), CliError> {
    let mut options = RemoteOptions::from_env();
    if let Some(token) = &args.token {
        options.access_token = token.clone();
    }
    if let Some(ca) = crate::store::ca_file() {
        options.ca_file = Some(ca);
    }
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let probe_server = ServerUnderTest::new(&args.url, options.clone(), run.clone());
    let not_usable = |e: KvError| CliError::NotKvConnect {
        url: args.url.clone(),
        reason: one_line(&e.to_string()),
    };
    let probe = probe_server.connect().await.map_err(not_usable)?;
    let empty = is_empty(&*probe).await.map_err(not_usable)?;
    let raw = probe.capabilities();
    let _ = probe.close().await;
    if !empty && !args.yes_write {
        return Err(CliError::ConformanceNeedsConsent { url: args.url });
    }
    // The queue is one per database: a case can have it to itself only on a server that was
    // empty (KV Connect cannot tell whether a queue is empty, so an empty store stands for it).
    let owns_queue = empty;
    let server = ServerUnderTest::with_queue(&args.url, options, run, owns_queue);
    let mut capabilities = confined(raw);
    capabilities.queues = raw.queues && owns_queue;
    let offered = Offered {
        capabilities,
        can_reopen: true,
        manual_clock: false,
    };
    let factory: Arc<dyn BackendFactory> = Arc::new(server);
    let filter = args.filter.clone();
    let cases = tokio::task::spawn_blocking(move || run_all(factory, offered, raw, filter))
        .await
        .map_err(|e| CliError::NotKvConnect {
            url: args.url.clone(),
            reason: format!("the suite stopped: {e}"),
        })?;
    let report = Report {
        url: args.url.clone(),
        offered: offered_names(raw),
        cases,
    };
    match args.format {
        ReportFormat::Text => print!("{}", report.to_text()),
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        ),
    }
    match report.counts().1 {
        0 => Ok(()),
        failed => Err(CliError::ConformanceFailed { failed }),
    }
}

/// Runs every case (that `filter` selects) one after the other, on this (blocking) thread: each
/// case gets a runtime of its own.
fn run_all(
    factory: Arc<dyn BackendFactory>,
    offered: Offered,
    raw: Capabilities,
    filter: Option<String>,
) -> Vec<CaseReport> {
    // A failing case panics; its message goes into the report, not onto stderr.
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let reports = all_cases()
        .into_iter()
        .filter(|case| {
            filter
                .as_ref()
                .is_none_or(|f| case.name.contains(f.as_str()))
        })
        .map(|case| {
            let outcome = if offered.runs(&case) {
                match run_case_outcome(&case, &factory, offered) {
                    Outcome::Failed(detail) => Outcome::Failed(report::shortened(&detail)),
                    other => other,
                }
            } else {
                Outcome::NotRun(missing(case.needs, offered.capabilities, raw))
            };
            CaseReport {
                name: case.name,
                outcome,
            }
        })
        .collect();
    std::panic::set_hook(previous_hook);
    reports
}

/// Whether the server holds no entries (its queue is not looked at: KV Connect cannot list it).
async fn is_empty(kv: &dyn Backend) -> Result<bool, KvError> {
    let read = SnapshotRead {
        ranges: vec![ReadRange {
            start: vec![0x00],
            end: vec![0xff],
            limit: 1,
            reverse: false,
        }],
        ..SnapshotRead::default()
    };
    let ranges = kv.snapshot_read(read).await?;
    Ok(ranges.iter().all(|range| range.entries.is_empty()))
}

/// What each capability is called on the wire, for the report.
fn features(caps: Capabilities) -> [(bool, &'static str); 8] {
    [
        (caps.queues, "queues (queue/1)"),
        (caps.watch, "watch"),
        (caps.range_delete, "range deletes (range-delete/1)"),
        (caps.count, "counts (count/1)"),
        (caps.watch_range, "range watches (watch-range/1)"),
        (caps.export || caps.import, "snapshots (snapshot/1)"),
        (caps.change_log, "the change log (change-log/1)"),
        (caps.integrity_check, "the integrity check"),
    ]
}

/// The names of what the server offers.
fn offered_names(raw: Capabilities) -> Vec<&'static str> {
    features(raw)
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
}

/// Why a case with `needs` does not run: what the server lacks, or what a prefixed run cannot
/// confine.
fn missing(needs: Capabilities, confined: Capabilities, raw: Capabilities) -> String {
    let lacking: Vec<&str> = features(needs)
        .into_iter()
        .zip(features(raw))
        .filter_map(|((needed, name), (has, _))| (needed && !has).then_some(name))
        .collect();
    if !lacking.is_empty() {
        return format!("the server does not offer {}", lacking.join(", "));
    }
    let whole: Vec<&str> = features(needs)
        .into_iter()
        .zip(features(confined))
        .filter_map(|((needed, name), (has, _))| (needed && !has).then_some(name))
        .collect();
    if needs.queues && !confined.queues {
        return "needs the server's queue to itself (there is one queue per database, shared by \
                every key prefix): runs only on a server that was empty at the start"
            .to_owned();
    }
    if !whole.is_empty() || needs.queue_inspection {
        let mut whole = whole;
        if needs.queue_inspection {
            whole.push("listing the queue");
        }
        return format!(
            "needs {}, which acts on the whole database, not only on the case's own key prefix",
            whole.join(", ")
        );
    }
    if needs.durable {
        return "needs a durable store".to_owned();
    }
    "needs what this run cannot offer".to_owned()
}

/// The first line of `text`, at most 300 characters: a server's HTML page or stack trace is not
/// repeated whole.
fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut short: String = line.chars().take(300).collect();
    if short.len() < line.len() || text.trim().lines().count() > 1 {
        short.push_str(" …");
    }
    short
}

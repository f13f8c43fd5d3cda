//! The report of a `kv conformance` run: what the server offers, then every case with its
//! outcome, as readable text or one JSON document.

use open_deno_kv_conformance::Outcome;
use serde_json::{Value, json};

/// The longest detail kept for a failed case: an assertion that prints a 64 KiB value is cut.
const MAX_DETAIL: usize = 2000;

/// `detail`, cut to [`MAX_DETAIL`] characters.
pub fn shortened(detail: &str) -> String {
    if detail.chars().count() <= MAX_DETAIL {
        return detail.to_owned();
    }
    let kept: String = detail.chars().take(MAX_DETAIL).collect();
    format!("{kept} … (cut at {MAX_DETAIL} characters)")
}

/// One case's line in the report.
pub struct CaseReport {
    /// `group::name`.
    pub name: String,
    /// What became of it.
    pub outcome: Outcome,
}

/// A whole run.
pub struct Report {
    /// The server's URL.
    pub url: String,
    /// The protocol extensions and features the server offered, by name.
    pub offered: Vec<&'static str>,
    /// Every case, in the suite's order.
    pub cases: Vec<CaseReport>,
}

impl Report {
    /// How many cases passed, failed and did not run.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for case in &self.cases {
            match case.outcome {
                Outcome::Passed => counts.0 += 1,
                Outcome::Failed(_) => counts.1 += 1,
                Outcome::NotRun(_) => counts.2 += 1,
            }
        }
        counts
    }

    /// The report as JSON: `{"url", "offered", "summary": {passed, failed, not_run},
    /// "cases": [{"name", "outcome": "passed"|"failed"|"not_run", "detail"?}]}`.
    pub fn to_json(&self) -> Value {
        let (passed, failed, not_run) = self.counts();
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|case| match &case.outcome {
                Outcome::Passed => json!({"name": case.name, "outcome": "passed"}),
                Outcome::Failed(detail) => {
                    json!({"name": case.name, "outcome": "failed", "detail": detail})
                }
                Outcome::NotRun(reason) => {
                    json!({"name": case.name, "outcome": "not_run", "detail": reason})
                }
            })
            .collect();
        json!({
            "url": self.url,
            "offered": self.offered,
            "summary": {"passed": passed, "failed": failed, "not_run": not_run},
            "cases": cases,
        })
    }

    /// The report as text: one line per case (`ok`, `FAILED` followed by the indented details,
    /// `not run: reason`), then the totals.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "conformance of {}\noffered: {}\n\n",
            self.url,
            if self.offered.is_empty() {
                "plain KV Connect (no extensions)".to_owned()
            } else {
                self.offered.join(", ")
            }
        );
        for case in &self.cases {
            match &case.outcome {
                Outcome::Passed => out.push_str(&format!("ok       {}\n", case.name)),
                Outcome::Failed(detail) => {
                    out.push_str(&format!("FAILED   {}\n", case.name));
                    for line in detail.lines() {
                        out.push_str(&format!("           {line}\n"));
                    }
                }
                Outcome::NotRun(reason) => {
                    out.push_str(&format!("not run  {}: {reason}\n", case.name))
                }
            }
        }
        let (passed, failed, not_run) = self.counts();
        out.push_str(&format!(
            "\n{passed} passed, {failed} failed, {not_run} not run\n"
        ));
        out
    }
}

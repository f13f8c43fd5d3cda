//! Progress bars for long commands, drawn on stderr only when it is a terminal (so pipes and CI
//! logs stay clean).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar, or nothing when stderr is not a terminal.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// Starts a bar for `what`: with a known total (bytes of input), a bar; without, a counter.
    pub fn new(what: &str, total: Option<u64>) -> Self {
        let bar = match total {
            Some(total) => ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg}: {pos} entries ({per_sec})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        if !std::io::stderr().is_terminal() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
        bar.set_message(what.to_owned());
        Progress { bar }
    }

    /// Adds `n` to the position.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

//! `kv serve`'s logs: the server's `tracing` events (and `kv serve`'s own), written on stderr
//! as text or as one JSON object a line, at the level `--log-level` chooses.
//!
//! The level applies to the server and to `kv` itself; the libraries underneath (hyper, h2,
//! rustls, the engines) only report warnings and errors, so `--log-level debug` shows one line
//! per request and not every HTTP/2 frame. The server never puts a token, a key or a value in an
//! event.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, LogLevel};
use crate::error::CliError;

impl LogLevel {
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The filter: `level` for the server and `kv`, at most warnings from everything else.
fn filter(level: LogLevel) -> Result<EnvFilter, CliError> {
    let others = if level == LogLevel::Error {
        "error"
    } else {
        "warn"
    };
    let level = level.directive();
    EnvFilter::builder()
        .parse(format!("{others},open_deno_kv_server={level},kv={level}"))
        .map_err(|e| CliError::Logging(e.to_string()))
}

/// Installs the process's subscriber: events at `level` and above, on stderr, in `format`.
pub fn init(level: LogLevel, format: LogFormat) -> Result<(), CliError> {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(level)?)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| CliError::Logging(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_makes_a_filter() {
        for level in [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ] {
            let shown = filter(level).map(|f| f.to_string());
            let shown = shown.unwrap_or_else(|e| panic!("{level:?}: {e}"));
            assert!(
                shown.contains(&format!("open_deno_kv_server={}", level.directive())),
                "{shown}"
            );
        }
    }
}

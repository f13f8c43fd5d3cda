//! Warnings a client can cause, summarised: failed TLS handshakes, wrong-protocol connections,
//! evictions and refusals are each counted per kind over an interval
//! ([`crate::ResourceLimits::warning_interval`], 10 s by default), never logged one line each.
//!
//! Anyone who can reach the port can cause these, as fast as they can open connections, so a
//! line per event would let them fill the disk and drown every other line. Per kind and
//! interval, at most two lines are written: the first event at once, with its cause and peer
//! (what an operator needs to fix one misconfigured client), and, if more followed, one summary
//! when the interval ends:
//!
//! ```text
//! WARN TLS handshake failed: received corrupt message of type InvalidContentType peer=10.0.0.7:51234 (more in this interval are counted, then summarised)
//! WARN 1,234 failed TLS handshakes from 5 addresses in the last 10 s
//! ```
//!
//! The distinct addresses are counted up to 10,000 per kind and interval ("at least"
//! beyond), so the memory a flood takes is bounded too.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The distinct addresses remembered per kind and interval.
pub(crate) const MAX_ADDRESSES: usize = 10_000;

/// A kind of warning that clients can cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warning {
    /// A TLS handshake that failed.
    TlsHandshakeFailed,
    /// A TLS handshake not completed within the header timeout.
    TlsHandshakeTimedOut,
    /// A TLS handshake on the plaintext port (answered with a TLS alert).
    TlsOnPlaintextPort,
    /// Plaintext on the TLS port (answered 400).
    PlaintextOnTlsPort,
    /// A connection that had not authorized, closed to make room for a new one at the cap.
    Evicted,
    /// A connection that made no authorized request within the deadline, closed.
    NotAuthorizedInTime,
    /// A connection refused: its address holds too many connections that have not authorized.
    TooManyFromAddress,
    /// A connection refused: the cap is reached and every connection has authorized.
    OverCap,
}

impl Warning {
    const ALL: [Warning; 8] = [
        Warning::TlsHandshakeFailed,
        Warning::TlsHandshakeTimedOut,
        Warning::TlsOnPlaintextPort,
        Warning::PlaintextOnTlsPort,
        Warning::Evicted,
        Warning::NotAuthorizedInTime,
        Warning::TooManyFromAddress,
        Warning::OverCap,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// What a summary counts, in the plural.
    fn counted(self) -> &'static str {
        match self {
            Warning::TlsHandshakeFailed => "failed TLS handshakes",
            Warning::TlsHandshakeTimedOut => "TLS handshakes not completed in time",
            Warning::TlsOnPlaintextPort => {
                "TLS handshakes on this plaintext port (refused with a TLS alert)"
            }
            Warning::PlaintextOnTlsPort => "plaintext requests on this TLS port (answered 400)",
            Warning::Evicted => {
                "connections that had not authorized closed to make room at the connection cap"
            }
            Warning::NotAuthorizedInTime => {
                "connections closed for making no authorized request within the deadline"
            }
            Warning::TooManyFromAddress => {
                "connections refused because their address already held the most connections \
                 that have not authorized"
            }
            Warning::OverCap => {
                "connections refused at the connection cap (every connection open had authorized)"
            }
        }
    }
}

/// One kind's count over the current interval.
#[derive(Default)]
struct Tally {
    count: u64,
    addresses: HashSet<IpAddr>,
}

/// The summarising logger (see the [module](self)); one per running server.
pub(crate) struct LogSummary {
    enabled: bool,
    interval: Duration,
    tallies: Mutex<Vec<Tally>>,
}

impl LogSummary {
    /// A summary over `interval`; `enabled: false` logs nothing
    /// ([`crate::ServerConfig::log_errors`]).
    pub(crate) fn new(enabled: bool, interval: Duration) -> Self {
        LogSummary {
            enabled,
            interval,
            tallies: Mutex::new(Warning::ALL.iter().map(|_| Tally::default()).collect()),
        }
    }

    /// One event of `kind` from `peer`; `detail` is logged only if it is the interval's first of
    /// its kind.
    pub(crate) fn record(&self, kind: Warning, peer: IpAddr, detail: impl FnOnce() -> String) {
        if !self.enabled {
            return;
        }
        let first = {
            let mut tallies = self.tallies.lock().unwrap_or_else(PoisonError::into_inner);
            let tally = &mut tallies[kind.index()];
            tally.count += 1;
            if tally.addresses.len() < MAX_ADDRESSES {
                tally.addresses.insert(peer);
            }
            tally.count == 1
        };
        if first {
            tracing::warn!(
                peer = %peer,
                "{} (more in this interval are counted, then summarised)",
                detail()
            );
        }
    }

    /// Ends the interval: one summary line per kind that had more than its first event, and the
    /// counts start again.
    pub(crate) fn flush(&self) {
        let summaries: Vec<String> = {
            let mut tallies = self.tallies.lock().unwrap_or_else(PoisonError::into_inner);
            Warning::ALL
                .iter()
                .zip(tallies.iter_mut())
                .filter_map(|(kind, tally)| {
                    let summary = (tally.count > 1)
                        .then(|| summary(*kind, tally.count, tally.addresses.len(), self.interval));
                    *tally = Tally::default();
                    summary
                })
                .collect()
        };
        for line in summaries {
            tracing::warn!("{line}");
        }
    }

    /// Flushes every interval until `shutdown` turns true, then once more.
    pub(crate) async fn run(&self, mut shutdown: watch::Receiver<bool>) {
        let mut next = Instant::now() + self.interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {
                    self.flush();
                    next += self.interval;
                }
                _ = shutdown.wait_for(|stop| *stop) => break,
            }
        }
        self.flush();
    }
}

/// "1,234 failed TLS handshakes from 5 addresses in the last 10 s".
fn summary(kind: Warning, count: u64, addresses: usize, interval: Duration) -> String {
    let from = match addresses {
        1 => "from 1 address".to_owned(),
        n if n >= MAX_ADDRESSES => format!("from at least {} addresses", thousands(n as u64)),
        n => format!("from {} addresses", thousands(n as u64)),
    };
    format!(
        "{} {} {from} in the last {}",
        thousands(count),
        kind.counted(),
        seconds(interval)
    )
}

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// "10 s", "0.5 s".
fn seconds(interval: Duration) -> String {
    let secs = interval.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_read_as_sentences() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234), "1,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(
            summary(
                Warning::TlsHandshakeFailed,
                1_234,
                5,
                Duration::from_secs(10)
            ),
            "1,234 failed TLS handshakes from 5 addresses in the last 10 s"
        );
        assert_eq!(
            summary(Warning::OverCap, 2, 1, Duration::from_millis(500)),
            "2 connections refused at the connection cap (every connection open had authorized) \
             from 1 address in the last 0.5 s"
        );
        assert!(
            summary(
                Warning::Evicted,
                20_000,
                MAX_ADDRESSES,
                Duration::from_secs(10)
            )
            .contains("from at least 10,000 addresses")
        );
    }
}

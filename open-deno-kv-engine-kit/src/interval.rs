//! Periodic work on a blocking engine's idle thread (sweeps, keep-alives, syncs): "is it time
//! again?"

use std::time::{Duration, Instant};

/// Work due every `period`, counted from when it last ran (or from creation).
///
/// ```
/// use std::time::Duration;
/// use open_deno_kv_engine_kit::interval::Every;
/// let mut now_and_then = Every::new(Duration::ZERO);
/// assert!(now_and_then.due());
/// let mut hourly = Every::new(Duration::from_secs(3600));
/// assert!(!hourly.due(), "an hour has not passed since creation");
/// ```
#[derive(Debug, Clone)]
pub struct Every {
    period: Duration,
    last: Instant,
}

impl Every {
    /// Due first one `period` from now.
    pub fn new(period: Duration) -> Self {
        Every {
            period,
            last: Instant::now(),
        }
    }

    /// Whether the work is due; if it is, the next period starts now (the caller runs it).
    pub fn due(&mut self) -> bool {
        let due = self.last.elapsed() >= self.period;
        if due {
            self.last = Instant::now();
        }
        due
    }
}

/// Commits a durable engine made without a sync, and when they must be synced.
///
/// An engine that commits some work unsynced (queue bookkeeping, see [`crate::queue`]; or every
/// commit, in a deferred-durability mode) records each commit here, and syncs once
/// [`Unsynced::due`]: `within` after the first commit that is not yet durable. A synced commit
/// makes everything before it durable too, so it clears the debt.
///
/// ```
/// use std::time::Duration;
/// use open_deno_kv_engine_kit::interval::Unsynced;
///
/// let mut unsynced = Unsynced::new(Duration::from_secs(3600));
/// assert!(!unsynced.pending());
/// unsynced.committed(false);
/// assert!(unsynced.pending() && !unsynced.due(), "an hour has not passed");
/// unsynced.committed(true);
/// assert!(!unsynced.pending(), "a synced commit made the earlier one durable");
/// ```
#[derive(Debug, Clone)]
pub struct Unsynced {
    within: Duration,
    since: Option<Instant>,
}

impl Unsynced {
    /// Nothing unsynced yet; a commit left unsynced is due for a sync `within` after it.
    pub fn new(within: Duration) -> Self {
        Unsynced {
            within,
            since: None,
        }
    }

    /// Records a commit, `synced` or not.
    pub fn committed(&mut self, synced: bool) {
        if synced {
            self.since = None;
        } else {
            self.since.get_or_insert_with(Instant::now);
        }
    }

    /// A sync was tried and could not be made (a failure, a reader in the way): the next try
    /// is due `within` from now.
    pub fn postpone(&mut self) {
        if self.since.is_some() {
            self.since = Some(Instant::now());
        }
    }

    /// Whether a commit waits for a sync.
    pub fn pending(&self) -> bool {
        self.since.is_some()
    }

    /// Whether the oldest unsynced commit has waited long enough: sync now.
    pub fn due(&self) -> bool {
        self.due_in() == Some(Duration::ZERO)
    }

    /// How long until a sync is due (zero: now); `None` when nothing waits for one.
    pub fn due_in(&self) -> Option<Duration> {
        self.since
            .map(|since| self.within.saturating_sub(since.elapsed()))
    }
}

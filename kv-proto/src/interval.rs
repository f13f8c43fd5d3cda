//! Periodic work on a blocking engine's idle thread (sweeps, keep-alives): "is it time again?"

use std::time::{Duration, Instant};

/// Work due every `period`, counted from when it last ran (or from creation).
///
/// ```
/// use std::time::Duration;
/// use kv_proto::interval::Every;
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

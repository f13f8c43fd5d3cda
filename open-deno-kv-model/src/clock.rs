//! Injected time.
//!
//! Expiry and queue back-off depend on the current time. Backends never call the system clock
//! directly: they take a [`Clock`], so tests can use a [`ManualClock`] (programs, open-deno-kv-engine-kit's `SystemClock`) and move time forward by
//! hours without sleeping. [`Clock::sleep_until`] lets a queue consumer wait for the next due
//! message in the clock's own time: a manual clock wakes such sleepers when it is advanced.
//!
//! ```
//! use std::time::Duration;
//! use open_deno_kv_model::{Clock, ManualClock};
//!
//! let clock = ManualClock::new(open_deno_kv_model::ms_to_datetime(1_000).unwrap());
//! clock.advance(Duration::from_secs(60));
//! assert_eq!(clock.now_ms(), 61_000);
//! ```

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures::future::BoxFuture;
use tokio::sync::watch;

/// A source of the current time that backends take instead of reading the system clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Milliseconds since the Unix epoch, the unit Deno stores times in.
    fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// A future that completes once [`Clock::now`] is at or past `deadline`.
    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()>;
}

/// Converts Unix milliseconds to a time, or `None` if out of chrono's range.
pub fn ms_to_datetime(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// A clock that stands still until told to move. Cheap to clone; clones share the same time.
///
/// Sleepers created by [`Clock::sleep_until`] wake as soon as [`ManualClock::advance`] or
/// [`ManualClock::set`] moves the time past their deadline.
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualClockInner>,
}

struct ManualClockInner {
    now: Mutex<DateTime<Utc>>,
    changed: watch::Sender<()>,
}

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        let (changed, _) = watch::channel(());
        ManualClock {
            inner: Arc::new(ManualClockInner {
                now: Mutex::new(start),
                changed,
            }),
        }
    }

    /// A clock showing 2024-01-01T00:00:00Z, a fixed, readable starting point for tests.
    pub fn at_test_epoch() -> Self {
        Self::new(DateTime::from_timestamp(1_704_067_200, 0).unwrap_or_default())
    }

    /// Moves the time forward by `by` and wakes every sleeper whose deadline has come.
    pub fn advance(&self, by: Duration) {
        let delta = TimeDelta::from_std(by).unwrap_or(TimeDelta::MAX);
        {
            let mut now = self.lock();
            *now = now
                .checked_add_signed(delta)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
        }
        self.inner.changed.send_replace(());
    }

    /// Sets the time (it may go backwards, to test that backends cope) and wakes sleepers.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.lock() = to;
        self.inner.changed.send_replace(());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // The guarded value is a plain timestamp: a panic elsewhere cannot leave it inconsistent.
        self.inner
            .now
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &*self.lock())
            .finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let clock = self.clone();
        let mut changes = self.inner.changed.subscribe();
        Box::pin(async move {
            while clock.now() < deadline {
                if changes.changed().await.is_err() {
                    // Cannot happen while `clock` holds the sender; stop waiting if it does.
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_sleep_wakes_on_advance() {
        let clock = ManualClock::at_test_epoch();
        let deadline = clock.now() + TimeDelta::seconds(30);
        let sleeper = tokio::spawn(clock.sleep_until(deadline));
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(10));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(20));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn manual_sleep_until_past_returns_at_once() {
        let clock = ManualClock::at_test_epoch();
        clock.sleep_until(clock.now()).await;
    }
}

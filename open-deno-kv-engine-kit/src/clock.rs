//! The real wall clock, for engines and programs (tests inject the model's `ManualClock`).
//!
//! ```
//! use open_deno_kv_engine_kit::{Clock, SystemClock};
//!
//! assert!(SystemClock.now_ms() > 1_700_000_000_000, "after November 2023");
//! ```

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use open_deno_kv_model::Clock;

/// The real wall clock. Sleeping uses tokio's timer, so it needs a tokio runtime with time
/// enabled.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            // Re-check after waking: the wall clock may have been adjusted while sleeping.
            loop {
                let left = deadline - Utc::now();
                match left.to_std() {
                    Ok(d) if !d.is_zero() => tokio::time::sleep(d).await,
                    _ => return,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[tokio::test]
    async fn sleep_until_past_returns_at_once() {
        SystemClock
            .sleep_until(Utc::now() - TimeDelta::seconds(1))
            .await;
    }
}

//! Times a request gives relative to now (an expiry, an enqueue delay), as absolute times.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::error::{Error, Result};

/// `now + after`, or a clear error for a duration beyond the calendar.
pub(crate) fn time_after(now: DateTime<Utc>, after: Duration) -> Result<DateTime<Utc>> {
    TimeDelta::from_std(after)
        .ok()
        .and_then(|after| now.checked_add_signed(after))
        .ok_or_else(|| {
            Error::invalid_argument(format!("a time {after:?} from now is out of range"))
        })
}

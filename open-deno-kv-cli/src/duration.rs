//! Durations on the command line, read and written one way everywhere: `--expire-in`,
//! `enqueue --delay` and `log enable --keep` all take `60s`, `5min`, `7d` or `1h 30m`, and a
//! plain number is milliseconds (what `--expire-in` and `--delay` took before units, and what
//! Deno's `expireIn` and `delay` options count in).

use std::time::Duration;

/// Reads a duration: a plain number of milliseconds (`60000`), or a number with units as
/// humantime reads them (`60s`, `5min`, `12h`, `7d`, `1h 30m`, `250ms`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{text:?} is too many milliseconds (at most {})", u64::MAX));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "{text:?} is not a duration ({e}): write a number of milliseconds (60000) or a \
             number with a unit (60s, 5min, 12h, 7d, 1h 30m)"
        )
    })
}

/// Writes a duration for people: `7 days`, `1 day 12 hours`, `90 minutes` reads as
/// `1 hour 30 minutes`, `1.5 seconds` as `1 second 500 milliseconds`; zero is `0 seconds`.
pub fn format_duration(duration: Duration) -> String {
    let mut seconds = duration.as_secs();
    let millis = duration.subsec_millis();
    let mut parts = Vec::new();
    for (unit, size) in [
        ("day", 86_400),
        ("hour", 3_600),
        ("minute", 60),
        ("second", 1),
    ] {
        let count = seconds / size;
        seconds %= size;
        if count > 0 {
            parts.push(plural(count, unit, &format!("{unit}s")));
        }
    }
    if millis > 0 {
        parts.push(plural(u64::from(millis), "millisecond", "milliseconds"));
    }
    if parts.is_empty() {
        return "0 seconds".to_owned();
    }
    parts.join(" ")
}

/// `1 entry`, `2 entries`, `0 entries`: a count with the noun in the form English gives it.
pub fn plural(count: u64, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_milliseconds_and_units_are_read() {
        let cases = [
            ("60000", Duration::from_secs(60)),
            ("0", Duration::ZERO),
            ("60s", Duration::from_secs(60)),
            ("5min", Duration::from_secs(300)),
            ("7d", Duration::from_secs(7 * 86_400)),
            ("1h 30m", Duration::from_secs(5_400)),
            ("250ms", Duration::from_millis(250)),
            (" 12h ", Duration::from_secs(12 * 3_600)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), Ok(expected), "{text:?}");
        }
        for bad in ["", "-5", "5 parsecs", "1.5.2s", "99999999999999999999999"] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
    }

    #[test]
    fn durations_and_counts_read_as_english() {
        assert_eq!(format_duration(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(format_duration(Duration::from_secs(86_400)), "1 day");
        assert_eq!(
            format_duration(Duration::from_secs(86_400 + 3_600 + 60 + 1)),
            "1 day 1 hour 1 minute 1 second"
        );
        assert_eq!(
            format_duration(Duration::from_secs(5_400)),
            "1 hour 30 minutes"
        );
        assert_eq!(
            format_duration(Duration::from_millis(1_500)),
            "1 second 500 milliseconds"
        );
        assert_eq!(format_duration(Duration::ZERO), "0 seconds");
        assert_eq!(plural(1, "entry", "entries"), "1 entry");
        assert_eq!(plural(0, "entry", "entries"), "0 entries");
        assert_eq!(
            plural(2, "queued message", "queued messages"),
            "2 queued messages"
        );
    }
}

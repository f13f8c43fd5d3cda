//! `kv log` (the change log of a database: status, enable, disable) and what `kv restore --at`
//! needs from the command line (the restore point).

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use open_deno_kv::Versionstamp;
use open_deno_kv_model::change_log::{ChangeLogStatus, RestorePoint};

use crate::error::CliError;
use crate::store::{Access, open};

/// Reads `--at`: a versionstamp (20 hex digits, as `kv get` and `kv backup` print them) or an
/// RFC 3339 time (`2026-11-26T09:30:00Z`).
pub fn parse_point(text: &str) -> Result<RestorePoint, String> {
    if let Ok(versionstamp) = text.parse::<Versionstamp>() {
        return Ok(RestorePoint::Commit(versionstamp));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|time| RestorePoint::Time(time.with_timezone(&Utc)))
        .map_err(|_| {
            format!(
                "{text:?} is neither a versionstamp (20 hexadecimal digits) nor an RFC 3339 \
                 time such as 2026-11-26T09:30:00Z"
            )
        })
}

/// Reads `--keep`: a duration such as `7d`, `12h`, `90min` or `1h 30m`.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e} (try 7d, 12h or 90min)"))
}

/// `kv log status`: whether the log is on, its retention and what it holds.
pub async fn status(db: &str) -> Result<(), CliError> {
    let kv = open(db, Access::Read)?;
    let status = kv.backend().change_log_status().await;
    kv.close().await?;
    print!("{}", describe(&status?));
    Ok(())
}

/// `kv log enable --keep D`: switches the log on (or changes its retention).
pub async fn enable(db: &str, keep: Duration) -> Result<(), CliError> {
    let kv = open(db, Access::Write)?;
    let result = kv.backend().configure_change_log(Some(keep)).await;
    kv.close().await?;
    result?;
    eprintln!(
        "the change log of {db} is on: every commit from now on is logged and kept for {}",
        humantime::format_duration(keep)
    );
    Ok(())
}

/// `kv log disable`: switches the log off and deletes it.
pub async fn disable(db: &str) -> Result<(), CliError> {
    let kv = open(db, Access::Write)?;
    let result = kv.backend().configure_change_log(None).await;
    kv.close().await?;
    result?;
    eprintln!("the change log of {db} is off and its records are deleted");
    Ok(())
}

/// The lines `kv log status` prints.
fn describe(status: &ChangeLogStatus) -> String {
    let Some(retention) = status.retention else {
        return "change log: off\n".to_owned();
    };
    let mut text = format!(
        "change log: on, records kept for {}\nrecords: {}\n",
        humantime::format_duration(retention),
        status.records
    );
    for (name, mark) in [("first", status.first), ("last", status.last)] {
        if let Some(mark) = mark {
            text += &format!(
                "{name}: {} at {}\n",
                mark.versionstamp,
                mark.at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use open_deno_kv_model::change_log::LogMark;

    #[test]
    fn a_point_is_a_versionstamp_or_a_time() {
        assert_eq!(
            parse_point("00000000000000070000"),
            Ok(RestorePoint::Commit(Versionstamp::from_version(7, 0)))
        );
        let time = DateTime::parse_from_rfc3339("2026-11-26T09:30:00+01:00")
            .expect("time")
            .with_timezone(&Utc);
        assert_eq!(
            parse_point("2026-11-26T09:30:00+01:00"),
            Ok(RestorePoint::Time(time))
        );
        let err = parse_point("yesterday").expect_err("neither");
        assert!(err.contains("RFC 3339"), "{err}");
    }

    #[test]
    fn a_retention_reads_as_people_write_it() {
        assert_eq!(parse_retention("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_retention("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert!(parse_retention("forever").is_err());
    }

    #[test]
    fn the_status_names_the_retention_and_both_ends() {
        assert_eq!(describe(&ChangeLogStatus::default()), "change log: off\n");
        let at = DateTime::from_timestamp(1_795_000_000, 0).expect("time");
        let mark = LogMark {
            versionstamp: Versionstamp::from_version(3, 0),
            at,
        };
        let status = ChangeLogStatus {
            retention: Some(Duration::from_secs(86_400)),
            records: 2,
            first: Some(mark),
            last: Some(mark),
        };
        assert_eq!(
            describe(&status),
            "change log: on, records kept for 1day\nrecords: 2\n\
             first: 00000000000000030000 at 2026-11-18T11:06:40Z\n\
             last: 00000000000000030000 at 2026-11-18T11:06:40Z\n"
        );
    }
}

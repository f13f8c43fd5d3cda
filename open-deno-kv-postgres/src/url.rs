//! Connection URLs: libpq's `postgres://` form, with the parameters this crate reads itself
//! taken out before the rest goes to tokio-postgres.
//!
//! | parameter | meaning |
//! |---|---|
//! | `sslmode`, `sslrootcert`, `sslcert`, `sslkey` | TLS, with libpq's meanings (see the `tls` module) |
//! | `schema` | the PostgreSQL schema of the store (a lowercase identifier); replaces [`crate::PostgresOptions::schema`] |
//! | `read_only` (or `read_only=true`) | open read-only ([`crate::PostgresOptions::read_only`]) |
//! | `pool_size=N` | pooled connections to the primary ([`crate::PostgresOptions::pool_size`]) |
//! | anything else tokio-postgres reads | `connect_timeout`, `target_session_attrs`, `application_name`, `options`, `keepalives`, several `host:port` pairs, ... |
//!
//! A libpq key/value string (`host=db user=app dbname=app`) is passed to tokio-postgres as it
//! is: its `sslmode` may be `disable`, `prefer` or `require`, and certificates need the URL
//! form. The URL is checked whole, and its files read, before anything is connected to.

use std::time::Duration;

use tokio_postgres::Config;

use crate::PostgresError;
use crate::tls::{RootCert, SslMode, Tls, TlsParams};

/// How long a connection attempt may take, unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed connection URL.
#[derive(Debug, Clone)]
pub(crate) struct ConnectUrl {
    /// What tokio-postgres connects with; its `ssl_mode` says only whether TLS is tried.
    pub(crate) config: Config,
    /// The TLS in force, files read.
    pub(crate) tls: Tls,
    /// The `schema` parameter, if given (not yet checked as an identifier).
    pub(crate) schema: Option<String>,
    /// The `read_only` parameter, if given (`read_only`, `read_only=true` or `=false`).
    pub(crate) read_only: Option<bool>,
    /// The `pool_size` parameter, if given (at least 1).
    pub(crate) pool_size: Option<usize>,
}

/// Parses `url` (see the [module docs](self)).
pub(crate) fn parse(url: &str) -> Result<ConnectUrl, PostgresError> {
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let (base, query) = match url.split_once('?') {
        Some((base, query)) if is_url => (base, query),
        _ => (url, ""),
    };
    let mut tls = TlsParams::default();
    let mut schema = None;
    let mut read_only = None;
    let mut pool_size = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || percent_decode(key, raw);
        match key {
            "sslmode" => tls.mode = Some(SslMode::parse(&value()?)?),
            "sslrootcert" => {
                let value = value()?;
                tls.root_cert = Some(if value == "system" {
                    RootCert::System
                } else {
                    RootCert::File(non_empty(key, value)?)
                });
            }
            "sslcert" => tls.client_cert = Some(non_empty(key, value()?)?),
            "sslkey" => tls.client_key = Some(non_empty(key, value()?)?),
            "schema" => schema = Some(value()?),
            "pool_size" => {
                let value = value()?;
                pool_size = Some(
                    value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=10_000).contains(n))
                        .ok_or_else(|| PostgresError::InvalidParameter {
                            parameter: key.to_owned(),
                            value: value.clone(),
                            expected: "a number of connections from 1 to 10000".to_owned(),
                        })?,
                );
            }
            "read_only" => {
                read_only = Some(match value()?.as_str() {
                    "" | "true" => true,
                    "false" => false,
                    other => {
                        return Err(PostgresError::InvalidParameter {
                            parameter: key.to_owned(),
                            value: other.to_owned(),
                            expected: "read_only, read_only=true or read_only=false".to_owned(),
                        });
                    }
                });
            }
            _ => kept.push(pair),
        }
    }
    let mut rest = base.to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    let mut config: Config = rest.parse().map_err(|source| PostgresError::InvalidUrl {
        url: without_password(url),
        source,
    })?;
    if !is_url {
        // A key/value string: its sslmode is tokio-postgres's (disable, prefer or require).
        tls.mode = Some(match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Require => SslMode::Require,
            _ => SslMode::Prefer,
        });
    }
    let tls = tls.load()?;
    config.ssl_mode(tls.mode.negotiation());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("open-deno-kv-postgres");
    }
    Ok(ConnectUrl {
        config,
        tls,
        schema,
        read_only,
        pool_size,
    })
}

fn non_empty(key: &str, value: String) -> Result<String, PostgresError> {
    if value.is_empty() {
        return Err(PostgresError::InvalidParameter {
            parameter: key.to_owned(),
            value,
            expected: "a file name".to_owned(),
        });
    }
    Ok(value)
}

/// `url` with the password of its user (if any) replaced, for error messages.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:<password>{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// A URL parameter's value with its `%XX` escapes decoded (as tokio-postgres decodes the rest).
fn percent_decode(key: &str, raw: &str) -> Result<String, PostgresError> {
    let bad = || PostgresError::InvalidParameter {
        parameter: key.to_owned(),
        value: raw.to_owned(),
        expected: "a value whose %-escapes are two hex digits and decode to UTF-8".to_owned(),
    };
    let mut bytes = Vec::with_capacity(raw.len());
    let mut input = raw.bytes();
    while let Some(byte) = input.next() {
        if byte == b'%' {
            let hex = [input.next().ok_or_else(bad)?, input.next().ok_or_else(bad)?];
            let hex = std::str::from_utf8(&hex).map_err(|_| bad())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
        } else {
            bytes.push(byte);
        }
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

/// The host(s) and port(s) of `config`, for messages (`127.0.0.1:5432`, `a:5432,b:5433`).
pub(crate) fn servers(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let ports = config.get_ports();
    let shown: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    if shown.is_empty() {
        "the default host".to_owned()
    } else {
        shown.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(url: &str) -> ConnectUrl {
        match parse(url) {
            Ok(parsed) => parsed,
            Err(err) => panic!("{url}: {err}"),
        }
    }

    fn refusal(url: &str) -> PostgresError {
        match parse(url) {
            Ok(parsed) => panic!("{url} was accepted: {parsed:?}"),
            Err(err) => err,
        }
    }

    #[test]
    fn our_parameters_are_taken_out_and_the_rest_goes_to_the_client() {
        let url = parsed(
            "postgres://app@db.internal:5433/app?schema=tenant_a&sslmode=require&\
             target_session_attrs=read-write&application_name=mine",
        );
        assert_eq!(url.schema.as_deref(), Some("tenant_a"));
        assert_eq!(url.tls.mode, SslMode::Require);
        assert_eq!(
            url.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(url.config.get_application_name(), Some("mine"));
        assert_eq!(url.config.get_dbname(), Some("app"));
        assert_eq!(servers(&url.config), "db.internal:5433");
    }

    #[test]
    fn the_default_mode_is_libpqs_prefer() {
        let url = parsed("postgres://app@h/app");
        assert_eq!(url.tls.mode, SslMode::Prefer);
        assert_eq!(url.schema, None);
        assert_eq!(
            url.config.get_application_name(),
            Some("open-deno-kv-postgres")
        );
        let kv = parsed("host=h user=app sslmode=disable");
        assert_eq!(kv.tls.mode, SslMode::Disable);
    }

    #[test]
    fn multi_host_urls_are_shown_whole() {
        let url = parsed("postgres://app@h1:5432,h2:5433/app?target_session_attrs=read-write");
        assert_eq!(servers(&url.config), "h1:5432,h2:5433");
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        assert!(matches!(
            refusal("postgres://app@h/app?sslmode=verify"),
            PostgresError::InvalidParameter { parameter, .. } if parameter == "sslmode"
        ));
        assert!(matches!(
            refusal("postgres://app@h/app?sslmode=require&sslrootcert=/no/such/ca.pem"),
            PostgresError::TlsFile {
                parameter: "sslrootcert",
                ..
            }
        ));
        assert!(matches!(
            refusal("postgres://app@h/app?sslcert=/no/such.crt&sslkey=/no/such.key"),
            PostgresError::TlsFile {
                parameter: "sslcert",
                ..
            }
        ));
        assert!(matches!(
            refusal("postgres://app@h/app?schema=%zz"),
            PostgresError::InvalidParameter { parameter, .. } if parameter == "schema"
        ));
        assert!(matches!(
            refusal("postgres://app@h/app?pool_size=0"),
            PostgresError::InvalidParameter { parameter, .. } if parameter == "pool_size"
        ));
        assert_eq!(
            parsed("postgres://app@h/app?pool_size=3").pool_size,
            Some(3)
        );
        assert!(matches!(
            refusal("postgres://app@h/app?frobnicate=1"),
            PostgresError::InvalidUrl { .. }
        ));
    }

    #[test]
    fn a_url_that_does_not_parse_is_quoted_without_its_password() {
        let err = refusal("postgres://app:s3cret@h/app?frobnicate=1").to_string();
        assert!(!err.contains("s3cret"), "{err}");
        assert!(err.contains("app:<password>@h/app"), "{err}");
    }

    #[test]
    fn escapes_are_decoded() {
        let url = parsed("postgres://app@h/app?schema=t%5Fa");
        assert_eq!(url.schema.as_deref(), Some("t_a"));
    }
}

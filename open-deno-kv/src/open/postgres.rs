//! Opening a `postgres://` URL: open-deno-kv-postgres's engine, whose background tasks need a tokio
//! runtime.

use std::sync::Arc;

use open_deno_kv_model::{Backend, Clock, KvError};
use open_deno_kv_postgres::{PostgresBackend, PostgresOptions};
use tokio::runtime::{Handle, RuntimeFlavor};

/// Opens the store at `url`, reading time from `clock`.
pub(super) async fn open_postgres(
    url: &str,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn Backend>, KvError> {
    let options = PostgresOptions {
        clock,
        ..PostgresOptions::default()
    };
    Ok(Arc::new(PostgresBackend::open_with(url, options).await?))
}

/// Opens the store at `url` from synchronous code running inside a multi-threaded tokio
/// runtime, which then runs the handle's background tasks. The caller's worker hands its other
/// tasks to the runtime (`block_in_place`) while it waits for the open, and the runtime's other
/// workers drive the connections; a current-thread runtime (or none) is refused, as nothing
/// would drive them.
pub(super) fn open_postgres_blocking(
    url: &str,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn Backend>, KvError> {
    let refusal = || {
        KvError::invalid_argument(
            "postgres:// URLs open inside a multi-threaded tokio runtime; \
             in async code use Kv::open",
        )
    };
    let handle = Handle::try_current().map_err(|_| refusal())?;
    if handle.runtime_flavor() == RuntimeFlavor::CurrentThread {
        return Err(refusal());
    }
    tokio::task::block_in_place(|| handle.block_on(open_postgres(url, clock)))
}

/// `url` with its password (if any) replaced, for `Debug`.
pub(super) fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:<redacted>{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_password;

    #[test]
    fn passwords_are_never_printed() {
        assert_eq!(
            redact_password("postgres://app:s3cret@db:5432/app"),
            "postgres://app:<redacted>@db:5432/app"
        );
        assert_eq!(
            redact_password("postgres://app@db/app"),
            "postgres://app@db/app"
        );
    }
}

//! The crate's one error type.

use thiserror::Error;

/// Why a test service could not be had.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TestServiceError {
    /// moto's server program is neither where `MOTO_SERVER_BIN` says nor installable by the
    /// repository's `.ci/install-moto`.
    #[error(
        "moto (the S3-compatible test server) is missing: {reason}. Install it with \
         `.ci/install-moto` (a Python venv under target/ with `pip install 'moto[server]==5.2.5'`; \
         it needs python3 with venv and PyPI), or set MOTO_SERVER_BIN to a moto_server program; \
         set KV_S3_TESTS=skip to skip these tests instead"
    )]
    MotoMissing {
        /// What was looked at and what it said.
        reason: String,
    },

    /// denokv 0.14 is not where `DENOKV_BIN` or the target directory says.
    #[error(
        "denokv 0.14 is missing: {reason}. Build it with `.ci/denokv-conformance` (or `cargo \
         install denokv --version 0.14.0 --locked --root TARGET_DIR/denokv-0.14.0`, about 10 \
         minutes), or set DENOKV_BIN to a denokv 0.14 binary; set KV_DENOKV_TESTS=skip to skip \
         these tests instead"
    )]
    DenokvMissing {
        /// What was looked at and what it said.
        reason: String,
    },

    /// A service was found but did not start, or a request to it failed.
    #[error("{service}: {step} failed: {detail}")]
    Service {
        /// The service (`moto`, `denokv`).
        service: &'static str,
        /// What was being done.
        step: String,
        /// What went wrong (the program's output, the I/O error, the answer).
        detail: String,
    },
}

/// A [`TestServiceError::Service`] of moto.
pub(crate) fn moto(step: impl Into<String>, detail: impl ToString) -> TestServiceError {
    TestServiceError::Service {
        service: "moto",
        step: step.into(),
        detail: detail.to_string(),
    }
}

//! The variables that tell a test to skip a missing service, loudly.

/// Set to `skip` to skip the tests that need moto, the S3-compatible test server, when it cannot
/// be had (they say so loudly); unset, a missing moto fails them.
pub const S3_SKIP_VARIABLE: &str = "KV_S3_TESTS";

/// Set to `skip` to skip the tests that need denokv 0.14 when it is not built (they say so
/// loudly); unset, a missing denokv fails them.
pub const DENOKV_SKIP_VARIABLE: &str = "KV_DENOKV_TESTS";

/// Whether `variable` says `skip`.
pub(crate) fn requested(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|value| value == "skip")
}

/// Says loudly on stderr that a test is skipped, and why.
pub(crate) fn announce(what: &str, reason: &dyn std::fmt::Display, variable: &str) {
    eprintln!("\n*** SKIPPED: {what} ({reason}); {variable}=skip is set ***\n");
}

//! # open-deno-kv-conformance — the suite every Deno KV backend runs
//!
//! One suite, written once, that proves a storage engine is a correct Deno KV backend: scenario
//! cases for every rule of `deno-kv-semantics.md`, model-based property tests against an
//! independent reference model, and concurrency cases. Each case is its own named test in
//! `cargo test` output; cases that need a capability the backend does not report (queues, watch,
//! reopen) show as ignored.
//!
//! Plugging a backend in takes one line in a test file whose `[[test]]` entry says
//! `harness = false`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use open_deno_kv_model::Backend;
//!
//! open_deno_kv_conformance::conformance_main!(|ctx: &open_deno_kv_conformance::TestContext| {
//!     let clock = Arc::new(ctx.clock().clone());
//!     async move { Ok(Arc::new(open_deno_kv_memory::MemoryBackend::open(&Default::default(), clock)) as Arc<dyn Backend>) }
//! });
//! ```
//!
//! Any KV Connect server, in any language, runs the same cases from the command line:
//! `kv conformance http://HOST:PORT/ --token T` (open-deno-kv-cli) takes [`all_cases`] and runs
//! each through the KV Connect client with [`run_case_outcome`], confined to a key prefix of its
//! own by [`Prefixed`] ([`shared_store`]); a case that needs what a remote server cannot give (a
//! movable clock, Deno's full key budget) stops as [`NotRunnable`] and is reported as not run.
//!
//! Durable engines can also run the crash harness ([`crash`]): child processes committing writes
//! are killed with `SIGKILL` at random moments, and every acknowledged commit must survive,
//! whole, with its queue message delivered exactly once ([`crash_main!`]).
//!
//! See `README.md` in this crate for the step-by-step guide.

mod cases;
pub mod crash;
pub mod deno;
pub mod faults;
mod harness;
pub mod model;
pub mod shared_store;
pub mod support;
#[cfg(unix)]
pub mod unprivileged;

use std::process::ExitCode;
use std::sync::Arc;

pub use harness::{
    BackendFactory, CASE_TIMEOUT, Case, Env, FnFactory, Offered, Outcome, TestContext,
    probe_backend, run_case, run_case_outcome,
};
pub use shared_store::{NotRunnable, Prefixed};

/// Every case of the suite, scenario and model-based.
pub fn all_cases() -> Vec<Case> {
    let mut cases = cases::all();
    cases.extend(model::cases());
    cases
}

/// Runs the whole suite against `factory` with libtest's command line (filters, `--list`,
/// `--ignored`, `--test-threads`...). Used by [`conformance_main!`].
pub fn run_main(factory: Arc<dyn BackendFactory>) -> ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    match run_suite(factory, &args) {
        Ok(conclusion) => conclusion.exit_code(),
        Err(message) => {
            eprintln!("open-deno-kv-conformance: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the suite against `factory` as `args` select, and says how many cases passed, failed and
/// were ignored. A case whose needs the backend's capabilities do not cover is ignored (not
/// run, not counted as passed; see [`Offered::runs`]). `Err` when the backend cannot be opened to probe its
/// capabilities.
pub fn run_suite(
    factory: Arc<dyn BackendFactory>,
    args: &libtest_mimic::Arguments,
) -> Result<libtest_mimic::Conclusion, String> {
    let offered = probe_backend(&factory)?;
    let trials = all_cases()
        .into_iter()
        .map(|case| {
            let supported = offered.runs(&case);
            let name = case.name.clone();
            let factory = factory.clone();
            libtest_mimic::Trial::test(name, move || {
                run_case(&case, &factory, offered).map_err(Into::into)
            })
            .with_ignored_flag(!supported)
        })
        .collect();
    Ok(libtest_mimic::run(args, trials))
}

/// Defines `fn main` for a conformance test target: pass a closure
/// `|ctx: &TestContext| async { Ok(Arc<dyn Backend>) }` or any [`BackendFactory`] expression.
///
/// The closure form reopens data only if the backend reports `durable`; to run reopen cases on a
/// non-durable engine that keeps its store in a [`TestContext::slot`], use
/// `conformance_main!(factory = FnFactory::new(...).reopens(true))`.
#[macro_export]
macro_rules! conformance_main {
    (factory = $factory:expr) => {
        fn main() -> ::std::process::ExitCode {
            $crate::run_main(::std::sync::Arc::new($factory))
        }
    };
    ($open:expr) => {
        $crate::conformance_main!(factory = $crate::FnFactory::new($open));
    };
}

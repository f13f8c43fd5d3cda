//! The scenario cases, one module per area of `deno-kv-semantics.md`.
//!
//! Each module exposes `cases() -> Vec<Case>`; a case's name is `module::function`.

use crate::Case;

mod backup;
mod basics;
mod change_log;
mod checks;
mod concurrency;
mod expiry;
mod lifecycle;
mod limits;
mod list;
mod mutations;
mod ordering;
mod queues;
mod ranges;
mod versionstamps;
mod watch;

/// A module's case list.
type CaseGroup = fn() -> Vec<Case>;

/// Every scenario case.
pub(crate) fn all() -> Vec<Case> {
    let groups: [(&str, CaseGroup); 15] = [
        ("basics", basics::cases),
        ("ordering", ordering::cases),
        ("list", list::cases),
        ("checks", checks::cases),
        ("mutations", mutations::cases),
        ("versionstamps", versionstamps::cases),
        ("expiry", expiry::cases),
        ("limits", limits::cases),
        ("lifecycle", lifecycle::cases),
        ("queues", queues::cases),
        ("watch", watch::cases),
        ("concurrency", concurrency::cases),
        ("ranges", ranges::cases),
        ("change_log", change_log::cases),
        ("backup", backup::cases),
    ];
    groups
        .into_iter()
        .flat_map(|(group, cases)| {
            cases().into_iter().map(move |mut case| {
                case.name = format!("{group}::{}", case.name);
                case
            })
        })
        .collect()
}

/// Registers `async fn name(env: Env)` functions as cases: `cases![NOTHING => a, b; QUEUES => c]`.
macro_rules! cases {
    ($($needs:ident => $($name:ident),+ $(,)?);+ $(;)?) => {
        vec![$($($crate::Case::new(stringify!($name), $crate::Needs::$needs, $name)),+),+]
    };
}
pub(crate) use cases;

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

/// Registers `async fn name(env: Env)` functions as cases: `cases![NOTHING => a, b; QUEUES => c]`,
/// each group named by one of the [`need`] shorthands.
macro_rules! cases {
    ($($needs:ident => $($name:ident),+ $(,)?);+ $(;)?) => {
        vec![$($($crate::cases::need::$needs.case(stringify!($name), $name)),+),+]
    };
}
pub(crate) use cases;

/// What the scenario cases need, as shorthands over the engine's own vocabulary
/// ([`Capabilities`]): a case needs the capabilities its shorthand names, and (`REOPEN`) a
/// factory that reopens the same data. Adding a capability adds its shorthand here, next to the
/// cases that use it.
pub(crate) mod need {
    use std::future::Future;

    use open_deno_kv_model::Capabilities;

    use crate::{Case, Env};

    /// What one case needs.
    #[derive(Clone, Copy)]
    pub(crate) struct Need {
        capabilities: Capabilities,
        reopen: bool,
    }

    impl Need {
        const fn of(capabilities: Capabilities) -> Self {
            Need {
                capabilities,
                reopen: false,
            }
        }

        /// Everything `self` needs and everything `other` needs.
        pub(crate) const fn and(self, other: Need) -> Need {
            Need {
                capabilities: self.capabilities.union(other.capabilities),
                reopen: self.reopen || other.reopen,
            }
        }

        /// The case `name`, running `body`, with these needs.
        pub(crate) fn case<F, Fut>(self, name: &str, body: F) -> Case
        where
            F: Fn(Env) -> Fut + Send + Sync + 'static,
            Fut: Future<Output = ()> + Send + 'static,
        {
            let case = Case::new(name, self.capabilities, body);
            if self.reopen { case.reopening() } else { case }
        }
    }

    const NONE: Capabilities = Capabilities::none();

    /// Only reads and writes.
    pub(crate) const NOTHING: Need = Need::of(NONE);
    /// Queues.
    pub(crate) const QUEUES: Need = Need::of(NONE.with_queues(true));
    /// Queues, and listing them.
    pub(crate) const QUEUE_INSPECTION: Need =
        QUEUES.and(Need::of(NONE.with_queue_inspection(true)));
    /// Watch.
    pub(crate) const WATCH: Need = Need::of(NONE.with_watch(true));
    /// The integrity check.
    pub(crate) const INTEGRITY_CHECK: Need = Need::of(NONE.with_integrity_check(true));
    /// Reopening the same data.
    pub(crate) const REOPEN: Need = Need {
        capabilities: NONE,
        reopen: true,
    };
    /// Queues and reopen.
    pub(crate) const QUEUES_REOPEN: Need = QUEUES.and(REOPEN);
    /// Range deletes.
    pub(crate) const RANGE_DELETE: Need = Need::of(NONE.with_range_delete(true));
    /// Counting a range.
    pub(crate) const COUNT: Need = Need::of(NONE.with_count(true));
    /// Watching a range.
    pub(crate) const WATCH_RANGE: Need = Need::of(NONE.with_watch_range(true));
    /// Exporting a snapshot.
    pub(crate) const EXPORT: Need = Need::of(NONE.with_export(true));
    /// Exporting and importing snapshots (a backup and its restore).
    pub(crate) const BACKUP: Need = Need::of(NONE.with_backup(true));
    /// A change log.
    pub(crate) const CHANGE_LOG: Need = Need::of(NONE.with_change_log(true));
}

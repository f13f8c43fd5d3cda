//! Which [`Capabilities`] flag gates each optional method, and what a backend that does not offer
//! it answers: one place for both, read by [`crate::Checked`] and the [`crate::Engine`] trait's
//! defaults.

use open_deno_kv_model::{Capabilities, KvError};

/// The optional methods of [`crate::Backend`] (and of [`crate::Engine`]), each gated by one flag of
/// [`Capabilities`]; one place for the flag and the refusal's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Optional {
    Queues,
    QueueInspection,
    Watch,
    IntegrityCheck,
    RangeDelete,
    Count,
    WatchRange,
    Export,
    Import,
    ChangeLog,
}

impl Optional {
    /// Whether a backend with `capabilities` offers this method.
    pub(crate) fn offered_by(self, capabilities: Capabilities) -> bool {
        match self {
            Optional::Queues => capabilities.queues,
            Optional::QueueInspection => capabilities.queue_inspection,
            Optional::Watch => capabilities.watch,
            Optional::IntegrityCheck => capabilities.integrity_check,
            Optional::RangeDelete => capabilities.range_delete,
            Optional::Count => capabilities.count,
            Optional::WatchRange => capabilities.watch_range,
            Optional::Export => capabilities.export,
            Optional::Import => capabilities.import,
            Optional::ChangeLog => capabilities.change_log,
        }
    }

    /// The answer of a backend that does not offer it.
    pub(crate) fn refusal(self) -> KvError {
        let feature = match self {
            Optional::Queues => "queues",
            Optional::QueueInspection => "queue inspection",
            Optional::Watch => "watch",
            Optional::IntegrityCheck => "integrity checks",
            Optional::RangeDelete => "range deletes",
            Optional::Count => "counting a range",
            Optional::WatchRange => "watching a range",
            Optional::Export => "exporting a snapshot (online backup)",
            Optional::Import => "importing a snapshot (restore)",
            Optional::ChangeLog => "a change log (point-in-time restore)",
        };
        KvError::Unsupported { feature }
    }
}

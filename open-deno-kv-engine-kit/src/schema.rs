//! The rule every store that records a schema version follows: a store written by a newer build
//! is refused, untouched.
//!
//! An engine records the version of its layout in the store itself (open-deno-kv-sqlite: Deno's
//! `migration_state`; open-deno-kv-redb: its metadata table; open-deno-kv-postgres: `kv_meta`). A build that finds a
//! newer version than it knows cannot tell what the newer build changed, so reading could
//! misread and writing could corrupt: it refuses the store before it modifies anything, with
//! the one error below, whatever the engine.
//!
//! ```
//! use open_deno_kv_engine_kit::SchemaTooNew;
//!
//! assert!(SchemaTooNew::check(3, 3).is_ok(), "the current version opens");
//! assert!(SchemaTooNew::check(1, 3).is_ok(), "older ones are the engine's to migrate or refuse");
//! let refused = SchemaTooNew::check(4, 3).unwrap_err();
//! assert_eq!(refused, SchemaTooNew { found: 4, supported: 3 });
//! assert!(refused.to_string().ends_with("refusing to modify it"));
//! ```

/// A store at a schema version newer than this build supports (see the module docs). An engine
/// that meets one leaves the store as it found it; the fix is a newer build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the store's schema version {found} is newer than this build supports ({supported}); refusing to modify it"
)]
pub struct SchemaTooNew {
    /// The version recorded in the store.
    pub found: i64,
    /// The newest version this build knows.
    pub supported: i64,
}

impl SchemaTooNew {
    /// Refuses `found` if it is newer than `supported`, the newest version the engine knows.
    /// Older versions pass: whether they are migrated or refused is the engine's to say.
    pub fn check(found: i64, supported: i64) -> Result<(), SchemaTooNew> {
        if found > supported {
            return Err(SchemaTooNew { found, supported });
        }
        Ok(())
    }
}

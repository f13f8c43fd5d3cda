//! Engines whose store is one local file: opened the same way, whichever engine it is.

use std::path::Path;

use crate::{Checked, Engine, KvError};

/// An engine that keeps its store in a local file (open-deno-kv-sqlite, open-deno-kv-redb): opened from a path and
/// the engine's options, handed out behind the [`Checked`] layer.
///
/// An engine implements [`FileEngine::open_at`] and [`FileEngine::path`]; `open` (the default
/// options) and `open_with` (any path type) come with the trait, so every file engine opens
/// alike and generic code can open any of them:
///
/// ```
/// use open_deno_kv_engine_kit::FileEngine;
///
/// fn open_default<E: FileEngine>(path: &str) -> Result<open_deno_kv_engine_kit::Checked<E>, open_deno_kv_engine_kit::KvError> {
///     E::open(path)
/// }
/// ```
///
/// What an open must guarantee is every engine's: a file that is not the engine's, or is from a
/// newer build ([`crate::SchemaTooNew`]), is refused untouched, and a file left by a crash is
/// recovered before the handle is returned.
pub trait FileEngine: Engine + Sized {
    /// The engine's options: clock, limits, durability, read-only and whatever else it offers.
    /// [`Default`] gives what [`FileEngine::open`] uses.
    type Options: Default;

    /// Opens (creating if the options allow it) the store in the file at `path`.
    fn open_at(path: &Path, options: Self::Options) -> Result<Checked<Self>, KvError>;

    /// The file this handle works on.
    fn path(&self) -> &Path;

    /// Opens the store at `path` with `options`.
    fn open_with(path: impl AsRef<Path>, options: Self::Options) -> Result<Checked<Self>, KvError> {
        Self::open_at(path.as_ref(), options)
    }

    /// Opens (creating if needed) the store at `path` with the default options.
    fn open(path: impl AsRef<Path>) -> Result<Checked<Self>, KvError> {
        Self::open_at(path.as_ref(), Self::Options::default())
    }
}

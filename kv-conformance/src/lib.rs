//! Placeholder crate: filled by a later issue (see the issue tracker).

//! Model-based property tests (filled in below).

use crate::Case;

/// The model-based cases.
pub fn cases() -> Vec<Case> {
    Vec::new()
}

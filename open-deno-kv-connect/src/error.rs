//! The one error of this crate: a message that does not follow the protocol.

/// A request or response that does not follow the protocol. The text is plain and meant for the
/// peer (a server answers it with status 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    /// What is wrong.
    pub message: String,
}

impl ProtocolError {
    /// An error with this text.
    pub fn new(message: impl Into<String>) -> Self {
        ProtocolError {
            message: message.into(),
        }
    }
}

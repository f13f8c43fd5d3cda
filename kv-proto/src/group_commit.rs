//! Group commit without a timer: how a writer thread collects the writes one transaction
//! commits.
//!
//! The writer waits for the first command; then it takes every command already waiting (up to a
//! cap) and commits them together, with one sync. A lone write is committed at once, and writes
//! that arrive while a commit is syncing form the next group, so groups grow with the load by
//! themselves. kv-sqlite and kv-redb both collect their groups this way.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// Waits up to `idle` for a first command, then adds every command already waiting, up to `max`
/// in all. `Err(Timeout)` lets the writer do idle work; `Err(Disconnected)` means every sender
/// is gone.
///
/// ```
/// use std::time::Duration;
/// let (send, inbox) = std::sync::mpsc::channel();
/// for n in 0..5 {
///     send.send(n).unwrap();
/// }
/// let group = kv_proto::next_group(&inbox, Duration::from_millis(10), 3).unwrap();
/// assert_eq!(group, vec![0, 1, 2]);
/// assert_eq!(kv_proto::next_group(&inbox, Duration::from_millis(10), 3).unwrap(), vec![3, 4]);
/// ```
pub fn next_group<T>(
    inbox: &Receiver<T>,
    idle: Duration,
    max: usize,
) -> Result<Vec<T>, RecvTimeoutError> {
    let first = inbox.recv_timeout(idle)?;
    let mut group = vec![first];
    while group.len() < max {
        match inbox.try_recv() {
            Ok(next) => group.push(next),
            Err(_) => break,
        }
    }
    Ok(group)
}

//! Watching every key of a prefix or range: the changes, key by key, not a re-read of the
//! whole range.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::Stream;
use open_deno_kv_model::{RangeWatchEvent, decode_key};

use crate::entry::MaybeEntry;
use crate::error::Result;

/// What a [`RangeWatch`] yields.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeEvent {
    /// Read the range now (with [`crate::Kv::list`]) and take that as its state: the first
    /// event of every watch, and again whenever the watch cannot say what changed (a range
    /// delete overlapping it, commits by another process it cannot name, or more changes than
    /// it holds for a consumer that fell behind). Every commit after this event is reported
    /// after it.
    Reread,
    /// Keys that changed since the last event, in key order, each in its current state
    /// ([`MaybeEntry::exists`] is `false` once deleted). Quick changes may arrive together,
    /// and a key's state is never older than the one reported before it.
    Changed(Vec<MaybeEntry>),
}

/// The stream of [`crate::Kv::watch_range`]: [`RangeEvent`]s until the store closes.
///
/// A consumer keeping a copy of the range replaces it on [`RangeEvent::Reread`] and updates
/// the listed keys on [`RangeEvent::Changed`]. Expiry is not a commit and is not reported:
/// every entry carries its `expires_at`, so a copy drops it then. A consumer that is slow never
/// slows writers nor makes the watch hold more than a bounded number of changes: it gets a
/// `Reread` instead.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> open_deno_kv::Result<()> {
/// use futures::StreamExt;
/// use open_deno_kv::{Kv, RangeEvent, Selector, key};
/// let kv = Kv::open("memory:").await?;
/// let mut changes = kv.watch_range(Selector::prefix(key!["room", 7]))?;
/// assert_eq!(changes.next().await.transpose()?, Some(RangeEvent::Reread));
/// kv.set(key!["room", 7, "alice"], "hello").await?;
/// kv.set(key!["room", 8, "bob"], "elsewhere").await?; // not under the prefix
/// let Some(RangeEvent::Changed(entries)) = changes.next().await.transpose()? else {
///     panic!("a change was expected");
/// };
/// assert_eq!(entries.len(), 1);
/// assert_eq!(entries[0].key, key!["room", 7, "alice"]);
/// # Ok(()) }
/// ```
pub struct RangeWatch {
    inner: open_deno_kv_model::RangeWatchStream,
}

impl RangeWatch {
    pub(crate) fn new(inner: open_deno_kv_model::RangeWatchStream) -> Self {
        RangeWatch { inner }
    }
}

impl Stream for RangeWatch {
    type Item = Result<RangeEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(event) = ready!(self.inner.as_mut().poll_next(cx)) else {
            return Poll::Ready(None);
        };
        let event = match event {
            Ok(RangeWatchEvent::Reread) => Ok(RangeEvent::Reread),
            Ok(RangeWatchEvent::Changed(changes)) => changes
                .into_iter()
                .map(|change| {
                    let key = decode_key(&change.key).map_err(|reason| {
                        open_deno_kv_model::KvError::invalid_key(reason, &change.key)
                    })?;
                    Ok(MaybeEntry::new(key, change.entry))
                })
                .collect::<Result<Vec<_>>>()
                .map(RangeEvent::Changed),
            Err(err) => Err(err.into()),
        };
        Poll::Ready(Some(event))
    }
}

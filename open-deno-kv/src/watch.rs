//! Watching keys: a stream of their current entries, again after every change.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::Stream;
use open_deno_kv_model::{Key, WatchKeyOutput};

use crate::entry::MaybeEntry;
use crate::error::Result;

/// The stream of `Deno.Kv.watch`: each item holds one [`MaybeEntry`] per watched key, in the
/// order the keys were given. The first item is the keys' state when the watch started; later
/// ones follow commits that changed any of them (several quick changes may arrive as one). It
/// ends when the store closes.
pub struct WatchStream {
    inner: open_deno_kv_model::WatchStream,
    state: Vec<MaybeEntry>,
}

impl WatchStream {
    pub(crate) fn new(inner: open_deno_kv_model::WatchStream, keys: Vec<Key>) -> Self {
        let state = keys
            .into_iter()
            .map(|key| MaybeEntry::new(key, None))
            .collect();
        WatchStream { inner, state }
    }
}

impl Stream for WatchStream {
    type Item = Result<Vec<MaybeEntry>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(emission) = ready!(this.inner.as_mut().poll_next(cx)) else {
            return Poll::Ready(None);
        };
        let outputs = match emission {
            Ok(outputs) => outputs,
            Err(err) => return Poll::Ready(Some(Err(err.into()))),
        };
        for (slot, output) in this.state.iter_mut().zip(outputs) {
            if let WatchKeyOutput::Changed(entry) = output {
                *slot = MaybeEntry::new(slot.key.clone(), entry);
            }
        }
        Poll::Ready(Some(Ok(this.state.clone())))
    }
}

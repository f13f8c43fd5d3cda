//! Listing: selectors, options, and a stream that fetches pages as it is read.
//!
//! A list is one [`Selector`] (`{prefix}`, `{prefix, start}`, `{prefix, end}` or `{start, end}`,
//! as in `Deno.Kv.list`) read in pages of [`ListOptions::batch_size`] entries. The stream's
//! [`ListStream::cursor`] after any entry resumes the listing just after it — in this process or
//! in Deno: the cursor strings are Deno's.
//!
//! ```no_run
//! # async fn demo(kv: open_deno_kv::Kv) -> open_deno_kv::Result<()> {
//! use futures::TryStreamExt;
//! use open_deno_kv::{key, ListOptions, Selector};
//! let mut page = kv.list(Selector::prefix(key!["users"]), ListOptions { limit: Some(20), ..Default::default() })?;
//! while let Some(user) = page.try_next().await? {
//!     println!("{} = {:?}", user.key, user.value);
//! }
//! let next_page_starts_after = page.cursor(); // hand this to the next request
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures::Stream;
use futures::future::BoxFuture;
use open_deno_kv_model::{
    Backend, Consistency, Key, KeyRange, KvEntry, ListSelector, ReadRange, SnapshotRead,
};

use crate::entry::Entry;
use crate::error::Result;

/// Deno's default page size for `list` (`batchSize`).
pub const DEFAULT_BATCH_SIZE: u32 = 100;

/// Which keys to list, as in `Deno.Kv.list(selector)`.
///
/// Validated when the list starts, with Deno's texts (for example `start` outside `prefix`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// Keys strictly under this prefix (the prefix itself is not listed).
    pub prefix: Option<Key>,
    /// The first key to list (inclusive).
    pub start: Option<Key>,
    /// The key to stop before (exclusive).
    pub end: Option<Key>,
}

impl Selector {
    /// Every key under `prefix`: `{prefix}`.
    pub fn prefix(prefix: impl Into<Key>) -> Self {
        Selector {
            prefix: Some(prefix.into()),
            ..Default::default()
        }
    }

    /// Keys in `[start, end)`: `{start, end}`.
    pub fn range(start: impl Into<Key>, end: impl Into<Key>) -> Self {
        Selector {
            start: Some(start.into()),
            end: Some(end.into()),
            ..Default::default()
        }
    }

    /// The same selector, starting at `start` (inclusive): `{prefix, start}`.
    pub fn start(mut self, start: impl Into<Key>) -> Self {
        self.start = Some(start.into());
        self
    }

    /// The same selector, ending before `end`: `{prefix, end}`.
    pub fn end(mut self, end: impl Into<Key>) -> Self {
        self.end = Some(end.into());
        self
    }

    /// The encoded keys this selector covers, `[start, end)`: what [`crate::Kv::delete_range`],
    /// [`crate::Kv::count`] and [`crate::Kv::watch_range`] work on (the same keys a list of the
    /// selector returns). Errors are Deno's selector errors.
    ///
    /// ```
    /// use open_deno_kv::{Selector, key};
    /// let range = Selector::prefix(key!["users"]).key_range().unwrap();
    /// assert!(range.contains(&open_deno_kv::encode_key(&key!["users", 7]).unwrap()));
    /// ```
    pub fn key_range(&self) -> Result<KeyRange> {
        let (start, end) = self.validate()?.range(false, None)?;
        Ok(KeyRange::new(start, end))
    }

    pub(crate) fn validate(&self) -> Result<ListSelector> {
        Ok(ListSelector::new(
            self.prefix.as_ref(),
            self.start.as_ref(),
            self.end.as_ref(),
        )?)
    }
}

/// How to list, as in `Deno.Kv.list(selector, options)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// The most entries to return in all; `None` lists everything.
    pub limit: Option<usize>,
    /// Resume after the entry this cursor was taken at (from [`ListStream::cursor`] or Deno).
    pub cursor: Option<String>,
    /// Newest key first.
    pub reverse: bool,
    /// Strong (the default) or eventual; every local backend is strongly consistent.
    pub consistency: Consistency,
    /// Entries fetched per page (`None`: Deno's 100, or the limit if smaller). Deno allows at
    /// most 1000.
    pub batch_size: Option<u32>,
}

/// The entries of a list, fetched a page at a time as the stream is read. Each page is its own
/// snapshot, as with Deno.
pub struct ListStream {
    backend: Arc<dyn Backend>,
    selector: ListSelector,
    consistency: Consistency,
    reverse: bool,
    batch_size: u32,
    /// Entries still allowed by the limit.
    remaining: Option<usize>,
    /// The range still to read.
    start: Vec<u8>,
    end: Vec<u8>,
    buffer: VecDeque<KvEntry>,
    /// The last page was short: nothing is left after the buffer.
    exhausted: bool,
    /// The encoded key of the last entry handed out.
    last_key: Option<Vec<u8>>,
    fetching: Option<BoxFuture<'static, Result<Vec<KvEntry>>>>,
}

impl ListStream {
    pub(crate) fn new(
        backend: Arc<dyn Backend>,
        selector: &Selector,
        options: ListOptions,
    ) -> Result<Self> {
        let selector = selector.validate()?;
        let (start, end) = selector.range(options.reverse, options.cursor.as_deref())?;
        let batch_size = options.batch_size.unwrap_or(DEFAULT_BATCH_SIZE);
        if batch_size == 0 {
            return Err(open_deno_kv_model::KvError::invalid_argument(
                "batchSize must be at least 1",
            )
            .into());
        }
        Ok(ListStream {
            backend,
            selector,
            consistency: options.consistency,
            reverse: options.reverse,
            batch_size,
            remaining: options.limit,
            start,
            end,
            buffer: VecDeque::new(),
            exhausted: options.limit == Some(0),
            last_key: None,
            fetching: None,
        })
    }

    /// The cursor that resumes this listing after the last entry returned so far (`None` before
    /// the first). The same string Deno's `KvListIterator.cursor` gives.
    pub fn cursor(&self) -> Option<String> {
        let key = self.last_key.as_ref()?;
        self.selector.encode_cursor(key).ok()
    }

    fn next_page(&self) -> BoxFuture<'static, Result<Vec<KvEntry>>> {
        let limit = match self.remaining {
            Some(remaining) => self
                .batch_size
                .min(u32::try_from(remaining).unwrap_or(u32::MAX)),
            None => self.batch_size,
        };
        let read = SnapshotRead {
            ranges: vec![ReadRange {
                start: self.start.clone(),
                end: self.end.clone(),
                limit,
                reverse: self.reverse,
            }],
            consistency: self.consistency,
        };
        let backend = self.backend.clone();
        Box::pin(async move {
            let mut outputs = backend.snapshot_read(read).await?;
            Ok(outputs.pop().map(|out| out.entries).unwrap_or_default())
        })
    }

    /// Takes a fetched page: narrows the range past it and notes whether it was the last.
    fn accept_page(&mut self, page: Vec<KvEntry>, asked: usize) {
        if page.len() < asked {
            self.exhausted = true;
        }
        if let Some(last) = page.last() {
            if self.reverse {
                self.end = last.key.to_vec();
            } else {
                self.start = [&last.key[..], &[0]].concat();
            }
        }
        self.buffer.extend(page);
    }
}

impl Stream for ListStream {
    type Item = Result<Entry>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.remaining == Some(0) {
                return Poll::Ready(None);
            }
            if let Some(stored) = this.buffer.pop_front() {
                this.last_key = Some(stored.key.to_vec());
                if let Some(remaining) = &mut this.remaining {
                    *remaining -= 1;
                }
                return Poll::Ready(Some(Entry::from_stored(stored)));
            }
            if this.exhausted {
                return Poll::Ready(None);
            }
            let asked = this
                .remaining
                .map_or(this.batch_size as usize, |remaining| {
                    remaining.min(this.batch_size as usize)
                });
            if this.fetching.is_none() {
                this.fetching = Some(this.next_page());
            }
            let Some(fetching) = this.fetching.as_mut() else {
                continue;
            };
            let page = ready!(fetching.as_mut().poll(cx));
            this.fetching = None;
            match page {
                Ok(page) => this.accept_page(page, asked),
                Err(err) => {
                    // A failed page ends the stream; the cursor still marks where it stopped.
                    this.exhausted = true;
                    return Poll::Ready(Some(Err(err)));
                }
            }
        }
    }
}

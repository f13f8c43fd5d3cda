//! How many entries lie under a prefix, and how many bytes their keys and values take.
//!
//! One function, [`count_prefix`]: a backend that counts ([`Backend::count_range`], every engine
//! of this workspace) answers from one snapshot without sending values; another is listed page
//! by page, up to a cap beyond which the answer is "at least".

use open_deno_kv_model::{Backend, KeyRange, KvError, ReadRange, SnapshotRead};

/// The most entries [`count_prefix`] lists before it stops and reports "at least".
pub(super) const COUNT_CAP: u64 = 100_000;

/// Entries read per snapshot read while counting (Deno's per-read maximum).
const PAGE: u32 = 1000;

/// What lies under a prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PrefixCount {
    /// Entries found (all of them when `complete`, else the first `cap`).
    pub(super) entries: u64,
    /// Their encoded keys' and stored values' bytes.
    pub(super) bytes: u64,
    /// `false`: the cap was reached and there may be more ("at least").
    pub(super) complete: bool,
}

/// Counts the entries strictly under the encoded `prefix`: exactly where the backend counts,
/// else by listing at most `cap` of them.
pub(super) async fn count_prefix(
    backend: &dyn Backend,
    prefix: &[u8],
    cap: u64,
) -> Result<PrefixCount, KvError> {
    let mut start = prefix.to_vec();
    start.push(0x00);
    let mut end = prefix.to_vec();
    end.push(0xff);
    if backend.capabilities().count {
        let counted = backend
            .count_range(KeyRange::new(start.clone(), end.clone()))
            .await?;
        return Ok(PrefixCount {
            entries: counted.entries,
            bytes: counted.key_bytes + counted.value_bytes,
            complete: true,
        });
    }
    let mut count = PrefixCount {
        entries: 0,
        bytes: 0,
        complete: true,
    };
    loop {
        let left = cap - count.entries;
        if left == 0 {
            // Full: complete only if nothing is left after the last entry counted.
            let probe = ReadRange {
                start: start.clone(),
                end: end.clone(),
                limit: 1,
                reverse: false,
            };
            let more = backend
                .snapshot_read(SnapshotRead {
                    ranges: vec![probe],
                    ..SnapshotRead::default()
                })
                .await?;
            count.complete = more.iter().all(|range| range.entries.is_empty());
            return Ok(count);
        }
        let limit = u32::try_from(left).unwrap_or(PAGE).min(PAGE);
        let range = ReadRange {
            start: start.clone(),
            end: end.clone(),
            limit,
            reverse: false,
        };
        let output = backend
            .snapshot_read(SnapshotRead {
                ranges: vec![range],
                ..SnapshotRead::default()
            })
            .await?;
        let entries = output
            .into_iter()
            .next()
            .map(|r| r.entries)
            .unwrap_or_default();
        for entry in &entries {
            count.entries += 1;
            count.bytes += (entry.key.len() + entry.value.encoded_len()) as u64;
        }
        match entries.last() {
            Some(last) if entries.len() == limit as usize => {
                start = last.key.to_vec();
                start.push(0x00);
            }
            _ => return Ok(count),
        }
    }
}

#[cfg(test)]
mod tests {
    use open_deno_kv_model::{AtomicWrite, KvValue, Mutation, encode_key, key};

    use super::*;

    /// A backend that does not count: every other method is the wrapped one's.
    struct NoCount(std::sync::Arc<dyn Backend>);

    #[open_deno_kv_model::async_trait]
    impl Backend for NoCount {
        fn capabilities(&self) -> open_deno_kv_model::Capabilities {
            self.0.capabilities().with_count(false)
        }
        async fn snapshot_read(
            &self,
            read: SnapshotRead,
        ) -> Result<Vec<open_deno_kv_model::ReadRangeOutput>, KvError> {
            self.0.snapshot_read(read).await
        }
        async fn atomic_write(
            &self,
            write: AtomicWrite,
        ) -> Result<Option<open_deno_kv_model::CommitResult>, KvError> {
            self.0.atomic_write(write).await
        }
        async fn dequeue_next_message(
            &self,
        ) -> Result<Option<Box<dyn open_deno_kv_model::QueueMessageHandle>>, KvError> {
            self.0.dequeue_next_message().await
        }
        async fn queued_messages(&self) -> Result<Vec<open_deno_kv_model::QueuedMessage>, KvError> {
            self.0.queued_messages().await
        }
        async fn queue_depth(&self) -> Result<usize, KvError> {
            self.0.queue_depth().await
        }
        fn watch(&self, keys: Vec<Vec<u8>>) -> Result<open_deno_kv_model::WatchStream, KvError> {
            self.0.watch(keys)
        }
        async fn count_range(
            &self,
            _range: KeyRange,
        ) -> Result<open_deno_kv_model::RangeCount, KvError> {
            Err(KvError::Unsupported {
                feature: "counting a range",
            })
        }
        async fn export_snapshot(&self) -> Result<open_deno_kv_model::Snapshot, KvError> {
            self.0.export_snapshot().await
        }
        async fn import_snapshot(
            &self,
            snapshot: open_deno_kv_model::Snapshot,
        ) -> Result<open_deno_kv_model::ImportSummary, KvError> {
            self.0.import_snapshot(snapshot).await
        }

        async fn configure_change_log(
            &self,
            retention: Option<std::time::Duration>,
        ) -> Result<(), KvError> {
            self.0.configure_change_log(retention).await
        }

        async fn change_log_status(
            &self,
        ) -> Result<open_deno_kv_model::change_log::ChangeLogStatus, KvError> {
            self.0.change_log_status().await
        }

        async fn read_change_log(
            &self,
            after: open_deno_kv_model::Versionstamp,
            limit: usize,
        ) -> Result<Vec<open_deno_kv_model::change_log::ChangeRecord>, KvError> {
            self.0.read_change_log(after, limit).await
        }
        fn watch_range(
            &self,
            range: KeyRange,
        ) -> Result<open_deno_kv_model::RangeWatchStream, KvError> {
            self.0.watch_range(range)
        }
        async fn check_integrity(&self) -> Result<open_deno_kv_model::IntegrityReport, KvError> {
            self.0.check_integrity().await
        }
        async fn close(&self) -> Result<(), KvError> {
            self.0.close().await
        }
    }

    #[tokio::test]
    async fn counts_under_the_prefix_and_says_at_least_beyond_the_cap() {
        let backend = crate::databases::new_memory_database();
        let mut write = AtomicWrite::default();
        for i in 0..25 {
            let key = encode_key(&key!["a", i]).unwrap_or_default();
            write
                .mutations
                .push(Mutation::set(key, KvValue::Bytes(vec![0; 3].into())));
        }
        let outside = encode_key(&key!["b"]).unwrap_or_default();
        write
            .mutations
            .push(Mutation::set(outside, KvValue::U64(1)));
        assert!(matches!(backend.atomic_write(write).await, Ok(Some(_))));
        let prefix = encode_key(&key!["a"]).unwrap_or_default();
        let bytes: u64 = (0..25)
            .map(|i| encode_key(&key!["a", i]).unwrap_or_default().len() as u64 + 3)
            .sum();

        let all = count_prefix(backend.as_ref(), &prefix, 1000).await;
        assert_eq!(
            all.ok(),
            Some(PrefixCount {
                entries: 25,
                bytes,
                complete: true
            })
        );
        let exact = count_prefix(backend.as_ref(), &prefix, 25).await;
        assert_eq!(
            exact.ok().map(|c| (c.entries, c.complete)),
            Some((25, true))
        );
        // Memory counts exactly, whatever the cap; a backend that cannot count is listed.
        let counted = count_prefix(backend.as_ref(), &prefix, 10).await;
        assert_eq!(
            counted.ok().map(|c| (c.entries, c.complete)),
            Some((25, true))
        );
        let listed = count_prefix(&NoCount(backend.clone()), &prefix, 10).await;
        assert_eq!(
            listed.ok().map(|c| (c.entries, c.complete)),
            Some((10, false))
        );
        let listed = count_prefix(&NoCount(backend.clone()), &prefix, 1000).await;
        assert_eq!(listed.ok().map(|c| (c.entries, c.bytes)), Some((25, bytes)));
        let everything = count_prefix(backend.as_ref(), &[], 1000).await;
        assert_eq!(everything.ok().map(|c| c.entries), Some(26));
    }
}

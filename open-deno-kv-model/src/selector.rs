//! List selectors and cursors, as `Deno.Kv.list` has them.
//!
//! A list names its keys with a selector — `{prefix}`, `{prefix, start}`, `{prefix, end}` or
//! `{start, end}` — which becomes one byte range over encoded keys. Paging uses a cursor: the last
//! key returned, minus the bytes every key in the selector shares, in padded URL-safe base64.
//! Cursors made here and by Deno are interchangeable.
//!
//! ```
//! use open_deno_kv_model::{encode_key, key, ListSelector};
//! let users = ListSelector::prefix(&key!["users"]).unwrap();
//! let last_seen = encode_key(&key!["users", "bob"]).unwrap();
//! let cursor = users.encode_cursor(&last_seen).unwrap();
//! assert_eq!(cursor, "AmJvYgA=");
//! // The next page starts just after "bob".
//! let (start, _end) = users.range(false, Some(&cursor)).unwrap();
//! assert_eq!(start, [last_seen, vec![0]].concat());
//! ```

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE;

use crate::{Key, KvError, encode_key};

/// A validated list selector, holding encoded keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSelector {
    /// Keys strictly under `prefix`, optionally starting at `start` or ending before `end`
    /// (both strictly inside the prefix).
    Prefixed {
        /// The encoded prefix.
        prefix: Vec<u8>,
        /// Inclusive encoded start, inside the prefix.
        start: Option<Vec<u8>>,
        /// Exclusive encoded end, inside the prefix.
        end: Option<Vec<u8>>,
    },
    /// Keys in `[start, end)`.
    Range {
        /// Inclusive encoded start.
        start: Vec<u8>,
        /// Exclusive encoded end.
        end: Vec<u8>,
    },
}

impl ListSelector {
    /// Builds a selector from the options of `Deno.Kv.list`, with Deno's checks and texts.
    ///
    /// `{start}` alone selects just that key; `{prefix, start, end}` and `{}` are refused
    /// ("Invalid range").
    pub fn new(
        prefix: Option<&Key>,
        start: Option<&Key>,
        end: Option<&Key>,
    ) -> Result<Self, KvError> {
        let encode = |k: Option<&Key>| k.map(encode_key).transpose();
        match (encode(prefix)?, encode(start)?, encode(end)?) {
            (Some(prefix), None, None) => Ok(ListSelector::Prefixed {
                prefix,
                start: None,
                end: None,
            }),
            (Some(prefix), Some(start), None) => {
                if !strictly_inside(&start, &prefix) {
                    return Err(KvError::invalid_argument(
                        "Start key is not in the keyspace defined by prefix",
                    ));
                }
                Ok(ListSelector::Prefixed {
                    prefix,
                    start: Some(start),
                    end: None,
                })
            }
            (Some(prefix), None, Some(end)) => {
                if !strictly_inside(&end, &prefix) {
                    return Err(KvError::invalid_argument(
                        "End key is not in the keyspace defined by prefix",
                    ));
                }
                Ok(ListSelector::Prefixed {
                    prefix,
                    start: None,
                    end: Some(end),
                })
            }
            (None, Some(start), Some(end)) => {
                if start > end {
                    return Err(KvError::invalid_argument(
                        "Start key is greater than end key",
                    ));
                }
                Ok(ListSelector::Range { start, end })
            }
            (None, Some(start), None) => {
                let end = [start.as_slice(), &[0]].concat();
                Ok(ListSelector::Range { start, end })
            }
            _ => Err(KvError::invalid_argument("Invalid range")),
        }
    }

    /// `{prefix}`: every key strictly under the prefix (the prefix itself excluded).
    pub fn prefix(prefix: &Key) -> Result<Self, KvError> {
        Self::new(Some(prefix), None, None)
    }

    /// The bytes every selected key starts with; cursors are relative to it.
    pub fn common_prefix(&self) -> &[u8] {
        match self {
            ListSelector::Prefixed { prefix, .. } => prefix,
            ListSelector::Range { start, end } => {
                let shared = start.iter().zip(end).take_while(|(a, b)| a == b).count();
                &start[..shared]
            }
        }
    }

    fn explicit_start(&self) -> Option<&[u8]> {
        match self {
            ListSelector::Prefixed { start, .. } => start.as_deref(),
            ListSelector::Range { start, .. } => Some(start),
        }
    }

    fn explicit_end(&self) -> Option<&[u8]> {
        match self {
            ListSelector::Prefixed { end, .. } => end.as_deref(),
            ListSelector::Range { end, .. } => Some(end),
        }
    }

    fn start_bound(&self) -> Vec<u8> {
        match (self, self.explicit_start()) {
            (_, Some(start)) => start.to_vec(),
            (ListSelector::Prefixed { prefix, .. }, None) => [prefix.as_slice(), &[0x00]].concat(),
            (ListSelector::Range { start, .. }, None) => start.clone(),
        }
    }

    fn end_bound(&self) -> Vec<u8> {
        match (self, self.explicit_end()) {
            (_, Some(end)) => end.to_vec(),
            (ListSelector::Prefixed { prefix, .. }, None) => [prefix.as_slice(), &[0xff]].concat(),
            (ListSelector::Range { end, .. }, None) => end.clone(),
        }
    }

    /// The byte range `[start, end)` to read, resuming after `cursor` if one is given (forward:
    /// just after the cursor's key; `reverse`: just before it).
    ///
    /// Fails with "invalid cursor" for bytes that are not padded URL-safe base64, and "cursor out
    /// of bounds" for a cursor that points outside the selector.
    pub fn range(
        &self,
        reverse: bool,
        cursor: Option<&str>,
    ) -> Result<(Vec<u8>, Vec<u8>), KvError> {
        let Some(cursor) = cursor else {
            return Ok((self.start_bound(), self.end_bound()));
        };
        let suffix = URL_SAFE
            .decode(cursor)
            .map_err(|_| KvError::invalid_argument("invalid cursor"))?;
        let at_cursor = [self.common_prefix(), &suffix].concat();
        let (first, last) = if reverse {
            (self.start_bound(), at_cursor)
        } else {
            ([at_cursor.as_slice(), &[0]].concat(), self.end_bound())
        };
        let before_start = self
            .explicit_start()
            .is_some_and(|start| first.as_slice() < start);
        let after_end = self.explicit_end().is_some_and(|end| last.as_slice() > end);
        if before_start || after_end {
            return Err(KvError::invalid_argument("cursor out of bounds"));
        }
        Ok((first, last))
    }

    /// The cursor that resumes a listing after `boundary_key` (the encoded key last returned).
    pub fn encode_cursor(&self, boundary_key: &[u8]) -> Result<String, KvError> {
        let suffix = boundary_key
            .strip_prefix(self.common_prefix())
            .ok_or_else(|| KvError::invalid_argument("Invalid boundary key"))?;
        Ok(URL_SAFE.encode(suffix))
    }
}

/// Whether `key` lies under `prefix` and is not the prefix itself.
fn strictly_inside(key: &[u8], prefix: &[u8]) -> bool {
    key.starts_with(prefix) && key.len() > prefix.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key;

    fn enc(k: Key) -> Vec<u8> {
        encode_key(&k).unwrap()
    }

    fn text(r: Result<ListSelector, KvError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn prefix_excludes_the_prefix_itself() {
        let s = ListSelector::prefix(&key!["a"]).unwrap();
        let (start, end) = s.range(false, None).unwrap();
        assert_eq!(start, [enc(key!["a"]), vec![0]].concat());
        assert_eq!(end, [enc(key!["a"]), vec![0xff]].concat());
        assert!(start > enc(key!["a"]));
        assert!(enc(key!["a", true]) < end);
    }

    #[test]
    fn selector_errors_use_denos_texts() {
        let (a, ab, b) = (key!["a"], key!["a", "b"], key!["b"]);
        assert_eq!(
            text(ListSelector::new(Some(&a), Some(&b), None)),
            "Start key is not in the keyspace defined by prefix"
        );
        assert_eq!(
            text(ListSelector::new(Some(&a), Some(&a), None)),
            "Start key is not in the keyspace defined by prefix"
        );
        assert_eq!(
            text(ListSelector::new(Some(&a), None, Some(&b))),
            "End key is not in the keyspace defined by prefix"
        );
        assert_eq!(
            text(ListSelector::new(None, Some(&b), Some(&a))),
            "Start key is greater than end key"
        );
        assert_eq!(
            text(ListSelector::new(Some(&a), Some(&ab), Some(&ab))),
            "Invalid range"
        );
        assert_eq!(
            text(ListSelector::new(None, None, Some(&a))),
            "Invalid range"
        );
        assert!(ListSelector::new(Some(&a), Some(&ab), None).is_ok());
    }

    #[test]
    fn range_cursor_is_relative_to_the_shared_bytes() {
        let s =
            ListSelector::new(None, Some(&key!["user", "a"]), Some(&key!["user", "z"])).unwrap();
        assert_eq!(s.common_prefix(), [enc(key!["user"]), vec![0x02]].concat());
        let last = enc(key!["user", "m"]);
        let cursor = s.encode_cursor(&last).unwrap();
        let (start, end) = s.range(false, Some(&cursor)).unwrap();
        assert_eq!(start, [last.clone(), vec![0]].concat());
        assert_eq!(end, enc(key!["user", "z"]));
        let (start, end) = s.range(true, Some(&cursor)).unwrap();
        assert_eq!((start, end), (enc(key!["user", "a"]), last));
    }

    #[test]
    fn bad_cursors() {
        let s = ListSelector::new(Some(&key!["p"]), Some(&key!["p", "m"]), None).unwrap();
        let text = |r: Result<_, KvError>| r.unwrap_err().to_string();
        assert_eq!(text(s.range(false, Some("not base64!"))), "invalid cursor");
        assert_eq!(
            text(s.range(false, Some("AmE"))),
            "invalid cursor",
            "padding is required"
        );
        // "a" sorts before the explicit start "m".
        let before = URL_SAFE.encode([2, b'a']);
        assert_eq!(text(s.range(false, Some(&before))), "cursor out of bounds");
        assert!(s.range(false, Some(&URL_SAFE.encode([2, b'n', 0]))).is_ok());
        assert!(s.encode_cursor(&enc(key!["q"])).is_err());
    }
}

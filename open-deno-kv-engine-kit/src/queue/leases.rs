//! Who holds which message: an engine's in-process record of its deliveries.
//!
//! A message handed out is *leased* to the handle (the owner) that dequeued it, under a fresh
//! token. The token tells this delivery from a later one of the same message, so a stale handle
//! (whose delivery was abandoned and the message handed out again) settles nothing. A handle
//! that closes gives up its leases ([`Leases::close_owner`]): its messages are failed
//! deliveries, and it gets no more.
//!
//! ```
//! use open_deno_kv_engine_kit::queue::Leases;
//! use uuid::Uuid;
//!
//! let mut leases = Leases::default();
//! let id = Uuid::new_v4();
//! let first = leases.grant(id, 1);
//! assert!(leases.is_current(id, first));
//! assert_eq!(leases.close_owner(1), vec![id]);
//! assert!(leases.is_closed(1));
//! leases.end(id);
//! let second = leases.grant(id, 2);
//! assert!(!leases.is_current(id, first), "the old handle's token is stale");
//! assert!(leases.is_current(id, second));
//! ```

use std::collections::{HashMap, HashSet};

use foldhash::fast::RandomState;

use uuid::Uuid;

/// A map keyed by message id, hashed with foldhash rather than SipHash: a message id is a random
/// UUID the store generated (not a key a client chooses), and every dequeue and settlement looks
/// ids up several times, where SipHash over 16 bytes was a measured part of open-deno-kv-memory's
/// per-message cost.
pub type IdMap<V> = HashMap<Uuid, V, RandomState>;

/// One delivery: the handle that holds it and its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The handle the message was handed to.
    pub owner: u64,
    /// This delivery's number.
    pub token: u64,
}

/// The deliveries an engine has handed out and not settled, by message id.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    held: IdMap<Lease>,
    closed_owners: HashSet<u64>,
    last_token: u64,
}

impl Leases {
    /// Leases message `id` to handle `owner`; returns the delivery's token.
    pub fn grant(&mut self, id: Uuid, owner: u64) -> u64 {
        self.last_token += 1;
        let token = self.last_token;
        self.held.insert(id, Lease { owner, token });
        token
    }

    /// Whether delivery `token` of message `id` is the one outstanding.
    pub fn is_current(&self, id: Uuid, token: u64) -> bool {
        self.held.get(&id).is_some_and(|lease| lease.token == token)
    }

    /// Whether some live consumer holds message `id`.
    pub fn is_held(&self, id: Uuid) -> bool {
        self.held.contains_key(&id)
    }

    /// Forgets the lease of message `id` (its delivery was settled).
    pub fn end(&mut self, id: Uuid) -> Option<Lease> {
        self.held.remove(&id)
    }

    /// Marks handle `owner` closed (it gets no more messages) and returns the messages it still
    /// holds, which the engine settles as failed deliveries (ending their leases).
    pub fn close_owner(&mut self, owner: u64) -> Vec<Uuid> {
        self.closed_owners.insert(owner);
        self.held
            .iter()
            .filter(|(_, lease)| lease.owner == owner)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether handle `owner` has closed.
    pub fn is_closed(&self, owner: u64) -> bool {
        self.closed_owners.contains(&owner)
    }
}

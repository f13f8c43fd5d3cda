//! Admission: who gets a place under the connection cap, and for how long, so that strangers
//! who hold no token cannot keep out the clients that do.
//!
//! Until one of its requests passes the token check, a connection is *unauthorized*: it holds a
//! slot on trust. Three rules bound that trust ([`crate::ResourceLimits`] fields, each a
//! `kv serve` flag):
//!
//! - **a deadline** (`auth_timeout`, 5 s): a connection that has made no authorized request
//!   within it is closed, whatever it is doing (silent, a TLS handshake, an HTTP/2 preface and
//!   SETTINGS only, headers a byte at a time, requests without the token);
//! - **eviction** at the cap (`max_connections`): a new connection that finds the cap reached
//!   takes the slot of the oldest unauthorized connection, which is closed at once; only when
//!   every connection open has authorized is the new one refused (a plaintext `503`);
//! - **a cap per address** (`max_unauthorized_per_address`, 32): a connection from an address
//!   (an IPv6 address's /64, which one host usually holds whole) that already has that many
//!   unauthorized connections open is refused, so that one address cannot take every slot that
//!   eviction frees.
//!
//! An authorized connection is never evicted, and is then governed by the idle timeout alone.
//! Under [`crate::Access::Open`] every request passes the token check, so a connection authorizes
//! with its first request whatever it asks (`/health` included). Evictions, deadline closings and
//! refusals are logged in summaries ([`crate::log_summary`]), never a line each.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::log_summary::{LogSummary, Warning};
use crate::resources::{Budgets, ResourceLimits};

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The cap is reached and every connection open has authorized.
    OverCap,
    /// Its address already holds `max_unauthorized_per_address` unauthorized connections.
    TooManyFromAddress,
}

/// What unauthorized connections are grouped by: an IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum AddressKey {
    V4(u32),
    V6Prefix(u64),
}

impl AddressKey {
    fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => AddressKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => AddressKey::V6Prefix((u128::from(v6) >> 64) as u64),
        }
    }
}

/// The admission state of one server (see the [module](self)).
pub(crate) struct Admission {
    auth_timeout: Duration,
    max_per_address: usize,
    waiting: Mutex<Waiting>,
    /// The summarised warnings of every connection.
    pub(crate) warnings: LogSummary,
}

/// The unauthorized connections, oldest first, and how many each address holds.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    by_age: BTreeMap<u64, Arc<TicketState>>,
    per_address: HashMap<AddressKey, usize>,
}

impl Waiting {
    /// Takes connection `id` off the list (it authorized, was evicted or ended); `false` if it
    /// was not on it.
    fn remove(&mut self, id: u64) -> bool {
        let Some(state) = self.by_age.remove(&id) else {
            return false;
        };
        self.forget_address(state.address);
        true
    }

    fn forget_address(&mut self, address: AddressKey) {
        if let Some(count) = self.per_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
    }
}

/// What a connection and the admission share about it.
struct TicketState {
    address: AddressKey,
    authorized: AtomicBool,
    /// Turns true when the connection is evicted.
    evicted: watch::Sender<bool>,
    /// Its place under the connection cap, until it ends or an evictor takes it.
    slot: Mutex<Option<OwnedSemaphorePermit>>,
}

/// An admitted connection's place: dropped when the connection ends.
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    id: u64,
    peer: IpAddr,
    state: Arc<TicketState>,
}

impl Admission {
    /// The admission of a server with these limits; `log_errors` as
    /// [`crate::ServerConfig::log_errors`].
    pub(crate) fn new(limits: &ResourceLimits, log_errors: bool) -> Self {
        Admission {
            auth_timeout: limits.auth_timeout,
            max_per_address: limits.max_unauthorized_per_address,
            waiting: Mutex::new(Waiting::default()),
            warnings: LogSummary::new(log_errors, limits.warning_interval),
        }
    }

    /// Admits a connection from `peer`, evicting the oldest unauthorized one if the cap is
    /// reached, or says why not (the refusal is counted in the warnings).
    pub(crate) fn admit(
        self: &Arc<Self>,
        budgets: &Budgets,
        peer: SocketAddr,
    ) -> Result<Ticket, Refusal> {
        let address = AddressKey::of(peer.ip());
        let refused = |refusal: Refusal| {
            let kind = match refusal {
                Refusal::OverCap => Warning::OverCap,
                Refusal::TooManyFromAddress => Warning::TooManyFromAddress,
            };
            self.warnings.record(kind, peer.ip(), || match refusal {
                Refusal::OverCap => "a connection refused: the connection cap is reached and \
                                     every connection open has authorized"
                    .to_owned(),
                Refusal::TooManyFromAddress => format!(
                    "a connection refused: its address already holds {} connections that have \
                     not authorized",
                    self.max_per_address
                ),
            });
            Err(refusal)
        };
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting.per_address.get(&address).copied().unwrap_or(0) >= self.max_per_address {
            drop(waiting);
            return refused(Refusal::TooManyFromAddress);
        }
        let slot = match budgets.connection() {
            Some(slot) => slot,
            None => match self.evict_oldest(&mut waiting) {
                Some(slot) => slot,
                None => {
                    drop(waiting);
                    return refused(Refusal::OverCap);
                }
            },
        };
        let id = waiting.next_id;
        waiting.next_id += 1;
        let state = Arc::new(TicketState {
            address,
            authorized: AtomicBool::new(false),
            evicted: watch::Sender::new(false),
            slot: Mutex::new(Some(slot)),
        });
        waiting.by_age.insert(id, state.clone());
        *waiting.per_address.entry(address).or_default() += 1;
        Ok(Ticket {
            admission: self.clone(),
            id,
            peer: peer.ip(),
            state,
        })
    }

    /// Evicts the oldest unauthorized connection that still holds its slot, and hands the slot
    /// over; `None` if there is none.
    fn evict_oldest(&self, waiting: &mut Waiting) -> Option<OwnedSemaphorePermit> {
        while let Some((_, victim)) = waiting.by_age.pop_first() {
            waiting.forget_address(victim.address);
            victim.evicted.send_replace(true);
            let slot = victim
                .slot
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if slot.is_some() {
                return slot;
            }
        }
        None
    }
}

impl Ticket {
    /// Whether a request on this connection has passed the token check.
    pub(crate) fn is_authorized(&self) -> bool {
        self.state.authorized.load(Ordering::Acquire)
    }

    /// A request on this connection passed the token check: it is never evicted from now on.
    pub(crate) fn authorize(&self) {
        if self.state.authorized.swap(true, Ordering::AcqRel) {
            return;
        }
        self.admission
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(self.id);
    }

    /// The peer's address.
    pub(crate) fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The summarised warnings.
    pub(crate) fn warnings(&self) -> &LogSummary {
        &self.admission.warnings
    }

    /// Completes when the connection must close: it was evicted, or the deadline passed
    /// without an authorized request (each counted in the warnings). Never completes for an
    /// authorized connection. Cancel-safe.
    pub(crate) async fn must_close(&self) {
        let mut evicted = self.state.evicted.subscribe();
        tokio::select! {
            () = async { let _ = evicted.wait_for(|evicted| *evicted).await; } => {
                self.warnings().record(Warning::Evicted, self.peer, || {
                    "a connection that had not authorized was closed to make room at the \
                     connection cap"
                        .to_owned()
                });
            }
            () = tokio::time::sleep(self.admission.auth_timeout) => {
                if self.is_authorized() {
                    std::future::pending::<()>().await;
                }
                self.warnings().record(Warning::NotAuthorizedInTime, self.peer, || {
                    format!(
                        "a connection was closed for making no authorized request within {:?}",
                        self.admission.auth_timeout
                    )
                });
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.is_authorized() {
            self.admission
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize, per_address: usize) -> ResourceLimits {
        ResourceLimits {
            max_connections,
            max_unauthorized_per_address: per_address,
            ..ResourceLimits::default()
        }
    }

    fn peer(last: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, last], 40_000))
    }

    #[test]
    fn ipv6_addresses_are_grouped_by_their_64_bit_prefix() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(AddressKey::of(a), AddressKey::of(b));
        assert_ne!(AddressKey::of(a), AddressKey::of(c));
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        assert_eq!(AddressKey::of(mapped), AddressKey::of(peer(2).ip()));
    }

    #[test]
    fn the_oldest_unauthorized_connection_makes_room_and_authorized_ones_stay() {
        let limits = limits(3, 10);
        let budgets = Budgets::new(&limits);
        let admission = Arc::new(Admission::new(&limits, false));
        let authorized = admission.admit(&budgets, peer(1)).unwrap();
        authorized.authorize();
        let oldest = admission.admit(&budgets, peer(2)).unwrap();
        let newer = admission.admit(&budgets, peer(3)).unwrap();
        // The cap is reached: the oldest unauthorized one gives up its slot.
        let newest = admission.admit(&budgets, peer(4)).unwrap();
        assert!(*oldest.state.evicted.borrow());
        assert!(!*newer.state.evicted.borrow());
        assert!(!*authorized.state.evicted.borrow());
        assert_eq!(budgets.connections_open(), 3);
        newer.authorize();
        newest.authorize();
        // Everyone left has authorized: a new connection is refused.
        assert_eq!(
            admission.admit(&budgets, peer(5)).err(),
            Some(Refusal::OverCap)
        );
        drop(oldest);
        assert_eq!(
            admission.admit(&budgets, peer(5)).err(),
            Some(Refusal::OverCap),
            "the evicted connection's slot went to the newcomer"
        );
        drop(newest);
        assert!(admission.admit(&budgets, peer(5)).is_ok());
    }

    #[test]
    fn one_address_holds_at_most_its_share_of_unauthorized_connections() {
        let limits = limits(100, 2);
        let budgets = Budgets::new(&limits);
        let admission = Arc::new(Admission::new(&limits, false));
        let first = admission.admit(&budgets, peer(2)).unwrap();
        let _second = admission.admit(&budgets, peer(2)).unwrap();
        assert_eq!(
            admission.admit(&budgets, peer(2)).err(),
            Some(Refusal::TooManyFromAddress)
        );
        assert!(
            admission.admit(&budgets, peer(3)).is_ok(),
            "another address"
        );
        // Authorizing frees the address's share; so does closing.
        first.authorize();
        let third = admission.admit(&budgets, peer(2)).unwrap();
        drop(third);
        assert!(admission.admit(&budgets, peer(2)).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_closes_only_unauthorized_connections() {
        let limits = ResourceLimits {
            auth_timeout: Duration::from_secs(5),
            ..ResourceLimits::default()
        };
        let budgets = Budgets::new(&limits);
        let admission = Arc::new(Admission::new(&limits, false));
        let stranger = admission.admit(&budgets, peer(2)).unwrap();
        let client = admission.admit(&budgets, peer(3)).unwrap();
        client.authorize();
        let started = tokio::time::Instant::now();
        stranger.must_close().await;
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let kept = tokio::time::timeout(Duration::from_secs(3600), client.must_close()).await;
        assert!(kept.is_err(), "an authorized connection was closed");
    }
}

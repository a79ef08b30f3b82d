//! Admission control for an endpoint that accepts connections (a guest listening for hosts,
//! a host listening for guests). A connection is *pending* from its first packet until its
//! peer has authenticated, and *live* after. The two have separate budgets, and pending
//! connections also a budget per peer address, so peers that never authenticate can hold
//! only a few cheap pending tickets (for a bounded time, which the caller enforces) and
//! never the places of authenticated peers.

use super::Link;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Accepts connections on `endpoint` until it closes. Each takes a pending place or is
/// refused, must finish its TLS handshake within `tls_within`, and is then handed to
/// `serve` on a task of its own, with its place and the moment it arrived (so that the
/// rest of its time before authenticating can be bounded too). `what` names the
/// connections in the log ("connection", "guest connection").
pub async fn accept<F, Fut>(
    endpoint: quinn::Endpoint,
    limits: Limits,
    tls_within: Duration,
    what: &'static str,
    serve: F,
) where
    F: Fn(Link, Pending, Instant) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admission = Admission::new(limits);
    let serve = Arc::new(serve);
    while let Some(incoming) = endpoint.accept().await {
        let peer = incoming.remote_address();
        let pending = match admission.begin(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                tracing::warn!(%peer, "refusing {what}: {why}");
                incoming.refuse();
                continue;
            }
        };
        let serve = serve.clone();
        tokio::spawn(async move {
            let arrived = Instant::now();
            match tokio::time::timeout(tls_within, incoming).await {
                Ok(Ok(conn)) => serve(Link::Quic(conn), pending, arrived).await,
                Ok(Err(e)) => tracing::info!(%peer, "{what} failed during TLS: {e}"),
                Err(_) => tracing::info!(%peer, "{what}: no TLS handshake within {tls_within:?}"),
            }
        });
    }
}

/// The budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections not yet authenticated.
    pub pending: usize,
    /// Most of those from one peer address.
    pub pending_per_peer: usize,
    /// Most authenticated connections.
    pub live: usize,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// Too many connections are still authenticating.
    #[error("{limit} connections are already authenticating; try again in a few seconds")]
    Pending {
        /// The budget.
        limit: usize,
    },
    /// Too many connections from this address are still authenticating.
    #[error("{limit} connections from {peer} are already authenticating")]
    PendingFromPeer {
        /// The address.
        peer: IpAddr,
        /// The budget per address.
        limit: usize,
    },
    /// The endpoint serves as many authenticated connections as it may.
    #[error("{limit} connections are already open; close one first")]
    Full {
        /// The budget.
        limit: usize,
    },
}

#[derive(Debug, Default)]
struct Counts {
    pending: HashMap<IpAddr, usize>,
    pending_total: usize,
    live: usize,
}

/// The budgets and what is using them.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    counts: Mutex<Counts>,
}

impl Admission {
    /// An admission controller with these budgets.
    pub fn new(limits: Limits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::default(),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pending ticket for a new connection from `peer`, held until it authenticates or
    /// is dropped.
    pub fn begin(self: &Arc<Self>, peer: IpAddr) -> Result<Pending, Refused> {
        let mut c = self.counts();
        if c.live >= self.limits.live {
            return Err(Refused::Full {
                limit: self.limits.live,
            });
        }
        if c.pending_total >= self.limits.pending {
            return Err(Refused::Pending {
                limit: self.limits.pending,
            });
        }
        let from_peer = c.pending.entry(peer).or_default();
        if *from_peer >= self.limits.pending_per_peer {
            return Err(Refused::PendingFromPeer {
                peer,
                limit: self.limits.pending_per_peer,
            });
        }
        *from_peer += 1;
        c.pending_total += 1;
        Ok(Pending {
            admission: self.clone(),
            peer,
            released: false,
        })
    }
}

/// A connection that has not authenticated yet; frees its place when dropped.
#[derive(Debug)]
pub struct Pending {
    admission: Arc<Admission>,
    peer: IpAddr,
    released: bool,
}

impl Pending {
    /// Frees the pending place and takes a live one.
    pub fn authenticated(mut self) -> Result<Live, Refused> {
        let mut c = self.admission.counts();
        release(&mut c, self.peer);
        self.released = true;
        if c.live >= self.admission.limits.live {
            return Err(Refused::Full {
                limit: self.admission.limits.live,
            });
        }
        c.live += 1;
        drop(c);
        Ok(Live {
            admission: self.admission.clone(),
        })
    }
}

fn release(c: &mut Counts, peer: IpAddr) {
    c.pending_total -= 1;
    if let Some(n) = c.pending.get_mut(&peer) {
        *n -= 1;
        if *n == 0 {
            c.pending.remove(&peer);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.released {
            release(&mut self.admission.counts(), self.peer);
        }
    }
}

/// An authenticated connection's place; freed when dropped.
#[derive(Debug)]
pub struct Live {
    admission: Arc<Admission>,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.admission.counts().live -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        pending: 3,
        pending_per_peer: 2,
        live: 2,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn pending_budgets_are_per_peer_and_total() {
        let a = Admission::new(LIMITS);
        let a1 = a.begin(ip(1)).unwrap();
        let _a2 = a.begin(ip(1)).unwrap();
        assert_eq!(
            a.begin(ip(1)).unwrap_err(),
            Refused::PendingFromPeer {
                peer: ip(1),
                limit: 2
            }
        );
        let _b1 = a.begin(ip(2)).unwrap();
        assert_eq!(a.begin(ip(3)).unwrap_err(), Refused::Pending { limit: 3 });
        // A peer that gives up frees its place.
        drop(a1);
        let _again = a.begin(ip(1)).unwrap();
        assert_eq!(a.begin(ip(4)).unwrap_err(), Refused::Pending { limit: 3 });
    }

    #[test]
    fn authenticated_connections_move_to_the_live_budget() {
        let a = Admission::new(LIMITS);
        let live1 = a.begin(ip(1)).unwrap().authenticated().unwrap();
        let _live2 = a.begin(ip(1)).unwrap().authenticated().unwrap();
        // Full: refused at once, and a peer that authenticated meanwhile is turned away.
        assert_eq!(a.begin(ip(2)).unwrap_err(), Refused::Full { limit: 2 });
        drop(live1);
        let late = a.begin(ip(2)).unwrap();
        let live3 = a.begin(ip(3)).unwrap().authenticated().unwrap();
        assert_eq!(
            late.authenticated().unwrap_err(),
            Refused::Full { limit: 2 }
        );
        // The refused one left no pending place behind.
        drop(live3);
        let _p1 = a.begin(ip(2)).unwrap();
        let _p2 = a.begin(ip(2)).unwrap();
    }
}

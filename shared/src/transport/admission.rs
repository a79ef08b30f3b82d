//! Admission control for an endpoint that accepts connections (a guest listening for hosts,
//! a host listening for guests). A connection is *pending* from its first packet until its
//! peer has authenticated, and *live* after. The two have separate budgets, so peers that
//! never authenticate never take an authenticated peer's place; and pending connections
//! get small flow-control windows until they authenticate ([`quic`](super::quic)).
//!
//! The pending budget is never a lock-out. When it is full, a newcomer takes the place of
//! one that waits: from the address that holds the most places, the connection that has
//! sat longest since its TLS handshake ended, or, if none has finished its handshake, the
//! one that arrived first. A real peer sends its hello together with the end of its
//! handshake and is through within milliseconds, while a flood's connections sit for
//! seconds, so under a flood it is the flood that makes room; each address pushes out its
//! own connections first, so a flood from one address (even the host's own) never pushes
//! out a peer from another, and a flood from many addresses degrades to first in, first
//! out. A newcomer that would push someone out must first prove that it receives at its
//! address (a QUIC Retry), so spoofed packets push out nobody.
//!
//! Refusals and connections that fail before authenticating are summed up in the log once
//! a second, so a flood shows in the log without flooding it.

use super::{Link, close_code, quic};
use std::collections::{BTreeMap, HashMap};
use std::fmt::{Display, Write as _};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How often the log sums up refusals and failures.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// Accepts connections on `endpoint` until it closes. Each takes a pending place (see the
/// module docs), must finish its TLS handshake within `tls_within`, and is then handed to
/// `serve` on a task of its own, with its place and the moment it arrived (so that the
/// rest of its time before authenticating can be bounded too). `serve` calls
/// [`Pending::authenticated`] once the peer has proven itself, or [`Pending::failed`].
/// `what` names the connections in the log ("connection", "guest connection").
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
    let admission = Arc::new(Admission {
        what,
        state: Mutex::new(State {
            places: Places::new(limits),
            tally: Tally::default(),
        }),
    });
    tokio::spawn(summarize(Arc::downgrade(&admission)));
    let serve = Arc::new(serve);
    while let Some(incoming) = endpoint.accept().await {
        let peer = incoming.remote_address();
        let screened = admission
            .state()
            .places
            .screen(incoming.remote_address_validated());
        let incoming = match screened {
            Screen::Admit => incoming,
            Screen::Retry => match incoming.retry() {
                Ok(()) => {
                    admission.note(RETRIED, peer, "");
                    continue;
                }
                // Only an address already validated cannot be sent a Retry; it may come in.
                Err(e) => e.into_incoming(),
            },
            Screen::Refuse(why) => {
                admission.note(REFUSED, peer, why);
                incoming.refuse();
                continue;
            }
        };
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                admission.note(TLS_FAILED, peer, e);
                continue;
            }
        };
        // A handle on the connection while its handshake runs, so that it can be pushed out
        // with a reason the peer sees. Nothing is sent on it before the handshake is done.
        // Incoming connections always convert.
        let Ok((conn, handshake)) = connecting.into_0rtt() else {
            continue;
        };
        let pending = admission.arrive(peer, conn.clone());
        let serve = serve.clone();
        tokio::spawn(async move {
            let arrived = Instant::now();
            if tokio::time::timeout(tls_within, handshake).await.is_err() {
                conn.close(close_code::HANDSHAKE.into(), b"no TLS handshake in time");
                return pending.failed(TLS_TIMEOUT, format_args!("within {tls_within:?}"));
            }
            match conn.close_reason() {
                None => {
                    pending.established();
                    serve(Link::Quic(conn), pending, arrived).await;
                }
                Some(e) => pending.failed(TLS_FAILED, e),
            }
        });
    }
}

/// Logs the summary of `admission` every [`SUMMARY_EVERY`] while it exists.
async fn summarize(admission: Weak<Admission>) {
    let mut every = tokio::time::interval(SUMMARY_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(a) = admission.upgrade() else { return };
        a.log_summary();
    }
}

/// The budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections not yet authenticated; a newcomer beyond it pushes one out.
    pub pending: usize,
    /// Most authenticated connections; newcomers beyond it are refused.
    pub live: usize,
}

/// Why a connection was not admitted, or not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The endpoint serves as many authenticated connections as it may.
    #[error("{limit} connections are already open; close one first")]
    Full {
        /// The budget.
        limit: usize,
    },
    /// Newer connections arrived while this one had not authenticated, and it had waited
    /// longest.
    #[error(
        "busy: {limit} connections were authenticating and this one had waited longest; try again"
    )]
    PushedOut {
        /// The pending budget.
        limit: usize,
    },
}

/// What happens to a newcomer before its handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Screen {
    /// Take a pending place (pushing one out if the budget is full).
    Admit,
    /// Prove the address first: the budget is full, and it is not validated yet.
    Retry,
    /// Turn away.
    Refuse(Refused),
}

/// A pending connection's place.
#[derive(Debug)]
struct Waiting<C> {
    peer: IpAddr,
    /// When its TLS handshake ended, in the order of [`Places::events`].
    established: Option<u64>,
    conn: C,
}

/// The places and who holds them, without I/O; `C` is a handle on a pending connection,
/// handed back when it must be pushed out.
#[derive(Debug)]
struct Places<C> {
    limits: Limits,
    /// Pending connections by ticket, which is in order of arrival.
    pending: BTreeMap<u64, Waiting<C>>,
    /// How many pending places each address holds.
    per_peer: HashMap<IpAddr, usize>,
    live: usize,
    /// Arrivals and handshakes ended so far: tickets, and the order of handshakes.
    events: u64,
}

impl<C> Places<C> {
    fn new(limits: Limits) -> Self {
        assert!(limits.pending > 0, "a pending budget of 0 admits no one");
        Self {
            limits,
            pending: BTreeMap::new(),
            per_peer: HashMap::new(),
            live: 0,
            events: 0,
        }
    }

    fn screen(&self, validated: bool) -> Screen {
        if self.live >= self.limits.live {
            Screen::Refuse(Refused::Full {
                limit: self.limits.live,
            })
        } else if self.pending.len() >= self.limits.pending && !validated {
            Screen::Retry
        } else {
            Screen::Admit
        }
    }

    /// Gives a newcomer from `peer` a pending place; returns its ticket and, when the budget
    /// was full, the connection pushed out to make room.
    fn arrive(&mut self, peer: IpAddr, conn: C) -> (u64, Option<C>) {
        let ticket = self.events;
        self.events += 1;
        let waiting = Waiting {
            peer,
            established: None,
            conn,
        };
        self.pending.insert(ticket, waiting);
        *self.per_peer.entry(peer).or_default() += 1;
        let out = (self.pending.len() > self.limits.pending)
            .then(|| self.victim())
            .flatten()
            .and_then(|v| self.remove(v));
        (ticket, out)
    }

    /// Notes that a pending connection finished its TLS handshake.
    fn establish(&mut self, ticket: u64) {
        if let Some(w) = self.pending.get_mut(&ticket) {
            w.established = Some(self.events);
            self.events += 1;
        }
    }

    /// Among the connections of the addresses holding the most places, the one that has
    /// sat longest since its handshake ended, else the one that arrived first. Never the
    /// newest arrival: another address holds at least as many places as its one, or its
    /// own address holds an older one.
    fn victim(&self) -> Option<u64> {
        let most = *self.per_peer.values().max()?;
        self.pending
            .iter()
            .filter(|(_, w)| self.per_peer.get(&w.peer) == Some(&most))
            .min_by_key(|(ticket, w)| (w.established.is_none(), w.established.unwrap_or(**ticket)))
            .map(|(ticket, _)| *ticket)
    }

    fn remove(&mut self, ticket: u64) -> Option<C> {
        let w = self.pending.remove(&ticket)?;
        if let Some(n) = self.per_peer.get_mut(&w.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&w.peer);
            }
        }
        Some(w.conn)
    }

    /// Moves a pending connection to a live place, handing back its handle.
    fn authenticate(&mut self, ticket: u64) -> Result<C, Refused> {
        let c = self.remove(ticket).ok_or(Refused::PushedOut {
            limit: self.limits.pending,
        })?;
        if self.live >= self.limits.live {
            return Err(Refused::Full {
                limit: self.limits.live,
            });
        }
        self.live += 1;
        Ok(c)
    }

    /// Frees a pending place; `false` if it had been pushed out already.
    fn leave(&mut self, ticket: u64) -> bool {
        self.remove(ticket).is_some()
    }
}

/// What went wrong before authentication since the last summary: per kind, how often and
/// the last case; per address, how many.
#[derive(Debug)]
struct Tally {
    kinds: BTreeMap<&'static str, (u64, String)>,
    peers: HashMap<IpAddr, u64>,
    since: Instant,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            kinds: BTreeMap::new(),
            peers: HashMap::new(),
            since: Instant::now(),
        }
    }
}

// The kinds the accept loop counts; `serve` brings its own.
const RETRIED: &str = "sent a Retry to validate their address";
const REFUSED: &str = "refused";
const PUSHED_OUT: &str = "pushed out by newer arrivals (waited longest)";
const TLS_FAILED: &str = "TLS handshake failed";
const TLS_TIMEOUT: &str = "no TLS handshake in time";

impl Tally {
    fn add(&mut self, kind: &'static str, peer: SocketAddr, detail: impl Display) {
        let detail = detail.to_string();
        let last = if detail.is_empty() {
            peer.to_string()
        } else {
            format!("{peer}: {detail}")
        };
        let entry = self.kinds.entry(kind).or_default();
        entry.0 += 1;
        entry.1 = last;
        *self.peers.entry(peer.ip().to_canonical()).or_default() += 1;
    }

    /// The summary line, if anything happened, and a fresh tally.
    fn take_line(&mut self, what: &str, pending: usize, live: usize) -> Option<String> {
        let done = std::mem::take(self);
        if done.kinds.is_empty() {
            return None;
        }
        let mut line = format!(
            "{what}s turned away or failed before authenticating in the last {:.1} s:",
            done.since.elapsed().as_secs_f64()
        );
        for (i, (kind, (n, last))) in done.kinds.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            let _ = write!(line, "{sep}{n} {kind} (last: {last})");
        }
        let _ = write!(line, "; now {pending} authenticating, {live} authenticated");
        if let Some((ip, n)) = done.peers.iter().max_by_key(|(ip, n)| (**n, *ip)) {
            let _ = write!(line, "; most from {ip} ({n})");
        }
        Some(line)
    }
}

#[derive(Debug)]
struct State {
    places: Places<quinn::Connection>,
    tally: Tally,
}

/// The budgets of one endpoint and what is using them.
#[derive(Debug)]
struct Admission {
    what: &'static str,
    state: Mutex<State>,
}

impl Admission {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn note(&self, kind: &'static str, peer: SocketAddr, detail: impl Display) {
        self.state().tally.add(kind, peer, detail);
    }

    /// A pending place for a connection from `peer`; closes the one it pushes out, if any.
    fn arrive(self: &Arc<Self>, peer: SocketAddr, conn: quinn::Connection) -> Pending {
        let mut state = self.state();
        // A host's tunnels over TCP have its address mapped to the other IP family
        // (`tunnel`); canonical, they count with its UDP connections.
        let (ticket, out) = state.places.arrive(peer.ip().to_canonical(), conn);
        if let Some(pushed) = out {
            let why = Refused::PushedOut {
                limit: state.places.limits.pending,
            };
            pushed.close(close_code::BUSY.into(), why.to_string().as_bytes());
            state.tally.add(PUSHED_OUT, pushed.remote_address(), "");
        }
        Pending {
            admission: self.clone(),
            ticket,
            peer,
            done: false,
        }
    }

    fn log_summary(&self) {
        let mut state = self.state();
        let (pending, live) = (state.places.pending.len(), state.places.live);
        if let Some(line) = state.tally.take_line(self.what, pending, live) {
            tracing::warn!("{line}");
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.log_summary();
    }
}

/// A connection that has not authenticated yet; frees its place when dropped.
#[derive(Debug)]
pub struct Pending {
    admission: Arc<Admission>,
    ticket: u64,
    peer: SocketAddr,
    done: bool,
}

impl Pending {
    fn established(&self) {
        self.admission.state().places.establish(self.ticket);
    }

    /// Frees the pending place and takes a live one, giving the connection the budgets of
    /// an authenticated peer. Refused if the live places are all taken, or if this
    /// connection was pushed out meanwhile (then it is closed already).
    pub fn authenticated(mut self) -> Result<Live, Refused> {
        self.done = true;
        let mut state = self.admission.state();
        let conn = match state.places.authenticate(self.ticket) {
            Ok(conn) => conn,
            Err(why) => {
                // A connection pushed out is counted already.
                if matches!(why, Refused::Full { .. }) {
                    state.tally.add(REFUSED, self.peer, &why);
                }
                return Err(why);
            }
        };
        drop(state);
        quic::open_windows(&conn);
        Ok(Live {
            admission: self.admission.clone(),
        })
    }

    /// Frees the pending place of a peer that failed to authenticate, counting the failure
    /// under `kind` for the next summary (unless the connection was pushed out, which is
    /// counted already).
    pub fn failed(mut self, kind: &'static str, detail: impl Display) {
        self.done = true;
        let mut state = self.admission.state();
        if state.places.leave(self.ticket) {
            state.tally.add(kind, self.peer, detail);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.admission.state().places.leave(self.ticket);
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
        self.admission.state().places.live -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        pending: 4,
        live: 2,
    };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Arrivals from these addresses, in order; what each pushed out (by ticket).
    fn arrivals(places: &mut Places<u64>, from: &[u8]) -> Vec<Option<u64>> {
        from.iter()
            .map(|last| {
                let ticket = places.events;
                places.arrive(ip(*last), ticket).1
            })
            .collect()
    }

    #[test]
    fn a_full_budget_pushes_out_the_oldest_of_the_busiest_address() {
        let mut p = Places::new(LIMITS);
        // 0 from .1, then a flood from .2: .2 only ever pushes out its own.
        assert_eq!(arrivals(&mut p, &[1, 2, 2, 2]), [None; 4]);
        assert_eq!(arrivals(&mut p, &[2, 2, 2]), [Some(1), Some(2), Some(3)]);
        assert!(
            p.pending.contains_key(&0),
            "the peer from .1 kept its place"
        );
        // A flood from many addresses: ties go to the one that waited longest, so the
        // newest arrival keeps its place for as long as possible.
        let mut p = Places::new(LIMITS);
        assert_eq!(
            arrivals(&mut p, &[1, 2, 3, 4, 5, 6]),
            [None, None, None, None, Some(0), Some(1)]
        );
        // An address holding two places gives up its older one before anyone else does.
        let mut p = Places::new(LIMITS);
        assert_eq!(
            arrivals(&mut p, &[1, 2, 2, 3, 4]),
            [None, None, None, None, Some(1)]
        );
    }

    #[test]
    fn connections_idle_since_their_handshake_go_before_those_still_in_it() {
        // A host still in its handshake among silent connections from its own address
        // that finished theirs: they go first, longest idle first.
        let mut p = Places::new(LIMITS);
        arrivals(&mut p, &[1, 1, 1]);
        p.establish(2);
        p.establish(1);
        assert_eq!(arrivals(&mut p, &[1, 1]), [None, Some(2)]);
        assert_eq!(arrivals(&mut p, &[1]), [Some(1)]);
        // None has finished: the first to arrive goes.
        assert_eq!(arrivals(&mut p, &[1]), [Some(0)]);
        assert_eq!(p.pending.keys().copied().collect::<Vec<_>>(), [5, 6, 7, 8]);
    }

    #[test]
    fn a_full_budget_asks_unvalidated_newcomers_to_retry_first() {
        let mut p = Places::new(LIMITS);
        assert_eq!(p.screen(false), Screen::Admit);
        arrivals(&mut p, &[1, 2, 3, 4]);
        assert_eq!(p.screen(false), Screen::Retry);
        assert_eq!(p.screen(true), Screen::Admit);
    }

    #[test]
    fn authenticated_connections_move_to_the_live_budget() {
        let mut p = Places::new(LIMITS);
        arrivals(&mut p, &[1, 1, 1]);
        assert_eq!(p.authenticate(0), Ok(0));
        assert_eq!(p.authenticate(1), Ok(1));
        // Full: newcomers are refused at once, and one that authenticated meanwhile is
        // turned away (its pending place freed).
        assert_eq!(p.screen(true), Screen::Refuse(Refused::Full { limit: 2 }));
        assert_eq!(p.authenticate(2), Err(Refused::Full { limit: 2 }));
        assert!(p.pending.is_empty() && p.per_peer.is_empty());
        p.live -= 1;
        assert_eq!(p.screen(false), Screen::Admit);
        // A connection pushed out cannot authenticate, nor leave twice.
        arrivals(&mut p, &[3, 3, 3, 3, 3]);
        assert_eq!(p.authenticate(3), Err(Refused::PushedOut { limit: 4 }));
        assert!(!p.leave(3));
        assert!(p.leave(4));
        assert_eq!(p.per_peer[&ip(3)], 3);
    }

    #[test]
    fn the_summary_counts_each_kind_and_names_the_busiest_address() {
        let mut t = Tally::default();
        assert_eq!(t.take_line("connection", 0, 0), None);
        let from = |last: u8| SocketAddr::from(([10, 0, 0, last], 4000));
        for _ in 0..3 {
            t.add(PUSHED_OUT, from(2), "");
        }
        t.add("handshake failed", from(3), "bad token proof");
        t.add("handshake failed", from(2), "not a hello");
        let line = t.take_line("connection", 16, 1).unwrap();
        assert!(line.starts_with("connections turned away"), "{line}");
        assert!(
            line.contains("2 handshake failed (last: 10.0.0.2:4000: not a hello)"),
            "{line}"
        );
        assert!(
            line.contains("3 pushed out by newer arrivals (waited longest) (last: 10.0.0.2:4000)"),
            "{line}"
        );
        assert!(
            line.ends_with("now 16 authenticating, 1 authenticated; most from 10.0.0.2 (4)"),
            "{line}"
        );
        assert_eq!(t.take_line("connection", 0, 0), None, "counts start over");
    }
}

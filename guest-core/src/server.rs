//! The guest's network side: accept connections (or dial a host), authenticate each with the
//! handshake, then serve one request per stream. A misbehaving stream gets a typed error on
//! that stream; it never takes down its connection, and one connection never takes down
//! another.

use crate::body::RequestBody;
use crate::guest::Guest;
use crate::platform::Platform;
use crate::reply::reply;
use pincer_shared::codec::{self, Frame};
use pincer_shared::handshake::{self, ClientHello, ServerHello};
use pincer_shared::identity::Identity;
use pincer_shared::limits::{MAX_HELLO, MAX_REQUEST_HEADER};
use pincer_shared::transport::admission::{self, Limits, Pending};
use pincer_shared::transport::stream::{finish, read_header, write_header};
use pincer_shared::transport::{Link, RecvHalf, SendHalf, TransportError, close_code, quic};
use pincer_shared::{ProtocolVersion, Response, WireError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// How many connections are served: authenticated ones, and ones still in TLS or their
/// hello. Peers that never authenticate only ever hold places of the pending budget, for
/// at most [`PREAUTH_TIMEOUT`] and only until newer connections need them, never an
/// authenticated host's place.
const ADMISSION: Limits = Limits {
    pending: 64,
    live: 64,
};
/// Most requests in flight on one connection.
const MAX_IN_FLIGHT: usize = 256;
/// How long a new connection may take for its TLS handshake and its hello. Hosts give
/// themselves 3 s for each.
const PREAUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections on `endpoint` until it is closed.
pub async fn listen<P: Platform>(guest: Arc<Guest<P>>, endpoint: quinn::Endpoint) {
    let serve_one = move |link: Link, pending: Pending, arrived: tokio::time::Instant| {
        let guest = guest.clone();
        async move {
            let left = PREAUTH_TIMEOUT.saturating_sub(arrived.elapsed());
            let welcome = match check_hello_within(&guest, &link, left).await {
                Ok(w) => w,
                Err(e) => return pending.failed(e.kind(), e),
            };
            // The place first, so that a host the guest cannot serve is told so instead of
            // welcomed.
            let _live = match pending.authenticated() {
                Ok(live) => live,
                Err(why) => return link.close(close_code::BUSY, &why.to_string()),
            };
            if let Ok(version) = welcome.send().await {
                serve(guest, link, version).await;
            }
        }
    };
    admission::accept(
        endpoint,
        ADMISSION,
        PREAUTH_TIMEOUT,
        "connection",
        serve_one,
    )
    .await;
}

/// Longest a single dial attempt waits for the host's answer. QUIC retransmits the first
/// packet with doubling gaps and gives up only at the idle timeout (20 s), so a long
/// attempt would sleep through a host that starts listening meanwhile.
const DIAL_ATTEMPT: Duration = Duration::from_secs(2);
/// Longest pause between dial attempts. Host commands wait a few seconds for a guest that
/// dials in, so the guest must try about once a second while nobody listens.
const MAX_REDIAL_PAUSE: Duration = Duration::from_secs(1);

/// Dials the host at `addr` and serves it; redials with backoff whenever the connection
/// drops, until the process is stopped.
pub async fn dial<P: Platform>(
    guest: Arc<Guest<P>>,
    endpoint: quinn::Endpoint,
    addr: SocketAddr,
    identity: Identity,
    pin: quic::ServerPin,
) {
    let mut backoff = Duration::from_millis(250);
    let mut failures = 0u32;
    loop {
        let attempt = async {
            let (cfg, seen) =
                quic::dialling_guest_config(addr, pin, &identity).map_err(|e| e.to_string())?;
            quic::connect(&endpoint, addr, cfg, &seen, pin)
                .await
                .map_err(|e| e.to_string())
        };
        let attempt = tokio::time::timeout(DIAL_ATTEMPT, attempt)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {DIAL_ATTEMPT:?}")));
        match attempt {
            Ok(conn) => {
                tracing::info!(host = %addr, "connected to host");
                backoff = Duration::from_millis(250);
                failures = 0;
                let link = Link::Quic(conn.clone());
                let welcomed = match check_hello_within(&guest, &link, PREAUTH_TIMEOUT).await {
                    Ok(welcome) => {
                        // The host proved itself: now it gets the full budgets.
                        quic::open_windows(&conn);
                        welcome.send().await
                    }
                    Err(e) => Err(e),
                };
                match welcomed {
                    Ok(version) => serve(guest.clone(), link, version).await,
                    Err(e) => tracing::warn!(host = %addr, "{e}"),
                }
                tracing::info!(host = %addr, "connection to host ended; redialling");
            }
            // Said once per outage: a guest may wait for its host for days.
            Err(e) if failures == 0 => {
                failures += 1;
                tracing::warn!(host = %addr, "cannot reach host: {e}; retrying about every second until it listens");
            }
            Err(e) => {
                failures += 1;
                tracing::debug!(host = %addr, failures, "cannot reach host: {e}");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_REDIAL_PAUSE);
    }
}

/// Why a host did not authenticate.
#[derive(Debug, thiserror::Error)]
enum AuthError {
    /// No hello within the limit.
    #[error("no hello within {0:?}")]
    Timeout(Duration),
    /// The first stream did not carry a hello, or broke.
    #[error("{0}")]
    Broken(String),
    /// The hello did not verify.
    #[error("rejected host '{host}': {answer:?}")]
    Rejected { host: String, answer: ServerHello },
}

impl AuthError {
    /// The kind, for the admission summary.
    fn kind(&self) -> &'static str {
        match self {
            Self::Timeout(_) => "sent no hello in time",
            Self::Broken(_) => "sent no usable hello",
            Self::Rejected { .. } => "failed authentication",
        }
    }
}

/// A host whose hello verified, and the answer it is owed.
struct Welcome {
    send: SendHalf,
    answer: ServerHello,
    version: ProtocolVersion,
}

impl Welcome {
    /// Tells the host it is in.
    async fn send(mut self) -> Result<ProtocolVersion, AuthError> {
        let broken = |e: TransportError| AuthError::Broken(format!("answering the hello: {e}"));
        write_header(&mut self.send, &self.answer, 0, MAX_HELLO)
            .await
            .map_err(broken)?;
        finish(&mut self.send).await.map_err(broken)?;
        Ok(self.version)
    }
}

/// Reads and checks the hello of a new connection within `limit`. A host that fails is
/// answered, and the connection closed, here; one that passes gets its answer from
/// [`Welcome::send`].
async fn check_hello_within<P: Platform>(
    guest: &Guest<P>,
    link: &Link,
    limit: Duration,
) -> Result<Welcome, AuthError> {
    let failed = match tokio::time::timeout(limit, check_hello(guest, link)).await {
        Ok(Ok(welcome)) => return Ok(welcome),
        Ok(Err(e)) => e,
        Err(_) => AuthError::Timeout(limit),
    };
    if matches!(failed, AuthError::Timeout(_)) {
        link.close(close_code::HANDSHAKE, "no hello");
    } else {
        // Let the rejection reach the peer before closing.
        tokio::time::sleep(Duration::from_millis(50)).await;
        link.close(close_code::HANDSHAKE, "handshake failed");
    }
    Err(failed)
}

/// Serves an authenticated connection's streams until it closes.
async fn serve<P: Platform>(guest: Arc<Guest<P>>, link: Link, version: ProtocolVersion) {
    let peer = link.remote_addr();
    tracing::info!(%peer, %version, "host authenticated");
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    loop {
        let (send, recv) = match link.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(%peer, "connection closed: {e}");
                return;
            }
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let guest = guest.clone();
        tokio::spawn(async move {
            if let Err(e) = handle_stream(&guest, version, send, recv).await {
                tracing::debug!(%peer, "stream ended early: {e}");
            }
            drop(permit);
        });
    }
}

/// Reads the hello from the first stream and checks it; answers it only if it fails.
async fn check_hello<P: Platform>(guest: &Guest<P>, link: &Link) -> Result<Welcome, AuthError> {
    let broken = |e: TransportError| AuthError::Broken(e.to_string());
    let (mut send, mut recv) = link.accept().await.map_err(broken)?;
    let header = read_header(&mut recv, MAX_HELLO)
        .await
        .map_err(broken)?
        .ok_or_else(|| AuthError::Broken("stream closed before the hello".into()))?;
    let hello: ClientHello = match codec::decode(&header, 0) {
        Ok(Frame { msg, .. }) => msg,
        Err(e) => {
            // Not a hello: whatever it is, it is a request before authentication.
            let _ = reply(&mut send, Response::Error(WireError::Unauthenticated), None).await;
            return Err(AuthError::Broken(format!(
                "first stream was not a hello ({e})"
            )));
        }
    };
    let exporter = link.exporter().map_err(broken)?;
    let info = guest.info().await;
    let (answer, version) = handshake::accept(&hello, &guest.config.token, &exporter, info);
    if let Some(version) = version {
        return Ok(Welcome {
            send,
            answer,
            version,
        });
    }
    let _ = write_header(&mut send, &answer, 0, MAX_HELLO).await;
    let _ = finish(&mut send).await;
    Err(AuthError::Rejected {
        host: hello.host,
        answer,
    })
}

/// Serves one request stream.
async fn handle_stream<P: Platform>(
    guest: &Guest<P>,
    version: ProtocolVersion,
    mut send: SendHalf,
    mut recv: RecvHalf,
) -> Result<(), TransportError> {
    let header = match read_header(&mut recv, MAX_REQUEST_HEADER).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(()),
        Err(TransportError::Codec(e)) => {
            return reply(&mut send, Response::Error(e.into()), None).await;
        }
        Err(e) => return Err(e),
    };
    let Frame { msg: req, body_len } = match codec::decode_request(&header) {
        Ok(f) => f,
        Err(e) => return reply(&mut send, Response::Error(e.into()), None).await,
    };
    if req.since() > version {
        let e = WireError::Unsupported {
            what: format!(
                "{} needs protocol {}; this connection speaks {version}",
                req.kind_name(),
                req.since()
            ),
        };
        return reply(&mut send, Response::Error(e), None).await;
    }
    tracing::trace!(kind = req.kind_name(), "request");
    let body = RequestBody::new(&mut recv, body_len);
    guest.handle(req, body).await.send(&mut send).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Config;
    use crate::testutil::{Fake, config};
    use pincer_shared::Request;
    use pincer_shared::identity::Token;
    use pincer_shared::limits::MAX_RESPONSE_HEADER;

    /// A client endpoint dialling from `ip`, and a connection from it to `guest_addr`.
    async fn dial_from(
        ip: [u8; 4],
        guest_addr: SocketAddr,
        id: &Identity,
    ) -> (quinn::Endpoint, Result<Link, TransportError>) {
        let ep = quinn::Endpoint::client((ip, 0).into()).unwrap();
        let pin = quic::ServerPin::Pinned(id.fingerprint());
        let (cfg, seen) = quic::client_config(guest_addr, pin, None).unwrap();
        let conn = quic::connect(&ep, guest_addr, cfg, &seen, pin).await;
        (ep, conn.map(Link::Quic))
    }

    /// The host's side of the handshake, then a ping.
    async fn hello_and_ping(link: &Link, token: &Token) -> Response {
        let hello = handshake::client_hello(token, "test-host", &link.exporter().unwrap());
        let (mut s, mut r) = link.open().await.unwrap();
        write_header(&mut s, &hello, 0, MAX_HELLO).await.unwrap();
        finish(&mut s).await.unwrap();
        let h = read_header(&mut r, MAX_HELLO).await.unwrap().unwrap();
        let answer: ServerHello = codec::decode(&h, 0).unwrap().msg;
        assert!(matches!(answer, ServerHello::Accepted(_)), "{answer:?}");
        let (mut s, mut r) = link.open().await.unwrap();
        write_header(&mut s, &Request::Ping, 0, MAX_REQUEST_HEADER)
            .await
            .unwrap();
        finish(&mut s).await.unwrap();
        let h = read_header(&mut r, MAX_RESPONSE_HEADER)
            .await
            .unwrap()
            .unwrap();
        codec::decode_response(&h).unwrap().msg
    }

    /// A guest listening on loopback, its address, and what a host needs to reach it.
    fn listening_guest() -> (quinn::Endpoint, SocketAddr, Identity, Token) {
        let id = Identity::generate("guest").unwrap();
        let token = Token::generate();
        let config = Config {
            name: "admission".into(),
            token: token.clone(),
            ..config(true)
        };
        let guest = Arc::new(Guest::new(config, &Fake::default()));
        let cfg = quic::server_config(&id, false).unwrap();
        let endpoint = quic::server_endpoint("127.0.0.1:0".parse().unwrap(), cfg, &id).unwrap();
        let addr = endpoint.local_addr().unwrap();
        tokio::spawn(listen(guest, endpoint.clone()));
        (endpoint, addr, id, token)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hosts_that_tunnel_over_tcp_authenticate_and_are_served() {
        let (endpoint, addr, id, token) = listening_guest();
        let ep = quic::client_endpoint_tcp(addr).unwrap();
        let pin = quic::ServerPin::Pinned(id.fingerprint());
        let (cfg, seen) = quic::client_config(addr, pin, None).unwrap();
        let link = Link::Quic(quic::connect(&ep, addr, cfg, &seen, pin).await.unwrap());
        let pong = hello_and_ping(&link, &token).await;
        assert!(matches!(pong, Response::Pong { .. }), "{pong:?}");
        // A UDP host at the same time, on the same port.
        let (_udp_ep, udp) = dial_from([127, 0, 0, 1], addr, &id).await;
        let pong = hello_and_ping(&udp.unwrap(), &token).await;
        assert!(matches!(pong, Response::Pong { .. }), "{pong:?}");
        endpoint.close(0u32.into(), b"done");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_peers_make_room_for_hosts_even_from_the_same_address() {
        let (endpoint, addr, id, token) = listening_guest();
        // One address fills the pending budget with connections that never say hello.
        let mut silent = Vec::new();
        for _ in 0..ADMISSION.pending {
            let (ep, link) = dial_from([127, 0, 0, 1], addr, &id).await;
            silent.push((ep, link.expect("TLS completes")));
        }
        // A host from the same address still gets in: the silent connection that waited
        // longest makes room, and is told why.
        let (_host_ep, host) = dial_from([127, 0, 0, 1], addr, &id).await;
        let pong = hello_and_ping(&host.unwrap(), &token).await;
        assert!(matches!(pong, Response::Pong { .. }), "{pong:?}");
        let (_, oldest) = &silent[0];
        let why = tokio::time::timeout(Duration::from_secs(5), oldest.closed())
            .await
            .expect("the oldest silent connection is pushed out");
        assert!(why.contains("waited longest"), "{why}");
        assert!(oldest.busy().is_some(), "{why}");
        // The others keep their places until their time is up.
        assert!(silent[1..].iter().all(|(_, l)| !l.is_closed()));
        for (_, link) in &silent[1..] {
            let why = tokio::time::timeout(PREAUTH_TIMEOUT + Duration::from_secs(2), link.closed())
                .await
                .expect("a silent connection is closed");
            assert!(why.contains("no hello"), "{why}");
        }
        endpoint.close(0u32.into(), b"done");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn before_its_hello_a_connection_gets_one_stream_and_a_small_window() {
        let (endpoint, addr, id, token) = listening_guest();
        let (_ep, link) = dial_from([127, 0, 0, 1], addr, &id).await;
        let Link::Quic(conn) = link.unwrap();
        // No second stream, and of 10 MiB pushed at the first, only about the window.
        let (second, sent) = push_before_hello(&conn).await;
        assert!(!second, "a second stream opened before the hello");
        assert!(
            sent <= 2 * quic::PREAUTH_RECEIVE_WINDOW as usize,
            "{sent} bytes accepted before the hello"
        );
        // An authenticated connection gets the full budget at once.
        let (_ep, host) = dial_from([127, 0, 0, 2], addr, &id).await;
        let host = host.unwrap();
        assert!(matches!(
            hello_and_ping(&host, &token).await,
            Response::Pong { .. }
        ));
        let Link::Quic(hconn) = host;
        let mut streams = Vec::new();
        for _ in 0..8 {
            let (mut s, r) = tokio::time::timeout(Duration::from_secs(2), hconn.open_bi())
                .await
                .expect("streams are granted after authentication")
                .unwrap();
            // Opened streams count once the guest sees them.
            s.write_all(&[0]).await.unwrap();
            streams.push((s, r));
        }
        endpoint.close(0u32.into(), b"done");
    }

    /// Pushes junk at a connection that has not authenticated: a hello that never ends on
    /// its one stream (the guest waits for the rest of it). Returns whether a second stream
    /// opened and how many bytes of 10 MiB were taken in.
    async fn push_before_hello(conn: &quinn::Connection) -> (bool, usize) {
        let (mut first, _r) = conn.open_bi().await.unwrap();
        first
            .write_all(&(MAX_HELLO - 1).to_le_bytes())
            .await
            .unwrap();
        first.write_all(&[0; 1000]).await.unwrap();
        let second = tokio::time::timeout(Duration::from_millis(300), conn.open_bi())
            .await
            .is_ok();
        let junk = vec![7u8; 10 << 20];
        let mut sent = 0;
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            while sent < junk.len() {
                match first.write(&junk[sent..]).await {
                    Ok(n) => sent += n,
                    Err(_) => break,
                }
            }
        })
        .await;
        (second, sent)
    }

    /// A guest that dials its host grants it one stream and a small window until the
    /// host's hello verifies, as a listening guest does; then the full budgets.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dialling_guest_gives_its_host_a_small_window_until_the_hello() {
        let host_id = Identity::generate("host").unwrap();
        let cfg = quic::server_config(&host_id, true).unwrap();
        let host = quic::server_endpoint("127.0.0.1:0".parse().unwrap(), cfg, &host_id).unwrap();
        let addr = host.local_addr().unwrap();
        let token = Token::generate();
        let config = Config {
            name: "dialler".into(),
            token: token.clone(),
            ..config(true)
        };
        let guest = Arc::new(Guest::new(config, &Fake::default()));
        let pin = quic::ServerPin::Pinned(host_id.fingerprint());
        let ep = quic::client_endpoint(addr).unwrap();
        let dialler = tokio::spawn(dial(
            guest,
            ep,
            addr,
            Identity::generate("guest").unwrap(),
            pin,
        ));
        let accept = || async {
            tokio::time::timeout(Duration::from_secs(10), host.accept())
                .await
                .expect("the guest dials")
                .unwrap()
                .await
                .unwrap()
        };
        // Before the hello: one stream, and about the window of a hello.
        let conn = accept().await;
        let (second, sent) = push_before_hello(&conn).await;
        assert!(!second, "a second stream opened before the hello");
        assert!(
            sent <= 2 * quic::PREAUTH_RECEIVE_WINDOW as usize,
            "{sent} bytes accepted before the hello"
        );
        conn.close(0u32.into(), b"junk");
        // The guest dials again; a host whose hello verifies gets the full budgets.
        let link = Link::Quic(accept().await);
        assert!(matches!(
            hello_and_ping(&link, &token).await,
            Response::Pong { .. }
        ));
        let Link::Quic(conn) = link;
        let mut streams = Vec::new();
        for _ in 0..8 {
            let (mut s, r) = tokio::time::timeout(Duration::from_secs(2), conn.open_bi())
                .await
                .expect("streams are granted after the hello")
                .unwrap();
            s.write_all(&[0]).await.unwrap();
            streams.push((s, r));
        }
        dialler.abort();
        host.close(0u32.into(), b"done");
    }
}

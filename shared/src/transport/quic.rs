//! QUIC endpoints for pincer: TLS 1.3 with the ring provider, ALPN `pincer/1`, self-signed
//! certificates checked by pinned SHA-256 fingerprint (no CA, no platform verifier), and
//! transport settings sized for screenshots and files on a LAN once a peer has
//! authenticated, and for little more than a hello before.

use super::{TransportError, tunnel};
use crate::codec::PREFIX_LEN;
use crate::identity::{Fingerprint, Identity};
use crate::limits::MAX_HELLO;
use crate::version::ALPN;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The name put in SNI. Certificates are pinned, so the name is never checked.
pub const SERVER_NAME: &str = "pincer";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Most concurrent requests on an authenticated connection.
const STREAMS: u32 = 1024;
/// Bytes an authenticated connection may have in flight towards us on all its streams, and
/// on one: room for raw 4K frames and large files without waiting for window updates.
const RECEIVE_WINDOW: u32 = 256 << 20;
const STREAM_RECEIVE_WINDOW: u32 = 64 << 20;
/// What an accepting side grants a connection before its peer authenticates: one stream,
/// and room for the largest hello with its length prefix, on all streams together. QUIC
/// fixes the per-stream window for the connection's life, so it stays large; the
/// connection window is what bounds the bytes a peer can make us hold.
pub const PREAUTH_RECEIVE_WINDOW: u32 = MAX_HELLO + PREFIX_LEN as u32;

/// The round-trip time QUIC assumes for a path until it has measured one, which sets when
/// a handshake's first packets are sent again. On loopback (local desktops, a VM's or
/// `adb forward`'s port) a round trip takes well under a millisecond: a lost first packet
/// is sent again after about 30 ms. Any other path (Wi-Fi, a LAN, the internet) gets
/// 100 ms: guessing 10 ms there made a 40–80 ms path send its handshake again and again,
/// backing off, and a tenth of its connections took 1.9 s or more (0.6 s with 100 ms).
pub fn initial_rtt(peer: std::net::IpAddr) -> Duration {
    if peer.is_loopback() {
        Duration::from_millis(10)
    } else {
        Duration::from_millis(100)
    }
}

/// Transport settings: keep-alives so NAT bindings and idle guests stay reachable, no
/// datagrams (pincer sends none, and unread ones would be buffered), and either the budgets
/// of an authenticated connection or, for connections we accept and those a guest dials,
/// the small ones of [`PREAUTH_RECEIVE_WINDOW`] until [`open_windows`] after
/// authentication.
fn transport_config(authenticated: bool, initial_rtt: Duration) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let (streams, window) = if authenticated {
        (STREAMS, RECEIVE_WINDOW)
    } else {
        (1, PREAUTH_RECEIVE_WINDOW)
    };
    t.max_concurrent_bidi_streams(streams.into())
        .max_concurrent_uni_streams(0u32.into())
        .stream_receive_window(STREAM_RECEIVE_WINDOW.into())
        .receive_window(window.into())
        .send_window(RECEIVE_WINDOW.into())
        .datagram_receive_buffer_size(None)
        .keep_alive_interval(Some(Duration::from_secs(4)))
        .initial_rtt(initial_rtt);
    t.max_idle_timeout(Some(
        Duration::from_secs(20)
            .try_into()
            .expect("20 s is a valid idle timeout"),
    ));
    t
}

/// Gives a connection we accepted (or a guest dialled) the budgets of an authenticated one,
/// once its peer has authenticated.
pub fn open_windows(conn: &quinn::Connection) {
    conn.set_receive_window(RECEIVE_WINDOW.into());
    conn.set_max_concurrent_bi_streams(STREAMS.into());
}

/// Which server certificate a dialling side accepts.
#[derive(Debug, Clone, Copy)]
pub enum ServerPin {
    /// Only a certificate with this fingerprint.
    Pinned(Fingerprint),
    /// Any certificate; the caller reads [`SeenCert`] and decides (trust on first use, or
    /// a guest dialling a host whose token proof authenticates it).
    Any,
}

/// The fingerprint a peer presented during the last handshake on a config, so a mismatch
/// can be reported with both values.
#[derive(Debug, Default)]
pub struct SeenCert(Mutex<Option<Fingerprint>>);

impl SeenCert {
    /// The fingerprint presented, if a handshake got that far.
    pub fn get(&self) -> Option<Fingerprint> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The handshake-signature methods shared by [`ServerCertVerifier`] and
/// [`ClientCertVerifier`]: both verifiers differ only in which certificates they accept, and
/// check signatures with the algorithms of their `provider` field. Each trait method has
/// the name of the `rustls::crypto` function it delegates to.
macro_rules! provider_signature_checks {
    () => {
        provider_signature_checks!(verify_tls12_signature);
        provider_signature_checks!(verify_tls13_signature);

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
    ($check:ident) => {
        fn $check(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::$check(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }
    };
}

#[derive(Debug)]
struct PinVerifier {
    pin: ServerPin,
    seen: Arc<SeenCert>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = Fingerprint::of(end_entity);
        *self.seen.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(got);
        match self.pin {
            ServerPin::Any => Ok(ServerCertVerified::assertion()),
            ServerPin::Pinned(want) if want.matches(&got) => Ok(ServerCertVerified::assertion()),
            ServerPin::Pinned(_) => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            )),
        }
    }

    provider_signature_checks!();
}

/// Accepts any client certificate that proves possession of its key; the application
/// then checks the fingerprint against its registry ([`super::Link::peer_fingerprint`]).
#[derive(Debug)]
struct AnyClientCert {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    provider_signature_checks!();
}

fn cert_chain(id: &Identity) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    (
        vec![CertificateDer::from(id.cert_der.clone())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(id.key_der.clone())),
    )
}

fn endpoint_err(e: impl std::fmt::Display) -> TransportError {
    TransportError::Endpoint(e.to_string())
}

/// A server configuration presenting `id`. With `require_client_cert`, dialling peers must
/// present a certificate (a host listening for guests); the fingerprint is checked by the
/// application after the handshake. Connections start with the small budgets of a peer
/// that has not authenticated ([`PREAUTH_RECEIVE_WINDOW`], one stream).
pub fn server_config(
    id: &Identity,
    require_client_cert: bool,
) -> Result<quinn::ServerConfig, TransportError> {
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(endpoint_err)?;
    let (chain, key) = cert_chain(id);
    let mut tls = if require_client_cert {
        builder
            .with_client_cert_verifier(Arc::new(AnyClientCert { provider }))
            .with_single_cert(chain, key)
    } else {
        builder.with_no_client_auth().with_single_cert(chain, key)
    }
    .map_err(endpoint_err)?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(endpoint_err)?;
    let mut cfg = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    // An accepting side cannot tell a connection's path before its first packet; most
    // of an agent's hosts are local, and a remote host's own guess (above) sets how soon
    // its first packets are sent again.
    cfg.transport_config(Arc::new(transport_config(
        false,
        initial_rtt(std::net::Ipv4Addr::LOCALHOST.into()),
    )));
    Ok(cfg)
}

/// A client configuration for dialling `peer` that accepts the server certificate allowed
/// by `pin` and, if given, presents `id` as client certificate. The returned [`SeenCert`] records what the
/// server presented. A host dialling a guest checks the guest's certificate during TLS, so
/// its connections have an authenticated connection's budgets from the start.
pub fn client_config(
    peer: SocketAddr,
    pin: ServerPin,
    id: Option<&Identity>,
) -> Result<(quinn::ClientConfig, Arc<SeenCert>), TransportError> {
    client_config_with(peer, pin, id, true)
}

/// The client configuration of a guest that dials its host: the host proves itself by its
/// hello, not by TLS, so until then the connection has the budgets of one accepted before
/// authentication ([`PREAUTH_RECEIVE_WINDOW`], one stream), opened with [`open_windows`]
/// once the hello verifies.
pub fn dialling_guest_config(
    host: SocketAddr,
    pin: ServerPin,
    id: &Identity,
) -> Result<(quinn::ClientConfig, Arc<SeenCert>), TransportError> {
    client_config_with(host, pin, Some(id), false)
}

fn client_config_with(
    peer: SocketAddr,
    pin: ServerPin,
    id: Option<&Identity>,
    authenticated: bool,
) -> Result<(quinn::ClientConfig, Arc<SeenCert>), TransportError> {
    let provider = provider();
    let seen = Arc::new(SeenCert::default());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(endpoint_err)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinVerifier {
            pin,
            seen: seen.clone(),
            provider,
        }));
    let mut tls = match id {
        Some(id) => {
            let (chain, key) = cert_chain(id);
            builder
                .with_client_auth_cert(chain, key)
                .map_err(endpoint_err)?
        }
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(endpoint_err)?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport_config(
        authenticated,
        initial_rtt(peer.ip()),
    )));
    Ok((cfg, seen))
}

/// An endpoint that accepts connections on `addr` (and can also dial), presenting `id`,
/// over UDP and over TCP tunnels ([`tunnel`](super::tunnel)) on the same address and port.
/// A port of 0 picks one that is free for both.
///
/// Its stateless-reset key and connection-ID key are derived from the identity's private
/// key, so an agent that restarts on the same port recognises the connection IDs its
/// previous process issued and resets those connections: hosts then notice the restart on
/// their next packet instead of after the idle timeout.
pub fn server_endpoint(
    addr: SocketAddr,
    config: quinn::ServerConfig,
    id: &Identity,
) -> Result<quinn::Endpoint, TransportError> {
    let secret = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &id.key_der),
        b"pincer stateless reset key",
    );
    let reset_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_ref());
    let mut ep_cfg = quinn::EndpointConfig::new(Arc::new(reset_key));
    ep_cfg.cid_generator(|| Box::new(RandomCids) as Box<dyn quinn::ConnectionIdGenerator>);
    let runtime = quinn::default_runtime()
        .ok_or_else(|| TransportError::Endpoint("no async runtime".into()))?;
    let (udp, tcp) = bind_both(addr)?;
    let socket = tunnel::ServerSocket::new(udp, tcp, &*runtime)
        .map_err(|e| TransportError::Endpoint(format!("cannot listen on {addr}: {e}")))?;
    quinn::Endpoint::new_with_abstract_socket(ep_cfg, Some(config), socket, runtime)
        .map_err(|e| TransportError::Endpoint(format!("cannot listen on {addr}: {e}")))
}

/// How often a port of 0 is tried again when the TCP side of the port the system picked
/// for UDP is taken (UDP and TCP ports are separate, so that can happen).
const PORT_ATTEMPTS: usize = 8;

/// A UDP socket and a TCP listener on the same address and port.
fn bind_both(
    addr: SocketAddr,
) -> Result<(std::net::UdpSocket, std::net::TcpListener), TransportError> {
    let err = |proto: &str, e: std::io::Error| {
        TransportError::Endpoint(format!("cannot listen on {addr} ({proto}): {e}"))
    };
    let mut attempts = 0;
    loop {
        attempts += 1;
        let udp = std::net::UdpSocket::bind(addr).map_err(|e| err("udp", e))?;
        let port = udp.local_addr().map_err(|e| err("udp", e))?.port();
        match std::net::TcpListener::bind(SocketAddr::new(addr.ip(), port)) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e)
                if addr.port() == 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && attempts < PORT_ATTEMPTS => {}
            Err(e) => return Err(err("tcp", e)),
        }
    }
}

/// Random 16-byte connection IDs that any process accepts as plausible. quinn's default
/// generator signs its IDs with a per-process key and silently drops packets for IDs it did
/// not sign, which would stop a restarted agent from resetting its predecessor's
/// connections.
#[derive(Debug)]
struct RandomCids;

impl quinn::ConnectionIdGenerator for RandomCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        use ring::rand::SecureRandom;
        let mut b = [0u8; 16];
        // The OS random source does not fail on Linux; if it ever did, a fixed-but-unique
        // fallback would still be a valid (if guessable) ID.
        if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
            b[..8].copy_from_slice(
                &std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
                    .to_le_bytes()[..8],
            );
        }
        quinn::ConnectionId::new(&b)
    }

    fn cid_len(&self) -> usize {
        16
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// An endpoint that only dials, bound to an ephemeral port of the right address family.
pub fn client_endpoint(for_peer: SocketAddr) -> Result<quinn::Endpoint, TransportError> {
    let bind: SocketAddr = if for_peer.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    quinn::Endpoint::client(bind)
        .map_err(|e| TransportError::Endpoint(format!("cannot bind a UDP socket: {e}")))
}

/// An endpoint that only dials `peer`, over a TCP tunnel ([`tunnel::ClientSocket`]) instead
/// of UDP. It connects on its first packet, and again after the TCP connection broke.
pub fn client_endpoint_tcp(peer: SocketAddr) -> Result<quinn::Endpoint, TransportError> {
    let runtime = quinn::default_runtime()
        .ok_or_else(|| TransportError::Endpoint("no async runtime".into()))?;
    let socket = tunnel::ClientSocket::new(peer);
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        socket,
        runtime,
    )
    .map_err(|e| TransportError::Endpoint(format!("cannot make a tunnel to {peer}: {e}")))
}

/// Dials `addr` with `config`. A pinned-certificate mismatch is reported with both
/// fingerprints.
pub async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    config: quinn::ClientConfig,
    seen: &SeenCert,
    pin: ServerPin,
) -> Result<quinn::Connection, TransportError> {
    let connecting = endpoint.connect_with(config, addr, SERVER_NAME)?;
    match connecting.await {
        Ok(c) => Ok(c),
        Err(e) => {
            if let (ServerPin::Pinned(expected), Some(got)) = (pin, seen.get())
                && !expected.matches(&got)
            {
                return Err(TransportError::FingerprintMismatch { expected, got });
            }
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Link;

    /// A server endpoint presenting `id` on a loopback port, and its address.
    fn listen(id: &Identity, require_client_cert: bool) -> (quinn::Endpoint, SocketAddr) {
        let loopback = "127.0.0.1:0".parse().unwrap();
        let config = server_config(id, require_client_cert).unwrap();
        let server = server_endpoint(loopback, config, id).unwrap();
        let addr = server.local_addr().unwrap();
        (server, addr)
    }

    /// Dials `addr` accepting what `pin` allows, presenting `id` if given. Returns the client
    /// endpoint (to keep it open), what the server presented, and the connection.
    async fn dial(
        addr: SocketAddr,
        pin: ServerPin,
        id: Option<&Identity>,
    ) -> (
        quinn::Endpoint,
        Arc<SeenCert>,
        Result<quinn::Connection, TransportError>,
    ) {
        let (cfg, seen) = client_config(addr, pin, id).unwrap();
        let client = client_endpoint(addr).unwrap();
        let c = connect(&client, addr, cfg, &seen, pin).await;
        (client, seen, c)
    }

    #[test]
    fn only_loopback_paths_are_guessed_short() {
        let rtt = |a: &str| initial_rtt(a.parse().unwrap());
        // Local desktops, a VM's forwarded port, `adb forward`.
        assert_eq!(rtt("127.0.0.1"), Duration::from_millis(10));
        assert_eq!(rtt("::1"), Duration::from_millis(10));
        // Wi-Fi phones, LAN machines, cluster nodes, and this machine's own addresses.
        for a in [
            "192.168.1.20",
            "10.0.2.2",
            "198.18.0.1",
            "fe80::1",
            "2001:db8::1",
        ] {
            assert_eq!(rtt(a), Duration::from_millis(100), "{a}");
        }
    }

    #[tokio::test]
    async fn pinned_connection_works_and_exporters_agree() {
        let id = Identity::generate("guest").unwrap();
        let (server, addr) = listen(&id, false);
        let accept = tokio::spawn(async move {
            let c = server.accept().await.unwrap().await.unwrap();
            let link = Link::Quic(c);
            let ex = link.exporter().unwrap();
            (ex, server)
        });
        let (_client, _, c) = dial(addr, ServerPin::Pinned(id.fingerprint()), None).await;
        let link = Link::Quic(c.unwrap());
        let (server_ex, _server) = accept.await.unwrap();
        assert_eq!(link.exporter().unwrap(), server_ex);
        assert_eq!(link.peer_fingerprint(), Some(id.fingerprint()));
    }

    #[tokio::test]
    async fn wrong_pin_names_both_fingerprints() {
        let id = Identity::generate("guest").unwrap();
        let (server, addr) = listen(&id, false);
        let _accept = tokio::spawn(async move {
            let _ = server.accept().await.unwrap().await;
        });
        let wrong = Fingerprint::of(b"not it");
        match dial(addr, ServerPin::Pinned(wrong), None).await.2 {
            Err(TransportError::FingerprintMismatch { expected, got }) => {
                assert_eq!(expected, wrong);
                assert_eq!(got, id.fingerprint());
            }
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn client_certificates_are_visible_to_a_listening_host() {
        let host = Identity::generate("host").unwrap();
        let guest = Identity::generate("guest").unwrap();
        let (server, addr) = listen(&host, true);
        let accept = tokio::spawn(async move {
            let c = server.accept().await.unwrap().await.unwrap();
            (Link::Quic(c).peer_fingerprint(), server)
        });
        let (_client, seen, c) = dial(addr, ServerPin::Any, Some(&guest)).await;
        let _c = c.unwrap();
        assert_eq!(seen.get(), Some(host.fingerprint()));
        let (fp, _server) = accept.await.unwrap();
        assert_eq!(fp, Some(guest.fingerprint()));
    }
}

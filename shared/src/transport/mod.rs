//! The async layer: QUIC endpoints with pinned self-signed certificates ([`quic`]), a
//! [`Link`] that carries request streams, and frame I/O over any byte stream ([`stream`]).
//!
//! Links where UDP cannot pass (QEMU's restricted user networking, `adb forward`) carry
//! QUIC itself over TCP ([`tunnel`]): a guest's endpoint serves UDP and TCP on one port,
//! and a host picks per environment. Everything above the socket is the same on both, and
//! everything above `Link` speaks only frames on bidirectional streams.

pub mod admission;
pub mod quic;
pub mod stream;
pub mod tunnel;

use crate::identity::{EXPORTER_LABEL, EXPORTER_LEN, Fingerprint};
use std::net::SocketAddr;
use tokio::io::{AsyncRead, AsyncWrite};

/// The writing half of a request stream.
pub type SendHalf = Box<dyn AsyncWrite + Send + Unpin>;
/// The reading half of a request stream.
pub type RecvHalf = Box<dyn AsyncRead + Send + Unpin>;

/// Errors below the protocol: connecting, streams, frames.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Setting up the endpoint failed (bad address, port in use, TLS config).
    #[error("could not set up the endpoint: {0}")]
    Endpoint(String),
    /// The connection could not be made or was lost.
    #[error("connection: {0}")]
    Connection(#[from] quinn::ConnectionError),
    /// Dialling failed before any packet was sent.
    #[error("connect: {0}")]
    Connect(#[from] quinn::ConnectError),
    /// Writing to a stream failed.
    #[error("stream write: {0}")]
    Write(String),
    /// Reading from a stream failed.
    #[error("stream read: {0}")]
    Read(String),
    /// The peer ended the stream before a whole frame arrived.
    #[error("the peer closed the stream mid-frame")]
    Truncated,
    /// A frame could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
    /// The peer's certificate is not the pinned one.
    #[error("certificate fingerprint mismatch: expected {expected}, got {got}")]
    FingerprintMismatch {
        /// The pinned fingerprint.
        expected: Fingerprint,
        /// The one presented.
        got: Fingerprint,
    },
}

impl TransportError {
    /// If the peer turned the connection away for load, what it said: it is at its
    /// connection limit, or other connections pushed this one out before it authenticated.
    /// Worth trying again, unlike a peer that is not there.
    pub fn busy(&self) -> Option<String> {
        match self {
            Self::Connection(e) => busy_reason(e),
            _ => None,
        }
    }
}

/// See [`TransportError::busy`].
fn busy_reason(e: &quinn::ConnectionError) -> Option<String> {
    use quinn::{ConnectionError, TransportErrorCode};
    match e {
        ConnectionError::ApplicationClosed(c) if c.error_code == close_code::BUSY.into() => {
            Some(String::from_utf8_lossy(&c.reason).into_owned())
        }
        ConnectionError::ConnectionClosed(c)
            if c.error_code == TransportErrorCode::CONNECTION_REFUSED =>
        {
            Some("it refused the connection: it serves as many peers as it may".into())
        }
        // Closing a connection before its TLS handshake is done sends no code or reason of
        // the application's; pincer does that only to push a connection out for newer
        // ones, or when the agent stops (then trying again is right too).
        ConnectionError::ConnectionClosed(c)
            if c.error_code == TransportErrorCode::APPLICATION_ERROR =>
        {
            Some("it closed the connection during the TLS handshake, as it does when more connections are authenticating than it holds".into())
        }
        _ => None,
    }
}

/// One authenticated-or-not connection between a host and a guest.
#[derive(Debug, Clone)]
pub enum Link {
    /// QUIC.
    Quic(quinn::Connection),
}

impl Link {
    /// Opens a request stream.
    pub async fn open(&self) -> Result<(SendHalf, RecvHalf), TransportError> {
        match self {
            Self::Quic(c) => {
                let (s, r) = c.open_bi().await?;
                Ok((Box::new(s), Box::new(r)))
            }
        }
    }

    /// Waits for the peer to open a request stream.
    pub async fn accept(&self) -> Result<(SendHalf, RecvHalf), TransportError> {
        match self {
            Self::Quic(c) => {
                let (s, r) = c.accept_bi().await?;
                Ok((Box::new(s), Box::new(r)))
            }
        }
    }

    /// Keying material exported from the TLS session, for the auth proof.
    pub fn exporter(&self) -> Result<[u8; EXPORTER_LEN], TransportError> {
        let mut out = [0u8; EXPORTER_LEN];
        match self {
            Self::Quic(c) => c
                .export_keying_material(&mut out, EXPORTER_LABEL, b"")
                .map_err(|_| {
                    TransportError::Endpoint("TLS keying-material export failed".into())
                })?,
        }
        Ok(out)
    }

    /// Fingerprint of the certificate the peer presented, if it presented one.
    pub fn peer_fingerprint(&self) -> Option<Fingerprint> {
        match self {
            Self::Quic(c) => {
                let any = c.peer_identity()?;
                let certs = any
                    .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                    .ok()?;
                certs.first().map(|c| Fingerprint::of(c))
            }
        }
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> SocketAddr {
        match self {
            Self::Quic(c) => c.remote_address(),
        }
    }

    /// Closes the connection with an application code and reason the peer will see.
    pub fn close(&self, code: u32, reason: &str) {
        match self {
            Self::Quic(c) => c.close(code.into(), reason.as_bytes()),
        }
    }

    /// Closes the connection like [`Link::close`], and returns a [`Closed`] that can wait
    /// until the peer has been told.
    pub fn close_telling(&self, code: u32, reason: &str) -> Closed {
        let sent = self.datagrams_sent();
        self.close(code, reason);
        Closed {
            link: self.clone(),
            sent,
        }
    }

    fn datagrams_sent(&self) -> u64 {
        match self {
            Self::Quic(c) => c.stats().udp_tx.datagrams,
        }
    }

    /// Waits until the connection is closed, by either side or by a timeout, and says why.
    pub async fn closed(&self) -> String {
        match self {
            Self::Quic(c) => c.closed().await.to_string(),
        }
    }

    /// If the peer closed the connection because it is busy, what it said (see
    /// [`TransportError::busy`]).
    pub fn busy(&self) -> Option<String> {
        match self {
            Self::Quic(c) => busy_reason(&c.close_reason()?),
        }
    }

    /// Whether the connection has already closed.
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Quic(c) => c.close_reason().is_some(),
        }
    }

    /// Smoothed round-trip time as the transport measures it.
    pub fn rtt(&self) -> std::time::Duration {
        match self {
            Self::Quic(c) => c.rtt(),
        }
    }
}

/// A connection closed by [`Link::close_telling`].
#[derive(Debug)]
pub struct Closed {
    link: Link,
    /// Datagrams the connection had sent before it was closed.
    sent: u64,
}

impl Closed {
    /// Waits, at most `within`, until the packet that tells the peer has left (the next
    /// datagram). A process that exits right after closing would otherwise leave its peer to
    /// notice at its idle timeout, holding the connection's place until then.
    pub async fn told(self, within: std::time::Duration) {
        let until = std::time::Instant::now() + within;
        // The transport's own task sends it within microseconds; the timer's millisecond
        // ticks would be the slowest part of waiting for it.
        while self.link.datagrams_sent() == self.sent && std::time::Instant::now() < until {
            tokio::task::yield_now().await;
        }
    }
}

/// Application close codes.
pub mod close_code {
    /// Normal shutdown.
    pub const DONE: u32 = 0;
    /// The handshake failed (auth or version).
    pub const HANDSHAKE: u32 = 1;
    /// The peer's certificate was not accepted.
    pub const CERTIFICATE: u32 = 2;
    /// The guest is shutting down.
    pub const SHUTDOWN: u32 = 3;
    /// Another connection for the same guest name replaced this one.
    pub const REPLACED: u32 = 4;
    /// The accepting side is at its connection limit, or pushed this connection out for
    /// newer ones before it authenticated.
    pub const BUSY: u32 = 5;
}

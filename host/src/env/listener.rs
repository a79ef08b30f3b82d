//! The host's listener for guests that dial in (VMs behind NAT, emulators, phones on
//! Wi-Fi): it authenticates each guest by the certificate pinned for the name the guest
//! reports, and hands out one [`Environment`] per name that follows the guest across
//! reconnections.

use super::{Deadlines, Environment, Session, Source, handshake};
use pincer_shared::identity::{Fingerprint, Identity, Token};
use pincer_shared::transport::{Link, TransportError, close_code, quic};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{mpsc, watch};

/// Which guests may register.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    /// Certificates pinned per guest name.
    pub pinned: HashMap<String, Fingerprint>,
    /// Accept names without a pin, pinning what they present (trust on first use).
    pub accept_new: bool,
}

/// A guest that registered, with the certificate it presented.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// The environment, live across reconnections of this guest.
    pub env: Arc<Environment>,
    /// The certificate the guest presented.
    pub fingerprint: Fingerprint,
    /// Whether this name was not pinned before (trust on first use).
    pub newly_trusted: bool,
}

type Slots = Mutex<HashMap<String, watch::Sender<Option<Arc<Session>>>>>;

/// Accepts guests on a UDP port.
#[derive(Debug)]
pub struct Listener {
    endpoint: quinn::Endpoint,
    fingerprint: Fingerprint,
    arrivals: tokio::sync::Mutex<mpsc::Receiver<Arrival>>,
}

impl Listener {
    /// Listens on `addr` presenting `identity`; guests must present a client certificate
    /// allowed by `policy`, and accept `token`.
    pub fn bind(
        addr: SocketAddr,
        identity: &Identity,
        token: Token,
        policy: TrustPolicy,
        deadlines: Deadlines,
    ) -> Result<Self, TransportError> {
        let cfg = quic::server_config(identity, true)?;
        let endpoint = quic::server_endpoint(addr, cfg, identity)?;
        let (tx, rx) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            token,
            policy: RwLock::new(policy),
            slots: Mutex::new(HashMap::new()),
            arrivals: tx,
            deadlines,
        });
        let ep = endpoint.clone();
        tokio::spawn(async move {
            while let Some(incoming) = ep.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let peer = incoming.remote_address();
                    match incoming.await {
                        Ok(conn) => shared.admit(Link::Quic(conn)).await,
                        Err(e) => tracing::info!(%peer, "guest connection failed during TLS: {e}"),
                    }
                });
            }
        });
        Ok(Self {
            endpoint,
            fingerprint: identity.fingerprint(),
            arrivals: tokio::sync::Mutex::new(rx),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The certificate guests can pin (`pincer-agent --host-fingerprint`).
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The next guest name that registers for the first time.
    pub async fn next(&self) -> Option<Arrival> {
        self.arrivals.lock().await.recv().await
    }
}

#[derive(Debug)]
struct Shared {
    token: Token,
    policy: RwLock<TrustPolicy>,
    slots: Slots,
    arrivals: mpsc::Sender<Arrival>,
    deadlines: Deadlines,
}

impl Shared {
    async fn admit(&self, link: Link) {
        let peer = link.remote_addr();
        let Some(fp) = link.peer_fingerprint() else {
            link.close(close_code::CERTIFICATE, "client certificate required");
            return;
        };
        let hs = tokio::time::timeout(
            self.deadlines.connect,
            handshake("(dialling guest)", &link, &self.token),
        )
        .await;
        let (info, version) = match hs {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                tracing::warn!(%peer, "guest handshake failed: {e}");
                link.close(close_code::HANDSHAKE, "handshake failed");
                return;
            }
            Err(_) => {
                tracing::warn!(%peer, "guest handshake timed out");
                link.close(close_code::HANDSHAKE, "handshake timed out");
                return;
            }
        };
        let name = info.name.clone();
        let newly_trusted = {
            let mut policy = self.policy.write().unwrap_or_else(|e| e.into_inner());
            match policy.pinned.get(&name) {
                Some(pin) if pin.matches(&fp) => false,
                Some(pin) => {
                    tracing::warn!(%peer, guest = %name, "refusing guest: certificate fingerprint mismatch: expected {pin}, got {fp}");
                    link.close(close_code::CERTIFICATE, "certificate fingerprint mismatch");
                    return;
                }
                None if policy.accept_new => {
                    policy.pinned.insert(name.clone(), fp);
                    true
                }
                None => {
                    tracing::warn!(%peer, guest = %name, "refusing guest with unpinned certificate {fp}: pin it or listen with --accept-new");
                    link.close(close_code::CERTIFICATE, "certificate not pinned");
                    return;
                }
            }
        };
        tracing::info!(%peer, guest = %name, "guest registered");
        let session = Arc::new(Session {
            link,
            info,
            version,
        });
        let fresh = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            match slots.get(&name) {
                Some(tx) => {
                    if let Some(old) = tx.borrow().as_ref() {
                        old.link
                            .close(close_code::REPLACED, "replaced by a newer connection");
                    }
                    tx.send_replace(Some(session.clone()));
                    None
                }
                None => {
                    let (tx, rx) = watch::channel(Some(session.clone()));
                    slots.insert(name.clone(), tx);
                    Some(rx)
                }
            }
        };
        if let Some(rx) = fresh {
            let env = Arc::new(Environment {
                name: name.clone(),
                source: Source::DialIn(rx),
                deadlines: self.deadlines.clone(),
                current: RwLock::new(Some(session)),
                reconnect: tokio::sync::Mutex::new(()),
            });
            let _ = self
                .arrivals
                .send(Arrival {
                    env,
                    fingerprint: fp,
                    newly_trusted,
                })
                .await;
        }
    }
}

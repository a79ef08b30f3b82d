//! The host's listener for guests that dial in (VMs behind NAT, emulators, phones on
//! Wi-Fi): it authenticates each guest by the certificate pinned for the name the guest
//! reports, and hands out one [`Environment`] per name that follows the guest across
//! reconnections.
//!
//! [`connect`] is how every host command reaches a `listen` entry of the envs file: one
//! listener per address is shared by the whole process (one UDP port serves every guest
//! that dials it), and the command waits for the guest of the name it wants.

use super::{ClientError, Deadlines, DialInSpec, Environment, Session, Source, handshake};
use pincer_shared::identity::{Fingerprint, Identity, IdentityError, Token};
use pincer_shared::transport::admission::{self, Limits, Live, Pending};
use pincer_shared::transport::{Link, TransportError, close_code, quic};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, watch};

/// Connection budgets: guests still in TLS, the handshake and the certificate check, and
/// registered guests. A peer that never authenticates holds a pending place for at most
/// the connect deadline, and only until newer connections need it.
const ADMISSION: Limits = Limits {
    pending: 64,
    live: 256,
};

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
    shared: Arc<Shared>,
    arrivals: tokio::sync::Mutex<mpsc::Receiver<Arrival>>,
}

impl Listener {
    /// Listens on `addr` presenting `identity`; guests must present a client certificate
    /// allowed by `policy`, and accept `token`. Each guest name that registers for the
    /// first time is announced through [`Listener::next`].
    pub fn bind(
        addr: SocketAddr,
        identity: &Identity,
        token: Token,
        policy: TrustPolicy,
        deadlines: Deadlines,
    ) -> Result<Self, TransportError> {
        Self::start(addr, identity, token, policy, deadlines, true)
    }

    fn start(
        addr: SocketAddr,
        identity: &Identity,
        token: Token,
        policy: TrustPolicy,
        deadlines: Deadlines,
        announce: bool,
    ) -> Result<Self, TransportError> {
        let cfg = quic::server_config(identity, true)?;
        let endpoint = quic::server_endpoint(addr, cfg, identity)?;
        let (tx, rx) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            token,
            policy: RwLock::new(policy),
            slots: Mutex::new(HashMap::new()),
            arrived: Notify::new(),
            arrivals: announce.then_some(tx),
            deadlines,
        });
        tokio::spawn(accept(endpoint.clone(), shared.clone()));
        Ok(Self {
            endpoint,
            fingerprint: identity.fingerprint(),
            shared,
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

    /// The guest named `name` as an environment once it is connected (at once if it is),
    /// or `None` if it does not arrive within `within`.
    async fn wait_for(self: &Arc<Self>, name: &str, within: Duration) -> Option<Environment> {
        let until = Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            // Registered before the check, so an arrival between the check and the wait
            // is not missed.
            arrived.as_mut().enable();
            if let Some(env) = self.environment(name) {
                return Some(env);
            }
            tokio::time::timeout_at(until.into(), arrived).await.ok()?;
        }
    }

    fn environment(self: &Arc<Self>, name: &str) -> Option<Environment> {
        let slots = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tx = slots.get(name)?;
        let session = tx.borrow().clone().filter(|s| !s.link.is_closed())?;
        Some(Environment {
            name: name.to_owned(),
            source: Source::DialIn {
                sessions: tx.subscribe(),
                _listener: Some(self.clone()),
            },
            deadlines: self.shared.deadlines.clone(),
            current: RwLock::new(Some(session)),
            reconnect: tokio::sync::Mutex::new(()),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Tell connected guests at once, so they redial the next host without waiting for
        // their keep-alive to find this one gone.
        self.endpoint
            .close(close_code::DONE.into(), b"host done listening");
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let endpoint = self.endpoint.clone();
            let mut closing = CLOSING.lock().unwrap_or_else(PoisonError::into_inner);
            closing.retain(|h| !h.is_finished());
            closing.push(rt.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
            }));
        }
    }
}

/// Closes of dropped listeners still being delivered to their guests.
static CLOSING: Mutex<Vec<tokio::task::JoinHandle<()>>> = Mutex::new(Vec::new());

/// Waits (up to a second) until every listener this process dropped has told its guests.
/// Call it before the process exits: otherwise the packets may never leave, and guests
/// that dialled in notice only at their next keep-alive.
pub async fn finish_closing() {
    let closing = std::mem::take(&mut *CLOSING.lock().unwrap_or_else(PoisonError::into_inner));
    for handle in closing {
        let _ = handle.await;
    }
}

/// The identity this host presents to guests that dial in, made on first use in the state
/// directory, so guests pin it once (`pincer-agent --host-fingerprint`).
pub fn host_identity() -> Result<Identity, IdentityError> {
    Identity::load_or_create(&host_state_dir(), "pincer-host").map(|(id, _)| id)
}

/// The token file `pincer env listen` uses unless given one.
pub fn default_token_file() -> PathBuf {
    host_state_dir().join("token")
}

fn host_state_dir() -> PathBuf {
    crate::paths::state_dir().join("host")
}

/// Listeners made by [`connect`], by address: every environment of this process that
/// listens on an address shares its listener.
static SHARED: Mutex<BTreeMap<SocketAddr, Weak<Listener>>> = Mutex::new(BTreeMap::new());

/// Connects to a guest that dials in: listens on `spec.listen` with this host's identity
/// (sharing the listener of other environments of this process there) and waits up to
/// `deadlines.dial_in` for the guest to arrive. `neighbours` are the other guests known to
/// dial the same address; they are pinned too, so they are not turned away meanwhile.
pub async fn connect(
    spec: &DialInSpec,
    neighbours: impl IntoIterator<Item = (String, Fingerprint)>,
    deadlines: Deadlines,
) -> Result<Environment, ClientError> {
    let waited = deadlines.dial_in;
    let listener = shared_listener(spec, deadlines)?;
    {
        let mut policy = listener
            .shared
            .policy
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        policy.pinned.insert(spec.name.clone(), spec.fingerprint);
        for (name, fp) in neighbours {
            policy.pinned.entry(name).or_insert(fp);
        }
    }
    listener
        .wait_for(&spec.name, waited)
        .await
        .ok_or_else(|| ClientError::NotDialledIn {
            env: spec.name.clone(),
            listen: spec.listen,
            waited,
            token_file: spec.token_file.clone(),
            host_fingerprint: Box::new(listener.fingerprint),
        })
}

fn shared_listener(spec: &DialInSpec, deadlines: Deadlines) -> Result<Arc<Listener>, ClientError> {
    let local = |message: String| ClientError::Local {
        env: spec.name.clone(),
        message,
    };
    let mut all = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    all.retain(|_, l| l.strong_count() > 0);
    if let Some(listener) = all.get(&spec.listen).and_then(Weak::upgrade) {
        if listener.shared.token.expose() != spec.token.expose() {
            return Err(local(format!(
                "{} holds another token than the other guests dialling {}: guests that dial one address share one token file",
                spec.token_file.display(),
                spec.listen
            )));
        }
        return Ok(listener);
    }
    let identity = host_identity().map_err(|e| local(format!("this host's identity: {e}")))?;
    let listener = Listener::start(
        spec.listen,
        &identity,
        spec.token.clone(),
        TrustPolicy::default(),
        deadlines,
        false,
    )
    .map_err(|e| ClientError::Listen {
        env: spec.name.clone(),
        addr: spec.listen,
        reason: e.to_string(),
    })?;
    let listener = Arc::new(listener);
    all.insert(spec.listen, Arc::downgrade(&listener));
    Ok(listener)
}

#[derive(Debug)]
struct Shared {
    token: Token,
    policy: RwLock<TrustPolicy>,
    slots: Slots,
    /// Signalled whenever a guest registers (first time or again).
    arrived: Notify,
    /// Where first registrations are announced, for [`Listener::next`].
    arrivals: Option<mpsc::Sender<Arrival>>,
    deadlines: Deadlines,
}

/// Accepts connections until the endpoint closes; each keeps its admission place while it
/// lives.
async fn accept(endpoint: quinn::Endpoint, shared: Arc<Shared>) {
    let limit = shared.deadlines.connect;
    let serve = move |link: Link, pending: Pending, _arrived| {
        let shared = shared.clone();
        async move {
            if let Some(_place) = shared.admit(link.clone(), pending).await {
                link.closed().await;
            }
        }
    };
    admission::accept(endpoint, ADMISSION, limit, "guest connection", serve).await;
}

impl Shared {
    /// Authenticates and registers a guest, and returns the place it holds while
    /// connected; `None` if it was turned away (counted in the admission summary).
    async fn admit(&self, link: Link, pending: Pending) -> Option<Live> {
        let peer = link.remote_addr();
        let Some(fp) = link.peer_fingerprint() else {
            link.close(close_code::CERTIFICATE, "client certificate required");
            pending.failed("presented no client certificate", "");
            return None;
        };
        let hs = tokio::time::timeout(
            self.deadlines.connect,
            handshake("(dialling guest)", &link, &self.token),
        )
        .await;
        let (info, version) = match hs {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                link.close(close_code::HANDSHAKE, "handshake failed");
                pending.failed("guest handshake failed", e);
                return None;
            }
            Err(_) => {
                link.close(close_code::HANDSHAKE, "handshake timed out");
                pending.failed("guest handshake timed out", "");
                return None;
            }
        };
        let name = info.name.clone();
        let newly_trusted = {
            let mut policy = self.policy.write().unwrap_or_else(PoisonError::into_inner);
            match policy.pinned.get(&name) {
                Some(pin) if pin.matches(&fp) => false,
                Some(pin) => {
                    link.close(close_code::CERTIFICATE, "certificate fingerprint mismatch");
                    pending.failed(
                        "refused: certificate fingerprint mismatch",
                        format_args!("guest '{name}': expected {pin}, got {fp}"),
                    );
                    return None;
                }
                None if policy.accept_new => {
                    policy.pinned.insert(name.clone(), fp);
                    true
                }
                None => {
                    link.close(close_code::CERTIFICATE, "certificate not pinned");
                    pending.failed(
                        "refusing guest with unpinned certificate",
                        format_args!("guest '{name}' presented {fp}: pin it in the envs file or listen with --accept-new"),
                    );
                    return None;
                }
            }
        };
        let place = match pending.authenticated() {
            Ok(place) => place,
            Err(why) => {
                link.close(close_code::BUSY, &why.to_string());
                return None;
            }
        };
        tracing::info!(%peer, guest = %name, "guest registered");
        let session = Arc::new(Session {
            link,
            info,
            version,
        });
        let fresh = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
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
        self.arrived.notify_waiters();
        if let (Some(rx), Some(arrivals)) = (fresh, &self.arrivals) {
            let env = Arc::new(Environment {
                name: name.clone(),
                source: Source::DialIn {
                    sessions: rx,
                    _listener: None,
                },
                deadlines: self.deadlines.clone(),
                current: RwLock::new(Some(session)),
                reconnect: tokio::sync::Mutex::new(()),
            });
            let _ = arrivals
                .send(Arrival {
                    env,
                    fingerprint: fp,
                    newly_trusted,
                })
                .await;
        }
        Some(place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_shared::codec;
    use pincer_shared::handshake::{ClientHello, GuestInfo};
    use pincer_shared::limits::MAX_HELLO;
    use pincer_shared::transport::stream::{finish, read_header, write_header};

    /// Dials `listener` from `ip` presenting `id`; the connection, once TLS is done.
    async fn dial_from(
        ip: [u8; 4],
        listener: &Listener,
        id: &Identity,
    ) -> (quinn::Endpoint, Result<Link, TransportError>) {
        let ep = quinn::Endpoint::client((ip, 0).into()).unwrap();
        let pin = quic::ServerPin::Pinned(listener.fingerprint());
        let (cfg, seen) =
            quic::client_config(listener.local_addr().unwrap(), pin, Some(id)).unwrap();
        let addr = listener.local_addr().unwrap();
        let conn = quic::connect(&ep, addr, cfg, &seen, pin).await;
        (ep, conn.map(Link::Quic))
    }

    /// Answers the host's hello as a guest named `name` would.
    async fn answer_hello(link: &Link, token: &Token, name: &str) {
        let (mut send, mut recv) = link.accept().await.unwrap();
        let header = read_header(&mut recv, MAX_HELLO).await.unwrap().unwrap();
        let hello: ClientHello = codec::decode(&header, 0).unwrap().msg;
        let info = GuestInfo {
            version: 0,
            name: name.into(),
            platform: pincer_shared::Platform::Linux,
            os: "test".into(),
            agent_version: "0".into(),
            screen: Default::default(),
            capabilities: vec![],
            read_only: true,
            pid: 1,
        };
        let exporter = link.exporter().unwrap();
        let (answer, _) = handshake::accept(&hello, token, &exporter, info);
        write_header(&mut send, &answer, 0, MAX_HELLO)
            .await
            .unwrap();
        finish(&mut send).await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_peers_make_room_for_guests() {
        let host = Identity::generate("host").unwrap();
        let guest = Identity::generate("guest").unwrap();
        let token = Token::generate();
        // Long enough that every silent connection is still waiting when the guest comes,
        // however slowly a loaded machine completes their handshakes (1 s was not, and 3 s
        // was not in a CI run beside other heavy tests).
        let deadlines = Deadlines {
            connect: Duration::from_secs(10),
            ..Default::default()
        };
        let policy = TrustPolicy {
            pinned: [("g".to_owned(), guest.fingerprint())].into(),
            accept_new: false,
        };
        let listener = Arc::new(
            Listener::bind(
                "127.0.0.1:0".parse().unwrap(),
                &host,
                token.clone(),
                policy,
                deadlines,
            )
            .unwrap(),
        );

        // One address fills the pending budget with connections that complete TLS and never
        // answer the hello.
        let stranger = Identity::generate("stranger").unwrap();
        let mut silent = Vec::new();
        for _ in 0..ADMISSION.pending {
            let (ep, link) = dial_from([127, 0, 0, 1], &listener, &stranger).await;
            silent.push((ep, link.expect("TLS completes")));
        }

        // A pinned guest from the same address registers meanwhile: the silent connection
        // that waited longest makes room.
        let (_guest_ep, link) = dial_from([127, 0, 0, 1], &listener, &guest).await;
        let link = link.unwrap();
        answer_hello(&link, &token, "g").await;
        let env = listener
            .wait_for("g", Duration::from_secs(5))
            .await
            .expect("the guest registers");
        assert_eq!(env.name(), "g");
        let (_, oldest) = silent.remove(0);
        let why = tokio::time::timeout(Duration::from_secs(5), oldest.closed())
            .await
            .expect("the oldest silent connection is pushed out");
        assert!(oldest.busy().is_some(), "{why}");

        // The others are shed after the connect deadline.
        for (_, link) in &silent {
            let why = tokio::time::timeout(Duration::from_secs(15), link.closed())
                .await
                .expect("a silent connection is closed");
            assert!(why.contains("handshake timed out"), "{why}");
        }
    }
}

//! Environments: typed, deadline-bounded calls on one guest over an authenticated QUIC
//! connection (over UDP, or tunnelled over TCP: [`Transport`]) that is re-established on
//! demand, plus the registry of named environments and the listener for guests that dial
//! in.
//!
//! Calls that only read (ping, observations, probes) are retried once on a fresh connection
//! if the old one died under them; actions and setup are not, because they may already have
//! happened, and fail with [`ClientError::ConnectionLost`] instead.

mod error;
mod input;
pub mod listener;
pub mod registry;
mod video;

pub use error::ClientError;
pub use input::InputStream;
pub use video::{VideoFrame, VideoStream};

use pincer_shared::action::Point;
use pincer_shared::codec;
use pincer_shared::handshake::{self, GuestInfo, HandshakeError};
use pincer_shared::identity::{Fingerprint, Token};
use pincer_shared::limits::{MAX_HELLO, MAX_REQUEST_HEADER, MAX_RESPONSE_HEADER};
use pincer_shared::observe::{ScreenInfo, ScreenshotMeta, ScreenshotRequest, TreeRequest};
use pincer_shared::probe::{FileStat, Probe, ProbeReply, WindowInfo};
use pincer_shared::setup::{ExecOutput, ExecRequest, Setup, WindowOp};
use pincer_shared::tool::ToolCall;
use pincer_shared::transport::stream::{finish, read_body, read_header, write_body, write_header};
use pincer_shared::transport::{Closed, Link, RecvHalf, TransportError, close_code, quic};
use pincer_shared::tree::UiTree;
use pincer_shared::{Action, ProtocolVersion, Request, RequestClass, Response, WireError};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Timeouts of an environment's calls.
#[derive(Debug, Clone)]
pub struct Deadlines {
    /// Dialling and handshaking.
    pub connect: Duration,
    /// Ping, actions, probes and small requests.
    pub call: Duration,
    /// Screenshots.
    pub screenshot: Duration,
    /// UI trees (big apps take a while).
    pub tree: Duration,
    /// File transfers.
    pub transfer: Duration,
    /// Added to an exec's own timeout.
    pub exec_margin: Duration,
    /// How long a call keeps trying to reconnect to a guest that went away (an agent
    /// restart takes well under a second; a guest gone for longer fails the call).
    pub reconnect: Duration,
    /// How long connecting waits for a guest that dials in (`listen` entries). A waiting
    /// guest redials every second or so; one whose last host vanished without closing
    /// notices at its next keep-alive, within 4 s.
    pub dial_in: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(3),
            call: Duration::from_secs(15),
            screenshot: Duration::from_secs(15),
            tree: Duration::from_secs(60),
            transfer: Duration::from_secs(300),
            exec_margin: Duration::from_secs(10),
            reconnect: Duration::from_secs(5),
            dial_in: Duration::from_secs(6),
        }
    }
}

/// How to reach a guest and how to know it is the right one.
#[derive(Debug, Clone)]
pub struct EnvSpec {
    /// Name used in messages and the registry.
    pub name: String,
    /// Where its agent listens.
    pub addr: SocketAddr,
    /// How QUIC's packets get there.
    pub transport: Transport,
    /// The pinned certificate; `None` trusts whatever is presented (first use only).
    pub fingerprint: Option<Fingerprint>,
    /// The token the guest expects.
    pub token: Token,
}

/// How QUIC's packets reach a guest's agent, which serves both on the same port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// As UDP datagrams: the fastest, where UDP passes.
    #[default]
    Udp,
    /// Tunnelled over one TCP connection (`pincer_shared::transport::tunnel`), for links
    /// that carry only TCP: QEMU's user networking with `restrict=on`, `adb forward`.
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        })
    }
}

impl std::str::FromStr for Transport {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            _ => Err(format!("'{s}' is not a transport: udp or tcp")),
        }
    }
}

/// How to reach a guest that dials in to this host (`pincer-agent --connect`).
#[derive(Debug, Clone)]
pub struct DialInSpec {
    /// Name the guest reports.
    pub name: String,
    /// Where this host listens for it.
    pub listen: SocketAddr,
    /// Its pinned certificate.
    pub fingerprint: Fingerprint,
    /// The token the guest expects.
    pub token: Token,
    /// Where that token is kept, for messages that tell how to start the guest.
    pub token_file: std::path::PathBuf,
}

/// A live, authenticated connection.
#[derive(Debug)]
struct Session {
    link: Link,
    info: GuestInfo,
    version: ProtocolVersion,
}

/// How a lost session comes back.
#[derive(Debug)]
enum Source {
    /// Dial the guest again, from this endpoint (one UDP socket or TCP tunnel per
    /// environment, owned by the runtime that made it).
    Dial(EnvSpec, quinn::Endpoint),
    /// Wait for the guest to dial our listener again. Environments made by
    /// [`listener::connect`] keep their (shared) listener open.
    DialIn {
        /// The guest's current session, replaced whenever it dials in again.
        sessions: tokio::sync::watch::Receiver<Option<Arc<Session>>>,
        /// Keeps the listener open while the environment lives.
        _listener: Option<Arc<listener::Listener>>,
    },
}

/// One guest: a desktop, VM or phone.
#[derive(Debug)]
pub struct Environment {
    name: String,
    source: Source,
    deadlines: Deadlines,
    current: RwLock<Option<Arc<Session>>>,
    reconnect: tokio::sync::Mutex<()>,
}

/// A screenshot as received.
#[derive(Debug, Clone)]
pub struct Screenshot {
    /// What the bytes are.
    pub meta: ScreenshotMeta,
    /// Encoded image (or raw pixels, possibly zstd-compressed).
    pub bytes: Vec<u8>,
}

impl Screenshot {
    /// Raw pixels as sent, with zstd removed if it was applied.
    pub fn raw_pixels(&self) -> Result<Vec<u8>, PixelsError> {
        match self.meta.format {
            pincer_shared::observe::ImageFormat::Raw { zstd: Some(_) } => {
                zstd::decode_all(&self.bytes[..]).map_err(PixelsError::Zstd)
            }
            pincer_shared::observe::ImageFormat::Raw { zstd: None } => Ok(self.bytes.clone()),
            other => Err(PixelsError::NotRaw(other)),
        }
    }
}

/// Why a screenshot's raw pixels cannot be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PixelsError {
    /// The screenshot is an encoded image, not raw pixels.
    #[error("a {0:?} screenshot holds no raw pixels: ask for the raw format")]
    NotRaw(pincer_shared::observe::ImageFormat),
    /// The zstd frame does not decode.
    #[error("the screenshot's zstd frame does not decode: {0}")]
    Zstd(std::io::Error),
}

fn client_endpoint(spec: &EnvSpec) -> Result<quinn::Endpoint, ClientError> {
    match spec.transport {
        Transport::Udp => quic::client_endpoint(spec.addr),
        Transport::Tcp => quic::client_endpoint_tcp(spec.addr),
    }
    .map_err(|e| ClientError::Local {
        env: spec.name.clone(),
        message: e.to_string(),
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}

/// Runs the host side of the handshake on a fresh link.
async fn handshake(
    name: &str,
    link: &Link,
    token: &Token,
) -> Result<(GuestInfo, ProtocolVersion), ClientError> {
    let local = |message: String| ClientError::Local {
        env: name.to_owned(),
        message,
    };
    let lost = |e: TransportError| ClientError::ConnectionLost {
        env: name.to_owned(),
        what: "handshake",
        reason: e.to_string(),
    };
    let exporter = link.exporter().map_err(|e| local(e.to_string()))?;
    let hello = handshake::client_hello(token, &host_name(), &exporter);
    let (mut send, mut recv) = link.open().await.map_err(lost)?;
    write_header(&mut send, &hello, 0, MAX_HELLO)
        .await
        .map_err(lost)?;
    finish(&mut send).await.map_err(lost)?;
    let header = read_header(&mut recv, MAX_HELLO)
        .await
        .map_err(lost)?
        .ok_or_else(|| ClientError::Protocol {
            env: name.to_owned(),
            message: "the guest closed the handshake stream without answering".into(),
        })?;
    handshake::read_reply(&header).map_err(|source| match source {
        // Bytes that are no answer: the protocol, not the handshake's outcome.
        HandshakeError::Malformed(e) => ClientError::Protocol {
            env: name.to_owned(),
            message: format!("bad handshake reply: {e}"),
        },
        source => ClientError::Handshake {
            env: name.to_owned(),
            source,
        },
    })
}

/// Dials and authenticates. Returns the session and the fingerprint the guest presented.
async fn dial(
    spec: &EnvSpec,
    endpoint: &quinn::Endpoint,
    deadlines: &Deadlines,
) -> Result<(Session, Fingerprint), ClientError> {
    let env = spec.name.clone();
    let unreachable = |reason: String| ClientError::Unreachable {
        env: env.clone(),
        addr: spec.addr,
        reason,
    };
    let busy = |reason: String| ClientError::Busy {
        env: env.clone(),
        addr: spec.addr,
        reason,
    };
    let pin = spec
        .fingerprint
        .map_or(quic::ServerPin::Any, quic::ServerPin::Pinned);
    let (cfg, seen) =
        quic::client_config(spec.addr, pin, None).map_err(|e| unreachable(e.to_string()))?;
    let conn = match tokio::time::timeout(
        deadlines.connect,
        quic::connect(endpoint, spec.addr, cfg, &seen, pin),
    )
    .await
    {
        Err(_) => {
            return Err(unreachable(format!(
                "no answer within {:?}",
                deadlines.connect
            )));
        }
        Ok(Err(TransportError::FingerprintMismatch { expected, got })) => {
            return Err(ClientError::FingerprintMismatch { env, expected, got });
        }
        Ok(Err(e)) => {
            return Err(match e.busy() {
                Some(reason) => busy(reason),
                None => unreachable(e.to_string()),
            });
        }
        Ok(Ok(c)) => c,
    };
    let link = Link::Quic(conn);
    let got = link
        .peer_fingerprint()
        .or_else(|| seen.get())
        .ok_or_else(|| unreachable("the guest presented no certificate".into()))?;
    let (info, version) =
        match tokio::time::timeout(deadlines.connect, handshake(&spec.name, &link, &spec.token))
            .await
        {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => return Err(link.busy().map_or(e, busy)),
            Err(_) => {
                return Err(unreachable(format!(
                    "no handshake answer within {:?}",
                    deadlines.connect
                )));
            }
        };
    Ok((
        Session {
            link,
            info,
            version,
        },
        got,
    ))
}

/// Most bytes moved at a time from a reply's body to a writer.
const COPY_BUFFER: usize = 256 * 1024;

/// First pause before dialling a busy guest again; it doubles up to [`BUSY_RETRY_MAX`].
/// A guest is busy while unauthenticated connections crowd it, which lasts as long as
/// their flood: retries must be quick to slip in between, and few.
const BUSY_RETRY_FIRST: Duration = Duration::from_millis(25);
/// Longest pause between dials of a busy guest.
const BUSY_RETRY_MAX: Duration = Duration::from_millis(400);

/// Dials and authenticates like [`dial`], dialling again while the guest is busy until the
/// connect deadline.
async fn dial_while_busy(
    spec: &EnvSpec,
    endpoint: &quinn::Endpoint,
    deadlines: &Deadlines,
) -> Result<(Session, Fingerprint), ClientError> {
    let until = Instant::now() + deadlines.connect;
    let mut pause = BUSY_RETRY_FIRST;
    loop {
        match dial(spec, endpoint, deadlines).await {
            Err(e @ ClientError::Busy { .. }) if Instant::now() + pause < until => {
                tracing::debug!(env = %spec.name, "{e}; dialling again in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(BUSY_RETRY_MAX);
            }
            done => return done,
        }
    }
}

impl Environment {
    /// Connects to a guest and authenticates; a busy guest is dialled again until the
    /// connect deadline.
    pub async fn connect(spec: EnvSpec, deadlines: Deadlines) -> Result<Self, ClientError> {
        let endpoint = client_endpoint(&spec)?;
        let (session, _) = dial_while_busy(&spec, &endpoint, &deadlines).await?;
        Ok(Self {
            name: spec.name.clone(),
            source: Source::Dial(spec, endpoint),
            deadlines,
            current: RwLock::new(Some(Arc::new(session))),
            reconnect: tokio::sync::Mutex::new(()),
        })
    }

    /// Connects without a pinned certificate and returns what the guest presented, for
    /// trust on first use (`pincer env add --trust`). Pin the result before using the
    /// environment for anything else.
    pub async fn probe_fingerprint(
        spec: &EnvSpec,
        deadlines: &Deadlines,
    ) -> Result<(Fingerprint, GuestInfo), ClientError> {
        let mut spec = spec.clone();
        spec.fingerprint = None;
        let endpoint = client_endpoint(&spec)?;
        let (session, fp) = dial_while_busy(&spec, &endpoint, deadlines).await?;
        session.link.close(0, "fingerprint probe done");
        Ok((fp, session.info))
    }

    /// The environment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How its packets travel. Guests that dial in always use UDP.
    pub fn transport(&self) -> Transport {
        match &self.source {
            Source::Dial(spec, _) => spec.transport,
            Source::DialIn { .. } => Transport::Udp,
        }
    }

    /// What the guest said about itself when the current connection was made.
    pub fn info(&self) -> Option<GuestInfo> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|s| s.info.clone())
    }

    /// Screen width and height as reported when the current connection was made.
    pub fn screen_size(&self) -> (u32, u32) {
        self.info()
            .map_or((0, 0), |i| (i.screen.width, i.screen.height))
    }

    /// The deadlines in force.
    pub fn deadlines(&self) -> &Deadlines {
        &self.deadlines
    }

    /// The live session, reconnecting (with backoff, until `until`) if it died.
    async fn session(&self, until: Instant) -> Result<Arc<Session>, ClientError> {
        if let Some(s) = self.live() {
            return Ok(s);
        }
        let _guard = self.reconnect.lock().await;
        if let Some(s) = self.live() {
            return Ok(s);
        }
        let until = until.min(Instant::now() + self.deadlines.reconnect);
        let mut backoff = Duration::from_millis(50);
        loop {
            let attempt = match &self.source {
                Source::Dial(spec, endpoint) => dial(spec, endpoint, &self.deadlines)
                    .await
                    .map(|(s, _)| Arc::new(s)),
                Source::DialIn { sessions, .. } => {
                    let mut rx = sessions.clone();
                    let wait = rx.wait_for(|s| s.as_ref().is_some_and(|s| !s.link.is_closed()));
                    match tokio::time::timeout_at(until.into(), wait).await {
                        Ok(Ok(s)) => Ok(s.clone().expect("checked by wait_for")),
                        _ => Err(ClientError::Unreachable {
                            env: self.name.clone(),
                            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                            reason: "the guest has not dialled back in".into(),
                        }),
                    }
                }
            };
            match attempt {
                Ok(s) => {
                    tracing::info!(env = %self.name, "connected");
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
                    return Ok(s);
                }
                // A wrong certificate or token will not fix itself: fail at once.
                Err(
                    e @ (ClientError::FingerprintMismatch { .. } | ClientError::Handshake { .. }),
                ) => return Err(e),
                Err(e) => {
                    if Instant::now() + backoff >= until {
                        return Err(e);
                    }
                    tracing::debug!(env = %self.name, "reconnect failed: {e}; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    fn live(&self) -> Option<Arc<Session>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|s| !s.link.is_closed())
            .cloned()
    }

    fn forget(&self, dead: &Arc<Session>) {
        let mut cur = self.current.write().unwrap_or_else(|e| e.into_inner());
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            *cur = None;
        }
    }

    /// Sends any request with an optional body and returns the reply and its body. Guest
    /// errors come back as [`ClientError::Guest`].
    pub async fn call(
        &self,
        req: &Request,
        body: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<(Response, Vec<u8>), ClientError> {
        let what = req.kind_name();
        let until = Instant::now() + deadline;
        let retry_safe = matches!(
            req.class(),
            RequestClass::Control | RequestClass::Observe | RequestClass::Probe
        );
        let run = async {
            let mut retried = false;
            loop {
                let session = self.session(until).await?;
                match exchange(&session.link, req, body).await {
                    Ok(r) => return Ok(r),
                    Err(Failure::Codec(message)) => {
                        return Err(ClientError::Protocol {
                            env: self.name.clone(),
                            message,
                        });
                    }
                    Err(Failure::Transport(e)) => {
                        // A stream can fail while the connection lives (the guest reset it);
                        // only a dead connection is worth a new one.
                        let dead = session.link.is_closed();
                        if dead {
                            self.forget(&session);
                        }
                        if dead && retry_safe && !retried {
                            retried = true;
                            continue;
                        }
                        return Err(ClientError::ConnectionLost {
                            env: self.name.clone(),
                            what,
                            reason: e.to_string(),
                        });
                    }
                }
            }
        };
        match tokio::time::timeout(deadline, run).await {
            Err(_) => Err(ClientError::Timeout {
                env: self.name.clone(),
                what,
                after: deadline,
            }),
            Ok(Err(e)) => Err(e),
            Ok(Ok((Response::Error(source), _))) => Err(ClientError::Guest {
                env: self.name.clone(),
                source,
            }),
            Ok(Ok(r)) => Ok(r),
        }
    }

    fn unexpected(&self, what: &str, got: &Response) -> ClientError {
        ClientError::Protocol {
            env: self.name.clone(),
            message: format!("unexpected reply to {what}: {got:?}"),
        }
    }

    /// Round trip of an empty request.
    pub async fn ping(&self) -> Result<Duration, ClientError> {
        let t = Instant::now();
        match self.call(&Request::Ping, None, self.deadlines.call).await? {
            (Response::Pong { .. }, _) => Ok(t.elapsed()),
            (r, _) => Err(self.unexpected("ping", &r)),
        }
    }

    /// Injects one action.
    pub async fn act(&self, action: Action) -> Result<(), ClientError> {
        match self
            .call(&Request::Action(action), None, self.deadlines.call)
            .await?
        {
            (Response::Done, _) => Ok(()),
            (r, _) => Err(self.unexpected("action", &r)),
        }
    }

    /// Takes a screenshot.
    pub async fn screenshot(&self, req: ScreenshotRequest) -> Result<Screenshot, ClientError> {
        match self
            .call(&Request::Screenshot(req), None, self.deadlines.screenshot)
            .await?
        {
            (Response::Screenshot(meta), bytes) => Ok(Screenshot { meta, bytes }),
            (r, _) => Err(self.unexpected("screenshot", &r)),
        }
    }

    /// Walks the accessibility tree.
    pub async fn tree(&self, req: TreeRequest) -> Result<UiTree, ClientError> {
        match self
            .call(&Request::UiTree(req), None, self.deadlines.tree)
            .await?
        {
            (Response::UiTree(t), _) => Ok(t),
            (r, _) => Err(self.unexpected("ui-tree", &r)),
        }
    }

    /// Screen geometry now.
    pub async fn screen_info(&self) -> Result<ScreenInfo, ClientError> {
        match self
            .call(&Request::ScreenInfo, None, self.deadlines.call)
            .await?
        {
            (Response::ScreenInfo(s), _) => Ok(s),
            (r, _) => Err(self.unexpected("screen-info", &r)),
        }
    }

    /// Pointer position.
    pub async fn cursor(&self) -> Result<Point, ClientError> {
        match self
            .call(&Request::Cursor, None, self.deadlines.call)
            .await?
        {
            (Response::Cursor(p), _) => Ok(p),
            (r, _) => Err(self.unexpected("cursor", &r)),
        }
    }

    /// Runs one probe.
    pub async fn probe(&self, probe: Probe) -> Result<ProbeReply, ClientError> {
        let deadline = self.probe_deadline(std::slice::from_ref(&probe));
        match self.call(&Request::Probe(probe), None, deadline).await? {
            (Response::Probe(p), _) => Ok(p),
            (r, _) => Err(self.unexpected("probe", &r)),
        }
    }

    /// Runs many probes in one round trip; each has its own result.
    pub async fn batch(
        &self,
        probes: impl Into<Arc<[Probe]>>,
    ) -> Result<Vec<Result<ProbeReply, WireError>>, ClientError> {
        let probes: Arc<[Probe]> = probes.into();
        let n = probes.len();
        let deadline = self.probe_deadline(&probes);
        match self.call(&Request::Batch(probes), None, deadline).await? {
            (Response::Batch(r), _) if r.len() == n => Ok(r),
            (r, _) => Err(self.unexpected("batch", &r)),
        }
    }

    fn probe_deadline(&self, probes: &[Probe]) -> Duration {
        let longest_command = probes
            .iter()
            .filter_map(|p| match p {
                Probe::Command { timeout_ms, .. } => Some(Duration::from_millis(*timeout_ms)),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        self.deadlines
            .call
            .max(longest_command + self.deadlines.exec_margin)
    }

    /// Reads a whole file through the bulk path.
    pub async fn read_file(&self, path: &str) -> Result<(FileStat, Vec<u8>), ClientError> {
        let req = Request::ReadFile {
            path: path.into(),
            offset: 0,
            max_len: None,
        };
        match self.call(&req, None, self.deadlines.transfer).await? {
            (Response::File { stat, .. }, bytes) => Ok((stat, bytes)),
            (r, _) => Err(self.unexpected("read-file", &r)),
        }
    }

    /// Reads a whole file through the bulk path into the writer `open` makes once the guest
    /// has answered (so a refusal leaves nothing behind), as the bytes arrive: no copy of
    /// the file is held in memory, and writing it overlaps the transfer. Returns what the
    /// guest said of the file and the bytes written. Unlike the other reads it is not
    /// repeated on a new connection if the old one dies part way, as part of it is written.
    pub async fn read_file_to<W: AsyncWrite + Unpin>(
        &self,
        path: &str,
        open: impl AsyncFnOnce() -> std::io::Result<W>,
    ) -> Result<(FileStat, u64), ClientError> {
        let req = Request::ReadFile {
            path: path.into(),
            offset: 0,
            max_len: None,
        };
        let what = req.kind_name();
        let deadline = self.deadlines.transfer;
        let local = |message: String| ClientError::Local {
            env: self.name.clone(),
            message,
        };
        let run = async {
            let session = self.session(Instant::now() + deadline).await?;
            let lost = |e: TransportError| {
                if session.link.is_closed() {
                    self.forget(&session);
                }
                ClientError::ConnectionLost {
                    env: self.name.clone(),
                    what,
                    reason: e.to_string(),
                }
            };
            let (frame, mut recv) = match request(&session.link, &req, None).await {
                Ok(r) => r,
                Err(Failure::Transport(e)) => return Err(lost(e)),
                Err(Failure::Codec(message)) => {
                    return Err(ClientError::Protocol {
                        env: self.name.clone(),
                        message,
                    });
                }
            };
            let stat = match frame.msg {
                Response::File { stat, .. } => stat,
                Response::Error(source) => {
                    return Err(ClientError::Guest {
                        env: self.name.clone(),
                        source,
                    });
                }
                other => return Err(self.unexpected(what, &other)),
            };
            let mut dest = open()
                .await
                .map_err(|e| local(format!("cannot write what {path} holds: {e}")))?;
            let mut buf = vec![0u8; COPY_BUFFER.min(frame.body_len as usize)];
            let mut left = frame.body_len;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = recv
                    .read(&mut buf[..want])
                    .await
                    .map_err(|e| lost(TransportError::Read(e.to_string())))?;
                if n == 0 {
                    return Err(lost(TransportError::Truncated));
                }
                dest.write_all(&buf[..n])
                    .await
                    .map_err(|e| local(format!("writing what {path} holds: {e}")))?;
                left -= n as u64;
            }
            dest.flush()
                .await
                .map_err(|e| local(format!("writing what {path} holds: {e}")))?;
            Ok((stat, frame.body_len))
        };
        tokio::time::timeout(deadline, run)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    env: self.name.clone(),
                    what,
                    after: deadline,
                })
            })
    }

    /// Writes a file (replacing it atomically), creating parent directories.
    pub async fn write_file(&self, path: &str, bytes: &[u8], mode: u32) -> Result<(), ClientError> {
        let req = Request::Setup(Setup::WriteFile {
            path: path.into(),
            mode,
            create_dirs: true,
            append: false,
        });
        self.setup_done(&req, Some(bytes), self.deadlines.transfer)
            .await
    }

    /// Removes a file or directory tree; missing paths are fine.
    pub async fn remove(&self, path: &str) -> Result<(), ClientError> {
        let req = Request::Setup(Setup::Remove {
            path: path.into(),
            recursive: true,
        });
        self.setup_done(&req, None, self.deadlines.call).await
    }

    /// Creates a directory and its parents.
    pub async fn make_dir(&self, path: &str) -> Result<(), ClientError> {
        let req = Request::Setup(Setup::MakeDir { path: path.into() });
        self.setup_done(&req, None, self.deadlines.call).await
    }

    /// Puts text on the clipboard.
    pub async fn set_clipboard(&self, text: &str) -> Result<(), ClientError> {
        let req = Request::Setup(Setup::SetClipboard { text: text.into() });
        self.setup_done(&req, None, self.deadlines.call).await
    }

    async fn setup_done(
        &self,
        req: &Request,
        body: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<(), ClientError> {
        match self.call(req, body, deadline).await? {
            (Response::Done, _) => Ok(()),
            (r, _) => Err(self.unexpected(req.kind_name(), &r)),
        }
    }

    /// Runs a program to completion.
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ClientError> {
        let deadline = Duration::from_millis(req.timeout_ms) + self.deadlines.exec_margin;
        match self
            .call(&Request::Setup(Setup::Exec(req)), None, deadline)
            .await?
        {
            (Response::Exec(o), _) => Ok(o),
            (r, _) => Err(self.unexpected("exec", &r)),
        }
    }

    /// Runs a task's API tool with the agent's typed arguments in the guest's sandbox (the
    /// tool class: the guest must have been started with `--allow-tools`). Never retried:
    /// the tool may have run.
    pub async fn tool(&self, call: ToolCall) -> Result<ExecOutput, ClientError> {
        let deadline = Duration::from_millis(call.spec.timeout_ms) + self.deadlines.exec_margin;
        match self
            .call(&Request::Tool(Box::new(call)), None, deadline)
            .await?
        {
            (Response::Exec(o), _) => Ok(o),
            (r, _) => Err(self.unexpected("tool", &r)),
        }
    }

    /// Starts a program detached; returns its pid.
    pub async fn launch(
        &self,
        argv: Vec<String>,
        env: Vec<(String, String)>,
    ) -> Result<u32, ClientError> {
        let req = Request::Setup(Setup::Launch {
            argv,
            cwd: None,
            env,
        });
        match self.call(&req, None, self.deadlines.call).await? {
            (Response::Launched { pid }, _) => Ok(pid),
            (r, _) => Err(self.unexpected("launch", &r)),
        }
    }

    /// Open top-level windows, bottom to top.
    pub async fn windows(&self) -> Result<Vec<WindowInfo>, ClientError> {
        match self.probe(Probe::Windows).await? {
            ProbeReply::Windows(w) => Ok(w),
            other => Err(self.unexpected("windows", &Response::Probe(other))),
        }
    }

    /// Activates, maximizes, restores, minimizes, closes or moves a window; returns once
    /// the change is visible.
    pub async fn window(&self, id: u64, op: WindowOp) -> Result<(), ClientError> {
        let req = Request::Setup(Setup::Window { id, op });
        self.setup_done(&req, None, self.deadlines.call).await
    }

    /// Closes the connection.
    pub fn close(&self) {
        if let Some(s) = self.live() {
            s.link.close(close_code::DONE, "host done");
        }
    }

    /// The protocol version of the current connection.
    pub fn version(&self) -> Option<ProtocolVersion> {
        self.live().map(|s| s.version)
    }
}

impl Drop for Environment {
    fn drop(&mut self) {
        // Tell a guest this host dialled at once, so it frees the host's place rather than
        // keeping it until its idle timeout: one-shot commands that never said goodbye would
        // fill its 64 places within 20 s. (A guest that dialled in belongs to its listener.)
        if let (Source::Dial(..), Some(s)) = (&self.source, self.live()) {
            let closed = s.link.close_telling(close_code::DONE, "host done");
            CLOSING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(closed);
        }
    }
}

/// Connections closed by dropped environments, whose guests may not have been told yet.
static CLOSING: Mutex<Vec<Closed>> = Mutex::new(Vec::new());

/// Waits (a little) until the guests of every environment this process dropped have been
/// told. Call it before the process exits.
pub async fn finish_closing() {
    let closing = std::mem::take(&mut *CLOSING.lock().unwrap_or_else(PoisonError::into_inner));
    for closed in closing {
        closed.told(Duration::from_millis(100)).await;
    }
}

/// Why one exchange failed.
enum Failure {
    Transport(TransportError),
    Codec(String),
}

/// [`request`], with the reply's body read into memory.
async fn exchange(
    link: &Link,
    req: &Request,
    body: Option<&[u8]>,
) -> Result<(Response, Vec<u8>), Failure> {
    let (frame, mut recv) = request(link, req, body).await?;
    let bytes = if frame.body_len > 0 {
        read_body(&mut recv, frame.body_len)
            .await
            .map_err(Failure::Transport)?
    } else {
        Vec::new()
    };
    Ok((frame.msg, bytes))
}

/// One request on a fresh stream: header and body out, reply header in; the reply's body is
/// left on the stream returned. If the guest refuses early and stops reading our body, its
/// reply is still read.
async fn request(
    link: &Link,
    req: &Request,
    body: Option<&[u8]>,
) -> Result<(codec::Frame<Response>, RecvHalf), Failure> {
    let (mut send, mut recv) = link.open().await.map_err(Failure::Transport)?;
    let body_len = body.map_or(0, |b| b.len() as u64);
    let sent = async {
        write_header(&mut send, req, body_len, MAX_REQUEST_HEADER).await?;
        if let Some(b) = body {
            write_body(&mut send, b).await?;
        }
        finish(&mut send).await
    }
    .await;
    if let Err(TransportError::Codec(e)) = sent {
        return Err(Failure::Codec(e.to_string()));
    }
    let header = match read_header(&mut recv, MAX_RESPONSE_HEADER).await {
        Ok(Some(h)) => h,
        Ok(None) => {
            return Err(Failure::Transport(
                sent.err().unwrap_or(TransportError::Truncated),
            ));
        }
        Err(TransportError::Codec(e)) => return Err(Failure::Codec(e.to_string())),
        Err(e) => return Err(Failure::Transport(sent.err().unwrap_or(e))),
    };
    let frame = codec::decode_response(&header).map_err(|e| Failure::Codec(e.to_string()))?;
    Ok((frame, recv))
}

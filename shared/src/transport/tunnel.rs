//! QUIC over TCP, for links that carry only TCP: QEMU's user-mode networking with
//! `restrict=on` forwards a host port to the guest but drops every UDP packet the guest
//! sends, and a phone on USB is reachable only through `adb forward`. A virtual UDP socket
//! (quinn's [`AsyncUdpSocket`]) carries QUIC's datagrams as frames on TCP connections, so
//! everything above the socket (TLS 1.3, pinned certificates, the token proof, streams,
//! admission) is the same as over UDP.
//!
//! Wire format. The side that dials sends the 8 bytes of [`PREAMBLE`] first. Then both
//! directions carry frames: a big-endian `u16` length and that many bytes of one QUIC
//! datagram, 1 to [`MAX_DATAGRAM`] bytes. A connection that starts with anything else, or
//! carries a frame of length 0 or above the maximum, is closed; only that connection.
//!
//! The host side ([`ClientSocket`]) has one peer, the TCP address. It connects on its first
//! datagram and again on the first one after its connection broke (an agent restart, a VM
//! reset), with backoff while connecting fails. Datagrams that meet a full queue or a
//! broken connection are dropped, as a lossy UDP path would drop them: QUIC retransmits,
//! and its congestion control backs off. When only the TCP connection broke and the agent
//! lives on, its QUIC connections carry on: the new TCP connection comes from a new port,
//! which QUIC takes for a migration. A connection that goes silent (frames sent, none back
//! for [`SILENT_PEER`]) is taken for broken the same way: its peer may have vanished
//! without a FIN.
//!
//! The guest side ([`ServerSocket`]) serves the UDP socket and a TCP listener on the same
//! address and port as one socket. Each accepted TCP connection is one QUIC peer, whose
//! address is the TCP peer's written in the IP family the UDP socket never reports
//! (`[::ffff:a.b.c.d]:port` beside an IPv4 socket), so the two never mix up and admission
//! still counts a flood by its source. Tunnels are cheap to open and hold no QUIC state,
//! so their budget works like admission's: at most [`MAX_TUNNELS`], and a newcomer beyond
//! it closes, among the tunnels of the address holding the most, the one the guest has
//! sent nothing to for longest. A host's tunnel carries its connection's packets every few
//! seconds (keep-alives at least) while a flood's sit idle, so a flood of TCP connections
//! makes room for real hosts instead of locking them out.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

/// What the dialling side sends first: names the protocol and its version, so a stray
/// connection (a port scanner, an HTTP client) is told apart from a tunnel at once.
pub const PREAMBLE: [u8; 8] = *b"pincerT1";
/// Largest datagram a frame carries: the largest UDP payload QUIC allows (RFC 9000,
/// `max_udp_payload_size`). pincer's datagrams are at most about 1500 bytes; longer frames
/// can only be garbage.
pub const MAX_DATAGRAM: usize = 65527;
/// Most tunnels a guest keeps open at once.
pub const MAX_TUNNELS: usize = 64;
/// How long an accepted connection may take to send the preamble.
const PREAMBLE_WITHIN: Duration = Duration::from_secs(3);
/// How long the host waits for a TCP connection to be accepted.
const CONNECT_WITHIN: Duration = Duration::from_secs(3);
/// First pause after a failed connection before the next attempt; it doubles up to
/// [`RECONNECT_MAX`]. Forwarders (QEMU, adb) accept the TCP connection and close it at once
/// when nothing listens behind them, so a connection that closed without carrying a frame
/// back counts as failed too.
const RECONNECT_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between connection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// Datagrams queued for one TCP connection before new ones are dropped. Enough to keep a
/// connection busy between two wake-ups of its writer; more would only add delay that
/// QUIC's congestion control sees late.
const SEND_QUEUE: usize = 512;
/// Bytes of frames gathered into one write: tens of datagrams per system call when they
/// come in bursts.
const WRITE_BUFFER: usize = 64 * 1024;
/// Datagrams received and not yet taken by the QUIC endpoint; a full queue makes the
/// readers wait, which pushes back through TCP.
const RECV_QUEUE: usize = 1024;
/// How long the host's tunnel waits for any frame back after it sent one before it takes
/// the TCP peer for gone and dials again on the next datagram. A live guest answers within
/// a round trip (QUIC acknowledges, and its keep-alives every 4 s get one), but a peer that
/// vanished without a FIN or reset (a phone unplugged behind `adb forward`, a VM's forward
/// that went stale) leaves the connection open and silent, and QUIC's packets would go
/// into it until QUIC's own idle timeout (20 s) ended every connection. Dialling again
/// lets the connections carry on through a new tunnel when the guest is still there.
pub const SILENT_PEER: Duration = Duration::from_secs(4);

/// What is wrong with what a peer sent on a tunnel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TunnelError {
    /// The connection did not start with [`PREAMBLE`].
    #[error("not a pincer tunnel: it began with {0:02x?}")]
    Preamble([u8; 8]),
    /// No preamble came in time.
    #[error("no preamble within {0:?}")]
    NoPreamble(Duration),
    /// A frame announced no datagram.
    #[error("a frame of length 0")]
    EmptyFrame,
    /// A frame announced more than [`MAX_DATAGRAM`] bytes.
    #[error("a frame of {0} bytes (at most {MAX_DATAGRAM})")]
    FrameTooLong(usize),
    /// The connection ended in the middle of the preamble or a frame.
    #[error("the connection ended mid-frame")]
    Truncated,
    /// Frames went out and none came back for this long.
    #[error("no frame back within {0:?} of sending one: the peer is taken for gone")]
    Silent(Duration),
    /// Reading or writing the connection failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One datagram as a frame, or `None` for a length no frame can carry.
pub fn encode_frame(datagram: &[u8]) -> Option<Bytes> {
    let len = u16::try_from(datagram.len())
        .ok()
        .filter(|n| *n > 0 && usize::from(*n) <= MAX_DATAGRAM)?;
    let mut frame = BytesMut::with_capacity(2 + datagram.len());
    frame.put_u16(len);
    frame.put_slice(datagram);
    Some(frame.freeze())
}

/// Takes the next whole frame's datagram off the front of `buf`; `None` until one is
/// there. Never trusts the length for more than [`MAX_DATAGRAM`] bytes of room.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Bytes>, TunnelError> {
    let Some(prefix) = buf.get(..2) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
    if len == 0 {
        return Err(TunnelError::EmptyFrame);
    }
    if len > MAX_DATAGRAM {
        return Err(TunnelError::FrameTooLong(len));
    }
    if buf.len() < 2 + len {
        buf.reserve(2 + len - buf.len());
        return Ok(None);
    }
    buf.advance(2);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Checks the start of a connection: `Ok(false)` while fewer bytes than the preamble have
/// arrived, an error as soon as they differ from it (then nothing more is read).
fn check_preamble(start: &[u8]) -> Result<bool, TunnelError> {
    let n = start.len().min(PREAMBLE.len());
    if start[..n] != PREAMBLE[..n] {
        let mut got = [0u8; 8];
        got[..n].copy_from_slice(&start[..n]);
        return Err(TunnelError::Preamble(got));
    }
    Ok(n == PREAMBLE.len())
}

/// The datagrams of a transmit: one, or several of `segment_size` bytes (the last may be
/// shorter) when quinn batches them for UDP segmentation offload.
fn datagrams<'a>(t: &Transmit<'a>) -> impl Iterator<Item = &'a [u8]> {
    let size = t.segment_size.unwrap_or(t.contents.len()).max(1);
    t.contents.chunks(size)
}

/// Reads frames from `r` into `buf` and hands each datagram to `deliver`, until the
/// connection ends or sends garbage (an error), or `deliver` returns `false` (the socket is
/// gone: `Ok`).
async fn read_frames<F, Fut>(
    r: &mut OwnedReadHalf,
    mut buf: BytesMut,
    mut deliver: F,
) -> Result<(), TunnelError>
where
    F: FnMut(Bytes) -> Fut,
    Fut: Future<Output = bool>,
{
    loop {
        while let Some(datagram) = decode_frame(&mut buf)? {
            if !deliver(datagram).await {
                return Ok(());
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        if r.read_buf(&mut buf).await? == 0 {
            return if buf.is_empty() {
                Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed it").into())
            } else {
                Err(TunnelError::Truncated)
            };
        }
    }
}

/// Writes the frames queued on `queue` to `w`, flushing whenever the queue runs dry, until
/// the queue closes (`Ok`) or writing fails; `sent` is told of each frame.
async fn write_frames(
    w: &mut BufWriter<OwnedWriteHalf>,
    queue: &mut mpsc::Receiver<Bytes>,
    mut sent: impl FnMut(),
) -> Result<(), TunnelError> {
    loop {
        let frame = match queue.try_recv() {
            Ok(frame) => frame,
            Err(mpsc::error::TryRecvError::Empty) => {
                w.flush().await?;
                match queue.recv().await {
                    Some(frame) => frame,
                    None => return Ok(()),
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return Ok(()),
        };
        w.write_all(&frame).await?;
        sent();
    }
}

/// Copies received datagrams into quinn's buffers: as many as are waiting, at least one
/// (else `Pending`, with the waker registered). `Ready(None)` once no sender is left.
fn fill<T>(
    queue: &mut mpsc::Receiver<T>,
    cx: &mut Context,
    bufs: &mut [IoSliceMut<'_>],
    meta: &mut [RecvMeta],
    datagram: impl Fn(&T) -> (SocketAddr, &[u8]),
) -> Poll<Option<usize>> {
    let mut n = 0;
    while n < bufs.len().min(meta.len()) {
        let item = if n == 0 {
            match queue.poll_recv(cx) {
                Poll::Ready(Some(item)) => item,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        } else {
            match queue.try_recv() {
                Ok(item) => item,
                Err(_) => break,
            }
        };
        let (from, bytes) = datagram(&item);
        // quinn's buffers hold its largest datagram; a longer one is dropped, as a UDP
        // socket would truncate it.
        let Some(dest) = bufs[n].get_mut(..bytes.len()) else {
            continue;
        };
        dest.copy_from_slice(bytes);
        meta[n] = RecvMeta {
            addr: from,
            len: bytes.len(),
            stride: bytes.len(),
            ecn: None,
            dst_ip: None,
        };
        n += 1;
    }
    Poll::Ready(Some(n))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A task that ends when its owner is dropped.
#[derive(Debug)]
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The tunnel never makes quinn wait: a full queue drops datagrams instead.
#[derive(Debug)]
struct AlwaysWritable;

impl UdpPoller for AlwaysWritable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The host's side: a virtual UDP socket whose one peer is a guest's TCP address, one for
/// each environment that dials over TCP (`quic::client_endpoint_tcp`). Its task, and the
/// TCP connection, end when quinn drops the socket (the endpoint and its connections are
/// gone).
#[derive(Debug)]
pub struct ClientSocket {
    peer: SocketAddr,
    /// Frames for the connection task to write.
    outgoing: mpsc::Sender<Bytes>,
    /// Datagrams the connection task read.
    incoming: Mutex<mpsc::Receiver<Bytes>>,
    _task: AbortOnDrop,
}

impl ClientSocket {
    /// A socket that tunnels to `peer`; it connects on the first datagram. Must be called
    /// within a tokio runtime.
    pub fn new(peer: SocketAddr) -> Arc<Self> {
        let (outgoing, out_rx) = mpsc::channel(SEND_QUEUE);
        let (in_tx, incoming) = mpsc::channel(RECV_QUEUE);
        let task = tokio::spawn(dial(peer, out_rx, in_tx));
        Arc::new(Self {
            peer,
            outgoing,
            incoming: Mutex::new(incoming),
            _task: AbortOnDrop(task.abort_handle()),
        })
    }
}

impl AsyncUdpSocket for ClientSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(AlwaysWritable)
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        // There is no one else to send to; a full queue drops, like a lossy path.
        if t.destination == self.peer {
            for frame in datagrams(t).filter_map(encode_frame) {
                let _ = self.outgoing.try_send(frame);
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let peer = self.peer;
        let mut incoming = lock(&self.incoming);
        match fill(&mut incoming, cx, bufs, meta, |d| (peer, &d[..])) {
            Poll::Ready(Some(n)) => Poll::Ready(Ok(n)),
            // The task lives as long as the socket; it can only have panicked.
            Poll::Ready(None) => Poll::Ready(Err(io::Error::other("the tunnel task ended"))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        // No UDP port: the unspecified address of the peer's family, so quinn dials the
        // peer's address as given.
        Ok(match self.peer {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        })
    }

    fn may_fragment(&self) -> bool {
        false
    }
}

/// The host's connection task: connects on demand and carries frames both ways until the
/// socket is dropped.
async fn dial(
    peer: SocketAddr,
    mut outgoing: mpsc::Receiver<Bytes>,
    incoming: mpsc::Sender<Bytes>,
) {
    let mut pause = RECONNECT_FIRST;
    let mut not_before = Instant::now();
    while let Some(first) = outgoing.recv().await {
        if Instant::now() < not_before {
            continue;
        }
        let heard = match tokio::time::timeout(CONNECT_WITHIN, TcpStream::connect(peer)).await {
            Ok(Ok(tcp)) => {
                tracing::debug!(%peer, "tunnel connected");
                let mut heard = false;
                let why = carry(tcp, first, &mut outgoing, &incoming, &mut heard).await;
                match why {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(%peer, "tunnel closed: {e}"),
                }
                heard
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, "tunnel connect failed: {e}");
                false
            }
            Err(_) => {
                tracing::debug!(%peer, "tunnel connect: no answer within {CONNECT_WITHIN:?}");
                false
            }
        };
        if heard {
            pause = RECONNECT_FIRST;
            not_before = Instant::now();
        } else {
            not_before = Instant::now() + pause;
            pause = (pause * 2).min(RECONNECT_MAX);
        }
    }
}

/// Carries one TCP connection: the preamble and `first`, then frames both ways. `Ok` when
/// the socket is gone, an error when the connection broke; `heard` says whether a frame
/// came back.
async fn carry(
    tcp: TcpStream,
    first: Bytes,
    outgoing: &mut mpsc::Receiver<Bytes>,
    incoming: &mpsc::Sender<Bytes>,
    heard: &mut bool,
) -> Result<(), TunnelError> {
    // Datagrams are small and each one matters now: no Nagle delay.
    tcp.set_nodelay(true)?;
    let (mut r, w) = tcp.into_split();
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, w);
    let silence = Silence::default();
    let write = async {
        w.write_all(&PREAMBLE).await?;
        w.write_all(&first).await?;
        silence.sent();
        write_frames(&mut w, outgoing, || silence.sent()).await
    };
    let read = read_frames(&mut r, BytesMut::new(), |d| {
        *heard = true;
        silence.heard();
        async move { incoming.send(d).await.is_ok() }
    });
    let watch = async {
        loop {
            tokio::time::sleep(SILENT_PEER / 8).await;
            if silence.longer_than(SILENT_PEER) {
                return Err(TunnelError::Silent(SILENT_PEER));
            }
        }
    };
    tokio::select! {
        r = write => r,
        r = read => r,
        r = watch => r,
    }
}

/// Since when the frames a tunnel sent have gone unanswered, if they have.
#[derive(Debug)]
struct Silence {
    start: Instant,
    /// Milliseconds from `start` to the first frame sent since the last one heard;
    /// [`u64::MAX`] while every frame sent has been answered.
    since_ms: std::sync::atomic::AtomicU64,
}

impl Default for Silence {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            since_ms: u64::MAX.into(),
        }
    }
}

impl Silence {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// A frame went out: the silence starts now unless it already had.
    fn sent(&self) {
        let _ = self.since_ms.compare_exchange(
            u64::MAX,
            self.now_ms(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A frame came back: everything sent so far counts as answered.
    fn heard(&self) {
        self.since_ms.store(u64::MAX, Ordering::Relaxed);
    }

    /// Whether frames have gone unanswered for longer than `limit`.
    fn longer_than(&self, limit: Duration) -> bool {
        let since = self.since_ms.load(Ordering::Relaxed);
        since != u64::MAX && self.now_ms().saturating_sub(since) > limit.as_millis() as u64
    }
}

/// The TCP address a tunnel's datagrams are said to come from, chosen so that no UDP peer
/// can have it: the TCP peer's address in the family the UDP socket (bound to
/// `udp_local`) never reports. An IPv4 socket reports only IPv4 addresses, so a tunnel from
/// `a.b.c.d:p` is `[::ffff:a.b.c.d]:p`; an IPv6 socket reports only IPv6 ones (IPv4 peers
/// mapped), so a tunnel from an IPv4 peer is plain `a.b.c.d:p`. A tunnel from a real IPv6
/// address on an IPv6 socket keeps that address: only the same host's UDP socket on the
/// same port number could share it. The port and IP are the peer's, so admission still
/// counts connections by where they come from.
fn tunnel_peer(tcp_peer: SocketAddr, udp_local: SocketAddr) -> SocketAddr {
    let port = tcp_peer.port();
    match (udp_local, tcp_peer.ip().to_canonical()) {
        (SocketAddr::V4(_), IpAddr::V4(ip)) => {
            SocketAddrV6::new(ip.to_ipv6_mapped(), port, 0, 0).into()
        }
        (_, IpAddr::V4(ip)) => SocketAddrV4::new(ip, port).into(),
        (_, IpAddr::V6(ip)) => SocketAddrV6::new(ip, port, 0, 0).into(),
    }
}

/// The guest's side: a UDP socket and the tunnels accepted on a TCP listener on the same
/// address and port, as one socket for one QUIC endpoint. UDP keeps its offloads (GSO, GRO,
/// ECN). The listener and every tunnel end when quinn drops the socket.
#[derive(Debug)]
pub struct ServerSocket {
    udp: Arc<dyn AsyncUdpSocket>,
    local: SocketAddr,
    tunnels: Arc<Mutex<Roster<Tunnel>>>,
    /// Datagrams read from every tunnel, with the tunnel's address.
    incoming: Mutex<mpsc::Receiver<(SocketAddr, Bytes)>>,
    /// Which source `poll_recv` tries first; it alternates, so neither starves the other.
    tunnels_first: AtomicBool,
    _accept: AbortOnDrop,
}

/// An accepted tunnel, as [`ServerSocket::try_send`] sees it.
#[derive(Debug)]
struct Tunnel {
    /// Frames for its writer.
    queue: mpsc::Sender<Bytes>,
    /// Its task, to close it when it must make room.
    task: AbortHandle,
}

impl ServerSocket {
    /// Serves `udp` (wrapped by `runtime`, which keeps its offloads) and the tunnels
    /// accepted on `tcp`, which must listen on the same address and port. Must be called
    /// within a tokio runtime.
    pub fn new(
        udp: std::net::UdpSocket,
        tcp: std::net::TcpListener,
        runtime: &dyn quinn::Runtime,
    ) -> io::Result<Arc<Self>> {
        tcp.set_nonblocking(true)?;
        let tcp = TcpListener::from_std(tcp)?;
        let udp = runtime.wrap_udp_socket(udp)?;
        let local = udp.local_addr()?;
        let tunnels = Arc::new(Mutex::new(Roster::new(MAX_TUNNELS)));
        let (in_tx, incoming) = mpsc::channel(RECV_QUEUE);
        let task = tokio::spawn(accept(tcp, local, tunnels.clone(), in_tx));
        Ok(Arc::new(Self {
            udp,
            local,
            tunnels,
            incoming: Mutex::new(incoming),
            tunnels_first: AtomicBool::new(false),
            _accept: AbortOnDrop(task.abort_handle()),
        }))
    }

    /// Datagrams from tunnels, as many as are waiting.
    fn poll_tunnels(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let mut incoming = lock(&self.incoming);
        match fill(&mut incoming, cx, bufs, meta, |(from, d)| (*from, &d[..])) {
            Poll::Ready(Some(n)) => Poll::Ready(Ok(n)),
            // The accept task holds a sender as long as the socket lives; should it have
            // panicked, UDP still works.
            Poll::Ready(None) | Poll::Pending => Poll::Pending,
        }
    }

    /// Whether `addr` can only be a tunnel's (see [`tunnel_peer`]).
    fn tunnel_shaped(&self, addr: SocketAddr) -> bool {
        addr.is_ipv4() != self.local.is_ipv4()
    }
}

impl AsyncUdpSocket for ServerSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        // Tunnels are always writable; UDP's readiness is the one that can make quinn wait.
        self.udp.clone().create_io_poller()
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let queue = lock(&self.tunnels)
            .sent(t.destination, Instant::now())
            .map(|tunnel| tunnel.queue.clone());
        match queue {
            Some(queue) => {
                for frame in datagrams(t).filter_map(encode_frame) {
                    let _ = queue.try_send(frame);
                }
                Ok(())
            }
            // A tunnel that has closed: its datagrams are lost, like those of a host gone.
            None if self.tunnel_shaped(t.destination) => Ok(()),
            None => self.udp.try_send(t),
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        // Whichever source is asked second is polled only when the first has nothing, so
        // both wakers are registered whenever this returns `Pending`.
        if self.tunnels_first.fetch_xor(true, Ordering::Relaxed) {
            if let Poll::Ready(r) = self.poll_tunnels(cx, bufs, meta) {
                return Poll::Ready(r);
            }
            self.udp.poll_recv(cx, bufs, meta)
        } else {
            if let Poll::Ready(r) = self.udp.poll_recv(cx, bufs, meta) {
                return Poll::Ready(r);
            }
            self.poll_tunnels(cx, bufs, meta)
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn max_transmit_segments(&self) -> usize {
        self.udp.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.udp.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.udp.may_fragment()
    }
}

/// Accepts tunnels until the socket is dropped (which aborts this task, and with it every
/// tunnel's task in `tasks`).
async fn accept(
    listener: TcpListener,
    local: SocketAddr,
    tunnels: Arc<Mutex<Roster<Tunnel>>>,
    incoming: mpsc::Sender<(SocketAddr, Bytes)>,
) {
    let mut tasks = JoinSet::new();
    let mut tickets = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, from) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors, most likely: wait instead of spinning.
                        tracing::warn!("accepting a tunnel on {local}: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let peer = tunnel_peer(from, local);
                let ticket = tickets;
                tickets += 1;
                let (queue, rx) = mpsc::channel(SEND_QUEUE);
                let serve = serve(tcp, peer, ticket, rx, incoming.clone(), tunnels.clone());
                // Admitted before the task can look for its place on the way out.
                let mut roster = lock(&tunnels);
                let task = tasks.spawn(serve);
                let out = roster.admit(peer, ticket, Tunnel { queue, task }, Instant::now());
                drop(roster);
                if let Some((addr, old)) = out {
                    tracing::debug!("tunnel from {addr} closed to make room for {peer}");
                    old.task.abort();
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// Serves one accepted tunnel until it breaks, sends garbage or the socket is dropped, then
/// gives up its place.
async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    ticket: u64,
    mut queue: mpsc::Receiver<Bytes>,
    incoming: mpsc::Sender<(SocketAddr, Bytes)>,
    tunnels: Arc<Mutex<Roster<Tunnel>>>,
) {
    let run = async {
        tcp.set_nodelay(true)?;
        let (mut r, w) = tcp.into_split();
        let mut w = BufWriter::with_capacity(WRITE_BUFFER, w);
        let mut buf = BytesMut::with_capacity(2048);
        let preamble = async {
            while !check_preamble(&buf)? {
                if r.read_buf(&mut buf).await? == 0 {
                    return Err(TunnelError::Truncated);
                }
            }
            Ok(())
        };
        tokio::time::timeout(PREAMBLE_WITHIN, preamble)
            .await
            .map_err(|_| TunnelError::NoPreamble(PREAMBLE_WITHIN))??;
        buf.advance(PREAMBLE.len());
        let read = read_frames(&mut r, buf, |d| {
            let incoming = &incoming;
            async move { incoming.send((peer, d)).await.is_ok() }
        });
        tokio::select! {
            r = read => r,
            r = write_frames(&mut w, &mut queue, || {}) => r,
        }
    };
    if let Err(e) = run.await {
        tracing::debug!("tunnel from {peer} closed: {e}");
    }
    lock(&tunnels).leave(peer, ticket);
}

/// The open tunnels by address, and which one makes room for a newcomer; no I/O. `T` is
/// what the socket keeps of a tunnel.
#[derive(Debug)]
struct Roster<T> {
    limit: usize,
    open: HashMap<SocketAddr, Place<T>>,
}

#[derive(Debug)]
struct Place<T> {
    /// In order of arrival; tells a tunnel from a later one with the same address.
    ticket: u64,
    /// When the guest last sent it a datagram (or it arrived).
    last_sent: Instant,
    tunnel: T,
}

impl<T> Roster<T> {
    fn new(limit: usize) -> Self {
        assert!(limit > 0, "a roster of 0 tunnels admits no one");
        Self {
            limit,
            open: HashMap::new(),
        }
    }

    /// Takes in a tunnel; hands back the one that made room for it, if any (a dead one
    /// with the same address, or when the roster was full, the [`Roster::victim`]).
    fn admit(
        &mut self,
        peer: SocketAddr,
        ticket: u64,
        tunnel: T,
        now: Instant,
    ) -> Option<(SocketAddr, T)> {
        let place = Place {
            ticket,
            last_sent: now,
            tunnel,
        };
        if let Some(old) = self.open.insert(peer, place) {
            return Some((peer, old.tunnel));
        }
        if self.open.len() <= self.limit {
            return None;
        }
        let victim = self.victim(peer)?;
        self.open.remove(&victim).map(|p| (victim, p.tunnel))
    }

    /// Among the tunnels from the address holding the most (other than `newcomer`), the
    /// one the guest has sent nothing to for longest; the earliest to arrive among equals.
    fn victim(&self, newcomer: SocketAddr) -> Option<SocketAddr> {
        let mut per_ip: HashMap<IpAddr, usize> = HashMap::new();
        for addr in self.open.keys() {
            *per_ip.entry(addr.ip().to_canonical()).or_default() += 1;
        }
        let most = *per_ip.values().max()?;
        self.open
            .iter()
            .filter(|(addr, _)| **addr != newcomer && per_ip[&addr.ip().to_canonical()] == most)
            .min_by_key(|(_, p)| (p.last_sent, p.ticket))
            .map(|(addr, _)| *addr)
    }

    /// The tunnel to `peer`, if open, noting that the guest sends to it now.
    fn sent(&mut self, peer: SocketAddr, now: Instant) -> Option<&T> {
        let place = self.open.get_mut(&peer)?;
        place.last_sent = now;
        Some(&place.tunnel)
    }

    /// Gives up the place of the tunnel `ticket` from `peer`, unless another holds it now.
    fn leave(&mut self, peer: SocketAddr, ticket: u64) {
        if self.open.get(&peer).is_some_and(|p| p.ticket == ticket) {
            self.open.remove(&peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::transport::{Link, quic};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    #[test]
    fn frames_round_trip_and_bad_lengths_close() {
        let mut buf = BytesMut::new();
        for len in [1, 1200, MAX_DATAGRAM] {
            let datagram: Vec<u8> = (0..len).map(|i| i as u8).collect();
            buf.extend_from_slice(&encode_frame(&datagram).unwrap());
        }
        // Byte by byte: nothing until a frame is whole.
        let mut fed = BytesMut::new();
        let mut got = Vec::new();
        for b in buf {
            fed.put_u8(b);
            if let Some(d) = decode_frame(&mut fed).unwrap() {
                got.push(d.len());
            }
        }
        assert_eq!(got, [1, 1200, MAX_DATAGRAM]);
        assert!(fed.is_empty());
        assert_eq!(encode_frame(&[]), None);
        assert_eq!(encode_frame(&vec![0; MAX_DATAGRAM + 1]), None);
        for (prefix, want) in [([0u8, 0], "length 0"), ([0xff, 0xff], "65535 bytes")] {
            let err = decode_frame(&mut BytesMut::from(&prefix[..])).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
    }

    #[test]
    fn the_preamble_is_judged_as_its_bytes_arrive() {
        assert!(!check_preamble(b"").unwrap());
        assert!(!check_preamble(b"pinc").unwrap());
        assert!(check_preamble(b"pincerT1").unwrap());
        assert!(check_preamble(b"pincerT1\x05\xdc").unwrap());
        // Wrong from its first differing byte on, before the rest arrives.
        assert!(check_preamble(b"GET").is_err());
        assert!(check_preamble(b"pincerT2").is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_decoder(
            bytes in proptest::collection::vec(any::<u8>(), 0..4096),
            cut in 0usize..4096,
        ) {
            let _ = check_preamble(&bytes);
            // Fed in two pieces, as reads would deliver them.
            let cut = cut.min(bytes.len());
            let mut buf = BytesMut::from(&bytes[..cut]);
            let mut fed_all = false;
            loop {
                match decode_frame(&mut buf) {
                    Ok(Some(d)) => prop_assert!(!d.is_empty() && d.len() <= MAX_DATAGRAM),
                    Ok(None) if !fed_all => {
                        buf.extend_from_slice(&bytes[cut..]);
                        fed_all = true;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn tunnel_addresses_are_in_the_family_the_udp_socket_never_reports() {
        let v4_socket: SocketAddr = "0.0.0.0:7000".parse().unwrap();
        let v6_socket: SocketAddr = "[::]:7000".parse().unwrap();
        let from: SocketAddr = "10.0.2.2:40000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:10.0.2.2]:40000".parse().unwrap();
        assert_eq!(tunnel_peer(from, v4_socket), mapped);
        // A dual-stack listener reports IPv4 peers mapped; UDP on it does too.
        assert_eq!(tunnel_peer(mapped, v6_socket), from);
        let v6: SocketAddr = "[2001:db8::1]:40000".parse().unwrap();
        assert_eq!(tunnel_peer(v6, v6_socket), v6);
        // The source's address stays recognisable, for admission and logs.
        assert_eq!(tunnel_peer(from, v4_socket).ip().to_canonical(), from.ip());
    }

    #[test]
    fn a_full_roster_closes_the_longest_idle_tunnel_of_the_busiest_address() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let addr = |ip: u8, port: u16| SocketAddr::from(([10, 0, 0, ip], port));
        let mut r = Roster::new(3);
        assert!(r.admit(addr(1, 1), 0, "host", at(0)).is_none());
        assert!(r.admit(addr(2, 1), 1, "flood a", at(1)).is_none());
        assert!(r.admit(addr(2, 2), 2, "flood b", at(2)).is_none());
        // The guest talks to the flood's first tunnel: its second is now idle longest.
        r.sent(addr(2, 1), at(3));
        assert_eq!(
            r.admit(addr(2, 3), 3, "flood c", at(4)),
            Some((addr(2, 2), "flood b"))
        );
        // The host's one tunnel, idle longest of all, stays: the flood's address holds more.
        assert_eq!(
            r.admit(addr(2, 4), 4, "flood d", at(5)),
            Some((addr(2, 1), "flood a"))
        );
        assert!(r.open.contains_key(&addr(1, 1)));
        // From one address alone, idle longest goes first, never the newcomer.
        let mut r = Roster::new(2);
        r.admit(addr(1, 1), 0, "a", at(0));
        r.admit(addr(1, 2), 1, "b", at(0));
        r.sent(addr(1, 1), at(5));
        assert_eq!(r.admit(addr(1, 3), 2, "c", at(5)), Some((addr(1, 2), "b")));
        assert_eq!(r.admit(addr(1, 4), 3, "d", at(5)), Some((addr(1, 1), "a")));
        // A tunnel that is gone leaves only its own place, not a newer one's at its address.
        r.leave(addr(1, 3), 99);
        assert!(r.open.contains_key(&addr(1, 3)));
        r.leave(addr(1, 3), 2);
        assert!(!r.open.contains_key(&addr(1, 3)));
        // A dead tunnel at a newcomer's address is replaced, not counted twice.
        assert_eq!(r.admit(addr(1, 4), 4, "e", at(6)), Some((addr(1, 4), "d")));
        assert_eq!(r.open.len(), 1);
    }

    /// A guest-like endpoint on loopback that echoes every stream and reports each
    /// connection it accepts.
    struct Guest {
        endpoint: quinn::Endpoint,
        addr: SocketAddr,
        id: Identity,
        accepted: mpsc::UnboundedReceiver<Link>,
    }

    impl Guest {
        fn start(addr: SocketAddr, id: Identity) -> Result<Self, crate::transport::TransportError> {
            let config = quic::server_config(&id, false).unwrap();
            let endpoint = quic::server_endpoint(addr, config, &id)?;
            let addr = endpoint.local_addr().unwrap();
            let (tx, accepted) = mpsc::unbounded_channel();
            tokio::spawn(echo(endpoint.clone(), tx));
            Ok(Self {
                endpoint,
                addr,
                id,
                accepted,
            })
        }

        fn new() -> Self {
            let id = Identity::generate("guest").unwrap();
            Self::start((Ipv4Addr::LOCALHOST, 0).into(), id).unwrap()
        }

        /// Dials it over UDP or through a tunnel to `via` (its own address, or a proxy's).
        async fn dial(&self, via: Option<SocketAddr>) -> (quinn::Endpoint, quinn::Connection) {
            let (ep, to) = match via {
                Some(to) => (quic::client_endpoint_tcp(to).unwrap(), to),
                None => (quic::client_endpoint(self.addr).unwrap(), self.addr),
            };
            let conn = self.connect(&ep, to).await.unwrap();
            (ep, conn)
        }

        async fn connect(
            &self,
            ep: &quinn::Endpoint,
            to: SocketAddr,
        ) -> Result<quinn::Connection, crate::transport::TransportError> {
            let pin = quic::ServerPin::Pinned(self.id.fingerprint());
            let (cfg, seen) = quic::client_config(to, pin, None).unwrap();
            let connect = quic::connect(ep, to, cfg, &seen, pin);
            tokio::time::timeout(Duration::from_secs(10), connect)
                .await
                .expect("connected or failed within 10 s")
        }

        /// Closes the endpoint and waits until its sockets are gone.
        async fn stop(self) {
            self.endpoint.close(0u32.into(), b"stopped");
            self.endpoint.wait_idle().await;
        }
    }

    async fn echo(endpoint: quinn::Endpoint, accepted: mpsc::UnboundedSender<Link>) {
        while let Some(incoming) = endpoint.accept().await {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                quic::open_windows(&conn);
                let _ = accepted.send(Link::Quic(conn.clone()));
                while let Ok((mut s, mut r)) = conn.accept_bi().await {
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut r, &mut s).await;
                        let _ = s.finish();
                    });
                }
            });
        }
    }

    /// Bytes that show where they were cut or reordered.
    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// Sends `len` bytes on a new stream while reading the echo; checks it came back whole.
    async fn round_trip(conn: &quinn::Connection, len: usize, seed: u32) {
        let data = pattern(len, seed);
        let (mut s, mut r) = conn.open_bi().await.unwrap();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            s.write_all(&sent).await.unwrap();
            s.finish().unwrap();
        });
        let back = r.read_to_end(len + 1).await.unwrap();
        writer.await.unwrap();
        assert!(
            back == data,
            "{} of {len} bytes came back, or garbled",
            back.len()
        );
    }

    /// Whether the peer of `tcp` closed it (or reset it) within `within`.
    async fn closed(tcp: &mut TcpStream, within: Duration) -> bool {
        let mut b = [0u8; 64];
        tokio::time::timeout(within, async {
            loop {
                match tcp.read(&mut b).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quic_runs_through_a_tunnel_beside_udp_clients() {
        let mut guest = Guest::new();
        let (_tep, tunnelled) = guest.dial(Some(guest.addr)).await;
        let server_side = guest.accepted.recv().await.unwrap();
        // The guest sees the tunnel as an IPv6 peer on its IPv4 endpoint: quinn-proto takes
        // the address as an opaque key, and answers it through the tunnel.
        let seen = server_side.remote_addr();
        assert!(
            seen.is_ipv6() && seen.ip().to_canonical() == Ipv4Addr::LOCALHOST,
            "{seen}"
        );
        let client = Link::Quic(tunnelled.clone());
        assert_eq!(client.exporter().unwrap(), server_side.exporter().unwrap());
        assert_eq!(client.peer_fingerprint(), Some(guest.id.fingerprint()));

        let (_uep, udp) = guest.dial(None).await;
        let _ = guest.accepted.recv().await.unwrap();
        // Both at once, 8 MiB each way on each.
        tokio::join!(
            round_trip(&tunnelled, 8 << 20, 1),
            round_trip(&udp, 8 << 20, 2),
        );
        // Many small streams at once, as requests go.
        let mut many = JoinSet::new();
        for i in 0..64 {
            let conn = tunnelled.clone();
            many.spawn(async move { round_trip(&conn, 3000, i).await });
        }
        while let Some(done) = many.join_next().await {
            done.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dual_stack_guest_tells_tunnels_from_udp_peers() {
        let id = Identity::generate("guest").unwrap();
        let mut guest = Guest::start("[::]:0".parse().unwrap(), id).unwrap();
        let v4: SocketAddr = (Ipv4Addr::LOCALHOST, guest.addr.port()).into();
        let v6: SocketAddr = (std::net::Ipv6Addr::LOCALHOST, guest.addr.port()).into();
        let mut seen = Vec::new();
        let mut conns = Vec::new();
        for via in [Some(v4), Some(v6)] {
            let (ep, conn) = guest.dial(via).await;
            seen.push(guest.accepted.recv().await.unwrap().remote_addr());
            conns.push((ep, conn));
        }
        let ep = quic::client_endpoint(v4).unwrap();
        let udp = guest.connect(&ep, v4).await.unwrap();
        seen.push(guest.accepted.recv().await.unwrap().remote_addr());
        conns.push((ep, udp));
        // IPv4 over UDP arrives mapped to IPv6, so a tunnel from IPv4 is a plain IPv4 peer.
        assert!(seen[0].is_ipv4() && seen[0].ip().is_loopback(), "{seen:?}");
        assert!(seen[1].is_ipv6() && seen[1].ip().is_loopback(), "{seen:?}");
        assert!(
            seen[2].is_ipv6() && seen[2].ip().to_canonical().is_loopback(),
            "{seen:?}"
        );
        for (i, (_, conn)) in conns.iter().enumerate() {
            round_trip(conn, 100_000, i as u32).await;
        }
    }

    /// Not a test: how the tunnel compares with UDP on loopback, one connection each, the
    /// guest echoing: the round trip of 16 bytes on a new stream (500 samples), and 8 MiB
    /// sent while the echo is read (5 samples). No assertion on times.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "a measurement: cargo test -p pincer-shared --release -- --ignored --nocapture udp_and_tunnel"]
    async fn udp_and_tunnel_latency_and_throughput() {
        let mut guest = Guest::new();
        for via in [None, Some(guest.addr)] {
            let (_ep, conn) = guest.dial(via).await;
            let _ = guest.accepted.recv().await;
            let what = if via.is_some() { "tunnel" } else { "udp" };
            let mut rtts = Vec::new();
            for i in 0..500 {
                let t = std::time::Instant::now();
                round_trip(&conn, 16, i).await;
                rtts.push(t.elapsed());
            }
            rtts.sort();
            let mut echoes = Vec::new();
            for i in 0..5 {
                let data = pattern(8 << 20, i);
                let t = std::time::Instant::now();
                let (mut s, mut r) = conn.open_bi().await.unwrap();
                let len = data.len();
                let w = tokio::spawn(async move {
                    s.write_all(&data).await.unwrap();
                    s.finish().unwrap();
                });
                let back = r.read_to_end(len + 1).await.unwrap();
                w.await.unwrap();
                echoes.push(t.elapsed());
                assert_eq!(back.len(), len);
            }
            echoes.sort();
            println!(
                "{what}: 16-byte echo p50 {:?} p90 {:?}; 8 MiB echoed (8 MiB each way at once) median {:?}",
                rtts[250], rtts[450], echoes[2]
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn garbage_closes_only_its_own_tunnel() {
        let guest = Guest::new();
        let (_ep, good) = guest.dial(Some(guest.addr)).await;
        round_trip(&good, 1000, 1).await;
        let oversized = [&PREAMBLE[..], &[0xff, 0xff], &[0; 100]].concat();
        let empty = [&PREAMBLE[..], &[0, 0]].concat();
        let a_frame_then_an_empty_one = [&PREAMBLE[..], &[0, 4, 1, 2, 3, 4], &[0, 0]].concat();
        for garbage in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            &b"pincerT2"[..],
            &oversized,
            &empty,
            &a_frame_then_an_empty_one,
        ] {
            let mut tcp = TcpStream::connect(guest.addr).await.unwrap();
            tcp.write_all(garbage).await.unwrap();
            assert!(
                closed(&mut tcp, Duration::from_secs(2)).await,
                "{:?} was not closed",
                String::from_utf8_lossy(garbage)
            );
        }
        // A connection that says nothing is closed once the preamble is overdue.
        let mut silent = TcpStream::connect(guest.addr).await.unwrap();
        assert!(!closed(&mut silent, PREAMBLE_WITHIN / 2).await);
        assert!(closed(&mut silent, PREAMBLE_WITHIN).await);
        round_trip(&good, 1000, 2).await;
        // A new tunnel still gets in.
        let (_ep2, other) = guest.dial(Some(guest.addr)).await;
        round_trip(&other, 1000, 3).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flood_of_idle_tunnels_does_not_lock_out_a_host() {
        let guest = Guest::new();
        // Twice the budget of tunnels that send the preamble and then sit idle...
        let mut flood = Vec::new();
        for _ in 0..2 * MAX_TUNNELS {
            let mut tcp = TcpStream::connect(guest.addr).await.unwrap();
            tcp.write_all(&PREAMBLE).await.unwrap();
            flood.push(tcp);
        }
        // ...and more arriving all the while a host connects and works.
        let addr = guest.addr;
        let more = tokio::spawn(async move {
            let mut held = std::collections::VecDeque::new();
            loop {
                if let Ok(mut tcp) = TcpStream::connect(addr).await {
                    let _ = tcp.write_all(&PREAMBLE).await;
                    held.push_back(tcp);
                }
                if held.len() > 2 * MAX_TUNNELS {
                    held.pop_front();
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let (_ep, host) = guest.dial(Some(guest.addr)).await;
        round_trip(&host, 1 << 20, 1).await;
        round_trip(&host, 1000, 2).await;
        more.abort();
        // The first of the flood made room.
        assert!(closed(&mut flood[0], Duration::from_secs(2)).await);
    }

    /// A TCP forwarder to `upstream` whose connections can all be cut at once, like a
    /// VM's port forward when the VM resets, or silenced: held open, carrying nothing either
    /// way, like a forward whose far end vanished without a FIN.
    struct Forwarder {
        addr: SocketAddr,
        open: Arc<Mutex<Vec<AbortHandle>>>,
        silenced: tokio::sync::watch::Sender<u32>,
        _task: AbortOnDrop,
    }

    impl Forwarder {
        async fn start(upstream: SocketAddr) -> Self {
            let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
            let addr = listener.local_addr().unwrap();
            let open = Arc::new(Mutex::new(Vec::new()));
            let held = open.clone();
            let (silenced, watch) = tokio::sync::watch::channel(0);
            let task = tokio::spawn(async move {
                while let Ok((mut down, _)) = listener.accept().await {
                    let mut silence = watch.clone();
                    silence.mark_unchanged();
                    let copy = tokio::spawn(async move {
                        if let Ok(mut up) = TcpStream::connect(upstream).await {
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                                _ = silence.changed() => {
                                    // Both ends stay open and unread.
                                    std::future::pending::<()>().await;
                                }
                            }
                        }
                    });
                    lock(&held).push(copy.abort_handle());
                }
            });
            Self {
                addr,
                open,
                silenced,
                _task: AbortOnDrop(task.abort_handle()),
            }
        }

        /// Silences every connection open now; returns how many there were. Connections
        /// made afterwards carry on as usual.
        fn silence(&self) -> usize {
            self.silenced.send_modify(|n| *n += 1);
            lock(&self.open).len()
        }

        /// Cuts every connection; returns how many there were.
        fn cut(&self) -> usize {
            let open = std::mem::take(&mut *lock(&self.open));
            for c in &open {
                c.abort();
            }
            open.len()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_tunnel_connects_again_after_its_connection_is_cut() {
        let guest = Guest::new();
        let forwarder = Forwarder::start(guest.addr).await;
        let (ep, conn) = guest.dial(Some(forwarder.addr)).await;
        round_trip(&conn, 100_000, 1).await;
        assert_eq!(forwarder.cut(), 1);
        // The next packet connects again. The guest sees the connection's packets come
        // from a new port, takes it for a migration, and the connection carries on.
        tokio::time::timeout(Duration::from_secs(10), round_trip(&conn, 100_000, 2))
            .await
            .expect("the connection carried on through a new tunnel");
        // New connections from the same endpoint work too, after another cut.
        assert_eq!(forwarder.cut(), 1);
        let again = guest.connect(&ep, forwarder.addr).await.unwrap();
        round_trip(&again, 100_000, 3).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tunnel_gone_silent_is_dialled_again_and_its_connections_carry_on() {
        let guest = Guest::new();
        let forwarder = Forwarder::start(guest.addr).await;
        let (_ep, conn) = guest.dial(Some(forwarder.addr)).await;
        round_trip(&conn, 10_000, 1).await;
        // The forward's far end vanishes without a FIN: the host's TCP connection stays
        // open and carries nothing. Within SILENT_PEER of its first unanswered frame the
        // host gives it up and dials again, well before QUIC's 20 s idle timeout would end
        // the connection; QUIC takes the new tunnel for a migration.
        assert_eq!(forwarder.silence(), 1);
        tokio::time::timeout(Duration::from_secs(15), round_trip(&conn, 10_000, 2))
            .await
            .expect("the connection carried on through a new tunnel");
        assert_eq!(lock(&forwarder.open).len(), 2, "one new tunnel");
    }

    #[test]
    fn silence_counts_from_the_first_unanswered_frame() {
        let s = Silence::default();
        assert!(!s.longer_than(Duration::ZERO), "nothing sent");
        s.sent();
        std::thread::sleep(Duration::from_millis(30));
        s.sent();
        assert!(
            s.longer_than(Duration::from_millis(20)),
            "from the first frame"
        );
        s.heard();
        assert!(!s.longer_than(Duration::ZERO), "answered");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guest_started_again_on_its_port_is_reached_again() {
        let guest = Guest::new();
        let (addr, id) = (guest.addr, guest.id.clone());
        let (ep, conn) = guest.dial(Some(addr)).await;
        round_trip(&conn, 1000, 1).await;
        guest.stop().await;
        let why = tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .expect("the host is told the guest stopped");
        assert!(why.to_string().contains("stopped"), "{why}");
        // Its sockets close as soon as the endpoint's tasks have seen it go; then a new
        // guest takes the same port, and the host's endpoint finds it through a new tunnel.
        let mut tries = 0;
        let guest = loop {
            match Guest::start(addr, id.clone()) {
                Ok(guest) => break guest,
                Err(e) => assert!(tries < 100, "{e}"),
            }
            tries += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let again = guest.connect(&ep, addr).await.unwrap();
        round_trip(&again, 1000, 2).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_forward_with_nothing_behind_it_is_dialled_with_backoff() {
        // Like QEMU's or adb's port forward while the guest is down: every connection is
        // accepted and closed at once.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        let _forward = AbortOnDrop(
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    counted.fetch_add(1, Ordering::Relaxed);
                    drop(tcp);
                }
            })
            .abort_handle(),
        );
        let socket = ClientSocket::new(addr);
        let datagram = [0u8; 1200];
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) {
            let t = Transmit {
                destination: addr,
                ecn: None,
                contents: &datagram,
                segment_size: None,
                src_ip: None,
            };
            socket.try_send(&t).unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Attempts 50, 100, 200 and 400 ms apart, not one per datagram.
        let n = accepted.load(Ordering::Relaxed);
        assert!((3..=7).contains(&n), "{n} connections in a second");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn dropped_endpoints_close_their_tcp_connections() {
        // The host's side: a listener stands in for the guest.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let ep = quic::client_endpoint_tcp(addr).unwrap();
        let (cfg, _) = quic::client_config(addr, quic::ServerPin::Any, None).unwrap();
        let connecting = ep.connect_with(cfg, addr, quic::SERVER_NAME).unwrap();
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut start = [0u8; 10];
        tcp.read_exact(&mut start).await.unwrap();
        assert_eq!(&start[..8], &PREAMBLE);
        assert!(usize::from(u16::from_be_bytes([start[8], start[9]])) >= 1200);
        drop(connecting);
        drop(ep);
        assert!(closed(&mut tcp, Duration::from_secs(5)).await);

        // The guest's side: its tunnels close and its port is free.
        let guest = Guest::new();
        let mut tcp = TcpStream::connect(guest.addr).await.unwrap();
        tcp.write_all(&PREAMBLE).await.unwrap();
        let addr = guest.addr;
        guest.stop().await;
        assert!(closed(&mut tcp, Duration::from_secs(5)).await);
        std::net::TcpListener::bind(addr).expect("the TCP port is free");
    }

    #[tokio::test]
    async fn a_port_of_0_is_free_for_both_and_a_taken_port_is_named() {
        let guest = Guest::new();
        assert!(std::net::TcpListener::bind(guest.addr).is_err());
        assert!(std::net::UdpSocket::bind(guest.addr).is_err());
        let taken = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let id = Identity::generate("guest").unwrap();
        let config = quic::server_config(&id, false).unwrap();
        let err = quic::server_endpoint(taken.local_addr().unwrap(), config, &id)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(tcp)") && err.contains("in use"), "{err}");
    }
}

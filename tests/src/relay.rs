//! A UDP fault relay for tests: this machine's kernel has no `netem`, so tests put this
//! between a host and a guest on loopback. It forwards QUIC's datagrams between one host
//! and the guest's port, and on the way drops, delays (with jitter, which reorders),
//! duplicates, limits the bytes a second (a link's queue, tail-dropping), or holds back
//! everything during a blackout (both ways or one), each direction alike, from a seeded
//! generator so a failure can be replayed; or it changes the port the guest sees the
//! host's datagrams come from in the middle, as a NAT that rebinds does. [`TcpRelay`]
//! does the same for TCP (the tunnel that carries QUIC over `adb forward` or a VM's port
//! forward), where the fault is a peer that vanishes without a FIN (its connections stay
//! open and carry nothing more) or one that resets them. Both only ever send to the
//! loopback address they were given, and stop when dropped.

use std::collections::BinaryHeap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the relay does to each datagram.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Chance that a datagram is dropped (0 to 1).
    pub loss: f64,
    /// Delay added to every datagram.
    pub delay: Duration,
    /// Up to this much more delay, drawn for each datagram (reorders them).
    pub jitter: Duration,
    /// Chance that a datagram is sent twice.
    pub duplicate: f64,
    /// Drop everything from this long after the first datagram, for this long.
    pub blackout: Option<(Duration, Duration)>,
    /// Which way the blackout drops.
    pub blackout_way: Way,
    /// The link's bytes a second, each way: a datagram waits for the ones before it to be
    /// sent, and one that would wait more than [`QUEUE_LIMIT`] is dropped.
    pub rate: Option<u64>,
    /// From this long after the first datagram, send to the guest from another port (a
    /// NAT rebinding: the guest sees the host come from a new address).
    pub rebind: Option<Duration>,
    /// Seed of the generator.
    pub seed: u64,
}

/// Which datagrams a one-way fault drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Way {
    /// Both ways.
    #[default]
    Both,
    /// Only the host's, to the guest.
    ToGuest,
    /// Only the guest's, to the host: requests arrive and are done, their replies are lost.
    ToHost,
}

/// The longest a datagram waits in a rate-limited link's queue (a router's buffer).
pub const QUEUE_LIMIT: Duration = Duration::from_millis(200);

/// What the relay did, for a test's figures.
#[derive(Debug, Default)]
pub struct Counts {
    /// Datagrams received from either side.
    pub seen: AtomicU64,
    /// Dropped by `loss`.
    pub lost: AtomicU64,
    /// Dropped during the blackout.
    pub blacked_out: AtomicU64,
    /// Sent twice.
    pub duplicated: AtomicU64,
    /// Sent to the guest from the first port.
    pub to_guest: AtomicU64,
    /// Sent to the guest from the port after the rebinding.
    pub rebound: AtomicU64,
    /// Dropped from a full rate-limited queue.
    pub queue_full: AtomicU64,
}

/// A running relay: hosts send to [`UdpRelay::addr`] as if it were the guest.
pub struct UdpRelay {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    queue: Arc<Queue>,
}

/// A datagram due to be sent.
struct Due {
    at: Instant,
    /// Order among datagrams due at the same instant.
    n: u64,
    to_guest: bool,
    bytes: Vec<u8>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.n) == (other.at, other.n)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    // The earliest first out of the max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.n).cmp(&(self.at, self.n))
    }
}

/// Datagrams waiting for their time, and the one thread that sends them.
#[derive(Default)]
struct Queue {
    heap: Mutex<BinaryHeap<Due>>,
    wake: Condvar,
}

/// The relay's shared state: its sockets, the faults and the generator.
struct Shared {
    faults: Faults,
    /// When the first datagram came.
    started: std::sync::OnceLock<Instant>,
    rng: Mutex<u64>,
    counts: Arc<Counts>,
    queue: Arc<Queue>,
    next: AtomicU64,
    /// When each way's link is free again (rate-limited): to the guest, to the host.
    free_at: Mutex<[Option<Instant>; 2]>,
}

impl Shared {
    /// A uniform draw in [0, 1) (xorshift64*).
    fn draw(&self) -> f64 {
        let mut s = self.rng.lock().unwrap();
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Applies the faults to one datagram and queues what is left of it.
    fn pass(&self, bytes: &[u8], to_guest: bool) {
        self.counts.seen.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let started = *self.started.get_or_init(|| now);
        let way_hit = match self.faults.blackout_way {
            Way::Both => true,
            Way::ToGuest => to_guest,
            Way::ToHost => !to_guest,
        };
        if let Some((from, len)) = self.faults.blackout {
            let t = now - started;
            if way_hit && t >= from && t < from + len {
                self.counts.blacked_out.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        if self.draw() < self.faults.loss {
            self.counts.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let copies = if self.draw() < self.faults.duplicate {
            self.counts.duplicated.fetch_add(1, Ordering::Relaxed);
            2
        } else {
            1
        };
        for _ in 0..copies {
            // On a rate-limited link a datagram leaves once the ones before it have.
            let sent = match self.faults.rate {
                Some(rate) => {
                    let mut free = self.free_at.lock().unwrap();
                    let way = &mut free[usize::from(!to_guest)];
                    let start = way.map_or(now, |f| f.max(now));
                    if start - now > QUEUE_LIMIT {
                        self.counts.queue_full.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let done = start + Duration::from_secs_f64(bytes.len() as f64 / rate as f64);
                    *way = Some(done);
                    done
                }
                None => now,
            };
            let at = sent + self.faults.delay + self.faults.jitter.mul_f64(self.draw());
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            self.queue.heap.lock().unwrap().push(Due {
                at,
                n,
                to_guest,
                bytes: bytes.to_vec(),
            });
        }
        self.queue.wake.notify_one();
    }
}

impl UdpRelay {
    /// Relays between hosts and the guest at `guest` (a loopback address).
    pub fn start(guest: SocketAddr, faults: Faults) -> Self {
        Self::start_at(std::net::Ipv4Addr::LOCALHOST.into(), guest, faults)
    }

    /// Relays between hosts and the guest at `guest` (a loopback address), taking hosts'
    /// datagrams on `front`: an address of this machine (see [`LocalAddress`]).
    pub fn start_at(front: std::net::IpAddr, guest: SocketAddr, faults: Faults) -> Self {
        assert!(guest.ip().is_loopback(), "the relay only sends to loopback");
        let front = UdpSocket::bind((front, 0)).unwrap();
        let back = UdpSocket::bind("127.0.0.1:0").unwrap();
        back.connect(guest).unwrap();
        // The port the guest sees after a rebinding.
        let rebound = UdpSocket::bind("127.0.0.1:0").unwrap();
        rebound.connect(guest).unwrap();
        for s in [&front, &back, &rebound] {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        }
        let addr = front.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let queue = Arc::new(Queue::default());
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            rng: Mutex::new(faults.seed | 1),
            faults,
            started: std::sync::OnceLock::new(),
            counts: counts.clone(),
            queue: queue.clone(),
            next: AtomicU64::new(0),
            free_at: Mutex::new([None, None]),
        });
        // The host's address, learnt from its datagrams (the latest one wins, as a NAT
        // would have it after a rebinding).
        let host: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let mut threads = Vec::new();
        {
            let (front, shared, stop, host) = (
                front.try_clone().unwrap(),
                shared.clone(),
                stop.clone(),
                host.clone(),
            );
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = front.recv_from(&mut buf) {
                        *host.lock().unwrap() = Some(from);
                        shared.pass(&buf[..n], true);
                    }
                }
            }));
        }
        for socket in [&back, &rebound] {
            let (socket, shared, stop) =
                (socket.try_clone().unwrap(), shared.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(n) = socket.recv(&mut buf) {
                        shared.pass(&buf[..n], false);
                    }
                }
            }));
        }
        {
            let (queue, stop, shared) = (queue.clone(), stop.clone(), shared.clone());
            threads.push(std::thread::spawn(move || {
                let mut heap = queue.heap.lock().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    match heap.peek() {
                        Some(d) if d.at <= now => {
                            let d = heap.pop().unwrap();
                            drop(heap);
                            // A full socket buffer drops, as a link would.
                            let _ = if d.to_guest {
                                let rebind = shared.faults.rebind.zip(shared.started.get());
                                if rebind.is_some_and(|(after, t0)| t0.elapsed() >= after) {
                                    shared.counts.rebound.fetch_add(1, Ordering::Relaxed);
                                    rebound.send(&d.bytes)
                                } else {
                                    shared.counts.to_guest.fetch_add(1, Ordering::Relaxed);
                                    back.send(&d.bytes)
                                }
                            } else {
                                match *host.lock().unwrap() {
                                    Some(to) => front.send_to(&d.bytes, to),
                                    None => Ok(0),
                                }
                            };
                            heap = queue.heap.lock().unwrap();
                        }
                        Some(d) => {
                            let wait = d.at - now;
                            heap = queue.wake.wait_timeout(heap, wait).unwrap().0;
                        }
                        None => {
                            heap = queue
                                .wake
                                .wait_timeout(heap, Duration::from_millis(50))
                                .unwrap()
                                .0;
                        }
                    }
                }
            }));
        }
        Self {
            addr,
            counts,
            stop,
            threads,
            queue,
        }
    }

    /// Where hosts send, as to the guest.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the relay did so far.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }
}

impl std::fmt::Debug for UdpRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpRelay")
            .field("addr", &self.addr)
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.queue.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// An address of this machine outside 127/8 (in 198.18.0.0/15, the range RFC 2544 sets
/// aside for benchmarks), on the loopback interface: traffic to it never leaves the
/// machine, but QUIC's host side treats it as a path of the network. Needs root; removed
/// when dropped.
#[derive(Debug)]
pub struct LocalAddress(std::net::Ipv4Addr);

impl LocalAddress {
    /// Adds a free address of the range to `lo`.
    pub fn add() -> Self {
        let pid = std::process::id();
        for n in 0..64u32 {
            let k = pid.wrapping_mul(64).wrapping_add(n);
            let ip = std::net::Ipv4Addr::new(
                198,
                18 + ((k >> 16) & 1) as u8,
                (k >> 8) as u8,
                k as u8 | 1,
            );
            let ok = std::process::Command::new("ip")
                .args(["addr", "add", &format!("{ip}/32"), "dev", "lo"])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Self(ip);
            }
        }
        panic!("could not add an address in 198.18.0.0/15 to lo (this needs root)");
    }

    /// The address.
    pub fn ip(&self) -> std::net::IpAddr {
        self.0.into()
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.0), "dev", "lo"])
            .status();
    }
}

/// What becomes of a [`TcpRelay`]'s open connections at the fault's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpFault {
    /// Held open, nothing read or written, no FIN: the far end of a forward vanished.
    Silence,
    /// Reset (RST) both ways: a forward torn down, a NAT that forgot the connection.
    Reset,
}

/// Closes `s` with a reset rather than a FIN (SO_LINGER with a zero timeout).
fn reset(s: TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on an open socket we own, with a value of the size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

/// A running TCP relay: hosts connect to [`TcpRelay::addr`] as if it were the guest, and
/// each connection is carried to the guest's port on one of its own.
pub struct TcpRelay {
    addr: SocketAddr,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
    /// Connections the fault struck (silenced or reset).
    pub silenced: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpRelay {
    /// Relays to the guest at `guest` (a loopback address); at `fault`'s time after the
    /// first connection began, every connection open then goes silent or is reset
    /// ([`TcpFault`]). Connections made afterwards are carried as usual.
    pub fn start(guest: SocketAddr, fault: Option<(Duration, TcpFault)>) -> Self {
        assert!(guest.ip().is_loopback(), "the relay only sends to loopback");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, silenced) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (accepted, silenced, stop) = (accepted.clone(), silenced.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut started: Option<Instant> = None;
                // Each connection's two sockets, and whether it is silenced.
                let mut open: Vec<(TcpStream, TcpStream, bool)> = Vec::new();
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((down, _)) = listener.accept()
                        && let Ok(up) = TcpStream::connect(guest)
                    {
                        for s in [&down, &up] {
                            s.set_nonblocking(true).unwrap();
                            s.set_nodelay(true).unwrap();
                        }
                        accepted.fetch_add(1, Ordering::Relaxed);
                        started.get_or_insert_with(Instant::now);
                        open.push((down, up, false));
                    }
                    if let (Some((after, what)), Some(t0)) = (fault, started)
                        && t0.elapsed() >= after
                        && silenced.load(Ordering::Relaxed) == 0
                    {
                        silenced.store(open.len() as u64, Ordering::Relaxed);
                        match what {
                            TcpFault::Silence => {
                                for c in &mut open {
                                    c.2 = true;
                                }
                            }
                            TcpFault::Reset => {
                                for (down, up, _) in open.drain(..) {
                                    reset(down);
                                    reset(up);
                                }
                            }
                        }
                    }
                    let mut moved = false;
                    open.retain_mut(|(down, up, quiet)| {
                        if *quiet {
                            return true;
                        }
                        let mut alive = true;
                        for (from, to) in [(&*down, &*up), (&*up, &*down)] {
                            match (&*from).read(&mut buf) {
                                Ok(0) => alive = false,
                                Ok(n) => {
                                    moved = true;
                                    // Loopback sockets with room: a short wait at worst.
                                    let mut rest = &buf[..n];
                                    while !rest.is_empty() && alive {
                                        match (&*to).write(rest) {
                                            Ok(k) => rest = &rest[k..],
                                            Err(e)
                                                if e.kind() == std::io::ErrorKind::WouldBlock =>
                                            {
                                                std::thread::sleep(Duration::from_millis(1));
                                            }
                                            Err(_) => alive = false,
                                        }
                                    }
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                Err(_) => alive = false,
                            }
                        }
                        alive
                    });
                    if !moved {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        };
        Self {
            addr,
            accepted,
            silenced,
            stop,
            thread: Some(thread),
        }
    }

    /// Where hosts connect, as to the guest.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Debug for TcpRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpRelay")
            .field("addr", &self.addr)
            .field("accepted", &self.accepted)
            .field("silenced", &self.silenced)
            .finish_non_exhaustive()
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind the relay: what comes back is what the faults let through.
    #[test]
    fn the_relay_drops_delays_and_blacks_out_as_told() {
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = echo.recv_from(&mut buf) {
                let _ = echo.send_to(&buf[..n], from);
            }
        });
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let round_trip = |relay: &UdpRelay| {
            let t = Instant::now();
            client.send_to(b"x", relay.addr()).unwrap();
            let mut buf = [0u8; 8];
            client.recv(&mut buf).ok().map(|_| t.elapsed())
        };
        let delayed = UdpRelay::start(
            echo_addr,
            Faults {
                delay: Duration::from_millis(40),
                ..Faults::default()
            },
        );
        let rtt = round_trip(&delayed).expect("delivered");
        assert!(rtt >= Duration::from_millis(80), "{rtt:?}");
        let lossy = UdpRelay::start(
            echo_addr,
            Faults {
                loss: 1.0,
                ..Faults::default()
            },
        );
        assert_eq!(round_trip(&lossy), None);
        assert_eq!(lossy.counts().lost.load(Ordering::Relaxed), 1);
        let dark = UdpRelay::start(
            echo_addr,
            Faults {
                blackout: Some((Duration::ZERO, Duration::from_millis(500))),
                ..Faults::default()
            },
        );
        assert_eq!(round_trip(&dark), None);
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            round_trip(&dark).is_some(),
            "light again after the blackout"
        );
        // One way: the request reaches the echo, its answer does not come back.
        let half = UdpRelay::start(
            echo_addr,
            Faults {
                blackout: Some((Duration::ZERO, Duration::from_secs(5))),
                blackout_way: Way::ToHost,
                ..Faults::default()
            },
        );
        assert_eq!(round_trip(&half), None);
        let c = half.counts();
        assert_eq!(c.to_guest.load(Ordering::Relaxed), 1, "the request went on");
        assert_eq!(
            c.blacked_out.load(Ordering::Relaxed),
            1,
            "the answer did not"
        );
        // 10 kB/s: 20 datagrams of 1000 bytes take 2 s to send; the queue holds 200 ms of
        // them, the rest are dropped.
        let narrow = UdpRelay::start(
            echo_addr,
            Faults {
                rate: Some(10_000),
                ..Faults::default()
            },
        );
        for _ in 0..20 {
            client.send_to(&[0u8; 1000], narrow.addr()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(500));
        let full = narrow.counts().queue_full.load(Ordering::Relaxed);
        assert!((15..=18).contains(&full), "{full} dropped");
    }

    /// A TCP echo server behind the relay: a connection carries bytes both ways until the
    /// silence, then holds still, open; a new connection is carried again.
    #[test]
    fn the_tcp_relay_carries_then_silences_without_closing() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let echo_addr = echo.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in echo.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let mut buf = [0u8; 64];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let relay = TcpRelay::start(
            echo_addr,
            Some((Duration::from_millis(500), TcpFault::Silence)),
        );
        let echoed = |c: &mut TcpStream| -> std::io::Result<[u8; 4]> {
            c.set_read_timeout(Some(Duration::from_millis(700)))?;
            c.write_all(b"ping")?;
            let mut buf = [0u8; 4];
            c.read_exact(&mut buf).map(|()| buf)
        };
        let mut first = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(echoed(&mut first).unwrap(), *b"ping");
        std::thread::sleep(Duration::from_millis(600));
        let mut second = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(
            echoed(&mut second).unwrap(),
            *b"ping",
            "a new connection is carried"
        );
        // The first is silent, neither answered nor closed: the read times out.
        let e = echoed(&mut first).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert_eq!(relay.accepted.load(Ordering::Relaxed), 2);
        assert_eq!(relay.silenced.load(Ordering::Relaxed), 1);

        // A reset: the open connection fails at once (not a FIN's clean end); a new one is
        // carried.
        let relay = TcpRelay::start(
            echo_addr,
            Some((Duration::from_millis(300), TcpFault::Reset)),
        );
        let mut first = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(echoed(&mut first).unwrap(), *b"ping");
        std::thread::sleep(Duration::from_millis(400));
        let e = echoed(&mut first).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
        let mut second = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(echoed(&mut second).unwrap(), *b"ping");
        assert_eq!(relay.silenced.load(Ordering::Relaxed), 1);
    }
}

//! The guest's network side: accept connections (or dial a host), authenticate each with the
//! handshake, then serve one request per stream. A misbehaving stream gets a typed error on
//! that stream; it never takes down its connection, and one connection never takes down
//! another.

use crate::confine::Confinement;
use crate::guest::{Guest, Reply};
use crate::probe;
use pincer_shared::codec::{self, Frame};
use pincer_shared::handshake::{self, ClientHello, ServerHello};
use pincer_shared::identity::Identity;
use pincer_shared::limits::{MAX_HELLO, MAX_INLINE_FILE, MAX_REQUEST_HEADER, MAX_RESPONSE_HEADER};
use pincer_shared::probe::FileStat;
use pincer_shared::setup::Setup;
use pincer_shared::transport::admission::{self, Limits, Pending};
use pincer_shared::transport::stream::{finish, read_header, write_body, write_header};
use pincer_shared::transport::{Link, RecvHalf, SendHalf, TransportError, close_code, quic};
use pincer_shared::{ProtocolVersion, Request, Response, WireError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
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
pub(crate) async fn listen(guest: Arc<Guest>, endpoint: quinn::Endpoint) {
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
pub(crate) async fn dial(
    guest: Arc<Guest>,
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
                quic::client_config(pin, Some(&identity)).map_err(|e| e.to_string())?;
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
                let link = Link::Quic(conn);
                let welcomed = match check_hello_within(&guest, &link, PREAUTH_TIMEOUT).await {
                    Ok(welcome) => welcome.send().await,
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
async fn check_hello_within(
    guest: &Guest,
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
async fn serve(guest: Arc<Guest>, link: Link, version: ProtocolVersion) {
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
async fn check_hello(guest: &Guest, link: &Link) -> Result<Welcome, AuthError> {
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
async fn handle_stream(
    guest: &Guest,
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
    if let Err(e) = guest.check_class(&req) {
        return reply(&mut send, Response::Error(e), None).await;
    }
    tracing::trace!(kind = req.kind_name(), "request");
    match req {
        Request::ReadFile {
            path,
            offset,
            max_len,
        } => send_file(&mut send, &guest.config.confinement, &path, offset, max_len).await,
        Request::Setup(Setup::WriteFile {
            path,
            mode,
            create_dirs,
            append,
        }) => {
            let r = receive_file(&mut recv, body_len, &path, mode, create_dirs, append).await;
            reply(
                &mut send,
                r.map_or_else(Response::Error, |()| Response::Done),
                None,
            )
            .await
        }
        req => match guest.handle(req).await {
            Reply::Msg(m) => reply(&mut send, m, None).await,
            Reply::Body(m, body) => reply(&mut send, m, Some(&body)).await,
        },
    }
}

/// Writes a reply (and its body) and ends the stream. A reply too large for the header
/// limit becomes a `TooLarge` error instead.
async fn reply(
    send: &mut SendHalf,
    msg: Response,
    body: Option<&[u8]>,
) -> Result<(), TransportError> {
    let body_len = body.map_or(0, |b| b.len() as u64);
    match write_header(send, &msg, body_len, MAX_RESPONSE_HEADER).await {
        Err(TransportError::Codec(e)) => {
            write_header(send, &Response::Error(e.into()), 0, MAX_RESPONSE_HEADER).await?;
        }
        Err(e) => return Err(e),
        Ok(()) => {
            if let Some(b) = body {
                write_body(send, b).await?;
            }
        }
    }
    finish(send).await
}

/// Bytes read from disk per chunk of a streamed file.
const FILE_CHUNK: usize = 1024 * 1024;

/// Most bytes read from a file that reports no size (`/proc`, `/sys`): such files are
/// read to their end before the reply, whose header must give the length.
const MAX_UNSIZED_READ: u64 = MAX_INLINE_FILE;

/// What a file read sends after its header.
enum FileBody {
    /// `len` bytes streamed from the open file.
    Stream(std::fs::File, u64),
    /// Bytes already read (files that report no size).
    Read(Vec<u8>),
}

/// Opens (part of) a regular file for a bulk read. Files whose size is known are streamed;
/// files that report size 0 (`/proc`, `/sys`) are read to their end, up to
/// [`MAX_UNSIZED_READ`].
fn open_for_read(
    confinement: &Confinement,
    path: &str,
    offset: u64,
    max_len: Option<u64>,
) -> Result<(FileStat, FileBody), WireError> {
    use std::io::{Read, Seek};
    let (mut f, meta) = probe::open_regular(confinement, path)?
        .ok_or_else(|| WireError::NotFound { path: path.into() })?;
    let stat = probe::file_stat(path, &meta);
    if offset > 0 {
        f.seek(std::io::SeekFrom::Start(offset))
            .map_err(|e| WireError::from_io(path, &e))?;
    }
    let want = max_len.unwrap_or(u64::MAX);
    if meta.len() > 0 {
        return Ok((
            stat,
            FileBody::Stream(f, meta.len().saturating_sub(offset).min(want)),
        ));
    }
    let cap = want.min(MAX_UNSIZED_READ);
    let mut bytes = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| WireError::from_io(path, &e))?;
    if bytes.len() as u64 > cap {
        if cap < want {
            return Err(WireError::TooLarge {
                what: format!(
                    "{path} (it reports no size, so it is read whole before sending; read it in parts with an offset and a length)"
                ),
                limit: cap,
                got: bytes.len() as u64,
            });
        }
        bytes.truncate(cap as usize);
    }
    Ok((stat, FileBody::Read(bytes)))
}

/// Sends (part of) a file as the reply body without holding it in memory: a blocking
/// thread reads 1 MiB chunks (a few chunks ahead) while this task sends them.
async fn send_file(
    send: &mut SendHalf,
    confinement: &Arc<Confinement>,
    path: &str,
    offset: u64,
    max_len: Option<u64>,
) -> Result<(), TransportError> {
    let owned = path.to_owned();
    let c = confinement.clone();
    let opened = tokio::task::spawn_blocking(move || open_for_read(&c, &owned, offset, max_len))
        .await
        .unwrap_or_else(|e| {
            Err(WireError::Internal {
                message: format!("file reader failed: {e}"),
            })
        });
    let (mut file, len) = match opened {
        Ok((stat, FileBody::Read(bytes))) => {
            let len = bytes.len() as u64;
            return reply(send, Response::File { stat, len }, Some(&bytes)).await;
        }
        Ok((stat, FileBody::Stream(file, len))) => {
            write_header(
                send,
                &Response::File { stat, len },
                len,
                MAX_RESPONSE_HEADER,
            )
            .await?;
            (file, len)
        }
        Err(e) => return reply(send, Response::Error(e), None).await,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    // Chunks come back once sent, so a transfer reuses a handful of buffers instead of
    // allocating (and zeroing) one per MiB.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut left = len;
        while left > 0 {
            let want = left.min(FILE_CHUNK as u64);
            let mut chunk = done_rx.try_recv().unwrap_or_default();
            chunk.clear();
            chunk.reserve(want as usize);
            // Into the buffer's spare room, which needs no zeroing first.
            if (&mut file).take(want).read_to_end(&mut chunk).is_err() {
                // The header is out: stop short, and the host sees a truncated body rather
                // than made-up bytes.
                return;
            }
            // A file that shrank meanwhile is padded with zeros so the frame stays
            // well-formed; the header already promised `len` bytes.
            chunk.resize(want as usize, 0);
            left -= chunk.len() as u64;
            if tx.blocking_send(chunk).is_err() {
                return;
            }
        }
    });
    while let Some(chunk) = rx.recv().await {
        write_body(send, &chunk).await?;
        let _ = done_tx.send(chunk);
    }
    let _ = reader.await;
    finish(send).await
}

/// Receives an uploaded file into a temporary sibling and renames it into place, so a
/// reader never sees half a file (unless appending).
async fn receive_file(
    recv: &mut RecvHalf,
    len: u64,
    path: &str,
    mode: u32,
    create_dirs: bool,
    append: bool,
) -> Result<(), WireError> {
    use tokio::io::AsyncReadExt;
    let dest = probe::resolve(path);
    if let Some(dir) = dest.parent()
        && create_dirs
    {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| WireError::from_io(&dir.display().to_string(), &e))?;
    }
    let target = if append {
        dest.clone()
    } else {
        // One temporary file per upload: two uploads to the same path at once must not
        // write into each other's file.
        static UPLOADS: AtomicU64 = AtomicU64::new(0);
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = UPLOADS.fetch_add(1, Ordering::Relaxed);
        dest.with_file_name(format!(".{name}.pincer-{}-{n}", std::process::id()))
    };
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create(append)
        .create_new(!append)
        .append(append)
        .mode(mode & 0o7777)
        .open(&target)
        .await
        .map_err(|e| WireError::from_io(path, &e))?;
    let copied = tokio::io::copy(&mut recv.take(len), &mut f).await;
    let done = match copied {
        Ok(n) if n == len => f.flush().await.map_err(|e| WireError::from_io(path, &e)),
        Ok(n) => Err(WireError::Malformed {
            reason: format!("upload ended after {n} of {len} bytes"),
        }),
        Err(e) => Err(WireError::from_io(path, &e)),
    };
    drop(f);
    if append {
        return done;
    }
    match done {
        Ok(()) => tokio::fs::rename(&target, &dest)
            .await
            .map_err(|e| WireError::from_io(path, &e)),
        Err(e) => {
            let _ = tokio::fs::remove_file(&target).await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Config;
    use pincer_shared::identity::Token;
    use pincer_shared::limits::MAX_DOWNLOAD;
    use pincer_shared::transport::stream::read_body;

    /// A bulk read as the host sees it: the reply and its body.
    async fn read(path: &str, offset: u64, max_len: Option<u64>) -> (Response, Vec<u8>) {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let path = path.to_owned();
        let sender = tokio::spawn(async move {
            let mut send: SendHalf = Box::new(ours);
            let normal = Arc::new(Confinement::normal(std::path::Path::new("/nonexistent")));
            send_file(&mut send, &normal, &path, offset, max_len).await
        });
        let header = tokio::time::timeout(
            Duration::from_secs(5),
            read_header(&mut theirs, MAX_RESPONSE_HEADER),
        )
        .await
        .expect("the guest answers at once")
        .unwrap()
        .unwrap();
        let frame: Frame<Response> = codec::decode(&header, MAX_DOWNLOAD).unwrap();
        let body = read_body(&mut theirs, frame.body_len).await.unwrap();
        sender.await.unwrap().unwrap();
        (frame.msg, body)
    }

    fn refused(reply: &Response, what: &str) {
        match reply {
            Response::Error(WireError::InvalidArgument { message }) => {
                assert!(message.contains(what), "{message}");
            }
            other => panic!("expected a refusal naming {what}, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bulk_reads_refuse_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        refused(
            &read(dir.path().to_str().unwrap(), 0, None).await.0,
            "directory",
        );
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain syscall with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        refused(&read(fifo.to_str().unwrap(), 0, None).await.0, "FIFO");
        refused(&read("/dev/zero", 0, None).await.0, "device");
        // The inline probe refuses the same, without blocking on the FIFO either.
        let normal = Confinement::normal(std::path::Path::new("/nonexistent"));
        assert!(matches!(
            probe::read_file(&normal, fifo.to_str().unwrap(), 10, None),
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[tokio::test]
    async fn files_without_a_size_are_read_to_their_end() {
        let (reply, body) = read("/proc/self/status", 0, None).await;
        let Response::File { stat, len } = reply else {
            panic!("{reply:?}");
        };
        assert_eq!(stat.size, 0, "procfs reports no size");
        assert_eq!(len, body.len() as u64);
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with("Name:") && text.contains("VmRSS"),
            "{text}"
        );
        let (_, part) = read("/proc/self/status", 2, Some(3)).await;
        assert_eq!(part, b"me:");
    }

    #[tokio::test]
    async fn bulk_reads_follow_symlinks_and_honour_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let (reply, body) = read(link.to_str().unwrap(), 0, None).await;
        assert_eq!(body, b"0123456789");
        assert!(matches!(reply, Response::File { stat, len: 10 } if stat.size == 10));
        assert_eq!(read(link.to_str().unwrap(), 3, Some(4)).await.1, b"3456");
        let missing = dir.path().join("missing");
        assert!(matches!(
            read(missing.to_str().unwrap(), 0, None).await.0,
            Response::Error(WireError::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn files_of_many_chunks_arrive_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.bin");
        // Every chunk different, so a reused buffer that kept old bytes would show.
        let bytes: Vec<u8> = (0..(3 * FILE_CHUNK + 12_345))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&file, &bytes).unwrap();
        let (reply, body) = read(file.to_str().unwrap(), 0, None).await;
        assert!(matches!(reply, Response::File { len, .. } if len == bytes.len() as u64));
        assert!(body == bytes, "the body differs from the file");
    }

    #[tokio::test]
    async fn concurrent_uploads_to_one_path_do_not_mix() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("target.bin");
        let bodies = [vec![b'a'; 200_000], vec![b'b'; 200_000]];
        let mut writers = Vec::new();
        let mut uploads = Vec::new();
        for body in &bodies {
            let (w, r) = tokio::io::duplex(8 * 1024);
            writers.push(w);
            let dest = dest.to_str().unwrap().to_owned();
            let len = body.len() as u64;
            uploads.push(tokio::spawn(async move {
                let mut recv: RecvHalf = Box::new(r);
                receive_file(&mut recv, len, &dest, 0o644, false, false).await
            }));
        }
        // Both uploads are under way before either ends.
        let half = bodies[0].len() / 2;
        for (w, body) in writers.iter_mut().zip(&bodies) {
            w.write_all(&body[..half]).await.unwrap();
        }
        for (w, body) in writers.iter_mut().zip(&bodies) {
            w.write_all(&body[half..]).await.unwrap();
        }
        for upload in uploads {
            upload.await.unwrap().expect("each upload succeeds");
        }
        let got = std::fs::read(&dest).unwrap();
        assert!(
            got == bodies[0] || got == bodies[1],
            "the file mixes both uploads"
        );
        let mut names = Vec::new();
        let mut rd = tokio::fs::read_dir(dir.path()).await.unwrap();
        while let Some(e) = rd.next_entry().await.unwrap() {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        assert_eq!(names, ["target.bin"], "temporary files left behind");
        // A short upload fails and leaves nothing behind.
        let (mut w, r) = tokio::io::duplex(1024);
        w.write_all(b"abc").await.unwrap();
        drop(w);
        let mut recv: RecvHalf = Box::new(r);
        let short = receive_file(&mut recv, 10, dest.to_str().unwrap(), 0o644, false, false).await;
        assert!(
            matches!(short, Err(WireError::Malformed { .. })),
            "{short:?}"
        );
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            got,
            "a failed upload replaced the file"
        );
    }

    /// A client endpoint dialling from `ip`, and a connection from it to `guest_addr`.
    async fn dial_from(
        ip: [u8; 4],
        guest_addr: SocketAddr,
        id: &Identity,
    ) -> (quinn::Endpoint, Result<Link, TransportError>) {
        let ep = quinn::Endpoint::client((ip, 0).into()).unwrap();
        let pin = quic::ServerPin::Pinned(id.fingerprint());
        let (cfg, seen) = quic::client_config(pin, None).unwrap();
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
        let guest = Arc::new(Guest::new(Config {
            name: "admission".into(),
            token: token.clone(),
            read_only: true,
            confinement: Arc::new(Confinement::normal(std::path::Path::new("/nonexistent"))),
            display: Some(":65000".into()),
            process_session: None,
        }));
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
        let (cfg, seen) = quic::client_config(pin, None).unwrap();
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
        // A hello that never ends: the guest waits for the rest of it.
        let (mut first, _r) = conn.open_bi().await.unwrap();
        first
            .write_all(&(MAX_HELLO - 1).to_le_bytes())
            .await
            .unwrap();
        first.write_all(&[0; 1000]).await.unwrap();
        // No second stream...
        assert!(
            tokio::time::timeout(Duration::from_millis(300), conn.open_bi())
                .await
                .is_err(),
            "a second stream opened before the hello"
        );
        // ...and of 10 MiB pushed at the first, only about the window is taken in.
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
}

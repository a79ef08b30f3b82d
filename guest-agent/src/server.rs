//! The guest's network side: accept connections (or dial a host), authenticate each with the
//! handshake, then serve one request per stream. A misbehaving stream gets a typed error on
//! that stream; it never takes down its connection, and one connection never takes down
//! another.

use crate::guest::{Guest, Reply};
use crate::probe;
use pincer_shared::codec::{self, Frame};
use pincer_shared::handshake::{self, ClientHello, ServerHello};
use pincer_shared::identity::Identity;
use pincer_shared::limits::{MAX_HELLO, MAX_REQUEST_HEADER, MAX_RESPONSE_HEADER};
use pincer_shared::probe::FileStat;
use pincer_shared::setup::Setup;
use pincer_shared::transport::stream::{finish, read_header, write_body, write_header};
use pincer_shared::transport::{Link, RecvHalf, SendHalf, TransportError, close_code, quic};
use pincer_shared::{ProtocolVersion, Request, Response, WireError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

/// Most connections served at once; more are refused at the QUIC level.
const MAX_CONNECTIONS: usize = 64;
/// Most requests in flight on one connection.
const MAX_IN_FLIGHT: usize = 256;
/// How long a new connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections on `endpoint` until it is closed.
pub(crate) async fn listen(guest: Arc<Guest>, endpoint: quinn::Endpoint) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(peer = %incoming.remote_address(), "refusing connection: {MAX_CONNECTIONS} already open");
            incoming.refuse();
            continue;
        };
        let guest = guest.clone();
        tokio::spawn(async move {
            let peer = incoming.remote_address();
            match incoming.await {
                Ok(conn) => serve(guest, Link::Quic(conn)).await,
                Err(e) => tracing::info!(%peer, "connection failed during TLS: {e}"),
            }
            drop(permit);
        });
    }
}

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
    loop {
        let attempt = async {
            let (cfg, seen) = quic::client_config(pin, Some(&identity))?;
            quic::connect(&endpoint, addr, cfg, &seen, pin).await
        };
        match attempt.await {
            Ok(conn) => {
                tracing::info!(host = %addr, "connected to host");
                backoff = Duration::from_millis(250);
                serve(guest.clone(), Link::Quic(conn)).await;
                tracing::info!(host = %addr, "connection to host ended; redialling");
            }
            Err(e) => {
                tracing::warn!(host = %addr, "cannot reach host: {e}; retrying in {backoff:?}");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Authenticates a connection, then serves its streams until it closes.
async fn serve(guest: Arc<Guest>, link: Link) {
    let peer = link.remote_addr();
    let version = match tokio::time::timeout(HELLO_TIMEOUT, authenticate(&guest, &link)).await {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            tracing::warn!(%peer, "handshake failed: {e}");
            // Let the rejection reach the peer before closing.
            tokio::time::sleep(Duration::from_millis(50)).await;
            link.close(close_code::HANDSHAKE, "handshake failed");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, "no hello within {HELLO_TIMEOUT:?}; closing");
            link.close(close_code::HANDSHAKE, "no hello");
            return;
        }
    };
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

/// Reads the hello from the first stream and answers it.
async fn authenticate(guest: &Guest, link: &Link) -> Result<ProtocolVersion, String> {
    let (mut send, mut recv) = link.accept().await.map_err(|e| e.to_string())?;
    let header = read_header(&mut recv, MAX_HELLO)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("stream closed before the hello")?;
    let hello: ClientHello = match codec::decode(&header, 0) {
        Ok(Frame { msg, .. }) => msg,
        Err(e) => {
            // Not a hello: whatever it is, it is a request before authentication.
            let _ = reply(&mut send, Response::Error(WireError::Unauthenticated), None).await;
            return Err(format!("first stream was not a hello ({e})"));
        }
    };
    let exporter = link.exporter().map_err(|e| e.to_string())?;
    let info = guest.info().await;
    let (answer, version) = handshake::accept(&hello, &guest.config.token, &exporter, info);
    write_header(&mut send, &answer, 0, MAX_HELLO)
        .await
        .map_err(|e| e.to_string())?;
    let _ = finish(&mut send).await;
    match (answer, version) {
        (ServerHello::Accepted(_), Some(v)) => Ok(v),
        (ServerHello::Rejected(r), _) => Err(format!("rejected host '{}': {r:?}", hello.host)),
        (ServerHello::Accepted(_), None) => Err("accepted without a version".into()),
    }
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
        } => send_file(&mut send, &path, offset, max_len).await,
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

/// Streams (part of) a file as the reply body without holding it in memory: a blocking
/// thread reads 1 MiB chunks (a few chunks ahead) while this task sends them.
async fn send_file(
    send: &mut SendHalf,
    path: &str,
    offset: u64,
    max_len: Option<u64>,
) -> Result<(), TransportError> {
    let owned = path.to_owned();
    let opened = tokio::task::spawn_blocking(move || -> Result<_, WireError> {
        use std::io::Seek;
        let path = owned.as_str();
        let stat: FileStat = probe::stat(path)?;
        if !stat.exists {
            return Err(WireError::NotFound { path: path.into() });
        }
        let mut f =
            std::fs::File::open(probe::resolve(path)).map_err(|e| WireError::from_io(path, &e))?;
        if offset > 0 {
            f.seek(std::io::SeekFrom::Start(offset))
                .map_err(|e| WireError::from_io(path, &e))?;
        }
        let len = stat
            .size
            .saturating_sub(offset)
            .min(max_len.unwrap_or(u64::MAX));
        Ok((f, stat, len))
    })
    .await
    .unwrap_or_else(|e| {
        Err(WireError::Internal {
            message: format!("file reader failed: {e}"),
        })
    });
    let (mut file, stat, len) = match opened {
        Ok(v) => v,
        Err(e) => return reply(send, Response::Error(e), None).await,
    };
    write_header(
        send,
        &Response::File { stat, len },
        len,
        MAX_RESPONSE_HEADER,
    )
    .await?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let reader = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut left = len;
        while left > 0 {
            let mut chunk = vec![0u8; left.min(FILE_CHUNK as u64) as usize];
            let mut filled = 0;
            while filled < chunk.len() {
                match file.read(&mut chunk[filled..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => filled += n,
                }
            }
            // A file that shrank meanwhile is padded with zeros so the frame stays
            // well-formed; the header already promised `len` bytes.
            left -= chunk.len() as u64;
            if tx.blocking_send(chunk).is_err() {
                return;
            }
        }
    });
    while let Some(chunk) = rx.recv().await {
        write_body(send, &chunk).await?;
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
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        dest.with_file_name(format!(".{name}.pincer-{}", std::process::id()))
    };
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .truncate(!append)
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

//! What travels on a request's stream besides the headers: the body a request brings
//! ([`RequestBody`], an upload's bytes, read straight from the stream) and the reply with
//! whatever follows it ([`Reply`]: nothing, bytes in memory, or a file streamed from disk).
//! Bulk bytes never pass through serde, and neither an upload nor a large read is ever held
//! in memory whole.

use crate::record::Events;
use crate::reply::reply;
use crate::video::Frames;
use pincer_shared::Response;
use pincer_shared::limits::MAX_RESPONSE_HEADER;
use pincer_shared::transport::stream::{finish, write_body, write_header};
use pincer_shared::transport::{SendHalf, TransportError};
use std::fmt;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite};

/// Bytes read from disk per chunk of a streamed file.
pub(crate) const FILE_CHUNK: usize = 1024 * 1024;

/// The bytes that follow a request's header on its stream (only uploads have any).
pub struct RequestBody<'a> {
    /// Where they are read from; `None` for a request without a body.
    stream: Option<&'a mut (dyn AsyncRead + Send + Unpin)>,
    /// How many the header announced.
    len: u64,
}

impl fmt::Debug for RequestBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody")
            .field("len", &self.len)
            .finish()
    }
}

impl<'a> RequestBody<'a> {
    /// The `len` bytes that follow the header on `stream`.
    pub fn new(stream: &'a mut (dyn AsyncRead + Send + Unpin), len: u64) -> Self {
        Self {
            stream: Some(stream),
            len,
        }
    }

    /// No body at all.
    pub fn none() -> Self {
        Self {
            stream: None,
            len: 0,
        }
    }

    /// How many bytes the header announced.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copies the body into `out`; returns how many bytes came, fewer than announced when
    /// the stream ended early.
    pub(crate) async fn copy_to<W: AsyncWrite + Unpin + ?Sized>(
        self,
        out: &mut W,
    ) -> std::io::Result<u64> {
        match self.stream {
            Some(stream) => tokio::io::copy(&mut stream.take(self.len), out).await,
            None => Ok(0),
        }
    }
}

/// What a handled request answers: a header, and the bytes that follow it.
#[derive(Debug)]
pub enum Reply {
    /// Just a header.
    Msg(Response),
    /// A header and bytes in memory (screenshots, files that report no size).
    Bytes(Response, Vec<u8>),
    /// A header and a file read from disk while it is sent (bulk reads).
    Stream(Response, FileStream),
    /// Video frames, each a header and its image, as they are grabbed.
    Frames(Frames),
    /// Input events, in batches as they happen.
    Events(Events),
}

impl From<Result<Response, pincer_shared::WireError>> for Reply {
    fn from(r: Result<Response, pincer_shared::WireError>) -> Self {
        Self::Msg(r.unwrap_or_else(Response::Error))
    }
}

impl Reply {
    /// Writes the reply to `send` and ends the stream. A header too large for the limit
    /// becomes a `TooLarge` error instead.
    pub async fn send(self, send: &mut SendHalf) -> Result<(), TransportError> {
        match self {
            Self::Msg(msg) => reply(send, msg, None).await,
            Self::Bytes(msg, body) => reply(send, msg, Some(&body)).await,
            Self::Stream(msg, file) => {
                write_header(send, &msg, file.len, MAX_RESPONSE_HEADER).await?;
                file.send(send).await?;
                finish(send).await
            }
            Self::Frames(frames) => frames.send(send).await,
            Self::Events(events) => events.send(send).await,
        }
    }
}

/// `len` bytes of an open file, from where it is positioned, to be sent as a reply body.
#[derive(Debug)]
pub struct FileStream {
    file: std::fs::File,
    len: u64,
}

impl FileStream {
    /// The next `len` bytes of `file`.
    pub(crate) fn new(file: std::fs::File, len: u64) -> Self {
        Self { file, len }
    }

    /// Sends the bytes without holding them in memory: a blocking thread reads 1 MiB
    /// chunks (a few chunks ahead) while this task sends them.
    async fn send(self, send: &mut SendHalf) -> Result<(), TransportError> {
        let Self { mut file, len } = self;
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
                    // The header is out: stop short, and the host sees a truncated body
                    // rather than made-up bytes.
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
        Ok(())
    }
}

//! Frames over byte streams: write a header (and a body), read a header with its limit,
//! read a body without trusting its announced length for allocation.

use super::TransportError;
use crate::codec::{self, PREFIX_LEN};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes allocated up front for a body, however long it claims to be; the buffer grows as
/// bytes actually arrive.
const BODY_PREALLOC: u64 = 64 * 1024 * 1024;

/// Writes one header frame announcing `body_len` bytes of body to follow.
pub async fn write_header<W: AsyncWrite + Unpin + ?Sized, T: Serialize>(
    w: &mut W,
    msg: &T,
    body_len: u64,
    limit: u32,
) -> Result<(), TransportError> {
    let bytes = codec::encode(msg, body_len, limit)?;
    w.write_all(&bytes)
        .await
        .map_err(|e| TransportError::Write(e.to_string()))
}

/// Writes body bytes after a header.
pub async fn write_body<W: AsyncWrite + Unpin + ?Sized>(
    w: &mut W,
    body: &[u8],
) -> Result<(), TransportError> {
    w.write_all(body)
        .await
        .map_err(|e| TransportError::Write(e.to_string()))
}

/// Ends the writing half, so the peer sees the end of the stream.
pub async fn finish<W: AsyncWrite + Unpin + ?Sized>(w: &mut W) -> Result<(), TransportError> {
    w.shutdown()
        .await
        .map_err(|e| TransportError::Write(e.to_string()))
}

/// Reads one header (without its prefix), refusing lengths above `limit` before allocating.
/// Returns `Ok(None)` when the stream ends cleanly before any byte.
pub async fn read_header<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    limit: u32,
) -> Result<Option<Vec<u8>>, TransportError> {
    let mut prefix = [0u8; PREFIX_LEN];
    let mut got = 0;
    while got < PREFIX_LEN {
        let n = r
            .read(&mut prefix[got..])
            .await
            .map_err(|e| TransportError::Read(e.to_string()))?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(TransportError::Truncated)
            };
        }
        got += n;
    }
    let len = codec::header_len(prefix, limit)?;
    let mut header = vec![0u8; len];
    read_exact(r, &mut header).await?;
    Ok(Some(header))
}

/// Reads exactly `len` body bytes.
pub async fn read_body<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    len: u64,
) -> Result<Vec<u8>, TransportError> {
    let mut body = Vec::with_capacity(len.min(BODY_PREALLOC) as usize);
    let mut take = r.take(len);
    take.read_to_end(&mut body)
        .await
        .map_err(|e| TransportError::Read(e.to_string()))?;
    if (body.len() as u64) < len {
        return Err(TransportError::Truncated);
    }
    Ok(body)
}

async fn read_exact<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
) -> Result<(), TransportError> {
    match r.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(TransportError::Truncated),
        Err(e) => Err(TransportError::Read(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Request;

    #[tokio::test]
    async fn header_and_body_round_trip_over_a_pipe() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            write_header(&mut a, &Request::Ping, 5, 1024).await.unwrap();
            write_body(&mut a, b"hello").await.unwrap();
            finish(&mut a).await.unwrap();
        });
        let header = read_header(&mut b, 1024).await.unwrap().unwrap();
        let frame = codec::decode_request(&header);
        // Ping takes no body, so the codec refuses the announced one.
        assert!(frame.is_err());
        let frame: codec::Frame<Request> = codec::decode(&header, 10).unwrap();
        assert_eq!(frame.body_len, 5);
        assert_eq!(read_body(&mut b, frame.body_len).await.unwrap(), b"hello");
        assert!(read_header(&mut b, 1024).await.unwrap().is_none());
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn short_streams_are_truncated_not_panics() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[10, 0]).await.unwrap();
        drop(a);
        assert!(matches!(
            read_header(&mut b, 1024).await,
            Err(TransportError::Truncated)
        ));

        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&[0, 0, 0, 1]).await.unwrap();
        drop(a);
        assert!(matches!(
            read_header(&mut b, 1024).await,
            Err(TransportError::Codec(_))
        ));

        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(b"abc").await.unwrap();
        drop(a);
        assert!(matches!(
            read_body(&mut b, 10).await,
            Err(TransportError::Truncated)
        ));
    }
}

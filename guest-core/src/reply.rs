//! One reply frame on a request's stream: the header (and the bytes after it, if any),
//! then the end of the stream. Every reply goes out through here, the streamed ones
//! (`video`, `record`) for their errors, so a reply too large for the header limit is an
//! error on every path.

use pincer_shared::Response;
use pincer_shared::limits::MAX_RESPONSE_HEADER;
use pincer_shared::transport::stream::{finish, write_body, write_header};
use pincer_shared::transport::{SendHalf, TransportError};

/// Writes a reply (and its body) and ends the stream. A reply too large for the header
/// limit becomes a `TooLarge` error instead.
pub(crate) async fn reply(
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

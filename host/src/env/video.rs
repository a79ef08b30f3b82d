//! Video streams from a guest: one request whose stream carries a frame each time the
//! guest's screen changed (and one when it starts), each stamped with the guest's clock,
//! until the requested time is up. Dropping the stream stops the guest's grabs.

use super::{ClientError, Environment, Failure, Screenshot, Session, request};
use pincer_shared::codec;
use pincer_shared::limits::{MAX_IMAGE_EDGE, MAX_RESPONSE_HEADER};
use pincer_shared::observe::VideoRequest;
use pincer_shared::transport::RecvHalf;
use pincer_shared::transport::stream::{read_body, read_header};
use pincer_shared::{Request, Response};
use std::sync::Arc;
use std::time::Instant;

/// One frame of a video stream.
#[derive(Debug, Clone)]
pub struct VideoFrame {
    /// The guest's monotonic clock when the grab began, in microseconds: the clock of a
    /// ping's `guest_us` ([`Environment::guest_clock`]).
    pub guest_us: u64,
    /// The image.
    pub shot: Screenshot,
}

/// A video stream being received. Frames come as the guest's screen changes; none come
/// while it is still.
pub struct VideoStream {
    env: String,
    /// Keeps the connection the stream lives on.
    _session: Arc<Session>,
    recv: RecvHalf,
    /// The guest's clock at the first frame.
    started_us: u64,
    /// The first frame, read when the stream was opened.
    first: Option<VideoFrame>,
}

impl std::fmt::Debug for VideoStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VideoStream")
            .field("env", &self.env)
            .finish_non_exhaustive()
    }
}

impl VideoStream {
    /// The guest's clock when the first frame was grabbed, in microseconds.
    pub fn started_us(&self) -> u64 {
        self.started_us
    }

    /// The next frame, waiting as long as the screen stays still; `None` once the guest
    /// ended the stream (the requested time is up).
    pub async fn next(&mut self) -> Result<Option<VideoFrame>, ClientError> {
        if let Some(first) = self.first.take() {
            return Ok(Some(first));
        }
        read_frame(&self.env, &mut self.recv).await
    }
}

/// Reads one frame from `recv`: `None` at the end of the stream.
async fn read_frame(env: &str, recv: &mut RecvHalf) -> Result<Option<VideoFrame>, ClientError> {
    let header = match read_header(recv, MAX_RESPONSE_HEADER).await {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(e) => return Err(lost(env, e.to_string())),
    };
    let frame = codec::decode_response(&header).map_err(|e| protocol(env, e.to_string()))?;
    frame_body(env, frame, recv).await.map(Some)
}

/// The frame whose header is `frame`, with its image read from `recv`.
async fn frame_body(
    env: &str,
    frame: codec::Frame<Response>,
    recv: &mut RecvHalf,
) -> Result<VideoFrame, ClientError> {
    let meta = match frame.msg {
        Response::VideoFrame(meta) => meta,
        Response::Error(source) => {
            return Err(ClientError::Guest {
                env: env.into(),
                source,
            });
        }
        other => {
            return Err(protocol(
                env,
                format!("unexpected reply to video: {other:?}"),
            ));
        }
    };
    let (w, h) = (meta.meta.width, meta.meta.height);
    if w > MAX_IMAGE_EDGE || h > MAX_IMAGE_EDGE {
        return Err(protocol(
            env,
            format!("a {w}x{h} video frame exceeds the largest edge, {MAX_IMAGE_EDGE}"),
        ));
    }
    let bytes = read_body(recv, frame.body_len)
        .await
        .map_err(|e| lost(env, e.to_string()))?;
    Ok(VideoFrame {
        guest_us: meta.guest_us,
        shot: Screenshot {
            meta: meta.meta,
            bytes,
        },
    })
}

fn lost(env: &str, reason: String) -> ClientError {
    ClientError::ConnectionLost {
        env: env.into(),
        what: "video",
        reason,
    }
}

fn protocol(env: &str, message: String) -> ClientError {
    ClientError::Protocol {
        env: env.into(),
        message,
    }
}

impl Environment {
    /// Starts a video stream as `req` asks, and waits for its first frame (within the
    /// screenshot deadline). Refusals (bad values, a guest without video or with every
    /// stream taken) come back as [`ClientError::Guest`].
    pub async fn video(&self, req: VideoRequest) -> Result<VideoStream, ClientError> {
        let deadline = self.deadlines.screenshot;
        let run = async {
            let session = self.session(Instant::now() + deadline).await?;
            let (frame, mut recv) = match request(&session.link, &Request::Video(req), None).await {
                Ok(r) => r,
                Err(Failure::Transport(e)) => return Err(lost(&self.name, e.to_string())),
                Err(Failure::Codec(message)) => return Err(protocol(&self.name, message)),
            };
            let first = frame_body(&self.name, frame, &mut recv).await?;
            Ok(VideoStream {
                env: self.name.clone(),
                _session: session,
                recv,
                started_us: first.guest_us,
                first: Some(first),
            })
        };
        tokio::time::timeout(deadline, run)
            .await
            .unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    env: self.name.clone(),
                    what: "video",
                    after: deadline,
                })
            })
    }

    /// The guest's monotonic clock now, in microseconds (the clock video frames are
    /// stamped with), from a ping: the midpoint of the round trip, and the round trip's
    /// half as its uncertainty.
    pub async fn guest_clock(&self) -> Result<(u64, std::time::Duration), ClientError> {
        let t = Instant::now();
        match self.call(&Request::Ping, None, self.deadlines.call).await? {
            (Response::Pong { guest_us }, _) => Ok((guest_us, t.elapsed() / 2)),
            (r, _) => Err(self.unexpected("ping", &r)),
        }
    }
}

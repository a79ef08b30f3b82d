//! Video streams of the screen: a producer task grabs a frame when the stream starts and
//! then only when the platform's [`Damage`](crate::platform::Damage) count moved since the
//! last grab, at most `max_fps` a second, and hands each encoded frame to the stream's
//! writer ([`Frames`]) through a channel one frame deep. A host that reads slowly gets
//! fewer frames (the producer waits, ticks are skipped); one that stops reading is cut off
//! after [`STALL`], so it holds its place among the [`MAX_VIDEO_STREAMS`] no longer.
//!
//! [`MAX_VIDEO_STREAMS`]: pincer_shared::limits::MAX_VIDEO_STREAMS

use crate::encode::FrameEncoder;
use crate::platform::{Damage, Screen};
use crate::reply::reply;
use crate::subsystem::Sub;
use pincer_shared::limits::MAX_RESPONSE_HEADER;
use pincer_shared::observe::{VideoFrame, VideoRequest};
use pincer_shared::transport::stream::{finish, write_body, write_header};
use pincer_shared::transport::{SendHalf, TransportError};
use pincer_shared::{Response, WireError};
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio::time::MissedTickBehavior;

/// Longest one frame may wait to be taken by the host before the stream is ended.
const STALL: Duration = Duration::from_secs(10);

/// One encoded frame, or why the stream stopped.
type Item = Result<(VideoFrame, Vec<u8>), WireError>;

/// The screen and the encoder its frames go through, which keeps its buffers between
/// captures.
#[derive(Debug)]
pub(crate) struct Shots<S> {
    pub(crate) screen: S,
    pub(crate) encoder: FrameEncoder,
}

/// What a producer needs from its guest.
pub(crate) struct Sources<S, D> {
    pub(crate) screen: Sub<Shots<S>>,
    pub(crate) damage: Sub<D>,
    /// The clock of `Pong`'s `guest_us`.
    pub(crate) started: Instant,
}

/// The frames of one stream, as they are produced; the reply to a video request.
pub struct Frames {
    rx: mpsc::Receiver<Item>,
}

impl fmt::Debug for Frames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frames").finish_non_exhaustive()
    }
}

impl Frames {
    /// Starts producing the frames `req` (validated, its frame checked) asks for; `slot` is this stream's place
    /// among the guest's video streams, held until the producer ends.
    pub(crate) fn start<S: Screen, D: Damage>(
        req: VideoRequest,
        sources: Sources<S, D>,
        slot: OwnedSemaphorePermit,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let _slot = slot;
            produce(req, sources, tx).await;
        });
        Self { rx }
    }

    /// The next frame or error as the producer made it; `None` once it ended.
    #[cfg(test)]
    pub(crate) async fn next(&mut self) -> Option<Item> {
        self.rx.recv().await
    }

    /// Writes every frame to `send` as it comes, and ends the stream when the producer
    /// does (its time is up, or it failed: then with the error as the last reply). A frame
    /// the host does not take within [`STALL`] ends the stream.
    pub(crate) async fn send(mut self, send: &mut SendHalf) -> Result<(), TransportError> {
        while let Some(item) = self.rx.recv().await {
            let (frame, bytes) = match item {
                Ok(f) => f,
                Err(e) => return reply(send, Response::Error(e), None).await,
            };
            let write = async {
                let header = Response::VideoFrame(frame);
                write_header(send, &header, bytes.len() as u64, MAX_RESPONSE_HEADER).await?;
                write_body(send, &bytes).await
            };
            tokio::time::timeout(STALL, write).await.map_err(|_| {
                TransportError::Write(format!(
                    "the host took no video frame for {} s",
                    STALL.as_secs()
                ))
            })??;
        }
        finish(send).await
    }
}

/// Grabs frames into `tx` until the request's time is up, the writer is gone or a grab
/// fails.
async fn produce<S: Screen, D: Damage>(
    req: VideoRequest,
    sources: Sources<S, D>,
    tx: mpsc::Sender<Item>,
) {
    let end = tokio::time::Instant::now() + Duration::from_millis(req.duration_ms);
    let shot = req.frame();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / req.max_fps);
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    // The damage count at the last grab; `None` before the first, which is always taken.
    let mut grabbed: Option<u64> = None;
    while tokio::time::timeout_at(end, tick.tick()).await.is_ok() {
        let item = async {
            // Read before the grab: a change while grabbing moves the count again, and
            // costs at most one frame more, never one missed.
            let count = sources.damage.run(|d| d.changes()).await?;
            if grabbed == Some(count) {
                return Ok(None);
            }
            let guest_us = sources.started.elapsed().as_micros() as u64;
            let (meta, bytes) = sources
                .screen
                .run(move |s| s.screen.capture(&shot, &mut s.encoder))
                .await?;
            grabbed = Some(count);
            Ok(Some((VideoFrame { guest_us, meta }, bytes)))
        }
        .await;
        let failed = item.is_err();
        let item = match item {
            Ok(None) => continue,
            Ok(Some(frame)) => Ok(frame),
            Err(e) => Err(e),
        };
        match tokio::time::timeout_at(end, tx.send(item)).await {
            Ok(Ok(())) if !failed => {}
            _ => return,
        }
    }
}

//! Video files from a guest's video stream ([`Environment::video`]): each frame is kept as
//! a file next to the output with its guest timestamp (a JPEG as it came, raw pixels as a
//! PNG), and an `ffmpeg` child then muxes them into an H.264 MP4 through its concat demuxer, each frame lasting until the
//! next one came (variable frame rate), so a still screen costs one frame however long it
//! stays still and the video's clock is the guest's.

use crate::env::{ClientError, Environment, VideoFrame};
use crate::observe::{ObserveError, raw_to_png};
use pincer_shared::limits::MAX_VIDEO_DURATION_MS;
use pincer_shared::observe::{ImageFormat, VideoRequest};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Why a video could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VideoError {
    /// The guest refused the stream or the connection failed.
    #[error(transparent)]
    Env(#[from] ClientError),
    /// A frame in a format MP4 files are not made from here.
    #[error("video files are made from JPEG or raw frames; this frame is {0:?}")]
    Format(ImageFormat),
    /// A raw frame whose pixels do not decode.
    #[error("a raw video frame: {0}")]
    Pixels(#[from] ObserveError),
    /// Writing the frames or the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `ffmpeg` could not be run.
    #[error("cannot run ffmpeg: {0}; install it (Debian: apt-get install ffmpeg)")]
    NoFfmpeg(std::io::Error),
    /// `ffmpeg` failed.
    #[error("ffmpeg failed ({status}) making {out}: {stderr}")]
    Ffmpeg {
        /// The file it was making.
        out: PathBuf,
        /// How it exited.
        status: std::process::ExitStatus,
        /// What it said.
        stderr: String,
    },
}

/// What a recording holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Frames in the file.
    pub frames: usize,
    /// Bytes of the frames as they came from the guest.
    pub frame_bytes: u64,
    /// The video's length in seconds (from the first frame to the end of the recording).
    pub seconds: f64,
    /// The guest's clock at the first frame, in microseconds.
    pub first_us: u64,
}

/// Frames being collected for one video file: JPEG files in a directory next to the
/// output, removed when the recording is dropped.
#[derive(Debug)]
pub struct Recording {
    dir: PathBuf,
    /// Each frame's guest timestamp, in order.
    stamps: Vec<u64>,
    frame_bytes: u64,
    /// The frames' file type, from the first frame (a stream sends one format).
    ext: &'static str,
}

impl Recording {
    /// A recording whose frames wait in a directory beside `out`.
    pub fn new(out: &Path) -> Result<Self, VideoError> {
        let mut name = out.file_name().unwrap_or_default().to_owned();
        name.push(".frames");
        let dir = out.with_file_name(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| VideoError::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(Self {
            dir,
            stamps: Vec::new(),
            frame_bytes: 0,
            ext: "jpg",
        })
    }

    /// Adds a frame; frames must come in the guest's order, as a stream delivers them, and
    /// in one format.
    pub fn push(&mut self, frame: &VideoFrame) -> Result<(), VideoError> {
        let (ext, bytes) = match frame.shot.meta.format {
            ImageFormat::Jpeg { .. } => ("jpg", std::borrow::Cow::Borrowed(&frame.shot.bytes)),
            ImageFormat::Raw { .. } => ("png", std::borrow::Cow::Owned(raw_to_png(&frame.shot)?)),
            other => return Err(VideoError::Format(other)),
        };
        if self.stamps.is_empty() {
            self.ext = ext;
        } else if ext != self.ext {
            return Err(VideoError::Format(frame.shot.meta.format));
        }
        let path = self.dir.join(frame_name(self.stamps.len(), ext));
        std::fs::write(&path, &*bytes).map_err(|source| VideoError::Io { path, source })?;
        self.stamps.push(frame.guest_us);
        self.frame_bytes += frame.shot.bytes.len() as u64;
        Ok(())
    }

    /// The frame last pushed at or before the guest's clock read `guest_us` (the screen
    /// as it was then), as a file of the recording; `None` before the first frame.
    pub fn frame_at(&self, guest_us: u64) -> Option<PathBuf> {
        let i = self
            .stamps
            .partition_point(|s| *s <= guest_us)
            .checked_sub(1)?;
        Some(self.dir.join(frame_name(i, self.ext)))
    }

    /// Writes the MP4 `out`, the last frame lasting until the guest's clock reads `end_us`
    /// (at least a millisecond); `None` when no frame came.
    pub fn finish(self, end_us: u64, out: &Path) -> Result<Option<Recorded>, VideoError> {
        let (Some(&first_us), Some(&last_us)) = (self.stamps.first(), self.stamps.last()) else {
            return Ok(None);
        };
        let end_us = end_us.max(last_us + 1000);
        let list = self.dir.join("frames.ffconcat");
        std::fs::write(&list, concat_list(&self.stamps, end_us, self.ext)).map_err(|source| {
            VideoError::Io {
                path: list.clone(),
                source,
            }
        })?;
        let output = Command::new("ffmpeg")
            .args([
                "-hide_banner",
                "-loglevel",
                "error",
                "-y",
                "-f",
                "concat",
                "-safe",
                "0",
            ])
            .arg("-i")
            .arg(&list)
            // Even sizes for 4:2:0, which every player takes.
            .args(["-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-fps_mode", "vfr"])
            .args([
                "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
            ])
            .args(["-movflags", "+faststart"])
            .arg(out)
            .output()
            .map_err(VideoError::NoFfmpeg)?;
        if !output.status.success() {
            return Err(VideoError::Ffmpeg {
                out: out.into(),
                status: output.status,
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(Some(Recorded {
            frames: self.stamps.len(),
            frame_bytes: self.frame_bytes,
            seconds: (end_us - first_us) as f64 / 1e6,
            first_us,
        }))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn frame_name(i: usize, ext: &str) -> String {
    format!("frame-{i:07}.{ext}")
}

/// The concat demuxer's script: each frame lasts until the next (the last until `end_us`).
/// The demuxer takes the last entry's duration only from an entry after it, so the last
/// frame is named twice.
fn concat_list(stamps: &[u64], end_us: u64, ext: &str) -> String {
    let mut s = String::from("ffconcat version 1.0\n");
    let ends = stamps.iter().skip(1).chain(std::iter::once(&end_us));
    for (i, (start, end)) in stamps.iter().zip(ends).enumerate() {
        let _ = writeln!(
            s,
            "file '{}'\nduration {:.6}",
            frame_name(i, ext),
            end.saturating_sub(*start) as f64 / 1e6
        );
    }
    let _ = writeln!(s, "file '{}'", frame_name(stamps.len() - 1, ext));
    s
}

/// Records `env`'s screen as `req` asks into the MP4 `out`: every frame the guest sends
/// until its time is up. `None` when the guest sent no frame.
pub async fn record(
    env: &Environment,
    req: VideoRequest,
    out: &Path,
) -> Result<Option<Recorded>, VideoError> {
    let mut recording = Recording::new(out)?;
    let mut stream = env.video(req).await?;
    let mut first = None;
    while let Some(frame) = stream.next().await? {
        first.get_or_insert(frame.guest_us);
        recording.push(&frame)?;
    }
    let end_us = first.unwrap_or_default() + req.duration_ms * 1000;
    finish_off_thread(recording, end_us, out).await
}

/// Writes the MP4 of `recording` off the async threads.
async fn finish_off_thread(
    recording: Recording,
    end_us: u64,
    out: &Path,
) -> Result<Option<Recorded>, VideoError> {
    let out = out.to_owned();
    tokio::task::spawn_blocking(move || recording.finish(end_us, &out))
        .await
        .map_err(|e| VideoError::Io {
            path: PathBuf::from("ffmpeg"),
            source: std::io::Error::other(e),
        })?
}

/// A recording of an environment's screen in the background, until [`Recorder::stop`]
/// (the runner's video of a task run).
#[derive(Debug)]
pub struct Recorder {
    /// The guest's clock at the first frame: where the video starts.
    started_us: u64,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<Option<Recorded>, VideoError>>,
}

impl Recorder {
    /// Starts recording `env` at up to `max_fps` frames a second (raw+zstd, the cheapest
    /// for the guest) into the MP4 `out`; returns once the first frame came.
    pub async fn start(
        env: Arc<Environment>,
        max_fps: u32,
        out: PathBuf,
    ) -> Result<Self, VideoError> {
        let mut recording = Recording::new(&out)?;
        let mut stream = env
            .video(VideoRequest {
                max_fps,
                format: ImageFormat::Raw { zstd: Some(1) },
                max_size: None,
                duration_ms: MAX_VIDEO_DURATION_MS,
            })
            .await?;
        let started_us = stream.started_us();
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut last = 0;
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    frame = stream.next() => match frame? {
                        Some(frame) => {
                            last = frame.guest_us;
                            recording.push(&frame)?;
                        }
                        None => break,
                    },
                }
            }
            // The last frame lasts until the recording stopped, on the guest's clock.
            let end_us = match env.guest_clock().await {
                Ok((now, _)) => now,
                Err(_) => last,
            };
            finish_off_thread(recording, end_us, &out).await
        });
        Ok(Self {
            started_us,
            stop,
            task,
        })
    }

    /// The guest's clock at the video's first frame, in microseconds.
    pub fn started_us(&self) -> u64 {
        self.started_us
    }

    /// Stops recording and writes the file.
    pub async fn stop(self) -> Result<Option<Recorded>, VideoError> {
        let _ = self.stop.send(());
        self.task.await.map_err(|e| VideoError::Io {
            path: PathBuf::from("the recording task"),
            source: std::io::Error::other(e),
        })?
    }
}

/// The last moments of an environment's screen, kept from a video stream in the
/// background for agents that see them (`--observe video=2s@5fps`): frames of the last
/// `window`, and the one before it, which shows the screen at the window's start.
#[derive(Debug)]
pub struct Recent {
    frames: Arc<std::sync::Mutex<std::collections::VecDeque<VideoFrame>>>,
    task: JoinHandle<()>,
}

impl Recent {
    /// Starts keeping `env`'s last `window_ms` at up to `fps` frames a second (raw+zstd,
    /// fitted to `max_size` on the guest); returns once the first frame came.
    pub async fn start(
        env: &Environment,
        window_ms: u32,
        fps: u32,
        max_size: Option<(u32, u32)>,
    ) -> Result<Self, VideoError> {
        let mut stream = env
            .video(VideoRequest {
                max_fps: fps,
                format: ImageFormat::Raw { zstd: Some(1) },
                max_size,
                duration_ms: MAX_VIDEO_DURATION_MS,
            })
            .await?;
        let frames = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let kept = frames.clone();
        let window_us = u64::from(window_ms) * 1000;
        let task = tokio::spawn(async move {
            while let Ok(Some(frame)) = stream.next().await {
                let mut q = kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let start = frame.guest_us.saturating_sub(window_us);
                q.push_back(frame);
                // Keep one frame from before the window: the screen at its start.
                while q.len() > 1 && q[1].guest_us <= start {
                    q.pop_front();
                }
            }
        });
        Ok(Self { frames, task })
    }

    /// Samples the last `window.ms` before the guest's clock read `now_us`, `window.fps`
    /// a second, oldest first: each sample is the frame on screen then, a frame that
    /// covers several samples given once; with how long before `now_us` it was sampled.
    pub fn sample(&self, now_us: u64, window_ms: u32, fps: u32) -> Vec<(u32, VideoFrame)> {
        let q = self
            .frames
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = u64::from(window_ms) * u64::from(fps) / 1000;
        let period_us = 1_000_000 / u64::from(fps.max(1));
        let mut out: Vec<(u32, VideoFrame)> = Vec::new();
        let mut last: Option<u64> = None;
        for k in 0..n {
            // The oldest sample first; the newest at `now_us`.
            let ago_us = (n - 1 - k) * period_us;
            let at = now_us.saturating_sub(ago_us);
            let Some(frame) = q.iter().rev().find(|f| f.guest_us <= at) else {
                continue;
            };
            if last == Some(frame.guest_us) {
                continue;
            }
            last = Some(frame.guest_us);
            out.push(((ago_us / 1000) as u32, frame.clone()));
        }
        out
    }
}

impl Drop for Recent {
    fn drop(&mut self) {
        // Dropping the stream stops the guest's grabs.
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_frame_lasts_until_the_next_and_the_last_until_the_end() {
        let list = concat_list(&[1_000_000, 1_250_000, 3_000_000], 4_000_000, "jpg");
        assert_eq!(
            list,
            "ffconcat version 1.0\n\
             file 'frame-0000000.jpg'\nduration 0.250000\n\
             file 'frame-0000001.jpg'\nduration 1.750000\n\
             file 'frame-0000002.jpg'\nduration 1.000000\n\
             file 'frame-0000002.jpg'\n"
        );
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;
    use crate::env::Screenshot;
    use pincer_shared::observe::{PixelLayout, Rect, ScreenshotMeta};

    fn frame(guest_us: u64) -> VideoFrame {
        VideoFrame {
            guest_us,
            shot: Screenshot {
                meta: ScreenshotMeta {
                    width: 1,
                    height: 1,
                    format: ImageFormat::Raw { zstd: None },
                    layout: PixelLayout::Bgrx8,
                    source: Rect::new(0, 0, 1, 1),
                    grab_us: 0,
                    encode_us: 0,
                },
                bytes: vec![0; 4],
            },
        }
    }

    #[tokio::test]
    async fn samples_show_the_frame_on_screen_at_each_time_each_frame_once() {
        let recent = Recent {
            frames: Arc::new(std::sync::Mutex::new(
                [
                    frame(1_000_000),
                    frame(2_100_000),
                    frame(2_150_000),
                    frame(2_900_000),
                ]
                .into(),
            )),
            task: tokio::spawn(async {}),
        };
        // 1 s at 5 fps before 3 s: samples at 2.2, 2.4, 2.6, 2.8 and 3.0 s.
        let got: Vec<(u32, u64)> = recent
            .sample(3_000_000, 1000, 5)
            .into_iter()
            .map(|(ago, f)| (ago, f.guest_us))
            .collect();
        // 2.2-2.8 s all show the frame of 2.15 s (given once, at the oldest sample); 3.0 s
        // the frame of 2.9 s. The frame of 2.1 s was replaced before any sample.
        assert_eq!(got, vec![(800, 2_150_000), (0, 2_900_000)]);
        // Before any frame there is nothing to show.
        assert!(recent.sample(500_000, 400, 5).is_empty());
    }
}

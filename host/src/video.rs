//! Video files from a guest's video stream ([`Environment::video`]): each JPEG frame is
//! kept as a file next to the output with its guest timestamp, and an `ffmpeg` child then
//! muxes them into an H.264 MP4 through its concat demuxer, each frame lasting until the
//! next one came (variable frame rate), so a still screen costs one frame however long it
//! stays still and the video's clock is the guest's.

use crate::env::{ClientError, Environment, VideoFrame};
use pincer_shared::observe::{ImageFormat, VideoRequest};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a video could not be recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VideoError {
    /// The guest refused the stream or the connection failed.
    #[error(transparent)]
    Env(#[from] ClientError),
    /// A frame in a format MP4 files are not made from here.
    #[error("video files are made from JPEG frames; this frame is {0:?}: ask for JPEG")]
    NotJpeg(ImageFormat),
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
        })
    }

    /// Adds a frame; frames must come in the guest's order, as a stream delivers them.
    pub fn push(&mut self, frame: &VideoFrame) -> Result<(), VideoError> {
        if !matches!(frame.shot.meta.format, ImageFormat::Jpeg { .. }) {
            return Err(VideoError::NotJpeg(frame.shot.meta.format));
        }
        let path = self.dir.join(frame_name(self.stamps.len()));
        std::fs::write(&path, &frame.shot.bytes)
            .map_err(|source| VideoError::Io { path, source })?;
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
        Some(self.dir.join(frame_name(i)))
    }

    /// Writes the MP4 `out`, the last frame lasting until the guest's clock reads `end_us`
    /// (at least a millisecond); `None` when no frame came.
    pub fn finish(self, end_us: u64, out: &Path) -> Result<Option<Recorded>, VideoError> {
        let (Some(&first_us), Some(&last_us)) = (self.stamps.first(), self.stamps.last()) else {
            return Ok(None);
        };
        let end_us = end_us.max(last_us + 1000);
        let list = self.dir.join("frames.ffconcat");
        std::fs::write(&list, concat_list(&self.stamps, end_us)).map_err(|source| {
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

fn frame_name(i: usize) -> String {
    format!("frame-{i:07}.jpg")
}

/// The concat demuxer's script: each frame lasts until the next (the last until `end_us`).
/// The demuxer takes the last entry's duration only from an entry after it, so the last
/// frame is named twice.
fn concat_list(stamps: &[u64], end_us: u64) -> String {
    let mut s = String::from("ffconcat version 1.0\n");
    let ends = stamps.iter().skip(1).chain(std::iter::once(&end_us));
    for (i, (start, end)) in stamps.iter().zip(ends).enumerate() {
        let _ = writeln!(
            s,
            "file '{}'\nduration {:.6}",
            frame_name(i),
            end.saturating_sub(*start) as f64 / 1e6
        );
    }
    let _ = writeln!(s, "file '{}'", frame_name(stamps.len() - 1));
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
    let out = out.to_owned();
    tokio::task::spawn_blocking(move || recording.finish(end_us, &out))
        .await
        .map_err(|e| VideoError::Io {
            path: PathBuf::from("ffmpeg"),
            source: std::io::Error::other(e),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_frame_lasts_until_the_next_and_the_last_until_the_end() {
        let list = concat_list(&[1_000_000, 1_250_000, 3_000_000], 4_000_000);
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

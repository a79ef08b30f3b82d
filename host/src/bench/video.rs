//! `pincer bench --video`: what a video stream costs the guest. For each frame rate and
//! format, the agent's CPU time (utime + stime from `/proc/<pid>/stat`, read through probes
//! before and after) over a window in which something keeps changing the screen
//! ([`CHANGERS`]), and the frames and bytes the host received. First, the same window with
//! the screen still, at the highest rate: what watching costs when nothing changes.

use super::stop_group;
use crate::env::{ClientError, Environment};
use pincer_shared::observe::{ImageFormat, VideoRequest};
use pincer_shared::probe::{Probe, ProbeReply};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Clock ticks a second in `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// What one stream cost.
#[derive(Debug, Clone, Serialize)]
pub struct VideoStats {
    /// `still` (nothing changes), or what changed it ([`CHANGERS`]).
    pub screen: &'static str,
    /// How frames were encoded on the guest.
    pub format: ImageFormat,
    /// The rate asked for.
    pub max_fps: u32,
    /// Seconds measured.
    pub seconds: f64,
    /// Frames received.
    pub frames: usize,
    /// Bytes of frames received.
    pub bytes: u64,
    /// CPU seconds the agent used meanwhile (every thread).
    pub agent_cpu_s: f64,
}

impl VideoStats {
    /// Frames a second received.
    pub fn fps(&self) -> f64 {
        self.frames as f64 / self.seconds
    }

    /// The agent's CPU use, in percent of one core.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.agent_cpu_s / self.seconds
    }
}

/// The agent's CPU time so far, in seconds (`None` when the guest has no `/proc` to
/// read or did not say its pid).
async fn agent_cpu(env: &Environment) -> Result<Option<f64>, ClientError> {
    let Some(pid) = env.info().map(|i| i.pid) else {
        return Ok(None);
    };
    let stat = match env
        .probe(Probe::ReadFile {
            path: format!("/proc/{pid}/stat"),
            max_len: 4096,
        })
        .await
    {
        Ok(ProbeReply::File(Some(f))) => String::from_utf8_lossy(&f.bytes).into_owned(),
        Ok(_) | Err(ClientError::Guest { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(cpu_seconds(&stat))
}

/// utime + stime of a `/proc/<pid>/stat` line, in seconds. The fields after the command
/// name (which may hold spaces and parentheses) start at the last `)`.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3 of the line, utime 14 and stime 15.
    let ticks = |i: usize| fields.get(i - 3)?.parse::<u64>().ok();
    Some((ticks(14)? + ticks(15)?) as f64 / USER_HZ)
}

/// Streams for `seconds` at `max_fps` and measures it.
async fn measure(
    env: &Environment,
    screen: &'static str,
    max_fps: u32,
    seconds: f64,
    format: ImageFormat,
) -> Result<Option<VideoStats>, ClientError> {
    let req = VideoRequest {
        max_fps,
        format,
        max_size: None,
        duration_ms: (seconds * 1000.0) as u64,
    };
    let Some(before) = agent_cpu(env).await? else {
        return Ok(None);
    };
    let t = Instant::now();
    let mut stream = env.video(req).await?;
    let (mut frames, mut bytes) = (0, 0);
    while let Some(frame) = stream.next().await? {
        frames += 1;
        bytes += frame.shot.bytes.len() as u64;
    }
    let seconds = t.elapsed().as_secs_f64();
    let Some(after) = agent_cpu(env).await? else {
        return Ok(None);
    };
    Ok(Some(VideoStats {
        screen,
        format,
        max_fps,
        seconds,
        frames,
        bytes,
        agent_cpu_s: after - before,
    }))
}

/// Measures a still screen at the highest of `rates`, then each of `rates` in each of
/// `formats` with each of [`CHANGERS`] running (needs the setup class, `xfce4-terminal`
/// and `xsetroot` on the guest). `None` when the agent's CPU time cannot be read.
pub async fn video(
    env: &Environment,
    rates: &[u32],
    formats: &[ImageFormat],
    seconds: f64,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<Vec<VideoStats>>, ClientError> {
    let mut out = Vec::new();
    let top = rates.iter().copied().max().unwrap_or(30);
    for &format in formats {
        progress(&format!(
            "video: a still screen at up to {top} fps, {format:?}"
        ));
        let Some(still) = measure(env, "still", top, seconds, format).await? else {
            return Ok(None);
        };
        out.push(still);
    }
    for (screen, argv) in CHANGERS {
        let pid = env
            .launch(argv.iter().map(|a| (*a).to_owned()).collect(), Vec::new())
            .await?;
        // Let it start and fill the screen.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let measured = async {
            for &format in formats {
                for &fps in rates {
                    progress(&format!("video: {screen} at up to {fps} fps, {format:?}"));
                    if let Some(s) = measure(env, screen, fps, seconds, format).await? {
                        out.push(s);
                    }
                }
            }
            Ok::<_, ClientError>(())
        }
        .await;
        stop_group(env, pid).await;
        measured?;
    }
    Ok(Some(out))
}

/// What changes the screen while streams are measured: a full-screen terminal scrolling
/// text (a desktop's content, redrawn as often as the terminal manages, ~20 times a second
/// here), and the root window repainted in turn red and blue as fast as `xsetroot` starts
/// (every tick sees a change; the easiest content to compress, so the cost of a frame's
/// grab and encoding with the least left to squeeze).
const CHANGERS: [(&str, &[&str]); 2] = [
    (
        "terminal",
        &[
            "xfce4-terminal",
            "--fullscreen",
            "-x",
            "sh",
            "-c",
            "while :; do ls -l --color=always /usr/bin /usr/lib; done",
        ],
    ),
    (
        "repaint",
        &[
            "sh",
            "-c",
            "while :; do xsetroot -solid red; xsetroot -solid blue; done",
        ],
    ),
];

/// The table `pincer bench --video` prints (Markdown, as in the README).
pub fn video_table(stats: &[VideoStats]) -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "| screen | frames | max fps | frames/s received | agent CPU (% of a core) | CPU per frame | bytes/s |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for v in stats {
        let per_frame = if v.screen != "still" && v.frames > 0 {
            format!("{:.1} ms", 1000.0 * v.agent_cpu_s / v.frames as f64)
        } else {
            "-".into()
        };
        let format = match v.format {
            ImageFormat::Jpeg { quality } => format!("JPEG q{quality}"),
            ImageFormat::Raw { zstd: Some(level) } => format!("raw+zstd {level}"),
            ImageFormat::Raw { zstd: None } => "raw".into(),
            ImageFormat::Png => "PNG".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {format} | {} | {:.1} | {:.1} % | {} | {:.2} MB/s |",
            v.screen,
            v.max_fps,
            v.fps(),
            v.cpu_percent(),
            per_frame,
            v.bytes as f64 / v.seconds / 1e6
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (pincer (x) agent) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 5";
        assert_eq!(cpu_seconds(stat), Some(3.25));
        assert_eq!(cpu_seconds("4242 (cut"), None);
    }
}

//! Observations: what an agent is shown of each environment before it acts. Configurable
//! per run: the screenshot, the Set-of-Marks screenshot with its element list, the filtered
//! UI tree as text. Agents only ever get these views; the runner builds them from the
//! environments ([`crate::observe`]).

use super::actions::Marks;
use super::som::Element;
use pincer_shared::Platform;
use pincer_shared::tree::UiTree;
use serde::{Deserialize, Serialize};

/// What agents are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationConfig {
    /// The plain screenshot.
    pub screenshot: bool,
    /// The Set-of-Marks screenshot and element list.
    pub marks: bool,
    /// The UI tree as indented text.
    pub tree_text: bool,
    /// Downscale images to fit this size (models rarely need 1080p).
    pub max_size: Option<(u32, u32)>,
    /// The last moments of each screen as frames (`video=2s@5fps`). Left out of the
    /// serialized form when off, so runs recorded before it existed keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoWindow>,
    /// Offer the API tools tasks declare (`pincer run --tools`); without it agents act on
    /// screens only, whatever the task declares. Left out of the serialized form when off,
    /// as `video` is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tools: bool,
}

/// How much of each screen's recent past agents see, and how densely: frames at `fps`
/// over the last `ms` milliseconds (a frame repeated because nothing changed is shown once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoWindow {
    /// How far back, in milliseconds.
    pub ms: u32,
    /// Samples a second.
    pub fps: u32,
}

impl VideoWindow {
    /// Most frames one view may carry: images cost a model's context.
    pub const MAX_FRAMES: u32 = 32;

    /// `2s@5fps`, `500ms@10fps`.
    fn parse(spec: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "'video={spec}': write video=SECONDSs@FPSfps (2s@5fps) or MILLISECONDSms@FPSfps, \
                 at most {} frames in all",
                Self::MAX_FRAMES
            )
        };
        let (span, rate) = spec.split_once('@').ok_or_else(usage)?;
        let ms = if let Some(n) = span.strip_suffix("ms") {
            n.parse::<u32>().ok()
        } else {
            span.strip_suffix('s')
                .and_then(|n| n.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                .map(|s| (s * 1000.0).round() as u32)
        }
        .filter(|ms| *ms > 0)
        .ok_or_else(usage)?;
        let fps = rate
            .strip_suffix("fps")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|f| (1..=pincer_shared::limits::MAX_VIDEO_FPS).contains(f))
            .ok_or_else(usage)?;
        let w = Self { ms, fps };
        if w.frames() == 0 || w.frames() > Self::MAX_FRAMES {
            return Err(usage());
        }
        Ok(w)
    }

    /// How many samples the window holds.
    pub fn frames(&self) -> u32 {
        (u64::from(self.ms) * u64::from(self.fps) / 1000) as u32
    }
}

/// One frame of a screen's recent past, as an agent sees it.
#[derive(Debug, Clone)]
pub struct Still {
    /// How long before the observation the screen looked like this, in milliseconds.
    pub ago_ms: u32,
    /// The frame, PNG.
    pub png: Vec<u8>,
}

impl Default for ObservationConfig {
    fn default() -> Self {
        Self {
            screenshot: false,
            marks: true,
            tree_text: false,
            max_size: None,
            video: None,
            tools: false,
        }
    }
}

impl ObservationConfig {
    /// What agents see from a comma-separated choice of `marks` (or `som`), `screenshot`,
    /// `tree` and `video=2s@5fps` (the last seconds of each screen as frames), images fitted to `max_size`: `--observe` and the Python package's
    /// `observe=`.
    pub fn parse(spec: &str, max_size: Option<(u32, u32)>) -> Result<Self, String> {
        let mut cfg = Self {
            screenshot: false,
            marks: false,
            tree_text: false,
            max_size,
            video: None,
            tools: false,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "marks" | "som" => cfg.marks = true,
                "screenshot" => cfg.screenshot = true,
                "tree" => cfg.tree_text = true,
                other => match other.strip_prefix("video=") {
                    Some(v) => cfg.video = Some(VideoWindow::parse(v)?),
                    None => {
                        return Err(format!(
                            "unknown part '{other}' (use marks, screenshot, tree, \
                             video=2s@5fps, comma-separated)"
                        ));
                    }
                },
            }
        }
        Ok(cfg)
    }
}

/// One environment as the agent sees it.
#[derive(Debug, Clone)]
pub struct View {
    /// Environment role.
    pub role: String,
    /// Its platform.
    pub platform: Platform,
    /// Screen size in screen pixels.
    pub screen: (u32, u32),
    /// Size of the images.
    pub image_size: (u32, u32),
    /// Plain screenshot, PNG.
    pub screenshot: Option<Vec<u8>>,
    /// Set-of-Marks screenshot, PNG.
    pub marked: Option<Vec<u8>>,
    /// The marked elements.
    pub elements: Vec<Element>,
    /// The UI tree, for agents that read it (the oracle) and for the text rendering.
    pub tree: Option<UiTree>,
    /// The tree as text, if configured.
    pub tree_text: Option<String>,
    /// The screen's last moments, oldest first, if configured.
    pub video: Vec<Still>,
    /// Milliseconds spent building this view (capture, marks, encoding).
    pub build_ms: f64,
}

impl View {
    /// Element boxes by number, for resolving element targets.
    pub fn marks(&self) -> Marks {
        self.elements.iter().map(|e| (e.id, e.bounds)).collect()
    }
}

/// The tree as indented `role "name"` lines with bounds, for prompts.
pub fn tree_text(tree: &UiTree) -> String {
    let mut out = String::new();
    for (depth, n) in tree.root.walk() {
        let b = n
            .bounds
            .map(|b| format!(" @({},{} {}x{})", b.x, b.y, b.width, b.height))
            .unwrap_or_default();
        let text = n
            .text
            .as_deref()
            .filter(|t| !t.is_empty() && *t != n.name)
            .map(|t| format!(" text={:?}", t.chars().take(80).collect::<String>()))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}{} {:?}{b}{text}\n",
            "  ".repeat(depth.min(30)),
            n.role,
            n.name
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn video_windows_parse_and_garbage_says_how_to_write_them() {
        let cfg = ObservationConfig::parse("marks,video=2s@5fps", None).unwrap();
        assert_eq!(cfg.video, Some(VideoWindow { ms: 2000, fps: 5 }));
        assert!(cfg.marks);
        let w = ObservationConfig::parse("video=500ms@10fps", None)
            .unwrap()
            .video
            .unwrap();
        assert_eq!((w.ms, w.fps, w.frames()), (500, 10, 5));
        for bad in [
            "video=2s",
            "video=2@5fps",
            "video=0s@5fps",
            "video=2s@0fps",
            "video=2s@1000fps",
            "video=10s@30fps",
            "video=10ms@5fps",
        ] {
            let why = ObservationConfig::parse(bad, None).unwrap_err();
            assert!(why.contains("video=SECONDSs@FPSfps"), "{bad}: {why}");
        }
    }
}

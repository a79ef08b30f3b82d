//! Observations: what an agent is shown of each environment before it acts. Configurable
//! per run: the screenshot, the Set-of-Marks screenshot with its element list, the filtered
//! UI tree as text. The screen is fetched raw (zstd) and the tree concurrently, the marks
//! are drawn on the host, and each image is PNG-encoded once.

use super::actions::Marks;
use super::som::{self, Canvas, Element};
use crate::env::{ClientError, Environment};
use crate::task::Platform;
use pincer_shared::observe::{ImageFormat, PixelLayout, Rect, ScreenshotRequest, TreeRequest};
use pincer_shared::tree::UiTree;
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
}

impl Default for ObservationConfig {
    fn default() -> Self {
        Self {
            screenshot: false,
            marks: true,
            tree_text: false,
            max_size: None,
        }
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
    /// Milliseconds spent building this view (capture, marks, encoding).
    pub build_ms: f64,
}

impl View {
    /// Element boxes by number, for resolving element targets.
    pub fn marks(&self) -> Marks {
        self.elements.iter().map(|e| (e.id, e.bounds)).collect()
    }
}

/// Why a view could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// The environment failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The image could not be processed.
    #[error("image: {0}")]
    Image(String),
}

/// Builds the view of one environment. The tree is always fetched (marks and the oracle
/// need it); images only as configured.
pub async fn view(
    env: &Environment,
    role: &str,
    platform: Platform,
    cfg: &ObservationConfig,
) -> Result<View, ObserveError> {
    let t = Instant::now();
    let want_image = cfg.screenshot || cfg.marks;
    let shot_req = ScreenshotRequest {
        format: ImageFormat::Raw { zstd: Some(1) },
        region: None,
        max_size: cfg.max_size,
    };
    // Agents see roles, names, states, text and boxes; attributes would cost a call a node.
    let tree_req = TreeRequest {
        visible_only: true,
        attributes: false,
        ..TreeRequest::default()
    };
    let (shot, tree) = if want_image {
        let (s, t) = futures::join!(env.screenshot(shot_req), env.tree(tree_req));
        (Some(s?), t?)
    } else {
        (None, env.tree(tree_req).await?)
    };
    let info = env.screen_size();
    let mut view = View {
        role: role.to_owned(),
        platform,
        screen: info,
        image_size: (0, 0),
        screenshot: None,
        marked: None,
        elements: Vec::new(),
        tree_text: cfg.tree_text.then(|| tree_text(&tree)),
        tree: None,
        build_ms: 0.0,
    };
    let screen = Rect::new(0, 0, info.0, info.1);
    view.elements = som::elements(&tree.root, screen);
    if let Some(shot) = shot {
        let raw = shot.raw_pixels().map_err(ObserveError::Image)?;
        let (w, h) = (shot.meta.width, shot.meta.height);
        view.image_size = (w, h);
        let mut rgb = match shot.meta.layout {
            PixelLayout::Bgrx8 => som::bgrx_to_rgb(&raw),
            PixelLayout::Rgb8 => raw,
            PixelLayout::Rgba8 => raw
                .chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        };
        if rgb.len() != (w as usize) * (h as usize) * 3 {
            return Err(ObserveError::Image(format!(
                "{w}x{h} image with {} bytes of pixels",
                rgb.len()
            )));
        }
        let png_err = |e: png::EncodingError| ObserveError::Image(e.to_string());
        if cfg.screenshot {
            view.screenshot = Some(som::png(&rgb, w, h).map_err(png_err)?);
        }
        if cfg.marks {
            let scale = f64::from(w) / f64::from(info.0.max(1));
            Canvas {
                rgb: &mut rgb,
                width: w,
                height: h,
            }
            .draw(&view.elements, scale);
            view.marked = Some(som::png(&rgb, w, h).map_err(png_err)?);
        }
    }
    view.tree = Some(tree);
    view.build_ms = t.elapsed().as_secs_f64() * 1000.0;
    Ok(view)
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

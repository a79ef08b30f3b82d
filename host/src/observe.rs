//! Capturing observations: the runner's side of what agents see. The screen is fetched
//! raw (zstd) and the UI tree concurrently, the marks are drawn on the host, and each image
//! is PNG-encoded once. Agents get the resulting [`View`]s and never the environments.

use crate::agent::observe::{ObservationConfig, View, tree_text};
use crate::agent::som::{self, Canvas};
use crate::env::{ClientError, Environment, PixelsError, Screenshot};
use pincer_shared::Platform;
use pincer_shared::observe::{ImageFormat, PixelLayout, Rect, ScreenshotRequest, TreeRequest};
use std::time::Instant;

/// Why a view could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// The environment failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The screenshot's pixels could not be had.
    #[error(transparent)]
    Pixels(#[from] PixelsError),
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
    // The screenshot arrives well before the tree: it is decoded (and the plain image
    // encoded) while the tree is still being read, so only the marks wait for the tree.
    let with_pixels = async {
        let shot = env.screenshot(shot_req).await?;
        let plain = cfg.screenshot;
        tokio::task::spawn_blocking(move || pixels(&shot, plain))
            .await
            .map_err(|e| ObserveError::Image(format!("decoding the screenshot: {e}")))?
    };
    let (image, tree) = if want_image {
        let (image, tree) = futures::join!(with_pixels, env.tree(tree_req));
        (Some(image?), tree?)
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
        video: Vec::new(),
        tree: None,
        build_ms: 0.0,
    };
    let screen = Rect::new(0, 0, info.0, info.1);
    view.elements = som::elements(&tree.root, screen);
    if let Some(Pixels {
        width: w,
        height: h,
        mut rgb,
        plain,
    }) = image
    {
        view.image_size = (w, h);
        view.screenshot = plain;
        if cfg.marks {
            let scale = f64::from(w) / f64::from(info.0.max(1));
            Canvas {
                rgb: &mut rgb,
                width: w,
                height: h,
            }
            .draw(&view.elements, scale);
            view.marked = Some(som::png(&rgb, w, h).map_err(png_error)?);
        }
    }
    view.tree = Some(tree);
    view.build_ms = t.elapsed().as_secs_f64() * 1000.0;
    Ok(view)
}

/// A raw screenshot (zstd or not) as a PNG file.
pub fn raw_to_png(shot: &Screenshot) -> Result<Vec<u8>, ObserveError> {
    let p = pixels(shot, true)?;
    Ok(p.plain.unwrap_or_default())
}

/// A screenshot's pixels as RGB, and its plain PNG if asked for.
struct Pixels {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
    plain: Option<Vec<u8>>,
}

/// Decodes a raw screenshot into RGB (and encodes the plain PNG when `plain`).
fn pixels(shot: &Screenshot, plain: bool) -> Result<Pixels, ObserveError> {
    let raw = shot.raw_pixels()?;
    let (width, height) = (shot.meta.width, shot.meta.height);
    let rgb = match shot.meta.layout {
        PixelLayout::Bgrx8 => som::bgrx_to_rgb(&raw),
        PixelLayout::Rgb8 => raw,
        PixelLayout::Rgba8 => raw
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
    };
    if rgb.len() != (width as usize) * (height as usize) * 3 {
        return Err(ObserveError::Image(format!(
            "{width}x{height} image with {} bytes of pixels",
            rgb.len()
        )));
    }
    let plain = if plain {
        Some(som::png(&rgb, width, height).map_err(png_error)?)
    } else {
        None
    };
    Ok(Pixels {
        width,
        height,
        rgb,
        plain,
    })
}

fn png_error(e: png::EncodingError) -> ObserveError {
    ObserveError::Image(e.to_string())
}

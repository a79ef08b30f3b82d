//! The observe class: what the screen shows. Screenshots come back as a bulk body after the
//! reply header; UI trees inside it.

use crate::action::Point;
use serde::{Deserialize, Serialize};

/// A rectangle in screen pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Rect {
    /// Left edge.
    pub x: i32,
    /// Top edge.
    pub y: i32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

impl Rect {
    /// A rectangle.
    pub fn new(x: i32, y: i32, width: u32, height: u32) -> Self {
        Self {
            x,
            y,
            width,
            height,
        }
    }

    /// The centre point.
    pub fn center(&self) -> Point {
        Point::new(
            self.x + (self.width / 2) as i32,
            self.y + (self.height / 2) as i32,
        )
    }

    /// Whether the point lies inside.
    pub fn contains(&self, p: Point) -> bool {
        p.x >= self.x
            && p.y >= self.y
            && i64::from(p.x) < i64::from(self.x) + i64::from(self.width)
            && i64::from(p.y) < i64::from(self.y) + i64::from(self.height)
    }

    /// The overlap of two rectangles, if any.
    pub fn intersect(&self, other: &Self) -> Option<Self> {
        let x0 = i64::from(self.x).max(i64::from(other.x));
        let y0 = i64::from(self.y).max(i64::from(other.y));
        let x1 = (i64::from(self.x) + i64::from(self.width))
            .min(i64::from(other.x) + i64::from(other.width));
        let y1 = (i64::from(self.y) + i64::from(self.height))
            .min(i64::from(other.y) + i64::from(other.height));
        (x1 > x0 && y1 > y0)
            .then(|| Self::new(x0 as i32, y0 as i32, (x1 - x0) as u32, (y1 - y0) as u32))
    }

    /// Area in pixels.
    pub fn area(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// How a screenshot is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ImageFormat {
    /// PNG with fast compression.
    #[default]
    Png,
    /// JPEG at this quality (1..=100).
    Jpeg {
        /// Quality, 1 (smallest) to 100 (best).
        quality: u8,
    },
    /// Uncompressed pixels (rows packed, no padding), optionally zstd-compressed.
    Raw {
        /// zstd level: 1 is fast and good for desktops, 0 means zstd's default (3), negative
        /// levels are faster still. The body is then one or more zstd frames back to back
        /// (large images are compressed in parts on several cores), so decode it with a
        /// multi-frame decoder such as `zstd::decode_all`. `None` sends the pixels as they are.
        zstd: Option<i8>,
    },
}

/// Memory layout of raw pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PixelLayout {
    /// 4 bytes per pixel: blue, green, red, unused (X11's native order on little-endian).
    Bgrx8,
    /// 4 bytes per pixel: red, green, blue, alpha.
    Rgba8,
    /// 3 bytes per pixel: red, green, blue.
    Rgb8,
}

impl PixelLayout {
    /// Bytes per pixel.
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            Self::Bgrx8 | Self::Rgba8 => 4,
            Self::Rgb8 => 3,
        }
    }
}

/// A screenshot request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScreenshotRequest {
    /// Encoding.
    pub format: ImageFormat,
    /// Capture only this part of the screen; it must lie entirely on the screen.
    pub region: Option<Rect>,
    /// Downscale so that the image fits in this width and height, keeping the aspect ratio.
    pub max_size: Option<(u32, u32)>,
}

/// What comes before a screenshot's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenshotMeta {
    /// Width of the image sent.
    pub width: u32,
    /// Height of the image sent.
    pub height: u32,
    /// Encoding of the body.
    pub format: ImageFormat,
    /// For raw images, the layout of the pixels (before zstd, if any); for PNG and JPEG,
    /// what decoding yields.
    pub layout: PixelLayout,
    /// The screen area the image shows, in screen pixels.
    pub source: Rect,
    /// Microseconds the guest spent grabbing the pixels.
    pub grab_us: u32,
    /// Microseconds the guest spent scaling and encoding.
    pub encode_us: u32,
}

/// A video stream: frames of the whole screen, one when the stream starts and then one only
/// after the screen changed (on X11, after the DAMAGE extension reported damage), at most
/// `max_fps` a second, until `duration_ms` has passed or the host stops reading. Answered
/// with a [`VideoFrame`](crate::Response::VideoFrame) header and its image as body per
/// frame, all on the request's stream; the guest ends the stream when the time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoRequest {
    /// Most frames per second, 1 to [`MAX_VIDEO_FPS`](crate::limits::MAX_VIDEO_FPS).
    pub max_fps: u32,
    /// Encoding of each frame: JPEG or raw (PNG is too slow to encode for video).
    pub format: ImageFormat,
    /// Downscale each frame to fit in this width and height, keeping the aspect ratio.
    pub max_size: Option<(u32, u32)>,
    /// How long the guest streams, 1 ms to
    /// [`MAX_VIDEO_DURATION_MS`](crate::limits::MAX_VIDEO_DURATION_MS).
    pub duration_ms: u64,
}

impl VideoRequest {
    /// What each frame's grab asks for: the whole screen, in the stream's format and size.
    pub fn frame(&self) -> ScreenshotRequest {
        ScreenshotRequest {
            format: self.format,
            region: None,
            max_size: self.max_size,
        }
    }

    /// Whether the rate, duration and format kind are usable; the message says which is
    /// not and what would be. The frame's own values (JPEG quality, zstd level, size) are
    /// checked as a screenshot's ([`VideoRequest::frame`]).
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::{MAX_VIDEO_DURATION_MS, MAX_VIDEO_FPS};
        if !(1..=MAX_VIDEO_FPS).contains(&self.max_fps) {
            return Err(format!(
                "video at {} frames per second: ask for 1 to {MAX_VIDEO_FPS}",
                self.max_fps
            ));
        }
        if !(1..=MAX_VIDEO_DURATION_MS).contains(&self.duration_ms) {
            return Err(format!(
                "video for {} ms: ask for 1 to {MAX_VIDEO_DURATION_MS} ms",
                self.duration_ms
            ));
        }
        if matches!(self.format, ImageFormat::Png) {
            return Err(
                "video frames as PNG: PNG is too slow to encode at video rates; ask \
                        for JPEG or raw"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What comes before each video frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoFrame {
    /// The guest's monotonic clock when the grab began, in microseconds: the clock of
    /// [`Pong`](crate::Response::Pong)'s `guest_us`, so frames line up with actions timed
    /// against pings.
    pub guest_us: u64,
    /// The image, as a screenshot's.
    pub meta: ScreenshotMeta,
}

/// Asks for the input a person (or anything else) gives the guest's desktop: answered with
/// [`InputEvents`](crate::Response::InputEvents) batches on the request's stream as input
/// happens, until the time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRequest {
    /// How long the guest reports, 1 ms to
    /// [`MAX_VIDEO_DURATION_MS`](crate::limits::MAX_VIDEO_DURATION_MS).
    pub duration_ms: u64,
}

impl InputRequest {
    /// Whether the duration is usable; the message says what would be.
    pub fn validate(&self) -> Result<(), String> {
        use crate::limits::MAX_VIDEO_DURATION_MS;
        if !(1..=MAX_VIDEO_DURATION_MS).contains(&self.duration_ms) {
            return Err(format!(
                "input events for {} ms: ask for 1 to {MAX_VIDEO_DURATION_MS} ms",
                self.duration_ms
            ));
        }
        Ok(())
    }
}

/// One input event, stamped on the guest's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputEvent {
    /// The guest's monotonic clock when the guest read the event, in microseconds: the
    /// clock of [`Pong`](crate::Response::Pong)'s `guest_us` and of video frames.
    pub guest_us: u64,
    /// What happened.
    pub kind: InputKind,
}

/// What an input event was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum InputKind {
    /// A pointer button went down (1 left, 2 middle, 3 right, 4/5 wheel up/down, 6/7 wheel
    /// left/right) with the pointer at `x`, `y` in screen pixels.
    Press {
        /// The button.
        button: u8,
        /// Pointer x.
        x: i32,
        /// Pointer y.
        y: i32,
    },
    /// A pointer button went up.
    Release {
        /// The button.
        button: u8,
        /// Pointer x.
        x: i32,
        /// Pointer y.
        y: i32,
    },
    /// A key went down: the key its keysym names at the shift level in use, or `None` for
    /// a keysym pincer has no name for (its number in `keysym`).
    KeyDown {
        /// The key.
        key: Option<crate::key::Key>,
        /// The X keysym.
        keysym: u32,
    },
    /// A key went up.
    KeyUp {
        /// The key.
        key: Option<crate::key::Key>,
        /// The X keysym.
        keysym: u32,
    },
}

/// Geometry of the guest's screen.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScreenInfo {
    /// Width of the whole screen in pixels.
    pub width: u32,
    /// Height of the whole screen in pixels.
    pub height: u32,
    /// Monitors, if the guest can tell them apart.
    pub monitors: Vec<Rect>,
    /// How the guest captures the screen ("x11-shm", "x11-getimage", ...), or in a
    /// handshake why it cannot ("refused: ...", with the other fields zero).
    pub capture: String,
}

/// Which part of the accessibility tree to walk. When exactly one application matches, it
/// is the root of the tree; otherwise the root is the desktop with the matching
/// applications as children (none, with a `pincer-note` attribute, when nothing matched).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TreeScope {
    /// Every application on the desktop.
    #[default]
    Desktop,
    /// The application that owns the active window.
    ActiveApp,
    /// Applications whose name contains this text (case-insensitive).
    App(String),
}

/// Filters applied while the tree is walked, so skipped nodes cost nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRequest {
    /// Which applications.
    pub scope: TreeScope,
    /// Keep only nodes that are showing (mapped on screen) and their ancestors.
    pub showing_only: bool,
    /// Keep only nodes whose bounds overlap the screen.
    pub visible_only: bool,
    /// Deepest level walked below the scope root (`None`: no limit).
    pub max_depth: Option<u32>,
    /// Stop after this many nodes (`None`: the protocol limit).
    pub max_nodes: Option<u32>,
    /// Read each node's attributes (toolkit details: a cell's formula, a widget's class).
    /// Observations for agents leave them out, which saves a call per node on most
    /// toolkits; nodes whose attributes come with their other properties keep them.
    pub attributes: bool,
}

impl Default for TreeRequest {
    fn default() -> Self {
        Self {
            scope: TreeScope::Desktop,
            showing_only: true,
            visible_only: false,
            max_depth: None,
            max_nodes: None,
            attributes: true,
        }
    }
}

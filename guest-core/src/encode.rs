//! Turns a grabbed frame into the bytes of a screenshot reply: request checks, downscaling
//! and encoding to PNG, JPEG or raw BGRX (optionally zstd-compressed). Nothing here touches a
//! display, so every rule about what a valid request is and what the image looks like is
//! testable on plain byte buffers; platforms only grab pixels (the Linux agent from X11,
//! the Android shim from `screencap`) and call in here.
//!
//! Frames are 4 bytes per pixel, rows `stride` bytes apart, in the order the platform grabbed
//! them ([`PixelFormat`]): X11's blue, green, red, unused, or `screencap`'s red, green, blue,
//! alpha. Each encoder reads either, so no platform converts a frame before it is encoded;
//! only raw bodies, which the protocol sends as BGRX, are reordered, while they are copied.
//! Downscaling is an area average over integer pixel boxes (every source pixel lands in
//! exactly one output pixel and all count equally), which keeps thin text strokes and
//! one-pixel lines visible where bilinear sampling of a large reduction would skip them.
//! PNG is RGB8, Paeth-filtered and deflated in bands on several cores (`png`); JPEG reads
//! either order directly; zstd bodies of frames over 1 MiB are several concatenated zstd
//! frames, compressed on several cores.

mod png;

use pincer_shared::WireError;
use pincer_shared::limits::MAX_IMAGE_EDGE;
use pincer_shared::observe::{ImageFormat, PixelLayout, Rect, ScreenshotMeta, ScreenshotRequest};
use pincer_shared::pixels::{bgrx_to_rgb, rgbx_to_rgb};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Bytes per pixel of a frame.
const BPP: usize = 4;

/// Scratch buffers larger than this are released after use, so one huge request does not
/// pin its memory for the rest of the agent's life. A 4K frame (32 MiB) stays cached.
const KEEP_SCRATCH: usize = 64 * 1024 * 1024;

/// The order of a frame's four bytes a pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PixelFormat {
    /// Blue, green, red, unused: X11's 32-bit layout on little-endian machines, Android's
    /// BGRA_8888, and what raw bodies carry on the wire.
    Bgrx,
    /// Red, green, blue, then alpha or unused (ignored): Android's RGBA_8888 and RGBX_8888,
    /// as `screencap` writes them.
    Rgbx,
}

/// Pixels as grabbed: rows of `format` pixels, `stride` bytes apart.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pixels: &'a [u8],
    width: u32,
    height: u32,
    stride: usize,
    format: PixelFormat,
}

impl<'a> Frame<'a> {
    /// Wraps grabbed pixels, checking that `pixels` holds `height` rows of `width` pixels.
    pub fn new(
        pixels: &'a [u8],
        width: u32,
        height: u32,
        stride: usize,
        format: PixelFormat,
    ) -> Result<Self, WireError> {
        let row = width as usize * BPP;
        let needed = (height as usize)
            .checked_sub(1)
            .and_then(|rows| rows.checked_mul(stride))
            .and_then(|n| n.checked_add(row));
        match needed {
            Some(needed) if width > 0 && stride >= row && pixels.len() >= needed => Ok(Self {
                pixels,
                width,
                height,
                stride,
                format,
            }),
            _ => Err(WireError::Internal {
                message: format!(
                    "grabbed frame of {} bytes does not hold {width}x{height} pixels with a \
                     stride of {stride}",
                    pixels.len()
                ),
            }),
        }
    }

    /// Row `y`, exactly `width * 4` bytes.
    fn row(&self, y: usize) -> &'a [u8] {
        let start = y * self.stride;
        &self.pixels[start..start + self.width as usize * BPP]
    }

    /// The pixels without row padding, when they already are.
    fn packed(&self) -> Option<&'a [u8]> {
        let len = self.width as usize * BPP * self.height as usize;
        (self.stride == self.width as usize * BPP).then(|| &self.pixels[..len])
    }

    /// Row `y` as RGB into `rgb`, which holds `width * 3` bytes.
    fn row_to_rgb(&self, y: usize, rgb: &mut [u8]) {
        match self.format {
            PixelFormat::Bgrx => bgrx_to_rgb(self.row(y), rgb),
            PixelFormat::Rgbx => rgbx_to_rgb(self.row(y), rgb),
        }
    }

    /// Row `y` as BGRX, appended to `out`.
    fn push_bgrx_row(&self, y: usize, out: &mut Vec<u8>) {
        let row = self.row(y);
        match self.format {
            PixelFormat::Bgrx => out.extend_from_slice(row),
            PixelFormat::Rgbx => {
                let start = out.len();
                out.resize(start + row.len(), 0);
                let (to, _) = out[start..].as_chunks_mut::<BPP>();
                let (from, _) = row.as_chunks::<BPP>();
                for (to, from) in to.iter_mut().zip(from) {
                    *to = [from[2], from[1], from[0], 0];
                }
            }
        }
    }
}

/// An encoded screenshot body and what it shows.
#[derive(Debug)]
struct Encoded {
    /// The body sent after the reply header.
    bytes: Vec<u8>,
    /// Width of the image sent.
    width: u32,
    /// Height of the image sent.
    height: u32,
    /// Pixel layout of the image (for raw bodies, before zstd).
    layout: PixelLayout,
}

fn invalid(message: String) -> WireError {
    WireError::InvalidArgument { message }
}

/// Checks everything in `req` that does not depend on the screen, so that a bad request is
/// refused before anything is grabbed.
pub fn check_request(req: &ScreenshotRequest) -> Result<(), WireError> {
    match req.format {
        ImageFormat::Png => {}
        ImageFormat::Jpeg { quality } => {
            if !(1..=100).contains(&quality) {
                return Err(invalid(format!(
                    "JPEG quality {quality} is out of range: use 1 (smallest) to 100 (best); \
                     80 is a good default"
                )));
            }
        }
        ImageFormat::Raw { zstd: Some(level) } => {
            if !zstd::compression_level_range().contains(&i32::from(level)) {
                return Err(invalid(format!(
                    "zstd level {level} is out of range: use {} to {} (1 is fast and good for \
                     desktops), or no zstd at all",
                    zstd::compression_level_range().start(),
                    zstd::compression_level_range().end()
                )));
            }
        }
        ImageFormat::Raw { zstd: None } => {}
    }
    if let Some((w, h)) = req.max_size {
        if w == 0 || h == 0 {
            return Err(invalid(format!(
                "max_size {w}x{h} has a zero edge: give both a width and a height of at least \
                 1, or leave max_size out for full resolution"
            )));
        }
        if w > MAX_IMAGE_EDGE || h > MAX_IMAGE_EDGE {
            return Err(invalid(format!(
                "max_size {w}x{h} exceeds the protocol's {MAX_IMAGE_EDGE}-pixel edge limit: \
                 ask for at most {MAX_IMAGE_EDGE}x{MAX_IMAGE_EDGE}"
            )));
        }
    }
    if let Some(r) = req.region {
        if r.width == 0 || r.height == 0 {
            return Err(invalid(format!(
                "region {} is empty: give it a width and a height of at least 1, or leave it \
                 out for the whole screen",
                show(r)
            )));
        }
        if r.width > MAX_IMAGE_EDGE || r.height > MAX_IMAGE_EDGE {
            return Err(invalid(format!(
                "region {} exceeds the protocol's {MAX_IMAGE_EDGE}-pixel edge limit: capture \
                 it in parts of at most {MAX_IMAGE_EDGE}x{MAX_IMAGE_EDGE}",
                show(r)
            )));
        }
    }
    Ok(())
}

/// The screen area to grab for `region` on a `width`x`height` screen whose origin is 0,0.
pub fn source_rect(region: Option<Rect>, width: u32, height: u32) -> Result<Rect, WireError> {
    let screen = Rect::new(0, 0, width, height);
    let Some(r) = region else {
        return Ok(screen);
    };
    if r.intersect(&screen) != Some(r) {
        return Err(invalid(format!(
            "region {} is not inside the {width}x{height} screen: keep x and y at 0 or more \
             and x+width, y+height within the screen (screen-info gives its size)",
            show(r)
        )));
    }
    Ok(r)
}

/// Checks that an image of this size may be sent, given that it will be scaled to fit
/// `max_size`.
pub fn check_output(source: Rect, max_size: Option<(u32, u32)>) -> Result<(), WireError> {
    let (w, h) = fit(source.width, source.height, max_size);
    if w > MAX_IMAGE_EDGE || h > MAX_IMAGE_EDGE {
        return Err(invalid(format!(
            "the image would be {w}x{h}, over the protocol's {MAX_IMAGE_EDGE}-pixel edge \
             limit: set max_size or capture a smaller region"
        )));
    }
    Ok(())
}

fn show(r: Rect) -> String {
    format!("{}x{} at {},{}", r.width, r.height, r.x, r.y)
}

/// The size of a `width`x`height` image scaled down (never up) to fit in `max_size`, keeping
/// the aspect ratio; the shorter edge is rounded to the nearest pixel and is at least 1.
fn fit(width: u32, height: u32, max_size: Option<(u32, u32)>) -> (u32, u32) {
    let Some((mw, mh)) = max_size else {
        return (width, height);
    };
    if width <= mw && height <= mh {
        return (width, height);
    }
    let (w, h, mw, mh) = (
        u64::from(width),
        u64::from(height),
        u64::from(mw),
        u64::from(mh),
    );
    // Compare the two scale factors mw/w and mh/h without floating point.
    let (ow, oh) = if mw * h <= mh * w {
        (mw, (h * mw + w / 2) / w)
    } else {
        ((w * mh + h / 2) / h, mh)
    };
    // Results never exceed the inputs, which are u32.
    (ow.max(1) as u32, oh.max(1) as u32)
}

/// Smallest part of a frame compressed as its own zstd frame (512x512 pixels): smaller parts
/// cost more in thread hand-offs and lost matches than they save.
const ZSTD_PART: usize = 1024 * 1024;

/// Most parts a frame is split into; a 4K frame gets parts of about 2 MiB.
const MAX_ZSTD_PARTS: usize = 16;

/// Encodes frames, keeping conversion buffers and compression contexts between calls so
/// that a steady stream of screenshots allocates (and page-faults) only the bodies it
/// returns.
pub struct FrameEncoder {
    /// Downscaled pixels, in the frame's format.
    scaled: Vec<u8>,
    /// Pixels without row padding (and, for raw bodies, as BGRX).
    converted: Vec<u8>,
    /// zstd contexts, one per thread compressing parts of a frame, with their levels.
    zstd: Vec<(i32, zstd::bulk::Compressor<'static>)>,
    /// Deflate contexts and row buffers, one per thread compressing bands of a PNG.
    png: Vec<png::BandWorker>,
    /// How many threads compress a large frame: one per core, at most 4.
    pub threads: usize,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            scaled: Vec::new(),
            converted: Vec::new(),
            zstd: Vec::new(),
            png: Vec::new(),
            threads: cores.min(4),
        }
    }
}

impl fmt::Debug for FrameEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let levels: Vec<i32> = self.zstd.iter().map(|(level, _)| *level).collect();
        f.debug_struct("FrameEncoder")
            .field("scaled", &self.scaled.capacity())
            .field("converted", &self.converted.capacity())
            .field("zstd_levels", &levels)
            .field("png_workers", &self.png.len())
            .field("threads", &self.threads)
            .finish()
    }
}

impl FrameEncoder {
    /// The answer to `req` (which has passed [`check_request`]): `frame`, grabbed from
    /// `source` of the screen in `grabbed_in`, scaled and encoded as `req` asks. Returns
    /// the reply's metadata and body.
    pub fn screenshot(
        &mut self,
        frame: Frame<'_>,
        source: Rect,
        grabbed_in: Duration,
        req: &ScreenshotRequest,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        let start = Instant::now();
        let out = self.encode(frame, req.format, req.max_size)?;
        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        let meta = ScreenshotMeta {
            width: out.width,
            height: out.height,
            format: req.format,
            layout: out.layout,
            source,
            grab_us: micros(grabbed_in),
            encode_us: micros(start.elapsed()),
        };
        Ok((meta, out.bytes))
    }

    /// Scales `frame` to fit `max_size` and encodes it as `format`. The request must have
    /// passed [`check_request`].
    fn encode(
        &mut self,
        frame: Frame<'_>,
        format: ImageFormat,
        max_size: Option<(u32, u32)>,
    ) -> Result<Encoded, WireError> {
        let (width, height) = fit(frame.width, frame.height, max_size);
        let mut scaled = std::mem::take(&mut self.scaled);
        let frame = if (width, height) == (frame.width, frame.height) {
            frame
        } else {
            downscale(frame, width, height, &mut scaled);
            Frame::new(&scaled, width, height, width as usize * BPP, frame.format)?
        };
        let result = match format {
            ImageFormat::Png => {
                png::encode(frame, &mut self.png, self.threads).map(|b| (b, PixelLayout::Rgb8))
            }
            ImageFormat::Jpeg { quality } => self.jpeg(frame, quality),
            ImageFormat::Raw { zstd: None } => Ok(raw(frame)),
            ImageFormat::Raw { zstd: Some(level) } => self.zstd(frame, i32::from(level)),
        };
        self.scaled = scaled;
        release_if_huge(&mut self.scaled);
        release_if_huge(&mut self.converted);
        let (bytes, layout) = result?;
        Ok(Encoded {
            bytes,
            width,
            height,
            layout,
        })
    }

    fn jpeg(&mut self, frame: Frame<'_>, quality: u8) -> Result<(Vec<u8>, PixelLayout), WireError> {
        // The edge limit (16384) keeps both within u16, which check_output has enforced.
        let (w, h) = (
            u16::try_from(frame.width).map_err(|_| too_big_for_jpeg(frame))?,
            u16::try_from(frame.height).map_err(|_| too_big_for_jpeg(frame))?,
        );
        let pixels = packed(frame, &mut self.converted);
        // Both ignore the fourth byte.
        let order = match frame.format {
            PixelFormat::Bgrx => jpeg_encoder::ColorType::Bgra,
            PixelFormat::Rgbx => jpeg_encoder::ColorType::Rgba,
        };
        let mut bytes = Vec::with_capacity(pixels.len() / 16 + 1024);
        jpeg_encoder::Encoder::new(&mut bytes, quality)
            .encode(pixels, w, h, order)
            .map_err(|e| WireError::Internal {
                message: format!("JPEG encoding failed: {e}"),
            })?;
        Ok((bytes, PixelLayout::Rgb8))
    }

    /// Compresses the frame in parts of at least [`ZSTD_PART`] bytes, each its own zstd frame,
    /// which this thread and up to `threads - 1` helpers take in turn: a 1080p frame
    /// takes about half the time when a second core is free, and when none is, this thread
    /// simply takes more parts. Concatenated frames are one valid zstd stream (RFC 8878
    /// section 3): `ZSTD_decompress`, `zstd::bulk::decompress`, `zstd::decode_all` and
    /// `zstd -d` read them as one.
    fn zstd(&mut self, frame: Frame<'_>, level: i32) -> Result<(Vec<u8>, PixelLayout), WireError> {
        let pixels = packed_bgrx(frame, &mut self.converted);
        let part_len = ZSTD_PART
            .max(pixels.len().div_ceil(MAX_ZSTD_PARTS))
            .next_multiple_of(BPP);
        let parts: Vec<&[u8]> = pixels.chunks(part_len).collect();
        let workers = self.threads.clamp(1, parts.len().max(1));
        while self.zstd.len() < workers {
            let compressor = zstd::bulk::Compressor::new(level).map_err(zstd_error)?;
            self.zstd.push((level, compressor));
        }
        for (current, compressor) in &mut self.zstd[..workers] {
            if *current != level {
                compressor
                    .set_compression_level(level)
                    .map_err(zstd_error)?;
                *current = level;
            }
        }
        let next = AtomicUsize::new(0);
        let work = |compressor: &mut zstd::bulk::Compressor<'static>| {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(part) = parts.get(i) else {
                    return done;
                };
                done.push((i, compressor.compress(part)));
            }
        };
        let work = &work;
        let mut compressed: Vec<Option<std::io::Result<Vec<u8>>>> =
            parts.iter().map(|_| None).collect();
        std::thread::scope(|scope| {
            let mut contexts = self.zstd[..workers].iter_mut().map(|(_, c)| c);
            let mine = contexts.next();
            // A helper that cannot be started leaves its share to this thread.
            let helpers: Vec<_> = contexts
                .filter_map(|compressor| {
                    std::thread::Builder::new()
                        .name("pincer-zstd".to_owned())
                        .spawn_scoped(scope, move || work(compressor))
                        .ok()
                })
                .collect();
            let mut done = mine.map(work).unwrap_or_default();
            for helper in helpers {
                // A helper that panicked leaves its parts empty, reported below.
                done.extend(helper.join().unwrap_or_default());
            }
            for (i, part) in done {
                compressed[i] = Some(part);
            }
        });
        let total = compressed.iter().flatten().flatten().map(Vec::len).sum();
        let mut bytes = Vec::with_capacity(total);
        for part in compressed {
            match part {
                Some(part) => bytes.extend_from_slice(&part.map_err(zstd_error)?),
                None => {
                    return Err(WireError::Internal {
                        message: "a zstd compression thread panicked".to_owned(),
                    });
                }
            }
        }
        Ok((bytes, PixelLayout::Bgrx8))
    }
}

/// The frame's pixels without row padding, compacted into `buf` if they have any.
fn packed<'f>(frame: Frame<'f>, buf: &'f mut Vec<u8>) -> &'f [u8] {
    if let Some(pixels) = frame.packed() {
        return pixels;
    }
    buf.clear();
    for y in 0..frame.height as usize {
        buf.extend_from_slice(frame.row(y));
    }
    buf
}

/// The frame's pixels as BGRX without row padding: the frame's own when they already are,
/// else compacted (and reordered) into `buf`.
fn packed_bgrx<'f>(frame: Frame<'f>, buf: &'f mut Vec<u8>) -> &'f [u8] {
    if frame.format == PixelFormat::Bgrx
        && let Some(pixels) = frame.packed()
    {
        return pixels;
    }
    buf.clear();
    for y in 0..frame.height as usize {
        frame.push_bgrx_row(y, buf);
    }
    buf
}

fn raw(frame: Frame<'_>) -> (Vec<u8>, PixelLayout) {
    let bytes = match (frame.format, frame.packed()) {
        (PixelFormat::Bgrx, Some(pixels)) => pixels.to_vec(),
        _ => {
            let mut bytes = Vec::with_capacity(frame.width as usize * BPP * frame.height as usize);
            for y in 0..frame.height as usize {
                frame.push_bgrx_row(y, &mut bytes);
            }
            bytes
        }
    };
    (bytes, PixelLayout::Bgrx8)
}

fn release_if_huge(buf: &mut Vec<u8>) {
    if buf.capacity() > KEEP_SCRATCH {
        *buf = Vec::new();
    }
}

fn zstd_error(e: std::io::Error) -> WireError {
    WireError::Internal {
        message: format!("zstd compression failed: {e}"),
    }
}

fn too_big_for_jpeg(frame: Frame<'_>) -> WireError {
    invalid(format!(
        "a {}x{} image is too large for JPEG: set max_size",
        frame.width, frame.height
    ))
}

/// Area-average downscale of `src` to `width`x`height` pixels of its format into `out`,
/// the fourth byte of each zero. Output pixel i
/// covers source columns `i*sw/width .. (i+1)*sw/width` (and likewise for rows), so boxes
/// tile the source exactly; each is at least one pixel because we never scale up.
///
/// Per row of boxes, the source rows are summed per column in u16 lanes (257 rows of 255 at
/// most, so taller boxes go in groups), which the compiler vectorises on baseline x86-64;
/// a prefix sum over the columns then gives each box's total with one subtraction.
fn downscale(src: Frame<'_>, width: u32, height: u32, out: &mut Vec<u8>) {
    const GROUP: usize = 257;
    let (sw, sh) = (src.width as usize, src.height as usize);
    let (dw, dh) = (width as usize, height as usize);
    let bound = |i: usize, s: usize, d: usize| (i as u64 * s as u64 / d as u64) as usize;
    let cols: Vec<(usize, usize)> = (0..dw)
        .map(|i| (bound(i, sw, dw), bound(i + 1, sw, dw)))
        .collect();
    // Boxes are `narrow` or `narrow + 1` columns wide, so each row of boxes needs just two
    // reciprocals instead of a division per channel and pixel.
    let narrow = sw / dw;
    out.clear();
    out.resize(dw * dh * BPP, 0);
    let mut sums = vec![0u16; sw * BPP];
    let mut prefix = vec![[0u64; BPP]; sw + 1];
    for (j, out_row) in out.chunks_exact_mut(dw * BPP).enumerate() {
        let (y0, y1) = (bound(j, sh, dh), bound(j + 1, sh, dh));
        for top in (y0..y1).step_by(GROUP) {
            for (acc, &byte) in sums.iter_mut().zip(src.row(top)) {
                *acc = u16::from(byte);
            }
            for y in top + 1..(top + GROUP).min(y1) {
                for (acc, &byte) in sums.iter_mut().zip(src.row(y)) {
                    *acc += u16::from(byte);
                }
            }
            let mut running = [0u64; BPP];
            let (columns, _) = sums.as_chunks::<BPP>();
            for (p, acc) in prefix[1..].iter_mut().zip(columns) {
                for c in 0..BPP {
                    running[c] += u64::from(acc[c]);
                    p[c] = if top == y0 {
                        running[c]
                    } else {
                        p[c] + running[c]
                    };
                }
            }
        }
        let rows = (y1 - y0) as u64;
        // Fixed point: average = (total * inv + 2^31) >> 32 with inv = 2^32 / area, rounded.
        let inv = [narrow, narrow + 1].map(|w| {
            let area = w as u64 * rows;
            ((1u64 << 32) + area / 2) / area.max(1)
        });
        let (out_pixels, _) = out_row.as_chunks_mut::<BPP>();
        for (&(x0, x1), px) in cols.iter().zip(out_pixels) {
            let (left, right) = (prefix[x0], prefix[x1]);
            let inv = inv[usize::from(x1 - x0 > narrow)];
            for c in 0..3 {
                // At most 255 but for rounding on huge boxes; never wrap.
                px[c] = (((right[c] - left[c]) * inv + (1 << 31)) >> 32).min(255) as u8;
            }
            px[3] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w`x`h` BGRX frame where pixel (x, y) is `f(x, y)` as 0xRRGGBB, with `pad` bytes of
    /// junk after every row.
    fn frame_bytes(w: u32, h: u32, pad: usize, f: impl Fn(u32, u32) -> u32) -> Vec<u8> {
        let mut bytes = Vec::new();
        for y in 0..h {
            for x in 0..w {
                bytes.extend_from_slice(&f(x, y).to_le_bytes());
            }
            bytes.extend(std::iter::repeat_n(0xAB, pad));
        }
        bytes
    }

    fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let mut reader = ::png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("valid PNG");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("PNG frame");
        assert_eq!(info.color_type, ::png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    #[test]
    fn png_of_padded_frame_has_the_right_pixels() {
        let bytes = frame_bytes(5, 3, 8, |x, y| (x * 40) << 16 | (y * 80) << 8 | 0x11);
        let frame = Frame::new(&bytes, 5, 3, 5 * 4 + 8, PixelFormat::Bgrx).expect("frame");
        let out = FrameEncoder::default()
            .encode(frame, ImageFormat::Png, None)
            .expect("encode");
        assert_eq!(
            (out.width, out.height, out.layout),
            (5, 3, PixelLayout::Rgb8)
        );
        let (w, h, rgb) = decode_png(&out.bytes);
        assert_eq!((w, h), (5, 3));
        let px = |x: usize, y: usize| &rgb[(y * 5 + x) * 3..(y * 5 + x) * 3 + 3];
        assert_eq!(px(0, 0), [0, 0, 0x11]);
        assert_eq!(px(4, 2), [160, 160, 0x11]);
        assert_eq!(px(2, 1), [80, 80, 0x11]);
    }

    /// Frames of several PNG bands (flat areas, gradients, noise; an odd width, padded rows)
    /// and of a single column decode to exactly their pixels, on any number of threads.
    #[test]
    fn png_bands_decode_to_the_frame() {
        let pixel = |x: u32, y: u32| match y {
            0..300 => 0x00_30_60_90,
            300..700 => (x % 256) << 16 | (y % 256) << 8 | ((x + y) % 256),
            _ if x % 7 < 3 => 0x00_ff_ff_ff,
            _ => (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)).rotate_left(13),
        };
        let rgb = |w: u32, h: u32| -> Vec<u8> {
            (0..h)
                .flat_map(|y| (0..w).flat_map(move |x| pixel(x, y).to_be_bytes()[1..].to_vec()))
                .collect()
        };
        // 3.3 MB of filtered rows: three bands.
        for (w, h, pad) in [(1001, 1100, 12), (1, 900, 4)] {
            let bytes = frame_bytes(w, h, pad, pixel);
            let frame =
                Frame::new(&bytes, w, h, w as usize * 4 + pad, PixelFormat::Bgrx).expect("frame");
            for threads in [1, 2, 3] {
                let mut encoder = FrameEncoder {
                    threads,
                    ..Default::default()
                };
                // Twice: the second frame reuses the first one's deflate contexts.
                for _ in 0..2 {
                    let out = encoder
                        .encode(frame, ImageFormat::Png, None)
                        .expect("encode");
                    let (dw, dh, decoded) = decode_png(&out.bytes);
                    assert_eq!((dw, dh), (w, h));
                    assert!(decoded == rgb(w, h), "{w}x{h} on {threads} threads");
                }
            }
        }
    }

    /// The same picture grabbed as BGRX and as RGBA (`screencap`'s order, alpha 255), both
    /// with padded rows, encodes to the same image in every format, at full size and
    /// scaled; raw bodies are BGRX either way, as the protocol sends them.
    #[test]
    fn each_pixel_format_encodes_to_the_same_image() {
        let (w, h, pad) = (37u32, 23u32, 8usize);
        let pixel =
            |x: u32, y: u32| (x * 7 % 256) << 16 | (y * 11 % 256) << 8 | ((x ^ y) * 5 % 256);
        let bgrx = frame_bytes(w, h, pad, pixel);
        let mut rgba = Vec::new();
        for y in 0..h {
            for x in 0..w {
                let [_, r, g, b] = pixel(x, y).to_be_bytes();
                rgba.extend_from_slice(&[r, g, b, 0xff]);
            }
            rgba.extend(std::iter::repeat_n(0xCD, pad));
        }
        let stride = w as usize * 4 + pad;
        let frames = [
            Frame::new(&bgrx, w, h, stride, PixelFormat::Bgrx).expect("frame"),
            Frame::new(&rgba, w, h, stride, PixelFormat::Rgbx).expect("frame"),
        ];
        let formats = [
            ImageFormat::Png,
            ImageFormat::Jpeg { quality: 90 },
            ImageFormat::Raw { zstd: None },
            ImageFormat::Raw { zstd: Some(1) },
        ];
        for format in formats {
            for max_size in [None, Some((10, 10))] {
                let [a, b] = frames.map(|frame| {
                    FrameEncoder::default()
                        .encode(frame, format, max_size)
                        .expect("encode")
                });
                assert_eq!((a.width, a.height, a.layout), (b.width, b.height, b.layout));
                assert!(a.bytes == b.bytes, "{format:?} scaled to {max_size:?}");
            }
        }
        let raw = FrameEncoder::default()
            .encode(frames[1], ImageFormat::Raw { zstd: None }, None)
            .expect("raw");
        assert_eq!(raw.layout, PixelLayout::Bgrx8);
        assert_eq!(raw.bytes, frame_bytes(w, h, 0, pixel));
        let (_, _, rgb) = decode_png(
            &FrameEncoder::default()
                .encode(frames[1], ImageFormat::Png, None)
                .expect("png")
                .bytes,
        );
        let expected: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |x| pixel(x, y).to_be_bytes()[1..].to_vec()))
            .collect();
        assert!(rgb == expected, "PNG of RGBA pixels");
    }

    #[test]
    fn raw_of_padded_frame_drops_the_padding() {
        let bytes = frame_bytes(3, 2, 4, |x, y| x + 10 * y);
        let frame = Frame::new(&bytes, 3, 2, 16, PixelFormat::Bgrx).expect("frame");
        let mut encoder = FrameEncoder::default();
        let raw = encoder
            .encode(frame, ImageFormat::Raw { zstd: None }, None)
            .expect("raw");
        assert_eq!(raw.bytes, frame_bytes(3, 2, 0, |x, y| x + 10 * y));
        let packed = encoder
            .encode(frame, ImageFormat::Raw { zstd: Some(3) }, None)
            .expect("zstd");
        assert_eq!(
            zstd::bulk::decompress(&packed.bytes, 24).expect("zstd frame"),
            raw.bytes
        );
    }

    /// Number of zstd frames in `body`.
    fn zstd_frames(mut body: &[u8]) -> usize {
        let mut frames = 0;
        while !body.is_empty() {
            let len = zstd::zstd_safe::find_frame_compressed_size(body).expect("a whole frame");
            body = &body[len..];
            frames += 1;
        }
        frames
    }

    #[test]
    fn zstd_parts_decode_as_one_stream() {
        // 3.7 MB: four 1 MiB parts, the last one short.
        let (w, h) = (1021, 901);
        let bytes = frame_bytes(w, h, 0, |x, y| (x * 7) ^ (y * 13) << 8);
        let frame = Frame::new(&bytes, w, h, w as usize * 4, PixelFormat::Bgrx).expect("frame");
        for threads in [1, 2, 3] {
            let mut encoder = FrameEncoder {
                threads,
                ..Default::default()
            };
            for level in [1, 3] {
                let out = encoder
                    .encode(frame, ImageFormat::Raw { zstd: Some(level) }, None)
                    .expect("zstd");
                assert_eq!(zstd_frames(&out.bytes), 4);
                let bulk = zstd::bulk::decompress(&out.bytes, bytes.len()).expect("bulk");
                assert_eq!(bulk, bytes, "{threads} threads, level {level}");
                let streamed = zstd::decode_all(&out.bytes[..]).expect("stream");
                assert_eq!(streamed, bytes, "{threads} threads, level {level}");
            }
            assert_eq!(encoder.zstd.len(), threads);
        }
        // Small frames stay one zstd frame.
        let small = Frame::new(
            &bytes[..w as usize * 4 * 10],
            w,
            10,
            w as usize * 4,
            PixelFormat::Bgrx,
        )
        .expect("frame");
        let out = FrameEncoder::default()
            .encode(small, ImageFormat::Raw { zstd: Some(1) }, None)
            .expect("zstd");
        assert_eq!(zstd_frames(&out.bytes), 1);
    }

    #[test]
    fn downscale_averages_boxes() {
        // 4x2 with four 1x2 columns: 0, 100, 200, 50 (blue channel); halve the width.
        let values = [0u32, 100, 200, 50];
        let bytes = frame_bytes(4, 2, 0, |x, _| values[x as usize]);
        let frame = Frame::new(&bytes, 4, 2, 16, PixelFormat::Bgrx).expect("frame");
        let out = FrameEncoder::default()
            .encode(frame, ImageFormat::Raw { zstd: None }, Some((2, 100)))
            .expect("encode");
        assert_eq!((out.width, out.height), (2, 1));
        assert_eq!(out.bytes, [50, 0, 0, 0, 125, 0, 0, 0]);
    }

    #[test]
    fn downscale_matches_exact_box_averages() {
        let (sw, sh) = (37u32, 23u32);
        let value = |x: u32, y: u32| (x * 97 + y * 31) % 256;
        let bytes = frame_bytes(sw, sh, 0, |x, y| value(x, y) << 16 | value(y, x) << 8 | 7);
        let frame = Frame::new(&bytes, sw, sh, sw as usize * 4, PixelFormat::Bgrx).expect("frame");
        let (dw, dh) = (10u32, 7u32);
        let mut out = Vec::new();
        downscale(frame, dw, dh, &mut out);
        for j in 0..dh {
            for i in 0..dw {
                let (x0, x1) = (i * sw / dw, (i + 1) * sw / dw);
                let (y0, y1) = (j * sh / dh, (j + 1) * sh / dh);
                let n = f64::from((x1 - x0) * (y1 - y0));
                let mean = |f: &dyn Fn(u32, u32) -> u32| {
                    let sum: u32 = (y0..y1)
                        .flat_map(|y| (x0..x1).map(move |x| (x, y)))
                        .map(|(x, y)| f(x, y))
                        .sum();
                    (f64::from(sum) / n).round() as i32
                };
                let px = &out[((j * dw + i) * 4) as usize..][..4];
                let red = mean(&|x, y| value(x, y));
                let green = mean(&|x, y| value(y, x));
                assert!((i32::from(px[2]) - red).abs() <= 1, "red at {i},{j}");
                assert!((i32::from(px[1]) - green).abs() <= 1, "green at {i},{j}");
                assert_eq!((px[0], px[3]), (7, 0), "blue and padding at {i},{j}");
            }
        }
    }

    #[test]
    fn downscale_sums_boxes_taller_than_a_u16_lane_holds() {
        // 500 rows of 255 overflow a u16 sum unless the rows go in groups.
        let bytes = frame_bytes(3, 500, 0, |x, y| if y < 300 { 0xff_ff_ff } else { x * 100 });
        let frame = Frame::new(&bytes, 3, 500, 12, PixelFormat::Bgrx).expect("frame");
        let mut out = Vec::new();
        downscale(frame, 1, 1, &mut out);
        // Red and green: 300 of 500 rows are 255. Blue adds 0, 100 and 200 in the other rows.
        let blue = ((255 * 300 * 3 + 300 * 200) / 1500_u32) as u8;
        assert_eq!(out, [blue, 153, 153, 0]);
    }

    #[test]
    fn fit_keeps_aspect_and_never_upscales() {
        assert_eq!(fit(1920, 1080, None), (1920, 1080));
        assert_eq!(fit(1920, 1080, Some((4000, 4000))), (1920, 1080));
        assert_eq!(fit(1920, 1080, Some((1280, 1280))), (1280, 720));
        assert_eq!(fit(1920, 1080, Some((1920, 540))), (960, 540));
        assert_eq!(fit(640, 480, Some((100, 100))), (100, 75));
        assert_eq!(fit(10_000, 1, Some((10, 10))), (10, 1));
        assert_eq!(fit(1, 10_000, Some((10, 10))), (1, 10));
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        let bad = [
            ImageFormat::Jpeg { quality: 0 },
            ImageFormat::Jpeg { quality: 101 },
            ImageFormat::Raw { zstd: Some(23) },
        ];
        for format in bad {
            let req = ScreenshotRequest {
                format,
                ..Default::default()
            };
            assert!(
                matches!(check_request(&req), Err(WireError::InvalidArgument { .. })),
                "{format:?} accepted"
            );
        }
        for max_size in [(0, 10), (10, 0), (MAX_IMAGE_EDGE + 1, 10)] {
            let req = ScreenshotRequest {
                max_size: Some(max_size),
                ..Default::default()
            };
            assert!(matches!(
                check_request(&req),
                Err(WireError::InvalidArgument { .. })
            ));
        }
        let wide = ScreenshotRequest {
            region: Some(Rect::new(0, 0, MAX_IMAGE_EDGE + 1, 5)),
            ..Default::default()
        };
        assert!(matches!(
            check_request(&wide),
            Err(WireError::InvalidArgument { message }) if message.contains("limit")
        ));
        let empty = ScreenshotRequest {
            region: Some(Rect::new(0, 0, 0, 5)),
            ..Default::default()
        };
        assert!(matches!(
            check_request(&empty),
            Err(WireError::InvalidArgument { message }) if message.contains("empty")
        ));
        for r in [
            Rect::new(-1, 0, 10, 10),
            Rect::new(0, 0, 101, 10),
            Rect::new(95, 95, 10, 10),
            Rect::new(200, 0, 1, 1),
        ] {
            assert!(matches!(
                source_rect(Some(r), 100, 100),
                Err(WireError::InvalidArgument { message }) if message.contains("100x100 screen")
            ));
        }
        assert_eq!(
            source_rect(Some(Rect::new(90, 0, 10, 100)), 100, 100),
            Ok(Rect::new(90, 0, 10, 100))
        );
        let huge = Rect::new(0, 0, MAX_IMAGE_EDGE + 1, 10);
        assert!(check_output(huge, None).is_err());
        assert!(check_output(huge, Some((1000, 1000))).is_ok());
    }
}

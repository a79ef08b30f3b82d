//! Screenshots for the HTML report: decoded from the trajectory's PNGs, shrunk and
//! re-encoded as JPEG (the pure-Rust `jpeg-encoder`, also used by the guest), and embedded
//! as data URLs.
//! Sizes follow a byte budget for the whole page, so a short run keeps sharp 960 px images
//! and a long one still opens as a file of a few megabytes.

use crate::picture::{self, Rgb};
use base64::Engine;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// JPEG bytes all images of a page may take together (base64 adds a third).
const BUDGET: usize = 3 << 20;
/// Width of images when few enough fit the budget at full size.
const FULL_WIDTH: u32 = 960;
/// The narrowest planned width; set-of-marks labels stay legible.
const MIN_WIDTH: u32 = 640;
/// Images that fit the budget at full width.
pub(crate) const FULL_COUNT: usize = 64;

/// How to encode the images of one page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Plan {
    /// Widest image (portrait images are bounded by 1.25 times this in height).
    pub(crate) max_width: u32,
    /// JPEG quality of the first attempt.
    pub(crate) quality: u8,
    /// Bytes one image should stay under; bigger encodes are redone smaller.
    pub(crate) cap: usize,
}

impl Plan {
    /// The plan for a page of `count` images.
    pub(crate) fn for_count(count: usize) -> Self {
        let n = count.max(1);
        let max_width = if n <= FULL_COUNT {
            FULL_WIDTH
        } else {
            let w = f64::from(FULL_WIDTH) * (FULL_COUNT as f64 / n as f64).sqrt();
            w.round().max(f64::from(MIN_WIDTH)) as u32
        };
        Self {
            max_width,
            quality: 70,
            cap: (BUDGET / n).clamp(12 << 10, 256 << 10),
        }
    }
}

/// An image ready for an `<img src>`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Embedded {
    /// `data:image/jpeg;base64,...`
    pub(crate) url: String,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Size of the source image.
    pub(crate) original: (u32, u32),
}

/// Reads, shrinks and encodes one image; the error says why it could not be shown.
pub(crate) fn embed(path: &Path, plan: &Plan) -> Result<Embedded, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot open: {e}"))?;
    let img = picture::decode(&bytes).map_err(|e| format!("cannot decode: {e}"))?;
    let (w, h) = (img.width, img.height);
    let max_h = plan.max_width * 5 / 4;
    let fit = (f64::from(plan.max_width) / f64::from(w))
        .min(f64::from(max_h) / f64::from(h))
        .min(1.0);
    let (mut jpeg, mut width, mut height) = encode(&img, fit, plan.quality)?;
    if jpeg.len() > plan.cap {
        // One retry sized to fit the cap: text stays more legible at a lower quality than at
        // a smaller size, so quality goes first (q45 is about 0.7 of q70's bytes); size then
        // follows, bytes growing about with the pixel count.
        let at_q45 = jpeg.len() as f64 * 0.7;
        let shrink = ((plan.cap as f64 / at_q45).sqrt() * 0.95).clamp(0.5, 1.0);
        (jpeg, width, height) = encode(&img, fit * shrink, 45)?;
    }
    let mut url = String::from("data:image/jpeg;base64,");
    base64::engine::general_purpose::STANDARD.encode_string(&jpeg, &mut url);
    Ok(Embedded {
        url,
        width,
        height,
        original: (w, h),
    })
}

/// `img` scaled by `scale` as JPEG, with its size.
fn encode(img: &Rgb, scale: f64, quality: u8) -> Result<(Vec<u8>, u32, u32), String> {
    let (w, h) = (img.width, img.height);
    let (nw, nh) = (
        ((f64::from(w) * scale).round() as u32).clamp(1, w),
        ((f64::from(h) * scale).round() as u32).clamp(1, h),
    );
    let rgb = img.shrink(nw, nh);
    let too_big = || format!("{nw}x{nh} is too large for JPEG");
    let mut jpeg = Vec::new();
    jpeg_encoder::Encoder::new(&mut jpeg, quality)
        .encode(
            &rgb.pixels,
            u16::try_from(nw).map_err(|_| too_big())?,
            u16::try_from(nh).map_err(|_| too_big())?,
            jpeg_encoder::ColorType::Rgb,
        )
        .map_err(|e| format!("cannot encode: {e}"))?;
    Ok((jpeg, nw, nh))
}

/// [`embed`] for many images, on a few threads (decoding and resizing dominate).
pub(crate) fn embed_all(paths: &[PathBuf], plan: &Plan) -> Vec<Result<Embedded, String>> {
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<Result<Embedded, String>>>> =
        paths.iter().map(|_| Mutex::new(None)).collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(4)
        .min(paths.len())
        .max(1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(p) = paths.get(i) else { break };
                    let r = embed(p, plan);
                    *out[i]
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
                }
            });
        }
    });
    out.into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_else(|| Err("not encoded".to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_shrink_with_the_count() {
        let few = Plan::for_count(10);
        assert_eq!(few.max_width, FULL_WIDTH);
        let many = Plan::for_count(200);
        assert!(many.max_width < few.max_width && many.max_width >= MIN_WIDTH);
        assert!(many.cap * 200 <= BUDGET + (12 << 10) * 200);
    }

    #[test]
    fn images_are_shrunk_and_bad_files_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.png");
        let png = picture::png_rgba(1920, 1080, |x, y| {
            [(x % 256) as u8, (y % 256) as u8, 90, 255]
        });
        std::fs::write(&p, png).unwrap();
        let e = embed(&p, &Plan::for_count(1)).unwrap();
        assert_eq!((e.width, e.height), (960, 540));
        assert_eq!(e.original, (1920, 1080));
        let bad = dir.path().join("bad.png");
        std::fs::write(&bad, b"not a png").unwrap();
        let all = embed_all(
            &[p, bad, dir.path().join("missing.png")],
            &Plan::for_count(3),
        );
        assert!(all[0].is_ok());
        assert!(
            all[1].as_ref().unwrap_err().contains("decode"),
            "{:?}",
            all[1]
        );
        assert!(
            all[2].as_ref().unwrap_err().contains("open"),
            "{:?}",
            all[2]
        );
    }
}

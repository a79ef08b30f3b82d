//! `screencap`'s raw output: a little-endian header (width, height, pixel format, and on
//! newer Android a data space, 12 or 16 bytes: told apart by the length, as the header
//! itself does not say) followed by the rows. Four-byte pixels (RGBA_8888, RGBX_8888,
//! BGRA_8888: every phone of recent years) go to the frame encoders as they are, which read
//! either order; the rare three- and two-byte ones are widened to RGBX first.

use pincer_guest_core::encode::PixelFormat;
use std::borrow::Cow;

/// Why a capture cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ScreencapError {
    /// Fewer bytes than the header promises.
    #[error(
        "screencap: {got} bytes for a {width}x{height} frame of {bpp} bytes a pixel (truncated?)"
    )]
    Truncated {
        /// Bytes read.
        got: usize,
        /// Width in the header.
        width: u32,
        /// Height in the header.
        height: u32,
        /// Bytes a pixel.
        bpp: usize,
    },
    /// No header at all, or a size no screen has.
    #[error("screencap: not a raw frame ({0})")]
    Malformed(String),
    /// A pixel format this shim does not convert.
    #[error(
        "screencap: pixel format {0} is not RGBA_8888, RGBX_8888, RGB_888, RGB_565 or BGRA_8888"
    )]
    Format(u32),
}

/// A captured screen in four-byte pixels, rows packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Capture<'a> {
    /// Width in pixels.
    pub(crate) width: u32,
    /// Height in pixels.
    pub(crate) height: u32,
    /// `width * height * 4` bytes: `screencap`'s own, or widened from smaller pixels.
    pub(crate) pixels: Cow<'a, [u8]>,
    /// The order of each pixel's bytes.
    pub(crate) format: PixelFormat,
    /// The header's length (12 or 16).
    pub(crate) header: usize,
}

/// Bytes a pixel of an Android `PixelFormat`.
fn bytes_per_pixel(format: u32) -> Option<usize> {
    match format {
        1 | 2 | 5 => Some(4),
        3 => Some(3),
        4 => Some(2),
        _ => None,
    }
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a raw capture; four-byte pixels stay where they are in `raw`.
pub(crate) fn parse(raw: &[u8]) -> Result<Capture<'_>, ScreencapError> {
    if raw.len() < 12 {
        return Err(ScreencapError::Malformed(format!("{} bytes", raw.len())));
    }
    let (width, height, format) = (word(raw, 0), word(raw, 4), word(raw, 8));
    if width == 0 || height == 0 || width > 16_384 || height > 16_384 {
        return Err(ScreencapError::Malformed(format!(
            "a {width}x{height} screen"
        )));
    }
    let bpp = bytes_per_pixel(format).ok_or(ScreencapError::Format(format))?;
    let pixels = width as usize * height as usize * bpp;
    // The data space word came with Android 10: the length says which header this is.
    let header = if raw.len() >= 16 + pixels && raw.len() != 12 + pixels {
        16
    } else {
        12
    };
    let body = raw
        .get(header..header + pixels)
        .ok_or(ScreencapError::Truncated {
            got: raw.len(),
            width,
            height,
            bpp,
        })?;
    let (pixels, format) = match format {
        // RGBA / RGBX.
        1 | 2 => (Cow::Borrowed(body), PixelFormat::Rgbx),
        // BGRA.
        5 => (Cow::Borrowed(body), PixelFormat::Bgrx),
        // RGB.
        3 => {
            let (pixels, _) = body.as_chunks::<3>();
            let wide = pixels.iter().flat_map(|&[r, g, b]| [r, g, b, 0]).collect();
            (Cow::Owned(wide), PixelFormat::Rgbx)
        }
        // RGB 5-6-5, each channel widened to the full 0-255 range.
        _ => {
            let (pixels, _) = body.as_chunks::<2>();
            let wide = pixels
                .iter()
                .flat_map(|&p| {
                    let v = u16::from_le_bytes(p);
                    let (r, g, b) = ((v >> 11) & 0x1f, (v >> 5) & 0x3f, v & 0x1f);
                    [
                        ((r << 3) | (r >> 2)) as u8,
                        ((g << 2) | (g >> 4)) as u8,
                        ((b << 3) | (b >> 2)) as u8,
                        0,
                    ]
                })
                .collect();
            (Cow::Owned(wide), PixelFormat::Rgbx)
        }
    };
    Ok(Capture {
        width,
        height,
        pixels,
        format,
        header,
    })
}

#[cfg(test)]
/// A raw capture as `screencap` writes it, for tests: RGBA_8888 pixels from
/// `rgb` (3 bytes a pixel), with the 16-byte header of Android 10 and later or the 12-byte
/// one of earlier versions.
pub(crate) fn synthesize(width: u32, height: u32, rgb: &[u8], with_dataspace: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + rgb.len() / 3 * 4);
    out.extend_from_slice(&width.to_le_bytes());
    out.extend_from_slice(&height.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    if with_dataspace {
        // sRGB
        out.extend_from_slice(&1u32.to_le_bytes());
    }
    for p in rgb.chunks_exact(3) {
        out.extend_from_slice(&[p[0], p[1], p[2], 0xff]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_header_lengths_are_read_by_length() {
        let rgb = [10u8, 20, 30, 40, 50, 60];
        for dataspace in [false, true] {
            let raw = synthesize(2, 1, &rgb, dataspace);
            let c = parse(&raw).unwrap();
            assert_eq!(c.header, if dataspace { 16 } else { 12 });
            assert_eq!((c.width, c.height), (2, 1));
            assert_eq!(c.format, PixelFormat::Rgbx);
            assert_eq!(*c.pixels, [10, 20, 30, 0xff, 40, 50, 60, 0xff]);
        }
    }

    /// Four-byte pixels are handed over where `screencap` wrote them, in its order; smaller
    /// ones are widened to RGBX.
    #[test]
    fn four_byte_pixels_are_not_copied_and_smaller_ones_are_widened() {
        let raw = synthesize(2, 1, &[10, 20, 30, 40, 50, 60], false);
        let c = parse(&raw).unwrap();
        assert!(matches!(c.pixels, Cow::Borrowed(p) if p.as_ptr() == raw[12..].as_ptr()));
        let mut bgra = raw.clone();
        bgra[8] = 5;
        let c = parse(&bgra).unwrap();
        assert_eq!(c.format, PixelFormat::Bgrx);
        assert!(matches!(c.pixels, Cow::Borrowed(_)));
        let mut rgb = Vec::new();
        for w in [2u32, 1, 3] {
            rgb.extend_from_slice(&w.to_le_bytes());
        }
        rgb.extend_from_slice(&[10, 20, 30, 40, 50, 60]);
        let c = parse(&rgb).unwrap();
        assert_eq!(c.format, PixelFormat::Rgbx);
        assert_eq!(*c.pixels, [10, 20, 30, 0, 40, 50, 60, 0]);
    }

    #[test]
    fn sixteen_bit_pixels_widen_to_full_range() {
        let mut raw = Vec::new();
        for w in [1u32, 1, 4] {
            raw.extend_from_slice(&w.to_le_bytes());
        }
        raw.extend_from_slice(&0xf800u16.to_le_bytes()); // pure red
        let c = parse(&raw).unwrap();
        assert_eq!(c.format, PixelFormat::Rgbx);
        assert_eq!(*c.pixels, [255, 0, 0, 0]);
    }

    #[test]
    fn garbage_is_named_never_a_panic() {
        let full = synthesize(4, 4, &[7; 48], true);
        let e = parse(&full[..30]).unwrap_err();
        assert!(
            matches!(
                e,
                ScreencapError::Truncated {
                    width: 4,
                    height: 4,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("screencap:"));
        assert!(matches!(parse(b"short"), Err(ScreencapError::Malformed(_))));
        let mut odd = full.clone();
        odd[8] = 9;
        assert_eq!(parse(&odd), Err(ScreencapError::Format(9)));
        let mut huge = full;
        huge[0..4].copy_from_slice(&100_000u32.to_le_bytes());
        assert!(matches!(parse(&huge), Err(ScreencapError::Malformed(_))));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_u32;
        for len in 0..400 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed & 0xff) as u8
                })
                .collect();
            let _ = parse(&bytes);
        }
    }
}

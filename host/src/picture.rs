//! PNG and JPEG files as 8-bit RGB pixels, and their area-sampled reduction: what image
//! checks compare and what reports show. Pure Rust (png, zune-jpeg), and no more of a
//! general image library than that, so a fresh build does not compile colour management and
//! a dozen formats nobody reads.

use std::io::Cursor;
use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

/// Most decoded bytes a picture may take (a 16K x 8K RGBA image): a larger claim in a file's
/// header is refused before anything is allocated.
const MAX_DECODED: usize = 512 << 20;

/// An image as 8-bit RGB, row after row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rgb {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) pixels: Vec<u8>,
}

/// Why bytes are not a picture.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PictureError {
    /// Neither PNG nor JPEG.
    #[error("not a PNG or JPEG image")]
    Format,
    /// A broken or unsupported PNG.
    #[error("PNG: {0}")]
    Png(#[from] png::DecodingError),
    /// A broken or unsupported JPEG.
    #[error("JPEG: {0}")]
    Jpeg(String),
    /// Zero width or height.
    #[error("the image has no pixels")]
    Empty,
}

/// Decodes a PNG or JPEG (told apart by their signatures) to 8-bit RGB. As OpenCV's
/// `imread` does: alpha is dropped without compositing, 16-bit samples keep their high byte,
/// grey becomes three equal channels, palettes are expanded.
pub(crate) fn decode(bytes: &[u8]) -> Result<Rgb, PictureError> {
    let rgb = if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(bytes)?
    } else if bytes.starts_with(&[0xff, 0xd8]) {
        decode_jpeg(bytes)?
    } else {
        return Err(PictureError::Format);
    };
    if rgb.width == 0 || rgb.height == 0 {
        return Err(PictureError::Empty);
    }
    Ok(rgb)
}

fn decode_png(bytes: &[u8]) -> Result<Rgb, PictureError> {
    let mut decoder =
        png::Decoder::new_with_limits(Cursor::new(bytes), png::Limits { bytes: MAX_DECODED });
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info()?;
    let size = reader
        .output_buffer_size()
        .ok_or(png::DecodingError::LimitsExceeded)?;
    let mut buf = vec![0; size];
    let frame = reader.next_frame(&mut buf)?;
    buf.truncate(frame.buffer_size());
    let channels = frame.color_type.samples();
    let pixels = match frame.color_type {
        png::ColorType::Rgb => buf,
        _ => buf
            .chunks_exact(channels)
            .flat_map(|p| match p.len() {
                1 | 2 => [p[0], p[0], p[0]],
                _ => [p[0], p[1], p[2]],
            })
            .collect(),
    };
    Ok(Rgb {
        width: frame.width,
        height: frame.height,
        pixels,
    })
}

fn decode_jpeg(bytes: &[u8]) -> Result<Rgb, PictureError> {
    let jpeg = |e: zune_jpeg::errors::DecodeErrors| PictureError::Jpeg(e.to_string());
    let options = DecoderOptions::default().jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(jpeg)?;
    let info = decoder
        .info()
        .ok_or_else(|| PictureError::Jpeg("no frame header".into()))?;
    let size = decoder
        .output_buffer_size()
        .filter(|&n| n <= MAX_DECODED)
        .ok_or_else(|| PictureError::Jpeg("too large to decode".into()))?;
    let mut pixels = vec![0; size];
    decoder.decode_into(&mut pixels).map_err(jpeg)?;
    Ok(Rgb {
        width: u32::from(info.width),
        height: u32::from(info.height),
        pixels,
    })
}

impl Rgb {
    /// The image reduced to `width` x `height` (each no larger than now) by area sampling:
    /// each new pixel is the mean of the old pixels it covers, so text and thin lines fade
    /// rather than vanish.
    pub(crate) fn shrink(&self, width: u32, height: u32) -> Self {
        let (width, height) = (width.clamp(1, self.width), height.clamp(1, self.height));
        if (width, height) == (self.width, self.height) {
            return self.clone();
        }
        // Old columns [from, to) under each new column.
        let span = |new: u32, old: u32, i: u32| {
            let from = u64::from(i) * u64::from(old) / u64::from(new);
            let to = (u64::from(i + 1) * u64::from(old) / u64::from(new)).max(from + 1);
            (from as usize, to as usize)
        };
        let cols: Vec<(usize, usize)> = (0..width).map(|x| span(width, self.width, x)).collect();
        let row_len = self.width as usize * 3;
        let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
        let mut sums = vec![0u32; row_len];
        for y in 0..height {
            let (top, bottom) = span(height, self.height, y);
            sums.fill(0);
            for row in self.pixels[top * row_len..bottom * row_len].chunks_exact(row_len) {
                sums.iter_mut()
                    .zip(row)
                    .for_each(|(s, &v)| *s += u32::from(v));
            }
            for &(left, right) in &cols {
                let n = ((right - left) * (bottom - top)) as u32;
                for c in 0..3 {
                    let total: u32 = (left..right).map(|x| sums[x * 3 + c]).sum();
                    pixels.push(((total + n / 2) / n) as u8);
                }
            }
        }
        Self {
            width,
            height,
            pixels,
        }
    }
}

/// A PNG of RGBA pixels, for tests that need image files.
#[cfg(test)]
pub(crate) fn png_rgba(width: u32, height: u32, px: impl Fn(u32, u32) -> [u8; 4]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgba);
    let data: Vec<u8> = (0..height)
        .flat_map(|y| (0..width).map(move |x| (x, y)))
        .flat_map(|(x, y)| px(x, y))
        .collect();
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(&data).unwrap();
    writer.finish().unwrap();
    out
}

/// A JPEG (quality 90) of one grey level, for tests that need image files.
#[cfg(test)]
pub(crate) fn jpeg_grey(width: u16, height: u16, level: u8) -> Vec<u8> {
    let mut jpeg = Vec::new();
    let pixels = vec![level; usize::from(width) * usize::from(height) * 3];
    jpeg_encoder::Encoder::new(&mut jpeg, 90)
        .encode(&pixels, width, height, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    jpeg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_of(color: png::ColorType, depth: png::BitDepth, w: u32, h: u32, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(color);
        encoder.set_depth(depth);
        if color == png::ColorType::Indexed {
            encoder.set_palette(vec![0, 0, 0, 10, 20, 30]);
        }
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(data).unwrap();
        writer.finish().unwrap();
        out
    }

    #[test]
    fn every_png_colour_type_becomes_rgb_as_opencv_reads_it() {
        use png::{BitDepth as D, ColorType as C};
        let px = |bytes: Vec<u8>| decode(&bytes).unwrap().pixels;
        assert_eq!(
            px(png_of(C::Grayscale, D::Eight, 1, 1, &[77])),
            [77, 77, 77]
        );
        assert_eq!(
            px(png_of(C::GrayscaleAlpha, D::Eight, 1, 1, &[77, 0])),
            [77; 3]
        );
        assert_eq!(
            px(png_of(C::Rgba, D::Eight, 1, 1, &[1, 2, 3, 0])),
            [1, 2, 3]
        );
        // 16-bit samples keep their high byte.
        assert_eq!(
            px(png_of(
                C::Rgb,
                D::Sixteen,
                1,
                1,
                &[0x12, 0xff, 0x34, 0x00, 0xff, 0xff]
            )),
            [0x12, 0x34, 0xff]
        );
        // A palette is expanded; a 1-bit grey pixel is 0 or 255.
        assert_eq!(px(png_of(C::Indexed, D::Eight, 1, 1, &[1])), [10, 20, 30]);
        assert_eq!(
            px(png_of(C::Grayscale, D::One, 2, 1, &[0b0100_0000])),
            [0, 0, 0, 255, 255, 255]
        );
    }

    #[test]
    fn jpegs_decode_and_junk_says_what_it_is() {
        let jpeg = jpeg_grey(16, 8, 180);
        let img = decode(&jpeg).unwrap();
        assert_eq!(
            (img.width, img.height, img.pixels.len()),
            (16, 8, 16 * 8 * 3)
        );
        assert!(img.pixels.iter().all(|&v| v.abs_diff(180) <= 2));
        assert!(matches!(decode(b"GIF89a"), Err(PictureError::Format)));
        let mut cut = png_rgba(8, 8, |_, _| [1, 2, 3, 255]);
        cut.truncate(cut.len() / 2);
        assert!(matches!(decode(&cut), Err(PictureError::Png(_))));
        assert!(matches!(decode(&jpeg[..20]), Err(PictureError::Jpeg(_))));
    }

    #[test]
    fn shrinking_averages_the_pixels_each_new_one_covers() {
        // Alternating black and white columns become grey, not black or white.
        let img = decode(&png_rgba(4, 2, |x, _| {
            if x % 2 == 0 { [0, 0, 0, 255] } else { [255; 4] }
        }))
        .unwrap();
        let half = img.shrink(2, 1);
        assert_eq!((half.width, half.height), (2, 1));
        assert_eq!(half.pixels, [128; 6]);
        // An uneven ratio covers every old pixel once; no growth.
        let odd = decode(&png_rgba(5, 3, |x, y| {
            [(x * 50) as u8, (y * 100) as u8, 7, 255]
        }))
        .unwrap();
        let small = odd.shrink(2, 2);
        assert_eq!(small.pixels.len(), 2 * 2 * 3);
        assert_eq!(&small.pixels[..3], &[25, 0, 7]);
        assert_eq!(odd.shrink(10, 10), odd);
    }
}

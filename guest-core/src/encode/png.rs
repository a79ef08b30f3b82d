//! PNG encoding of frames, in horizontal bands compressed on several cores.
//!
//! A PNG's image data is one zlib stream of filtered rows. Each band of rows is deflated on
//! its own (raw deflate, its last block ended with a sync flush so that the next band starts
//! on a byte boundary), primed with the filtered bytes just above it as its dictionary, so
//! the concatenation is one valid zlib stream that compresses almost as well as a single
//! pass: only the Huffman tables restart at each band. The Adler-32 checksums of the bands
//! are combined into the stream's.
//!
//! Rows go BGRX (or RGBX) → RGB → Paeth-filtered → deflate a few at a time, so a band's working set
//! stays in cache instead of a 6 MB RGB copy of the frame going through memory twice.
//! Deflate is zlib-rs at level 2 (zlib-ng's `deflate_fast`): on a 1080p
//! gtk3-widget-factory desktop 40% smaller than fdeflate's run-length-only output for about
//! one more millisecond of CPU, which the bands spread over the cores. Where the numbers
//! come from: the README's Speed section and `bench_1080p` in `crate::screen`.

use super::Frame;
use pincer_shared::WireError;
use std::sync::atomic::{AtomicUsize, Ordering};
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush, Status};

/// zlib-rs level: 2 is zlib-ng's `deflate_fast`. Level 1 (`deflate_quick`, static Huffman
/// codes only) is barely smaller than fdeflate; levels 3-6 save 1-4% more for 20-100% more
/// time.
const LEVEL: i32 = 2;

/// Deflate's window: the dictionary a band is primed with.
const WINDOW: usize = 32 * 1024;

/// Smallest band, in filtered bytes: smaller ones cost more in restarted Huffman tables,
/// dictionaries and thread hand-offs than they save. A 1080p frame has five.
const MIN_BAND: usize = 1024 * 1024;

/// Filtered bytes handed to the deflater at a time: small enough to stay in L2 cache.
const CHUNK: usize = 64 * 1024;

/// Compressed bytes taken from the deflater at a time.
const OUT_CHUNK: usize = 16 * 1024;

/// A PNG filter type byte (PNG specification, section 9.2).
const PAETH: u8 = 4;

/// What one thread keeps between frames, so that steady screenshots allocate no deflate
/// state and no row buffers.
pub(super) struct BandWorker {
    deflate: Deflate,
    /// The previous and current rows as RGB.
    rows: [Vec<u8>; 2],
    /// Filtered rows on their way to the deflater (and the dictionary, before a band).
    chunk: Vec<u8>,
    /// Compressed bytes on their way out of the deflater.
    out: Vec<u8>,
}

impl Default for BandWorker {
    fn default() -> Self {
        Self {
            deflate: Deflate::new_with_config(DeflateConfig {
                level: LEVEL,
                // Negative: raw deflate, as the bands are parts of one zlib stream.
                window_bits: -15,
                ..DeflateConfig::default()
            }),
            rows: [Vec::new(), Vec::new()],
            chunk: Vec::new(),
            out: vec![0; OUT_CHUNK],
        }
    }
}

/// A band's compressed bytes with the Adler-32 and length of its filtered data.
struct Band {
    deflated: Vec<u8>,
    adler: u32,
    len: usize,
}

/// Encodes `frame` as an RGB8 PNG on up to `threads` threads (this one included), with a
/// worker from `workers` (grown as needed) for each.
pub(super) fn encode(
    frame: Frame<'_>,
    workers: &mut Vec<BandWorker>,
    threads: usize,
) -> Result<Vec<u8>, WireError> {
    let (width, height) = (frame.width, frame.height);
    let filtered_row = width as usize * 3 + 1;
    let rows = height as usize;
    let count = (filtered_row * rows / MIN_BAND).clamp(1, rows);
    let bands: Vec<(usize, usize)> = (0..count)
        .map(|i| (i * rows / count, (i + 1) * rows / count))
        .collect();
    let next = AtomicUsize::new(0);
    let work = |worker: &mut BandWorker| {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(first, end)) = bands.get(i) else {
                return done;
            };
            done.push((i, worker.band(frame, first, end, end == rows)));
        }
    };
    let work = &work;
    let mut compressed: Vec<Option<Result<Band, WireError>>> = bands.iter().map(|_| None).collect();
    let threads = threads.clamp(1, count);
    if workers.len() < threads {
        workers.resize_with(threads, BandWorker::default);
    }
    let workers = &mut workers[..threads];
    std::thread::scope(|scope| {
        let (mine, others) = workers.split_at_mut(1);
        // A helper that cannot be started leaves its share to this thread.
        let helpers: Vec<_> = others
            .iter_mut()
            .filter_map(|worker| {
                std::thread::Builder::new()
                    .name("pincer-png".to_owned())
                    .spawn_scoped(scope, move || work(worker))
                    .ok()
            })
            .collect();
        let mut done = work(&mut mine[0]);
        for helper in helpers {
            // A helper that panicked leaves its bands empty, reported below.
            done.extend(helper.join().unwrap_or_default());
        }
        for (i, band) in done {
            compressed[i] = Some(band);
        }
    });

    let total: usize = compressed
        .iter()
        .flatten()
        .flatten()
        .map(|b| b.deflated.len())
        .sum();
    // zlib header (32 KiB window, "fast" compression level), data, Adler-32.
    let mut zlib = Vec::with_capacity(total + 6);
    zlib.extend_from_slice(&[0x78, 0x5e]);
    let mut adler = 1;
    for band in compressed {
        let band = band.ok_or_else(|| WireError::Internal {
            message: "a PNG compression thread panicked".to_owned(),
        })??;
        zlib.extend_from_slice(&band.deflated);
        adler = zlib_rs::adler32::adler32_combine(adler, band.adler, band.len as u64);
    }
    zlib.extend_from_slice(&adler.to_be_bytes());

    let mut bytes = Vec::with_capacity(zlib.len() + 128);
    let mut encoder = ::png::Encoder::new(&mut bytes, width, height);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(png_error)?;
    writer
        .write_chunk(::png::chunk::IDAT, &zlib)
        .map_err(png_error)?;
    writer.finish().map_err(png_error)?;
    Ok(bytes)
}

impl BandWorker {
    /// Filters and deflates rows `first..end`; `last`: the band ends the image.
    fn band(
        &mut self,
        frame: Frame<'_>,
        first: usize,
        end: usize,
        last: bool,
    ) -> Result<Band, WireError> {
        let filtered_row = frame.width as usize * 3 + 1;
        self.deflate.reset();
        if first > 0 {
            // The decoder has the last 32 KiB of the rows above in its window when it gets
            // here: the same bytes, filtered again, let this band refer back to them.
            let above = WINDOW.div_ceil(filtered_row).min(first);
            self.filter_rows(frame, first - above, first);
            let dictionary = &self.chunk[self.chunk.len().saturating_sub(WINDOW)..];
            self.deflate
                .set_dictionary(dictionary)
                .map_err(|e| deflate_error(e.as_str()))?;
        }
        let per_chunk = (CHUNK / filtered_row).max(1);
        let mut out = Vec::with_capacity((end - first) * filtered_row / 16 + 1024);
        let (mut adler, mut len) = (1, 0);
        let mut row = first;
        while row < end {
            let stop = (row + per_chunk).min(end);
            self.filter_rows(frame, row, stop);
            adler = zlib_rs::adler32::adler32(adler, &self.chunk);
            len += self.chunk.len();
            let flush = match (stop == end, last) {
                (false, _) => DeflateFlush::NoFlush,
                (true, false) => DeflateFlush::SyncFlush,
                (true, true) => DeflateFlush::Finish,
            };
            self.deflate_into(&mut out, flush)?;
            row = stop;
        }
        Ok(Band {
            deflated: out,
            adler,
            len,
        })
    }

    /// Rows `first..end`, each a filter type byte and the Paeth-filtered RGB row, into
    /// `self.chunk`.
    fn filter_rows(&mut self, frame: Frame<'_>, first: usize, end: usize) {
        let rgb_row = frame.width as usize * 3;
        let [prev, cur] = &mut self.rows;
        prev.resize(rgb_row, 0);
        cur.resize(rgb_row, 0);
        if first == 0 {
            prev.fill(0);
        } else {
            frame.row_to_rgb(first - 1, prev);
        }
        self.chunk.clear();
        for y in first..end {
            frame.row_to_rgb(y, cur);
            self.chunk.push(PAETH);
            let at = self.chunk.len();
            self.chunk.resize(at + rgb_row, 0);
            paeth(cur, prev, &mut self.chunk[at..]);
            std::mem::swap(prev, cur);
        }
    }

    /// Deflates `self.chunk` onto the end of `out` and completes `flush`.
    fn deflate_into(&mut self, out: &mut Vec<u8>, flush: DeflateFlush) -> Result<(), WireError> {
        let mut input = &self.chunk[..];
        loop {
            let (in_before, out_before) = (self.deflate.total_in(), self.deflate.total_out());
            let status = self
                .deflate
                .compress(input, &mut self.out, flush)
                .map_err(|e| deflate_error(e.as_str()))?;
            let consumed = (self.deflate.total_in() - in_before) as usize;
            let produced = (self.deflate.total_out() - out_before) as usize;
            out.extend_from_slice(&self.out[..produced]);
            input = &input[consumed..];
            // zlib's contract: a call that leaves output space unused has taken all the
            // input and done the flush; `Finish` is done at the stream's end.
            let done = match flush {
                DeflateFlush::Finish => status == Status::StreamEnd,
                _ => input.is_empty() && produced < self.out.len(),
            };
            if done {
                return Ok(());
            }
        }
    }
}

/// One row, Paeth-filtered (PNG specification, section 9.4) against the row above.
fn paeth(cur: &[u8], prev: &[u8], out: &mut [u8]) {
    const RGB: usize = 3;
    // The first pixel has nothing to its left: Paeth picks the byte above.
    for i in 0..RGB.min(cur.len()) {
        out[i] = cur[i].wrapping_sub(prev[i]);
    }
    if cur.len() <= RGB {
        return;
    }
    let n = cur.len() - RGB;
    // Slices of equal length so that the loop compiles to vector code without bounds checks.
    let (out, cur, left, above, corner) = (
        &mut out[RGB..],
        &cur[RGB..],
        &cur[..n],
        &prev[RGB..],
        &prev[..n],
    );
    for i in 0..n {
        out[i] = cur[i].wrapping_sub(predict(left[i], above[i], corner[i]));
    }
}

/// The Paeth predictor in unsigned bytes only (FPNGE's formulation), which vectorises:
/// pa = |b - c|, pb = |a - c|, and pc = |pa - pb| when c lies between a and b, else larger
/// than both.
fn predict(a: u8, b: u8, c: u8) -> u8 {
    let pa = b.max(c) - b.min(c);
    let pb = a.max(c) - a.min(c);
    let pc = if (a < c) == (c < b) {
        pa.max(pb) - pa.min(pb)
    } else {
        u8::MAX
    };
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

fn deflate_error(why: &str) -> WireError {
    WireError::Internal {
        message: format!("PNG compression failed: {why}"),
    }
}

fn png_error(e: ::png::EncodingError) -> WireError {
    WireError::Internal {
        message: format!("PNG encoding failed: {e}"),
    }
}

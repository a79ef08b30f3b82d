//! The screen as a screen cast delivers it: `pincer-screencast` (a program of its own, so
//! that pincer-agent does not link libpipewire) reads the compositor's PipeWire stream and
//! writes its frames to a pipe, and a thread here keeps only the latest. A compositor
//! sends a frame only when the screen changed, so a screenshot encodes the frame held,
//! and video counts frames as changes.

use pincer_guest_core::encode::PixelFormat;
use pincer_shared::WireError;
use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The program that reads the stream.
const READER: &str = "pincer-screencast";
/// A frame header's first word (see `screencast.rs`).
const MAGIC: u32 = u32::from_le_bytes(*b"PCF1");
/// The largest frame accepted from the reader: 16384x16384 BGRx.
const MAX_FRAME: usize = 16384 * 16384 * 4;

/// The latest frame of a stream, as copied out of PipeWire's buffer.
#[derive(Debug, Default)]
pub(crate) struct Latest {
    /// Pixels, `stride` bytes a row.
    pub(crate) pixels: Vec<u8>,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) stride: usize,
    pub(crate) format: Option<PixelFormat>,
    /// Frames received so far (0: none yet).
    pub(crate) count: u64,
    /// Why the stream stopped, once it did.
    pub(crate) ended: Option<String>,
}

/// What the stream's thread and its readers share.
#[derive(Debug, Default)]
struct Shared {
    latest: Mutex<Latest>,
    arrived: Condvar,
}

/// A running stream of node `node`'s frames; stops its reader on drop.
pub(crate) struct Frames {
    shared: Arc<Shared>,
    reader: Child,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frames")
            .field("count", &self.lock().count)
            .finish_non_exhaustive()
    }
}

impl Frames {
    /// Starts `pincer-screencast` on node `node` (it finds the session's PipeWire daemon
    /// through `XDG_RUNTIME_DIR`) and a thread that keeps its latest frame.
    pub(crate) fn start(node: u32) -> Result<Self, WireError> {
        let program = reader_program();
        let mut reader = Command::new(&program)
            .arg(node.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| WireError::Unsupported {
                what: format!(
                    "screenshots: cannot start {} ({e}); it is installed beside pincer-agent",
                    program.display()
                ),
            })?;
        let (Some(stdout), Some(stderr)) = (reader.stdout.take(), reader.stderr.take()) else {
            return Err(WireError::Internal {
                message: format!("{READER} has no pipes"),
            });
        };
        let shared = Arc::new(Shared::default());
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("pincer-screencast".into())
                .spawn(move || {
                    let why = read_frames(stdout, &shared);
                    shared.end(ended(why, stderr));
                })
                .map_err(|e| WireError::Internal {
                    message: format!("cannot start the screen-cast thread: {e}"),
                })?
        };
        Ok(Self {
            shared,
            reader,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Latest> {
        self.shared
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the latest frame, waiting up to `wait` for the first one. `Err` names
    /// why there is none: the stream ended, or no frame came in time.
    pub(crate) fn with_latest<T>(
        &self,
        wait: Duration,
        f: impl FnOnce(&Latest) -> T,
    ) -> Result<T, String> {
        let deadline = Instant::now() + wait;
        let mut latest = self.lock();
        loop {
            if let Some(why) = &latest.ended {
                return Err(why.clone());
            }
            if latest.count > 0 {
                return Ok(f(&latest));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no frame arrived within {} s", wait.as_secs()));
            }
            latest = self
                .shared
                .arrived
                .wait_timeout(latest, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Frames received so far, or why the stream ended.
    pub(crate) fn count(&self) -> Result<u64, String> {
        let latest = self.lock();
        match &latest.ended {
            Some(why) => Err(why.clone()),
            None => Ok(latest.count),
        }
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        let _ = self.reader.kill();
        let _ = self.reader.wait();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn end(&self, why: String) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.ended.get_or_insert(why);
        self.arrived.notify_all();
    }
}

/// `pincer-screencast` beside this program, or on `PATH`.
fn reader_program() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(READER)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(READER))
}

/// Reads frames from the reader's stdout into `shared` until it ends; returns why.
fn read_frames(mut from: ChildStdout, shared: &Shared) -> String {
    let mut header = [0u8; 24];
    let mut pixels = Vec::new();
    loop {
        if let Err(e) = from.read_exact(&mut header) {
            return format!("its output ended ({e})");
        }
        let word =
            |i: usize| u32::from_le_bytes(header[i * 4..i * 4 + 4].try_into().unwrap_or_default());
        let len = word(5) as usize;
        if word(0) != MAGIC || len > MAX_FRAME {
            return "it wrote something that is not a frame".to_owned();
        }
        pixels.resize(len, 0);
        if let Err(e) = from.read_exact(&mut pixels) {
            return format!("its output ended inside a frame ({e})");
        }
        let mut latest = shared.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.width = word(1);
        latest.height = word(2);
        latest.stride = word(3) as usize;
        latest.format = match word(4) {
            0 => Some(PixelFormat::Bgrx),
            1 => Some(PixelFormat::Rgbx),
            _ => None,
        };
        std::mem::swap(&mut latest.pixels, &mut pixels);
        latest.count += 1;
        shared.arrived.notify_all();
    }
}

/// Why the stream ended: what the reader said on stderr, else `why`.
fn ended(why: String, mut stderr: ChildStderr) -> String {
    let mut said = String::new();
    let _ = (&mut stderr).take(4096).read_to_string(&mut said);
    let said = said.trim();
    format!(
        "the screen cast ended: {}; GNOME's screen cast needs the pipewire daemon (and \
         wireplumber) running in the session",
        if said.is_empty() { why.as_str() } else { said }
    )
}

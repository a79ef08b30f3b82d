//! The Wayland route on wlroots compositors (sway, Hyprland before 0.42, river, labwc,
//! ...): their own protocols on the Wayland socket, no D-Bus and no dialog.
//! - Screenshots: `zwlr_screencopy_manager_v1` copies the first output into a shared
//!   memory buffer the agent keeps for the next copy.
//! - Pointer: `zwlr_virtual_pointer_v1`, absolute on that output.
//! - Keys and text: `zwp_virtual_keyboard_v1`, which takes the keymap the agent uploads:
//!   each keysym needed gets a keycode of its own, so any character types, whatever the
//!   user's layout.
//!
//! Every request waits for the compositor's answer (a `wl_display.sync`) at most
//! [`ANSWER`]; a broken connection makes the next call connect again.

use super::{Injector, ScrollAxis};
use crate::fault::Fault;
use crate::keysym;
use pincer_guest_core::encode::{FrameEncoder, PixelFormat};
use pincer_shared::WireError;
use pincer_shared::action::{Action, MouseButton, Point};
use pincer_shared::observe::{ScreenshotMeta, ScreenshotRequest};
use std::fmt::Write as _;
use std::fs::File;
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _};
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use wayland_client::globals::{GlobalListContents, registry_queue_init};
use wayland_client::protocol::{
    wl_buffer, wl_callback, wl_output, wl_pointer, wl_registry, wl_seat, wl_shm, wl_shm_pool,
};
use wayland_client::{Connection, Dispatch, EventQueue, Proxy as _, QueueHandle, WEnum};
use wayland_protocols_misc::zwp_virtual_keyboard_v1::client::{
    zwp_virtual_keyboard_manager_v1::ZwpVirtualKeyboardManagerV1,
    zwp_virtual_keyboard_v1::ZwpVirtualKeyboardV1,
};
use wayland_protocols_wlr::screencopy::v1::client::{
    zwlr_screencopy_frame_v1::{self, ZwlrScreencopyFrameV1},
    zwlr_screencopy_manager_v1::ZwlrScreencopyManagerV1,
};
use wayland_protocols_wlr::virtual_pointer::v1::client::{
    zwlr_virtual_pointer_manager_v1::ZwlrVirtualPointerManagerV1,
    zwlr_virtual_pointer_v1::ZwlrVirtualPointerV1,
};

/// How the screen is captured on this route, as `env info` shows it.
pub(crate) const CAPTURE: &str = "wlr-screencopy";

/// How long the compositor may take to answer a request or deliver a copy.
const ANSWER: Duration = Duration::from_secs(10);
/// The protocols this route needs, by global interface name.
const NEEDED: [&str; 3] = [
    "zwlr_screencopy_manager_v1",
    "zwlr_virtual_pointer_manager_v1",
    "zwp_virtual_keyboard_manager_v1",
];
/// Keycodes the uploaded keymap may use: evdev codes 1..=247 (XKB codes 9..=255).
const KEYCODES: usize = 247;
/// The least time between two input events. A compositor disconnects a client whose
/// socket buffer fills (4 KiB in libwayland before 1.23: about 40 clicks or 85 typed
/// characters the app has not read yet); unpaced, `pincer bench`'s 200 clicks in 50 ms cost
/// gtk3-widget-factory its connection ("Lost connection to Wayland compositor").
const PACE: Duration = Duration::from_micros(500);

/// Whether the session's compositor offers the protocols; `Err` says which it lacks.
pub(crate) fn available() -> Result<(), String> {
    let conn = Connection::connect_to_env()
        .map_err(|e| format!("cannot connect to the Wayland display: {e}"))?;
    let (globals, _queue) =
        registry_queue_init::<State>(&conn).map_err(|e| format!("the Wayland registry: {e}"))?;
    let offered = globals.contents().clone_list();
    let missing: Vec<&str> = NEEDED
        .into_iter()
        .filter(|name| !offered.iter().any(|g| g.interface == *name))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the compositor does not offer {}",
            missing.join(", ")
        ))
    }
}

/// The wlroots route, shared by the subsystems that use it; connects on first use.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wlr(Arc<Mutex<Connected>>);

#[derive(Debug, Default)]
struct Connected {
    client: Option<Client>,
}

impl Wlr {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Runs `op` on the connection, connecting first; a connection found broken is made
    /// again and `op` tried once more.
    fn with<T>(&self, mut op: impl FnMut(&mut Client) -> Result<T, Fault>) -> Result<T, WireError> {
        let mut connected = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut retried = false;
        loop {
            let client = match &mut connected.client {
                Some(client) => client,
                slot @ None => {
                    let client = Client::connect().map_err(|why| WireError::Unsupported {
                        what: format!("the wlroots route (screencopy, virtual input): {why}"),
                    })?;
                    tracing::info!("connected to the wlroots compositor");
                    slot.insert(client)
                }
            };
            match op(client) {
                Ok(value) => return Ok(value),
                Err(Fault::Refused(e)) => return Err(e),
                Err(Fault::Gone(why)) => {
                    connected.client = None;
                    if retried {
                        return Err(WireError::Display {
                            message: format!(
                                "the Wayland compositor failed again after a new connection: \
                                 {why}; the agent tries again on the next request"
                            ),
                        });
                    }
                    tracing::warn!(%why, "the Wayland connection broke; connecting again");
                    retried = true;
                }
            }
        }
    }

    pub(crate) fn size(&self) -> Result<(u32, u32), WireError> {
        self.with(|c| c.size())
    }

    /// Copies the screen and encodes it (or `req.region` of it) as `req` asks.
    pub(crate) fn capture(
        &self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        let start = Instant::now();
        self.with(|client| {
            let shot = client.shot()?;
            let layout = (shot.width, shot.height, shot.stride);
            let pixels = client.pixels(&shot);
            super::encode_screen(&pixels, layout, shot.format, start, req, encoder)
                .map_err(Fault::Refused)
        })
    }

    /// The connection's number and the changes counted on it: each call copies the
    /// screen and counts one change if it differs from the last copy.
    pub(crate) fn changes(&self) -> Result<(u64, u64), WireError> {
        self.with(|client| {
            let shot = client.shot()?;
            let pixels = client.pixels(&shot);
            if client.seen.as_deref() != Some(&*pixels) {
                let pixels = pixels.into_owned();
                client.seen = Some(pixels);
                client.changes += 1;
            }
            Ok((client.serial, client.changes))
        })
    }

    /// Performs `action` (validated) and returns once the compositor handled its events.
    pub(crate) fn perform(&self, action: &Action) -> Result<(), WireError> {
        self.with(|client| super::perform(client, action))
    }

    /// Where the agent last put the pointer.
    pub(crate) fn cursor(&self) -> Result<Point, WireError> {
        self.with(|client| Ok(client.pointer_at))
    }
}

/// A connection to the compositor with the route's objects.
struct Client {
    conn: Connection,
    queue: EventQueue<State>,
    state: State,
    shm: wl_shm::WlShm,
    output: wl_output::WlOutput,
    screencopy: ZwlrScreencopyManagerV1,
    pointer: ZwlrVirtualPointerV1,
    keyboard: ZwpVirtualKeyboardV1,
    /// The keysyms the uploaded keymap holds, in keycode order.
    keymap: Vec<u32>,
    /// The modifiers held down, as a mask of XKB's real modifiers.
    modifiers: u32,
    /// The buffer copies land in, kept while the output keeps its size.
    buffer: Option<ShmBuffer>,
    started: Instant,
    /// Tells this agent's connections apart (for [`Wlr::changes`]).
    serial: u64,
    /// The last frame [`Wlr::changes`] saw, and the changes it counted.
    seen: Option<Vec<u8>>,
    changes: u64,
    /// When the last input event went out (see [`PACE`]).
    last_event: Option<Instant>,
    /// Where the agent last put the pointer.
    pointer_at: Point,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("size", &self.state.size)
            .finish_non_exhaustive()
    }
}

/// What the event handlers record.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The output's current mode.
    size: Option<(u32, u32)>,
    /// The copy in progress.
    copy: Copy,
    /// `wl_display.sync` answers received.
    synced: u64,
}

#[derive(Debug, Default)]
struct Copy {
    /// The shared-memory buffer the compositor offers: format, width, height, stride.
    buffer: Option<(wl_shm::Format, u32, u32, u32)>,
    /// All buffer types were offered (version 3), or the one was (earlier versions).
    described: bool,
    y_invert: bool,
    /// `Some(true)` once copied, `Some(false)` if the copy failed.
    done: Option<bool>,
}

/// A shared-memory buffer of one size and format, mapped into the agent: a copy is
/// encoded where the compositor wrote it.
struct ShmBuffer {
    /// Keeps the memory's descriptor open for the mapping's life.
    _file: File,
    map: *mut libc::c_void,
    len: usize,
    buffer: wl_buffer::WlBuffer,
    pool: wl_shm_pool::WlShmPool,
    layout: (wl_shm::Format, u32, u32, u32),
}

// SAFETY: the mapping is owned by the buffer and only read through `&self`; the compositor
// writes to it only during a copy, which the route's mutex makes the only user.
unsafe impl Send for ShmBuffer {}

impl ShmBuffer {
    fn pixels(&self) -> &[u8] {
        // SAFETY: `map` is a live read-only mapping of `len` bytes, unmapped only on drop.
        unsafe { std::slice::from_raw_parts(self.map.cast::<u8>(), self.len) }
    }
}

impl Drop for ShmBuffer {
    fn drop(&mut self) {
        self.buffer.destroy();
        self.pool.destroy();
        // SAFETY: the mapping `mmap` returned, with its length; nothing borrows it now.
        unsafe {
            libc::munmap(self.map, self.len);
        }
    }
}

/// A frame copied from the output into the kept buffer ([`Client::pixels`]).
struct Shot {
    y_invert: bool,
    width: u32,
    height: u32,
    stride: usize,
    format: PixelFormat,
}

fn gone(what: impl std::fmt::Display) -> Fault {
    Fault::Gone(format!("the Wayland compositor: {what}"))
}

impl Client {
    /// Connects to `$WAYLAND_DISPLAY` and binds the route's protocols.
    fn connect() -> Result<Self, String> {
        let conn = Connection::connect_to_env()
            .map_err(|e| format!("cannot connect to the Wayland display: {e}"))?;
        let (globals, mut queue) = registry_queue_init::<State>(&conn)
            .map_err(|e| format!("the Wayland registry: {e}"))?;
        let qh = queue.handle();
        let bind_error = |e| format!("{e}");
        let shm: wl_shm::WlShm = globals.bind(&qh, 1..=1, ()).map_err(bind_error)?;
        let seat: wl_seat::WlSeat = globals.bind(&qh, 1..=1, ()).map_err(bind_error)?;
        let output: wl_output::WlOutput = globals.bind(&qh, 1..=2, ()).map_err(bind_error)?;
        let screencopy: ZwlrScreencopyManagerV1 =
            globals.bind(&qh, 1..=3, ()).map_err(bind_error)?;
        let pointers: ZwlrVirtualPointerManagerV1 =
            globals.bind(&qh, 1..=2, ()).map_err(bind_error)?;
        let keyboards: ZwpVirtualKeyboardManagerV1 =
            globals.bind(&qh, 1..=1, ()).map_err(bind_error)?;
        let pointer = if pointers.version() >= 2 {
            pointers.create_virtual_pointer_with_output(Some(&seat), Some(&output), &qh, ())
        } else {
            pointers.create_virtual_pointer(Some(&seat), &qh, ())
        };
        let keyboard = keyboards.create_virtual_keyboard(&seat, &qh, ());
        let mut state = State::default();
        queue
            .roundtrip(&mut state)
            .map_err(|e| format!("the Wayland compositor: {e}"))?;
        let mut client = Self {
            conn,
            queue,
            state,
            shm,
            output,
            screencopy,
            pointer,
            keyboard,
            keymap: Vec::new(),
            modifiers: 0,
            buffer: None,
            started: Instant::now(),
            serial: {
                static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
                CONNECTIONS.fetch_add(1, Ordering::Relaxed)
            },
            seen: None,
            changes: 0,
            last_event: None,
            pointer_at: Point::new(0, 0),
        };
        client.upload_keymap().map_err(|e| format!("{e:?}"))?;
        client.sync().map_err(|e| format!("{e:?}"))?;
        Ok(client)
    }

    /// The first output's size.
    fn size(&self) -> Result<(u32, u32), Fault> {
        self.state
            .size
            .ok_or_else(|| gone("the output announced no mode"))
    }

    /// Dispatches events until `done` holds, for at most [`ANSWER`].
    fn dispatch_until(&mut self, what: &str, done: impl Fn(&State) -> bool) -> Result<(), Fault> {
        let deadline = Instant::now() + ANSWER;
        loop {
            self.queue.dispatch_pending(&mut self.state).map_err(gone)?;
            if done(&self.state) {
                return Ok(());
            }
            self.queue.flush().map_err(gone)?;
            let Some(guard) = self.queue.prepare_read() else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(gone(format!(
                    "no answer to {what} within {} s",
                    ANSWER.as_secs()
                )));
            }
            let mut fd = libc::pollfd {
                fd: guard.connection_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
            // SAFETY: one valid pollfd, for the duration of the call.
            let ready = unsafe { libc::poll(&raw mut fd, 1, millis) };
            if ready > 0 {
                guard.read().map_err(gone)?;
            }
        }
    }

    /// Returns once the compositor handled every request sent so far.
    fn sync(&mut self) -> Result<(), Fault> {
        let target = self.state.synced + 1;
        self.conn.display().sync(&self.queue.handle(), ());
        self.dispatch_until("a sync", |s| s.synced >= target)
    }

    /// Copies the output (without the cursor, as X11 grabs show the screen).
    fn shot(&mut self) -> Result<Shot, Fault> {
        self.state.copy = Copy::default();
        let frame = self
            .screencopy
            .capture_output(0, &self.output, &self.queue.handle(), ());
        let result = self.copy(&frame);
        frame.destroy();
        result
    }

    fn copy(&mut self, frame: &ZwlrScreencopyFrameV1) -> Result<Shot, Fault> {
        self.dispatch_until("a screen copy", |s| {
            s.copy.described || s.copy.done.is_some()
        })?;
        let Some(layout @ (format, width, height, stride)) = self.state.copy.buffer else {
            return Err(Fault::Refused(WireError::Unsupported {
                what: "screenshots: the compositor offers no shared-memory buffer to copy \
                       the screen into"
                    .to_owned(),
            }));
        };
        let pixel_format = match format {
            wl_shm::Format::Xrgb8888 | wl_shm::Format::Argb8888 => PixelFormat::Bgrx,
            wl_shm::Format::Xbgr8888 | wl_shm::Format::Abgr8888 => PixelFormat::Rgbx,
            other => {
                return Err(Fault::Refused(WireError::Unsupported {
                    what: format!(
                        "screenshots: the compositor copies the screen as {other:?}, a \
                         pixel format pincer does not read"
                    ),
                }));
            }
        };
        let qh = self.queue.handle();
        let buffer = match self.buffer.take() {
            Some(kept) if kept.layout == layout => kept,
            _ => ShmBuffer::new(&self.shm, layout, &qh)?,
        };
        frame.copy(&buffer.buffer);
        let copied = self.dispatch_until("a screen copy", |s| s.copy.done.is_some());
        self.buffer = Some(buffer);
        copied?;
        if self.state.copy.done != Some(true) {
            return Err(gone("the compositor failed to copy the screen"));
        }
        Ok(Shot {
            y_invert: self.state.copy.y_invert,
            width,
            height,
            stride: stride as usize,
            format: pixel_format,
        })
    }

    /// The pixels of the last copy, top row first.
    fn pixels(&self, shot: &Shot) -> std::borrow::Cow<'_, [u8]> {
        let pixels = self.buffer.as_ref().map_or(&[][..], ShmBuffer::pixels);
        if shot.y_invert {
            let rows: Vec<&[u8]> = pixels.chunks(shot.stride).rev().collect();
            std::borrow::Cow::Owned(rows.concat())
        } else {
            std::borrow::Cow::Borrowed(pixels)
        }
    }

    /// The event time (ms since the connection), once [`PACE`] passed since the last event.
    fn time(&mut self) -> u32 {
        if let Some(wait) = self
            .last_event
            .and_then(|at| PACE.checked_sub(at.elapsed()))
        {
            std::thread::sleep(wait);
        }
        self.last_event = Some(Instant::now());
        u32::try_from(self.started.elapsed().as_millis() % (1 << 32)).unwrap_or(0)
    }

    /// The keycode (evdev) of `sym`, added to the keymap (uploaded again) if new.
    fn keycode(&mut self, sym: u32) -> Result<u32, Fault> {
        let index = match self.keymap.iter().position(|&s| s == sym) {
            Some(index) => index,
            None => {
                if self.keymap.len() == KEYCODES {
                    self.keymap.clear();
                }
                self.keymap.push(sym);
                self.upload_keymap()?;
                self.keymap.len() - 1
            }
        };
        Ok(u32::try_from(index).unwrap_or(0) + 1)
    }

    /// Gives the compositor a keymap with one key per keysym of [`Self::keymap`].
    fn upload_keymap(&mut self) -> Result<(), Fault> {
        let mut text = String::from("xkb_keymap {\nxkb_keycodes \"pincer\" {\n");
        text.push_str("minimum = 8;\nmaximum = 255;\n");
        for i in 0..self.keymap.len().max(1) {
            let _ = writeln!(text, "<K{i}> = {};", i + 9);
        }
        text.push_str("};\nxkb_types \"pincer\" { include \"complete\" };\n");
        text.push_str("xkb_compatibility \"pincer\" { include \"complete\" };\n");
        text.push_str("xkb_symbols \"pincer\" {\n");
        for (i, sym) in self.keymap.iter().enumerate() {
            let _ = writeln!(text, "key <K{i}> {{[ {sym:#x} ]}};");
        }
        text.push_str("};\n};\n\0");
        let file = memfd("pincer-keymap", text.len())?;
        file.write_all_at(text.as_bytes(), 0)
            .map_err(|e| gone(format!("writing the keymap: {e}")))?;
        let size = u32::try_from(text.len()).unwrap_or(u32::MAX);
        // Format 1 is XKB_V1.
        self.keyboard.keymap(1, file.as_fd(), size);
        Ok(())
    }
}

impl Injector for Client {
    fn motion(&mut self, to: Point) -> Result<(), Fault> {
        let (width, height) = self.size()?;
        super::on_screen(to, width, height)?;
        let time = self.time();
        self.pointer
            .motion_absolute(time, to.x as u32, to.y as u32, width, height);
        self.pointer.frame();
        self.sync()?;
        self.pointer_at = to;
        Ok(())
    }

    fn button(&mut self, button: MouseButton, pressed: bool) -> Result<(), Fault> {
        let state = if pressed {
            wl_pointer::ButtonState::Pressed
        } else {
            wl_pointer::ButtonState::Released
        };
        let time = self.time();
        self.pointer
            .button(time, super::evdev_button(button), state);
        self.pointer.frame();
        self.sync()
    }

    fn scroll(&mut self, axis: ScrollAxis, steps: i32) -> Result<(), Fault> {
        let axis = match axis {
            ScrollAxis::Vertical => wl_pointer::Axis::VerticalScroll,
            ScrollAxis::Horizontal => wl_pointer::Axis::HorizontalScroll,
        };
        let time = self.time();
        self.pointer.axis_source(wl_pointer::AxisSource::Wheel);
        // A wheel step is 15 units of motion in libinput's convention.
        self.pointer
            .axis_discrete(time, axis, 15.0 * f64::from(steps), steps);
        self.pointer.frame();
        self.sync()
    }

    fn keysym(&mut self, sym: u32, pressed: bool) -> Result<(), Fault> {
        let code = self.keycode(sym)?;
        let time = self.time();
        let state = u32::from(pressed);
        self.keyboard.key(time, code, state);
        if let Some(bit) = modifier(sym) {
            if pressed {
                self.modifiers |= bit;
            } else {
                self.modifiers &= !bit;
            }
            self.keyboard.modifiers(self.modifiers, 0, 0, 0);
        }
        self.sync()
    }

    /// Every character is a keysym of the uploaded keymap.
    fn text(&mut self, text: &str) -> Result<(), Fault> {
        for c in text.chars() {
            let sym = keysym::of_char(c);
            self.keysym(sym, true)?;
            self.keysym(sym, false)?;
        }
        Ok(())
    }

    fn pause(&mut self, pause: Duration) -> Result<(), Fault> {
        std::thread::sleep(pause);
        Ok(())
    }
}

/// The bit of XKB's real modifier that `sym` holds down, if it is a modifier.
fn modifier(sym: u32) -> Option<u32> {
    match sym {
        0xffe1 | 0xffe2 => Some(1),      // Shift
        0xffe3 | 0xffe4 => Some(1 << 2), // Control
        0xffe9 | 0xffea => Some(1 << 3), // Alt (Mod1)
        0xffeb | 0xffec => Some(1 << 6), // Super (Mod4)
        0xfe03 => Some(1 << 7),          // AltGr (Mod5)
        _ => None,
    }
}

/// An anonymous file of `size` bytes to share with the compositor.
fn memfd(name: &str, size: usize) -> Result<File, Fault> {
    let name = std::ffi::CString::new(name).unwrap_or_default();
    // SAFETY: a valid C string; the descriptor returned is owned by the File.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(gone(format!(
            "cannot make a shared-memory file: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size as u64)
        .map_err(|e| gone(format!("cannot size a shared-memory file: {e}")))?;
    Ok(file)
}

impl ShmBuffer {
    fn new(
        shm: &wl_shm::WlShm,
        layout: (wl_shm::Format, u32, u32, u32),
        qh: &QueueHandle<State>,
    ) -> Result<Self, Fault> {
        let (format, width, height, stride) = layout;
        let size = stride as usize * height as usize;
        let int = |v: u32| i32::try_from(v).map_err(|_| gone("the output is too large"));
        let pool_size = int(u32::try_from(size).unwrap_or(u32::MAX))?;
        let (w, h, row) = (int(width)?, int(height)?, int(stride)?);
        let file = memfd("pincer-screencopy", size)?;
        // SAFETY: a new shared read-only mapping of the whole file, which is `size` long.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(gone(format!(
                "cannot map the screen copy's memory: {}",
                std::io::Error::last_os_error()
            )));
        }
        let pool = shm.create_pool(file.as_fd(), pool_size, qh, ());
        let buffer = pool.create_buffer(0, w, h, row, format, qh, ());
        Ok(Self {
            _file: file,
            map,
            len: size,
            buffer,
            pool,
            layout,
        })
    }
}

impl Dispatch<wl_registry::WlRegistry, GlobalListContents> for State {
    fn event(
        _: &mut Self,
        _: &wl_registry::WlRegistry,
        _: wl_registry::Event,
        _: &GlobalListContents,
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
    }
}

impl Dispatch<wl_output::WlOutput, ()> for State {
    fn event(
        state: &mut Self,
        _: &wl_output::WlOutput,
        event: wl_output::Event,
        (): &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        if let wl_output::Event::Mode {
            flags: WEnum::Value(flags),
            width,
            height,
            ..
        } = event
            && flags.contains(wl_output::Mode::Current)
        {
            state.size = Some((width.unsigned_abs(), height.unsigned_abs()));
        }
    }
}

impl Dispatch<wl_callback::WlCallback, ()> for State {
    fn event(
        state: &mut Self,
        _: &wl_callback::WlCallback,
        _: wl_callback::Event,
        (): &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        state.synced += 1;
    }
}

impl Dispatch<ZwlrScreencopyFrameV1, ()> for State {
    fn event(
        state: &mut Self,
        frame: &ZwlrScreencopyFrameV1,
        event: zwlr_screencopy_frame_v1::Event,
        (): &(),
        _: &Connection,
        _: &QueueHandle<Self>,
    ) {
        use zwlr_screencopy_frame_v1::Event;
        let copy = &mut state.copy;
        match event {
            Event::Buffer {
                format: WEnum::Value(format),
                width,
                height,
                stride,
            } => {
                copy.buffer = Some((format, width, height, stride));
                copy.described |= frame.version() < 3;
            }
            Event::BufferDone => copy.described = true,
            Event::Flags {
                flags: WEnum::Value(flags),
            } => copy.y_invert = flags.contains(zwlr_screencopy_frame_v1::Flags::YInvert),
            Event::Ready { .. } => copy.done = Some(true),
            Event::Failed => copy.done = Some(false),
            _ => {}
        }
    }
}

wayland_client::delegate_noop!(State: ignore wl_shm::WlShm);
wayland_client::delegate_noop!(State: ignore wl_seat::WlSeat);
wayland_client::delegate_noop!(State: wl_shm_pool::WlShmPool);
wayland_client::delegate_noop!(State: ignore wl_buffer::WlBuffer);
wayland_client::delegate_noop!(State: ZwlrScreencopyManagerV1);
wayland_client::delegate_noop!(State: ZwlrVirtualPointerManagerV1);
wayland_client::delegate_noop!(State: ZwlrVirtualPointerV1);
wayland_client::delegate_noop!(State: ZwpVirtualKeyboardManagerV1);
wayland_client::delegate_noop!(State: ZwpVirtualKeyboardV1);

//! The guest's eyes: grabs the screen's pixels and hands them to the guest core's encoder
//! (`pincer_guest_core::encode`). [`Screen`] owns one capture backend for the agent's whole
//! life, connects on first use and reconnects after the display went away, because the
//! agent runs for days across X server restarts and must neither leak nor panic.
//!
//! Backends, best first:
//! - `x11-shm`: one X connection and one MIT-SHM segment kept across calls; the X server
//!   copies the screen into memory we share, so a 1080p grab is one round trip and no
//!   socket transfer.
//! - `x11-getimage`: plain `GetImage` when the server lacks MIT-SHM 1.2 or attaching fails
//!   (a remote display); 8 MB travel through the socket per 1080p frame.
//!
//! A Wayland session's Xwayland is refused (see [`session`](crate::session)): it sees only
//! X11 apps, so its frames are black where Wayland apps draw.

use crate::fault::Fault;
use crate::wayland::{Route, Wayland};
use crate::x11::{self, Client, Lazy, display_label};
use pincer_guest_core::encode::{self, Frame, FrameEncoder, PixelFormat};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use pincer_shared::observe::{Rect, ScreenInfo, ScreenshotMeta, ScreenshotRequest};
use std::borrow::Cow;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Instant;
use x11rb::connection::{Connection, RequestConnection};
use x11rb::cookie::Cookie;
use x11rb::errors::{ConnectionError, ReplyError, ReplyOrIdError};
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageOrder};
use x11rb::protocol::{randr, shm};
use x11rb::rust_connection::RustConnection;

/// Owns the capture backend; connects lazily, reconnects after the display goes away.
#[derive(Debug)]
pub(crate) struct Screen {
    /// The open backend. The display name `None` means `$DISPLAY`.
    backend: Lazy<Backend>,
    /// The Wayland route, taken when the display is a Wayland session's.
    wayland: Route,
}

impl Screen {
    /// `display`: the X display name (None = $DISPLAY). Does not connect yet.
    pub(crate) fn new(display: Option<String>, wayland: Wayland) -> Self {
        Self {
            backend: Lazy::new(display),
            wayland: Route::new(wayland),
        }
    }

    /// Runs `op` on the backend, connecting first if needed. A backend that worked before may
    /// have lost its display since the last call (the X server restarted): then one fresh
    /// connection is tried before the loss is reported.
    fn with_backend<T>(
        &mut self,
        mut op: impl FnMut(&mut Backend) -> Result<T, Fault>,
    ) -> Result<T, WireError> {
        let mut lost: Option<String> = None;
        loop {
            let backend = match self.backend.get() {
                Ok(backend) => backend,
                Err(WireError::Display { message }) if lost.is_some() => {
                    return Err(WireError::Display {
                        message: format!(
                            "lost the connection to the X server ({}) and could not \
                             reconnect: {message}",
                            lost.unwrap_or_default()
                        ),
                    });
                }
                Err(e) => return Err(e),
            };
            match op(backend) {
                Ok(value) => return Ok(value),
                Err(Fault::Refused(e)) => return Err(e),
                Err(Fault::Gone(why)) => {
                    self.backend.forget();
                    let name = self.backend.display();
                    if lost.is_some() {
                        return Err(WireError::Display {
                            message: format!(
                                "{}: {why}; the agent reconnects on the next request",
                                display_label(name)
                            ),
                        });
                    }
                    tracing::warn!(display = ?name, %why, "display lost; reconnecting");
                    lost = Some(why);
                }
            }
        }
    }
}

impl platform::Screen for Screen {
    /// Size, monitors and backend of the screen.
    fn info(&mut self) -> Result<ScreenInfo, WireError> {
        if let Some(desktop) = self.wayland.taken() {
            return desktop.info();
        }
        let x11 = self.with_backend(Backend::info);
        self.wayland.or(x11, |desktop| desktop.info())
    }

    /// Grabs the screen (or `req.region` of it) and has `encoder` scale it to fit
    /// `req.max_size` and encode it as `req.format`.
    fn capture(
        &mut self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        if let Some(desktop) = self.wayland.taken() {
            return desktop.capture(req, encoder);
        }
        let x11 = self.with_backend(|backend| {
            let start = Instant::now();
            let grab = backend.grab(req)?;
            let grabbed_in = start.elapsed();
            let frame = Frame::new(
                &grab.pixels,
                grab.source.width,
                grab.source.height,
                grab.stride,
                PixelFormat::Bgrx,
            )?;
            Ok(encoder.screenshot(frame, grab.source, grabbed_in, req)?)
        });
        self.wayland
            .or(x11, |desktop| desktop.capture(req, encoder))
    }
}

impl From<ConnectionError> for Fault {
    fn from(e: ConnectionError) -> Self {
        match e {
            // Raised before anything is sent, when an extension is missing: the connection
            // is intact.
            ConnectionError::UnsupportedExtension => Self::Refused(WireError::Display {
                message: "the X server lacks an extension the capture needs".to_owned(),
            }),
            e => Self::Gone(e.to_string()),
        }
    }
}

impl From<ReplyError> for Fault {
    fn from(e: ReplyError) -> Self {
        match e {
            ReplyError::ConnectionError(e) => e.into(),
            ReplyError::X11Error(e) => Self::Refused(WireError::Display {
                message: format!(
                    "the X server refused a request ({:?}, major opcode {})",
                    e.error_kind, e.major_opcode
                ),
            }),
        }
    }
}

impl From<ReplyOrIdError> for Fault {
    fn from(e: ReplyOrIdError) -> Self {
        match e {
            ReplyOrIdError::ConnectionError(e) => e.into(),
            ReplyOrIdError::X11Error(e) => ReplyError::X11Error(e).into(),
            ReplyOrIdError::IdsExhausted => Self::Gone("ran out of X resource ids".to_owned()),
        }
    }
}

/// Pixels of one grab: BGRX rows `stride` bytes apart showing `source`.
#[derive(Debug)]
struct Grab<'a> {
    pixels: Cow<'a, [u8]>,
    stride: usize,
    source: Rect,
}

#[derive(Debug)]
enum Backend {
    // Boxed: the connection's buffers make it large.
    X11(Box<X11>),
}

impl Backend {
    fn grab(&mut self, req: &ScreenshotRequest) -> Result<Grab<'_>, Fault> {
        match self {
            Self::X11(x11) => x11.grab(req),
        }
    }

    fn info(&mut self) -> Result<ScreenInfo, Fault> {
        match self {
            Self::X11(x11) => x11.info(),
        }
    }
}

impl Client for Backend {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        connect(display)
    }

    /// Not known without a round trip: a grab or query that finds the display gone says
    /// so, and [`Screen::with_backend`] tries one fresh connection before reporting it.
    fn alive(&mut self) -> bool {
        true
    }
}

/// Opens the best backend that works for `display`.
fn connect(display: Option<&str>) -> Result<Backend, WireError> {
    let x11 = match X11::open(display, true) {
        Err(OpenError::ShmBroke(why)) => {
            tracing::warn!(%why, "MIT-SHM attach broke the X connection; using plain GetImage");
            X11::open(display, false)
        }
        opened => opened,
    };
    match x11 {
        Ok(x11) => Ok(Backend::X11(Box::new(x11))),
        // Only an attach can break this way, and the second open attaches nothing.
        Err(OpenError::ShmBroke(why)) => Err(WireError::Display {
            message: format!("{}: {why}", display_label(display)),
        }),
        Err(OpenError::Wire(e)) => Err(e),
    }
}

/// Why [`X11::open`] failed.
#[derive(Debug)]
enum OpenError {
    /// Attaching MIT-SHM broke the connection (sending the fd failed at the socket, which
    /// leaves x11rb's connection unusable): open again without it.
    ShmBroke(String),
    /// Any other failure, as the caller reports it.
    Wire(WireError),
}

/// An X connection and, when MIT-SHM works, the segment frames are grabbed into.
#[derive(Debug)]
struct X11 {
    conn: RustConnection,
    root: xproto::Window,
    /// Root size as last seen; every grab checks it in the same round trip.
    width: u32,
    height: u32,
    /// Row alignment in bits of the root's pixmap format.
    scanline_pad: u32,
    /// Whether RandR 1.5 can list monitors.
    randr_monitors: bool,
    /// The shared segment; `None` when grabs use plain `GetImage`.
    shm: Option<Segment>,
}

impl X11 {
    /// Connects to `display` and, if `try_shm`, attaches a segment for the whole screen.
    fn open(display: Option<&str>, try_shm: bool) -> Result<Self, OpenError> {
        let label = || display_label(display);
        let (conn, screen) =
            x11::connect_desktop(display, "screenshots").map_err(OpenError::Wire)?;
        let scanline_pad = check_pixel_format(conn.setup(), &screen).map_err(|why| {
            OpenError::Wire(WireError::Unsupported {
                what: format!(
                    "capturing {}: {why}; run the X server at depth 24 (for example Xvfb \
                     -screen 0 1920x1080x24)",
                    label()
                ),
            })
        })?;
        let (root, width, height) = (
            screen.root,
            u32::from(screen.width_in_pixels),
            u32::from(screen.height_in_pixels),
        );
        let mut x11 = Self {
            conn,
            root,
            width,
            height,
            scanline_pad,
            randr_monitors: false,
            shm: None,
        };
        let gone = |fault: Fault| match fault {
            Fault::Gone(why) => OpenError::Wire(WireError::Display {
                message: format!("{} went away while connecting: {why}", label()),
            }),
            Fault::Refused(e) => OpenError::Wire(e),
        };
        x11.randr_monitors = x11.has_extension(randr::X11_EXTENSION_NAME).map_err(gone)?
            && x11.randr_version().map_err(gone)? >= (1, 5);
        if try_shm && x11.has_shm_fd().map_err(gone)? {
            match Segment::create(&x11.conn, x11.frame_len()) {
                Ok(segment) => x11.shm = Some(segment),
                Err(Fault::Refused(e)) => {
                    tracing::info!(error = %e, "MIT-SHM attach refused; using plain GetImage");
                }
                Err(Fault::Gone(why)) => return Err(OpenError::ShmBroke(why)),
            }
        }
        Ok(x11)
    }

    fn has_extension(&self, name: &'static str) -> Result<bool, Fault> {
        Ok(self.conn.extension_information(name)?.is_some())
    }

    fn randr_version(&self) -> Result<(u32, u32), Fault> {
        let v = randr::query_version(&self.conn, 1, 5)?.reply()?;
        Ok((v.major_version, v.minor_version))
    }

    /// Whether the server has MIT-SHM 1.2, which attaches segments passed as fds.
    fn has_shm_fd(&self) -> Result<bool, Fault> {
        if !self.has_extension(shm::X11_EXTENSION_NAME)? {
            return Ok(false);
        }
        let v = shm::query_version(&self.conn)?.reply()?;
        Ok((v.major_version, v.minor_version) >= (1, 2))
    }

    fn stride(&self, width: u32) -> usize {
        let pad = (self.scanline_pad as usize / 8).max(1);
        (width as usize * 4).div_ceil(pad) * pad
    }

    /// Bytes of a whole-screen frame.
    fn frame_len(&self) -> usize {
        self.stride(self.width) * self.height as usize
    }

    fn backend_name(&self) -> &'static str {
        if self.shm.is_some() {
            "x11-shm"
        } else {
            "x11-getimage"
        }
    }

    /// Records a new root size and re-creates the segment to match it.
    fn set_size(&mut self, width: u32, height: u32) -> Result<(), Fault> {
        tracing::info!(width, height, "screen size changed");
        self.width = width;
        self.height = height;
        if let Some(old) = self.shm.take() {
            // Sent with the next request; the server drops its mapping then.
            shm::detach(&self.conn, old.id)?.ignore_error();
            drop(old);
            match Segment::create(&self.conn, self.frame_len()) {
                Ok(segment) => self.shm = Some(segment),
                Err(Fault::Refused(e)) => {
                    tracing::warn!(error = %e, "MIT-SHM segment not re-created; using GetImage");
                }
                Err(gone) => return Err(gone),
            }
        }
        Ok(())
    }

    fn refresh_size(&mut self) -> Result<(), Fault> {
        let g = self.conn.get_geometry(self.root)?.reply()?;
        let (width, height) = (u32::from(g.width), u32::from(g.height));
        if (width, height) != (self.width, self.height) {
            self.set_size(width, height)?;
        }
        Ok(())
    }

    fn info(&mut self) -> Result<ScreenInfo, Fault> {
        self.refresh_size()?;
        let mut monitors = Vec::new();
        if self.randr_monitors {
            let reply = randr::get_monitors(&self.conn, self.root, true)?.reply()?;
            monitors = reply
                .monitors
                .iter()
                .map(|m| {
                    Rect::new(
                        i32::from(m.x),
                        i32::from(m.y),
                        u32::from(m.width),
                        u32::from(m.height),
                    )
                })
                .collect();
        }
        if monitors.is_empty() {
            monitors.push(Rect::new(0, 0, self.width, self.height));
        }
        Ok(ScreenInfo {
            width: self.width,
            height: self.height,
            monitors,
            capture: self.backend_name().to_owned(),
        })
    }

    /// Grabs the requested part of the root window. The root's geometry is asked for in the
    /// same round trip as the image, so a screen resize is noticed without an extra one.
    fn grab(&mut self, req: &ScreenshotRequest) -> Result<Grab<'_>, Fault> {
        let mut fresh_size = false;
        let mut resizes = 0;
        let (source, plain) = loop {
            let source = match encode::source_rect(req.region, self.width, self.height) {
                Ok(source) => source,
                // The region may fit a screen that grew since we last looked.
                Err(_) if !fresh_size => {
                    self.refresh_size()?;
                    fresh_size = true;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            encode::check_output(source, req.max_size)?;
            let (x, y, w, h) = x_rect(source)?;
            let geometry = self.conn.get_geometry(self.root)?;
            let image = match &self.shm {
                Some(segment) => Pending::Shared(shm::get_image(
                    &self.conn,
                    self.root,
                    x,
                    y,
                    w,
                    h,
                    !0,
                    xproto::ImageFormat::Z_PIXMAP.into(),
                    segment.id,
                    0,
                )?),
                None => Pending::Plain(self.conn.get_image(
                    xproto::ImageFormat::Z_PIXMAP,
                    self.root,
                    x,
                    y,
                    w,
                    h,
                    !0,
                )?),
            };
            let geometry = geometry.reply()?;
            let image = image.reply();
            let size = (u32::from(geometry.width), u32::from(geometry.height));
            if size != (self.width, self.height) {
                resizes += 1;
                if resizes > 3 {
                    return Err(Fault::Refused(WireError::Display {
                        message: "the screen size keeps changing; try again".to_owned(),
                    }));
                }
                self.set_size(size.0, size.1)?;
                fresh_size = true;
                continue;
            }
            match image {
                Ok(plain) => break (source, plain),
                Err(ReplyError::X11Error(e)) if self.shm.is_some() => {
                    tracing::warn!(?e, "ShmGetImage failed; falling back to plain GetImage");
                    if let Some(old) = self.shm.take() {
                        shm::detach(&self.conn, old.id)?.ignore_error();
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        let stride = self.stride(source.width);
        let len = stride * source.height as usize;
        let pixels = match (plain, &self.shm) {
            (Some(data), _) => Cow::Owned(data),
            (None, Some(segment)) if len <= segment.len => Cow::Borrowed(segment.bytes(len)),
            (None, _) => {
                return Err(Fault::Refused(WireError::Internal {
                    message: format!("a {len}-byte grab does not fit the MIT-SHM segment"),
                }));
            }
        };
        Ok(Grab {
            pixels,
            stride,
            source,
        })
    }
}

/// A grab request on its way: which reply to wait for.
enum Pending<'c> {
    Shared(Cookie<'c, RustConnection, shm::GetImageReply>),
    Plain(Cookie<'c, RustConnection, xproto::GetImageReply>),
}

impl Pending<'_> {
    /// Waits for the image: its bytes for plain GetImage, `None` when they are in the segment.
    fn reply(self) -> Result<Option<Vec<u8>>, ReplyError> {
        match self {
            Self::Plain(cookie) => cookie.reply().map(|r| Some(r.data)),
            Self::Shared(cookie) => cookie.reply().map(|_| None),
        }
    }
}

/// A rectangle inside an X screen in the protocol's integer widths.
fn x_rect(r: Rect) -> Result<(i16, i16, u16, u16), Fault> {
    match (
        i16::try_from(r.x),
        i16::try_from(r.y),
        u16::try_from(r.width),
        u16::try_from(r.height),
    ) {
        (Ok(x), Ok(y), Ok(w), Ok(h)) => Ok((x, y, w, h)),
        _ => Err(Fault::Refused(WireError::InvalidArgument {
            message: format!(
                "region {}x{} at {},{} is beyond X11's coordinate range",
                r.width, r.height, r.x, r.y
            ),
        })),
    }
}

/// Checks that the root's pixels are the BGRX layout `crate::encode` reads: 32 bits per
/// pixel, little-endian, TrueColor with 8-bit red, green and blue. Returns the scanline pad.
fn check_pixel_format(setup: &xproto::Setup, screen: &xproto::Screen) -> Result<u32, String> {
    if setup.image_byte_order != ImageOrder::LSB_FIRST {
        return Err("the server sends images most significant byte first".to_owned());
    }
    let depth = screen.root_depth;
    let format = setup
        .pixmap_formats
        .iter()
        .find(|f| f.depth == depth)
        .ok_or_else(|| format!("no pixmap format for the root depth {depth}"))?;
    if format.bits_per_pixel != 32 {
        return Err(format!(
            "depth {depth} stores {} bits per pixel, not 32",
            format.bits_per_pixel
        ));
    }
    let visual = screen
        .allowed_depths
        .iter()
        .flat_map(|d| &d.visuals)
        .find(|v| v.visual_id == screen.root_visual)
        .ok_or_else(|| "the root visual is not listed".to_owned())?;
    let masks = (visual.red_mask, visual.green_mask, visual.blue_mask);
    if masks != (0xff_0000, 0xff00, 0xff) {
        return Err(format!(
            "depth {depth} has colour masks {:06x}/{:06x}/{:06x}, not 8 bits each of red, \
             green and blue",
            masks.0, masks.1, masks.2
        ));
    }
    Ok(u32::from(format.scanline_pad))
}

/// Shared memory the X server writes grabbed pixels into, mapped read-only here.
///
/// A memfd passed with `ShmAttachFd` (MIT-SHM 1.2, X.Org 1.15 and later) rather than SysV
/// `shmget`: the memory's only references are the fd (closed as soon as it is sent), our
/// mapping and the server's, so nothing can outlive both processes — no window between
/// `shmget` and `IPC_RMID` in which a crash leaks a segment, no `kernel.shmmax` limits, and it
/// works when the X server lives in another IPC namespace (a container sharing only the X
/// socket). Its size is sealed, so a misbehaving server cannot shrink the file under our
/// mapping and turn a read into SIGBUS.
#[derive(Debug)]
struct Segment {
    /// The server's name for the segment.
    id: shm::Seg,
    /// Start of our read-only mapping, `len` bytes long.
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to this value alone; it is only read, through `&self`.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates a `len`-byte memfd, maps it and attaches it to the server. Local failures and
    /// X errors come back as `Refused` (use GetImage); a broken connection as `Gone`.
    fn create(conn: &RustConnection, len: usize) -> Result<Self, Fault> {
        let refused = |what: &str, e: std::io::Error| {
            Fault::Refused(WireError::Io {
                message: format!("MIT-SHM segment: {what}: {e}"),
            })
        };
        let fd = sealed_memfd(len).map_err(|e| refused("memfd", e))?;
        // SAFETY: maps a file we own, of `len` bytes (sealed), shared and read-only; the
        // result is checked before use and unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(refused("mmap", std::io::Error::last_os_error()));
        }
        let Some(ptr) = NonNull::new(ptr.cast::<u8>()) else {
            return Err(refused("mmap", std::io::Error::other("null mapping")));
        };
        let mut segment = Self { id: 0, ptr, len };
        segment.id = conn.generate_id()?;
        // The fd is closed on our side once sent; the mapping keeps the memory alive.
        shm::attach_fd(conn, segment.id, fd, false)?.check()?;
        Ok(segment)
    }

    /// The first `len` bytes; `len` must not exceed the segment.
    fn bytes(&self, len: usize) -> &[u8] {
        // SAFETY: the mapping is `self.len` bytes and lives as long as `self`; the server
        // writes into it only while processing a ShmGetImage, and `grab` hands out this
        // slice only after that request's reply arrived, borrowed from `&mut X11`, so no
        // new request can be sent while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len.min(self.len)) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `create`, which nothing borrows now.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len.max(1));
        }
    }
}

fn sealed_memfd(len: usize) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall with a NUL-terminated name.
    let raw = unsafe {
        libc::memfd_create(
            c"pincer-screen".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    file.set_len(len as u64)?;
    // SAFETY: fcntl on a descriptor we own.
    let sealed = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )
    };
    if sealed < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Xvfb, wait_for};
    use crate::wayland::Wayland;
    use pincer_guest_core::platform::Screen as _;
    use pincer_shared::limits::MAX_IMAGE_EDGE;
    use pincer_shared::observe::{ImageFormat, PixelLayout};
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;
    use x11rb::protocol::xproto::{ChangeWindowAttributesAux, CreateWindowAux, WindowClass};
    use x11rb::wrapper::ConnectionExt as _;

    /// Root background of painted test screens, as 0xRRGGBB.
    const BG: u32 = 0x20_40_80;
    /// Colour of the window painted at [`WIN`].
    const FG: u32 = 0xf0_80_10;
    const WIN: Rect = Rect {
        x: 100,
        y: 50,
        width: 80,
        height: 60,
    };

    /// Paints the root of `display` with `bg` and maps a window of colour [`FG`] at [`WIN`].
    /// The window lives as long as the returned connection.
    fn paint(display: &str, bg: u32) -> RustConnection {
        let (conn, screen_num) = x11rb::connect(Some(display)).expect("connect to Xvfb");
        let root = conn.setup().roots[screen_num].root;
        conn.change_window_attributes(root, &ChangeWindowAttributesAux::new().background_pixel(bg))
            .expect("set background");
        conn.clear_area(false, root, 0, 0, 0, 0).expect("clear");
        let win = conn.generate_id().expect("id");
        conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            win,
            root,
            WIN.x as i16,
            WIN.y as i16,
            WIN.width as u16,
            WIN.height as u16,
            0,
            WindowClass::INPUT_OUTPUT,
            x11rb::COPY_FROM_PARENT,
            &CreateWindowAux::new()
                .background_pixel(FG)
                .override_redirect(1),
        )
        .expect("create window");
        conn.map_window(win).expect("map");
        conn.sync().expect("sync");
        conn
    }

    fn request(format: ImageFormat) -> ScreenshotRequest {
        ScreenshotRequest {
            format,
            ..Default::default()
        }
    }

    fn rgb(colour: u32) -> [u8; 3] {
        [(colour >> 16) as u8, (colour >> 8) as u8, colour as u8]
    }

    /// An RGB image: width, height and 3 bytes per pixel.
    struct Rgb(u32, u32, Vec<u8>);

    impl Rgb {
        fn at(&self, x: u32, y: u32) -> [u8; 3] {
            let i = ((y * self.0 + x) * 3) as usize;
            [self.2[i], self.2[i + 1], self.2[i + 2]]
        }

        fn near(&self, x: u32, y: u32, colour: u32, tolerance: u8) -> bool {
            let got = self.at(x, y);
            got.iter()
                .zip(rgb(colour))
                .all(|(&g, w)| g.abs_diff(w) <= tolerance)
        }
    }

    fn decode_png(bytes: &[u8]) -> Rgb {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .expect("valid PNG");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("PNG frame");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        Rgb(info.width, info.height, buf)
    }

    fn decode_raw(meta: &ScreenshotMeta, bgrx: &[u8]) -> Rgb {
        assert_eq!(meta.layout, PixelLayout::Bgrx8);
        assert_eq!(bgrx.len(), (meta.width * meta.height * 4) as usize);
        let rgb = bgrx.chunks_exact(4).flat_map(|p| [p[2], p[1], p[0]]);
        Rgb(meta.width, meta.height, rgb.collect())
    }

    /// Decodes a JPEG with ImageMagick's `stream`, an independent decoder.
    fn decode_jpeg(meta: &ScreenshotMeta, bytes: &[u8]) -> Rgb {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut file, bytes).expect("write JPEG");
        let out = Command::new("stream")
            .args(["-map", "rgb", "-storage-type", "char"])
            .arg(file.path())
            .arg("-")
            .output()
            .expect("ImageMagick's stream is installed");
        assert!(out.status.success(), "stream failed: {out:?}");
        assert_eq!(out.stdout.len(), (meta.width * meta.height * 3) as usize);
        Rgb(meta.width, meta.height, out.stdout)
    }

    thread_local! {
        /// The encoder the guest core keeps for a screen, reused across one test's captures.
        static ENCODER: std::cell::RefCell<FrameEncoder> = std::cell::RefCell::default();
    }

    /// A capture as the guest core asks for one: the request checked first, then the screen
    /// captured through the encoder.
    fn shoot(
        screen: &mut Screen,
        req: &ScreenshotRequest,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        encode::check_request(req)?;
        ENCODER.with_borrow_mut(|encoder| screen.capture(req, encoder))
    }

    fn capture(screen: &mut Screen, req: &ScreenshotRequest) -> (ScreenshotMeta, Vec<u8>) {
        shoot(screen, req).unwrap_or_else(|e| panic!("capture {req:?}: {e}"))
    }

    /// Checks the painted scene: background around the window, window colour inside it.
    fn assert_scene(img: &Rgb) {
        let inside = [(100, 50), (179, 109), (140, 80)];
        let outside = [(0, 0), (99, 50), (180, 109), (100, 110), (319, 239)];
        for (x, y) in inside {
            assert_eq!(img.at(x, y), rgb(FG), "window pixel at {x},{y}");
        }
        for (x, y) in outside {
            assert_eq!(img.at(x, y), rgb(BG), "background pixel at {x},{y}");
        }
    }

    #[test]
    fn screen_is_send() {
        fn assert_send<T: Send>() {}
        assert_send::<Screen>();
    }

    #[test]
    fn every_format_shows_the_screen() {
        let xvfb = Xvfb::start(320, 240);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let whole = Rect::new(0, 0, 320, 240);

        let (meta, png) = capture(&mut screen, &request(ImageFormat::Png));
        assert_eq!(
            (
                meta.width,
                meta.height,
                meta.source,
                meta.layout,
                meta.format
            ),
            (320, 240, whole, PixelLayout::Rgb8, ImageFormat::Png)
        );
        let png = decode_png(&png);
        assert_eq!((png.0, png.1), (320, 240));
        assert_scene(&png);

        let (meta, raw) = capture(&mut screen, &request(ImageFormat::Raw { zstd: None }));
        assert_eq!(meta.source, whole);
        let raw_rgb = decode_raw(&meta, &raw);
        assert_eq!(raw_rgb.2, png.2, "raw and PNG show the same pixels");

        let (meta, packed) = capture(&mut screen, &request(ImageFormat::Raw { zstd: Some(1) }));
        assert_eq!(
            (meta.width, meta.height, meta.layout),
            (320, 240, PixelLayout::Bgrx8)
        );
        assert!(
            packed.len() < raw.len() / 10,
            "a flat scene compresses well"
        );
        let unpacked = zstd::bulk::decompress(&packed, raw.len()).expect("zstd frame");
        assert_eq!(decode_raw(&meta, &unpacked).2, png.2);

        let (meta, jpeg) = capture(&mut screen, &request(ImageFormat::Jpeg { quality: 90 }));
        assert_eq!(&jpeg[..2], [0xff, 0xd8], "JPEG start of image");
        assert_eq!((meta.width, meta.height), (320, 240));
        let jpeg = decode_jpeg(&meta, &jpeg);
        // Away from edges, where chroma subsampling and ringing blur colours.
        for (x, y) in [(10, 10), (300, 200), (60, 150)] {
            assert!(
                jpeg.near(x, y, BG, 8),
                "JPEG background at {x},{y}: {:?}",
                jpeg.at(x, y)
            );
        }
        for (x, y) in [(140, 80), (110, 60), (170, 100)] {
            assert!(
                jpeg.near(x, y, FG, 8),
                "JPEG window at {x},{y}: {:?}",
                jpeg.at(x, y)
            );
        }
    }

    #[test]
    fn region_capture_returns_that_part() {
        let xvfb = Xvfb::start(320, 240);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());

        // Straddles the window's top-left corner: 10x10 of background, then window.
        let region = Rect::new(90, 40, 20, 20);
        let req = ScreenshotRequest {
            format: ImageFormat::Raw { zstd: None },
            region: Some(region),
            max_size: None,
        };
        let (meta, raw) = capture(&mut screen, &req);
        assert_eq!((meta.width, meta.height, meta.source), (20, 20, region));
        let img = decode_raw(&meta, &raw);
        for (x, y) in [(0, 0), (9, 9), (10, 9), (9, 10), (19, 0), (0, 19)] {
            assert_eq!(img.at(x, y), rgb(BG), "background at {x},{y}");
        }
        for (x, y) in [(10, 10), (19, 19), (15, 12)] {
            assert_eq!(img.at(x, y), rgb(FG), "window at {x},{y}");
        }

        // The bottom-right corner of the screen, as PNG.
        let corner = Rect::new(310, 230, 10, 10);
        let req = ScreenshotRequest {
            format: ImageFormat::Png,
            region: Some(corner),
            max_size: None,
        };
        let (meta, png) = capture(&mut screen, &req);
        assert_eq!(meta.source, corner);
        let img = decode_png(&png);
        assert_eq!((img.0, img.1), (10, 10));
        assert!(img.2.chunks_exact(3).all(|p| p == rgb(BG)));
    }

    #[test]
    fn downscale_fits_max_size() {
        let xvfb = Xvfb::start(320, 240);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());

        let req = ScreenshotRequest {
            format: ImageFormat::Png,
            region: None,
            max_size: Some((100, 100)),
        };
        let (meta, png) = capture(&mut screen, &req);
        assert_eq!((meta.width, meta.height), (100, 75));
        assert_eq!(meta.source, Rect::new(0, 0, 320, 240));
        let img = decode_png(&png);
        assert_eq!((img.0, img.1), (100, 75));
        // The window spans 31.25..56.25 x 15.6..34.4 after scaling by 0.3125.
        assert_eq!(img.at(40, 25), rgb(FG));
        assert_eq!(img.at(5, 5), rgb(BG));
        assert_eq!(img.at(90, 60), rgb(BG));
        // A box straddling the window's left edge (source columns 99.2..102.4) mixes both.
        let edge = img.at(31, 25);
        assert!(
            edge != rgb(FG) && edge != rgb(BG),
            "edge pixel {edge:?} is a blend"
        );

        // Region and downscale together, as raw.
        let req = ScreenshotRequest {
            format: ImageFormat::Raw { zstd: Some(1) },
            region: Some(WIN),
            max_size: Some((40, 40)),
        };
        let (meta, packed) = capture(&mut screen, &req);
        assert_eq!((meta.width, meta.height, meta.source), (40, 30, WIN));
        let raw = zstd::bulk::decompress(&packed, 40 * 30 * 4).expect("zstd");
        assert!(
            decode_raw(&meta, &raw)
                .2
                .chunks_exact(3)
                .all(|p| p == rgb(FG))
        );
    }

    #[test]
    fn invalid_requests_are_refused_and_the_screen_still_works() {
        let xvfb = Xvfb::start(320, 240);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let png = request(ImageFormat::Png);
        let cases = [
            (
                ScreenshotRequest {
                    format: ImageFormat::Jpeg { quality: 0 },
                    ..png
                },
                "quality",
            ),
            (
                ScreenshotRequest {
                    format: ImageFormat::Jpeg { quality: 101 },
                    ..png
                },
                "quality",
            ),
            (
                ScreenshotRequest {
                    format: ImageFormat::Raw { zstd: Some(100) },
                    ..png
                },
                "zstd",
            ),
            (
                ScreenshotRequest {
                    max_size: Some((0, 100)),
                    ..png
                },
                "zero",
            ),
            (
                ScreenshotRequest {
                    max_size: Some((MAX_IMAGE_EDGE + 1, 100)),
                    ..png
                },
                "limit",
            ),
            (
                ScreenshotRequest {
                    region: Some(Rect::new(10, 10, 0, 10)),
                    ..png
                },
                "empty",
            ),
            (
                ScreenshotRequest {
                    region: Some(Rect::new(310, 0, 20, 10)),
                    ..png
                },
                "320x240",
            ),
            (
                ScreenshotRequest {
                    region: Some(Rect::new(-5, 0, 20, 10)),
                    ..png
                },
                "320x240",
            ),
            (
                ScreenshotRequest {
                    region: Some(Rect::new(0, 500, 1, 1)),
                    ..png
                },
                "320x240",
            ),
        ];
        for (req, hint) in cases {
            match shoot(&mut screen, &req) {
                Err(WireError::InvalidArgument { message }) => {
                    assert!(
                        message.contains(hint),
                        "{req:?}: message {message:?} lacks {hint:?}"
                    );
                }
                other => panic!("{req:?} gave {:?}", other.map(|(meta, _)| meta)),
            }
        }
        let (meta, _) = capture(&mut screen, &png);
        assert_eq!((meta.width, meta.height), (320, 240));
    }

    #[test]
    fn info_names_the_backend_and_monitors() {
        let xvfb = Xvfb::start(320, 240);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let info = screen.info().expect("info");
        assert_eq!(
            info,
            ScreenInfo {
                width: 320,
                height: 240,
                monitors: vec![Rect::new(0, 0, 320, 240)],
                capture: "x11-shm".to_owned(),
            }
        );
    }

    #[test]
    fn getimage_fallback_gives_the_same_pixels() {
        let xvfb = Xvfb::start(320, 240);
        let _scene = paint(&xvfb.display, BG);
        let raw = request(ImageFormat::Raw { zstd: None });
        let mut shm_screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let (_, via_shm) = capture(&mut shm_screen, &raw);

        let x11 = X11::open(Some(&xvfb.display), false).expect("open without MIT-SHM");
        let mut plain = Screen {
            backend: Lazy::holding(Some(xvfb.display.clone()), Backend::X11(Box::new(x11))),
            wayland: Route::new(Wayland::new()),
        };
        assert_eq!(plain.info().expect("info").capture, "x11-getimage");
        let (meta, via_getimage) = capture(&mut plain, &raw);
        assert_eq!(
            decode_raw(&meta, &via_getimage).2,
            decode_raw(&meta, &via_shm).2
        );
        let region = ScreenshotRequest {
            region: Some(Rect::new(90, 40, 20, 20)),
            ..raw
        };
        let (meta, part) = capture(&mut plain, &region);
        let img = decode_raw(&meta, &part);
        assert_eq!((img.at(0, 0), img.at(19, 19)), (rgb(BG), rgb(FG)));
    }

    /// A resize between grabs must be noticed: with a stale size the next grab sees the
    /// real one, re-creates the segment and still returns the right pixels. (Xvfb cannot
    /// resize its screen, so the stale size is planted.)
    #[test]
    fn stale_screen_size_is_corrected() {
        let xvfb = Xvfb::start(320, 240);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        screen.info().expect("connect");
        let plant = |screen: &mut Screen| {
            let Ok(Backend::X11(x11)) = screen.backend.get() else {
                panic!("not an X11 backend");
            };
            x11.set_size(100, 100).expect("re-create segment");
            assert_eq!(x11.shm.as_ref().map(|s| s.len), Some(100 * 100 * 4));
        };

        plant(&mut screen);
        let (meta, png) = capture(&mut screen, &request(ImageFormat::Png));
        assert_eq!((meta.width, meta.height), (320, 240));
        assert_scene(&decode_png(&png));

        // A region outside the stale size but inside the real screen.
        plant(&mut screen);
        let req = ScreenshotRequest {
            region: Some(Rect::new(90, 40, 20, 20)),
            ..request(ImageFormat::Raw { zstd: None })
        };
        let (meta, raw) = capture(&mut screen, &req);
        let img = decode_raw(&meta, &raw);
        assert_eq!((img.at(0, 0), img.at(19, 19)), (rgb(BG), rgb(FG)));
        assert_eq!(screen.info().expect("info").capture, "x11-shm");
    }

    #[test]
    fn unreachable_display_is_a_display_error() {
        let mut screen = Screen::new(Some(":65000".to_owned()), Wayland::new());
        for _ in 0..2 {
            match shoot(&mut screen, &request(ImageFormat::Png)) {
                Err(WireError::Display { message }) => {
                    assert!(message.contains(":65000"), "{message}")
                }
                other => panic!("got {:?}", other.map(|(meta, _)| meta)),
            }
            assert!(matches!(screen.info(), Err(WireError::Display { .. })));
        }
    }

    /// With no display at all, the answer is a Display error that says so; no panic.
    #[test]
    fn no_display_at_all_is_a_display_error() {
        let outside_wayland = [
            ("DISPLAY", None),
            ("WAYLAND_DISPLAY", None),
            ("XDG_SESSION_TYPE", None),
        ];
        if isolated("no_display_at_all_is_a_display_error", &outside_wayland) {
            return;
        }
        let mut screen = Screen::new(None, Wayland::new());
        for _ in 0..2 {
            match shoot(&mut screen, &request(ImageFormat::Png)) {
                Err(WireError::Display { message }) => {
                    assert!(message.contains("$DISPLAY is not set"), "{message}");
                }
                other => panic!("got {:?}", other.map(|(meta, _)| meta)),
            }
        }
    }

    /// In a Wayland session without an X display, screenshots are refused as unsupported,
    /// naming the session; an X server that is not Xwayland still serves though the
    /// environment names a Wayland session (a pincer desktop started from one).
    #[test]
    fn a_wayland_session_without_x_is_refused_by_name() {
        let xvfb = (std::env::var_os(CHILD).is_none()).then(|| Xvfb::start(320, 240));
        let wayland = [
            ("DISPLAY", None),
            ("WAYLAND_DISPLAY", Some("wayland-7")),
            ("XDG_CURRENT_DESKTOP", Some("sway")),
            (
                "PINCER_TEST_XVFB",
                xvfb.as_ref().map(|x| x.display.as_str()),
            ),
        ];
        if isolated("a_wayland_session_without_x_is_refused_by_name", &wayland) {
            return;
        }
        let mut screen = Screen::new(None, Wayland::new());
        match shoot(&mut screen, &request(ImageFormat::Png)) {
            Err(WireError::Unsupported { what }) => {
                assert!(what.starts_with("screenshots: "), "{what}");
                assert!(
                    what.contains("a Wayland session (sway, WAYLAND_DISPLAY=wayland-7)"),
                    "{what}"
                );
                assert!(what.contains("GNOME on Xorg"), "{what}");
            }
            other => panic!("got {:?}", other.map(|(meta, _)| meta)),
        }
        let display = std::env::var("PINCER_TEST_XVFB").expect("the parent's Xvfb");
        let mut screen = Screen::new(Some(display), Wayland::new());
        assert_eq!(screen.info().expect("Xvfb serves").capture, "x11-shm");
    }

    /// Counts open fds and resident memory of this process.
    fn fds_and_rss_kib() -> (usize, u64) {
        let fds = std::fs::read_dir("/proc/self/fd").expect("/proc").count();
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc");
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        (fds, rss)
    }

    /// Set in the child process that [`isolated`] starts.
    const CHILD: &str = "PINCER_SCREEN_TEST_CHILD";

    /// Runs the test `name` (within this module) alone in a fresh process, so that its fd
    /// and memory counts or its environment are not shared with tests running in parallel.
    /// `envs` are set (`Some`) or removed (`None`) there. Returns false in that child, where
    /// the caller then does the real work.
    fn isolated(name: &str, envs: &[(&str, Option<&str>)]) -> bool {
        if std::env::var_os(CHILD).is_some() {
            return false;
        }
        // Test names leave out the crate: "screen::tests::name".
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let test = format!("{module}::{name}");
        let mut child = Command::new(std::env::current_exe().expect("test binary"));
        child
            .args([test.as_str(), "--exact", "--include-ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD, "1")
            .stdin(Stdio::null());
        for &(key, value) in envs {
            match value {
                Some(value) => child.env(key, value),
                None => child.env_remove(key),
            };
        }
        let out = child.output().expect("re-run the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("{stdout}");
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "isolated {test} failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        true
    }

    /// Every format, a region and a downscale, in turn.
    fn mixed_requests() -> [ScreenshotRequest; 6] {
        [
            request(ImageFormat::Png),
            request(ImageFormat::Jpeg { quality: 80 }),
            request(ImageFormat::Raw { zstd: None }),
            request(ImageFormat::Raw { zstd: Some(1) }),
            ScreenshotRequest {
                region: Some(WIN),
                ..request(ImageFormat::Png)
            },
            ScreenshotRequest {
                max_size: Some((200, 200)),
                ..request(ImageFormat::Raw { zstd: Some(3) })
            },
        ]
    }

    /// Captures `n` screenshots of mixed requests and returns the growth of fds and RSS (KiB)
    /// after a warm-up.
    fn growth_over(screen: &mut Screen, n: usize) -> (isize, i64) {
        let requests = mixed_requests();
        for req in requests.iter().cycle().take(60) {
            capture(screen, req);
        }
        let (fds0, rss0) = fds_and_rss_kib();
        for req in requests.iter().cycle().take(n) {
            capture(screen, req);
        }
        let (fds1, rss1) = fds_and_rss_kib();
        println!("after {n} captures: fds {fds0} -> {fds1}, RSS {rss0} -> {rss1} KiB");
        (fds1 as isize - fds0 as isize, rss1 as i64 - rss0 as i64)
    }

    #[test]
    fn fds_and_memory_stay_flat_over_500_captures() {
        if isolated("fds_and_memory_stay_flat_over_500_captures", &[]) {
            return;
        }
        let xvfb = Xvfb::start(640, 480);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let (fds, rss) = growth_over(&mut screen, 500);
        assert_eq!(fds, 0, "fd count changed");
        // One leaked 640x480 frame per capture would be 600 MiB; allocator noise is far less.
        assert!(rss < 8 * 1024, "RSS grew by {rss} KiB");

        // Connecting and dropping (the reconnect path) releases the connection, the memfd
        // and the mapping.
        let (fds0, _) = fds_and_rss_kib();
        for _ in 0..50 {
            let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
            capture(&mut screen, &request(ImageFormat::Raw { zstd: None }));
        }
        assert_eq!(
            fds_and_rss_kib().0,
            fds0,
            "fd count changed over 50 reconnects"
        );
    }

    /// `cargo test --release -p pincer-agent soak -- --ignored --nocapture`
    #[test]
    #[ignore = "takes about a minute; run on demand"]
    fn soak_10000_captures_at_1080p() {
        if isolated("soak_10000_captures_at_1080p", &[]) {
            return;
        }
        let xvfb = Xvfb::start(1920, 1080);
        let _scene = paint(&xvfb.display, BG);
        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let (fds, rss) = growth_over(&mut screen, 10_000);
        assert_eq!(fds, 0, "fd count changed");
        assert!(rss < 16 * 1024, "RSS grew by {rss} KiB");
    }

    /// An Xvfb on a fixed display number, so that a restarted server takes the same name.
    struct FixedXvfb(Child);

    impl FixedXvfb {
        /// Starts a 320x240 Xvfb on `display` with `extra` arguments.
        fn start(display: &str, extra: &[&str]) -> Self {
            let child = Command::new("Xvfb")
                .args([display, "-noreset", "-screen", "0", "320x240x24"])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("Xvfb is installed");
            let server = Self(child);
            let up = wait_for(Duration::from_secs(10), || {
                x11rb::connect(Some(display)).ok()
            });
            assert!(up.is_some(), "Xvfb {display} did not come up");
            server
        }

        /// Kills the server the way a crash would, leaving its lock file behind.
        fn crash(mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    impl Drop for FixedXvfb {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                // SIGTERM, so that Xvfb removes its lock file and socket.
                // SAFETY: plain syscall on our own child, not yet reaped.
                unsafe {
                    libc::kill(self.0.id() as i32, libc::SIGTERM);
                }
                let _ = self.0.wait();
            }
        }
    }

    /// Serialises the tests that pick a fixed display, so that two never pick the same.
    static FIXED_DISPLAYS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A display number in the range reserved for fixed test displays (:180-:189) that no
    /// running server holds. A lock file whose process is gone is free: Xvfb reclaims it.
    fn free_fixed_display() -> String {
        (180..=189)
            .rev()
            .find(
                |n| match std::fs::read_to_string(format!("/tmp/.X{n}-lock")) {
                    Ok(pid) => !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
                    Err(_) => true,
                },
            )
            .map(|n| format!(":{n}"))
            .expect("a free display in :180-:189")
    }

    #[test]
    fn server_without_mit_shm_uses_getimage() {
        let _fixed = FIXED_DISPLAYS.lock().unwrap_or_else(|e| e.into_inner());
        let display = free_fixed_display();
        let _server = FixedXvfb::start(&display, &["-nolisten", "tcp", "-extension", "MIT-SHM"]);
        let _scene = paint(&display, BG);
        let mut screen = Screen::new(Some(display), Wayland::new());
        assert_eq!(screen.info().expect("info").capture, "x11-getimage");
        let (meta, png) = capture(&mut screen, &request(ImageFormat::Png));
        assert_eq!((meta.width, meta.height), (320, 240));
        assert_scene(&decode_png(&png));
    }

    /// Over TCP the memfd cannot travel with the attach request, so the server refuses it
    /// and the backend keeps the connection with plain GetImage.
    #[test]
    fn tcp_display_falls_back_to_getimage() {
        let _fixed = FIXED_DISPLAYS.lock().unwrap_or_else(|e| e.into_inner());
        let display = free_fixed_display();
        let _server = FixedXvfb::start(&display, &["-listen", "tcp"]);
        let _scene = paint(&display, BG);
        let mut screen = Screen::new(Some(format!("127.0.0.1{display}")), Wayland::new());
        assert_eq!(screen.info().expect("info").capture, "x11-getimage");
        let (meta, raw) = capture(&mut screen, &request(ImageFormat::Raw { zstd: None }));
        assert_scene(&decode_raw(&meta, &raw));
    }

    #[test]
    fn reconnects_after_the_x_server_restarts() {
        let _fixed = FIXED_DISPLAYS.lock().unwrap_or_else(|e| e.into_inner());
        let display = free_fixed_display();
        let server = FixedXvfb::start(&display, &["-nolisten", "tcp"]);
        let scene = paint(&display, BG);
        let mut screen = Screen::new(Some(display.clone()), Wayland::new());
        let raw = request(ImageFormat::Raw { zstd: None });
        let (meta, bytes) = capture(&mut screen, &raw);
        assert_eq!(decode_raw(&meta, &bytes).at(0, 0), rgb(BG));

        drop(scene);
        server.crash();
        for attempt in 0..2 {
            match shoot(&mut screen, &raw) {
                Err(WireError::Display { message }) => {
                    println!("{message}");
                    assert!(message.contains(&display), "names the display: {message}");
                    // The first call finds the old connection broken, the second has none.
                    let cause = ["lost the connection", "cannot connect"][attempt];
                    assert!(message.contains(cause), "says {cause:?}: {message}");
                }
                other => panic!("capture without a server gave {:?}", other.map(|(m, _)| m)),
            }
        }

        let _server = FixedXvfb::start(&display, &["-nolisten", "tcp"]);
        let _scene = paint(&display, 0x00_ff_00);
        let (meta, bytes) = capture(&mut screen, &raw);
        assert_eq!(
            decode_raw(&meta, &bytes).at(0, 0),
            rgb(0x00_ff_00),
            "the new server's screen"
        );
        assert_eq!(screen.info().expect("info").capture, "x11-shm");
    }

    /// Paints a full-screen gradient on the root, a stand-in for a wallpaper.
    fn paint_gradient(display: &str) -> RustConnection {
        let (conn, screen_num) = x11rb::connect(Some(display)).expect("connect to Xvfb");
        let screen = &conn.setup().roots[screen_num];
        let (root, w, h) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        let pixmap = conn.generate_id().expect("id");
        conn.create_pixmap(24, pixmap, root, w, h).expect("pixmap");
        let gc = conn.generate_id().expect("id");
        conn.create_gc(gc, pixmap, &Default::default()).expect("gc");
        // Strips of 32 rows stay under the core protocol's 256 KiB request limit.
        for top in (0..h).step_by(32) {
            let rows = 32.min(h - top);
            let mut data = Vec::with_capacity(usize::from(w) * usize::from(rows) * 4);
            for y in top..top + rows {
                for x in 0..w {
                    let (x, y) = (u32::from(x), u32::from(y));
                    let r = x * 255 / u32::from(w);
                    let g = y * 255 / u32::from(h);
                    let b = (x + y) / 8 % 256;
                    data.extend_from_slice(&[b as u8, g as u8, r as u8, 0]);
                }
            }
            conn.put_image(
                xproto::ImageFormat::Z_PIXMAP,
                pixmap,
                gc,
                w,
                rows,
                0,
                top as i16,
                0,
                24,
                &data,
            )
            .expect("put image");
        }
        conn.change_window_attributes(
            root,
            &ChangeWindowAttributesAux::new().background_pixmap(pixmap),
        )
        .expect("set background");
        conn.clear_area(false, root, 0, 0, 0, 0).expect("clear");
        conn.free_pixmap(pixmap).expect("free");
        conn.sync().expect("sync");
        conn
    }

    fn millis(mut samples: Vec<u128>) -> String {
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        format!("{:7.2} {:7.2} {:7.2}", at(0.0), at(0.5), at(0.95))
    }

    /// Grab-only and whole-capture times on a 1920x1080x24 Xvfb showing gtk3-widget-factory
    /// over a gradient: `cargo test --release -p pincer-agent bench_1080p -- --ignored
    /// --nocapture` (in the agent crate: `-p pincer-agent`).
    #[test]
    #[ignore = "benchmark; run on demand in release mode"]
    fn bench_1080p() {
        const RUNS: usize = 300;
        let xvfb = Xvfb::start(1920, 1080);
        let conn = paint_gradient(&xvfb.display);
        let envs = [
            ("DISPLAY".to_owned(), xvfb.display.clone()),
            ("NO_AT_BRIDGE".to_owned(), "1".to_owned()),
        ];
        let _app = crate::testutil::App::start(&["gtk3-widget-factory"], &envs);
        let root = conn.setup().roots[0].root;
        let mapped = wait_for(Duration::from_secs(20), || {
            let children = conn.query_tree(root).ok()?.reply().ok()?.children;
            children.into_iter().find(|&w| {
                conn.get_window_attributes(w)
                    .ok()
                    .and_then(|c| c.reply().ok())
                    .is_some_and(|a| a.map_state == xproto::MapState::VIEWABLE)
            })
        });
        assert!(mapped.is_some(), "gtk3-widget-factory did not map a window");
        std::thread::sleep(Duration::from_secs(2));

        let mut screen = Screen::new(Some(xvfb.display.clone()), Wayland::new());
        let (meta, png) = capture(&mut screen, &request(ImageFormat::Png));
        if let Ok(path) = std::env::var("PINCER_BENCH_PNG") {
            std::fs::write(&path, &png).expect("write PNG");
        }
        println!(
            "1920x1080x24 Xvfb, gtk3-widget-factory over a gradient; {RUNS} runs each, ms \
             (min p50 p95); PNG {}x{}; zstd on {} threads",
            meta.width,
            meta.height,
            ENCODER.with_borrow(|e| e.threads)
        );
        let mut grabs = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let start = Instant::now();
            let Ok(backend) = screen.backend.get() else {
                panic!("connected above");
            };
            let grab = backend.grab(&request(ImageFormat::Png)).expect("grab");
            std::hint::black_box(&grab.pixels[..]);
            grabs.push(start.elapsed().as_micros());
        }
        println!("{:<22} {}", "grab only", millis(grabs));
        let scaled = Some((1280, 720));
        let cases = [
            ("png", ImageFormat::Png, None),
            ("jpeg q80", ImageFormat::Jpeg { quality: 80 }, None),
            ("raw", ImageFormat::Raw { zstd: None }, None),
            ("raw+zstd 1", ImageFormat::Raw { zstd: Some(1) }, None),
            (
                "raw+zstd 1, 1 thread",
                ImageFormat::Raw { zstd: Some(1) },
                None,
            ),
            ("png to 1280x720", ImageFormat::Png, scaled),
            (
                "jpeg q80 to 1280x720",
                ImageFormat::Jpeg { quality: 80 },
                scaled,
            ),
        ];
        let parts = ENCODER.with_borrow(|e| e.threads);
        for (name, format, max_size) in cases {
            let threads = if name.ends_with("1 thread") { 1 } else { parts };
            ENCODER.with_borrow_mut(|e| e.threads = threads);
            let req = ScreenshotRequest {
                max_size,
                ..request(format)
            };
            let (mut total, mut grab, mut encode, mut size) =
                (Vec::new(), Vec::new(), Vec::new(), 0);
            for _ in 0..RUNS {
                let start = Instant::now();
                let (meta, bytes) = capture(&mut screen, &req);
                total.push(start.elapsed().as_micros());
                grab.push(u128::from(meta.grab_us));
                encode.push(u128::from(meta.encode_us));
                size = bytes.len();
            }
            println!("{name:<22} {} {size:>10} bytes", millis(total));
            println!("{:<22} {}", "  grab part", millis(grab));
            println!("{:<22} {}", "  encode part", millis(encode));
        }
    }
}

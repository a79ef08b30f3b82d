//! GNOME's Wayland route: Mutter's own `org.gnome.Mutter.RemoteDesktop` and
//! `org.gnome.Mutter.ScreenCast` D-Bus APIs on the session bus (mutter 43 and later, no
//! portal, no dialog). One remote-desktop session with a screen cast of the primary
//! monitor linked to it: frames arrive over PipeWire ([`frames`], read by
//! `pincer-screencast`), input goes to the
//! session's `Notify*` methods, text the keyboard layout cannot type through the session's
//! clipboard and a paste.
//!
//! [`Gnome`] is one handle that the screen, input and video share: a session belongs to the
//! D-Bus connection that made it, and pointer positions are given on its stream. It is
//! made on first need and made again when it is found gone (mutter restarted, the
//! session closed); a call that finds it gone is tried once more on a new one.

use super::frames::Frames;
use super::{Injector, ScrollAxis};
use crate::fault::Fault;
use crate::keysym;
use pincer_guest_core::encode::FrameEncoder;
use pincer_shared::WireError;
use pincer_shared::action::{Action, MouseButton, Point};
use pincer_shared::observe::{ScreenshotMeta, ScreenshotRequest};
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use zbus::proxy::CacheProperties;
use zbus::zvariant::{OwnedObjectPath, Value};

/// How the screen is captured on this route, as `env info` shows it.
pub(crate) const CAPTURE: &str = "mutter-screencast";

const REMOTE_DESKTOP: &str = "org.gnome.Mutter.RemoteDesktop";
const SCREEN_CAST: &str = "org.gnome.Mutter.ScreenCast";
/// How long a new session may take to deliver its first frame.
const FIRST_FRAME: Duration = Duration::from_secs(5);
/// How long a D-Bus call to mutter may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The warm-up after a session starts: mutter drops the first keys of a new session's
/// virtual keyboard and the first motion of its virtual pointer (a first click then
/// pressed where the pointer was), so one Shift press and a motion by nothing go first
/// and the devices get this long.
const WARM_UP: Duration = Duration::from_millis(100);
/// How long keys wait after a button: mutter moves the keyboard focus a click gives after
/// it answered the click, and keys sent meanwhile went to the window focused before (seen
/// under load: the first characters typed right after clicking a new window's entry lost).
const FOCUS_SETTLE: Duration = Duration::from_millis(150);
/// How long an application gets to insert a pasted text after reading it: it reads the
/// clipboard asynchronously, and keys sent before it inserted would land first.
const PASTE_SETTLE: Duration = Duration::from_millis(50);
/// The texts the session offers when it holds the clipboard.
const TEXT_TYPES: [&str; 4] = [
    "text/plain;charset=utf-8",
    "UTF8_STRING",
    "text/plain",
    "STRING",
];

/// The GNOME route, shared by the subsystems that use it; connects on first use.
#[derive(Debug, Clone)]
pub(crate) struct Gnome(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    /// Runs the D-Bus connection; made on first use.
    runtime: Mutex<Option<Arc<tokio::runtime::Runtime>>>,
    session: Mutex<Option<Arc<Session>>>,
}

impl Gnome {
    pub(crate) fn new() -> Self {
        Self(Arc::default())
    }

    fn runtime(&self) -> Result<Arc<tokio::runtime::Runtime>, WireError> {
        let mut slot = self
            .0
            .runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(rt) = &*slot {
            return Ok(rt.clone());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pincer-mutter")
            .enable_all()
            .build()
            .map_err(|e| WireError::Internal {
                message: format!("cannot start the D-Bus runtime: {e}"),
            })?;
        Ok(slot.insert(Arc::new(rt)).clone())
    }

    /// Whether this session's bus offers Mutter's remote-desktop API; `Err` says why not.
    pub(crate) fn available(&self) -> Result<(), String> {
        let rt = self.runtime().map_err(|e| e.to_string())?;
        rt.block_on(async {
            let conn = zbus::Connection::session()
                .await
                .map_err(|e| format!("cannot reach the session's D-Bus: {e}"))?;
            let dbus = zbus::fdo::DBusProxy::new(&conn)
                .await
                .map_err(|e| e.to_string())?;
            for name in [REMOTE_DESKTOP, SCREEN_CAST] {
                let owned = dbus
                    .name_has_owner(name.try_into().map_err(|e| format!("{e}"))?)
                    .await
                    .map_err(|e| e.to_string())?;
                if !owned {
                    return Err(format!("the session bus has no {name}"));
                }
            }
            Ok(())
        })
    }

    /// Runs `op` on the session, making one first; a session found gone is made again
    /// and `op` tried once more.
    fn with<T>(
        &self,
        mut op: impl FnMut(&tokio::runtime::Runtime, &Session) -> Result<T, Fault>,
    ) -> Result<T, WireError> {
        let rt = self.runtime()?;
        let mut retried = false;
        loop {
            let session = self.session(&rt)?;
            match op(&rt, &session) {
                Ok(value) => return Ok(value),
                Err(Fault::Refused(e)) => return Err(e),
                Err(Fault::Gone(why)) if !retried => {
                    tracing::warn!(%why, "the GNOME remote-desktop session is gone; making a new one");
                    self.forget(&session);
                    retried = true;
                }
                Err(Fault::Gone(why)) => {
                    self.forget(&session);
                    return Err(WireError::Display {
                        message: format!(
                            "GNOME's remote-desktop session ended again after being made \
                             anew: {why}; the agent tries again on the next request"
                        ),
                    });
                }
            }
        }
    }

    /// The live session, made if there is none or it ended.
    fn session(&self, rt: &tokio::runtime::Runtime) -> Result<Arc<Session>, WireError> {
        let mut slot = self
            .0
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = &*slot
            && session.alive()
        {
            return Ok(session.clone());
        }
        *slot = None;
        let started = Instant::now();
        let session = rt
            .block_on(Session::open())
            .map_err(|why| WireError::Unsupported {
                what: format!("GNOME's remote desktop (Mutter's D-Bus API): {why}"),
            })?;
        tracing::info!(
            took = ?started.elapsed(),
            node = session.node,
            "GNOME remote-desktop session started"
        );
        Ok(slot.insert(Arc::new(session)).clone())
    }

    fn forget(&self, session: &Arc<Session>) {
        let mut slot = self
            .0
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *slot = None;
        }
    }

    /// The monitor's size, as the screen cast shows it.
    pub(crate) fn size(&self) -> Result<(u32, u32), WireError> {
        self.with(|_, s| s.size())
    }

    /// Encodes the latest frame (or `req.region` of it) as `req` asks.
    pub(crate) fn capture(
        &self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        self.with(|_, s| {
            let start = Instant::now();
            s.frames
                .with_latest(FIRST_FRAME, |latest| {
                    let format = latest.format.ok_or_else(|| WireError::Unsupported {
                        what: "screenshots: the screen cast negotiated a pixel format pincer \
                               does not read"
                            .to_owned(),
                    })?;
                    let layout = (latest.width, latest.height, latest.stride);
                    super::encode_screen(&latest.pixels, layout, format, start, req, encoder)
                })
                .map_err(Fault::Gone)?
                .map_err(Fault::Refused)
        })
    }

    /// The current session's number and the frames it received: the count grows when
    /// the screen changes, and a new session (a new number) starts it again.
    pub(crate) fn changes(&self) -> Result<(u64, u64), WireError> {
        self.with(|_, s| Ok((s.id, s.frames.count().map_err(Fault::Gone)?)))
    }

    /// Performs `action` (validated, not touch) and returns once mutter took its events.
    pub(crate) fn perform(&self, action: &Action) -> Result<(), WireError> {
        self.with(|rt, session| super::perform(&mut Blocking { rt, session }, action))
    }

    /// Where the agent last put the pointer (mutter does not say where it is).
    pub(crate) fn cursor(&self) -> Result<Point, WireError> {
        self.with(|_, s| Ok(*s.pointer.lock().unwrap_or_else(PoisonError::into_inner)))
    }
}

impl From<zbus::Error> for Fault {
    fn from(e: zbus::Error) -> Self {
        Self::Gone(format!("mutter: {e}"))
    }
}

/// One remote-desktop session with its screen cast.
struct Session {
    /// Tells this agent's sessions apart.
    id: u64,
    remote: zbus::Proxy<'static>,
    /// The stream's object path, which absolute pointer motion names.
    stream: OwnedObjectPath,
    node: u32,
    frames: Arc<Frames>,
    /// Cleared when mutter says the session closed.
    open: Arc<AtomicBool>,
    /// Where the agent last put the pointer.
    pointer: Mutex<Point>,
    /// When the agent last pressed or released a button (see [`FOCUS_SETTLE`]).
    clicked: Mutex<Option<Instant>>,
    /// The text the session offers as the clipboard, for pastes.
    selection: Arc<Mutex<Selection>>,
    /// Keeps the watchers of `Closed` and `SelectionTransfer` running.
    _watchers: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("stream", &self.stream)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for watcher in &self._watchers {
            watcher.abort();
        }
    }
}

/// A proxy that reads properties when asked (mutter sets the stream's as it starts).
async fn proxy(
    conn: &zbus::Connection,
    destination: &'static str,
    path: OwnedObjectPath,
    interface: &'static str,
) -> zbus::Result<zbus::Proxy<'static>> {
    zbus::proxy::Builder::new(conn)
        .destination(destination)?
        .path(path)?
        .interface(interface)?
        .cache_properties(CacheProperties::No)
        .build()
        .await
}

async fn timed<T>(what: &str, f: impl Future<Output = zbus::Result<T>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: mutter did not answer within {} s",
            CALL_TIMEOUT.as_secs()
        )),
    }
}

impl Session {
    /// Creates and starts a session on the session bus, and connects to its frames.
    async fn open() -> Result<Self, String> {
        use futures::StreamExt as _;
        let conn = timed("the session's D-Bus", zbus::Connection::session()).await?;
        let path = |p: &str| OwnedObjectPath::try_from(p.to_owned()).map_err(|e| e.to_string());
        let manager = |dest, p, iface| {
            let conn = conn.clone();
            async move { timed(dest, proxy(&conn, dest, path(p)?, iface)).await }
        };
        let remote_desktop = manager(
            REMOTE_DESKTOP,
            "/org/gnome/Mutter/RemoteDesktop",
            REMOTE_DESKTOP,
        )
        .await?;
        let screen_cast = manager(SCREEN_CAST, "/org/gnome/Mutter/ScreenCast", SCREEN_CAST).await?;
        let remote_path: OwnedObjectPath = timed(
            "RemoteDesktop.CreateSession",
            remote_desktop.call("CreateSession", &()),
        )
        .await?;
        let remote = timed(
            "the remote-desktop session",
            proxy(
                &conn,
                REMOTE_DESKTOP,
                remote_path,
                "org.gnome.Mutter.RemoteDesktop.Session",
            ),
        )
        .await?;
        let id: String = timed("SessionId", remote.get_property("SessionId")).await?;
        let linked = HashMap::from([("remote-desktop-session-id", Value::from(id))]);
        let cast_path: OwnedObjectPath = timed(
            "ScreenCast.CreateSession",
            screen_cast.call("CreateSession", &(linked,)),
        )
        .await?;
        let cast = timed(
            "the screen-cast session",
            proxy(
                &conn,
                SCREEN_CAST,
                cast_path,
                "org.gnome.Mutter.ScreenCast.Session",
            ),
        )
        .await?;
        // The primary monitor, without the cursor (as X11 grabs show the screen).
        let options = HashMap::from([("cursor-mode", Value::U32(0))]);
        let stream: OwnedObjectPath = timed(
            "ScreenCast.Session.RecordMonitor",
            cast.call("RecordMonitor", &("", options)),
        )
        .await?;
        let stream_proxy = timed(
            "the screen-cast stream",
            proxy(
                &conn,
                SCREEN_CAST,
                stream.clone(),
                "org.gnome.Mutter.ScreenCast.Stream",
            ),
        )
        .await?;
        let mut added = timed(
            "PipeWireStreamAdded",
            stream_proxy.receive_signal("PipeWireStreamAdded"),
        )
        .await?;
        let mut closed = timed("Closed", remote.receive_signal("Closed")).await?;
        timed(
            "RemoteDesktop.Session.Start",
            remote.call::<_, _, ()>("Start", &()),
        )
        .await?;
        let node: u32 = match tokio::time::timeout(CALL_TIMEOUT, added.next()).await {
            Ok(Some(message)) => message
                .body()
                .deserialize()
                .map_err(|e| format!("PipeWireStreamAdded: {e}"))?,
            _ => return Err("mutter started the session but announced no PipeWire stream".into()),
        };
        let frames = Frames::start(node).map_err(|e| e.to_string())?;

        let open = Arc::new(AtomicBool::new(true));
        let closed_watch = tokio::spawn({
            let open = open.clone();
            async move {
                closed.next().await;
                open.store(false, Ordering::Release);
            }
        });
        let selection = Arc::new(Mutex::new(Selection::default()));
        let transfers = serve_selection(&remote, selection.clone()).await?;
        static SESSIONS: AtomicU64 = AtomicU64::new(0);
        let session = Self {
            id: SESSIONS.fetch_add(1, Ordering::Relaxed),
            remote,
            stream,
            node,
            frames: Arc::new(frames),
            open,
            pointer: Mutex::new(Point::new(0, 0)),
            clicked: Mutex::new(None),
            selection,
            _watchers: vec![closed_watch, transfers],
        };
        session
            .keysym(keysym::SHIFT, true)
            .await
            .and(session.keysym(keysym::SHIFT, false).await)
            .and(
                session
                    .call("NotifyPointerMotionRelative", &(0.0f64, 0.0f64))
                    .await,
            )
            .map_err(|e| format!("{e:?}"))?;
        tokio::time::sleep(WARM_UP).await;
        Ok(session)
    }

    fn alive(&self) -> bool {
        self.open.load(Ordering::Acquire) && self.frames.count().is_ok()
    }

    /// The monitor's size, from the first frame.
    fn size(&self) -> Result<(u32, u32), Fault> {
        self.frames
            .with_latest(FIRST_FRAME, |l| (l.width, l.height))
            .map_err(Fault::Gone)
    }

    async fn call(
        &self,
        method: &str,
        args: &(impl serde::Serialize + zbus::zvariant::DynamicType),
    ) -> Result<(), Fault> {
        match tokio::time::timeout(CALL_TIMEOUT, self.remote.call::<_, _, ()>(method, args)).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(Fault::Gone(format!(
                "mutter did not answer {method} within {} s",
                CALL_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn keysym(&self, keysym: u32, pressed: bool) -> Result<(), Fault> {
        self.focus_settled().await;
        self.call("NotifyKeyboardKeysym", &(keysym, pressed)).await
    }

    /// Waits until [`FOCUS_SETTLE`] passed since the last button.
    async fn focus_settled(&self) {
        let clicked = self
            .clicked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(wait) = clicked.and_then(|at| FOCUS_SETTLE.checked_sub(at.elapsed())) {
            tokio::time::sleep(wait).await;
        }
    }

    /// Presses and releases the keysym of each of `chars`, all calls sent before the first
    /// answer: one connection's messages reach mutter in order, and it handles them in
    /// order, so the keys keep theirs while the round trips overlap (one call at a time
    /// cost 2.4 ms a key under GNOME Shell).
    async fn keysyms(&self, chars: &str) -> Result<(), Fault> {
        self.focus_settled().await;
        let events: Vec<(u32, bool)> = chars
            .chars()
            .map(keysym::of_char)
            .flat_map(|sym| [(sym, true), (sym, false)])
            .collect();
        let calls = events
            .iter()
            .map(|event| self.remote.call::<_, _, ()>("NotifyKeyboardKeysym", event));
        match tokio::time::timeout(CALL_TIMEOUT, futures::future::try_join_all(calls)).await {
            Ok(result) => result.map(drop).map_err(Fault::from),
            Err(_) => Err(Fault::Gone(format!(
                "mutter did not take {} keys within {} s",
                events.len(),
                CALL_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn button(&self, button: MouseButton, pressed: bool) -> Result<(), Fault> {
        let code = super::evdev_button(button) as i32;
        self.call("NotifyPointerButton", &(code, pressed)).await?;
        *self.clicked.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        Ok(())
    }

    /// Moves the pointer to `to`, which must be on the monitor.
    async fn motion(&self, to: Point) -> Result<(), Fault> {
        let (width, height) = self.size()?;
        super::on_screen(to, width, height)?;
        self.call(
            "NotifyPointerMotionAbsolute",
            &(self.stream.as_str(), f64::from(to.x), f64::from(to.y)),
        )
        .await?;
        *self.pointer.lock().unwrap_or_else(PoisonError::into_inner) = to;
        Ok(())
    }

    /// Types `text`: as keysyms up to the first character that not every layout types
    /// (mutter drops keysyms its layout lacks), and the rest as one paste of the
    /// session's clipboard, so that nothing typed after it can overtake it.
    async fn type_text(&self, text: &str) -> Result<(), Fault> {
        let typed = text.find(|c| !keysym::typeable(c)).unwrap_or(text.len());
        self.keysyms(&text[..typed]).await?;
        if typed < text.len() {
            self.paste(&text[typed..]).await?;
        }
        Ok(())
    }

    /// Offers `text` as the clipboard and presses Ctrl+V; returns once the application
    /// read it (or after 2 s) and had [`PASTE_SETTLE`] to insert it, so that the next
    /// keys or paste do not overtake it.
    async fn paste(&self, text: &str) -> Result<(), Fault> {
        let served = {
            let mut selection = self
                .selection
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            text.clone_into(&mut selection.text);
            selection.served
        };
        let types: Vec<&str> = TEXT_TYPES.to_vec();
        let options = HashMap::from([("mime-types", Value::from(types))]);
        self.call("SetSelection", &(options,)).await?;
        self.keysym(keysym::CONTROL, true).await?;
        self.keysym(u32::from('v'), true).await?;
        self.keysym(u32::from('v'), false).await?;
        self.keysym(keysym::CONTROL, false).await?;
        let deadline = Instant::now() + Duration::from_secs(2);
        while self
            .selection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .served
            == served
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(PASTE_SETTLE).await;
        Ok(())
    }
}

/// A session driven from the agent's threads: each event waits for mutter's answer.
struct Blocking<'a> {
    rt: &'a tokio::runtime::Runtime,
    session: &'a Session,
}

impl Injector for Blocking<'_> {
    fn motion(&mut self, to: Point) -> Result<(), Fault> {
        self.rt.block_on(self.session.motion(to))
    }

    fn button(&mut self, button: MouseButton, pressed: bool) -> Result<(), Fault> {
        self.rt.block_on(self.session.button(button, pressed))
    }

    fn scroll(&mut self, axis: ScrollAxis, steps: i32) -> Result<(), Fault> {
        // Axis 0 is vertical, 1 horizontal; positive steps scroll down and right.
        let axis: u32 = match axis {
            ScrollAxis::Vertical => 0,
            ScrollAxis::Horizontal => 1,
        };
        self.rt.block_on(
            self.session
                .call("NotifyPointerAxisDiscrete", &(axis, steps)),
        )
    }

    fn keysym(&mut self, sym: u32, pressed: bool) -> Result<(), Fault> {
        self.rt.block_on(self.session.keysym(sym, pressed))
    }

    fn text(&mut self, text: &str) -> Result<(), Fault> {
        self.rt.block_on(self.session.type_text(text))
    }

    fn pause(&mut self, pause: Duration) -> Result<(), Fault> {
        self.rt.block_on(tokio::time::sleep(pause));
        Ok(())
    }
}

/// The text a session offers as the clipboard.
#[derive(Debug, Default)]
struct Selection {
    text: String,
    /// Transfers answered so far.
    served: u64,
}

/// Enables the session's clipboard and answers mutter's requests for the text it holds
/// (`SelectionTransfer`): the text is written to the descriptor `SelectionWrite` gives.
/// Each transfer is counted (for [`Session::paste`]).
async fn serve_selection(
    remote: &zbus::Proxy<'static>,
    selection: Arc<Mutex<Selection>>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    use futures::StreamExt as _;
    let mut transfers = timed(
        "SelectionTransfer",
        remote.receive_signal("SelectionTransfer"),
    )
    .await?;
    let none: HashMap<&str, Value> = HashMap::new();
    timed(
        "EnableClipboard",
        remote.call::<_, _, ()>("EnableClipboard", &(none,)),
    )
    .await?;
    let remote = remote.clone();
    Ok(tokio::spawn(async move {
        while let Some(message) = transfers.next().await {
            let Ok((_mime, serial)) = message.body().deserialize::<(String, u32)>() else {
                continue;
            };
            let text = selection
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .text
                .clone();
            let written = async {
                let fd: zbus::zvariant::OwnedFd = remote.call("SelectionWrite", &(serial,)).await?;
                let mut file = std::fs::File::from(std::os::fd::OwnedFd::from(fd));
                Ok::<bool, zbus::Error>(file.write_all(text.as_bytes()).is_ok())
            }
            .await;
            let ok = written.as_ref().is_ok_and(|&ok| ok);
            let _ = remote
                .call::<_, _, ()>("SelectionWriteDone", &(serial, ok))
                .await;
            selection
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .served += 1;
        }
    }))
}

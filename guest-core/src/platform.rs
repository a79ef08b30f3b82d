//! What a guest's platform plugs into the core: one trait per capability (input, screen,
//! screen changes, UI tree, windows or apps, clipboard, settings, a phone's own state) and [`Platform`], which names a platform's
//! implementations and makes them. The core owns everything around them: it checks requests
//! before they reach a capability, serialises each blocking one on a thread of its own, and
//! turns their panics into errors.
//!
//! Input, screen, windows and clipboard are blocking: display servers and device tools
//! answer one call at a time, and [`Guest`](crate::Guest) runs each on a blocking thread with
//! the capability to itself, waiting a bounded time for its turn. UI trees and settings are
//! async: a tree walk is thousands of concurrent calls, and settings are read by running a
//! program. A platform that lacks a capability plugs in [`Lacking`], which answers every
//! call `Unsupported`.

use crate::encode::FrameEncoder;
use pincer_shared::WireError;
use pincer_shared::action::{Action, Point};
use pincer_shared::android::{AndroidAnswer, AndroidQuery, AndroidSetup};
use pincer_shared::observe::{
    InputKind, ScreenInfo, ScreenshotMeta, ScreenshotRequest, TreeRequest,
};
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use pincer_shared::tree::UiTree;
use std::fmt::Debug;
use std::future::Future;

/// A platform the guest core runs on: which implementation serves each capability, and how
/// to make them. The core makes each once when the guest starts ([`Platform::windows`]
/// twice); they connect to whatever they use on first need and reconnect on their own.
pub trait Platform: Send + Sync + 'static {
    /// Mouse and keyboard, or touch.
    type Input: Input;
    /// The screen's pixels and geometry.
    type Screen: Screen;
    /// Whether the screen changed, for video streams.
    type Damage: Damage;
    /// The desktop's input as it happens, for recording.
    type InputLog: InputLog;
    /// Top-level windows, or apps on a phone.
    type Windows: Windows;
    /// The clipboard's text.
    type Clipboard: Clipboard;
    /// The UI tree.
    type Accessibility: Accessibility;
    /// Settings read by name.
    type Settings: Settings;
    /// A device's own state and setup (Android's settings, content providers, apps).
    type Device: Device;

    /// The platform, as the handshake reports it.
    const NAME: pincer_shared::Platform;
    /// The capabilities the handshake lists
    /// ([`capability`](pincer_shared::message::capability) names), in order; the core adds
    /// `setup` unless the guest is read-only.
    const CAPABILITIES: &'static [&'static str];
    /// Those of [`CAPABILITIES`](Self::CAPABILITIES) that work only where the screen does:
    /// the handshake leaves them out while the screen refuses its display as `Unsupported`
    /// (a Wayland session's Xwayland on Linux), and names the reason as the screen's
    /// capture.
    const SCREEN_CAPABILITIES: &'static [&'static str] = &[];
    /// Those of [`CAPABILITIES`](Self::CAPABILITIES) that the screen's capture route
    /// (`ScreenInfo::capture`) cannot serve; the handshake leaves them out.
    fn withheld(_capture: &str) -> &'static [&'static str] {
        &[]
    }
    /// Whether the platform can run API tools in a sandbox (bubblewrap); the others answer
    /// the tool class `Unsupported`.
    const SANDBOXED_TOOLS: bool = false;

    /// The operating system as people name it, for the handshake.
    fn os(&self) -> String;
    /// Makes the input injector.
    fn input(&self) -> Self::Input;
    /// Makes the screen capture.
    fn screen(&self) -> Self::Screen;
    /// Makes the screen change tracker, which every video stream shares.
    fn damage(&self) -> Self::Damage;
    /// Makes the input log, which every input stream shares.
    fn input_log(&self) -> Self::InputLog;
    /// Makes a window (or app) reader. Called twice: window operations wait for their
    /// effect, so they get one of their own and probes never queue behind them.
    fn windows(&self) -> Self::Windows;
    /// Makes the clipboard.
    fn clipboard(&self) -> Self::Clipboard;
    /// Makes the UI-tree reader.
    fn accessibility(&self) -> Self::Accessibility;
    /// Makes the settings reader.
    fn settings(&self) -> Self::Settings;
    /// Makes the device's own reader and changer.
    fn device(&self) -> Self::Device;
}

/// Input injection. Actions arrive validated ([`Action::validate`]).
pub trait Input: Send + Debug + 'static {
    /// Performs `action` and returns once its events have been delivered.
    fn perform(&mut self, action: &Action) -> Result<(), WireError>;
    /// Where the pointer is, in screen pixels.
    fn cursor(&mut self) -> Result<Point, WireError>;
}

/// Screen capture.
pub trait Screen: Send + Debug + 'static {
    /// Size, monitors and capture backend of the screen.
    fn info(&mut self) -> Result<ScreenInfo, WireError>;
    /// Grabs what `req` asks for, which has passed
    /// [`check_request`](crate::encode::check_request), and encodes it: as a raw frame
    /// through `encoder` ([`FrameEncoder::screenshot`]), or in some other way that gives the
    /// format `req` asks for. Returns the reply's metadata and body.
    fn capture(
        &mut self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError>;
}

/// How often the screen changed (on X11, what the DAMAGE extension reports), so that video
/// streams grab a frame only after something drew.
pub trait Damage: Send + Debug + 'static {
    /// A count that grows whenever the screen changed since the previous call; it starts
    /// (and starts watching) on the first call. Never blocks for a change.
    fn changes(&mut self) -> Result<u64, WireError>;
}

/// The input the desktop gets (from a person, or anything else), for recording
/// demonstrations.
pub trait InputLog: Send + Debug + 'static {
    /// The input events since the previous call, oldest first; watching starts on the
    /// first call. Never blocks for an event.
    fn drain(&mut self) -> Result<Vec<InputKind>, WireError>;
}

/// Top-level windows (on a phone: apps and their activities).
pub trait Windows: Send + Debug + 'static {
    /// The focused window (the foreground app), if any.
    fn active(&mut self) -> Result<Option<WindowInfo>, WireError>;
    /// Every top-level window, bottom to top.
    fn list(&mut self) -> Result<Vec<WindowInfo>, WireError>;
    /// Applies `op` to window `id` and returns once the change shows: `NotFound` for an id
    /// that names no window.
    fn apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError>;
}

/// The clipboard, as text.
pub trait Clipboard: Send + Debug + 'static {
    /// Its text; `None` when it is empty or holds no text.
    fn get_text(&mut self) -> Result<Option<String>, WireError>;
    /// Puts `text` on it, where it stays after the call returns.
    fn set_text(&mut self, text: &str) -> Result<(), WireError>;
}

/// The UI tree (AT-SPI on Linux, the accessibility service on Android).
pub trait Accessibility: Send + Debug + 'static {
    /// The tree `req` asks for. `active_pid` is the process of the active window, which
    /// [`TreeScope::ActiveApp`](pincer_shared::observe::TreeScope::ActiveApp) selects.
    fn tree(
        &mut self,
        req: &TreeRequest,
        active_pid: Option<u32>,
    ) -> impl Future<Output = Result<UiTree, WireError>> + Send;
}

/// Settings read by schema (or namespace) and key, for the settings probe
/// ([`Probe::Setting`](pincer_shared::probe::Probe::Setting)): GSettings on Linux, Android's
/// `settings` namespaces.
pub trait Settings: Send + Sync + Debug + 'static {
    /// The value of `key` in `schema` as the platform prints it; `None` when either is
    /// unknown.
    fn get(
        &self,
        schema: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<String>, WireError>> + Send;
}

/// A phone's own state and setup, read and changed with the device's own commands
/// ([`AndroidQuery`], [`AndroidSetup`]): arguments arrive validated.
pub trait Device: Send + Sync + Debug + 'static {
    /// Reads `query`.
    fn query(
        &self,
        query: &AndroidQuery,
    ) -> impl Future<Output = Result<AndroidAnswer, WireError>> + Send;
    /// Carries out `step`.
    fn setup(&self, step: &AndroidSetup) -> impl Future<Output = Result<(), WireError>> + Send;
}

/// A capability the platform does not have: every call answers `Unsupported`, naming it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lacking;

impl Lacking {
    fn refuse<T>(what: &str) -> Result<T, WireError> {
        Err(WireError::Unsupported {
            what: format!("{what}: this guest's platform has none"),
        })
    }
}

impl Input for Lacking {
    fn perform(&mut self, _: &Action) -> Result<(), WireError> {
        Self::refuse("input")
    }

    fn cursor(&mut self) -> Result<Point, WireError> {
        Self::refuse("a pointer")
    }
}

impl Screen for Lacking {
    fn info(&mut self) -> Result<ScreenInfo, WireError> {
        Self::refuse("a screen")
    }

    fn capture(
        &mut self,
        _: &ScreenshotRequest,
        _: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        Self::refuse("a screen")
    }
}

impl Damage for Lacking {
    fn changes(&mut self) -> Result<u64, WireError> {
        Self::refuse("screen change tracking (video)")
    }
}

impl InputLog for Lacking {
    fn drain(&mut self) -> Result<Vec<InputKind>, WireError> {
        Self::refuse("input recording")
    }
}

impl Windows for Lacking {
    fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        Self::refuse("windows")
    }

    fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        Self::refuse("windows")
    }

    fn apply(&mut self, _: u64, _: WindowOp) -> Result<(), WireError> {
        Self::refuse("windows")
    }
}

impl Clipboard for Lacking {
    fn get_text(&mut self) -> Result<Option<String>, WireError> {
        Self::refuse("a clipboard")
    }

    fn set_text(&mut self, _: &str) -> Result<(), WireError> {
        Self::refuse("a clipboard")
    }
}

impl Accessibility for Lacking {
    async fn tree(&mut self, _: &TreeRequest, _: Option<u32>) -> Result<UiTree, WireError> {
        Self::refuse("a UI tree")
    }
}

impl Device for Lacking {
    async fn query(&self, _: &AndroidQuery) -> Result<AndroidAnswer, WireError> {
        Self::refuse("Android state")
    }

    async fn setup(&self, _: &AndroidSetup) -> Result<(), WireError> {
        Self::refuse("Android setup")
    }
}

impl Settings for Lacking {
    async fn get(&self, _: &str, _: &str) -> Result<Option<String>, WireError> {
        Self::refuse("settings")
    }
}

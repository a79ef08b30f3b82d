//! Requests and replies. Each request travels on its own bidirectional stream as one frame
//! (see [`codec`](crate::codec)); some carry a bulk body after the header, and some replies
//! do.

use crate::action::{Action, Point};
use crate::observe::{
    InputEvent, InputRequest, ScreenInfo, ScreenshotMeta, ScreenshotRequest, TreeRequest,
    VideoFrame, VideoRequest,
};
use crate::probe::{FileStat, Probe, ProbeReply};
use crate::setup::{ExecOutput, Setup};
use crate::tool::ToolCall;
use crate::tree::UiTree;
use crate::version::ProtocolVersion;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Privilege classes. A guest grants classes per connection; agents reach only `Action`
/// (and the observations the harness hands them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RequestClass {
    /// Liveness (`Ping`): always allowed after authentication.
    Control,
    /// Input.
    Action,
    /// Screen, UI tree, cursor.
    Observe,
    /// Read-only state.
    Probe,
    /// Privileged writes and execution; refused by read-only guests.
    Setup,
    /// Typed API tools a task declares, run sandboxed without network as an unprivileged
    /// user ([`crate::tool`]); granted only by guests started with `--allow-tools` and
    /// never by read-only ones.
    Tool,
}

impl std::fmt::Display for RequestClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Control => "control",
            Self::Action => "action",
            Self::Observe => "observe",
            Self::Probe => "probe",
            Self::Setup => "setup",
            Self::Tool => "tool",
        })
    }
}

/// A request from the host to a guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Liveness check; answered with [`Response::Pong`].
    Ping,
    /// Inject input; answered with [`Response::Done`].
    Action(Action),
    /// Capture the screen; answered with [`Response::Screenshot`] and the image as body.
    Screenshot(ScreenshotRequest),
    /// Walk the accessibility tree; answered with [`Response::UiTree`].
    UiTree(TreeRequest),
    /// Screen geometry; answered with [`Response::ScreenInfo`].
    ScreenInfo,
    /// Pointer position; answered with [`Response::Cursor`].
    Cursor,
    /// One read-only probe; answered with [`Response::Probe`].
    Probe(Probe),
    /// Many probes in one round trip; answered with [`Response::Batch`], one result each.
    ///
    /// Shared (`Arc`, the same bytes on the wire as a list): a host sends the same probes
    /// step after step without copying them.
    Batch(Arc<[Probe]>),
    /// A file as a bulk body (for large files); answered with [`Response::File`] and the
    /// bytes as body.
    ReadFile {
        /// The file.
        path: String,
        /// Skip this many bytes.
        offset: u64,
        /// Send at most this many bytes (`None`: to the end).
        max_len: Option<u64>,
    },
    /// A privileged change; `WriteFile` carries the file as body.
    Setup(Setup),
    /// Stream the screen while it changes; answered with [`Response::VideoFrame`]s, each
    /// with its image as body, on the request's stream.
    Video(VideoRequest),
    /// Report the desktop's input (pointer buttons, keys) as it happens; answered with
    /// [`Response::InputEvents`] batches on the request's stream.
    Input(InputRequest),
    /// Run a task's API tool with typed arguments in the guest's sandbox; answered with
    /// [`Response::Exec`] (exit status and bounded output).
    Tool(Box<ToolCall>),
}

impl Request {
    /// The privilege class the request needs.
    pub fn class(&self) -> RequestClass {
        match self {
            Self::Ping => RequestClass::Control,
            Self::Action(_) => RequestClass::Action,
            Self::Screenshot(_)
            | Self::UiTree(_)
            | Self::ScreenInfo
            | Self::Cursor
            | Self::Video(_)
            | Self::Input(_) => RequestClass::Observe,
            // Commands run a program: they need the same trust as setup.
            Self::Probe(Probe::Command { .. }) => RequestClass::Setup,
            Self::Batch(probes) if probes.iter().any(|p| matches!(p, Probe::Command { .. })) => {
                RequestClass::Setup
            }
            Self::Probe(_) | Self::Batch(_) | Self::ReadFile { .. } => RequestClass::Probe,
            Self::Setup(_) => RequestClass::Setup,
            Self::Tool(_) => RequestClass::Tool,
        }
    }

    /// The first protocol version that carries this request. Every kind, and every probe and
    /// setup step, is listed with its version (no catch-all), so a new one does not compile
    /// until it is given its own.
    pub fn since(&self) -> ProtocolVersion {
        use ProtocolVersion::{V1, V3};
        match self {
            Self::Ping
            | Self::Action(_)
            | Self::Screenshot(_)
            | Self::UiTree(_)
            | Self::ScreenInfo
            | Self::Cursor
            | Self::ReadFile { .. } => V1,
            Self::Probe(p) => probe_since(p),
            // A batch needs the newest version any of its probes needs.
            Self::Batch(probes) => probes.iter().map(probe_since).max().unwrap_or(V1),
            Self::Setup(s) => setup_since(s),
            Self::Video(_) | Self::Input(_) | Self::Tool(_) => V3,
        }
    }

    /// A short name for logs and errors.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Ping => "ping",
            Self::Action(_) => "action",
            Self::Screenshot(_) => "screenshot",
            Self::UiTree(_) => "ui-tree",
            Self::ScreenInfo => "screen-info",
            Self::Cursor => "cursor",
            Self::Probe(_) => "probe",
            Self::Batch(_) => "batch",
            Self::ReadFile { .. } => "read-file",
            Self::Setup(_) => "setup",
            Self::Video(_) => "video",
            Self::Input(_) => "input",
            Self::Tool(_) => "tool",
        }
    }

    /// Whether a bulk body follows the header.
    pub fn has_body(&self) -> bool {
        matches!(self, Self::Setup(Setup::WriteFile { .. }))
    }
}

/// The first protocol version that carries this probe.
fn probe_since(p: &Probe) -> ProtocolVersion {
    match p {
        Probe::Stat { .. }
        | Probe::ReadFile { .. }
        | Probe::ListDir { .. }
        | Probe::Processes
        | Probe::ActiveWindow
        | Probe::Windows
        | Probe::Clipboard
        | Probe::Command { .. }
        | Probe::EnvVar { .. }
        | Probe::UiTree(_)
        | Probe::Setting { .. } => ProtocolVersion::V1,
        Probe::Android(_) => ProtocolVersion::V2,
    }
}

/// The first protocol version that carries this setup step.
fn setup_since(s: &Setup) -> ProtocolVersion {
    match s {
        Setup::WriteFile { .. }
        | Setup::Remove { .. }
        | Setup::MakeDir { .. }
        | Setup::Exec(_)
        | Setup::Launch { .. }
        | Setup::SetClipboard { .. }
        | Setup::Window { .. } => ProtocolVersion::V1,
        Setup::Android(_) => ProtocolVersion::V2,
    }
}

/// A reply from a guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Reply to `Ping`.
    Pong {
        /// Guest's monotonic clock in microseconds (for latency accounting).
        guest_us: u64,
    },
    /// The action or setup step finished.
    Done,
    /// Screenshot metadata; the image follows as body.
    Screenshot(ScreenshotMeta),
    /// The UI tree.
    UiTree(UiTree),
    /// Screen geometry.
    ScreenInfo(ScreenInfo),
    /// Pointer position.
    Cursor(Point),
    /// Answer to one probe.
    Probe(ProbeReply),
    /// Answers to a batch, in order; one failing probe does not fail the others.
    Batch(Vec<Result<ProbeReply, WireError>>),
    /// File metadata; `len` bytes of content follow as body.
    File {
        /// Metadata of the whole file.
        stat: FileStat,
        /// Bytes that follow.
        len: u64,
    },
    /// A program ran to completion.
    Exec(ExecOutput),
    /// A program was started.
    Launched {
        /// Its process id.
        pid: u32,
    },
    /// The request failed.
    Error(WireError),
    /// One frame of a video stream; the image follows as body.
    VideoFrame(VideoFrame),
    /// Input events of an input stream, in the order they happened (at most
    /// [`MAX_INPUT_BATCH`](crate::limits::MAX_INPUT_BATCH)).
    InputEvents(Vec<InputEvent>),
}

/// Why a guest could not do what was asked. Carried on the wire, so every variant says
/// enough for a person to act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum WireError {
    /// The request kind is not known to this guest (a newer host), or not available on it.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was not supported.
        what: String,
    },
    /// The request could not be decoded.
    #[error("malformed request: {reason}")]
    Malformed {
        /// What was wrong with it.
        reason: String,
    },
    /// A length exceeded a protocol limit.
    #[error("{what} of {got} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: String,
        /// The limit.
        limit: u64,
        /// The size received.
        got: u64,
    },
    /// A request arrived before the handshake completed.
    #[error("not authenticated: complete the handshake first")]
    Unauthenticated,
    /// The guest does not grant this class on this connection.
    #[error("{class} requests are disabled on this guest: {reason}")]
    Forbidden {
        /// The class refused.
        class: RequestClass,
        /// Why (for example "started with --read-only").
        reason: String,
    },
    /// The request is well-formed but its values are not usable.
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What was wrong.
        message: String,
    },
    /// A path does not exist.
    #[error("not found: {path}")]
    NotFound {
        /// The path.
        path: String,
    },
    /// The guest may not access a path.
    #[error("permission denied: {path}")]
    PermissionDenied {
        /// The path.
        path: String,
    },
    /// An I/O error on the guest.
    #[error("i/o error: {message}")]
    Io {
        /// The OS error text.
        message: String,
    },
    /// The display server is not reachable.
    #[error("display unavailable: {message}")]
    Display {
        /// What failed.
        message: String,
    },
    /// The accessibility bus is not reachable or an app misbehaved.
    #[error("accessibility unavailable: {message}")]
    Accessibility {
        /// What failed.
        message: String,
    },
    /// Input injection failed.
    #[error("input failed: {message}")]
    Input {
        /// What failed.
        message: String,
    },
    /// The operation did not finish in time.
    #[error("timed out after {after_ms} ms")]
    Timeout {
        /// How long the guest waited.
        after_ms: u64,
    },
    /// The guest is at a concurrency limit; try again.
    #[error("busy: {message}")]
    Busy {
        /// Which limit.
        message: String,
    },
    /// A bug in the guest.
    #[error("internal error: {message}")]
    Internal {
        /// Details.
        message: String,
    },
    /// The guest does not serve this (a path or an environment variable) by policy: its
    /// own keys and tokens never, and a `--read-only` guest only what its read roots allow.
    /// Added after the first release: older peers decode it as an unknown kind.
    #[error("refused {what}: {reason}")]
    Denied {
        /// What was asked for: the path as the host wrote it, or the variable.
        what: String,
        /// Which rule refused it, and how to allow it (if anything does).
        reason: String,
    },
}

impl WireError {
    /// An I/O error for `path`, mapped to `NotFound` / `PermissionDenied` where it is one.
    pub fn from_io(path: &str, e: &std::io::Error) -> Self {
        match e.kind() {
            std::io::ErrorKind::NotFound => Self::NotFound { path: path.into() },
            std::io::ErrorKind::PermissionDenied => Self::PermissionDenied { path: path.into() },
            _ => Self::Io {
                message: format!("{path}: {e}"),
            },
        }
    }
}

/// Well-known capability names a guest lists in its handshake. Strings, so that a host can
/// read the handshake of any guest version.
pub mod capability {
    /// Mouse and keyboard input.
    pub const INPUT: &str = "input";
    /// Touch gestures and system keys.
    pub const TOUCH: &str = "touch";
    /// Screenshots.
    pub const SCREENSHOT: &str = "screenshot";
    /// Accessibility tree.
    pub const UI_TREE: &str = "ui-tree";
    /// Read-only probes.
    pub const PROBE: &str = "probe";
    /// Window probes (active window, window list) and window setup operations.
    pub const WINDOW: &str = "window";
    /// Clipboard probe and setup.
    pub const CLIPBOARD: &str = "clipboard";
    /// Setup class (writes, exec, launch).
    pub const SETUP: &str = "setup";
    /// Video streams of the screen driven by its changes.
    pub const VIDEO: &str = "video";
    /// Streams of the desktop's input events (for recording people's demonstrations).
    pub const RECORD: &str = "record";
    /// API tools run sandboxed (`--allow-tools`).
    pub const TOOLS: &str = "tools";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn android_requests_need_protocol_v2_wherever_they_are() {
        use crate::android::{AndroidQuery, AndroidSetup};
        let q = Probe::Android(AndroidQuery::Foreground);
        assert_eq!(Request::Probe(q.clone()).since(), ProtocolVersion::V2);
        assert_eq!(
            Request::Batch(vec![Probe::Windows, q].into()).since(),
            ProtocolVersion::V2
        );
        let stop = Setup::Android(AndroidSetup::ForceStop {
            package: "com.x".into(),
        });
        assert_eq!(Request::Setup(stop.clone()).since(), ProtocolVersion::V2);
        assert_eq!(Request::Setup(stop).class(), RequestClass::Setup);
        assert_eq!(Request::Probe(Probe::Windows).since(), ProtocolVersion::V1);
        // Android probes read state: read-only guests serve them.
        assert_eq!(
            Request::Probe(Probe::Android(AndroidQuery::Battery)).class(),
            RequestClass::Probe
        );
    }

    #[test]
    fn tools_are_their_own_class_on_protocol_v3() {
        use crate::tool::{Sandbox, ToolCall, ToolSpec};
        let call = ToolCall {
            spec: ToolSpec {
                name: "t".into(),
                description: String::new(),
                params: vec![],
                argv: vec!["/usr/bin/true".into()],
                sandbox: Sandbox::default(),
                timeout_ms: 1000,
            },
            args: Default::default(),
        };
        let req = Request::Tool(Box::new(call));
        assert_eq!(req.class(), RequestClass::Tool);
        assert_eq!(req.since(), ProtocolVersion::V3);
        assert_eq!(req.kind_name(), "tool");
        assert_eq!(RequestClass::Tool.to_string(), "tool");
    }

    #[test]
    fn command_probes_need_setup_trust() {
        let cmd = Probe::Command {
            argv: vec!["true".into()],
            timeout_ms: 1000,
            max_output: 10,
        };
        assert_eq!(Request::Probe(cmd.clone()).class(), RequestClass::Setup);
        assert_eq!(
            Request::Batch([Probe::Processes, cmd].into()).class(),
            RequestClass::Setup
        );
        assert_eq!(
            Request::Batch([Probe::Processes].into()).class(),
            RequestClass::Probe
        );
        assert_eq!(
            Request::action_click_for_test().class(),
            RequestClass::Action
        );
    }

    #[test]
    fn video_is_observed_on_protocol_v3_and_garbage_is_refused_by_name() {
        use crate::observe::{ImageFormat, VideoRequest};
        let ok = VideoRequest {
            max_fps: 30,
            format: ImageFormat::Jpeg { quality: 80 },
            max_size: None,
            duration_ms: 1000,
        };
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(Request::Video(ok).class(), RequestClass::Observe);
        assert_eq!(Request::Video(ok).since(), ProtocolVersion::V3);
        for (bad, names) in [
            (VideoRequest { max_fps: 0, ..ok }, "1 to 60"),
            (
                VideoRequest {
                    max_fps: 1000,
                    ..ok
                },
                "1000 frames",
            ),
            (
                VideoRequest {
                    duration_ms: 0,
                    ..ok
                },
                "0 ms",
            ),
            (
                VideoRequest {
                    format: ImageFormat::Png,
                    ..ok
                },
                "JPEG or raw",
            ),
        ] {
            let why = bad.validate().unwrap_err();
            assert!(why.contains(names), "{why}");
        }
    }

    #[test]
    fn wire_errors_keep_their_numbers() {
        // postcard writes the variant index first, and peers of other builds read it: new
        // kinds go at the end, and none moves.
        let index = |e: WireError| postcard::to_stdvec(&e).unwrap()[0];
        let text = String::new;
        assert_eq!(index(WireError::Unsupported { what: text() }), 0);
        assert_eq!(index(WireError::Unauthenticated), 3);
        assert_eq!(index(WireError::PermissionDenied { path: text() }), 7);
        assert_eq!(index(WireError::Busy { message: text() }), 13);
        assert_eq!(index(WireError::Internal { message: text() }), 14);
        assert_eq!(
            index(WireError::Denied {
                what: text(),
                reason: text()
            }),
            15
        );
    }

    impl Request {
        fn action_click_for_test() -> Self {
            Self::Action(Action::click(1, 2))
        }
    }
}

//! The guest: how it was started, what its handshake says about it, and one dispatcher over
//! every request kind. Requests are checked here (privilege class, action arguments,
//! screenshot formats) before anything of the platform is touched. Each blocking capability
//! runs one request at a time on a blocking thread of its own, connecting lazily and
//! reconnecting on its own, so a display or device that hangs or goes away fails only the
//! requests that need it.

use crate::body::{Reply, RequestBody};
use crate::budget::{BATCH_INLINE_BYTES, Budget, batch_full};
use crate::confine::Confinement;
use crate::encode::{self, FrameEncoder};
use crate::platform::{
    Accessibility as _, Clipboard as _, Device as _, Input as _, Platform, Screen as _,
    Settings as _, Windows as _,
};
use crate::record::{Events, Fanout};
use crate::subsystem::{Sub, in_thread};
use crate::video::{Frames, Shots, Sources};
use crate::{exec, fs, processes, tool};
use pincer_shared::android::AndroidAnswer;
use pincer_shared::handshake::GuestInfo;
use pincer_shared::identity::Token;
use pincer_shared::limits::{MAX_BATCH, MAX_INPUT_STREAMS, MAX_VIDEO_STREAMS};
use pincer_shared::message::capability;
use pincer_shared::observe::{ScreenInfo, TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::setup::{ExecRequest, Setup};
use pincer_shared::tree::UiTree;
use pincer_shared::{Request, RequestClass, Response, WireError};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How the guest was started.
#[derive(Debug, Clone)]
pub struct Config {
    /// Name reported in the handshake.
    pub name: String,
    /// Shared secret the host must prove.
    pub token: Token,
    /// Refuse the setup class and command probes (and API tools, whatever `allow_tools`).
    pub read_only: bool,
    /// Serve the tool class: a task's API tools, run sandboxed (`--allow-tools`).
    pub allow_tools: bool,
    /// What file and environment probes may read.
    pub confinement: Arc<Confinement>,
    /// List only processes of this session in process probes.
    pub process_session: Option<u32>,
}

/// Everything a guest serves, on platform `P`.
pub struct Guest<P: Platform> {
    pub(crate) config: Config,
    screen: Sub<Shots<P::Screen>>,
    /// How often the screen changed, for video streams; one tracker shared by every stream.
    damage: Sub<P::Damage>,
    /// Places for video streams; one more than these is answered `Busy`.
    video_slots: Arc<tokio::sync::Semaphore>,
    /// The desktop's input, for input streams; one log shared by every stream.
    input_log: Sub<Fanout<P::InputLog>>,
    /// Places for input streams; one more than these is answered `Busy`.
    input_slots: Arc<tokio::sync::Semaphore>,
    input: Sub<P::Input>,
    windows: Sub<P::Windows>,
    /// Window operations on their own connection: they wait up to two seconds for their
    /// effect, and probes (and active-app trees) should not queue behind them.
    window_ops: Sub<P::Windows>,
    clipboard: Sub<P::Clipboard>,
    accessibility: tokio::sync::Mutex<P::Accessibility>,
    settings: P::Settings,
    device: P::Device,
    /// The screen geometry last read, for handshakes that cannot wait for the display.
    last_screen: Arc<Mutex<Option<ScreenInfo>>>,
    started: Instant,
    os: String,
}

impl<P: Platform> fmt::Debug for Guest<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guest")
            .field("platform", &P::NAME)
            .field("config", &self.config)
            .field("os", &self.os)
            .finish_non_exhaustive()
    }
}

/// How long a handshake waits for fresh screen geometry before it sends the last known one.
/// Hosts give the whole handshake 3 s, and a long capture or a hung X server must not lock
/// out a host that only wants to ping.
const HANDSHAKE_SCREEN_WAIT: Duration = Duration::from_millis(250);

impl<P: Platform> Guest<P> {
    /// A guest started as `config` says, serving `platform`'s capabilities. Connects to
    /// nothing yet.
    pub fn new(config: Config, platform: &P) -> Self {
        let shots = Shots {
            screen: platform.screen(),
            encoder: FrameEncoder::default(),
        };
        Self {
            screen: Sub::new("screen capture", shots),
            damage: Sub::new("screen change tracker", platform.damage()),
            video_slots: Arc::new(tokio::sync::Semaphore::new(MAX_VIDEO_STREAMS)),
            input_log: Sub::new("input log", Fanout::new(platform.input_log())),
            input_slots: Arc::new(tokio::sync::Semaphore::new(MAX_INPUT_STREAMS)),
            input: Sub::new("input injector", platform.input()),
            windows: Sub::new("window reader", platform.windows()),
            window_ops: Sub::new("window controller", platform.windows()),
            clipboard: Sub::new("clipboard", platform.clipboard()),
            accessibility: tokio::sync::Mutex::new(platform.accessibility()),
            settings: platform.settings(),
            device: platform.device(),
            last_screen: Arc::default(),
            started: Instant::now(),
            os: platform.os(),
            config,
        }
    }

    /// Screen geometry now; remembered for handshakes.
    async fn screen_info(&self) -> Result<ScreenInfo, WireError> {
        let last = self.last_screen.clone();
        self.screen
            .run(move |s| {
                let info = s.screen.info()?;
                *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(info.clone());
                Ok(info)
            })
            .await
    }

    /// The description sent in the handshake. Answers within [`HANDSHAKE_SCREEN_WAIT`]
    /// whatever the display does: with the last known geometry (or none) if the screen is
    /// busy or hung; a read that was started goes on and refreshes it for the next host.
    pub async fn info(&self) -> GuestInfo {
        let mut refused = false;
        let screen = match tokio::time::timeout(HANDSHAKE_SCREEN_WAIT, self.screen_info()).await {
            Ok(Ok(info)) => info,
            Ok(Err(WireError::Unsupported { what })) => {
                refused = true;
                ScreenInfo {
                    capture: format!("refused: {what}"),
                    ..ScreenInfo::default()
                }
            }
            _ => self
                .last_screen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_default(),
        };
        let mut capabilities: Vec<String> = P::CAPABILITIES
            .iter()
            .filter(|c| !(refused && P::SCREEN_CAPABILITIES.contains(c)))
            .filter(|c| !P::withheld(&screen.capture).contains(c))
            .map(|&c| c.into())
            .collect();
        if !self.config.read_only {
            capabilities.push(capability::SETUP.into());
            if self.config.allow_tools && P::SANDBOXED_TOOLS {
                capabilities.push(capability::TOOLS.into());
            }
        }
        GuestInfo {
            version: 0,
            name: self.config.name.clone(),
            platform: P::NAME,
            os: self.os.clone(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            screen,
            capabilities,
            read_only: self.config.read_only,
            pid: std::process::id(),
        }
    }

    /// Refuses what this guest does not grant.
    fn check_class(&self, req: &Request) -> Result<(), WireError> {
        if req.class() == RequestClass::Tool {
            if !P::SANDBOXED_TOOLS {
                return Err(WireError::Unsupported {
                    what: format!("API tools on {} guests (no sandbox for them)", P::NAME),
                });
            }
            if self.config.read_only {
                return Err(WireError::Forbidden {
                    class: RequestClass::Tool,
                    reason: "this guest was started with --read-only, which refuses API tools \
                             even with --allow-tools"
                        .into(),
                });
            }
            if !self.config.allow_tools {
                return Err(WireError::Forbidden {
                    class: RequestClass::Tool,
                    reason: "API tools are opt-in: start the guest with --allow-tools \
                             (`pincer desktop up --allow-tools` for a local desktop)"
                        .into(),
                });
            }
        }
        if self.config.read_only && req.class() == RequestClass::Setup {
            return Err(WireError::Forbidden {
                class: RequestClass::Setup,
                reason: "this guest was started with --read-only (setup, exec and command probes are disabled)".into(),
            });
        }
        Ok(())
    }

    /// Handles one request of any kind; `body` is what followed its header (an upload's
    /// bytes). The reply may carry bytes of its own, streamed for bulk file reads.
    pub async fn handle(&self, req: Request, body: RequestBody<'_>) -> Reply {
        if let Err(e) = self.check_class(&req) {
            return Reply::Msg(Response::Error(e));
        }
        match req {
            Request::Ping => Reply::Msg(Response::Pong {
                guest_us: self.started.elapsed().as_micros() as u64,
            }),
            Request::Action(action) => {
                // Refused before the input subsystem is even asked for its turn.
                if let Err(message) = action.validate() {
                    return Reply::Msg(Response::Error(WireError::InvalidArgument { message }));
                }
                self.input
                    .run(move |i| i.perform(&action))
                    .await
                    .map(|()| Response::Done)
                    .into()
            }
            Request::Screenshot(req) => {
                if let Err(e) = encode::check_request(&req) {
                    return Reply::Msg(Response::Error(e));
                }
                match self
                    .screen
                    .run(move |s| s.screen.capture(&req, &mut s.encoder))
                    .await
                {
                    Ok((meta, bytes)) => Reply::Bytes(Response::Screenshot(meta), bytes),
                    Err(e) => Reply::Msg(Response::Error(e)),
                }
            }
            Request::ScreenInfo => self.screen_info().await.map(Response::ScreenInfo).into(),
            Request::Cursor => self
                .input
                .run(|i| i.cursor())
                .await
                .map(Response::Cursor)
                .into(),
            Request::UiTree(req) => self.tree(&req).await.map(Response::UiTree).into(),
            Request::Probe(p) => self.probe(p, None).await.map(Response::Probe).into(),
            Request::Batch(probes) => {
                if probes.len() > MAX_BATCH {
                    return Reply::Msg(Response::Error(WireError::TooLarge {
                        what: "batch".into(),
                        limit: MAX_BATCH as u64,
                        got: probes.len() as u64,
                    }));
                }
                let budget = Arc::new(Budget::new(BATCH_INLINE_BYTES));
                let results = futures::future::join_all(
                    probes
                        .iter()
                        .map(|p| self.probe(p.clone(), Some(budget.clone()))),
                )
                .await;
                Reply::Msg(Response::Batch(results))
            }
            Request::ReadFile {
                path,
                offset,
                max_len,
            } => {
                let c = self.config.confinement.clone();
                in_thread(move || fs::bulk_read(&c, &path, offset, max_len))
                    .await
                    .unwrap_or_else(|e| Reply::Msg(Response::Error(e)))
            }
            Request::Setup(s) => self.setup(s, body).await.into(),
            Request::Tool(call) => tool::run(&call).await.map(Response::Exec).into(),
            Request::Video(req) => {
                if let Err(message) = req.validate() {
                    return Reply::Msg(Response::Error(WireError::InvalidArgument { message }));
                }
                if let Err(e) = encode::check_request(&req.frame()) {
                    return Reply::Msg(Response::Error(e));
                }
                let Ok(slot) = self.video_slots.clone().try_acquire_owned() else {
                    return Reply::Msg(Response::Error(WireError::Busy {
                        message: format!(
                            "this guest already serves {MAX_VIDEO_STREAMS} video streams; \
                             stop one, or wait until one ends"
                        ),
                    }));
                };
                let sources = Sources {
                    screen: self.screen.clone(),
                    damage: self.damage.clone(),
                    started: self.started,
                };
                Reply::Frames(Frames::start(req, sources, slot))
            }
            Request::Input(req) => {
                if let Err(message) = req.validate() {
                    return Reply::Msg(Response::Error(WireError::InvalidArgument { message }));
                }
                let Ok(slot) = self.input_slots.clone().try_acquire_owned() else {
                    return Reply::Msg(Response::Error(WireError::Busy {
                        message: format!(
                            "this guest already serves {MAX_INPUT_STREAMS} input streams; \
                             stop one, or wait until one ends"
                        ),
                    }));
                };
                Reply::Events(Events::start(
                    req,
                    self.input_log.clone(),
                    self.started,
                    slot,
                ))
            }
        }
    }

    /// The UI tree; for `ActiveApp`, of the active window's process.
    async fn tree(&self, req: &TreeRequest) -> Result<UiTree, WireError> {
        let pid = if req.scope == TreeScope::ActiveApp {
            self.windows
                .run(|w| w.active())
                .await
                .ok()
                .flatten()
                .and_then(|w| w.pid)
        } else {
            None
        };
        self.accessibility.lock().await.tree(req, pid).await
    }

    /// Runs a probe. In a batch, the file and command output its reply carries inline comes
    /// out of the batch's `budget`.
    async fn probe(&self, p: Probe, budget: Option<Arc<Budget>>) -> Result<ProbeReply, WireError> {
        let c = self.config.confinement.clone();
        match p {
            Probe::Stat { path } => {
                in_thread(move || fs::stat(&c, &path).map(ProbeReply::Stat)).await
            }
            Probe::ReadFile { path, max_len } => {
                in_thread(move || {
                    fs::read_file(&c, &path, max_len, budget.as_deref()).map(ProbeReply::File)
                })
                .await
            }
            Probe::ListDir { path } => {
                in_thread(move || fs::list_dir(&c, &path).map(ProbeReply::Dir)).await
            }
            Probe::Processes => {
                let session = self.config.process_session;
                in_thread(move || processes::processes(session).map(ProbeReply::Processes)).await
            }
            Probe::ActiveWindow => self
                .windows
                .run(|w| w.active())
                .await
                .map(ProbeReply::ActiveWindow),
            Probe::Windows => self
                .windows
                .run(|w| w.list())
                .await
                .map(ProbeReply::Windows),
            Probe::Clipboard => self
                .clipboard
                .run(|c| c.get_text())
                .await
                .map(ProbeReply::Clipboard),
            Probe::Command {
                argv,
                timeout_ms,
                max_output,
            } => {
                if self.config.read_only {
                    return Err(WireError::Forbidden {
                        class: RequestClass::Setup,
                        reason:
                            "command probes run programs; this guest was started with --read-only"
                                .into(),
                    });
                }
                let mut req = ExecRequest::new(argv);
                req.timeout_ms = timeout_ms;
                req.max_output = max_output;
                let out = exec::run(&req).await?;
                let size = (out.stdout.len() + out.stderr.len()) as u64;
                if budget.is_some_and(|b| !b.reserve(size)) {
                    return Err(batch_full(
                        &format!("the output of {}", req.argv.join(" ")),
                        size,
                    ));
                }
                Ok(ProbeReply::Command(out))
            }
            Probe::EnvVar { name } => {
                c.env_var(&name)?;
                Ok(ProbeReply::EnvVar(std::env::var(name).ok()))
            }
            Probe::UiTree(req) => self
                .tree(&req)
                .await
                .map(|t| ProbeReply::UiTree(Box::new(t))),
            Probe::Setting { schema, key } => self
                .settings
                .get(&schema, &key)
                .await
                .map(ProbeReply::Setting),
            Probe::Android(q) => {
                q.validate()
                    .map_err(|message| WireError::InvalidArgument { message })?;
                let answer = self.device.query(&q).await?;
                if let (Some(b), AndroidAnswer::Rows(rows)) = (&budget, &answer) {
                    let size: usize = rows
                        .iter()
                        .flat_map(|r| r.iter())
                        .map(|(k, v)| k.len() + v.as_ref().map_or(0, String::len))
                        .sum();
                    if !b.reserve(size as u64) {
                        return Err(batch_full("content rows", size as u64));
                    }
                }
                Ok(ProbeReply::Android(answer))
            }
        }
    }

    /// Runs a setup request; an upload (`WriteFile`) reads its content from `body`.
    async fn setup(&self, s: Setup, body: RequestBody<'_>) -> Result<Response, WireError> {
        match s {
            Setup::WriteFile {
                path,
                mode,
                create_dirs,
                append,
            } => fs::receive(body, &path, mode, create_dirs, append)
                .await
                .map(|()| Response::Done),
            Setup::Remove { path, recursive } => {
                in_thread(move || fs::remove(&path, recursive).map(|()| Response::Done)).await
            }
            Setup::MakeDir { path } => {
                in_thread(move || fs::make_dir(&path).map(|()| Response::Done)).await
            }
            Setup::Exec(req) => exec::run(&req).await.map(Response::Exec),
            Setup::Launch { argv, cwd, env } => {
                exec::launch(&argv, cwd.as_deref(), &env).map(|pid| Response::Launched { pid })
            }
            Setup::SetClipboard { text } => self
                .clipboard
                .run(move |c| c.set_text(&text))
                .await
                .map(|()| Response::Done),
            Setup::Window { id, op } => self
                .window_ops
                .run(move |w| w.apply(id, op))
                .await
                .map(|()| Response::Done),
            Setup::Android(step) => {
                step.validate()
                    .map_err(|message| WireError::InvalidArgument { message })?;
                self.device.setup(&step).await.map(|()| Response::Done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Fake, config, wait_for};
    use pincer_shared::action::{Action, MouseButton};
    use pincer_shared::limits::{MAX_INLINE_FILE, MAX_RESPONSE_HEADER, MAX_VIDEO_DURATION_MS};
    use pincer_shared::setup::WindowOp;

    fn guest(read_only: bool) -> Guest<Fake> {
        Guest::new(config(read_only), &Fake::default())
    }

    /// A request without a body, answered without one.
    async fn ask<P: Platform>(guest: &Guest<P>, req: Request) -> Response {
        match guest.handle(req, RequestBody::none()).await {
            Reply::Msg(r) => r,
            other => panic!("unexpected body with {other:?}"),
        }
    }

    #[test]
    fn read_only_guests_refuse_window_operations_but_list_windows() {
        let guest = guest(true);
        let close = Request::Setup(Setup::Window {
            id: 1,
            op: WindowOp::Close,
        });
        assert!(matches!(
            guest.check_class(&close),
            Err(WireError::Forbidden {
                class: RequestClass::Setup,
                ..
            })
        ));
        assert_eq!(guest.check_class(&Request::Probe(Probe::Windows)), Ok(()));
        assert_eq!(
            guest.check_class(&Request::Batch([Probe::Windows].into())),
            Ok(())
        );
    }

    /// Video needs the platform's screen changes: without them the stream's one reply is
    /// `Unsupported`; garbage values are refused before any stream starts.
    #[tokio::test]
    async fn video_is_refused_without_screen_changes_and_for_garbage_values() {
        use pincer_shared::observe::{ImageFormat, VideoRequest};
        let guest = guest(false);
        let req = VideoRequest {
            max_fps: 10,
            format: ImageFormat::Jpeg { quality: 50 },
            max_size: None,
            duration_ms: 5000,
        };
        let Reply::Frames(mut frames) =
            guest.handle(Request::Video(req), RequestBody::none()).await
        else {
            panic!("a valid request starts a stream");
        };
        match frames.next().await {
            Some(Err(WireError::Unsupported { what })) => assert!(what.contains("video"), "{what}"),
            other => panic!("{other:?}"),
        }
        assert!(
            frames.next().await.is_none(),
            "the stream ends after its error"
        );
        for garbage in [
            VideoRequest { max_fps: 0, ..req },
            VideoRequest {
                format: ImageFormat::Jpeg { quality: 0 },
                ..req
            },
            VideoRequest {
                max_size: Some((0, 10)),
                ..req
            },
        ] {
            assert!(
                matches!(
                    ask(&guest, Request::Video(garbage)).await,
                    Response::Error(WireError::InvalidArgument { .. })
                ),
                "{garbage:?}"
            );
        }
    }

    /// Input streams need the platform's input log: without it the stream's one reply is
    /// `Unsupported`; a duration out of range is refused before any stream starts.
    #[tokio::test]
    async fn input_streams_are_refused_without_an_input_log_and_for_garbage_values() {
        use pincer_shared::observe::InputRequest;
        let guest = guest(false);
        let req = InputRequest { duration_ms: 5000 };
        let Reply::Events(mut events) =
            guest.handle(Request::Input(req), RequestBody::none()).await
        else {
            panic!("a valid request starts a stream");
        };
        match events.next().await {
            Some(Err(WireError::Unsupported { what })) => {
                assert!(what.contains("input recording"), "{what}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            events.next().await.is_none(),
            "the stream ends after its error"
        );
        for bad in [0, MAX_VIDEO_DURATION_MS + 1] {
            assert!(matches!(
                ask(&guest, Request::Input(InputRequest { duration_ms: bad })).await,
                Response::Error(WireError::InvalidArgument { .. })
            ));
        }
    }

    /// Invalid actions are refused by the core whatever the platform; a capability the
    /// platform lacks answers `Unsupported`.
    #[tokio::test]
    async fn invalid_actions_are_refused_before_the_platform_and_lacking_capabilities_are_unsupported()
     {
        let guest = guest(false);
        let click0 = Action::Click {
            at: None,
            button: MouseButton::Left,
            count: 0,
        };
        for action in [
            click0,
            Action::Hotkey { keys: vec![] },
            Action::Scroll {
                at: None,
                dx: 0,
                dy: 5000,
            },
        ] {
            let reply = ask(&guest, Request::Action(action.clone())).await;
            assert!(
                matches!(reply, Response::Error(WireError::InvalidArgument { .. })),
                "{action:?}: {reply:?}"
            );
        }
        for req in [
            Request::Action(Action::click(1, 1)),
            Request::Probe(Probe::Clipboard),
            Request::Probe(Probe::Setting {
                schema: "org.gnome.desktop.interface".into(),
                key: "color-scheme".into(),
            }),
        ] {
            let reply = ask(&guest, req.clone()).await;
            assert!(
                matches!(&reply, Response::Error(WireError::Unsupported { what }) if what.contains("has none")),
                "{req:?}: {reply:?}"
            );
        }
    }

    /// Files a batch reads at once must fit in one reply: those past the budget get their
    /// own `TooLarge`, the rest arrive, and the answer encodes under the response limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_big_reads_fails_only_the_reads_that_do_not_fit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![7u8; MAX_INLINE_FILE as usize]).unwrap();
        let path = big.to_str().unwrap().to_owned();
        let read = || Probe::ReadFile {
            path: path.clone(),
            max_len: u64::MAX,
        };
        let mut probes: Vec<Probe> = (0..10).map(|_| read()).collect();
        probes.push(Probe::Command {
            argv: vec!["echo".into(), "hi".into()],
            timeout_ms: 5_000,
            max_output: 1024,
        });
        let Response::Batch(results) = ask(&guest(false), Request::Batch(probes.into())).await
        else {
            panic!("no batch reply");
        };
        let fit = (BATCH_INLINE_BYTES / MAX_INLINE_FILE) as usize;
        let (read_ok, refused): (Vec<_>, Vec<_>) = results[..10].iter().partition(|r| r.is_ok());
        assert_eq!(read_ok.len(), fit);
        for r in refused {
            let Err(WireError::TooLarge { what, .. }) = r else {
                panic!("{r:?}");
            };
            assert!(what.contains("in a batch of its own"), "{what}");
        }
        // What fits after the big reads still arrives.
        assert!(
            matches!(&results[10], Ok(ProbeReply::Command(o)) if o.stdout == b"hi\n"),
            "{:?}",
            results[10]
        );
        let header =
            pincer_shared::codec::encode(&Response::Batch(results), 0, MAX_RESPONSE_HEADER);
        assert!(
            header.is_ok(),
            "the batch's answer does not fit: {header:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handshakes_answer_at_once_while_the_display_hangs() {
        let platform = Fake::default();
        let seen = Arc::new(Guest::new(config(false), &platform));
        let size = |i: &GuestInfo| (i.screen.width, i.screen.height);
        assert_eq!(size(&seen.info().await), (320, 240));

        // From here on every screen call blocks, and a capture holds the screen subsystem.
        platform.freeze(true);
        let capture = {
            let g = seen.clone();
            tokio::spawn(async move {
                g.handle(Request::Screenshot(Default::default()), RequestBody::none())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let info = seen.info().await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(size(&info), (320, 240), "the last known geometry");
        // A guest that never saw the display answers too, with no geometry.
        let fresh = Guest::new(config(false), &platform);
        let started = Instant::now();
        assert_eq!(size(&fresh.info().await), (0, 0));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );

        platform.freeze(false);
        let shot = tokio::time::timeout(Duration::from_secs(10), capture)
            .await
            .expect("the capture finishes once the display is back")
            .unwrap();
        assert!(
            matches!(shot, Reply::Bytes(Response::Screenshot(_), _)),
            "{shot:?}"
        );
        // The read the fresh guest's handshake started landed for the next host.
        let later = wait_for(Duration::from_secs(10), || {
            let cached = fresh.last_screen.lock().unwrap().clone()?;
            Some((cached.width, cached.height))
        });
        assert_eq!(later, Some((320, 240)));
    }
}

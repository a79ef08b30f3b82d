//! The guest's state and request dispatch: one handle per subsystem (screen, input, windows,
//! clipboard, accessibility), each connecting lazily and reconnecting on its own, so a
//! display or bus that goes away fails only the requests that need it.

use crate::a11y::A11y;
use crate::budget::Budget;
use crate::clipboard::Clipboard;
use crate::confine::Confinement;
use crate::input::Input;
use crate::screen::Screen;
use crate::window::Windows;
use crate::{exec, probe};
use pincer_shared::handshake::GuestInfo;
use pincer_shared::identity::Token;
use pincer_shared::limits::{MAX_BATCH, MAX_RESPONSE_HEADER};
use pincer_shared::message::capability;
use pincer_shared::observe::{ScreenInfo, TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::setup::{ExecRequest, Setup};
use pincer_shared::tree::UiTree;
use pincer_shared::{Request, RequestClass, Response, WireError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How the guest was started.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Name reported in the handshake.
    pub(crate) name: String,
    /// Shared secret the host must prove.
    pub(crate) token: Token,
    /// Refuse the setup class and command probes.
    pub(crate) read_only: bool,
    /// What file and environment probes may read.
    pub(crate) confinement: Arc<Confinement>,
    /// X display to use (`None`: `$DISPLAY`).
    pub(crate) display: Option<String>,
    /// List only processes of this session in process probes.
    pub(crate) process_session: Option<u32>,
}

/// What a handled request produces: a reply header, optionally with a body.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Just a header.
    Msg(Response),
    /// A header and bytes.
    Body(Response, Vec<u8>),
}

impl From<Result<Response, WireError>> for Reply {
    fn from(r: Result<Response, WireError>) -> Self {
        Self::Msg(r.unwrap_or_else(Response::Error))
    }
}

/// Everything a guest serves.
#[derive(Debug)]
pub(crate) struct Guest {
    pub(crate) config: Config,
    screen: Sub<Screen>,
    input: Sub<Input>,
    windows: Sub<Windows>,
    /// Window operations on their own connection: they wait up to two seconds for their
    /// effect, and probes (and active-app trees) should not queue behind them.
    window_ops: Sub<Windows>,
    clipboard: Sub<Clipboard>,
    a11y: tokio::sync::Mutex<A11y>,
    /// The screen geometry last read, for handshakes that cannot wait for the display.
    last_screen: Arc<Mutex<Option<ScreenInfo>>>,
    started: Instant,
    os: String,
}

/// How long a request waits for a subsystem that is busy with another request. X11 calls
/// have no timeout of their own, so a hung X server would otherwise pile up a blocked
/// thread per request.
const SUBSYSTEM_WAIT: Duration = Duration::from_secs(30);

/// How long a handshake waits for fresh screen geometry before it sends the last known one.
/// Hosts give the whole handshake 3 s, and a long capture or a hung X server must not lock
/// out a host that only wants to ping.
const HANDSHAKE_SCREEN_WAIT: Duration = Duration::from_millis(250);

/// A blocking subsystem (an X11 client): used by one request at a time, on a blocking
/// thread.
#[derive(Debug)]
struct Sub<S> {
    state: Arc<Mutex<S>>,
    /// Whose turn it is. The blocking work holds the turn until it returns, so a caller that
    /// stops waiting neither lets a second thread block behind a hung call nor loses the
    /// work.
    gate: Arc<tokio::sync::Mutex<()>>,
    name: &'static str,
}

impl<S: Send + 'static> Sub<S> {
    fn new(name: &'static str, state: S) -> Self {
        Self {
            state: Arc::new(Mutex::new(state)),
            gate: Arc::new(tokio::sync::Mutex::new(())),
            name,
        }
    }

    /// Runs `f` on a blocking thread with the subsystem to itself. A panic in a subsystem
    /// becomes an `Internal` error for this request; the lock is recovered so later
    /// requests work. Dropping the returned future does not stop `f` once it started.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> Result<T, WireError> + Send + 'static,
    ) -> Result<T, WireError> {
        let turn = tokio::time::timeout(SUBSYSTEM_WAIT, self.gate.clone().lock_owned())
            .await
            .map_err(|_| WireError::Busy {
                message: format!(
                    "the {} has been busy for {} s (is the display server hung?)",
                    self.name,
                    SUBSYSTEM_WAIT.as_secs()
                ),
            })?;
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            f(&mut state.lock().unwrap_or_else(PoisonError::into_inner))
        })
        .await
        .map_err(|e| WireError::Internal {
            message: format!("{} worker failed: {e}", self.name),
        })?
    }
}

impl Guest {
    pub(crate) fn new(config: Config) -> Self {
        let d = config.display.clone();
        Self {
            screen: Sub::new("screen capture", Screen::new(d.clone())),
            input: Sub::new("input injector", Input::new(d.clone())),
            windows: Sub::new("window reader", Windows::new(d.clone())),
            window_ops: Sub::new("window controller", Windows::new(d.clone())),
            clipboard: Sub::new("clipboard", Clipboard::new(d)),
            a11y: tokio::sync::Mutex::new(A11y::new()),
            last_screen: Arc::default(),
            started: Instant::now(),
            os: os_name(),
            config,
        }
    }

    /// Screen geometry now; remembered for handshakes.
    async fn screen_info(&self) -> Result<ScreenInfo, WireError> {
        let last = self.last_screen.clone();
        self.screen
            .run(move |s| {
                let info = s.info()?;
                *last.lock().unwrap_or_else(PoisonError::into_inner) = Some(info.clone());
                Ok(info)
            })
            .await
    }

    /// The description sent in the handshake. Answers within [`HANDSHAKE_SCREEN_WAIT`]
    /// whatever the display does: with the last known geometry (or none) if the screen is
    /// busy or hung; a read that was started goes on and refreshes it for the next host.
    pub(crate) async fn info(&self) -> GuestInfo {
        let screen = match tokio::time::timeout(HANDSHAKE_SCREEN_WAIT, self.screen_info()).await {
            Ok(Ok(info)) => info,
            _ => self
                .last_screen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_default(),
        };
        let mut capabilities: Vec<String> = [
            capability::INPUT,
            capability::SCREENSHOT,
            capability::UI_TREE,
            capability::PROBE,
            capability::WINDOW,
            capability::CLIPBOARD,
        ]
        .map(String::from)
        .to_vec();
        if !self.config.read_only {
            capabilities.push(capability::SETUP.into());
        }
        GuestInfo {
            version: 0,
            name: self.config.name.clone(),
            platform: "linux".into(),
            os: self.os.clone(),
            agent_version: env!("CARGO_PKG_VERSION").into(),
            screen,
            capabilities,
            read_only: self.config.read_only,
            pid: std::process::id(),
        }
    }

    /// Refuses what this guest does not grant.
    pub(crate) fn check_class(&self, req: &Request) -> Result<(), WireError> {
        if self.config.read_only && req.class() == RequestClass::Setup {
            return Err(WireError::Forbidden {
                class: RequestClass::Setup,
                reason: "this guest was started with --read-only (setup, exec and command probes are disabled)".into(),
            });
        }
        Ok(())
    }

    /// Handles every request except those with streamed bodies (`ReadFile`, `WriteFile`),
    /// which the server streams itself.
    pub(crate) async fn handle(&self, req: Request) -> Reply {
        match req {
            Request::Ping => Reply::Msg(Response::Pong {
                guest_us: self.started.elapsed().as_micros() as u64,
            }),
            Request::Action(action) => self
                .input
                .run(move |i| i.perform(&action))
                .await
                .map(|()| Response::Done)
                .into(),
            Request::Screenshot(req) => match self.screen.run(move |s| s.capture(&req)).await {
                Ok((meta, bytes)) => Reply::Body(Response::Screenshot(meta), bytes),
                Err(e) => Reply::Msg(Response::Error(e)),
            },
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
            Request::Setup(s) => self.setup(s).await.into(),
            Request::ReadFile { .. } => Reply::Msg(Response::Error(WireError::Internal {
                message: "read-file reached the generic handler".into(),
            })),
        }
    }

    /// The accessibility tree; for `ActiveApp`, of the active window's process.
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
        let tree = self.a11y.lock().await.tree(req, pid).await;
        // A walk allocates and frees thousands of messages and strings (tens of MB for a
        // spreadsheet); what it freed below live data would stay resident.
        crate::memory::give_back();
        tree
    }

    /// Runs a probe. In a batch, the file and command output its reply carries inline comes
    /// out of the batch's `budget`.
    async fn probe(&self, p: Probe, budget: Option<Arc<Budget>>) -> Result<ProbeReply, WireError> {
        let c = self.config.confinement.clone();
        match p {
            Probe::Stat { path } => {
                in_thread(move || probe::stat(&c, &path).map(ProbeReply::Stat)).await
            }
            Probe::ReadFile { path, max_len } => {
                in_thread(move || {
                    probe::read_file(&c, &path, max_len, budget.as_deref()).map(ProbeReply::File)
                })
                .await
            }
            Probe::ListDir { path } => {
                in_thread(move || probe::list_dir(&c, &path).map(ProbeReply::Dir)).await
            }
            Probe::Processes => {
                let session = self.config.process_session;
                in_thread(move || probe::processes(session).map(ProbeReply::Processes)).await
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
            Probe::Gsettings { schema, key } => {
                gsettings(&schema, &key).await.map(ProbeReply::Gsettings)
            }
        }
    }

    async fn setup(&self, s: Setup) -> Result<Response, WireError> {
        match s {
            Setup::WriteFile { .. } => Err(WireError::Internal {
                message: "write-file reached the generic handler".into(),
            }),
            Setup::Remove { path, recursive } => in_thread(move || remove(&path, recursive)).await,
            Setup::MakeDir { path } => {
                in_thread(move || {
                    std::fs::create_dir_all(probe::resolve(&path))
                        .map(|()| Response::Done)
                        .map_err(|e| WireError::from_io(&path, &e))
                })
                .await
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
        }
    }
}

/// Whether a GSettings schema or key name is plain enough to pass to `gsettings`
/// (letters, digits, '.', '-', '_', and '/' for relocatable paths).
fn settings_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | ':'))
}

/// `gsettings get SCHEMA KEY`: the value as printed, or `None` for an unknown schema or key.
async fn gsettings(schema: &str, key: &str) -> Result<Option<String>, WireError> {
    if !settings_name(schema) || !settings_name(key) {
        return Err(WireError::InvalidArgument {
            message: format!(
                "'{schema}' '{key}' is not a GSettings schema and key (letters, digits, '.', '-', '_')"
            ),
        });
    }
    let mut req = ExecRequest::new(["gsettings", "get", schema, key]);
    req.timeout_ms = 10_000;
    req.max_output = 64 * 1024;
    let out = exec::run(&req).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(Some(
            String::from_utf8_lossy(&out.stdout).trim_end().to_owned(),
        ))
    } else if stderr.contains("No such schema") || stderr.contains("No such key") {
        Ok(None)
    } else {
        Err(WireError::Io {
            message: format!(
                "gsettings get {schema} {key}: {} ({})",
                stderr.trim(),
                out.status
            ),
        })
    }
}

/// Bytes of files and command output one batch's replies may carry inline, so that the
/// batch's answer fits in a response header with room for everything else.
pub(crate) const BATCH_INLINE_BYTES: u64 = MAX_RESPONSE_HEADER as u64 - 8 * 1024 * 1024;

/// The error of a probe whose reply would overflow its batch's inline budget.
pub(crate) fn batch_full(what: &str, size: u64) -> WireError {
    WireError::TooLarge {
        what: format!(
            "{what}: the batch's replies would pass {BATCH_INLINE_BYTES} bytes inline; read it in a batch of its own"
        ),
        limit: BATCH_INLINE_BYTES,
        got: size,
    }
}

/// Runs blocking file-system work off the async threads.
async fn in_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WireError> + Send + 'static,
) -> Result<T, WireError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WireError::Internal {
            message: format!("worker thread failed: {e}"),
        })?
}

fn remove(path: &str, recursive: bool) -> Result<Response, WireError> {
    let p = probe::resolve(path);
    let meta = match std::fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Response::Done),
        Err(e) => return Err(WireError::from_io(path, &e)),
    };
    let r = if meta.is_dir() {
        if recursive {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_dir(&p)
        }
    } else {
        std::fs::remove_file(&p)
    };
    r.map(|()| Response::Done)
        .map_err(|e| WireError::from_io(path, &e))
}

/// PRETTY_NAME from os-release, or the kernel name.
fn os_name() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap_or_else(|| std::env::consts::OS.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Xvfb, wait_for};
    use pincer_shared::limits::MAX_INLINE_FILE;
    use pincer_shared::setup::WindowOp;
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{ConnectionExt as _, CreateWindowAux, WindowClass};
    use x11rb::wrapper::ConnectionExt as _;

    fn guest(read_only: bool, display: &str) -> Guest {
        Guest::new(Config {
            name: "test".into(),
            token: Token::generate(),
            read_only,
            confinement: Arc::new(Confinement::normal(std::path::Path::new("/nonexistent"))),
            display: Some(display.into()),
            process_session: None,
        })
    }

    #[test]
    fn read_only_guests_refuse_window_operations_but_list_windows() {
        let guest = guest(true, ":0");
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
        let Reply::Msg(Response::Batch(results)) = guest(false, ":0")
            .handle(Request::Batch(probes.into()))
            .await
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
        let x = Xvfb::start(320, 240);
        let seen = Arc::new(guest(false, &x.display));
        let size = |i: &GuestInfo| (i.screen.width, i.screen.height);
        assert_eq!(size(&seen.info().await), (320, 240));

        // From here on every X call blocks, and a capture holds the screen subsystem.
        x.signal(libc::SIGSTOP);
        let capture = {
            let g = seen.clone();
            tokio::spawn(async move { g.handle(Request::Screenshot(Default::default())).await })
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
        let fresh = guest(false, &x.display);
        let started = Instant::now();
        assert_eq!(size(&fresh.info().await), (0, 0));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );

        x.signal(libc::SIGCONT);
        let shot = tokio::time::timeout(Duration::from_secs(10), capture)
            .await
            .expect("the capture finishes once the display is back")
            .unwrap();
        assert!(
            matches!(shot, Reply::Body(Response::Screenshot(_), _)),
            "{shot:?}"
        );
        // The read the fresh guest's handshake started landed for the next host.
        let later = wait_for(Duration::from_secs(10), || {
            let cached = fresh.last_screen.lock().unwrap().clone()?;
            Some((cached.width, cached.height))
        });
        assert_eq!(later, Some((320, 240)));
    }

    #[tokio::test]
    async fn window_requests_reach_the_window_subsystem() {
        let x = Xvfb::start(320, 240);
        let (conn, screen) = x11rb::connect(Some(&x.display)).unwrap();
        let root = conn.setup().roots[screen].root;
        let window = conn.generate_id().unwrap();
        conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            window,
            root,
            10,
            10,
            50,
            40,
            0,
            WindowClass::INPUT_OUTPUT,
            0,
            &CreateWindowAux::new(),
        )
        .unwrap();
        conn.map_window(window).unwrap();
        conn.sync().unwrap();
        let guest = guest(false, &x.display);

        let reply = |r: Reply| match r {
            Reply::Msg(r) => r,
            Reply::Body(r, _) => panic!("unexpected body with {r:?}"),
        };
        let listed = reply(guest.handle(Request::Probe(Probe::Windows)).await);
        let Response::Probe(ProbeReply::Windows(list)) = listed else {
            panic!("{listed:?}");
        };
        assert_eq!(
            list.iter().map(|w| w.id).collect::<Vec<_>>(),
            [u64::from(window)]
        );

        let maximize = Request::Setup(Setup::Window {
            id: window.into(),
            op: WindowOp::Maximize,
        });
        assert_eq!(reply(guest.handle(maximize).await), Response::Done);
        let geometry = conn.get_geometry(window).unwrap().reply().unwrap();
        assert_eq!((geometry.width, geometry.height), (320, 240));

        let missing = Request::Setup(Setup::Window {
            id: 0x7fff_fff0,
            op: WindowOp::Activate,
        });
        assert_eq!(
            reply(guest.handle(missing).await),
            Response::Error(WireError::NotFound {
                path: "window 0x7ffffff0".into()
            })
        );
    }
}

//! OSWorld's own scoring code on the host: its metric functions, from the pinned
//! `desktop-env` package in a Python environment of their own (`pincer osworld setup`),
//! run by a long-lived worker (`worker.py`, JSON lines) that pincer starts once per run
//! and restarts when it dies or hangs.
//!
//! Metrics open files agents wrote (spreadsheets, documents, archives), so the worker runs
//! only sandboxed, as API tools do: bubblewrap with every namespace unshared (no network),
//! the minimal read-only system of [`pincer_shared::tool::sandbox_root`], the environment
//! read-only at `/scorer`, and one writable directory at `/cache` holding the files the
//! getters fetched for the task being scored; user 65534 inside, and outside too when pincer
//! runs as root and that user can reach the environment (an environment under `/root`
//! cannot be: then the worker keeps root's uid outside its namespaces, with no
//! capabilities and nothing but its binds); memory and file sizes capped.

use super::metric::DESKTOP_ENV;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// The scorer environment's libraries, pinned.
pub const REQUIREMENTS: &str = include_str!("requirements.txt");

/// The worker's program.
const WORKER: &str = include_str!("worker.py");

/// Marks a finished environment (written last by [`setup`]).
const STAMP: &str = "pincer-scorer.json";

/// How long the worker may take to start (its imports).
const START: Duration = Duration::from_secs(120);

/// How long one task's scoring may take before the worker is killed, by default.
pub const CALL: Duration = Duration::from_secs(300);

/// The worker's address space.
const MEMORY: u64 = 8 << 30;

/// The largest file the worker may write.
const FILE_SIZE: u64 = 2 << 30;

/// The user the worker runs as.
const NOBODY: u32 = 65534;

/// Why scoring could not happen (never the agent's failure).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ScorerError {
    /// No environment at the path.
    #[error("OSWorld's scorer is not set up at {0}: run `pincer osworld setup`")]
    NotSetUp(PathBuf),
    /// Setting the environment up failed.
    #[error("setting up OSWorld's scorer: {0}")]
    Setup(String),
    /// bubblewrap is missing.
    #[error(
        "bubblewrap (bwrap) is not installed, and OSWorld's scorer opens files agents wrote \
         only sandboxed: install it (Debian: apt install bubblewrap)"
    )]
    NoBwrap,
    /// The worker did not start.
    #[error("OSWorld's scorer did not start: {0}")]
    Start(String),
    /// The environment holds another release.
    #[error(
        "OSWorld's scorer has desktop-env {found}, pincer pins {DESKTOP_ENV}: run `pincer osworld setup`"
    )]
    Version {
        /// The release found.
        found: String,
    },
    /// The worker died.
    #[error("OSWorld's scorer died: {0}")]
    Died(String),
    /// The worker took too long (it was killed; the next call starts a new one).
    #[error("OSWorld's scorer took longer than {0:.1} s and was killed")]
    Timeout(f64),
    /// A metric raised: OSWorld's harness would not have scored the task either.
    #[error("OSWorld's metric raised {error}\n{traceback}")]
    Metric {
        /// The exception.
        error: String,
        /// Its traceback.
        traceback: String,
    },
}

/// One task's scoring, as the worker takes it.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// Each metric's module and name.
    pub metrics: Vec<(String, String)>,
    /// Whether the evaluator names one metric (not a list).
    pub single: bool,
    /// `and` or `or`.
    pub conj: String,
    /// Each metric's arguments.
    pub calls: Vec<Call>,
}

/// One metric call's arguments: the getters' values (file paths are the worker's).
#[derive(Debug, Clone, Serialize)]
pub struct Call {
    /// The result getter's value.
    pub result: serde_json::Value,
    /// The expected getter's value.
    pub expected: serde_json::Value,
    /// Whether the metric gets `expected` (OSWorld passes it only when the evaluator has one).
    pub has_expected: bool,
    /// Keyword options.
    pub options: serde_json::Map<String, serde_json::Value>,
    /// OSWorld's own getter to call for `result` instead (the value is then unused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_getter: Option<Replay>,
    /// The same for `expected`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_getter: Option<Replay>,
}

/// One of OSWorld's own getters, called in the worker on guest files pincer fetched: the
/// Chrome profile getters, which ask the guest where a profile file is, read it and pick
/// a value out of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// Its module under `desktop_env.evaluators.getters`.
    pub module: String,
    /// Its name without `get_`.
    pub name: String,
    /// Its config as the task writes it.
    pub config: serde_json::Value,
    /// The fetched files, inside the sandbox, at their paths under the guest's home.
    pub home: String,
    /// OSWorld's cache folder for the task, inside the sandbox (some getters copy there).
    pub cache: String,
}

/// What the worker answered.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Scored {
    /// The task's score, combined as OSWorld combines.
    pub score: f64,
    /// Each metric's score, as far as the combination ran.
    pub scores: Vec<f64>,
    /// What the metrics printed (their last 4,000 characters).
    #[serde(default)]
    pub output: String,
}

#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    score: Option<f64>,
    #[serde(default)]
    scores: Vec<f64>,
    #[serde(default)]
    output: String,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    traceback: String,
}

/// A directory the worker sees as `/cache/<name>`, for one task's files; removed on drop.
#[derive(Debug)]
pub struct Workspace {
    host: PathBuf,
    inside: String,
}

impl Workspace {
    /// Where the host writes a file named `rel` (already checked relative).
    pub fn host_path(&self, rel: &str) -> PathBuf {
        self.host.join(rel)
    }

    /// The same file as the worker sees it.
    pub fn inside_path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.inside)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.host);
    }
}

/// The scorer: one worker, started on first use.
#[derive(Debug)]
pub struct Scorer {
    env: PathBuf,
    call: Duration,
    scratch: PathBuf,
    next: AtomicU64,
    worker: Mutex<Option<Worker>>,
    spawner: Mutex<Option<Spawner>>,
}

/// The thread that starts workers. bubblewrap's `--die-with-parent` kills the worker when
/// the *thread* that forked it ends, not the process, and scoring runs on whatever thread
/// asks, often one of the async runtime's blocking threads, which end after seconds idle:
/// the worker then died between two tasks (and pincer, writing the next request to it, got
/// a broken pipe). This thread lives as long as the scorer, so its workers do.
#[derive(Debug)]
struct Spawner {
    orders: mpsc::Sender<(Command, mpsc::Sender<std::io::Result<Child>>)>,
}

impl Spawner {
    fn start() -> Result<Self, ScorerError> {
        let (orders, rx) = mpsc::channel::<(Command, mpsc::Sender<std::io::Result<Child>>)>();
        std::thread::Builder::new()
            .name("osworld-scorer-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .map_err(|e| ScorerError::Start(format!("a thread to start workers: {e}")))?;
        Ok(Self { orders })
    }

    fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let gone = || std::io::Error::other("the scorer's spawner thread is gone");
        let (tx, rx) = mpsc::channel();
        self.orders.send((cmd, tx)).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Worker {
    fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let s = s.trim();
        let cut = s.len().saturating_sub(2000);
        let cut = (cut..=s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s[cut..].to_owned()
    }
}

impl Scorer {
    /// A scorer over the environment at `env` (see [`default_env`]); nothing starts yet.
    pub fn new(env: PathBuf) -> Self {
        static SCORERS: AtomicU64 = AtomicU64::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "pincer-scorer-{}-{}",
            std::process::id(),
            SCORERS.fetch_add(1, Ordering::Relaxed)
        ));
        Self {
            env,
            call: CALL,
            scratch,
            next: AtomicU64::new(0),
            worker: Mutex::new(None),
            spawner: Mutex::new(None),
        }
    }

    /// The same scorer with another limit on one task's scoring.
    pub fn with_call_timeout(mut self, call: Duration) -> Self {
        self.call = call;
        self
    }

    /// A fresh directory for one task's files.
    pub fn workspace(&self) -> Result<Workspace, ScorerError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let host = self.scratch.join(n.to_string());
        let made = std::fs::create_dir_all(&host).and_then(|()| {
            // The worker's user (65534) writes here (archives are unpacked beside them).
            for d in [&self.scratch, &host] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))?;
            }
            Ok(())
        });
        made.map_err(|e| ScorerError::Start(format!("creating {}: {e}", host.display())))?;
        Ok(Workspace {
            host,
            inside: format!("/cache/{n}"),
        })
    }

    /// Scores one task. A worker that dies or exceeds its time ([`CALL`] unless set) is
    /// killed and the next call starts another.
    pub fn score(&self, req: &Request) -> Result<Scored, ScorerError> {
        let mut slot = self
            .worker
            .lock()
            .map_err(|_| ScorerError::Died("a previous scoring panicked".into()))?;
        if slot.is_none() {
            *slot = Some(self.spawn()?);
        }
        let Some(worker) = slot.as_mut() else {
            return Err(ScorerError::Died("no worker".into()));
        };
        let line = serde_json::to_string(req).map_err(|e| ScorerError::Start(e.to_string()))?;
        if let Err(e) = writeln!(worker.stdin, "{line}").and_then(|()| worker.stdin.flush()) {
            let tail = worker.stderr_tail();
            *slot = None;
            return Err(ScorerError::Died(format!("{e}; {tail}")));
        }
        let answer = match worker.lines.recv_timeout(self.call) {
            Ok(a) => a,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                *slot = None;
                return Err(ScorerError::Timeout(self.call.as_secs_f64()));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let tail = worker.stderr_tail();
                *slot = None;
                return Err(ScorerError::Died(tail));
            }
        };
        let reply: Reply = serde_json::from_str(&answer)
            .map_err(|e| ScorerError::Died(format!("unreadable reply ({e}): {answer}")))?;
        match (reply.error, reply.score) {
            (Some(error), _) => Err(ScorerError::Metric {
                error,
                traceback: reply.traceback,
            }),
            (None, Some(score)) => Ok(Scored {
                score,
                scores: reply.scores,
                output: reply.output,
            }),
            (None, None) => Err(ScorerError::Died(format!(
                "a reply without a score: {answer}"
            ))),
        }
    }

    /// Starts the worker in its sandbox and waits until it has loaded.
    fn spawn(&self) -> Result<Worker, ScorerError> {
        check_env(&self.env)?;
        std::fs::create_dir_all(&self.scratch)
            .and_then(|()| {
                std::fs::set_permissions(&self.scratch, std::fs::Permissions::from_mode(0o777))
            })
            .map_err(|e| ScorerError::Start(format!("{}: {e}", self.scratch.display())))?;
        let mut args = pincer_shared::tool::sandbox_root();
        let mut bound = vec![self.env.clone(), self.scratch.clone()];
        args.extend([
            "--ro-bind".into(),
            self.env.display().to_string(),
            "/scorer".into(),
            "--bind".into(),
            self.scratch.display().to_string(),
            "/cache".into(),
        ]);
        // A Python outside /usr (pyenv, a build of one's own) is bound where it lives.
        if let Some(base) = base_prefix(&self.env).filter(|b| !b.starts_with("/usr")) {
            let at = base.display().to_string();
            args.extend(["--ro-bind".into(), at.clone(), at]);
            bound.push(base);
        }
        // As root, the worker becomes 65534 outside too when that user can reach what is
        // bound; otherwise (an environment under /root) it keeps root's uid outside its
        // namespaces, without capabilities, seeing only its binds.
        // SAFETY: geteuid has no preconditions.
        let drop_root = unsafe { libc::geteuid() } == 0 && bound.iter().all(|p| others_reach(p));
        for (k, v) in [
            ("HOME", "/tmp"),
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "C.UTF-8"),
            ("MPLCONFIGDIR", "/tmp"),
            ("TLDEXTRACT_CACHE", "/tmp/tldextract"),
        ] {
            args.extend(["--setenv".into(), k.into(), v.into()]);
        }
        args.extend(
            [
                "--chdir",
                "/tmp",
                "--",
                "/scorer/bin/python",
                "-I",
                "-c",
                WORKER,
            ]
            .map(str::to_owned),
        );
        let mut cmd = Command::new(&args[0]);
        cmd.args(&args[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec only async-signal-safe calls (setrlimit,
        // setgroups, setgid, setuid), on values computed before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for (res, max) in [(libc::RLIMIT_AS, MEMORY), (libc::RLIMIT_FSIZE, FILE_SIZE)] {
                    let lim = libc::rlimit {
                        rlim_cur: max,
                        rlim_max: max,
                    };
                    if libc::setrlimit(res, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if drop_root
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(NOBODY) != 0
                        || libc::setuid(NOBODY) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawned = {
            let mut spawner = self
                .spawner
                .lock()
                .map_err(|_| ScorerError::Start("a previous start panicked".into()))?;
            let spawner = match &mut *spawner {
                Some(s) => s,
                empty => empty.insert(Spawner::start()?),
            };
            spawner.spawn(cmd)
        };
        let mut child = spawned.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ScorerError::NoBwrap,
            _ => ScorerError::Start(e.to_string()),
        })?;
        let (Some(stdin), Some(stdout), Some(mut err)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ScorerError::Start("no pipes".into()));
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let keep = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = keep.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 64 * 1024 {
                        let cut = s.len() - 32 * 1024;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
                        s.drain(..cut);
                    }
                }
            }
        });
        let worker = Worker {
            child,
            stdin,
            lines,
            stderr,
        };
        #[derive(Deserialize)]
        struct Ready {
            ready: bool,
            desktop_env: String,
        }
        let first = match worker.lines.recv_timeout(START) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(ScorerError::Start(format!(
                    "no word in {} s",
                    START.as_secs()
                )));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Give the stderr reader a moment to take the last words.
                std::thread::sleep(Duration::from_millis(100));
                return Err(ScorerError::Start(worker.stderr_tail()));
            }
        };
        match serde_json::from_str::<Ready>(&first) {
            Ok(r) if r.ready && r.desktop_env == DESKTOP_ENV => Ok(worker),
            Ok(r) => Err(ScorerError::Version {
                found: r.desktop_env,
            }),
            Err(e) => Err(ScorerError::Start(format!(
                "unexpected first line ({e}): {first}"
            ))),
        }
    }
}

impl Drop for Scorer {
    fn drop(&mut self) {
        if let Ok(mut w) = self.worker.lock() {
            w.take();
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// Whether user 65534 can reach `path`: every directory on the way is searchable by others.
fn others_reach(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    path.ancestors()
        .skip(1)
        .all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0))
        && std::fs::metadata(path).is_ok_and(|m| m.mode() & 0o005 == 0o005)
}

/// The Python prefix a venv was made from (`home` in its `pyvenv.cfg` is its `bin`).
fn base_prefix(env: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(env.join("pyvenv.cfg")).ok()?;
    cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| {
            let bin = PathBuf::from(v.trim());
            bin.parent().map_or(bin.clone(), Path::to_path_buf)
        })
    })
}

/// What [`setup`] writes last.
#[derive(Debug, Serialize, Deserialize)]
struct Stamp {
    desktop_env: String,
    requirements_sha256: String,
}

fn requirements_hash() -> String {
    crate::image::build::hex(
        ring::digest::digest(&ring::digest::SHA256, REQUIREMENTS.as_bytes()).as_ref(),
    )
}

/// Whether `env` is a finished environment of this pin.
pub fn check_env(env: &Path) -> Result<(), ScorerError> {
    let stamp: Stamp = std::fs::read_to_string(env.join(STAMP))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .ok_or_else(|| ScorerError::NotSetUp(env.to_owned()))?;
    if stamp.desktop_env != DESKTOP_ENV || stamp.requirements_sha256 != requirements_hash() {
        return Err(ScorerError::Version {
            found: stamp.desktop_env,
        });
    }
    Ok(())
}

/// The scorer's environment: `$PINCER_OSWORLD_SCORER`, else one per pin under pincer's
/// cache (`~/.cache/pincer/osworld-scorer/desktop-env-<version>-<hash of the pins>`).
pub fn default_env() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_OSWORLD_SCORER") {
        return PathBuf::from(d);
    }
    crate::paths::cache_dir()
        .join("osworld-scorer")
        .join(format!(
            "desktop-env-{DESKTOP_ENV}-{}",
            &requirements_hash()[..12]
        ))
}

/// Makes the environment at `env` with `python` (3.10 or newer, with `venv`): desktop-env
/// without its dependencies, then the pinned light libraries, all as wheels from PyPI but
/// odfpy (pure Python). Built beside `env` and renamed into place, so an interrupted setup
/// leaves nothing half made. Does nothing when `env` is already made.
pub fn setup(env: &Path, python: &Path, progress: &dyn Fn(&str)) -> Result<bool, ScorerError> {
    if check_env(env).is_ok() {
        return Ok(false);
    }
    let fail = |what: &str, e: &dyn std::fmt::Display| ScorerError::Setup(format!("{what}: {e}"));
    let parent = env.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| fail(&parent.display().to_string(), &e))?;
    let name = env
        .file_name()
        .map_or_else(|| "scorer".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let run = |what: &str, cmd: &mut Command| -> Result<(), ScorerError> {
        progress(what);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fail(what, &e))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(fail(what, &tail.join("\n")))
    };
    let result = (|| {
        run(
            &format!("creating a Python environment with {}", python.display()),
            Command::new(python).args(["-m", "venv"]).arg(&tmp),
        )
        .map_err(|e| match e {
            ScorerError::Setup(m) => ScorerError::Setup(format!(
                "{m}\n(Debian and Ubuntu: apt install python3-venv; or give --python)"
            )),
            e => e,
        })?;
        let pip = |cmd: &mut Command| {
            cmd.args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ]);
        };
        let py = tmp.join("bin/python");
        let mut c = Command::new(&py);
        pip(&mut c);
        run(
            &format!("installing desktop-env {DESKTOP_ENV} (without its dependencies)"),
            c.args(["--no-deps", &format!("desktop-env=={DESKTOP_ENV}")]),
        )?;
        let reqs = tmp.join("requirements.txt");
        std::fs::write(&reqs, REQUIREMENTS).map_err(|e| fail("requirements", &e))?;
        let cons = tmp.join("constraints.txt");
        std::fs::write(&cons, "numpy==1.26.4\n").map_err(|e| fail("constraints", &e))?;
        let mut c = Command::new(&py);
        pip(&mut c);
        run(
            "installing the metric modules' libraries (about 600 MB)",
            c.args(["--only-binary", ":all:", "--no-binary", "odfpy", "-r"])
                .arg(&reqs)
                .arg("-c")
                .arg(&cons),
        )?;
        let stamp = Stamp {
            desktop_env: DESKTOP_ENV.into(),
            requirements_sha256: requirements_hash(),
        };
        std::fs::write(
            tmp.join(STAMP),
            serde_json::to_string_pretty(&stamp).unwrap_or_default(),
        )
        .map_err(|e| fail("stamp", &e))?;
        let _ = std::fs::remove_dir_all(env);
        std::fs::rename(&tmp, env).map_err(|e| fail("moving the environment into place", &e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|()| true)
}

/// Which of `libs` (import names) the environment can import, each with its answer.
pub fn installed(env: &Path, libs: &[&str]) -> Result<Vec<(String, bool)>, ScorerError> {
    check_env(env)?;
    let code = "import importlib.util, json, sys\n\
                print(json.dumps([[n, importlib.util.find_spec(n) is not None] for n in sys.argv[1:]]))";
    let out = Command::new(env.join("bin/python"))
        .args(["-I", "-c", code])
        .args(libs)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ScorerError::Start(e.to_string()))?;
    serde_json::from_slice(&out.stdout).map_err(|e| {
        ScorerError::Start(format!(
            "{e}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    })
}

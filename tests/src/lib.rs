//! Harness for pincer's end-to-end tests: the real `pincer` and `pincer-agent` binaries,
//! real local desktops (Xvfb, D-Bus, AT-SPI, openbox) and real GTK apps, each test in its
//! own state directory and envs file so tests run in parallel without seeing each other.

pub mod adb;
pub mod android;
pub mod android_framework;
pub mod cases;
pub mod kube;
pub mod relay;
pub mod routes;
pub mod slurm;

use pincer::env::registry::Registry;
use pincer::env::{Deadlines, Environment};
use pincer_shared::observe::{TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::tree::{UiNode, UiTree};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A host listening on loopback for guests that dial in (`--connect`), trusting each
/// guest's certificate on first use: the listener, the host's identity (guests pin its
/// fingerprint) and the token file guests need a copy of, made in `dir`.
pub fn dial_in_host(
    dir: &Path,
) -> (
    pincer::env::listener::Listener,
    pincer_shared::identity::Identity,
    PathBuf,
) {
    use pincer::env::listener::{Listener, TrustPolicy};
    use pincer_shared::identity::{Identity, Token};
    let host = Identity::generate("host").unwrap();
    let token_file = dir.join("host.token");
    let token = Token::load_or_create(&token_file).unwrap();
    let policy = TrustPolicy {
        accept_new: true,
        ..Default::default()
    };
    let listener = Listener::bind(
        "127.0.0.1:0".parse().unwrap(),
        &host,
        token,
        policy,
        Deadlines::default(),
    )
    .unwrap();
    (listener, host, token_file)
}

/// CRAB's Benchmark-v0 files (`fixtures/crab-benchmark-v0`) imported with `pincer task
/// import-crab` into the sandbox's `name`; returns that folder (`ubuntu/`, `android/`,
/// `cross/` in it).
pub fn import_crab(sb: &Sandbox, name: &str) -> PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/crab-benchmark-v0");
    let out = sb.path().join(name);
    sb.pincer_ok(&[
        "task",
        "import-crab",
        fixtures.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    out
}

/// Writes an OSWorld task folder (`examples/<domain>/<id>.json` and `test_all.json`, in the
/// sandbox, under a name with a space and non-ASCII) of tasks with these evaluators and no
/// setup, and imports it with `pincer task import-osworld`; returns the imported folder.
pub fn import_osworld_evaluators(
    sb: &Sandbox,
    domain: &str,
    tasks: &[(&str, serde_json::Value)],
) -> PathBuf {
    let folder = sb.path().join("OSWorld tasks é");
    std::fs::create_dir_all(folder.join("examples").join(domain)).unwrap();
    for (id, evaluator) in tasks {
        let task =
            serde_json::json!({"id": id, "instruction": "-", "config": [], "evaluator": evaluator});
        std::fs::write(
            folder.join(format!("examples/{domain}/{id}.json")),
            task.to_string(),
        )
        .unwrap();
    }
    let ids: Vec<&str> = tasks.iter().map(|(id, _)| *id).collect();
    std::fs::write(
        folder.join("test_all.json"),
        serde_json::json!({ domain: ids }).to_string(),
    )
    .unwrap();
    let out = sb.path().join("imported");
    sb.pincer_ok(&[
        "task",
        "import-osworld",
        folder.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    out
}

/// Scores `task` of the imported OSWorld tasks in `tasks` on the environment as it is now
/// (`pincer task check --no-setup --json`, with OSWorld's file cache `assets` when given):
/// the task's score (`None`: not scored) and the whole verdict.
pub fn osworld_score(
    sb: &Sandbox,
    tasks: &Path,
    assets: Option<&Path>,
    task: &str,
) -> (Option<f64>, serde_json::Value) {
    let mut args = vec![
        "task",
        "check",
        "--tasks",
        tasks.to_str().unwrap(),
        task,
        "--no-setup",
        "--json",
    ];
    if let Some(assets) = assets {
        args.extend(["--assets", assets.to_str().unwrap()]);
    }
    let out = sb.pincer_ok(&args);
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    (v["score"].as_f64(), v)
}

/// The records of the run in `out`, its own and its shards', as JSON in file order. A
/// missing file gives none and a torn last line (a run killed mid-write) is left out, so
/// tests count what a reader of the run would see.
pub fn results(out: &Path) -> Vec<serde_json::Value> {
    pincer::rundir::shard::results_files(out)
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A workspace binary (`pincer`, `pincer-agent`) next to the test executable's profile dir.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} is missing: build the binaries first (`cargo build --workspace --bins`; `./run.sh test` does it)",
        p.display()
    );
    p
}

/// A private pincer home: state dir and envs file in a temp dir.
#[derive(Debug)]
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    /// A new empty sandbox.
    pub fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("pincer-e2e-")
                .tempdir()
                .expect("temp dir"),
        }
    }

    /// The sandbox directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The envs file.
    pub fn registry(&self) -> Registry {
        Registry::at(self.path().join("envs.toml"))
    }

    /// `pincer ARGS` set up to run in this sandbox, for tests that start it themselves.
    pub fn pincer_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("pincer"));
        cmd.args(args)
            .env("PINCER_STATE_DIR", self.path().join("state"))
            .env("PINCER_ENVS", self.path().join("envs.toml"));
        cmd
    }

    /// Runs `pincer ARGS` in this sandbox.
    pub fn pincer(&self, args: &[&str]) -> Output {
        self.pincer_command(args).output().expect("run pincer")
    }

    /// Runs `pincer ARGS` and returns stdout, failing the test with stderr on error.
    pub fn pincer_ok(&self, args: &[&str]) -> String {
        let out = self.pincer(args);
        assert!(
            out.status.success(),
            "pincer {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a local desktop (stopped when the returned guard drops).
    pub fn desktop(&self, name: &str, size: &str, extra: &[&str]) -> Desktop<'_> {
        let mut args = vec!["desktop", "up", "--name", name, "--size", size];
        args.extend_from_slice(extra);
        self.pincer_ok(&args);
        Desktop {
            sandbox: self,
            name: name.to_owned(),
        }
    }
}

/// A running local desktop; `pincer desktop down` on drop.
#[derive(Debug)]
pub struct Desktop<'a> {
    sandbox: &'a Sandbox,
    /// Its environment name.
    pub name: String,
}

impl Desktop<'_> {
    /// Connects to its agent through the sandbox's envs file.
    pub async fn connect(&self) -> Environment {
        self.sandbox
            .registry()
            .connect(Some(&self.name), Deadlines::default())
            .await
            .expect("connect to the desktop's agent")
    }

    /// The desktop's state as its supervisor wrote it.
    pub fn state(&self) -> serde_json::Value {
        let p = self
            .sandbox
            .path()
            .join("state/desktops")
            .join(&self.name)
            .join("desktop.json");
        serde_json::from_str(&std::fs::read_to_string(&p).expect("desktop.json")).expect("json")
    }
}

impl Drop for Desktop<'_> {
    fn drop(&mut self) {
        let _ = self.sandbox.pincer(&["desktop", "down", &self.name]);
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tree of the app whose name contains `app`, once it shows a node matching `pred`.
pub async fn wait_for_node(
    env: &Environment,
    app: &str,
    pred: impl Fn(&UiNode) -> bool,
) -> Option<UiTree> {
    eventually(Duration::from_secs(30), || async {
        let t = env
            .tree(TreeRequest {
                scope: TreeScope::App(app.into()),
                ..Default::default()
            })
            .await
            .ok()?;
        t.root.find(&pred).is_some().then_some(t)
    })
    .await
}

/// Whether a process with this `comm` name runs on the guest.
pub async fn process_running(env: &Environment, name: &str) -> bool {
    match env.probe(Probe::Processes).await {
        Ok(ProbeReply::Processes(ps)) => ps.iter().any(|p| p.name == name),
        _ => false,
    }
}

/// A process as `/proc/PID/stat` and `/proc/PID/cmdline` show it.
#[derive(Debug, Clone)]
pub struct ProcessEntry {
    /// Process id.
    pub pid: u32,
    /// Its name (at most 15 bytes, as `ps` shows it).
    pub comm: String,
    /// Its state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Its parent's pid.
    pub ppid: u32,
    /// Its session id (a desktop's processes: its supervisor's pid).
    pub session: u32,
    /// When it started, in clock ticks since boot.
    pub started: u64,
    /// Its arguments, joined by spaces.
    pub cmdline: String,
}

impl ProcessEntry {
    /// Reads a process; `None` if it is gone.
    pub fn read(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = stat.rsplit_once(')')?;
        // Fields from the third on: state, ppid, ..., starttime (the 22nd).
        let fields: Vec<&str> = tail.split_whitespace().collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        Some(Self {
            pid,
            comm: head.split_once('(')?.1.to_owned(),
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            session: fields.get(3)?.parse().ok()?,
            started: fields.get(19)?.parse().ok()?,
            cmdline: String::from_utf8_lossy(&cmdline)
                .trim_end_matches('\0')
                .replace('\0', " "),
        })
    }

    /// Whether it still runs (not gone, not a zombie).
    pub fn alive(pid: u32) -> bool {
        Self::read(pid).is_some_and(|p| !matches!(p.state, 'Z' | 'X'))
    }

    /// Its environment, `KEY=value` entries.
    pub fn environ(&self) -> Vec<Vec<u8>> {
        std::fs::read(format!("/proc/{}/environ", self.pid))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .map(<[u8]>::to_vec)
            .collect()
    }
}

/// Every process on the machine.
pub fn processes() -> Vec<ProcessEntry> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| ProcessEntry::read(e.file_name().to_str()?.parse().ok()?))
                .collect()
        })
        .unwrap_or_default()
}

/// What a running local desktop holds, read from its `desktop.json` and `/proc`: its
/// processes (its supervisor's session, and any process carrying its `PINCER_DESKTOP_ID`),
/// its X display and its agent's UDP port. For tests that check a desktop leaves nothing
/// behind.
#[derive(Debug, Clone)]
pub struct DesktopFootprint {
    /// The desktop's name.
    pub name: String,
    /// Its processes when it was taken, the supervisor among them.
    pub processes: Vec<ProcessEntry>,
    /// The X display's number.
    pub display: u32,
    /// The agent's address.
    pub agent: std::net::SocketAddr,
}

impl DesktopFootprint {
    /// The footprint of a desktop from its state (`desktop.json`).
    pub fn of(state: &serde_json::Value) -> Self {
        let name = state["name"].as_str().expect("a name").to_owned();
        let supervisor = state["supervisor_pid"].as_u64().expect("a supervisor") as u32;
        let marker = format!("PINCER_DESKTOP_ID={name}-{supervisor}").into_bytes();
        let processes: Vec<ProcessEntry> = processes()
            .into_iter()
            .filter(|p| p.session == supervisor || p.environ().contains(&marker))
            .collect();
        assert!(
            processes.iter().any(|p| p.pid == supervisor),
            "desktop {name}: its supervisor {supervisor} is not running"
        );
        let display = state["display"]
            .as_str()
            .and_then(|d| d.strip_prefix(':'))
            .and_then(|n| n.parse().ok())
            .expect("a display :N");
        let agent = state["agent_addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("an agent address");
        Self {
            name,
            processes,
            display,
            agent,
        }
    }

    /// What of the desktop is still there: processes still running (the same pid started
    /// at the same time), an X server answering on its display, a socket bound to its
    /// agent's port. Empty when it is all gone.
    pub fn left(&self) -> Vec<String> {
        let mut left: Vec<String> = self
            .processes
            .iter()
            .filter(|p| {
                ProcessEntry::read(p.pid)
                    .is_some_and(|now| now.started == p.started && !matches!(now.state, 'Z' | 'X'))
            })
            .map(|p| format!("process {} ({})", p.pid, p.comm))
            .collect();
        let socket = format!("/tmp/.X11-unix/X{}", self.display);
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            left.push(format!("an X server on :{}", self.display));
        }
        if std::net::UdpSocket::bind(self.agent).is_err() {
            left.push(format!("a socket on the agent's port {}", self.agent));
        }
        left
    }

    /// Waits up to `within` for [`Self::left`] to be empty; returns what is left then.
    pub fn wait_gone(&self, within: Duration) -> Vec<String> {
        let until = Instant::now() + within;
        loop {
            let left = self.left();
            if left.is_empty() || Instant::now() > until {
                return left;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A suite of `n` terminal tasks; each oracle idles `sleep_ms` before typing its command.
pub fn terminal_suite(dir: &Path, n: usize, sleep_ms: u64) -> PathBuf {
    let tasks = dir.join("suite");
    std::fs::create_dir_all(&tasks).unwrap();
    for i in 0..n {
        let kill = serde_json::json!({"do": "exec", "argv": ["pkill", "-s", "0", "-x", "xfce4-terminal"], "check": false});
        let t = serde_json::json!({
            "id": format!("t{i}"),
            "instruction": format!("Write done{i} into ~/out{i}.txt using the terminal."),
            "envs": {"desktop": {"platform": "linux"}},
            "setup": {"desktop": [
                {"do": "remove", "path": format!("~/out{i}.txt")},
                kill,
                {"do": "launch", "argv": ["xfce4-terminal", "--disable-server"]},
                {"do": "wait_window", "title_contains": "Terminal"}
            ]},
            "teardown": {"desktop": [kill]},
            "checkpoints": [
                {"id": "written", "env": "desktop", "check": "file_contains", "args": {"path": format!("~/out{i}.txt"), "text": format!("done{i}")}}
            ],
            "oracle": [
                {"do": "sleep", "ms": sleep_ms},
                {"do": "type", "text": format!("echo done{i} > ~/out{i}.txt\n"), "target": {"role": "terminal"}},
                {"do": "sleep", "ms": 300}
            ]
        });
        std::fs::write(
            tasks.join(format!("t{i}.json")),
            serde_json::to_string_pretty(&t).unwrap(),
        )
        .unwrap();
    }
    tasks
}

/// Builds the image of `recipe` with its container image (a no-op when the image cache
/// holds it) and returns the container image's tag.
pub fn container_image(sb: &Sandbox, recipe: &str) -> String {
    let out = sb.pincer(&["image", "build", recipe, "--container"]);
    assert!(
        out.status.success(),
        "image build failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            pincer::paths::image_cache_dir()
                .join(recipe)
                .join("manifest.json"),
        )
        .expect("the image's manifest"),
    )
    .expect("a JSON manifest");
    manifest["container"]
        .as_str()
        .expect("a container image")
        .to_owned()
}

/// `podman run --rm` as this machine allows it: runc, cgroupfs, and resource limits below
/// its own (it grants no CAP_SYS_RESOURCE).
pub fn podman_run() -> Command {
    let mut cmd = Command::new("podman");
    cmd.args([
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--cgroup-manager=cgroupfs",
    ])
    .args([
        "--ulimit",
        "nofile=16384:16384",
        "--ulimit",
        "nproc=32768:32768",
    ]);
    cmd
}

/// The user the long-home tests run pincer as when the test runs as root: no passwd entry
/// is needed, and nothing of root's (its cache, /dev/kvm) is within its reach.
pub const USER_UID: u32 = 4242;

/// Runs `pincer ARGS` as a user who is not root (uid [`USER_UID`] when the test runs as
/// root), whose home (and so cache, state and envs file) is `home`, and returns what it
/// printed, failing the test with what it said on error.
pub fn as_user_at(home: &Path, args: &[&str]) -> String {
    // SAFETY: geteuid has no preconditions.
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &USER_UID.to_string(),
            "--regid",
            &USER_UID.to_string(),
        ])
        .arg("--clear-groups")
        .arg(bin("pincer"));
        c
    } else {
        Command::new(bin("pincer"))
    };
    let out = cmd
        .args(args)
        .env("HOME", home)
        .env("PINCER_STATE_DIR", home.join(".local/state/pincer"))
        .env("PINCER_ENVS", home.join(".config/pincer/envs.toml"))
        .env("USER", "firstname.lastname")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("PINCER_IMAGE_CACHE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pincer {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Gives the directories `dirs` (not what is in them) to the test's user, when the test
/// runs as root.
pub fn give_to_user(dirs: &[&Path]) {
    give_to((USER_UID, USER_UID), dirs);
}

/// The normal user (with a passwd entry, as D-Bus and AT-SPI need) that session tests run
/// a desktop session as when the test runs as root; `./run.sh test` adds it.
pub const SESSION_USER: &str = "pincer-tester";

/// [`SESSION_USER`]'s uid and gid.
pub fn session_user() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .arg(flag)
            .arg(SESSION_USER)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no user {SESSION_USER}: `./run.sh test` adds it (useradd {SESSION_USER})"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    (id("-u"), id("-g"))
}

/// Gives the directories `dirs` (not what is in them) to `(uid, gid)`, when the test runs
/// as root.
pub fn give_to((uid, gid): (u32, u32), dirs: &[&Path]) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let owner = format!("{uid}:{gid}");
    let ok = Command::new("chown")
        .arg(&owner)
        .args(dirs)
        .status()
        .unwrap();
    assert!(ok.success(), "chown {dirs:?}");
}

//! A real, private Slurm cluster on this machine (Debian's slurm-wlm 22.05 and munge): its
//! own munged (own key, socket, pid, log and seed files), one slurmctld and three slurmd
//! (`node1`..`node3`, all on loopback, each on its own free port), its own state, spool and
//! log directories, everything in one temporary directory. Nothing touches the system's
//! munge (`/run/munge`) or Slurm (`/etc/slurm`): clients find the cluster through
//! `SLURM_CONF` ([`Cluster::command`], [`Cluster::env`]) and the cluster's munge socket
//! through the config's `AuthInfo=socket=...`.
//!
//! Each node has one CPU, so one job runs on it at a time (three array tasks run at once,
//! one per node); nodes are virtual, so a job may start as many processes as it likes.
//! Finished jobs stay visible to `squeue --states=all` for `MinJobAge` (300 s); a job
//! whose node dies ends `NODE_FAIL` (no requeue). Jobs run as the submitting user with the
//! submitter's environment. Needs root (slurmd runs jobs as their users).
//!
//! Dropping the cluster cancels every job, waits for their processes to go, then stops
//! the daemons and kills anything the cluster started that is still alive. A cluster that
//! is never dropped (one in a `static`, shared by a test binary's tests) is stopped the
//! same way when the process exits; if the process is killed instead, its daemons still
//! get SIGTERM (`PR_SET_PDEATHSIG`), but running jobs and the temporary directory stay.

use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// How many nodes a cluster has: `node1`..`node3`.
pub const NODES: usize = 3;

/// How long the cluster may take to come up (it takes about 1.5 s).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running cluster. Dropping it (or the process exiting) cancels every job (waiting up
/// to 20 s for them to end), stops slurmd, slurmctld and munged, SIGKILLs what jobs left
/// behind (any other process with this cluster's `SLURM_CONF` in its environment or its
/// logs open, and the sessions of those, sparing the caller's own session) and removes
/// the temporary directory.
#[derive(Debug)]
pub struct Cluster {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The temporary directory's path; the directory goes when `tempdir` is taken.
    dir: PathBuf,
    tempdir: Mutex<Option<tempfile::TempDir>>,
    conf: PathBuf,
    daemons: Mutex<Daemons>,
}

#[derive(Debug)]
struct Daemons {
    munged: Option<Child>,
    slurmctld: Option<Child>,
    /// `slurmd[k]` runs `node{k+1}`; `None` once killed.
    slurmd: Vec<Option<Child>>,
}

impl Cluster {
    /// Starts a cluster and waits until its three nodes are idle; panics with the daemons'
    /// logs if they are not within 30 s.
    pub fn start() -> Self {
        Self::start_with_hidden(None)
    }

    /// [`Cluster::start`], but node `n` (1..=3) sees an empty directory at `dir` (its
    /// slurmd runs in a mount namespace of its own with a tmpfs there): a node that does
    /// not share a file system the others do.
    pub fn start_hiding(n: usize, dir: &Path) -> Self {
        Self::start_with_hidden(Some((n, dir)))
    }

    fn start_with_hidden(hidden: Option<(usize, &Path)>) -> Self {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "a Slurm test cluster needs root (slurmd runs jobs as their users)"
        );
        let tempdir = tempfile::Builder::new()
            .prefix("pincer-slurm-")
            .tempdir()
            .unwrap();
        let d = tempdir.path().to_path_buf();
        for sub in ["munge", "state", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        for k in 1..=NODES {
            std::fs::create_dir_all(d.join(format!("spool/node{k}"))).unwrap();
        }
        let socket = d.join("munge/munge.socket");
        let conf = d.join("slurm.conf");
        std::fs::write(&conf, config(&d, &socket, &free_ports(NODES + 1))).unwrap();
        let cluster = Self {
            inner: Arc::new(Inner {
                dir: d.clone(),
                tempdir: Mutex::new(Some(tempdir)),
                conf,
                daemons: Mutex::new(Daemons {
                    munged: None,
                    slurmctld: None,
                    slurmd: Vec::new(),
                }),
            }),
        };
        // From here on a panic drops `cluster`, which stops whatever did start, and so
        // does the process exiting while the cluster is alive.
        lock(&LIVE).push(cluster.inner.clone());
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(stop_live_clusters);
        });

        // munge: a fresh 1024-bit key, readable by root only.
        let key = d.join("munge/munge.key");
        let mut bytes = [0u8; 128];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut bytes)
            .unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&key)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes))
            .unwrap();
        let mut munged = Command::new("munged");
        munged
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--pid-file={}",
                d.join("munge/munged.pid").display()
            ))
            .arg(format!("--log-file={}", d.join("log/munged.log").display()))
            .arg(format!(
                "--seed-file={}",
                d.join("munge/munged.seed").display()
            ));
        cluster.daemons().munged = Some(spawn(munged, &d.join("log/munged.out")));
        let deadline = Instant::now() + Duration::from_secs(5);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "munged did not create {}\n{}",
                socket.display(),
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }

        let mut slurmctld = cluster.command("slurmctld");
        slurmctld.args(["-D", "-i", "-f"]).arg(cluster.conf());
        cluster.daemons().slurmctld = Some(spawn(slurmctld, &d.join("log/slurmctld.out")));
        for k in 1..=NODES {
            let mut slurmd = match hidden {
                Some((n, dir)) if n == k => {
                    let mut c = cluster.command("unshare");
                    c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                        .arg(r#"mount -t tmpfs pincer-hidden "$0" && exec "$@""#)
                        .arg(dir)
                        .arg("slurmd");
                    c
                }
                _ => cluster.command("slurmd"),
            };
            slurmd
                .args(["-D", "-N", &format!("node{k}"), "-f"])
                .arg(cluster.conf());
            let child = spawn(slurmd, &d.join(format!("log/slurmd-node{k}.out")));
            cluster.daemons().slurmd.push(Some(child));
        }
        cluster.wait_idle();
        cluster
    }

    /// The cluster's `slurm.conf`.
    pub fn conf(&self) -> &Path {
        &self.inner.conf
    }

    /// What a client of the cluster needs in its environment: `SLURM_CONF`.
    pub fn env(&self) -> Vec<(String, String)> {
        self.inner.env()
    }

    /// `program` (`sbatch`, `squeue`, `scancel`, `sinfo`, ...) talking to this cluster.
    pub fn command(&self, program: &str) -> Command {
        self.inner.command(program)
    }

    /// Kills node `n`'s (1..=3) slurmd and every job step running on it, as if the machine
    /// had died: slurmctld marks the node down when it stops answering (after about
    /// `SlurmdTimeout`, 10 s, up to 30 s in all) and its jobs end `NODE_FAIL`.
    pub fn kill_node(&self, n: usize) {
        assert!(
            (1..=NODES).contains(&n),
            "no node{n}: nodes are 1..={NODES}"
        );
        let slurmd = self.daemons().slurmd[n - 1].take();
        if let Some(mut slurmd) = slurmd {
            let _ = slurmd.kill();
            let _ = slurmd.wait();
        }
        let log = self.inner.dir.join(format!("log/slurmd-node{n}.log"));
        let conf = self.inner.conf_entry();
        let node = env_entry("SLURMD_NODENAME", &format!("node{n}"));
        // A node's slurmstepds hold its slurmd log open (their environment cannot be read
        // from /proc: they overwrite it with their title); its jobs' processes have the
        // node's name in theirs.
        kill_leftovers(|p| p.has_open(&log) || (p.has_env(&conf) && p.has_env(&node)));
    }

    /// The daemons' logs (the ends of them), for a failing test's message.
    pub fn logs(&self) -> String {
        let mut names: Vec<_> = std::fs::read_dir(self.inner.dir.join("log"))
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        names.sort();
        let mut out = String::new();
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            out += &format!("--- {}\n{}\n", path.display(), tail.join("\n"));
        }
        out
    }

    fn daemons(&self) -> MutexGuard<'_, Daemons> {
        lock(&self.inner.daemons)
    }

    /// Waits until `sinfo` reports every node idle.
    fn wait_idle(&self) {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        loop {
            if let Some(gone) = self.exited_daemon() {
                panic!("{gone} exited while the cluster started\n{}", self.logs());
            }
            if let Ok(out) = self
                .command("sinfo")
                .args(["-h", "-N", "-o", "%N %T"])
                .output()
            {
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                let idle = last
                    .lines()
                    .filter(|l| l.split_whitespace().nth(1) == Some("idle"))
                    .count();
                if idle == NODES {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the Slurm cluster was not idle within {START_TIMEOUT:?}; sinfo said:\n{last}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The name of a daemon that has exited, if one has.
    fn exited_daemon(&self) -> Option<String> {
        let mut d = self.daemons();
        let Daemons {
            munged,
            slurmctld,
            slurmd,
        } = &mut *d;
        let named = [
            ("munged".to_string(), munged),
            ("slurmctld".to_string(), slurmctld),
        ]
        .into_iter()
        .chain(
            slurmd
                .iter_mut()
                .enumerate()
                .map(|(k, c)| (format!("slurmd node{}", k + 1), c)),
        );
        for (name, child) in named {
            if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
                return Some(format!("{name} ({status})"));
            }
        }
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.inner.stop();
        lock(&LIVE).retain(|c| !Arc::ptr_eq(c, &self.inner));
    }
}

/// The clusters started and not yet dropped, stopped when the process exits.
static LIVE: Mutex<Vec<Arc<Inner>>> = Mutex::new(Vec::new());

/// Registers [`stop_live_clusters`] with `atexit` once.
static AT_EXIT: Once = Once::new();

extern "C" fn stop_live_clusters() {
    let live = std::mem::take(&mut *lock(&LIVE));
    for cluster in live {
        let _ = std::panic::catch_unwind(|| cluster.stop());
    }
}

/// The lock, even if a panic poisoned it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn env(&self) -> Vec<(String, String)> {
        vec![(
            "SLURM_CONF".to_string(),
            self.conf.to_string_lossy().into_owned(),
        )]
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.envs(self.env());
        c
    }

    /// `SLURM_CONF=...`, in the environment of every job's processes (sbatch passes the
    /// submitter's environment on).
    fn conf_entry(&self) -> Vec<u8> {
        env_entry("SLURM_CONF", &self.conf.to_string_lossy())
    }

    /// Cancels every job, stops the daemons, kills what jobs left and removes the
    /// directory; does nothing the second time.
    fn stop(&self) {
        let mut daemons = lock(&self.daemons);
        let slurmctld_up = matches!(
            daemons.slurmctld.as_mut().map(|c| c.try_wait()),
            Some(Ok(None))
        );
        if slurmctld_up {
            self.cancel_all();
        }
        let Daemons {
            munged,
            slurmctld,
            slurmd,
        } = &mut *daemons;
        for child in slurmd.iter_mut().chain([slurmctld, munged]) {
            if let Some(c) = child.take() {
                stop(c);
            }
        }
        drop(daemons);
        // Job steps, and job processes that outlived their jobs (a daemon a job started
        // leaves the process tree slurmd tracks, but keeps the job's environment).
        let (logs, conf) = (self.dir.join("log"), self.conf_entry());
        kill_leftovers(|p| p.has_open_under(&logs) || p.has_env(&conf));
        lock(&self.tempdir).take();
    }

    /// Cancels every job and waits (up to 20 s: `KillWait` is 5) until none is left.
    fn cancel_all(&self) {
        let jobs = |args: &[&str]| -> Vec<String> {
            self.command("squeue")
                .args(args)
                .stderr(Stdio::null())
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        // Pending, running, completing, ... (squeue's default states), one id per array.
        let ids = jobs(&["-h", "-o", "%F"]);
        if ids.is_empty() {
            return;
        }
        let _ = self
            .command("scancel")
            .args(&ids)
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !jobs(&["-h", "-o", "%i"]).is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The cluster's `slurm.conf`: `ports[0]` for slurmctld, `ports[k]` for `node{k}`.
fn config(dir: &Path, munge_socket: &Path, ports: &[u16]) -> String {
    let d = dir.display();
    let host = hostname();
    let mut conf = format!(
        "\
ClusterName=pincer
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/spool/%n/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/linear
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=30
MinJobAge=300
KillWait=5
MaxArraySize=1001
JobRequeue=0
InactiveLimit=0
Waittime=0
",
        ctld_port = ports[0],
        socket = munge_socket.display(),
    );
    for (k, port) in (1..=NODES).zip(&ports[1..]) {
        conf += &format!(
            "NodeName=node{k} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=1 State=UNKNOWN\n"
        );
    }
    conf += &format!(
        "PartitionName=main Nodes=node[1-{NODES}] Default=YES MaxTime=INFINITE State=UP\n"
    );
    conf
}

/// `n` distinct TCP ports nothing listens on now.
fn free_ports(n: usize) -> Vec<u16> {
    // Held together so they differ, released before the daemons bind them.
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("0.0.0.0:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

/// This machine's short host name: slurmctld must find itself in `SlurmctldHost` and
/// each slurmd in `NodeHostname`.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname");
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or(&name).to_string()
}

/// Starts a daemon in the foreground, in its own process group, its output in `log`. It
/// gets SIGTERM when the process dies: it is started from a thread that lives as long as
/// the process (`PR_SET_PDEATHSIG` fires when the thread that started a child exits).
fn spawn(mut cmd: Command, log: &Path) -> Child {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let out = std::fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0);
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let program = cmd.get_program().to_owned();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("slurm-daemons".to_string())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    let (tx, rx) = mpsc::channel();
    lock(spawner).send((cmd, tx)).unwrap();
    rx.recv()
        .unwrap()
        .unwrap_or_else(|e| panic!("start {program:?}: {e}"))
}

/// SIGTERM, up to 5 s to exit, then SIGKILL; reaped either way.
fn stop(mut child: Child) {
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn env_entry(name: &str, value: &str) -> Vec<u8> {
    format!("{name}={value}").into_bytes()
}

/// A process: its id, its session, its environment's `NAME=value` entries and the
/// files it has open.
struct Proc {
    pid: i32,
    session: i32,
    env: Vec<Vec<u8>>,
    files: Vec<PathBuf>,
}

impl Proc {
    fn has_env(&self, entry: &[u8]) -> bool {
        self.env.iter().any(|e| e == entry)
    }

    fn has_open(&self, file: &Path) -> bool {
        self.files.iter().any(|f| f == file)
    }

    fn has_open_under(&self, dir: &Path) -> bool {
        self.files.iter().any(|f| f.starts_with(dir))
    }
}

/// Every live process but this one.
fn processes() -> Vec<Proc> {
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        if pid == me {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid pgrp session ...`; comm may hold spaces and parentheses.
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None; // dead, waiting to be reaped
        }
        let session = fields.get(3)?.parse().ok()?;
        let env = std::fs::read(format!("/proc/{pid}/environ"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .map(<[u8]>::to_vec)
            .collect();
        let files = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|rd| {
                rd.filter_map(|f| std::fs::read_link(f.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        Some(Proc {
            pid,
            session,
            env,
            files,
        })
    })
    .collect()
}

/// SIGKILLs every process `marked` picks, and every process in such a process's session (a
/// job step's session holds its job's processes), sparing this process and its session;
/// again until none is left.
fn kill_leftovers(marked: impl Fn(&Proc) -> bool) {
    let my_session = unsafe { libc::getsid(0) };
    for _ in 0..10 {
        let procs = processes();
        let sessions: Vec<i32> = procs
            .iter()
            .filter(|p| marked(p) && p.session != my_session && p.session > 1)
            .map(|p| p.session)
            .collect();
        let victims: Vec<i32> = procs
            .iter()
            .filter(|p| marked(p) || sessions.contains(&p.session))
            .map(|p| p.pid)
            .collect();
        if victims.is_empty() {
            return;
        }
        for pid in victims {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

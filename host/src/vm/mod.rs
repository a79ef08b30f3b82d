//! QEMU VMs from built images (`pincer vm`). A VM runs from its image's golden state
//! (`golden`): `up` and `reset` both start a `qemu-system-x86_64` (`qemu`) paused, restore
//! the saved machine into a fresh disk overlay over QMP (`qmp`), give the guest the host's
//! time over the clock channel, and wait for its agent. A reset throws the old process and
//! overlay away, so nothing a task did survives it. Each VM is registered in the envs file
//! like any environment (its agent's pinned certificate and token, over the TCP transport
//! that an isolated guest's network allows), so every command works on it unchanged.
//!
//! A VM a program starts for its own use (`UpOptions::lifeline`: a run's VMs) ends with the
//! program, however it ends: `supervise` watches the program's lifeline and stops the VM as
//! `down` would. `pincer vm up`'s VMs have none and outlive the command.

pub mod golden;
pub mod qemu;
pub mod qmp;
mod supervise;

pub use supervise::supervise;

use crate::env::registry::{EnvEntry, Registry, RegistryError, VmEntry};
use crate::env::{Deadlines, Environment, Transport};
use crate::image::{Cache, Firmware, Image, ImageError};
use crate::process::Process;
use golden::Golden;
use qemu::{Accel, Machine, Ram};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};

/// Why a VM could not be started, reset or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VmError {
    /// The image is not built (or its recipe is wrong).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A name that cannot be a VM's.
    #[error("'{0}' is not a valid VM name: use letters, digits, '-' and '_' (at most 64)")]
    InvalidName(String),
    /// A VM of that name runs already.
    #[error(
        "VM '{name}' is already up (QEMU pid {pid}, agent on 127.0.0.1:{port}): `pincer vm reset {name}` or `pincer vm down {name}` first"
    )]
    AlreadyUp {
        /// The name.
        name: String,
        /// Its QEMU.
        pid: u32,
        /// Its forwarded port.
        port: u16,
    },
    /// No VM of that name.
    #[error("no VM named '{name}'{}", if known.is_empty() { " (none is up)".to_owned() } else { format!(": up are {}", known.join(", ")) })]
    NotFound {
        /// The name asked for.
        name: String,
        /// VMs that exist.
        known: Vec<String>,
    },
    /// The golden state could not be made.
    #[error("the golden state of image '{image}' could not be made: {why}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Golden {
        /// The image.
        image: String,
        /// What went wrong.
        why: String,
        /// QEMU's output and the guest's console, last lines.
        log: String,
    },
    /// QEMU stopped or failed while starting the VM.
    #[error("VM '{name}': {why}{}", if log.is_empty() { String::new() } else { format!("\n{log}") })]
    Start {
        /// The VM.
        name: String,
        /// What went wrong.
        why: String,
        /// QEMU's output and the guest's console, last lines.
        log: String,
    },
    /// The envs file.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Reading or writing the VM's files failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Maps an OS error to [`VmError::Io`] saying what was being done.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> VmError {
    let what = what.into();
    move |source| VmError::Io { what, source }
}

/// What `vm up` is asked for.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The VM's name (and its environment's).
    pub name: String,
    /// The image.
    pub image: String,
    /// Guest memory, MiB; `None`: the image's default
    /// ([`Manifest::default_memory_mib`](crate::image::Manifest::default_memory_mib)),
    /// within [`MEMORY_MIB`](crate::image::MEMORY_MIB).
    pub memory_mib: Option<u32>,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The agent to run in it.
    pub agent: PathBuf,
    /// Tie the VM to this process (the desktops' lifeline, `supervise`): when the process
    /// is gone, however it ended, the VM stops and is removed as by `down`. Off for VMs
    /// meant to outlive their command (`pincer vm up`).
    pub lifeline: bool,
}

/// A VM's record, `vm.json` in its directory: everything a reset needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VmState {
    /// Its name.
    pub name: String,
    /// The image it runs.
    pub image: String,
    /// The image's directory.
    pub image_dir: PathBuf,
    /// The golden state it restores.
    pub golden: PathBuf,
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The accelerator.
    pub accel: Accel,
    /// The host port forwarded to the agent.
    pub port: u16,
    /// QEMU's pid.
    pub pid: u32,
}

/// How long a start or reset took, by part.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Timing {
    /// Making the golden state (0 when it existed).
    pub golden_s: f64,
    /// Starting QEMU and restoring the saved machine.
    pub restore_s: f64,
    /// Setting the guest's clock.
    pub clock_s: f64,
    /// Until the agent answered.
    pub ready_s: f64,
    /// The guest clock minus the host's right after, seconds.
    pub clock_offset_s: f64,
}

/// A VM that is up, as `vm up` and `vm list` report it.
#[derive(Debug, Clone)]
pub struct Up {
    /// Its record.
    pub state: VmState,
    /// How long it took.
    pub timing: Timing,
    /// Which accelerator and why.
    pub accel_reason: String,
}

/// Directory of a VM.
pub fn dir_of(name: &str) -> PathBuf {
    crate::paths::state_dir().join("vms").join(name)
}

fn valid_name(name: &str) -> Result<(), VmError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(VmError::InvalidName(name.into()))
    }
}

fn read_state(name: &str) -> Option<VmState> {
    read_state_in(&dir_of(name))
}

/// The record in a VM's directory.
fn read_state_in(dir: &Path) -> Option<VmState> {
    let text = std::fs::read_to_string(dir.join("vm.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn write_state(st: &VmState) -> Result<(), VmError> {
    let p = dir_of(&st.name).join("vm.json");
    let tmp = p.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(st).unwrap_or_default())
        .map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &p).map_err(io(format!("writing {}", p.display())))
}

/// Every VM with a record, and whether its QEMU runs.
pub fn list() -> Vec<(VmState, bool)> {
    let Ok(entries) = std::fs::read_dir(crate::paths::state_dir().join("vms")) else {
        return Vec::new();
    };
    let mut out: Vec<(VmState, bool)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| read_state(&e.file_name().to_string_lossy()))
        .map(|st| {
            let up = running(&st).is_some();
            (st, up)
        })
        .collect();
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    out
}

/// A fresh qcow2 overlay over `backing`.
pub(crate) fn overlay(backing: &Path, out: &Path) -> Result<(), VmError> {
    let _ = std::fs::remove_file(out);
    let o = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(backing)
        .arg(out)
        .output()
        .map_err(io("running qemu-img (install qemu-utils)"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(io(format!("qemu-img create {}", out.display()))(
            std::io::Error::other(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
        ))
    }
}

/// A TCP port on 127.0.0.1 that is free now.
pub(crate) fn free_port() -> Result<u16, VmError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

/// Quotes a path for QEMU's `exec:` migration URIs (run by `sh -c`).
pub(crate) fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The last lines of QEMU's log and the guest's console, for errors.
pub(crate) fn tail_of(log: &Path, serial: &Path) -> String {
    let tail = |p: &Path, n: usize| {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    let q = tail(log, 15);
    let s = tail(serial, 15);
    let mut out = String::new();
    if !q.trim().is_empty() {
        out.push_str(&format!("QEMU said:\n{q}\n"));
    }
    if !s.trim().is_empty() {
        out.push_str(&format!("the guest's console:\n{s}"));
    }
    out
}

/// How a machine of `image` boots; `vars` is where that machine's own UEFI variable store
/// is (used only by imported UEFI disks).
pub(crate) fn boot_of(image: &Image, vars: PathBuf) -> qemu::Boot {
    match image.manifest.firmware {
        Firmware::Kernel => qemu::Boot::Kernel {
            kernel: image.kernel(),
            initrd: image.initrd(),
        },
        Firmware::Bios => qemu::Boot::Bios,
        Firmware::Uefi => qemu::Boot::Uefi {
            code: crate::image::import::OVMF_CODE.into(),
            vars,
        },
    }
}

/// Copies `from` to `to` as a file QEMU may write (golden files are read-only).
pub(crate) fn writable_copy(from: &Path, to: &Path) -> Result<(), VmError> {
    use std::os::unix::fs::PermissionsExt as _;
    let _ = std::fs::remove_file(to);
    std::fs::copy(from, to).map_err(io(format!("copying {}", from.display())))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o644))
        .map_err(io(format!("setting the mode of {}", to.display())))
}

fn machine_of(st: &VmState, golden: &Golden, image: &Image) -> Machine {
    Machine {
        name: st.name.clone(),
        memory_mib: st.memory_mib,
        cpus: st.cpus,
        accel: st.accel,
        boot: boot_of(image, dir_of(&st.name).join("efivars.fd")),
        disk: dir_of(&st.name).join("disk.qcow2"),
        agent_disk: golden.agent_disk(),
        ram: Ram {
            path: golden.ram(),
            shared: false,
        },
        port: st.port,
        dir: dir_of(&st.name),
        incoming: true,
    }
}

/// Starts a VM from its image's golden state (made first if needed) and registers it.
pub async fn up(
    reg: &Registry,
    cache: &Cache,
    opts: &UpOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Up, VmError> {
    valid_name(&opts.name)?;
    if let Some(st) = read_state(&opts.name)
        && running(&st).is_some()
    {
        return Err(VmError::AlreadyUp {
            name: opts.name.clone(),
            pid: st.pid,
            port: st.port,
        });
    }
    if reg
        .load()?
        .envs
        .get(&opts.name)
        .is_some_and(|e| e.vm.is_none())
    {
        return Err(VmError::Start {
            name: opts.name.clone(),
            why: "the envs file has another environment of that name: pick another name".into(),
            log: String::new(),
        });
    }
    let image = cache.get(&opts.image)?;
    crate::image::build::need_tool("qemu-system-x86_64", "qemu-system-x86")?;
    crate::image::build::need_tool("qemu-img", "qemu-utils")?;
    if image.manifest.firmware == Firmware::Uefi
        && !Path::new(crate::image::import::OVMF_CODE).exists()
    {
        return Err(ImageError::MissingTool {
            tool: crate::image::import::OVMF_CODE.into(),
            package: "ovmf".into(),
        }
        .into());
    }
    let memory_mib = opts
        .memory_mib
        .unwrap_or_else(|| image.manifest.default_memory_mib());
    let (accel, accel_reason) = crate::accel::probe_accel();
    let t = Instant::now();
    let golden = golden::ensure(
        &image,
        &golden::Spec {
            memory_mib,
            cpus: opts.cpus,
            accel,
            agent: opts.agent.clone(),
        },
        progress,
    )
    .await?;
    let golden_s = t.elapsed().as_secs_f64();
    let dir = dir_of(&opts.name);
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    if opts.lifeline {
        // Before QEMU starts, so that no moment of its life is left uncovered.
        supervise::start(&dir, Some((&opts.name, reg)))?;
    }
    let mut st = VmState {
        name: opts.name.clone(),
        image: opts.image.clone(),
        image_dir: image.dir.clone(),
        golden: golden.dir.clone(),
        memory_mib,
        cpus: opts.cpus,
        accel,
        port: free_port()?,
        pid: 0,
    };
    let mut timing = start(&mut st, &golden, &image).await?;
    timing.golden_s = golden_s;
    reg.update(|f| {
        f.envs.insert(
            opts.name.clone(),
            EnvEntry {
                addr: Some(format!("127.0.0.1:{}", st.port)),
                listen: None,
                fingerprint: Some(golden.info.fingerprint.clone()),
                token_file: golden.token_file(),
                platform: pincer_shared::Platform::Linux,
                transport: Some(Transport::Tcp),
                desktop: None,
                vm: Some(VmEntry {
                    image: opts.image.clone(),
                    state_dir: dir.clone(),
                }),
            },
        );
    })?;
    Ok(Up {
        state: st,
        timing,
        accel_reason,
    })
}

/// Starts QEMU for `st` from the golden state into a fresh overlay, sets the guest's
/// clock and waits for the agent; records the new pid.
async fn start(st: &mut VmState, golden: &Golden, image: &Image) -> Result<Timing, VmError> {
    let t = Instant::now();
    golden::touch(golden);
    let machine = machine_of(st, golden, image);
    overlay(&golden.disk(), &machine.disk)?;
    if let qemu::Boot::Uefi { vars, .. } = &machine.boot {
        writable_copy(&golden.efi_vars(), vars)?;
    }
    let mut child = machine
        .spawn()
        .map_err(io("starting qemu-system-x86_64 (install qemu-system-x86)"))?;
    st.pid = child.id();
    write_state(st)?;
    let failed = |why: String| VmError::Start {
        name: st.name.clone(),
        why,
        log: tail_of(&machine.log(), &machine.serial_log()),
    };
    // QMP comes up within milliseconds; a QEMU that exits early says why in its log.
    let mut q = loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(failed(format!("QEMU exited at once ({status})")));
        }
        match qmp::Qmp::connect(&machine.qmp_socket()).await {
            Ok(q) => break q,
            Err(_) if t.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => return Err(failed(e.to_string())),
        }
    };
    let restored = async {
        q.ignore_shared_ram().await?;
        q.execute(
            "migrate-incoming",
            json!({"uri": format!("exec:cat {}", sh_quote(&golden.state()))}),
        )
        .await?;
        q.wait_migration(Duration::from_secs(60)).await?;
        q.execute("cont", json!({})).await
    }
    .await;
    if let Err(e) = restored {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed(format!("restoring the golden state: {e}")));
    }
    let restore_s = t.elapsed().as_secs_f64();
    let offset = match set_clock(&machine.clock_socket()).await {
        Ok(o) => o,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed(format!("setting the guest's clock: {e}")));
        }
    };
    let clock_s = t.elapsed().as_secs_f64() - restore_s;
    // QEMU lives on after this command; a thread reaps it if it exits while we still run.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    wait_ready(st, golden).await.map_err(failed)?;
    Ok(Timing {
        golden_s: 0.0,
        restore_s,
        clock_s,
        ready_s: t.elapsed().as_secs_f64(),
        clock_offset_s: offset,
    })
}

/// Answers the guest's "?" on the clock channel with the host's time and returns the
/// guest's clock minus the host's from its acknowledgement.
async fn set_clock(socket: &Path) -> Result<f64, String> {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    let run = async {
        let s = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        let (r, mut w) = s.into_split();
        let mut lines = tokio::io::BufReader::new(r).lines();
        loop {
            let line = lines
                .next_line()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the guest closed the clock channel")?;
            let line = line.trim();
            if line == "?" {
                w.write_all(format!("{:.9}\n", now()).as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
            } else if let Some(t) = line.strip_prefix("ok ") {
                let guest: f64 = t.parse().map_err(|_| format!("a bad answer: {line}"))?;
                return Ok(guest - now());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| "the guest's clock service did not answer within 30 s".to_owned())?
}

/// Waits until the agent answers a ping.
async fn wait_ready(st: &VmState, golden: &Golden) -> Result<(), String> {
    let token =
        pincer_shared::identity::Token::load(&golden.token_file()).map_err(|e| e.to_string())?;
    let spec = crate::env::EnvSpec {
        name: st.name.clone(),
        addr: ([127, 0, 0, 1], st.port).into(),
        fingerprint: golden.info.fingerprint.parse().ok(),
        token,
        transport: Transport::Tcp,
    };
    let deadlines = Deadlines {
        connect: Duration::from_secs(30),
        ..Deadlines::default()
    };
    let env = Environment::connect(spec, deadlines)
        .await
        .map_err(|e| format!("the agent did not answer: {e}"))?;
    env.ping()
        .await
        .map_err(|e| format!("the agent did not answer: {e}"))?;
    Ok(())
}

/// Resets a VM: its QEMU and overlay are thrown away and the golden state restored into a
/// fresh one on the same port, so hosts reconnect by themselves.
pub async fn reset(name: &str) -> Result<Timing, VmError> {
    let mut st = read_state(name).ok_or_else(|| VmError::NotFound {
        name: name.into(),
        known: list().into_iter().map(|(s, _)| s.name).collect(),
    })?;
    // Nothing to save: no polite quit.
    stop_qemu(&dir_of(name), Some(st.pid), false).await;
    let cache = Cache::at(
        st.image_dir
            .parent()
            .map(Path::to_owned)
            .unwrap_or_default(),
    );
    let image = cache.get(&st.image)?;
    let golden = golden::open(&st.golden).ok_or_else(|| VmError::Golden {
        image: st.image.clone(),
        why: format!(
            "{} is gone: `pincer vm down {name}` and up again",
            st.golden.display()
        ),
        log: String::new(),
    })?;
    start(&mut st, &golden, &image).await
}

/// The QEMU of a VM, if it runs: the process its record names, if that is still it.
fn running(st: &VmState) -> Option<Process> {
    qemu::of(&dir_of(&st.name), st.pid)
}

/// Stops the QEMU of the machine in `dir` (`hint`: its recorded pid) and waits until it is
/// gone (its port free again): a QMP `quit` first if `polite`, else at once SIGKILL. Only
/// that QEMU is signalled, never a process that merely got its pid ([`Process`]).
async fn stop_qemu(dir: &Path, hint: Option<u32>, polite: bool) {
    // A QEMU spawned a moment ago may still be inside execve, its command line not yet
    // readable: look again briefly before concluding there is none.
    let mut found = qemu::find(dir, hint);
    for _ in 0..3 {
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        found = qemu::find(dir, hint);
    }
    let Some(qemu) = found else {
        return;
    };
    if polite {
        // QEMU has nothing to save.
        if let Ok(mut q) = qmp::Qmp::connect(&qemu::qmp_socket(dir)).await {
            let _ = q.execute("quit", json!({})).await;
        }
        if qemu.exited_within(Duration::from_secs(3)).await {
            return;
        }
    }
    qemu.signal(libc::SIGKILL);
    qemu.exited_within(Duration::from_secs(10)).await;
}

/// Stops the QEMU of the machine in `dir` and removes its files and sockets.
async fn discard(dir: &Path, hint: Option<u32>) -> Result<(), VmError> {
    stop_qemu(dir, hint, true).await;
    qemu::remove_sockets(dir);
    std::fs::remove_dir_all(dir).map_err(io(format!("removing {}", dir.display())))
}

/// Stops a VM, removes its files and its envs entry.
pub async fn down(reg: &Registry, name: &str) -> Result<VmState, VmError> {
    valid_name(name)?;
    let st = read_state(name).ok_or_else(|| VmError::NotFound {
        name: name.into(),
        known: list().into_iter().map(|(s, _)| s.name).collect(),
    })?;
    remove(reg, name, &dir_of(name), Some(st.pid)).await?;
    Ok(st)
}

/// `down`'s work on the VM `name` in `dir` (`hint`: its QEMU's recorded pid): QEMU, the
/// directory (overlay, record, sockets, logs), the envs entry if it is this VM's.
async fn remove(reg: &Registry, name: &str, dir: &Path, hint: Option<u32>) -> Result<(), VmError> {
    discard(dir, hint).await?;
    reg.update(|f| {
        if f.envs
            .get(name)
            .and_then(|e| e.vm.as_ref())
            .is_some_and(|v| v.state_dir == dir)
        {
            f.envs.remove(name);
        }
        if f.default.as_deref() == Some(name) && !f.envs.contains_key(name) {
            f.default = None;
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(valid_name("vm-1_a").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(65)] {
            assert!(
                matches!(valid_name(bad), Err(VmError::InvalidName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn paths_are_quoted_for_the_shell() {
        assert_eq!(sh_quote(Path::new("/a b/it's")), "'/a b/it'\\''s'");
    }
}

//! One `qemu-system-x86_64` process: its command line (direct kernel boot for built images,
//! the disk's own bootloader under SeaBIOS or OVMF for imported ones, the root disk as a
//! qcow2 overlay, the agent's disk, user-mode networking that reaches nothing but the
//! agent's forwarded TCP port on 127.0.0.1, the clock's virtio-serial port, QMP on a unix
//! socket), the accelerator ([`crate::accel`]), and starting it detached from the caller.

pub use crate::accel::Accel;
use crate::process::Process;
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Guest RAM kept in a file: the golden boot writes it (shared), restores map it privately
/// (copy on write), so a restore reads only the pages the guest touches and every VM of an
/// image shares the rest through the page cache.
#[derive(Debug, Clone)]
pub struct Ram {
    /// The file.
    pub path: PathBuf,
    /// Whether guest writes go to the file (only while making the golden state).
    pub shared: bool,
}

/// How the guest boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// A kernel and initrd given to QEMU (images built from recipes).
    Kernel {
        /// The kernel.
        kernel: PathBuf,
        /// Its initrd.
        initrd: PathBuf,
    },
    /// The disk's own bootloader under SeaBIOS (an imported BIOS disk).
    Bios,
    /// The disk's own bootloader under OVMF (an imported UEFI disk).
    Uefi {
        /// OVMF's code (read-only).
        code: PathBuf,
        /// The machine's own copy of the UEFI variable store (written by the firmware).
        vars: PathBuf,
    },
}

/// Everything one QEMU process is started with.
#[derive(Debug, Clone)]
pub struct Machine {
    /// A name for `ps` and QEMU's window title.
    pub name: String,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The accelerator.
    pub accel: Accel,
    /// How it boots.
    pub boot: Boot,
    /// The root disk (a qcow2 overlay of this VM's own).
    pub disk: PathBuf,
    /// The agent's disk (raw ext4, read-only).
    pub agent_disk: PathBuf,
    /// Where guest RAM lives.
    pub ram: Ram,
    /// The host's TCP port on 127.0.0.1 forwarded to the agent (guest port 7000).
    pub port: u16,
    /// Directory for the serial log and QEMU's own log; the QMP and clock sockets are in
    /// its short socket directory ([`crate::paths::socket_dir`]).
    pub dir: PathBuf,
    /// Start paused, waiting for a saved state (`migrate-incoming`).
    pub incoming: bool,
}

/// The guest's agent port.
pub const GUEST_PORT: u16 = 7000;

impl Machine {
    /// QMP's socket.
    pub fn qmp_socket(&self) -> PathBuf {
        qmp_socket(&self.dir)
    }

    /// The clock channel's socket.
    pub fn clock_socket(&self) -> PathBuf {
        crate::paths::socket_dir(&self.dir).join("clock.sock")
    }

    /// QEMU's stderr.
    pub fn log(&self) -> PathBuf {
        self.dir.join("qemu.log")
    }

    /// The guest's serial console.
    pub fn serial_log(&self) -> PathBuf {
        self.dir.join("serial.log")
    }

    /// The arguments of `qemu-system-x86_64`.
    pub fn args(&self) -> Vec<OsString> {
        let p = |path: &Path| path.display().to_string();
        let mut a: Vec<String> = vec![
            "-nodefaults".into(),
            "-no-user-config".into(),
            "-name".into(),
            format!("pincer-{},process=pincer-{}", self.name, self.name),
            "-machine".into(),
            "pc,memory-backend=pc.ram".into(),
            "-object".into(),
            format!(
                "memory-backend-file,id=pc.ram,size={}M,mem-path={},share={}",
                self.memory_mib,
                p(&self.ram.path),
                if self.ram.shared { "on" } else { "off" }
            ),
            "-m".into(),
            format!("{}M", self.memory_mib),
            "-smp".into(),
            self.cpus.to_string(),
        ];
        match self.accel {
            Accel::Kvm => a.extend(["-accel".into(), "kvm".into(), "-cpu".into(), "host".into()]),
            Accel::Tcg => a.extend([
                "-accel".into(),
                "tcg,thread=multi".into(),
                "-cpu".into(),
                "max".into(),
            ]),
        }
        a.extend(["-display".into(), "none".into()]);
        match &self.boot {
            Boot::Kernel { kernel, initrd } => a.extend([
                "-vga".into(),
                "none".into(),
                "-kernel".into(),
                p(kernel),
                "-initrd".into(),
                p(initrd),
                "-append".into(),
                "root=/dev/vda rw console=ttyS0 quiet pincer.agent_disk".into(),
            ]),
            // A user's own system expects a graphics card (a display manager needs one).
            Boot::Bios => a.extend(["-vga".into(), "std".into()]),
            Boot::Uefi { code, vars } => a.extend([
                "-vga".into(),
                "std".into(),
                "-drive".into(),
                format!("if=pflash,format=raw,unit=0,readonly=on,file={}", p(code)),
                "-drive".into(),
                format!("if=pflash,format=raw,unit=1,file={}", p(vars)),
            ]),
        }
        a.extend([
            "-drive".into(),
            format!(
                "file={},if=none,id=root,format=qcow2,cache=unsafe,discard=unmap",
                p(&self.disk)
            ),
            "-device".into(),
            "virtio-blk-pci,drive=root".into(),
            "-drive".into(),
            format!(
                "file={},if=none,id=agent,format=raw,readonly=on",
                p(&self.agent_disk)
            ),
            "-device".into(),
            "virtio-blk-pci,drive=agent,serial=pincer-agent".into(),
            // Isolated: the guest reaches nothing, not even the host; only the agent's
            // port is forwarded, on the host's loopback. TCP because libslirp drops every
            // UDP packet an isolated guest sends, replies to forwarded ones too.
            "-netdev".into(),
            format!(
                "user,id=net,restrict=on,hostfwd=tcp:127.0.0.1:{}-:{GUEST_PORT}",
                self.port
            ),
            "-device".into(),
            "virtio-net-pci,netdev=net".into(),
            "-device".into(),
            "virtio-serial-pci".into(),
            "-chardev".into(),
            format!(
                "socket,id=clock,path={},server=on,wait=off",
                p(&self.clock_socket())
            ),
            "-device".into(),
            "virtserialport,chardev=clock,name=org.pincer.clock".into(),
            "-chardev".into(),
            format!("file,id=serial,path={}", p(&self.serial_log())),
            "-serial".into(),
            "chardev:serial".into(),
            "-qmp".into(),
            qmp_arg(&self.dir),
        ]);
        if self.incoming {
            a.extend(["-incoming".into(), "defer".into(), "-S".into()]);
        }
        a.into_iter().map(OsString::from).collect()
    }

    /// Starts QEMU in a session of its own (it outlives the command that started it), its
    /// output into [`Machine::log`].
    pub fn spawn(&self) -> std::io::Result<Child> {
        crate::paths::make_socket_dir(&self.dir)?;
        for s in [self.qmp_socket(), self.clock_socket()] {
            let _ = std::fs::remove_file(s);
        }
        let log = std::fs::File::create(self.log())?;
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args(self.args())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn()
    }
}

/// The `-qmp` argument of the QEMU of the machine in `dir`: no other process has it on its
/// command line, so it names that QEMU ([`Running`]).
fn qmp_arg(dir: &Path) -> String {
    format!("unix:{},server=on,wait=off", qmp_socket(dir).display())
}

/// The QMP socket of the machine in `dir`.
pub fn qmp_socket(dir: &Path) -> PathBuf {
    crate::paths::socket_dir(dir).join("qmp.sock")
}

/// Removes the sockets of the machine in `dir` and their directory, once its QEMU is gone.
pub fn remove_sockets(dir: &Path) {
    let sockets = crate::paths::socket_dir(dir);
    for s in ["qmp.sock", "clock.sock"] {
        let _ = std::fs::remove_file(sockets.join(s));
    }
    let _ = std::fs::remove_dir(sockets);
}

/// The live QEMU of the machine in `dir` if it is process `pid` (a pid in a record may
/// have been given to any process since): known by its `-qmp` argument, which no other
/// process has, and held by a pidfd.
pub fn of(dir: &Path, pid: u32) -> Option<Process> {
    Process::of(pid, &[&qmp_arg(dir)])
}

/// The live QEMU of the machine in `dir`: process `hint` (its record's pid) if that is it,
/// else any process with the machine's QMP socket on its command line (one started before
/// its record was written).
pub fn find(dir: &Path, hint: Option<u32>) -> Option<Process> {
    Process::find(&[&qmp_arg(dir)], hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        Machine {
            name: "t".into(),
            memory_mib: 1024,
            cpus: 2,
            accel: Accel::Tcg,
            boot: Boot::Kernel {
                kernel: "/i/vmlinuz".into(),
                initrd: "/i/initrd.img".into(),
            },
            disk: "/v/disk.qcow2".into(),
            agent_disk: "/g/agent.img".into(),
            ram: Ram {
                path: "/g/memory.ram".into(),
                shared: false,
            },
            port: 17000,
            dir: "/v".into(),
            incoming: true,
        }
    }

    #[test]
    fn the_guest_reaches_nothing_but_its_forwarded_port() {
        let args: Vec<String> = machine()
            .args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let net = args.iter().find(|a| a.starts_with("user,")).unwrap();
        assert_eq!(
            net,
            "user,id=net,restrict=on,hostfwd=tcp:127.0.0.1:17000-:7000"
        );
        assert!(args.iter().any(|a| a.contains("share=off")));
        assert!(args.windows(2).any(|w| w == ["-incoming", "defer"]));
        assert!(args.iter().any(|a| a == "tcg,thread=multi"));
        assert!(args.iter().any(|a| a.contains("serial=pincer-agent")));
    }

    #[test]
    fn a_qemu_is_found_by_its_directory_and_a_dead_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        // A stand-in with the machine's `-qmp` argument on its command line ($0 of sh).
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30"])
            .arg(qmp_arg(dir.path()))
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(of(other.path(), pid).is_none());
        assert!(of(dir.path(), std::process::id()).is_none());
        // Right after spawn the child may still be inside execve, its command line not
        // readable yet: look until it is.
        let found = (0..500)
            .find_map(|_| {
                find(dir.path(), None).or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                })
            })
            .expect("the stand-in is found by its -qmp argument");
        assert_eq!(found.pid(), pid);
        let by_record = of(dir.path(), pid).unwrap();
        assert!(!by_record.exited());
        by_record.signal(libc::SIGKILL);
        child.wait().unwrap();
        assert!(by_record.exited());
        assert!(find(dir.path(), Some(pid)).is_none());
    }
}

//! A stand-in for the adb server (no Android device can run on this machine): it speaks
//! the adb server protocol on a loopback port, as `adb start-server` does, for one or more
//! stand-in devices. A stand-in device is this machine: its shell runs `sh -c` with a
//! directory of stand-in Android commands (which replay outputs recorded from real
//! devices) first on `PATH`, pushes write the paths they name, and forwards connect to the
//! host's own loopback. `pincer android` and the shim cannot tell it from a real server.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// A stand-in device.
#[derive(Debug, Clone)]
pub struct StandInDevice {
    /// Its serial.
    pub serial: String,
    /// `device`, `offline`, `unauthorized`.
    pub state: String,
    /// Its `devices-l` details (`model:Pixel_7`).
    pub details: String,
    /// The directory of stand-in Android commands put first on `PATH`.
    pub bin: PathBuf,
}

/// The stand-in server; stops accepting when dropped.
#[derive(Debug)]
pub struct StandInAdb {
    /// `127.0.0.1:PORT`, for `ADB_SERVER_SOCKET=tcp:...`.
    pub addr: String,
    /// What it was asked, in order (`host:devices-l`, `shell,v2,raw:getprop ...`).
    pub log: Arc<Mutex<Vec<String>>>,
    listener: TcpListener,
}

impl Drop for StandInAdb {
    fn drop(&mut self) {
        // Wake the accept loop so it sees it is done.
        let _ = self.listener.set_nonblocking(true);
        let _ = TcpStream::connect(&self.addr);
    }
}

impl StandInAdb {
    /// Starts a server for `devices`.
    pub fn start(devices: Vec<StandInDevice>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stand-in adb server");
        let addr = listener.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let devices: Arc<BTreeMap<String, StandInDevice>> =
            Arc::new(devices.into_iter().map(|d| (d.serial.clone(), d)).collect());
        let accept = listener.try_clone().unwrap();
        let (log2, devs) = (log.clone(), devices.clone());
        std::thread::spawn(move || {
            for conn in accept.incoming() {
                let Ok(conn) = conn else { return };
                if accept.set_nonblocking(false).is_err() {
                    return;
                }
                let (log, devs) = (log2.clone(), devs.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &devs, &log);
                });
            }
        });
        Self {
            addr,
            log,
            listener,
        }
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn read_request(c: &mut TcpStream) -> std::io::Result<String> {
    let mut len = [0u8; 4];
    c.read_exact(&mut len)?;
    let n = usize::from_str_radix(std::str::from_utf8(&len).unwrap_or("0"), 16).unwrap_or(0);
    let mut buf = vec![0u8; n];
    c.read_exact(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn okay_with(c: &mut TcpStream, msg: &str) -> std::io::Result<()> {
    c.write_all(format!("OKAY{:04x}{msg}", msg.len()).as_bytes())
}

fn fail(c: &mut TcpStream, msg: &str) -> std::io::Result<()> {
    c.write_all(format!("FAIL{:04x}{msg}", msg.len()).as_bytes())
}

fn serve(
    mut c: TcpStream,
    devices: &BTreeMap<String, StandInDevice>,
    log: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    let mut device: Option<&StandInDevice> = None;
    loop {
        let req = read_request(&mut c)?;
        log.lock().unwrap().push(req.clone());
        if req == "host:version" {
            return okay_with(&mut c, "0029");
        }
        if req == "host:devices-l" || req == "host:devices" {
            let list: String = devices
                .values()
                .map(|d| format!("{:<22} {} {}\n", d.serial, d.state, d.details))
                .collect();
            return okay_with(&mut c, &list);
        }
        if let Some(serial) = req.strip_prefix("host:transport:") {
            match devices.get(serial) {
                Some(d) if d.state == "device" => {
                    device = Some(d);
                    c.write_all(b"OKAY")?;
                    continue;
                }
                Some(d) => return fail(&mut c, &format!("device {} is {}", serial, d.state)),
                None => return fail(&mut c, &format!("device '{serial}' not found")),
            }
        }
        if let Some(rest) = req.strip_prefix("host-serial:") {
            let (serial, cmd) = rest.split_once(':').unwrap_or((rest, ""));
            if !devices.contains_key(serial) {
                return fail(&mut c, &format!("device '{serial}' not found"));
            }
            if let Some(spec) = cmd.strip_prefix("forward:") {
                return forward(&mut c, spec);
            }
            if cmd.starts_with("killforward:") {
                c.write_all(b"OKAYOKAY")?;
                return Ok(());
            }
            return fail(&mut c, &format!("unknown request {cmd}"));
        }
        let Some(d) = device else {
            return fail(&mut c, &format!("unknown request {req}"));
        };
        if let Some(cmd) = req.strip_prefix("shell,v2,raw:") {
            c.write_all(b"OKAY")?;
            return shell(&mut c, d, cmd);
        }
        if req == "sync:" {
            c.write_all(b"OKAY")?;
            return sync(&mut c);
        }
        return fail(&mut c, &format!("unknown request {req}"));
    }
}

/// Runs a shell command on the stand-in device: `sh -c` here, with its commands first on
/// `PATH`, answered in shell protocol v2 packets.
fn shell(c: &mut TcpStream, d: &StandInDevice, cmd: &str) -> std::io::Result<()> {
    let path = format!(
        "{}:{}",
        d.bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", cmd])
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .output()?;
    let packet = |id: u8, data: &[u8]| {
        let mut p = vec![id];
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        p.extend_from_slice(data);
        p
    };
    c.write_all(&packet(1, &out.stdout))?;
    c.write_all(&packet(2, &out.stderr))?;
    let code = out.status.code().unwrap_or(255) as u8;
    c.write_all(&packet(3, &[code]))
}

/// The sync protocol's SEND: the file is written where it names.
fn sync(c: &mut TcpStream) -> std::io::Result<()> {
    let mut head = [0u8; 8];
    c.read_exact(&mut head)?;
    if &head[..4] != b"SEND" {
        return Ok(());
    }
    let len = u32::from_le_bytes(head[4..8].try_into().unwrap()) as usize;
    let mut target = vec![0u8; len];
    c.read_exact(&mut target)?;
    let target = String::from_utf8_lossy(&target).into_owned();
    let (path, mode) = target.rsplit_once(',').unwrap_or((&target, "33188"));
    let mode: u32 = mode.parse().unwrap_or(0o100_644);
    let mut bytes = Vec::new();
    loop {
        c.read_exact(&mut head)?;
        let n = u32::from_le_bytes(head[4..8].try_into().unwrap()) as usize;
        match &head[..4] {
            b"DATA" => {
                let mut chunk = vec![0u8; n];
                c.read_exact(&mut chunk)?;
                bytes.extend_from_slice(&chunk);
            }
            b"DONE" => break,
            _ => return Ok(()),
        }
    }
    let written = std::fs::write(path, &bytes).and_then(|()| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
    });
    match written {
        Ok(()) => c.write_all(b"OKAY\0\0\0\0"),
        Err(e) => {
            let msg = format!("couldn't create file: {e}");
            let mut m = b"FAIL".to_vec();
            m.extend_from_slice(&(msg.len() as u32).to_le_bytes());
            m.extend_from_slice(msg.as_bytes());
            c.write_all(&m)
        }
    }
}

/// `forward:tcp:LOCAL;tcp:REMOTE`: listens on the host's LOCAL (0: any) and relays each
/// connection to REMOTE on the stand-in device, which is this machine's loopback.
fn forward(c: &mut TcpStream, spec: &str) -> std::io::Result<()> {
    let parse = |s: &str| s.strip_prefix("tcp:").and_then(|p| p.parse::<u16>().ok());
    let Some((local, remote)) = spec
        .split_once(';')
        .and_then(|(l, r)| Some((parse(l)?, parse(r)?)))
    else {
        return fail(c, &format!("cannot forward {spec}"));
    };
    let listener = TcpListener::bind(("127.0.0.1", local))?;
    let port = listener.local_addr()?.port();
    c.write_all(b"OKAYOKAY")?;
    if local == 0 {
        let p = port.to_string();
        c.write_all(format!("{:04x}{p}", p.len()).as_bytes())?;
    }
    std::thread::spawn(move || {
        for incoming in listener.incoming() {
            let Ok(inbound) = incoming else { return };
            std::thread::spawn(move || {
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", remote)) else {
                    return;
                };
                let (mut a, mut b) = (inbound.try_clone().unwrap(), outbound.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut a, &mut b);
                    let _ = b.shutdown(std::net::Shutdown::Write);
                });
                let (mut a, mut b) = (outbound, inbound);
                let _ = std::io::copy(&mut a, &mut b);
                let _ = b.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    Ok(())
}

//! Android devices through adb (`adb`): list them, check what the shell user may do on one
//! (`doctor`), and `connect` one: push the shim for its ABI, start it detached as the
//! `shell` user, forward a host port to it over adb, read its certificate fingerprint and
//! token, and register it as an environment (platform `android`, the TCP transport that
//! `adb forward` carries).

pub mod adb;

use crate::env::registry::{EnvEntry, Registry, RegistryError};
use crate::env::{ClientError, Deadlines, Transport};
use adb::{Adb, AdbError, Device};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The ABIs the shim is built for, with the Rust target of each.
pub const ABIS: &[(&str, &str)] = &[
    ("arm64-v8a", "aarch64-unknown-linux-musl"),
    ("x86_64", "x86_64-unknown-linux-musl"),
];

/// Why a device cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AndroidError {
    /// adb itself.
    #[error(transparent)]
    Adb(#[from] AdbError),
    /// No device of that serial, or several and none named.
    #[error("{0}")]
    NoDevice(String),
    /// A device the shim has no build for.
    #[error("device {serial} is {abi}; the shim is built for {}", ABIS.iter().map(|(a, _)| *a).collect::<Vec<_>>().join(" and "))]
    UnsupportedAbi {
        /// The device.
        serial: String,
        /// Its ABI.
        abi: String,
    },
    /// The shim binary for the device's ABI is not built.
    #[error("no shim for {abi} at {}: build it with `./run.sh shim` (or pass --shim PATH)", path.display())]
    NoShim {
        /// The ABI.
        abi: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The shim did not start on the device.
    #[error("the shim did not start on {serial}: {why}")]
    Start {
        /// The device.
        serial: String,
        /// What it said (its log's last lines).
        why: String,
    },
    /// The envs file.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Connecting to the started shim.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Host files.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The serial to use: the one given, else the only device attached.
pub fn pick(devices: &[Device], serial: Option<&str>) -> Result<Device, AndroidError> {
    let listed = || {
        devices
            .iter()
            .map(|d| format!("{} ({})", d.serial, d.state))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match serial {
        Some(s) => devices
            .iter()
            .find(|d| d.serial == s)
            .cloned()
            .ok_or_else(|| {
                AndroidError::NoDevice(if devices.is_empty() {
                    format!("no device '{s}': adb sees no devices (is USB debugging on?)")
                } else {
                    format!("no device '{s}'; adb sees {}", listed())
                })
            }),
        None => match devices {
            [] => Err(AndroidError::NoDevice(
                "adb sees no devices: connect a phone with USB debugging on, or start an emulator"
                    .into(),
            )),
            [one] => Ok(one.clone()),
            _ => Err(AndroidError::NoDevice(format!(
                "several devices: name one ({})",
                listed()
            ))),
        },
    }
}

/// The Rust target of an ABI.
pub fn target_of(abi: &str) -> Option<&'static str> {
    ABIS.iter().find(|(a, _)| *a == abi).map(|(_, t)| *t)
}

/// Where shim builds are looked for: `pincer-shim-<target>` next to this pincer, then the
/// cargo target directory this pincer was built in.
pub fn default_shim(target: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().unwrap_or(Path::new("."));
    let beside = dir.join(format!("pincer-shim-{target}"));
    if beside.is_file() {
        return beside;
    }
    // target/<profile>/pincer -> target/<target>/<profile>/pincer-shim
    let profile = dir.file_name().unwrap_or_default();
    dir.parent()
        .map(|t| t.join(target).join(profile).join("pincer-shim"))
        .unwrap_or(beside)
}

/// How to connect a device.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The device (`None`: the only one).
    pub serial: Option<String>,
    /// The environment's name.
    pub name: String,
    /// Where on the device the shim lives (the shell user may write here).
    pub device_dir: String,
    /// The shim's port on the device.
    pub device_port: u16,
    /// Serve read-only (phones people own).
    pub read_only: bool,
    /// The shim binary, if not the default for the device's ABI.
    pub shim: Option<PathBuf>,
}

/// What `connect` did.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The device.
    pub serial: String,
    /// Its ABI.
    pub abi: String,
    /// Its API level.
    pub sdk: String,
    /// The host port forwarded to the shim.
    pub port: u16,
    /// The shim's certificate fingerprint.
    pub fingerprint: String,
}

/// The line the shim's log ends with when it exits (followed by its status).
const EXITED: &str = "pincer-shim-exited:";

/// How long a started shim has to write its ready file.
const START_WAIT: Duration = Duration::from_secs(15);

/// Quotes a word for the device's shell.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Pushes, starts and registers the shim on a device.
pub async fn connect(
    reg: &Registry,
    adb: &Adb,
    opts: &ConnectOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Connected, AndroidError> {
    let device = pick(&adb.devices().await?, opts.serial.as_deref())?;
    let serial = device.serial.clone();
    if device.state != "device" {
        return Err(AndroidError::NoDevice(format!(
            "device {serial} is {}: {}",
            device.state,
            if device.state == "unauthorized" {
                "accept the USB debugging prompt on the phone"
            } else {
                "reconnect it"
            }
        )));
    }
    let abi = adb.getprop(&serial, "ro.product.cpu.abi").await?;
    let sdk = adb.getprop(&serial, "ro.build.version.sdk").await?;
    let target = target_of(&abi).ok_or_else(|| AndroidError::UnsupportedAbi {
        serial: serial.clone(),
        abi: abi.clone(),
    })?;
    let shim = opts.shim.clone().unwrap_or_else(|| default_shim(target));
    let bytes = std::fs::read(&shim).map_err(|_| AndroidError::NoShim {
        abi: abi.clone(),
        path: shim.clone(),
    })?;
    let dir = opts.device_dir.trim_end_matches('/');
    let state = format!("{dir}/pincer");
    let bin = format!("{dir}/pincer-shim");
    progress(&format!(
        "{serial}: {abi}, API {sdk}; pushing the shim ({} KiB) to {bin}",
        bytes.len() / 1024
    ));
    // A shim started before is stopped first, and waited for (it holds the port).
    let ready = format!("{state}/ready.json");
    adb.shell(
        &serial,
        &format!(
            "mkdir -p {s}; if [ -f {r} ]; then p=$(sed 's/.*\"pid\":\\([0-9]*\\).*/\\1/' {r}); kill $p 2>/dev/null; for i in $(seq 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; rm -f {r}; fi",
            s = q(&state),
            r = q(&ready)
        ),
    )
    .await?;
    // Pushed beside it and renamed over it: a binary still running cannot be written.
    let pushed = format!("{bin}.new");
    adb.push(&serial, &bytes, &pushed, 0o755).await?;
    let moved = adb
        .shell(&serial, &format!("mv -f {} {}", q(&pushed), q(&bin)))
        .await?;
    if moved.status != 0 {
        return Err(AndroidError::Start {
            serial,
            why: format!(
                "cannot put the shim at {bin}: {}",
                String::from_utf8_lossy(&moved.stderr).trim()
            ),
        });
    }
    let mut start = format!(
        "cd {d} && {b} --listen 127.0.0.1:{p} --name {n} --state-dir {s} --ready-file {r}",
        d = q(dir),
        b = q(&bin),
        p = opts.device_port,
        n = q(&opts.name),
        s = q(&state),
        r = q(&ready)
    );
    if opts.read_only {
        start.push_str(" --read-only");
    }
    // Detached from adb's shell: it outlives this command and the USB session. Its log
    // ends with a line saying so when it exits, so a shim that cannot start is reported
    // at once rather than after the wait.
    let log = format!("{state}/shim.log");
    let supervised = format!("{start}; echo \"{EXITED} $?\"");
    adb.shell(
        &serial,
        &format!(
            "(setsid sh -c {} </dev/null >{} 2>&1 &) ; echo started",
            q(&supervised),
            q(&log)
        ),
    )
    .await?;
    let t = Instant::now();
    let ready_text = loop {
        let out = adb
            .shell(
                &serial,
                &format!("cat {} 2>/dev/null || tail -n 20 {}", q(&ready), q(&log)),
            )
            .await?;
        let text = out.text();
        if out.status == 0 && text.starts_with('{') {
            break text;
        }
        let exited = text.contains(EXITED);
        if exited || t.elapsed() > START_WAIT {
            return Err(AndroidError::Start {
                serial,
                why: match (exited, text.is_empty()) {
                    (true, _) => text.replace(EXITED, "the shim exited with status"),
                    (false, true) => format!("no ready file within {START_WAIT:?} and no log"),
                    (false, false) => format!("no ready file within {START_WAIT:?}: {text}"),
                },
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let ready: serde_json::Value =
        serde_json::from_str(&ready_text).map_err(|e| AndroidError::Start {
            serial: serial.clone(),
            why: format!("a ready file that is not JSON ({e}): {ready_text}"),
        })?;
    let fingerprint = ready["fingerprint"].as_str().unwrap_or_default().to_owned();
    let token = adb
        .shell(&serial, &format!("cat {}/token", q(&state)))
        .await?;
    if token.status != 0 || token.stdout.is_empty() {
        return Err(AndroidError::Start {
            serial,
            why: "its token file cannot be read".into(),
        });
    }
    let host_dir = crate::paths::state_dir().join("android").join(&opts.name);
    std::fs::create_dir_all(&host_dir).map_err(|source| AndroidError::Io {
        what: format!("creating {}", host_dir.display()),
        source,
    })?;
    let token_file = host_dir.join("token");
    write_private(&token_file, token.stdout.trim_ascii()).map_err(|source| AndroidError::Io {
        what: format!("writing {}", token_file.display()),
        source,
    })?;
    let port = adb.forward(&serial, 0, opts.device_port).await?;
    progress(&format!("forwarded 127.0.0.1:{port} to the shim (tcp)"));
    reg.update(|f| {
        f.envs.insert(
            opts.name.clone(),
            EnvEntry {
                addr: Some(format!("127.0.0.1:{port}")),
                listen: None,
                fingerprint: Some(fingerprint.clone()),
                token_file: token_file.clone(),
                platform: pincer_shared::Platform::Android,
                transport: Some(Transport::Tcp),
                desktop: None,
                vm: None,
            },
        );
    })?;
    let env = reg
        .connect(Some(&opts.name), Deadlines::default())
        .await
        .map_err(|e| match e {
            crate::env::registry::ConnectError::Client(c) => AndroidError::Client(c),
            other => AndroidError::Start {
                serial: serial.clone(),
                why: other.to_string(),
            },
        })?;
    env.ping().await?;
    Ok(Connected {
        serial,
        abi,
        sdk,
        port,
        fingerprint,
    })
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    std::io::Write::write_all(&mut f, bytes)
}

/// One finding of `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What was checked.
    pub check: String,
    /// Whether it works.
    pub ok: bool,
    /// What was seen.
    pub seen: String,
    /// What to do about it, when it does not work.
    pub fix: Option<String>,
}

impl Finding {
    fn new(check: &str, ok: bool, seen: impl Into<String>, fix: Option<&str>) -> Self {
        Self {
            check: check.into(),
            ok,
            seen: seen.into(),
            fix: fix.map(str::to_owned),
        }
    }
}

/// Checks adb, the device, and what its shell user may do: the shim's ABI, the API level,
/// input (the virtual touchscreen and keyboard made and removed by the shim that `connect`
/// pushed, `pincer-shim --check-input`; else whether `/dev/uinput` is writable),
/// `app_process` (typing text `input text` cannot type, through the clipboard), the
/// `screencap` format, `uiautomator`, and each command the probes read.
pub async fn doctor(
    adb: &Adb,
    serial: Option<&str>,
    device_dir: &str,
) -> Result<Vec<Finding>, AndroidError> {
    let mut f = Vec::new();
    let version = adb.version().await?;
    f.push(Finding::new(
        "adb server",
        true,
        format!("{} (protocol {version})", adb.addr()),
        None,
    ));
    let device = pick(&adb.devices().await?, serial)?;
    let s = device.serial.clone();
    let authorized = device.state == "device";
    f.push(Finding::new(
        "device",
        authorized,
        format!(
            "{} ({}{})",
            s,
            device.state,
            device
                .detail("model")
                .map(|m| format!(", {m}"))
                .unwrap_or_default()
        ),
        (!authorized).then_some("accept the USB debugging prompt on the phone, or reconnect it"),
    ));
    if !authorized {
        return Ok(f);
    }
    let abi = adb.getprop(&s, "ro.product.cpu.abi").await?;
    f.push(Finding::new(
        "ABI",
        target_of(&abi).is_some(),
        abi.clone(),
        target_of(&abi)
            .is_none()
            .then_some("the shim is built for arm64-v8a and x86_64 only"),
    ));
    let sdk = adb.getprop(&s, "ro.build.version.sdk").await?;
    let api: u32 = sdk.parse().unwrap_or(0);
    f.push(Finding::new(
        "API level",
        api >= 24,
        sdk.clone(),
        (api < 24).then_some("Android 7 (API 24) or newer is needed (shell protocol v2, cmd)"),
    ));
    // A shim that `connect` pushed makes the devices and removes them (the kernel has the
    // last word: a writable node is not yet a touchscreen); without one, whether the node
    // can be written is all that can be told.
    let shim = q(&format!("{}/pincer-shim", device_dir.trim_end_matches('/')));
    let uinput = adb
        .shell(
            &s,
            &format!(
                "if [ -x {shim} ] && {shim} --help 2>/dev/null | grep -q -- --check-input; then {shim} --check-input 2>/dev/null; else test -w /dev/uinput && echo writable || ls -l /dev/uinput 2>&1; fi"
            ),
        )
        .await?
        .text();
    f.push(Finding::new(
        "input",
        true,
        if uinput == "writable" {
            "/dev/uinput is writable: a virtual touchscreen and keyboard (fast; `pincer android connect` pushes the shim, after which this makes them)".to_owned()
        } else if uinput.starts_with("virtual input devices:") {
            format!("{uinput} (fast)")
        } else if uinput.starts_with("no virtual input devices") {
            format!("{uinput} (slower)")
        } else {
            format!("`input` commands (slower; /dev/uinput: {uinput})")
        },
        None,
    ));
    // Text `input text` cannot type (not printable ASCII) is pasted from the clipboard,
    // which the shim sets through a dex that `app_process` runs.
    let app_process = adb.shell(&s, "command -v app_process").await?.text();
    let pastes = !app_process.is_empty();
    f.push(Finding::new(
        "text",
        pastes,
        if pastes {
            format!(
                "printable ASCII through `input text`, other text pasted from the clipboard (replacing it) through {app_process}"
            )
        } else {
            "printable ASCII only: no `app_process` on the shell's PATH".to_owned()
        },
        (!pastes).then_some(
            "the shim types other text (accents, CJK, emoji) through `app_process`, found in /system/bin on every Android: check the shell's PATH",
        ),
    ));
    let header = adb
        .shell(&s, "screencap | head -c 16 | od -An -tu4")
        .await?;
    let words: Vec<u64> = header
        .text()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let shows = words.len() >= 3 && words[0] > 0 && words[1] > 0;
    f.push(Finding::new(
        "screencap",
        shows,
        if shows {
            format!("{}x{} raw frames", words[0], words[1])
        } else {
            format!(
                "no raw frame: {}",
                String::from_utf8_lossy(&header.stderr).trim()
            )
        },
        (!shows).then_some("the screen must be on and unlocked; screencap must run as shell"),
    ));
    let probe_dump = q(&format!(
        "{}/pincer-doctor.xml",
        device_dir.trim_end_matches('/')
    ));
    let uiautomator = format!("uiautomator dump {probe_dump} && rm -f {probe_dump}");
    for (check, cmd, fix) in [
        (
            "uiautomator",
            uiautomator.as_str(),
            "wake the screen; an app that never idles (an animation) keeps uiautomator from dumping",
        ),
        (
            "settings",
            "settings get global airplane_mode_on",
            "`settings` must be runnable by shell",
        ),
        (
            "content",
            "content query --uri content://settings/system --projection name --where \"name='screen_brightness'\"",
            "`content` must be runnable by shell",
        ),
        (
            "dumpsys",
            "dumpsys activity activities | grep -c Resumed",
            "`dumpsys activity` must be runnable by shell",
        ),
        (
            "packages",
            "pm list packages | head -n 1",
            "`pm` must be runnable by shell",
        ),
    ] {
        let out = adb.shell(&s, cmd).await?;
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        // `content` and `uiautomator` report errors on their output with status 0.
        let text = out.text();
        let ok = out.status == 0 && !text.starts_with("ERROR") && !text.contains("Error while");
        f.push(Finding::new(
            check,
            ok,
            if ok {
                text.lines().next().unwrap_or("works").to_owned()
            } else {
                format!("{text} {err}").trim().to_owned()
            },
            (!ok).then_some(fix),
        ));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(serial: &str, state: &str) -> Device {
        Device {
            serial: serial.into(),
            state: state.into(),
            details: vec![],
        }
    }

    #[test]
    fn the_device_is_the_one_named_or_the_only_one() {
        let one = [dev("emulator-5554", "device")];
        assert_eq!(pick(&one, None).unwrap().serial, "emulator-5554");
        let two = [dev("a", "device"), dev("b", "offline")];
        let e = pick(&two, None).unwrap_err().to_string();
        assert!(
            e.contains("several devices") && e.contains("b (offline)"),
            "{e}"
        );
        assert_eq!(pick(&two, Some("b")).unwrap().state, "offline");
        let e = pick(&two, Some("c")).unwrap_err().to_string();
        assert!(
            e.contains("no device 'c'") && e.contains("a (device)"),
            "{e}"
        );
        let e = pick(&[], None).unwrap_err().to_string();
        assert!(e.contains("USB debugging"), "{e}");
    }

    #[test]
    fn abis_map_to_the_shim_builds() {
        assert_eq!(target_of("arm64-v8a"), Some("aarch64-unknown-linux-musl"));
        assert_eq!(target_of("x86_64"), Some("x86_64-unknown-linux-musl"));
        assert_eq!(target_of("armeabi-v7a"), None);
        let e = AndroidError::UnsupportedAbi {
            serial: "s".into(),
            abi: "armeabi-v7a".into(),
        }
        .to_string();
        assert!(e.contains("arm64-v8a and x86_64"), "{e}");
    }

    #[test]
    fn words_are_quoted_for_the_device_shell() {
        assert_eq!(q("/data/local/tmp"), "'/data/local/tmp'");
        assert_eq!(q("it's"), "'it'\\''s'");
    }
}

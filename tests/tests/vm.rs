//! VMs for real: the `debian-12-minimal` image built by `pincer image build` (cached by
//! recipe hash in the user's image cache, so later runs on this machine reuse it), booted
//! under QEMU (TCG here: this machine has no hardware virtualization), with the agent
//! answering from inside. A reset must throw away files and settings, two VMs of one image
//! run side by side, a run on VMs resets between tasks and replaces a VM that dies, a killed
//! run takes its VMs with it (and leaves `vm up`'s), so does a killed first boot, bundled
//! tasks pass with the oracle, and bad input is named. A user's own bootable disk (a
//! stand-in built here, for BIOS and UEFI) is imported, boots through its own bootloader
//! and resets.

use pincer_tests::{
    Sandbox, as_user_at, give_to_user, import_crab, import_osworld_evaluators, osworld_score,
    results,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const IMAGE: &str = "debian-12-minimal";

/// Builds the image, with its container image, once per test binary (a no-op when the
/// cache holds it).
fn image(sb: &Sandbox) {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = sb.pincer(&["image", "build", IMAGE, "--container"]);
        assert!(
            out.status.success(),
            "image build failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// Held by tests whose timing needs the machine's cores: the OSWorld oracle test (Chromium
/// and gnome-terminal under TCG, with deadlines) never runs beside an import's libguestfs
/// appliance and cold boot, which starved it past its 180 s in a CI run on 2 cores.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A VM that is stopped when dropped.
struct Vm<'a> {
    sb: &'a Sandbox,
    name: String,
}

impl Drop for Vm<'_> {
    fn drop(&mut self) {
        let _ = self.sb.pincer(&["vm", "down", &self.name]);
    }
}

fn up<'a>(sb: &'a Sandbox, name: &str) -> (Vm<'a>, String) {
    image(sb);
    let out = sb.pincer_ok(&["vm", "up", "--image", IMAGE, "--name", name]);
    (
        Vm {
            sb,
            name: name.into(),
        },
        out,
    )
}

/// `pincer run` of the oracle on VMs of the image, started in the background.
fn vm_run(
    sb: &Sandbox,
    tasks: &Path,
    out: &Path,
    stderr: std::process::Stdio,
) -> std::process::Child {
    sb.pincer_command(&[
        "run",
        "--tasks",
        tasks.to_str().unwrap(),
        "--agent",
        "oracle",
        "--vm",
        IMAGE,
        "--no-report",
        "--out",
    ])
    .arg(out)
    .stdout(std::process::Stdio::null())
    .stderr(stderr)
    .spawn()
    .unwrap()
}

/// Runs a shell command line in the VM and returns its output.
fn sh(sb: &Sandbox, vm: &str, script: &str) -> String {
    sb.pincer_ok(&["exec", "--env", vm, "--", "sh", "-c", script])
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The guest's clock minus the host's, bounded by the time the call took.
fn clock_offset(sb: &Sandbox, vm: &str) -> f64 {
    let before = now();
    let guest: f64 = sh(sb, vm, "date +%s.%N").trim().parse().unwrap();
    let after = now();
    if guest < before {
        guest - before
    } else if guest > after {
        guest - after
    } else {
        0.0
    }
}

/// Steps the guest's clock to the host's time plus `by_s` seconds through the VM's clock
/// channel (the guest's root service sets what the host sends), as a guest whose clock
/// jumped would be.
fn step_guest_clock(sb: &Sandbox, vm: &str, by_s: f64) {
    use std::io::{BufRead, Write};
    let list = sb.pincer_ok(&["vm", "list"]);
    let pid = list
        .lines()
        .find(|l| l.split_whitespace().next() == Some(vm))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "pid").nth(1))
        .unwrap_or_else(|| panic!("no pid of {vm} in {list}"));
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let socket = String::from_utf8_lossy(&cmdline)
        .split(['\0', ','])
        .find_map(|a| {
            a.strip_prefix("path=")
                .filter(|p| p.ends_with("clock.sock"))
        })
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no clock socket in QEMU's command line"));
    let s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut lines = std::io::BufReader::new(s.try_clone().unwrap()).lines();
    let mut w = s;
    loop {
        let line = lines.next().expect("the clock channel closed").unwrap();
        if line.trim() == "?" {
            writeln!(w, "{:.9}", now() + by_s).unwrap();
        } else if line.starts_with("ok ") {
            return;
        }
    }
}

#[test]
fn a_vm_serves_the_agent_and_a_reset_throws_away_what_it_did() {
    let sb = Sandbox::new();
    let (_vm, said) = up(&sb, "vm-a");
    assert!(said.contains("VM 'vm-a' is up"), "{said}");
    // This machine has no hardware virtualization: the probe must say so and use TCG.
    assert!(said.contains("tcg"), "{said}");

    // The agent answers from inside: a screenshot of the VM's screen and a UI tree of an app
    // started in it.
    let shot = sb.path().join("shot.png");
    sb.pincer_ok(&["screenshot", "--env", "vm-a", "-o", shot.to_str().unwrap()]);
    let size = imagesize(&shot);
    assert_eq!(size, (1920, 1080));
    sb.pincer_ok(&[
        "launch",
        "--env",
        "vm-a",
        "--",
        "zenity",
        "--info",
        "--text",
        "inside the VM",
    ]);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let t = sb.pincer(&[
            "tree", "--env", "vm-a", "--app", "zenity", "--format", "text",
        ]);
        if String::from_utf8_lossy(&t.stdout).contains("inside the VM") {
            break;
        }
        assert!(Instant::now() < deadline, "no zenity in the VM's UI tree");
        std::thread::sleep(Duration::from_millis(500));
    }
    // The agent runs as the image's user service, the unit `pincer-agent install` writes.
    let unit = sh(
        &sb,
        "vm-a",
        "systemctl --user is-active pincer-agent.service; cat /etc/systemd/user/pincer-agent.service",
    );
    assert!(unit.starts_with("active"), "{unit}");
    assert!(
        unit.contains("ExecStart=/usr/local/bin/pincer-agent --listen 0.0.0.0:7000"),
        "{unit}"
    );
    assert!(unit.contains("WantedBy=graphical-session.target"), "{unit}");

    // The guest's clock stepped an hour ahead, through its own clock service as root: a task
    // run on it still finishes and scores (nothing between host and guest reads wall
    // time), and the reset below sets the clock right again.
    step_guest_clock(&sb, "vm-a", 3600.0);
    let off = clock_offset(&sb, "vm-a");
    assert!(
        (off - 3600.0).abs() < 5.0,
        "the clock was not stepped: {off:+.2} s"
    );
    let out = sb.path().join("stepped");
    let t = Instant::now();
    let said = sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--task",
        "terminal-make-project",
        "--set",
        "desktop=vm-a",
        "--agent",
        "oracle",
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
    let recs = results(&out);
    println!(
        "guest clock {off:+.0} s: task run {:.1} s, {:?}",
        t.elapsed().as_secs_f64(),
        recs.iter().map(|r| &r["termination"]).collect::<Vec<_>>()
    );
    assert_eq!(recs.len(), 1, "{said}");
    assert_eq!(recs[0]["termination"], "success", "{said}");
    // A file and a setting changed, then reset: both are gone, the clock is right, and the
    // host reconnects by itself.
    sh(
        &sb,
        "vm-a",
        "echo task > ~/mark.txt && gsettings set org.gnome.desktop.interface color-scheme prefer-dark",
    );
    assert!(sh(&sb, "vm-a", "cat ~/mark.txt").contains("task"));
    let reset = sb.pincer_ok(&["vm", "reset", "vm-a"]);
    assert!(reset.contains("reset"), "{reset}");
    let after = sh(
        &sb,
        "vm-a",
        "test -e ~/mark.txt && echo still there; gsettings get org.gnome.desktop.interface color-scheme",
    );
    assert!(!after.contains("still there"), "{after}");
    assert!(after.contains("'default'"), "{after}");
    let off = clock_offset(&sb, "vm-a");
    assert!(
        off.abs() < 1.0,
        "the guest's clock is {off:+.2} s off after a reset"
    );
    // The VM cannot reach anything: not the internet, not the host.
    let net = sh(
        &sb,
        "vm-a",
        "for a in 10.0.2.2 151.101.2.132; do if timeout 5 bash -c \"echo > /dev/tcp/$a/80\" 2>/dev/null; then echo reached $a; else echo blocked $a; fi; done",
    );
    assert!(!net.contains("reached"), "{net}");
    assert_eq!(net.matches("blocked").count(), 2, "{net}");

    sb.pincer_ok(&["vm", "down", "vm-a"]);
    let list = sb.pincer_ok(&["vm", "list"]);
    assert!(list.starts_with("no VMs"), "{list}");
    let envs = sb.pincer_ok(&["env", "list"]);
    assert!(!envs.contains("vm-a"), "{envs}");
}

fn imagesize(p: &Path) -> (u32, u32) {
    let bytes = std::fs::read(p).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

/// Runs a shell script in a container of image `tag` and returns what it printed, failing
/// the test with its output unless it succeeds.
fn podman_sh(tag: &str, script: &str) -> String {
    let out = pincer_tests::podman_run()
        .arg(tag)
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn the_image_is_also_a_container_image_with_the_agent_inside() {
    let sb = Sandbox::new();
    image(&sb);
    let list = sb.pincer_ok(&["image", "list"]);
    assert!(list.contains(IMAGE), "{list}");
    let tag = pincer_tests::container_image(&sb, IMAGE);
    assert!(
        tag.starts_with("localhost/pincer/debian-12-minimal:"),
        "{tag}"
    );
    // Real podman with runc; the image also carries pincer, to run shards as pods.
    let text = podman_sh(
        &tag,
        "cat /etc/debian_version && /usr/local/bin/pincer-agent --version && /usr/local/bin/pincer --version && grep ExecStart /etc/systemd/user/pincer-agent.service",
    );
    assert!(text.starts_with("12."), "{text}");
    assert!(text.contains("pincer-agent "), "{text}");
    assert!(text.contains("\npincer "), "{text}");
    assert!(text.contains("--listen 0.0.0.0:7000"), "{text}");

    // A cached image with other pincer binaries: its container image gets these in a new
    // layer under a new tag (the recipe did not change, so nothing else is rebuilt), and
    // the old tag goes.
    let agent = pincer_tests::bin("pincer-agent");
    let other = sb.path().join("pincer-agent");
    let mut bytes = std::fs::read(&agent).unwrap();
    bytes.extend_from_slice(b"another build");
    std::fs::write(&other, &bytes).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sha = |path: &Path| {
        let out = std::process::Command::new("sha256sum")
            .arg(path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)[..64].to_owned()
    };
    let in_container =
        |tag: &str| podman_sh(tag, "sha256sum /usr/local/bin/pincer-agent")[..64].to_owned();
    let out = sb.pincer(&[
        "image",
        "build",
        IMAGE,
        "--container",
        "--agent",
        other.to_str().unwrap(),
    ]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("carries other pincer binaries"), "{log}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(
            pincer::paths::image_cache_dir()
                .join(IMAGE)
                .join("manifest.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let refreshed = manifest["container"].as_str().unwrap().to_owned();
    assert_ne!(refreshed, tag);
    assert_eq!(in_container(&refreshed), sha(&other));
    assert!(
        !std::process::Command::new("podman")
            .args(["image", "exists", &tag])
            .status()
            .unwrap()
            .success(),
        "{tag} is still there"
    );
    // And back: the build's own agent again.
    let back = pincer_tests::container_image(&sb, IMAGE);
    assert_eq!(in_container(&back), sha(&agent));
}

#[test]
fn two_vms_of_one_image_run_side_by_side() {
    let sb = Sandbox::new();
    let (_b, _) = up(&sb, "vm-b");
    let (_c, _) = up(&sb, "vm-c");
    sh(&sb, "vm-b", "echo b > ~/who.txt");
    sh(&sb, "vm-c", "echo c > ~/who.txt");
    assert_eq!(sh(&sb, "vm-b", "cat ~/who.txt").trim(), "b");
    assert_eq!(sh(&sb, "vm-c", "cat ~/who.txt").trim(), "c");
    let list = sb.pincer_ok(&["vm", "list"]);
    assert_eq!(list.matches(" up ").count(), 2, "{list}");
    // A second VM of a name that is up is refused.
    let again = sb.pincer(&["vm", "up", "--image", IMAGE, "--name", "vm-b"]);
    assert!(!again.status.success());
    let e = String::from_utf8_lossy(&again.stderr);
    assert!(e.contains("VM 'vm-b' is already up"), "{e}");
}

/// A task on one desktop with a terminal: the oracle types `command` into it, and
/// `checkpoints` judge the result.
fn terminal_task(id: &str, command: &str, checkpoints: Value, extra_oracle: &[Value]) -> Value {
    let mut oracle = vec![
        serde_json::json!({"do": "type", "target": {"role": "terminal"}, "text": format!("{command}\n")}),
    ];
    oracle.extend_from_slice(extra_oracle);
    oracle.push(serde_json::json!({"do": "sleep", "ms": 1000}));
    serde_json::json!({
        "id": id,
        "instruction": format!("Run `{command}` in the terminal."),
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "launch", "argv": ["xfce4-terminal", "--disable-server", "--default-working-directory=/tmp"]},
            {"do": "wait_window", "title_contains": "Terminal", "timeout_ms": 120000}
        ]},
        "checkpoints": checkpoints,
        "limits": {"max_steps": 30, "max_seconds": 300},
        "oracle": oracle
    })
}

#[test]
fn a_run_on_vms_resets_between_tasks_and_replaces_a_vm_that_dies() {
    let sb = Sandbox::new();
    image(&sb);
    let tasks = sb.path().join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let write = |t: Value| {
        std::fs::write(
            tasks.join(format!("{}.json", t["id"].as_str().unwrap())),
            t.to_string(),
        )
        .unwrap();
    };
    let exists = |id: &str, path: &str| serde_json::json!({"id": id, "env": "desktop", "check": "file_exists", "args": {"path": path}});
    // a leaves a mark; b passes only where no mark was left (a reset between them).
    write(terminal_task(
        "a-mark",
        "touch ~/mark",
        serde_json::json!([exists("mark", "~/mark")]),
        &[],
    ));
    write(terminal_task(
        "b-clean",
        "touch ~/fresh",
        serde_json::json!([
            exists("fresh", "~/fresh"),
            {"id": "no-mark", "env": "desktop", "check": "file_absent", "args": {"path": "~/mark"}, "after": ["fresh"]}
        ]),
        &[],
    ));
    // c waits long enough for the test to kill its VM; d runs on the replacement.
    let waits: Vec<Value> = (0..6)
        .map(|_| serde_json::json!({"do": "sleep", "ms": 10000}))
        .collect();
    write(terminal_task(
        "c-dies",
        "touch ~/late",
        serde_json::json!([exists("late-2", "~/never")]),
        &waits,
    ));
    write(terminal_task(
        "d-after",
        "touch ~/after",
        serde_json::json!([exists("after", "~/after")]),
        &[],
    ));

    let out = sb.path().join("out");
    let mut run = vm_run(&sb, &tasks, &out, std::process::Stdio::piped());
    let results = out.join("results.jsonl");
    let lines = || {
        std::fs::read_to_string(&results)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut stderr = run.stderr.take().unwrap();
    let ended = |run: &mut std::process::Child, stderr: &mut std::process::ChildStderr| {
        if run.try_wait().unwrap().is_some() {
            let mut err = String::new();
            std::io::Read::read_to_string(stderr, &mut err).unwrap();
            panic!("the run ended before its VM was killed:\n{err}");
        }
    };
    // c has typed its command and is waiting: kill its VM's QEMU.
    let c_steps = out.join("tasks/c-dies__r0/steps.jsonl");
    while lines() < 2 || std::fs::read_to_string(&c_steps).map_or(true, |t| t.is_empty()) {
        assert!(Instant::now() < deadline, "c did not start");
        ended(&mut run, &mut stderr);
        std::thread::sleep(Duration::from_millis(500));
    }
    let list = sb.pincer_ok(&["vm", "list"]);
    let pid: i32 = list
        .split_whitespace()
        .skip_while(|w| *w != "pid")
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {list}"));
    // SAFETY: killing the QEMU of this test's own VM.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    assert!(status.success(), "{err}");
    let recs: Vec<Value> = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<(&str, &str)> = recs
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap(),
                r["termination"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("a-mark", "success"),
            ("b-clean", "success"),
            ("c-dies", "environment-error"),
            ("d-after", "success")
        ],
        "{err}"
    );
    // The run stopped its VMs.
    let list = sb.pincer_ok(&["vm", "list"]);
    assert!(list.starts_with("no VMs"), "{list}");
}

/// Waits up to `within` for `done`; whether it came.
fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    done()
}

#[test]
fn a_killed_run_takes_its_vms_with_it_and_vm_up_ones_stay() {
    let sb = Sandbox::new();
    // A VM of `vm up`: it must outlive the command, and the run's end must not touch it.
    let (_kept, _) = up(&sb, "vm-kept");
    let tasks = sb.path().join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    // A task that idles long enough to be killed in the middle.
    let waits: Vec<Value> = (0..12)
        .map(|_| serde_json::json!({"do": "sleep", "ms": 10000}))
        .collect();
    let t = terminal_task(
        "waits",
        "touch ~/w",
        serde_json::json!([{"id": "never", "env": "desktop", "check": "file_exists", "args": {"path": "~/never"}}]),
        &waits,
    );
    std::fs::write(tasks.join("waits.json"), t.to_string()).unwrap();
    let out = sb.path().join("out");
    let mut run = vm_run(&sb, &tasks, &out, std::process::Stdio::null());
    let steps = out.join("tasks/waits__r0/steps.jsonl");
    let started = wait_until(Duration::from_secs(600), || {
        assert!(run.try_wait().unwrap().is_none(), "the run ended early");
        std::fs::read_to_string(&steps).is_ok_and(|t| !t.is_empty())
    });
    assert!(started, "the task never started");

    // The run's VM, as its record, /proc and the envs file show it.
    let vms = sb.path().join("state/vms");
    let names: Vec<String> = std::fs::read_dir(&vms)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "vm-kept")
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let name = &names[0];
    let dir = vms.join(name);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("vm.json")).unwrap()).unwrap();
    let port = record["port"].as_u64().unwrap() as u16;
    let qmp = format!(
        "unix:{},server=on,wait=off",
        pincer::vm::qemu::qmp_socket(&dir).display()
    );
    let qemus = || -> Vec<u32> {
        pincer_tests::processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && p.cmdline.split(' ').any(|a| a == qmp))
            .map(|p| p.pid)
            .collect()
    };
    let supervisor = format!("vm supervise --dir {} ", dir.display());
    let supervisors = || -> Vec<u32> {
        pincer_tests::processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && p.cmdline.contains(&supervisor))
            .map(|p| p.pid)
            .collect()
    };
    assert_eq!(qemus(), [record["pid"].as_u64().unwrap() as u32]);
    assert_eq!(supervisors().len(), 1);
    let registered = |n: &str| sb.registry().load().unwrap().envs.contains_key(n);
    assert!(registered(name));
    let port_free = || std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    assert!(!port_free(), "QEMU does not hold port {port}");

    // No Ctrl-C, no cleanup: the runner just stops existing (the oracle is idling).
    let t = Instant::now();
    run.kill().unwrap();
    run.wait().unwrap();
    let gone = wait_until(Duration::from_secs(30), || {
        qemus().is_empty() && !dir.exists() && !registered(name)
    });
    let took = t.elapsed();
    assert!(
        gone,
        "after {took:?}: QEMU {:?}, directory {}, registered {}",
        qemus(),
        dir.exists(),
        registered(name)
    );
    eprintln!("the run's VM was gone {took:?} after the run was killed");
    assert!(port_free(), "port {port} is still taken");
    assert!(
        wait_until(Duration::from_secs(5), || supervisors().is_empty()),
        "{:?}",
        supervisors()
    );
    let list = sb.pincer_ok(&["vm", "list"]);
    assert!(!list.contains(name.as_str()), "{list}");

    // The `vm up` VM still serves.
    assert_eq!(sh(&sb, "vm-kept", "echo still here").trim(), "still here");
    assert!(list.contains("vm-kept") && list.contains(" up "), "{list}");
}

#[test]
fn a_killed_first_boot_leaves_no_qemu_behind() {
    let sb = Sandbox::new();
    image(&sb);
    // An agent no golden state was made for (one byte more), so `vm up` boots cold.
    let agent = sb.path().join("pincer-agent");
    let mut bytes = std::fs::read(pincer_tests::bin("pincer-agent")).unwrap();
    bytes.push(0);
    std::fs::write(&agent, bytes).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut cli = sb
        .pincer_command(&["vm", "up", "--image", IMAGE, "--name", "cold", "--agent"])
        .arg(&agent)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The first boot's QEMU runs in a scratch directory named by the process making it,
    // where its serial console is written.
    let scratch = format!("-{}/serial.log", cli.id());
    let serial_log = |cmdline: &str| -> Option<String> {
        cmdline.split(' ').find_map(|a| {
            let path = a.strip_prefix("file,id=serial,path=")?;
            (path.contains("/golden/.new-") && path.ends_with(&scratch)).then(|| path.to_owned())
        })
    };
    let qemus = || -> Vec<u32> {
        pincer_tests::processes()
            .into_iter()
            .filter(|p| p.state != 'Z' && serial_log(&p.cmdline).is_some())
            .map(|p| p.pid)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(120), || !qemus().is_empty()),
        "the first boot never started"
    );
    let dir = pincer_tests::processes()
        .into_iter()
        .find(|p| p.pid == qemus()[0])
        .and_then(|p| serial_log(&p.cmdline))
        .map(|log| Path::new(&log).parent().unwrap().to_owned())
        .unwrap();
    assert!(dir.is_dir(), "{}", dir.display());
    cli.kill().unwrap();
    cli.wait().unwrap();
    let gone = wait_until(Duration::from_secs(30), || {
        qemus().is_empty() && !dir.exists()
    });
    assert!(
        gone,
        "QEMU {:?}, {} exists: {}",
        qemus(),
        dir.display(),
        dir.exists()
    );
}

#[test]
fn bundled_demo_tasks_pass_with_the_oracle_on_a_vm() {
    let sb = Sandbox::new();
    image(&sb);
    let out = sb.path().join("out");
    let o = sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--task",
        "terminal-make-project",
        "--task",
        "editor-fix-typo",
        "--task",
        "settings-dark-mode",
        "--agent",
        "oracle",
        "--vm",
        IMAGE,
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
    let recs: Vec<Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 3, "{o}");
    for r in &recs {
        assert_eq!(r["termination"], "success", "{r}\n{o}");
    }
}

#[test]
fn bad_input_is_named() {
    let sb = Sandbox::new();
    image(&sb);
    // An image that is not built: the error lists those that are.
    let e = sb.pincer(&["vm", "up", "--image", "no-such", "--name", "x"]);
    assert!(!e.status.success());
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("no image 'no-such'") && e.contains(IMAGE), "{e}");

    // A QEMU that exits at once says why (an image whose kernel is not one).
    let cache = sb.path().join("cache");
    let broken = cache.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    let real = sb.pincer_ok(&["image", "list"]);
    assert!(real.contains(IMAGE));
    std::fs::write(broken.join("vmlinuz"), b"not a kernel").unwrap();
    std::fs::write(broken.join("initrd.img"), b"").unwrap();
    let disk = broken.join("disk.qcow2");
    let made = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(&disk)
        .arg("64M")
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::write(
        broken.join("manifest.json"),
        serde_json::json!({
            "name": "broken", "description": "a kernel that is not one", "recipe_hash": "x",
            "distribution": "debian", "suite": "bookworm", "sources": [], "kernel": "none",
            "packages": {}, "sizes": {"disk_virtual": 0, "disk_file": 0, "kernel": 0, "initrd": 0},
            "agent_sha256": "x", "built_at": 0, "build_seconds": 0.0
        })
        .to_string(),
    )
    .unwrap();
    let e = sb.pincer(&[
        "vm",
        "up",
        "--image",
        "broken",
        "--name",
        "y",
        "--cache",
        cache.to_str().unwrap(),
    ]);
    assert!(!e.status.success());
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("QEMU exited") && e.contains("QEMU said"), "{e}");
    assert!(!sb.pincer_ok(&["vm", "list"]).contains(" y "));

    // Recipes: an unknown package is named before anything is built, and an unknown field
    // at once.
    let recipe = |name: &str, text: &str| {
        let p = sb.path().join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        p
    };
    let good = "description = \"t\"\ndistribution = \"debian\"\nsuite = \"bookworm\"\nkernel = \"linux-image-amd64\"\npackages = [\"mousepadd\"]\n[user]\nname = \"u\"\n[session]\n";
    let p = recipe("typo", good);
    let c2 = sb.path().join("cache2");
    let e = sb.pincer(&[
        "image",
        "build",
        p.to_str().unwrap(),
        "--cache",
        c2.to_str().unwrap(),
    ]);
    assert!(!e.status.success());
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("the archive has no package mousepadd"), "{e}");
    assert!(!c2.join("typo").exists());
    let p = recipe("field", &good.replace("packages", "pakages"));
    let e = sb.pincer(&[
        "image",
        "build",
        p.to_str().unwrap(),
        "--cache",
        c2.to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("unknown field `pakages`"), "{e}");
    // A missing tool names the package that has it.
    let p = recipe("tools", &good.replace("mousepadd", "zenity"));
    let e = sb
        .pincer_command(&[
            "image",
            "build",
            p.to_str().unwrap(),
            "--cache",
            c2.to_str().unwrap(),
        ])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(
        e.contains("`mmdebstrap` is not installed") && e.contains("apt install mmdebstrap"),
        "{e}"
    );

    // An interrupted build (Ctrl-C) stops mmdebstrap and leaves nothing behind.
    let mut b = sb
        .pincer_command(&[
            "image",
            "build",
            p.to_str().unwrap(),
            "--cache",
            c2.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let building = || {
        std::fs::read_dir(&c2)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with(".build-tools"))
            })
            .unwrap_or(false)
    };
    while !building() {
        assert!(Instant::now() < deadline, "the build did not start");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: interrupting the build this test started, as Ctrl-C would.
    unsafe {
        libc::kill(b.id() as i32, libc::SIGINT);
    }
    let status = b.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut b.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        !building(),
        "the interrupted build's directory is still there"
    );
    assert!(!c2.join("tools").exists());
    // mmdebstrap's temporary root (its /proc, /sys and /dev mounted) went with the build's
    // directory: nothing stays mounted, nothing stays in /tmp.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mountinfo.contains(c2.to_str().unwrap()) && !mountinfo.contains("/mmdebstrap."),
        "mounts left behind:\n{mountinfo}"
    );
    let mmdebstraps = pincer_tests::processes()
        .into_iter()
        .filter(|p| p.cmdline.contains("mmdebstrap") && p.cmdline.contains(c2.to_str().unwrap()))
        .count();
    assert_eq!(mmdebstraps, 0, "mmdebstrap outlived the interrupted build");
    let listed = sb.pincer_ok(&["image", "list", "--cache", c2.to_str().unwrap()]);
    assert!(listed.contains("no images built"), "{listed}");
}

#[test]
fn a_vm_boots_cold_and_runs_for_a_user_whose_home_is_long() {
    let sb = Sandbox::new();
    image(&sb);
    // Homes are often this long once a lab's layout is added: QEMU's sockets under the
    // cache or the state directory would pass the 108 bytes a unix socket path may have.
    // The user is not root (QEMU then opens its files with the user's rights alone).
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(sb.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let home = sb
        .path()
        .join("home/firstname.lastname/research projects é/gui agents 2026/benchmark runs");
    // The image as built, in this user's cache (linked: root's cache is out of the user's
    // reach); its golden states this user's own, so the first `vm up` boots cold in
    // `<image>/golden/.new-<key>-<pid>/`.
    let real = pincer::paths::image_cache_dir().join(IMAGE);
    let mine = home.join(".cache/pincer/images").join(IMAGE);
    std::fs::create_dir_all(mine.join("golden")).unwrap();
    for f in ["disk.qcow2", "initrd.img", "vmlinuz", "manifest.json"] {
        if std::fs::hard_link(real.join(f), mine.join(f)).is_err() {
            std::fs::copy(real.join(f), mine.join(f)).unwrap();
        }
    }
    // The user's own directories; the image's files (links to root's) only readable.
    let cache = home.join(".cache");
    give_to_user(&[
        &home,
        &cache,
        &cache.join("pincer"),
        &cache.join("pincer/images"),
        &mine,
        &mine.join("golden"),
    ]);
    let scratch = mine.join(format!(
        "golden/.new-m1024-c2-tcg-{}-r-{}/clock.sock",
        "f".repeat(16),
        u32::MAX
    ));
    assert!(scratch.as_os_str().len() > 108, "{}", scratch.display());

    as_user_at(
        &home,
        &["vm", "up", "--image", IMAGE, "--name", "long-home"],
    );
    let exec = |script: &str| {
        as_user_at(
            &home,
            &["exec", "--env", "long-home", "--", "sh", "-c", script],
        )
    };
    assert_eq!(exec("echo up").trim(), "up");
    // Reset restores the golden state made in the long directory, by the user's QEMU.
    as_user_at(&home, &["vm", "reset", "long-home"]);
    assert_eq!(exec("echo again").trim(), "again");
    as_user_at(&home, &["vm", "down", "long-home"]);
    assert!(!home.join(".local/state/pincer/vms/long-home").exists());
}

/// Runs `program args` and fails the test with its output unless it succeeds.
fn run_ok(program: &str, args: &[&str], dir: &Path, env: &[(&str, &Path)]) {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds a `.deb` of `package` (with `depends`) in `dir`, the same bytes every time.
fn make_deb(dir: &Path, package: &str, depends: &str) -> PathBuf {
    let tree = dir.join(format!("{package}-tree"));
    std::fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(tree.join("usr/share").join(package)).unwrap();
    let mut control = format!(
        "Package: {package}\nVersion: 1.0\nArchitecture: all\nMaintainer: pincer tests <tests@pincer.invalid>\nDescription: a package of pincer's tests\n"
    );
    if !depends.is_empty() {
        control.push_str(&format!("Depends: {depends}\n"));
    }
    std::fs::write(tree.join("DEBIAN/control"), control).unwrap();
    std::fs::write(
        tree.join("usr/share").join(package).join("hello"),
        "hello\n",
    )
    .unwrap();
    let deb = dir.join(format!("{package}_1.0_all.deb"));
    let tree_s = tree.to_str().unwrap();
    run_ok("touch", &["-h", "-d", "@1700000000", tree_s], dir, &[]);
    run_ok(
        "find",
        &[
            tree_s,
            "-exec",
            "touch",
            "-h",
            "-d",
            "@1700000000",
            "{}",
            "+",
        ],
        dir,
        &[],
    );
    run_ok(
        "dpkg-deb",
        &["--root-owner-group", "-b", tree_s, deb.to_str().unwrap()],
        dir,
        &[],
    );
    deb
}

/// A flat apt repository at `repo` holding `pincer-vendor-hello`, signed with the tests'
/// key: a stand-in for a vendor's repository (Google's, Microsoft's), which this machine
/// cannot reach.
fn vendor_repository(repo: &Path, recipe_dir: &Path) {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo).unwrap();
    make_deb(repo, "pincer-vendor-hello", "");
    let packages = std::process::Command::new("dpkg-scanpackages")
        .args(["--multiversion", ".", "/dev/null"])
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(packages.status.success());
    std::fs::write(repo.join("Packages"), &packages.stdout).unwrap();
    let digest = {
        use std::io::Write as _;
        let mut child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&packages.stdout)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    std::fs::write(
        repo.join("Release"),
        format!(
            "Origin: pincer-tests\nSuite: stable\nCodename: stable\nArchitectures: amd64 all\nSHA256:\n {digest} {} Packages\n",
            packages.stdout.len()
        ),
    )
    .unwrap();
    let gnupg = tempfile::tempdir().unwrap();
    let home = [("GNUPGHOME", gnupg.path())];
    let secret = recipe_dir.join("signing-key.secret.asc");
    let batch = ["--batch", "--pinentry-mode", "loopback", "--passphrase", ""];
    let mut import = batch.to_vec();
    import.extend(["--import", secret.to_str().unwrap()]);
    run_ok("gpg", &import, repo, &home);
    let mut sign = batch.to_vec();
    sign.extend(["--yes", "--clearsign", "-o", "InRelease", "Release"]);
    run_ok("gpg", &sign, repo, &home);
    // gpg's agent goes with its home.
    let _ = std::process::Command::new("gpgconf")
        .args(["--kill", "gpg-agent"])
        .env("GNUPGHOME", gnupg.path())
        .status();
}

/// A recipe adds what Debian's archive lacks, as OSWorld's machine needs: a vendor's
/// signed repository, a local `.deb` (its dependency from the archive), a pip package, a
/// user with a password who may sudo, and a file with a mode. The image is checked as a
/// container (podman) rather than booted; a repository signed by another key is refused,
/// naming it, before anything is downloaded.
#[test]
fn a_recipe_adds_a_vendor_repository_a_local_deb_pip_and_a_sudo_user() {
    let sb = Sandbox::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/additions");
    vendor_repository(Path::new("/tmp/pincer-tests-apt-repo"), &fixtures);
    // The recipe's directory, with a space and non-ASCII as users' paths have.
    let dir = sb.path().join("my récipes");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["debian-12-additions.toml", "signing-key.pub.asc"] {
        std::fs::copy(fixtures.join(f), dir.join(f)).unwrap();
    }
    make_deb(&dir, "pincer-local-hello", "jq");
    let recipe = dir.join("debian-12-additions.toml");
    let out = sb.pincer(&["image", "build", recipe.to_str().unwrap(), "--container"]);
    assert!(
        out.status.success(),
        "image build failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(
            pincer::paths::image_cache_dir()
                .join("debian-12-additions")
                .join("manifest.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for p in ["pincer-vendor-hello", "pincer-local-hello", "jq", "sudo"] {
        assert!(manifest["packages"][p].is_string(), "{p} not in the image");
    }
    let tag = manifest["container"].as_str().unwrap();
    let script = r#"
        set -e
        grep -q '^deb \[signed-by=/etc/apt/keyrings/pincer-0.asc\] file:///tmp/pincer-tests-apt-repo ./' /etc/apt/sources.list
        gpg --dearmor < /etc/apt/keyrings/pincer-0.asc > /dev/null 2>&1 || test -s /etc/apt/keyrings/pincer-0.asc
        echo "jq $(echo '{"a": 7}' | jq .a)"
        echo "pyautogui $(python3 -c 'import importlib.metadata as m; print(m.version("pyautogui"))')"
        echo "mode $(stat -c %a /usr/local/bin/hello-from-recipe) $(hello-from-recipe)"
        echo "sudo $(su user -c 'echo password | sudo -S -k -p "" id -u')"
        if su user -c 'echo wrong | sudo -S -k -p "" true' 2>/dev/null; then echo "wrong password accepted"; fi
    "#;
    let text = podman_sh(tag, script);
    for want in [
        "jq 7",
        "pyautogui 0.9.54",
        "mode 755 hello from the recipe",
        "sudo 0",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("wrong password accepted"), "{text}");

    // The same repository with another key: named before anything is built.
    let other = sb.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let text = std::fs::read_to_string(&recipe)
        .unwrap()
        .replace("signing-key.pub.asc", "debian.gpg")
        .replace("debs = [\"pincer-local-hello_1.0_all.deb\"]\n", "");
    std::fs::write(other.join("wrong-key.toml"), text).unwrap();
    std::fs::copy(
        "/usr/share/keyrings/debian-archive-keyring.gpg",
        other.join("debian.gpg"),
    )
    .unwrap();
    let e = sb.pincer(&[
        "image",
        "build",
        other.join("wrong-key.toml").to_str().unwrap(),
        "--cache",
        sb.path().join("cache").to_str().unwrap(),
    ]);
    assert!(!e.status.success());
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(
        e.contains("cannot verify the repository file:///tmp/pincer-tests-apt-repo")
            && e.contains("debian.gpg"),
        "{e}"
    );
    assert!(!sb.path().join("cache/wrong-key").exists());
}

/// The `osworld` image is the machine OSWorld's task files assume, as its setups and
/// getters use it: user `user` with password `password` and sudo, `google-chrome` with
/// DevTools on the port a setup gives (reached through socat, as 78 tasks do) and its
/// profile under ~/.config/google-chrome, VLC's HTTP interface on 8080 with password
/// `password`, the apps, pyautogui on the session's screen, and Nautilus (GTK4) in the UI
/// tree. Built once and cached by recipe hash; booted under QEMU.
#[test]
fn the_osworld_image_is_the_machine_osworlds_tasks_assume() {
    let sb = Sandbox::new();
    let out = sb.pincer(&["image", "build", "osworld"]);
    assert!(
        out.status.success(),
        "image build failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The manifest has OSWorld's versions next to the image's (Debian 12's GIMP is newer).
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("gimp 2.10.3"), "{said}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(pincer::paths::image_cache_dir().join("osworld/manifest.json"))
            .unwrap(),
    )
    .unwrap();
    let gimp = &manifest["compared"]["packages"]["gimp"];
    assert_eq!(gimp["machine"], "2.10.30", "{manifest}");
    assert_eq!(gimp["image"], manifest["packages"]["gimp"], "{manifest}");
    assert!(manifest["compared"]["packages"]["code"]["image"].is_null());
    let _vm = Vm {
        sb: &sb,
        name: "osworld".into(),
    };
    // No --memory: the recipe's `vm_memory_mib` (3072) is the image's default.
    sb.pincer_ok(&["vm", "up", "--image", "osworld", "--name", "osworld"]);
    let run = |script: &str| {
        sb.pincer_ok(&[
            "exec",
            "--env",
            "osworld",
            "--timeout",
            "240",
            "--",
            "sh",
            "-c",
            script,
        ])
    };
    let text = run(r#"
        echo "user $(id -un) $(id -Gn | tr ' ' '\n' | grep -x sudo)"
        echo password | sudo -S -k -p '' true && echo "sudo with the password"
        for app in google-chrome vlc thunderbird gimp soffice nautilus gnome-terminal socat; do
          command -v $app > /dev/null && echo "has $app"
        done
        python3 -c 'import pyautogui; w, h = pyautogui.size(); print(f"pyautogui {w}x{h}")'
        awk '/^MemTotal/ { print "memory", int($2 / 1024 / 256) * 256 + 256, "MiB" }' /proc/meminfo
    "#);
    for want in [
        "user user sudo",
        "sudo with the password",
        "has google-chrome",
        "has vlc",
        "has thunderbird",
        "has gimp",
        "has soffice",
        "has nautilus",
        "has gnome-terminal",
        "has socat",
        "pyautogui 1920x1080",
        // MemTotal rounded up to 256 MiB (the kernel keeps ~100 MiB of 3072 for itself).
        "memory 3072 MiB",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    // OSWorld's Chrome setup: google-chrome on 1337, socat from 9222 to it.
    let text = run(r#"
        setsid google-chrome --headless=new --remote-debugging-port=1337 about:blank > /dev/null 2>&1 < /dev/null &
        setsid socat tcp-listen:9222,fork tcp:localhost:1337 > /dev/null 2>&1 < /dev/null &
        for i in $(seq 180); do
          curl -sf http://localhost:9222/json/version > /tmp/version.json && break
          sleep 1
        done
        grep -o '"Browser": *"[^"]*"' /tmp/version.json
        test -f ~/.config/google-chrome/Local\ State && echo "profile in ~/.config/google-chrome"
    "#);
    assert!(text.contains("\"Browser\""), "{text}");
    assert!(
        text.contains("profile in ~/.config/google-chrome"),
        "{text}"
    );
    // VLC as OSWorld's getters reach it, playing a tone (ten minutes of silence).
    let text = run(r#"
        python3 -c 'import wave; w = wave.open("/home/user/tone.wav", "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000); w.writeframes(bytes(2 * 8000 * 600)); w.close()'
        setsid vlc --intf dummy --aout dummy /home/user/tone.wav > /dev/null 2>&1 < /dev/null &
        for i in $(seq 180); do
          code=$(curl -s -o /dev/null -w '%{http_code}' -u :password http://localhost:8080/requests/status.xml)
          [ "$code" = 200 ] && break
          sleep 1
        done
        echo "with the password $code"
        echo "without $(curl -s -o /dev/null -w '%{http_code}' http://localhost:8080/requests/status.xml)"
    "#);
    assert!(text.contains("with the password 200"), "{text}");
    assert!(text.contains("without 401"), "{text}");
    // OSWorld's vlc_playing_info getter and is_vlc_playing metric on it: the tone is
    // playing by its name, not by another; stopped, it is not.
    let playing = |file: &str| {
        json!({"func": "is_vlc_playing",
            "result": {"type": "vlc_playing_info", "dest": "status.xml"},
            "expected": {"type": "rule", "rules": {"type": "file_name", "file_name": file}}})
    };
    let tasks = import_osworld_evaluators(
        &sb,
        "vlc",
        &[
            ("tone", playing("tone.wav")),
            ("other", playing("other.wav")),
        ],
    );
    let score = |task: &str| osworld_score(&sb, &tasks, None, task);
    run(r#"for i in $(seq 60); do
          curl -s -u :password http://localhost:8080/requests/status.xml | grep -q '<state>playing</state>' && break
          sleep 1
        done"#);
    assert_eq!(score("vlc/tone").0, Some(1.0), "{}", score("vlc/tone").1);
    assert_eq!(score("vlc/other").0, Some(0.0), "{}", score("vlc/other").1);
    run(
        r#"curl -s -o /dev/null -u :password 'http://localhost:8080/requests/status.xml?command=pl_stop'
        for i in $(seq 60); do
          curl -s -u :password http://localhost:8080/requests/status.xml | grep -q '<state>stopped</state>' && break
          sleep 1
        done"#,
    );
    assert_eq!(score("vlc/tone").0, Some(0.0), "{}", score("vlc/tone").1);
    // Nautilus is GTK4: its widgets are in the tree.
    sb.pincer_ok(&["launch", "--env", "osworld", "--", "nautilus"]);
    let found = (0..90).any(|_| {
        let tree = sb.pincer(&[
            "tree", "--env", "osworld", "--app", "nautilus", "--format", "text",
        ]);
        let text = String::from_utf8_lossy(&tree.stdout);
        if text.contains("label \"Home\"") {
            return true;
        }
        std::thread::sleep(Duration::from_secs(2));
        false
    });
    assert!(found, "Nautilus's sidebar never showed up in the tree");
}

/// One task of each domain of the `osworld-offline` suite (and an infeasible one), run on
/// the `osworld` image: OSWorld's own metrics score each 1.0 after its oracle, and three
/// of them 0 when the agent says it is done at once, before acting (so they do not pass
/// as set up). The whole suite, with the untouched and the random agent too, is in
/// `./run.sh bench`.
#[test]
fn osworld_offline_tasks_pass_with_their_oracles_and_fail_untouched() {
    let _heavy = heavy();
    const TASKS: &[&str] = &[
        "os/b6781586-6346-41cd-935a-a6b1487918fc",
        "vlc/215dfd39-f493-4bc3-a027-8a97d72c61bf",
        "gimp/7b7617bd-57cc-468e-9c91-40c4ec2bcb3d",
        "multi_apps/937087b6-f668-4ba6-9110-60682ee33441",
        "libreoffice_impress/2cd43775-7085-45d8-89fa-9e35c0a915cf",
        "chrome/030eeff7-b492-4218-b312-701ec99ee0cc",
        "chrome/3720f614-37fd-4d04-8a6b-76f54f8c222d",
    ];
    let sb = Sandbox::new();
    built(&sb, "osworld");
    // Set up as they come, they must not pass: three of them here (one with an app to
    // start), the whole suite in `./run.sh bench`.
    const UNTOUCHED: &[&str] = &[TASKS[0], TASKS[1], TASKS[4]];
    // The image's 3072 MiB (`vm_memory_mib`), with no --vm-memory.
    let campaign =
        |tasks: &str, name: &str, ids: &[&str]| oracle_campaign(&sb, "osworld", tasks, name, ids);
    for r in campaign("osworld-offline", "solved", TASKS) {
        assert_eq!(r["score"], 1.0, "{r}");
        assert_eq!(r["termination"], "success", "{r}");
    }
    // The same tasks, each with an oracle that says it is done before doing anything.
    let untouched = sb.path().join("untouched");
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/osworld-offline");
    for t in UNTOUCHED {
        let mut task: Value = serde_json::from_str(
            &std::fs::read_to_string(suite.join(format!("{t}.json"))).unwrap(),
        )
        .unwrap();
        task["oracle"] = json!([{"do": "complete"}]);
        let path = untouched.join(format!("{t}.json"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, task.to_string()).unwrap();
    }
    for r in campaign(untouched.to_str().unwrap(), "untouched", UNTOUCHED) {
        assert_eq!(r["score"], 0.0, "{r}");
        assert_ne!(r["termination"], "success", "{r}");
    }
}

/// A stand-in for a user's own VM disk, named as one: `tests/images/standin-disk.sh` (Debian
/// 12 booted by its own GRUB for `firmware`, user `alex` with a desktop session at boot, no
/// pincer inside). Built once per firmware (about 4 minutes) and kept beside the images,
/// by the script's hash.
fn standin_disk(firmware: &str) -> PathBuf {
    use std::hash::{Hash as _, Hasher as _};
    const SCRIPT: &str = include_str!("../images/standin-disk.sh");
    let mut h = std::collections::hash_map::DefaultHasher::new();
    SCRIPT.hash(&mut h);
    let cache = pincer::paths::image_cache_dir();
    let prefix = format!(".standin-{firmware}-");
    let disk = cache.join(format!("{prefix}{:016x}.qcow2", h.finish()));
    if disk.exists() {
        return disk;
    }
    std::fs::create_dir_all(&cache).unwrap();
    for e in std::fs::read_dir(&cache).unwrap().filter_map(Result::ok) {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let part = disk.with_extension("part");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/standin-disk.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&part)
        .arg(firmware)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the stand-in disk failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&part, &disk).unwrap();
    disk
}

/// `pincer image import` of the stand-in disk for `firmware`, then a VM of it: the agent
/// answers from the disk's own desktop session as its user, the disk booted through its own
/// bootloader, and a reset throws away what was done.
fn a_users_own_disk_is_imported_and_resets(firmware: &str) {
    let _heavy = heavy();
    let sb = Sandbox::new();
    let standin = standin_disk(firmware);
    // Where users keep disks: spaces and non-ASCII in the path.
    let dir = sb.path().join("my disks é");
    std::fs::create_dir_all(&dir).unwrap();
    let disk = dir.join("lab machine.qcow2");
    if std::fs::hard_link(&standin, &disk).is_err() {
        std::fs::copy(&standin, &disk).unwrap();
    }
    let before = std::fs::metadata(&disk).unwrap();
    let cache = sb.path().join("images");
    let cache = cache.to_str().unwrap();
    let name = format!("standin-{firmware}");
    let import = [
        "image",
        "import",
        disk.to_str().unwrap(),
        "--name",
        &name,
        "--cache",
        cache,
    ];
    let said = sb.pincer_ok(&import);
    assert!(
        said.contains(&format!("boots under {firmware}, agent as alex")),
        "{said}"
    );
    assert!(said.contains("debian bookworm"), "{said}");
    // The user's file is only read.
    let after = std::fs::metadata(&disk).unwrap();
    assert_eq!(
        (before.len(), before.modified().unwrap()),
        (after.len(), after.modified().unwrap())
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(cache).join(&name).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["firmware"], firmware);
    assert_eq!(manifest["imported"]["user"], "alex");
    assert_eq!(manifest["imported"]["session"], "linger");
    assert!(manifest["packages"]["zenity"].is_string(), "{manifest}");
    // A second import under the name is refused before anything is copied.
    let again = sb.pincer(&import);
    let e = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && e.contains("pincer image rm"),
        "{e}"
    );

    let vm = format!("own-{firmware}");
    let up = sb.pincer_ok(&[
        "vm", "up", "--image", &name, "--name", &vm, "--cache", cache,
    ]);
    assert!(up.contains(&format!("VM '{vm}' is up")), "{up}");
    let _vm = Vm {
        sb: &sb,
        name: vm.clone(),
    };
    // The agent sees the disk's own desktop: its screen, and the dialog its session opens.
    let shot = sb.path().join("shot.png");
    sb.pincer_ok(&["screenshot", "--env", &vm, "-o", shot.to_str().unwrap()]);
    assert_eq!(imagesize(&shot), (1280, 800));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let t = sb.pincer(&["tree", "--env", &vm, "--app", "zenity", "--format", "text"]);
        if String::from_utf8_lossy(&t.stdout).contains("the user's own desktop") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no zenity dialog in the VM's UI tree"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // As the disk's user, started with their session, and booted by the disk's GRUB under
    // the firmware asked for (not by QEMU loading a kernel).
    let facts = sh(
        &sb,
        &vm,
        "id -un; systemctl --user is-active pincer-agent.service; cat /proc/cmdline; test -d /sys/firmware/efi && echo firmware=uefi || echo firmware=bios",
    );
    assert!(facts.starts_with("alex\nactive\n"), "{facts}");
    assert!(
        facts.contains("BOOT_IMAGE=") && !facts.contains("pincer.agent_disk"),
        "{facts}"
    );
    assert!(facts.contains(&format!("firmware={firmware}")), "{facts}");

    sh(&sb, &vm, "echo task > ~/mark.txt");
    assert!(sh(&sb, &vm, "cat ~/mark.txt").contains("task"));
    let reset = sb.pincer_ok(&["vm", "reset", &vm]);
    assert!(reset.contains("reset"), "{reset}");
    let gone = sh(
        &sb,
        &vm,
        "test -e ~/mark.txt && echo still there; echo checked",
    );
    assert_eq!(gone.trim(), "checked");
    let off = clock_offset(&sb, &vm);
    assert!(
        off.abs() < 1.0,
        "the guest's clock is {off:+.2} s off after a reset"
    );
    sb.pincer_ok(&["vm", "down", &vm]);
}

#[test]
fn a_users_own_bios_disk_is_imported_boots_through_its_grub_and_resets() {
    a_users_own_disk_is_imported_and_resets("bios");
}

#[test]
fn a_users_own_uefi_disk_is_imported_boots_under_ovmf_and_resets() {
    a_users_own_disk_is_imported_and_resets("uefi");
}

#[test]
fn disks_that_cannot_be_imported_are_refused_with_the_reason() {
    let sb = Sandbox::new();
    let cache = sb.path().join("images");
    let cache = cache.to_str().unwrap();
    let refused = |args: &[&str], want: &str| -> String {
        let mut all = vec!["image", "import"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--cache", cache]);
        let out = sb.pincer(&all);
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && e.contains(want), "{all:?}: {e}");
        e
    };
    let text = sb.path().join("notes.txt");
    std::fs::write(&text, "not a disk\n".repeat(100)).unwrap();
    refused(
        &[text.to_str().unwrap(), "--name", "notes"],
        "not a bootable disk",
    );
    let vmdk = sb.path().join("disk.vmdk");
    let made = std::process::Command::new("qemu-img")
        .args(["create", "-q", "-f", "vmdk"])
        .arg(&vmdk)
        .arg("16M")
        .status()
        .unwrap();
    assert!(made.success());
    refused(
        &[vmdk.to_str().unwrap(), "--name", "v"],
        "qemu-img convert -O qcow2",
    );
    refused(&["/nonexistent/disk.qcow2", "--name", "n"], "no such file");
    refused(
        &[text.to_str().unwrap(), "--name", "debian-12-minimal"],
        "bundled recipe",
    );
    refused(
        &[text.to_str().unwrap(), "--name", "My Disk"],
        "cannot name an image",
    );
    refused(
        &[text.to_str().unwrap(), "--name", "n", "--user", "x;reboot"],
        "not a login name",
    );
    // A user the disk does not have: the disk's users are named.
    let standin = standin_disk("bios");
    let e = refused(
        &[
            standin.to_str().unwrap(),
            "--name",
            "n",
            "--user",
            "mallory",
        ],
        "the disk has no user 'mallory'",
    );
    assert!(e.contains("(the disk's users: alex"), "{e}");
    // Nothing of the refused imports is left in the cache.
    let left: Vec<_> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        left.iter()
            .all(|n| n.to_string_lossy().starts_with(".lock-")),
        "{left:?}"
    );
}

/// CRAB's Ubuntu tasks, imported from CRAB's own files, pass with the oracles their
/// templates compose on the `crab` image (its user, apps and files under /home/crab): vim
/// then cat, GIMP then the wallpaper, a copy by extension and an answer; set up as they
/// come (an oracle that says it is done at once), they do not pass. The 26 whose templates
/// all have oracles, with the random agent too, are in `./run.sh bench`.
#[test]
fn crab_tasks_pass_with_their_composed_oracles_on_the_crab_image() {
    let _heavy = heavy();
    const TASKS: &[&str] = &[
        "6c560516-ca14-4f97-b51d-16ad81fc29e4",
        "696ca9bb-89ea-4cd5-b693-f2d749d964b1",
        "22f05f6f-6aef-4786-958f-14f559eaf014",
        "0a893c2e-eec5-47cc-a930-eb01c5f17683",
    ];
    let sb = Sandbox::new();
    built(&sb, "crab");
    let imported = import_crab(&sb, "crab tasks");
    let campaign = |tasks: &Path, name: &str, ids: &[&str]| {
        oracle_campaign(&sb, "crab", tasks.to_str().unwrap(), name, ids)
    };
    for r in campaign(&imported, "solved", TASKS) {
        assert_eq!(r["termination"], "success", "{r}");
        assert_eq!(r["passed"], r["total"], "{r}");
    }
    let untouched = sb.path().join("untouched");
    std::fs::create_dir_all(&untouched).unwrap();
    for t in &TASKS[1..3] {
        let file = format!("{t}.json");
        let mut task: Value = serde_json::from_str(
            &std::fs::read_to_string(imported.join("ubuntu").join(&file)).unwrap(),
        )
        .unwrap();
        task["oracle"] = json!([{"do": "complete"}]);
        std::fs::write(untouched.join(&file), task.to_string()).unwrap();
    }
    for r in campaign(&untouched, "untouched", &TASKS[1..3]) {
        assert_ne!(r["termination"], "success", "{r}");
        assert_eq!(r["passed"], 0, "{r}");
    }
}

/// Builds `image` from its recipe (a no-op when the cache holds it).
fn built(sb: &Sandbox, image: &str) {
    let out = sb.pincer(&["image", "build", image]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pincer run` of the oracle over the tasks `ids` of `tasks` on VMs of `image`, into the
/// sandbox's `name`; the records, one per task.
fn oracle_campaign(sb: &Sandbox, image: &str, tasks: &str, name: &str, ids: &[&str]) -> Vec<Value> {
    let out = sb.path().join(name);
    let mut args = vec![
        "run",
        "--tasks",
        tasks,
        "--agent",
        "oracle",
        "--vm",
        image,
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ];
    for t in ids {
        args.extend(["--task", t]);
    }
    let log = sb.pincer_ok(&args);
    let recs = results(&out);
    assert_eq!(recs.len(), ids.len(), "{log}");
    recs
}

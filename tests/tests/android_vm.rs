//! The Android shim's virtual touchscreen and keyboard against a real Linux kernel's uinput.
//! The host here has no uinput, and Android runs a Linux kernel, so the shim's static x86_64
//! musl build (what phones get) runs in a VM of Debian 12's kernel (`tests/images/
//! debian-12-uinput.toml`: the module loaded, the node open to the user, as on a phone to
//! the adb shell user), with a stand-in `wm` first on its `PATH`. It takes the agent's port
//! and identity, the host registers it as an Android environment over the TCP transport,
//! and touches and keys go through the shim's real protocol. What the kernel made of it is
//! read in the VM: the devices (`/proc/bus/input/devices`), their axes (`EVIOCGABS`, through
//! perl, which every Debian has) and the `struct input_event`s readers of the event nodes
//! got, which must be exactly what the shim's `--uinput-log` gives (tests/tests/android.rs).
//! Then: a second shim beside the first, a shim killed (its devices go with it),
//! `pincer-shim --check-input` (what `pincer android doctor` runs), and a `wm` that says 0x0.
//! One VM boot (the image's first costs a build, ~1.5 min with its packages cached, and a
//! first boot, ~45 s under TCG; later runs restore its golden state in about a second).

use pincer::env::{Deadlines, Environment};
use pincer_shared::Platform;
use pincer_shared::action::{Action, Gesture, Point, SystemKey};
use pincer_tests::Sandbox;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The image: Debian 12 with uinput open to the user.
fn recipe() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("images/debian-12-uinput.toml")
}
const IMAGE: &str = "debian-12-uinput";
/// Where the phone's files go in the VM.
const PHONE: &str = "/home/pincer/phone";

/// A VM that is stopped when dropped.
struct Vm<'a> {
    sb: &'a Sandbox,
    name: &'static str,
}

impl Drop for Vm<'_> {
    fn drop(&mut self) {
        let _ = self.sb.pincer(&["vm", "down", self.name]);
    }
}

/// Runs a shell command line in environment `env` and returns its output.
fn sh(sb: &Sandbox, env: &str, script: &str) -> String {
    sb.pincer_ok(&["exec", "--env", env, "--", "sh", "-c", script])
}

/// Starts a shell command line on the phone in the background (it outlives the request).
fn launch(sb: &Sandbox, script: &str) {
    sb.pincer_ok(&["launch", "--env", "phone", "--", "sh", "-c", script]);
}

/// The static x86_64 build, stripped of debug information for a quicker copy.
fn shim(sb: &Sandbox) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .ancestors()
        .nth(3)
        .unwrap()
        .join("x86_64-unknown-linux-musl/debug/pincer-shim");
    assert!(
        built.is_file(),
        "{} is missing: build it with `./run.sh shim` (`./run.sh test` does)",
        built.display()
    );
    let out = sb.path().join("pincer-shim");
    let st = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&out)
        .arg(&built)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// Writes a local file for the VM.
fn local(sb: &Sandbox, name: &str, text: &str) -> PathBuf {
    let p = sb.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// One `struct input_event` as a reader of an event node gets it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Event {
    /// The kernel's time stamp, seconds since the epoch (the event clock is real time).
    time: f64,
    kind: u16,
    code: u16,
    value: i32,
}

/// The events in a file of `struct input_event`s, as `od -An -v -td4 -w24` prints it.
fn events(sb: &Sandbox, file: &str) -> Vec<Event> {
    let text = sh(sb, "phone", &format!("od -An -v -td4 -w24 {file}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let w: Vec<i64> = l.split_whitespace().map(|v| v.parse().unwrap()).collect();
            assert_eq!(w.len(), 6, "{l}");
            let tc = w[4] as u32;
            Event {
                time: ((w[0] as u32 as u64) | ((w[1] as u64) << 32)) as f64
                    + w[2] as u32 as f64 / 1e6,
                kind: (tc & 0xffff) as u16,
                code: (tc >> 16) as u16,
                value: w[5] as i32,
            }
        })
        .collect()
}

fn tcv(es: &[Event]) -> Vec<(u16, u16, i32)> {
    es.iter().map(|e| (e.kind, e.code, e.value)).collect()
}

const SYN: (u16, u16, i32) = (0, 0, 0);

/// A finger down at `(x, y)`, a contact with tracking id `id`.
fn down(x: i32, y: i32, id: i32) -> Vec<(u16, u16, i32)> {
    vec![
        (3, 0x39, id),
        (3, 0x35, x),
        (3, 0x36, y),
        (1, 0x14a, 1),
        SYN,
    ]
}

fn up() -> Vec<(u16, u16, i32)> {
    vec![(3, 0x39, -1), (1, 0x14a, 0), SYN]
}

fn key(code: u16) -> Vec<(u16, u16, i32)> {
    vec![(1, code, 1), SYN, (1, code, 0), SYN]
}

/// The `pincer *` devices in `/proc/bus/input/devices`: name, then the lines of its block.
fn devices(sb: &Sandbox) -> Vec<(String, Vec<String>)> {
    sh(sb, "phone", "cat /proc/bus/input/devices")
        .split("\n\n")
        .filter_map(|block| {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("N: Name=\""))?
                .trim_end_matches('"');
            name.starts_with("pincer ").then(|| {
                (
                    name.to_owned(),
                    block.lines().map(|l| l.trim().to_owned()).collect(),
                )
            })
        })
        .collect()
}

/// The event node of the one device named `name`.
fn node(block: &[String]) -> String {
    let handlers = block
        .iter()
        .find_map(|l| l.strip_prefix("H: Handlers="))
        .unwrap();
    let ev = handlers
        .split_whitespace()
        .find(|h| h.starts_with("event"))
        .unwrap();
    format!("/dev/input/{ev}")
}

/// Waits until `check` holds, up to `secs`.
fn wait_for(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shims_devices_are_real_to_a_linux_kernel() {
    let sb = Sandbox::new();
    let recipe = recipe();
    sb.pincer_ok(&["image", "build", recipe.to_str().unwrap()]);
    sb.pincer_ok(&["vm", "up", "--image", IMAGE, "--name", "uinput"]);
    let _vm = Vm {
        sb: &sb,
        name: "uinput",
    };

    // The phone: the shim, `wm` saying what a phone would, and `input` logging (used only
    // if the devices cannot be made).
    let files = [
        (shim(&sb), "pincer-shim", "755"),
        (
            local(&sb, "wm", "#!/bin/sh\necho 'Physical size: 1080x2400'\n"),
            "wm",
            "755",
        ),
        (
            local(
                &sb,
                "input",
                "#!/bin/sh\necho \"$*\" >> \"$HOME/input.log\"\n",
            ),
            "input",
            "755",
        ),
        (
            local(&sb, "wm-0x0", "#!/bin/sh\necho 'Physical size: 0x0'\n"),
            "lying/wm",
            "755",
        ),
    ];
    for (from, to, mode) in &files {
        sb.pincer_ok(&[
            "file",
            "put",
            "--env",
            "uinput",
            "--mode",
            mode,
            from.to_str().unwrap(),
            &format!("{PHONE}/{to}"),
        ]);
    }
    // The shim takes the agent's port and identity: its own unit, which stops the agent
    // (after this exec has answered) and becomes the shim.
    let (_, vm) = sb.registry().entry(Some("uinput")).unwrap();
    sh(
        &sb,
        "uinput",
        &format!(
            "systemd-run --user --collect --unit=pincer-shim --setenv=PATH={PHONE}:/usr/bin:/bin \
             sh -c 'sleep 1; systemctl --user stop pincer-agent.service; exec {PHONE}/pincer-shim \
             --listen 0.0.0.0:7000 --name phone --state-dir /home/pincer/.local/state/pincer-agent'"
        ),
    );
    // `env add` asks the guest what it is: until the shim has taken the port, the Linux
    // agent answers there, and a phone registered as it is refused.
    let add = [
        "env",
        "add",
        "phone",
        vm.addr.as_deref().unwrap(),
        "--platform",
        "android",
        "--transport",
        "tcp",
        "--token-file",
        vm.token_file.to_str().unwrap(),
        "--fingerprint",
        vm.fingerprint.as_deref().unwrap(),
    ];
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let out = sb.pincer(&add);
        if out.status.success() {
            break;
        }
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            Instant::now() < end,
            "the shim never answered env add as a phone: {said}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let end = Instant::now() + Duration::from_secs(30);
    let env: Environment = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        match sb
            .registry()
            .connect(Some("phone"), Deadlines::default())
            .await
        {
            Ok(env) if env.info().is_some_and(|i| i.platform == Platform::Android) => break env,
            other => assert!(
                Instant::now() < end,
                "the shim did not answer as an Android guest: {:?}",
                other.map(|e| e.info().map(|i| i.platform))
            ),
        }
    };

    // The devices, as the kernel registered them: names, the DIRECT property, the event
    // types, keys and axes they carry (bitmaps, long words highest first).
    let devs = devices(&sb);
    let names: Vec<&str> = devs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["pincer touchscreen", "pincer keyboard"], "{devs:?}");
    let (touch, keys) = (&devs[0].1, &devs[1].1);
    for want in [
        "I: Bus=0006 Vendor=7069 Product=6e63 Version=0001",
        "B: PROP=2",              // INPUT_PROP_DIRECT: a touchscreen, not a touchpad
        "B: EV=b",                // SYN, KEY, ABS
        "B: KEY=400 0 0 0 0 0",   // BTN_TOUCH (0x14a)
        "B: ABS=260800000000000", // MT_SLOT, MT_POSITION_X, MT_POSITION_Y, MT_TRACKING_ID
    ] {
        assert!(touch.iter().any(|l| l == want), "{want} not in {touch:?}");
    }
    for want in [
        "B: PROP=0",
        "B: EV=3", // SYN, KEY
        // APPSELECT (0x244); HOMEPAGE (172) and BACK (158); ENTER (28) and BACKSPACE (14).
        "B: KEY=10 0 0 0 0 0 0 100040000000 0 10004000",
    ] {
        assert!(keys.iter().any(|l| l == want), "{want} not in {keys:?}");
    }
    let (touch_node, keys_node) = (node(touch), node(keys));
    // The axes: EVIOCGABS(code) = _IOR('E', 0x40 + code, struct input_absinfo), which
    // holds value, minimum, maximum, fuzz, flat, resolution.
    let abs = sh(
        &sb,
        "phone",
        &format!(
            "perl -e 'open F, \"<\", \"{touch_node}\" or die \"$!\"; for $c (0x2f, 0x35, 0x36, 0x39) \
             {{ $b = \"\\0\" x 24; ioctl(F, (2 << 30) | (24 << 16) | (0x45 << 8) | (0x40 + $c), $b) \
             or die \"$!\"; print join(\" \", $c, unpack(\"l6\", $b)), \"\\n\" }}'"
        ),
    );
    assert_eq!(
        abs.lines().collect::<Vec<_>>(),
        [
            "47 0 0 9 0 0 0",     // ABS_MT_SLOT: 10 slots
            "53 0 0 1079 0 0 0",  // ABS_MT_POSITION_X: the screen's width
            "54 0 0 2399 0 0 0",  // ABS_MT_POSITION_Y: its height
            "57 0 0 65535 0 0 0", // ABS_MT_TRACKING_ID
        ]
    );

    // Readers on both event nodes (as Android's input system is), open before any touch.
    for (n, out) in [(&touch_node, "touch.bin"), (&keys_node, "keys.bin")] {
        launch(&sb, &format!("exec cat {n} > $HOME/{out}"));
    }
    wait_for(20, "the readers to open the event nodes", || {
        sh(
            &sb,
            "phone",
            "ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c /dev/input/event || true",
        )
        .trim()
            == "2"
    });

    // A tap, a swipe straight up, a long press; back, home, enter.
    env.act(Action::Touch(Gesture::Tap {
        at: Point::new(540, 1200),
    }))
    .await
    .unwrap();
    env.act(Action::Touch(Gesture::Swipe {
        from: Point::new(100, 2000),
        to: Point::new(100, 1000),
        duration_ms: 100,
    }))
    .await
    .unwrap();
    env.act(Action::Touch(Gesture::LongPress {
        at: Point::new(300, 400),
        duration_ms: 600,
    }))
    .await
    .unwrap();
    for k in [SystemKey::Back, SystemKey::Home, SystemKey::Enter] {
        env.act(Action::SystemKey(k)).await.unwrap();
    }

    let got = events(&sb, "$HOME/touch.bin");
    let ids: Vec<i32> = got
        .iter()
        .filter(|e| e.kind == 3 && e.code == 0x39 && e.value >= 0)
        .map(|e| e.value)
        .collect();
    assert_eq!(ids.len(), 3, "three contacts: {got:?}");
    assert!(
        ids[0] > 0 && ids[1] != ids[0] && ids[2] != ids[1],
        "{ids:?}"
    );
    // Exactly the stream `--uinput-log` writes for these actions (tests/tests/android.rs):
    // the kernel dropped nothing and added nothing.
    let mut want = [down(540, 1200, ids[0]), up(), down(100, 2000, ids[1])].concat();
    // Ten moves, one each 10 ms: y alone changes.
    for i in 1..=10 {
        want.extend([(3, 0x36, 2000 - 100 * i), SYN]);
    }
    want.extend(up());
    want.extend([down(300, 400, ids[2]), up()].concat());
    assert_eq!(tcv(&got), want);
    // The swipe took its 100 ms, the long press held at least its 600 ms, on the kernel's
    // clock.
    let downs: Vec<usize> = (0..got.len())
        .filter(|&i| got[i].kind == 3 && got[i].code == 0x39)
        .collect();
    let swipe = got[downs[3]].time - got[downs[2]].time;
    assert!((0.09..2.0).contains(&swipe), "the swipe took {swipe} s");
    let held = got[downs[5]].time - got[downs[4]].time;
    assert!((0.6..3.0).contains(&held), "the long press held {held} s");
    let got_keys = events(&sb, "$HOME/keys.bin");
    assert_eq!(
        tcv(&got_keys),
        [key(158), key(172), key(28)].concat(),
        "back, home, enter"
    );
    let log = sh(&sb, "phone", "cat $HOME/input.log 2>/dev/null || true");
    assert!(log.is_empty(), "nothing went to `input`: {log}");

    // From the host's request to the kernel's event: twenty taps across the screen, each
    // answered once its events are written (the kernel stamps them then), so a tap's round
    // trip bounds it. The VM's and the host's clocks are not compared: under TCG a read of
    // the VM's clock is known to tens of milliseconds only.
    let before = got.len();
    let mut rtt = Vec::new();
    for i in 0..20 {
        let t = Instant::now();
        env.act(Action::Touch(Gesture::Tap {
            at: Point::new(10 + 50 * i, 20 + 100 * i),
        }))
        .await
        .unwrap();
        rtt.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let more = events(&sb, "$HOME/touch.bin");
    let xs: Vec<i32> = more[before..]
        .iter()
        .filter(|e| e.kind == 3 && e.code == 0x35)
        .map(|e| e.value)
        .collect();
    assert_eq!(xs, (0..20).map(|i| 10 + 50 * i).collect::<Vec<_>>());
    rtt.sort_by(f64::total_cmp);
    eprintln!(
        "a tap from the host to the kernel and back (TCG VM, TCP forward, 20 taps): median {:.2} ms, min {:.2} ms, max {:.2} ms",
        rtt[10], rtt[0], rtt[19],
    );

    // A second shim beside the first: its own pair of devices, the first's still there;
    // killed, its devices go with its descriptors, and the first's still work.
    let start_shim = |dir: &str, path: &str| {
        launch(
            &sb,
            &format!(
                "PATH={path}:/usr/bin:/bin exec {PHONE}/pincer-shim --listen 127.0.0.1:0 \
                 --state-dir /tmp/{dir} --ready-file /tmp/{dir}/ready.json > /tmp/{dir}.log 2>&1"
            ),
        );
        wait_for(30, dir, || {
            sh(
                &sb,
                "phone",
                &format!("test -s /tmp/{dir}/ready.json && echo yes || true"),
            )
            .trim()
                == "yes"
        });
        let ready = sh(&sb, "phone", &format!("cat /tmp/{dir}/ready.json"));
        let v: serde_json::Value = serde_json::from_str(&ready).unwrap();
        v["pid"].as_u64().unwrap()
    };
    let second = start_shim("second", PHONE);
    let names: Vec<String> = devices(&sb).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "pincer touchscreen",
            "pincer keyboard",
            "pincer touchscreen",
            "pincer keyboard"
        ]
    );
    sh(&sb, "phone", &format!("kill -9 {second}"));
    wait_for(10, "the killed shim's devices to go", || {
        devices(&sb).len() == 2
    });
    let before = events(&sb, "$HOME/touch.bin").len();
    env.act(Action::Touch(Gesture::Tap {
        at: Point::new(7, 8),
    }))
    .await
    .unwrap();
    let after = events(&sb, "$HOME/touch.bin");
    // (After its tracking id, which the test does not know.)
    assert_eq!(
        &tcv(&after[before..])[1..],
        &[down(7, 8, 0), up()].concat()[1..]
    );

    // `pincer-shim --check-input` (what `pincer android doctor` runs) beside the running
    // shim: a pair made, named as the kernel named them, gone when it exits.
    let out = sh(
        &sb,
        "phone",
        &format!("PATH={PHONE}:/usr/bin:/bin {PHONE}/pincer-shim --check-input 2>/dev/null"),
    );
    let named = |what: &str| {
        let from = out
            .find(&format!("{what} ("))
            .unwrap_or_else(|| panic!("{out}"))
            + what.len()
            + 2;
        out[from..from + out[from..].find(')').unwrap()].to_owned()
    };
    let (t, k) = (named("touchscreen"), named("keyboard"));
    assert!(
        t.starts_with("input") && k.starts_with("input") && t != k,
        "{out}"
    );
    assert!(
        out.starts_with("virtual input devices: a 1080x2400 touchscreen")
            && out
                .trim_end()
                .ends_with("made through /dev/uinput, then removed"),
        "{out}"
    );
    let gone = sh(
        &sb,
        "phone",
        &format!(
            "ls -d /sys/devices/virtual/input/{t} /sys/devices/virtual/input/{k} 2>&1 || true"
        ),
    );
    assert_eq!(gone.matches("No such file").count(), 2, "{gone}");
    assert_eq!(devices(&sb).len(), 2);

    // A `wm` that says 0x0: no devices (a kernel would take an axis of 0..0, and every
    // touch would fall off it); the shim says why and uses `input` commands.
    start_shim("lying", &format!("{PHONE}/lying:{PHONE}"));
    let log = sh(&sb, "phone", "cat /tmp/lying.log");
    assert!(log.contains("`wm size` says 0x0"), "{log}");
    assert_eq!(devices(&sb).len(), 2, "no devices for a 0x0 screen");
    let out = sh(
        &sb,
        "phone",
        &format!(
            "PATH={PHONE}/lying:{PHONE}:/usr/bin:/bin {PHONE}/pincer-shim --check-input 2>/dev/null; echo status $?"
        ),
    );
    assert!(
        out.starts_with("no virtual input devices (`wm size` says 0x0, which is no screen)")
            && out.contains("status 1"),
        "{out}"
    );
}

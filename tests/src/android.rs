//! A stand-in Android device (no Android can run on this machine: no binder, no
//! emulator-capable KVM, no system image): a directory of scripts named like Android's own
//! commands (`screencap`, `input`, `uiautomator`, `settings`, `content`, `dumpsys`, `cmd`,
//! `am`, `pm`, `getprop`, `wm`), put first on `PATH`, that replay outputs recorded from real
//! devices (`fixtures/android/`) and keep the device's state in files a test can change:
//! which app is in front, what the screen shows, the settings, content-provider rows. What
//! the shim sends to `input` is logged, so a test sees every tap, and what it types is kept
//! as a text field would have it (`input text`, Enter, and paste of the clipboard, which
//! the shim's own clipboard helper sets when [`Phone::with_clipboard`] installs a stand-in
//! `app_process` running it on a JVM: see [`crate::android_framework`]). A test can also
//! script the phone ([`Phone::play`]): scenes that follow each other when a tap lands on a
//! named node, a text is typed or a key pressed, as an app moves between screens.

use crate::android_framework::{ClipApi, Framework, app_process_script};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The recorded outputs.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/android")
}

/// A stand-in device: its command scripts and its state.
#[derive(Debug)]
pub struct Phone {
    /// The scripts (first on `PATH`).
    pub bin: PathBuf,
    /// The state the scripts read and write.
    pub state: PathBuf,
    /// The stand-in framework `app_process` runs the clipboard helper over, if any.
    framework: Option<Framework>,
    _dir: tempfile::TempDir,
}

/// One script: `#!/bin/sh`, the state directory in `$S`, then `body`.
fn script(bin: &Path, state: &Path, name: &str, body: &str) {
    let text = format!(
        "#!/bin/sh\n# pincer test stand-in for Android's `{name}`: replays recorded outputs.\nS='{}'\n{body}\n",
        state.display()
    );
    let p = bin.join(name);
    std::fs::write(&p, text).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Phone {
    /// A phone showing `screen` (a uiautomator dump) with `foreground` in front.
    pub fn new(screen: &str, foreground: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("pincer-phone-")
            .tempdir()
            .unwrap();
        let (bin, state) = (dir.path().join("bin"), dir.path().join("state"));
        for d in [
            &bin,
            &state,
            &state.join("settings"),
            &state.join("content"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        let phone = Self {
            bin,
            state,
            framework: None,
            _dir: dir,
        };
        phone.set_screen(screen);
        phone.set_foreground(foreground);
        phone.write(
            "getprop.txt",
            "[ro.build.version.release]: [14]\n[ro.build.version.sdk]: [34]\n[ro.product.cpu.abi]: [x86_64]\n[ro.product.model]: [pincer stand-in]\n",
        );
        phone.write(
            "wm-size.txt",
            &format!("Physical size: {}x{}\n", SIZE.0, SIZE.1),
        );
        phone.write("wm-density.txt", "Physical density: 420\n");
        phone.write(
            "battery.txt",
            "Current Battery Service state:\n  AC powered: false\n  USB powered: true\n  Wireless powered: false\n  status: 2\n  level: 85\n  scale: 100\n",
        );
        phone.write(
            "packages.txt",
            "package:com.android.settings versionCode:34\npackage:com.android.contacts versionCode:34\npackage:com.google.android.apps.messaging versionCode:1001\n",
        );
        let (b, s) = (&phone.bin, &phone.state);
        script(
            b,
            s,
            "screencap",
            "if [ \"$1\" = -p ]; then echo 'PNG capture is not recorded' >&2; exit 1; fi\ncat \"$S/screen.raw\"",
        );
        script(
            b,
            s,
            "uiautomator",
            "[ \"$1\" = dump ] || { echo \"unknown command $1\" >&2; exit 1; }\nout=${2:-/sdcard/window_dump.xml}\nif [ -f \"$S/dump-error.txt\" ]; then cat \"$S/dump-error.txt\"; exit 0; fi\ncp \"$S/screen.xml\" \"$out\" && echo \"UI hierchary dumped to: $out\"",
        );
        // What a text field gets: `input text` reads `%s` as a space; paste inserts the clip.
        script(
            b,
            s,
            "input",
            "echo \"$*\" >> \"$S/input.log\"\ncase \"$1 $2\" in\n  'text '*) printf '%s' \"$2\" | sed 's/%s/ /g' >> \"$S/typed.txt\" ;;\n  'keyevent KEYCODE_ENTER') printf '\\n' >> \"$S/typed.txt\" ;;\n  'keyevent KEYCODE_PASTE') cat \"$S/clip.txt\" >> \"$S/typed.txt\" 2>/dev/null ;;\nesac\n[ -f \"$S/scenes.json\" ] && \"$(dirname \"$0\")/scenes\" \"$S\" input \"$@\"\nexit 0",
        );
        script(
            b,
            s,
            "settings",
            "case \"$1\" in\n  get) f=\"$S/settings/$2.$3\"; if [ -f \"$f\" ]; then cat \"$f\"; else echo null; fi ;;\n  put) printf '%s\\n' \"$4\" > \"$S/settings/$2.$3\" ;;\n  *) echo \"Invalid command: $1\" >&2; exit 255 ;;\nesac",
        );
        script(
            b,
            s,
            "content",
            "uri=$3\nf=\"$S/content/$(echo \"$uri\" | tr -c 'a-zA-Z0-9\\n' _)\"\nif [ -f \"$f.err\" ]; then cat \"$f.err\" >&2; exit 0; fi\ncase \"$1\" in\n  insert|delete) echo \"$*\" >> \"$S/content.log\"; exit 0 ;;\n  query) ;;\n  *) echo \"content $1 is not recorded\" >&2; exit 1 ;;\nesac\nif [ -f \"$f\" ]; then cat \"$f\"; else echo 'No result found.'; fi",
        );
        script(
            b,
            s,
            "dumpsys",
            "case \"$1\" in\n  activity) cat \"$S/activities.txt\" ;;\n  window) cat \"$S/window.txt\" 2>/dev/null ;;\n  battery) cat \"$S/battery.txt\" ;;\n  *) echo \"Can't find service: $1\" ;;\nesac",
        );
        script(
            b,
            s,
            "getprop",
            "if [ -z \"$1\" ]; then cat \"$S/getprop.txt\"; else grep -F \"[$1]:\" \"$S/getprop.txt\" | sed 's/.*]: \\[\\(.*\\)\\]/\\1/'; fi",
        );
        script(
            b,
            s,
            "wm",
            "case \"$1\" in size) cat \"$S/wm-size.txt\" ;; density) cat \"$S/wm-density.txt\" ;; *) exit 1 ;; esac",
        );
        script(
            b,
            s,
            "am",
            "echo \"$*\" >> \"$S/am.log\"\ncase \"$1\" in\n  start) case \"$4\" in *Missing*) echo \"Error: Activity class {$4} does not exist.\" ;; *) echo \"Starting: Intent { cmp=$4 }\" ;; esac ;;\n  force-stop) ;;\n  *) echo \"Error: unknown command '$1'\"; exit 1 ;;\nesac",
        );
        script(
            b,
            s,
            "pm",
            "case \"$1\" in\n  list) cat \"$S/packages.txt\" ;;\n  clear) echo \"$2\" >> \"$S/pm-clear.log\"; echo Success ;;\n  *) exit 1 ;;\nesac",
        );
        script(
            b,
            s,
            "cmd",
            "echo \"$*\" >> \"$S/cmd.log\"\necho \"cmd $1 is not recorded\" >&2\nexit 1",
        );
        phone
    }

    /// Gives the phone an `app_process` that runs the dex it is given (`CLASSPATH`) on a
    /// JVM over the stand-in framework of `api`, so the shim's clipboard helper sets the
    /// stand-in clipboard ([`Phone::clip`]); it logs its arguments (`app_process.log`), its
    /// `CLASSPATH` (`app_process-classpath.log`) and its last standard input
    /// (`app_process.stdin`).
    pub fn with_clipboard(mut self, api: ClipApi) -> Self {
        let framework = Framework::compile(api);
        script(
            &self.bin,
            &self.state,
            "app_process",
            &format!(
                "echo \"$*\" >> \"$S/app_process.log\"\nprintf '%s\\n' \"$CLASSPATH\" >> \"$S/app_process-classpath.log\"\ncat > \"$S/app_process.stdin\"\n{}",
                app_process_script(&framework.classes)
            ),
        );
        self.framework = Some(framework);
        self
    }

    /// What a text field has had typed into it, as bytes: `input text` (with `%s` as a
    /// space), Enter as a newline, and the clipboard's text for each paste.
    pub fn typed(&self) -> Vec<u8> {
        std::fs::read(self.state.join("typed.txt")).unwrap_or_default()
    }

    /// The stand-in clipboard's text, as bytes, if anything set it.
    pub fn clip(&self) -> Option<Vec<u8>> {
        std::fs::read(self.state.join("clip.txt")).ok()
    }

    /// Keeps the phone's directory after the phone is dropped, and returns it (for the
    /// `standin-phone` tool).
    pub fn keep(self) -> PathBuf {
        self._dir.keep()
    }

    /// Writes a state file.
    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.state.join(name), text).unwrap();
    }

    /// What the screen shows: a uiautomator dump, and a raw capture to match.
    /// The capture is as large as `wm size` says (1080x2400): a colour per row, so a test
    /// can tell rows apart in a screenshot ([`Phone::pixel`]).
    pub fn set_screen(&self, xml: &str) {
        self.write("screen.xml", xml);
        let (w, h) = SIZE;
        let rgb: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).flat_map(move |_| Self::pixel(y)))
            .collect();
        let raw = pincer_screencap(w, h, &rgb);
        std::fs::write(self.state.join("screen.raw"), raw).unwrap();
    }

    /// The colour of row `y` of the screen.
    pub fn pixel(y: u32) -> [u8; 3] {
        [(y % 251) as u8, (y / 10 % 256) as u8, 200]
    }

    /// What a logged command (`am`, `pm-clear`, `content`, `cmd`) was asked, one line per call.
    pub fn log(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.state.join(format!("{name}.log")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Which activity is in front (`pkg/.Activity`), as `dumpsys activity activities`
    /// prints it on Android 14 (`topResumedActivity=` and `ResumedActivity:`).
    pub fn set_foreground(&self, component: &str) {
        self.write("activities.txt", &activities(component));
    }

    /// A setting's value (`settings put`).
    pub fn set_setting(&self, namespace: &str, key: &str, value: &str) {
        self.write(
            &format!("settings/{namespace}.{key}"),
            &format!("{value}\n"),
        );
    }

    /// The rows `content query --uri URI` prints.
    pub fn set_rows(&self, uri: &str, rows: &str) {
        self.write(&format!("content/{}", content_name(uri)), rows);
    }

    /// Scripts the phone: from now on each scene's trigger (a tap on a named node, text
    /// typed, a key) moves it to that scene, in order, as an app moves from screen to
    /// screen; what moved it is logged (`scenes.log`). The scenes are written for a test,
    /// not recorded from the apps they imitate.
    pub fn play(&self, scenes: &[Scene]) {
        self.write("scenes.json", &serde_json::to_string(scenes).unwrap());
        self.write("scene", "0");
        self.write("scene-typed-from", &self.typed().len().to_string());
        let p = self.bin.join("scenes");
        std::fs::write(&p, SCENES).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// How many scenes the script has played so far.
    pub fn scenes_played(&self) -> usize {
        std::fs::read_to_string(self.state.join("scene"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// What `input` was asked, one line per call.
    pub fn inputs(&self) -> Vec<String> {
        std::fs::read_to_string(self.state.join("input.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// `dumpsys activity activities` with `component` (`pkg/.Activity`) in front, as Android 14
/// prints it (`topResumedActivity=` and `ResumedActivity:`).
fn activities(component: &str) -> String {
    format!(
        "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\nDisplay #0 (activities from top to bottom):\n  * Task{{1a2b #57 type=standard A=10123:{pkg} U=0 visible=true}}\n    topResumedActivity=ActivityRecord{{d9b8281 u0 {component} t57}}\n      ResumedActivity: ActivityRecord{{d9b8281 u0 {component} t57}}\n",
        pkg = component.split('/').next().unwrap_or_default()
    )
}

/// What moves a scripted phone ([`Phone::play`]) on to its next scene.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A tap inside the bounds of the current screen's node with this `resource-id`, or
    /// (when no node has it) this `content-desc` or `text`.
    Tap(String),
    /// Text typed (`input text`, Enter, paste) since the scene began, containing this.
    Typed(String),
    /// `input keyevent` with this key code ("KEYCODE_ENTER").
    Key(String),
}

/// One scene of a scripted phone: what starts it, and the state files it writes (the
/// screen, the app in front, settings, content rows).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Scene {
    when: Trigger,
    files: BTreeMap<String, String>,
}

impl Scene {
    /// After `when`, the phone shows `nodes` of `component`'s app (`pkg/.Activity`), laid
    /// out top to bottom, one band each, so that a tap lands in one node only.
    pub fn shows(when: Trigger, component: &str, nodes: Vec<Node>) -> Self {
        let package = component.split('/').next().unwrap_or_default();
        let nodes: Vec<Node> = nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let top = 150 + 160 * i as u32;
                Node {
                    bounds: [0, top, SIZE.0, top + 140],
                    ..n
                }
            })
            .collect();
        let mut files = BTreeMap::new();
        files.insert("screen.xml".to_owned(), dump(package, &nodes));
        files.insert("activities.txt".to_owned(), activities(component));
        Self { when, files }
    }

    /// Also sets a setting (`settings get` answers it from then on).
    pub fn setting(mut self, namespace: &str, key: &str, value: &str) -> Self {
        self.files
            .insert(format!("settings/{namespace}.{key}"), format!("{value}\n"));
        self
    }

    /// Also makes `content query --uri URI` print `rows`.
    pub fn rows(mut self, uri: &str, rows: &str) -> Self {
        self.files
            .insert(format!("content/{}", content_name(uri)), rows.to_owned());
        self
    }
}

/// The state file `content query --uri URI` reads.
fn content_name(uri: &str) -> String {
    uri.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The stand-in's scene player, run by `input` after each command while a script is on:
/// when the command is the current scene's trigger, it writes the scene's files and moves
/// on. Anything else changes nothing, as a tap beside a button does.
const SCENES: &str = r#"#!/usr/bin/env python3
# pincer test stand-in: plays the scripted scenes of a stand-in phone (tests/src/android.rs).
import json, os, re, sys
import xml.etree.ElementTree as ET

state, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
def path(name):
    return os.path.join(state, name)
def read(name, default=""):
    try:
        with open(path(name), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return default

scenes = json.loads(read("scenes.json"))
at = int(read("scene", "0") or 0)
if at >= len(scenes):
    sys.exit(0)
when = scenes[at]["when"]
kind, want = next(iter(when.items()))
typed_from = int(read("scene-typed-from", "0") or 0)

def tapped(want):
    if args[:1] != ["tap"]:
        return False
    x, y = int(float(args[1])), int(float(args[2]))
    root = ET.fromstring(read("screen.xml"))
    nodes = list(root.iter("node"))
    named = [n for n in nodes if n.get("resource-id") == want] or [
        n for n in nodes if want in (n.get("content-desc"), n.get("text"))]
    for n in named:
        x1, y1, x2, y2 = map(int, re.findall(r"\d+", n.get("bounds")))
        if x1 <= x < x2 and y1 <= y < y2:
            return True
    return False

if kind == "tap":
    hit = tapped(want)
elif kind == "typed":
    hit = want in read("typed.txt")[typed_from:]
elif kind == "key":
    hit = args[:2] == ["keyevent", want]
else:
    sys.exit("unknown trigger " + kind)
if hit:
    for name, text in scenes[at]["files"].items():
        os.makedirs(os.path.dirname(path(name)), exist_ok=True)
        with open(path(name), "w", encoding="utf-8") as f:
            f.write(text)
    with open(path("scene"), "w") as f:
        f.write(str(at + 1))
    with open(path("scene-typed-from"), "w") as f:
        f.write(str(len(read("typed.txt"))))
with open(path("scenes.log"), "a", encoding="utf-8") as f:
    f.write("%s %s -> %s\n" % (command, " ".join(args), "scene %d" % (at + 1) if hit else "no change"))
"#;

/// The stand-in's display: `wm size` and the capture.
pub const SIZE: (u32, u32) = (1080, 2400);

/// A node of a uiautomator dump made for a test: one app's screen as the Android 14
/// uiautomator writes it (every attribute, in its order; see fixtures/android/NOTES.md).
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// `resource-id`.
    pub id: &'static str,
    /// `text`.
    pub text: String,
    /// `content-desc`.
    pub desc: String,
    /// `class` (`android.widget.TextView` when empty).
    pub class: &'static str,
    /// `bounds`, as x1, y1, x2, y2.
    pub bounds: [u32; 4],
}

impl Node {
    /// A text view with this id and text.
    pub fn text(id: &'static str, text: &str) -> Self {
        Self {
            id,
            text: text.into(),
            bounds: [0, 200, 1080, 300],
            ..Self::default()
        }
    }

    /// A view described (`content-desc`) as `desc`.
    pub fn described(id: &'static str, desc: &str) -> Self {
        Self {
            id,
            desc: desc.into(),
            class: "android.view.ViewGroup",
            bounds: [0, 300, 1080, 500],
            ..Self::default()
        }
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A one-line raw dump of `package`'s screen holding `nodes` under one frame.
pub fn dump(package: &str, nodes: &[Node]) -> String {
    let node = |i: usize, n: &Node, close: &str| {
        let [x1, y1, x2, y2] = n.bounds;
        format!(
            "<node index=\"{i}\" text=\"{}\" resource-id=\"{}\" class=\"{}\" package=\"{package}\" content-desc=\"{}\" checkable=\"false\" checked=\"false\" clickable=\"true\" enabled=\"true\" focusable=\"true\" focused=\"false\" scrollable=\"false\" long-clickable=\"false\" password=\"false\" selected=\"false\" bounds=\"[{x1},{y1}][{x2},{y2}]\"{close}",
            xml_escape(&n.text),
            n.id,
            if n.class.is_empty() {
                "android.widget.TextView"
            } else {
                n.class
            },
            xml_escape(&n.desc),
        )
    };
    let frame = Node {
        class: "android.widget.FrameLayout",
        bounds: [0, 0, SIZE.0, SIZE.1],
        ..Node::default()
    };
    let mut out = String::from(
        "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">",
    );
    out.push_str(&node(0, &frame, ">"));
    for (i, n) in nodes.iter().enumerate() {
        out.push_str(&node(i, n, " />"));
    }
    out.push_str("</node></hierarchy>");
    out
}

/// A raw `screencap` frame (16-byte header, RGBA_8888).
fn pincer_screencap(width: u32, height: u32, rgb: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [width, height, 1, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for p in rgb.chunks_exact(3) {
        out.extend_from_slice(&[p[0], p[1], p[2], 0xff]);
    }
    out
}

//! pincer's getters for OSWorld's evaluators, in Rust over the guest protocol, returning
//! what OSWorld's return — `vm_file` the path of the fetched file (`None` when it is
//! missing), `cloud_file` the gold file from the cache, `rule` the rules, `vm_command_line`
//! the command's stdout with its newline (`vm_command_error` its stderr), `vlc_config` VLC's
//! configuration file, `gimp_config_file` GIMP's (`None` when missing or empty),
//! `cache_file` what a postconfig command printed (the command runs when the final state is
//! judged, see [`Kept`]), `vm_wallpaper` the GNOME wallpaper's file (an empty file when
//! there is none), `list_directory` a folder's tree as OSWorld's server builds it,
//! `default_video_player` the application `xdg-mime` names most often for video types,
//! `vscode_config` the file VS Code's command wrote, `vm_terminal_output` the text of
//! gnome-terminal's focused terminal, `vm_screen_size` and `vm_window_size` sizes as
//! OSWorld's server reads them from X11, `vlc_playing_info` VLC's `status.xml` from its
//! HTTP interface, `accessibility_tree` the desktop's UI tree in the XML OSWorld's server
//! writes ([`atspi_xml`](super::atspi_xml)). Chrome's profile getters ([`REPLAYED`]) and
//! the slide getters ([`SLIDE_GETTERS`]) are OSWorld's own, called in the worker on the
//! files fetched here.
//! Each getter's probes are sent with the check's; its value is computed from their replies.

use super::check::Kept;
use super::model::Getter;
use super::scorer::{Replay, Workspace};
use crate::eval::{EvalError, ProbeResult, reply, unexpected};
use pincer_shared::limits::MAX_INLINE_FILE;
use pincer_shared::observe::{TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::tree::{UiNode, UiTree};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// How long a getter's command may run (OSWorld's server allows 120 s).
const COMMAND_MS: u64 = 120_000;

/// The most output a getter's command keeps.
const COMMAND_OUTPUT: u64 = 4 * 1024 * 1024;

/// One getter, ready to fetch.
#[derive(Debug)]
pub(super) enum Get {
    /// Files from the guest: (guest path, dest) each, and the indices given to the metric.
    VmFile {
        files: Vec<(String, String)>,
        gives: Vec<usize>,
    },
    /// Gold files from the cache: the cache paths, by dest, and the indices given.
    CloudFile {
        files: Vec<(PathBuf, String)>,
        gives: Vec<usize>,
    },
    /// The task's rules.
    Rule(Value),
    /// A command's stdout (`vm_command_line`), or its stderr (`vm_command_error`); with a
    /// `file`, written there and its path given (`cache_file` of a kept output).
    Command {
        argv: Vec<String>,
        stderr: bool,
        file: Option<String>,
    },
    /// A guest file at a fixed place, by its `dest`: a missing one fails (`vlc_config`) or
    /// gives `None`, as an empty one does (`gimp_config_file`).
    Config {
        path: String,
        dest: String,
        missing_is_none: bool,
    },
    /// The GNOME wallpaper's file, by its `dest` (empty when there is none, as in OSWorld).
    Wallpaper { dest: String },
    /// A folder's tree (`list_directory`).
    Tree { path: String },
    /// The application named most often by `xdg-mime query default video/<type>`.
    VideoPlayer,
    /// The text of the focused terminal in gnome-terminal's active window
    /// (`vm_terminal_output`; `None` when there is not exactly one).
    Terminal,
    /// The X screen's size (`vm_screen_size`), `{"width": .., "height": ..}`.
    ScreenSize,
    /// The size of the first window in `_NET_CLIENT_LIST` of this class or instance,
    /// compared without case (`vm_window_size`; `None` when there is none).
    WindowSize { class: String },
    /// VLC's `status.xml` from its HTTP interface, by its `dest` (`vlc_playing_info`;
    /// `None` when VLC answers with an HTTP error).
    VlcStatus { dest: String },
    /// The whole desktop's UI tree as OSWorld's server writes it (`accessibility_tree`).
    AccessibilityTree,
    /// OSWorld's own getter, called in the worker on the guest files it reads (fetched
    /// here; paths under the home): the Chrome profile getters of [`REPLAYED`] and the
    /// slide getters of [`SLIDE_GETTERS`].
    Replay {
        module: &'static str,
        name: String,
        config: Value,
        files: Vec<String>,
    },
}

/// Where the worker finds the guest files a replayed getter reads, in the workspace.
const REPLAY_HOME: &str = ".pincer-guest-home";

/// Chrome's profile files (google-chrome on x86-64 Linux, as OSWorld's getters read them).
const PREFERENCES: &[&str] = &[".config/google-chrome/Default/Preferences"];
const LOCAL_STATE: &[&str] = &[".config/google-chrome/Local State"];

/// The getters pincer calls in OSWorld's own code (module `chrome`), with the guest files,
/// under the home, that each reads: each asks the guest where one profile file is, reads it
/// and picks a value out of it (a default when it is missing or malformed). These are the
/// ones the 2024 tasks use; the fidelity suite checks each entry against the getter run on
/// the desktop's own files.
pub const REPLAYED: &[(&str, &[&str])] = &[
    ("default_search_engine", PREFERENCES),
    ("profile_name", PREFERENCES),
    ("chrome_font_size", PREFERENCES),
    ("enable_do_not_track", PREFERENCES),
    ("enable_enhanced_safety_browsing", PREFERENCES),
    ("new_startup_page", PREFERENCES),
    ("data_delete_automacally", PREFERENCES),
    ("find_unpacked_extension_path", PREFERENCES),
    ("find_installed_extension_name", PREFERENCES),
    ("enabled_experiments", LOCAL_STATE),
    ("bookmarks", &[".config/google-chrome/Default/Bookmarks"]),
    ("history", &[".config/google-chrome/Default/History"]),
    ("cookie_data", &[".config/google-chrome/Default/Cookies"]),
];

/// The getters pincer calls in OSWorld's own code (module `impress`) on the presentation
/// their `ppt_file_path` names: each fetches it as `vm_file` does and takes one slide's
/// background image or audio out of it.
pub const SLIDE_GETTERS: &[&str] = &["background_image_in_slide", "audio_in_slide"];

/// Where VLC keeps its configuration on Linux (OSWorld's `vlc_config` getter).
const VLCRC: &str = "~/.config/vlc/vlcrc";

/// Where GIMP 2.10 keeps its configuration files (OSWorld's `gimp_config_file` getter).
const GIMP_CONFIG: &str = "~/.config/GIMP/2.10";

/// Prints the wallpaper's file, as OSWorld's server serves it: GNOME's `picture-uri`
/// without `file://` and quotes; nothing (exit 1) when it cannot.
const WALLPAPER: &str = "f=$(gsettings get org.gnome.desktop.background picture-uri) || exit 1; f=$(printf %s \"$f\" | sed -e 's|file://||g' -e \"s/'//g\"); exec cat -- \"$f\"";

/// Prints a folder's tree as OSWorld's server (`/list_directory`) builds it, as JSON
/// (`os.listdir` order, `{"error": ...}` for a folder it cannot read).
const TREE: &str = r#"import json, os, sys
def walk(d):
    t = {"type": "directory", "name": os.path.basename(d), "children": []}
    try:
        for e in os.listdir(d):
            p = os.path.join(d, e)
            t["children"].append(walk(p) if os.path.isdir(p) else {"type": "file", "name": e})
    except OSError as e:
        t = {"error": str(e)}
    return t
d = os.path.expanduser(sys.argv[1])
if not os.path.isdir(d):
    sys.exit("The provided path is not a directory")
print(json.dumps(walk(d)))"#;

/// Prints the X screen's size as OSWorld's server (`/screen_size`) reads it, as JSON.
const SCREEN_SIZE: &str = r#"import json
from Xlib import display
s = display.Display().screen()
print(json.dumps({"width": s.width_in_pixels, "height": s.height_in_pixels}))"#;

/// Prints the size of the first client window of class or instance `sys.argv[1]` as
/// OSWorld's server (`/window_size`) finds it, as JSON (`null` where its route fails).
const WINDOW_SIZE: &str = r#"import json, sys
import Xlib.error
from Xlib import X, display
d = display.Display()
names = d.screen().root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
size = None
for w in names.value if names else []:
    try:
        window = d.create_resource_object("window", w)
        c = window.get_wm_class()
        if c is None:
            continue
        if sys.argv[1].lower() in [n.lower() for n in c]:
            g = window.get_geometry()
            size = {"width": g.width, "height": g.height}
            break
    except Xlib.error.XError:
        continue
print(json.dumps(size))"#;

/// Writes VLC's `status.xml` from its HTTP interface as OSWorld's getter asks for it
/// (port 8080, password `password`); exit 3 when VLC answers with an HTTP error.
const VLC_STATUS: &str = r#"import base64, sys, urllib.error, urllib.request
auth = base64.b64encode(b":password").decode()
req = urllib.request.Request("http://localhost:8080/requests/status.xml", headers={"Authorization": "Basic " + auth})
try:
    body = urllib.request.urlopen(req, timeout=30).read()
except urllib.error.HTTPError:
    sys.exit(3)
sys.stdout.buffer.write(body)"#;

/// The video types OSWorld's `default_video_player` getter asks `xdg-mime` about, in its
/// order (with its repeats: the order decides ties).
#[rustfmt::skip]
const VIDEO_TYPES: &[&str] = &[
    "3gp",
    "3gp",
    "3gpp",
    "3gpp",
    "3gpp2",
    "3gpp2",
    "avi",
    "avi",
    "divx",
    "divx",
    "dv",
    "dv",
    "fli",
    "fli",
    "flv",
    "flv",
    "mp2t",
    "mp2t",
    "mp4",
    "mp4",
    "mp4v-es",
    "mp4v-es",
    "mpeg",
    "mpeg",
    "mpeg-system",
    "mpeg-system",
    "msvideo",
    "msvideo",
    "ogg",
    "ogg",
    "quicktime",
    "quicktime",
    "vnd.divx",
    "vnd.divx",
    "vnd.mpegurl",
    "vnd.mpegurl",
    "vnd.rn-realvideo",
    "vnd.rn-realvideo",
    "webm",
    "webm",
    "x-anim",
    "x-anim",
    "x-avi",
    "x-avi",
    "x-flc",
    "x-flc",
    "x-fli",
    "x-fli",
    "x-flv",
    "x-flv",
    "x-m4v",
    "x-m4v",
    "x-matroska",
    "x-matroska",
    "x-mpeg",
    "x-mpeg",
    "x-mpeg-system",
    "x-mpeg-system",
    "x-mpeg2",
    "x-mpeg2",
    "x-ms-asf",
    "x-ms-asf",
    "x-ms-asf-plugin",
    "x-ms-asf-plugin",
    "x-ms-asx",
    "x-ms-asx",
    "x-ms-wm",
    "x-ms-wm",
    "x-ms-wmv",
    "x-ms-wmv",
    "x-ms-wmx",
    "x-ms-wmx",
    "x-ms-wvx",
    "x-ms-wvx",
    "x-msvideo",
    "x-msvideo",
    "x-nsv",
    "x-nsv",
    "x-ogm",
    "x-ogm",
    "x-ogm+ogg",
    "x-theora",
    "x-theora",
    "x-theora+ogg",
    "x-theora+ogg",
];

/// `value` as a list of `T` (one value or several, as `multi` says).
fn strings(v: Option<&Value>, what: &str) -> Result<Vec<String>, String> {
    match v {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or(format!("`{what}` holds a value that is not a string"))
            })
            .collect(),
        _ => Err(format!("no `{what}`")),
    }
}

/// A file name the task gives (`dest`): relative, without `..`.
pub(super) fn dest(d: &str) -> Result<String, String> {
    let p = Path::new(d);
    if d.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(format!("the file name {d:?} is not a plain relative name"));
    }
    Ok(d.to_owned())
}

fn gives(g: &Getter) -> Result<Vec<usize>, String> {
    match g.fields.get("gives") {
        None => Ok(vec![0]),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_u64()
                    .map(|n| n as usize)
                    .ok_or("`gives` holds a value that is not an index".to_owned())
            })
            .collect(),
        Some(_) => Err("`gives` is not a list".into()),
    }
}

impl Get {
    pub(super) fn build(
        g: &Getter,
        task: &str,
        assets: &Path,
        kept: &BTreeMap<String, Kept>,
    ) -> Result<Self, String> {
        let pairs = || -> Result<Vec<(String, String)>, String> {
            let paths = strings(g.fields.get("path"), "path")?;
            let dests = strings(g.fields.get("dest"), "dest")?;
            let multi = super::model::truthy(g.fields.get("multi"));
            if !multi && (paths.len() != 1 || dests.len() != 1) {
                return Err("`path` and `dest` are lists without `multi`".into());
            }
            paths
                .into_iter()
                .zip(dests)
                .map(|(p, d)| Ok((p, dest(&d)?)))
                .collect()
        };
        match g.kind.as_str() {
            // The importer puts the command's input at the end of finalize.
            "vscode_config" => Ok(Self::VmFile {
                files: vec![(
                    super::import::home(g.str("path").ok_or("vscode_config has no `path`")?),
                    dest(g.str("dest").ok_or("vscode_config has no `dest`")?)?,
                )],
                gives: vec![0],
            }),
            "vm_file" => {
                if super::model::truthy(g.fields.get("time_suffix")) {
                    return Err("vm_file with `time_suffix` names its file by the clock at scoring time, which pincer does not reproduce".into());
                }
                let files = pairs()?
                    .into_iter()
                    .map(|(p, d)| (super::import::home(&p), d))
                    .collect();
                Ok(Self::VmFile {
                    files,
                    gives: gives(g)?,
                })
            }
            "cloud_file" => {
                let files = pairs()?
                    .into_iter()
                    .map(|(_, d)| (assets.join(super::cache::gold(task, &d)), d))
                    .collect();
                Ok(Self::CloudFile {
                    files,
                    gives: gives(g)?,
                })
            }
            "rule" => g
                .fields
                .get("rules")
                .cloned()
                .map(Self::Rule)
                .ok_or_else(|| "the rule getter has no `rules`".into()),
            "vm_command_line" | "vm_command_error" => super::import::command(
                g.fields.get("command"),
                super::model::truthy(g.fields.get("shell")),
            )
            .map(|argv| Self::Command {
                argv,
                stderr: g.kind == "vm_command_error",
                file: None,
            }),
            "cache_file" => {
                let name = dest(g.str("path").ok_or("cache_file has no `path`")?)?;
                let k = kept.get(&name).ok_or(format!(
                    "cache_file reads {name}, which no postconfig command of the task writes"
                ))?;
                Ok(Self::Command {
                    argv: k.argv.clone(),
                    stderr: k.stderr,
                    file: Some(name),
                })
            }
            "vlc_config" => Ok(Self::Config {
                path: VLCRC.into(),
                dest: dest(g.str("dest").ok_or("vlc_config has no `dest`")?)?,
                missing_is_none: false,
            }),
            "gimp_config_file" => {
                let name = dest(
                    g.str("file_name")
                        .ok_or("gimp_config_file has no `file_name`")?,
                )?;
                Ok(Self::Config {
                    path: format!("{GIMP_CONFIG}/{name}"),
                    dest: dest(g.str("dest").ok_or("gimp_config_file has no `dest`")?)?,
                    missing_is_none: true,
                })
            }
            "vm_wallpaper" => Ok(Self::Wallpaper {
                dest: dest(g.str("dest").ok_or("vm_wallpaper has no `dest`")?)?,
            }),
            "list_directory" => Ok(Self::Tree {
                path: super::import::home(g.str("path").ok_or("list_directory has no `path`")?),
            }),
            "default_video_player" => Ok(Self::VideoPlayer),
            "vm_terminal_output" => Ok(Self::Terminal),
            "vm_screen_size" => Ok(Self::ScreenSize),
            "vm_window_size" => Ok(Self::WindowSize {
                class: g
                    .str("app_class_name")
                    .ok_or("vm_window_size has no `app_class_name`")?
                    .to_owned(),
            }),
            "accessibility_tree" => Ok(Self::AccessibilityTree),
            "vlc_playing_info" => Ok(Self::VlcStatus {
                dest: dest(g.str("dest").ok_or("vlc_playing_info has no `dest`")?)?,
            }),
            slides if SLIDE_GETTERS.contains(&slides) => {
                let path = g
                    .str("ppt_file_path")
                    .ok_or(format!("{slides} has no `ppt_file_path`"))?;
                let rel = path
                    .strip_prefix("/home/user/")
                    .and_then(|rel| dest(rel).ok())
                    .ok_or(format!(
                        "{slides} reads {path:?}, which is not a file under /home/user"
                    ))?;
                Ok(Self::Replay {
                    module: "impress",
                    name: slides.to_owned(),
                    config: serde_json::to_value(&g.fields).unwrap_or_default(),
                    files: vec![rel],
                })
            }
            other => match REPLAYED.iter().find(|(n, _)| *n == other) {
                Some((name, files)) => Ok(Self::Replay {
                    module: "chrome",
                    name: (*name).to_owned(),
                    config: serde_json::to_value(&g.fields).unwrap_or_default(),
                    files: files.iter().map(|f| (*f).to_owned()).collect(),
                }),
                None => Err(format!(
                    "the getter {other} is not implemented in pincer yet"
                )),
            },
        }
    }

    pub(super) fn probes(&self) -> Vec<Probe> {
        match self {
            Self::VmFile { files, .. } => files
                .iter()
                .map(|(path, _)| Probe::ReadFile {
                    path: path.clone(),
                    max_len: MAX_INLINE_FILE,
                })
                .collect(),
            Self::Command { argv, .. } => vec![command(argv.clone())],
            Self::Config { path, .. } => vec![Probe::ReadFile {
                path: path.clone(),
                max_len: MAX_INLINE_FILE,
            }],
            Self::Wallpaper { .. } => vec![command(sh(WALLPAPER, &[]))],
            Self::Tree { path } => vec![command(sh(
                &format!("cd ~ && {PYTHON} -c \"$0\" \"$1\""),
                &[TREE, path],
            ))],
            Self::Replay { files, .. } => files
                .iter()
                .map(|rel| Probe::ReadFile {
                    path: format!("~/{rel}"),
                    max_len: MAX_INLINE_FILE,
                })
                .collect(),
            Self::VideoPlayer => VIDEO_TYPES
                .iter()
                .map(|t| {
                    command(vec![
                        "xdg-mime".into(),
                        "query".into(),
                        "default".into(),
                        format!("video/{t}"),
                    ])
                })
                .collect(),
            Self::Terminal => vec![Probe::UiTree(TreeRequest {
                scope: TreeScope::App(TERMINAL_APP.into()),
                showing_only: false,
                visible_only: false,
                max_depth: None,
                max_nodes: None,
                attributes: false,
            })],
            Self::AccessibilityTree => vec![Probe::UiTree(TreeRequest {
                scope: TreeScope::Desktop,
                showing_only: false,
                visible_only: false,
                max_depth: Some(super::atspi_xml::PROBE_DEPTH),
                max_nodes: None,
                attributes: true,
            })],
            Self::ScreenSize => vec![command(python(SCREEN_SIZE, &[]))],
            Self::WindowSize { class } => vec![command(python(WINDOW_SIZE, &[class]))],
            Self::VlcStatus { .. } => vec![command(python(VLC_STATUS, &[]))],
            Self::CloudFile { .. } | Self::Rule(_) => Vec::new(),
        }
    }

    /// The getter's value for the worker, from its replies (in [`Get::probes`] order);
    /// files go into `ws`.
    pub(super) fn value(
        &self,
        replies: &[&ProbeResult],
        ws: &Workspace,
    ) -> Result<Value, EvalError> {
        let write = |rel: &str, bytes: &[u8]| {
            let path = ws.host_path(rel);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| EvalError::Scorer(format!("{}: {e}", dir.display())))?;
            }
            std::fs::write(&path, bytes)
                .map_err(|e| EvalError::Scorer(format!("{}: {e}", path.display())))
        };
        let pick = |paths: Vec<Value>, gives: &[usize]| {
            let picked: Vec<Value> = paths
                .into_iter()
                .enumerate()
                .filter(|(i, _)| gives.contains(i))
                .map(|(_, v)| v)
                .collect();
            match <[Value; 1]>::try_from(picked) {
                Ok([one]) => one,
                Err(many) => Value::Array(many),
            }
        };
        match self {
            Self::VmFile { files, gives } => {
                let mut paths = Vec::new();
                for ((guest, d), r) in files.iter().zip(replies) {
                    let probe = format!("read {guest}");
                    match reply(r, &probe)? {
                        ProbeReply::File(None) => paths.push(Value::Null),
                        ProbeReply::File(Some(f)) if f.total_size > f.bytes.len() as u64 => {
                            return Err(EvalError::Scorer(format!(
                                "{guest} is {} bytes, more than a probe carries ({MAX_INLINE_FILE})",
                                f.total_size
                            )));
                        }
                        ProbeReply::File(Some(f)) => {
                            write(d, &f.bytes)?;
                            paths.push(Value::String(ws.inside_path(d)));
                        }
                        other => return Err(unexpected(&probe, other)),
                    }
                }
                Ok(pick(paths, gives))
            }
            Self::CloudFile { files, gives } => {
                let mut paths = Vec::new();
                for (cached, d) in files {
                    let bytes = std::fs::read(cached).map_err(|e| {
                        EvalError::Scorer(format!(
                            "the gold file {} is not in the OSWorld file cache ({e}): fetch the task's files first",
                            cached.display()
                        ))
                    })?;
                    write(d, &bytes)?;
                    paths.push(Value::String(ws.inside_path(d)));
                }
                Ok(pick(paths, gives))
            }
            Self::Rule(rules) => Ok(rules.clone()),
            Self::Command { argv, stderr, file } => {
                let out = output(replies.first().copied(), argv)?;
                let stream = if *stderr { &out.stderr } else { &out.stdout };
                // OSWorld's server answers with the output whatever the exit status, as
                // text; a kept output is that text in a file.
                let text = String::from_utf8_lossy(stream).into_owned();
                match file {
                    None => Ok(Value::String(text)),
                    Some(name) => {
                        write(name, text.as_bytes())?;
                        Ok(Value::String(ws.inside_path(name)))
                    }
                }
            }
            Self::Config {
                path,
                dest,
                missing_is_none,
            } => {
                let probe = format!("read {path}");
                match replies.first().map(|r| reply(r, &probe)).transpose()? {
                    Some(ProbeReply::File(Some(f))) if f.total_size > f.bytes.len() as u64 => Err(
                        EvalError::Scorer(format!("{path} is larger than a probe carries")),
                    ),
                    Some(ProbeReply::File(Some(f))) if f.bytes.is_empty() && *missing_is_none => {
                        Ok(Value::Null)
                    }
                    Some(ProbeReply::File(Some(f))) => {
                        write(dest, &f.bytes)?;
                        Ok(Value::String(ws.inside_path(dest)))
                    }
                    Some(ProbeReply::File(None)) if *missing_is_none => Ok(Value::Null),
                    Some(ProbeReply::File(None)) => Err(EvalError::Scorer(format!(
                        "{path} does not exist (OSWorld's getter fails then too)"
                    ))),
                    Some(other) => Err(unexpected(&probe, other)),
                    None => Err(EvalError::Scorer(format!("no reply to {probe}"))),
                }
            }
            Self::Wallpaper { dest } => {
                let out = output(replies.first().copied(), &sh(WALLPAPER, &[]))?;
                let bytes: &[u8] = if out.status.success() {
                    &out.stdout
                } else {
                    &[]
                };
                if out.truncated {
                    return Err(EvalError::Scorer(format!(
                        "the wallpaper is larger than {COMMAND_OUTPUT} bytes"
                    )));
                }
                write(dest, bytes)?;
                Ok(Value::String(ws.inside_path(dest)))
            }
            Self::Tree { path } => {
                let out = output(replies.first().copied(), &[format!("list {path}")])?;
                if !out.status.success() {
                    return Ok(Value::Null);
                }
                serde_json::from_slice(&out.stdout)
                    .map_err(|e| EvalError::Scorer(format!("the tree of {path} is not JSON ({e})")))
            }
            Self::Terminal => {
                let tree = ui_tree(
                    replies.first().copied(),
                    &format!("the UI tree of {TERMINAL_APP}"),
                )?;
                Ok(terminal_output(&tree.root).map_or(Value::Null, Value::String))
            }
            Self::AccessibilityTree => {
                let tree = ui_tree(replies.first().copied(), "the desktop's UI tree")?;
                Ok(Value::String(super::atspi_xml::xml(&tree.root)))
            }
            Self::ScreenSize => x11_size(replies, "vm_screen_size"),
            Self::WindowSize { .. } => x11_size(replies, "vm_window_size"),
            Self::VlcStatus { dest } => {
                let out = output(replies.first().copied(), &["vlc_playing_info".into()])?;
                use pincer_shared::setup::ExitStatus::Exited;
                match out.status {
                    Exited(0) if out.truncated => Err(EvalError::Scorer(format!(
                        "VLC's status is larger than {COMMAND_OUTPUT} bytes"
                    ))),
                    Exited(0) => {
                        write(dest, &out.stdout)?;
                        Ok(Value::String(ws.inside_path(dest)))
                    }
                    Exited(3) => Ok(Value::Null),
                    _ => Err(EvalError::Scorer(format!(
                        "VLC's HTTP interface (port 8080) did not answer: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    ))),
                }
            }
            Self::Replay { files, .. } => {
                for (rel, r) in files.iter().zip(replies) {
                    let probe = format!("read ~/{rel}");
                    match reply(r, &probe)? {
                        ProbeReply::File(None) => {}
                        ProbeReply::File(Some(f)) if f.total_size > f.bytes.len() as u64 => {
                            return Err(EvalError::Scorer(format!(
                                "~/{rel} is {} bytes, more than a probe carries ({MAX_INLINE_FILE})",
                                f.total_size
                            )));
                        }
                        ProbeReply::File(Some(f)) => {
                            write(&format!("{REPLAY_HOME}/{rel}"), &f.bytes)?
                        }
                        other => return Err(unexpected(&probe, other)),
                    }
                }
                // The worker calls the getter (`Get::replay`).
                Ok(Value::Null)
            }
            Self::VideoPlayer => {
                let mut apps: Vec<(String, usize)> = Vec::new();
                for (t, r) in VIDEO_TYPES.iter().zip(replies) {
                    let out = output(Some(*r), &[format!("xdg-mime query default video/{t}")])?;
                    let app = String::from_utf8_lossy(&out.stdout).into_owned();
                    if app.is_empty() {
                        continue;
                    }
                    match apps.iter_mut().find(|(a, _)| *a == app) {
                        Some((_, n)) => *n += 1,
                        None => apps.push((app, 1)),
                    }
                }
                // Counter.most_common(1): the highest count, the first seen among equals.
                let best = apps
                    .iter()
                    .fold(None::<&(String, usize)>, |best, a| match best {
                        Some(b) if b.1 >= a.1 => Some(b),
                        _ => Some(a),
                    });
                Ok(Value::String(
                    best.map_or_else(|| "unknown".to_owned(), |(a, _)| a.clone()),
                ))
            }
        }
    }

    /// OSWorld's getter for the worker to call, for a replayed one.
    pub(super) fn replay(&self, ws: &Workspace) -> Option<Replay> {
        match self {
            Self::Replay {
                module,
                name,
                config,
                ..
            } => Some(Replay {
                module: (*module).into(),
                name: name.clone(),
                config: config.clone(),
                home: ws.inside_path(REPLAY_HOME),
                cache: ws.inside_path(""),
            }),
            _ => None,
        }
    }
}

/// gnome-terminal's application name on the accessibility bus.
const TERMINAL_APP: &str = "gnome-terminal-server";

/// What OSWorld's server (`/terminal`) answers: the text of the one terminal that is
/// focused in an active frame of gnome-terminal, without U+FFFC and U+FFFD and with
/// trailing whitespace removed (Python's `rstrip`); `None` when there is not exactly one
/// such terminal or its text is empty (the server's XML node then has no text).
fn terminal_output(root: &UiNode) -> Option<String> {
    fn all<'a>(n: &'a UiNode, out: &mut Vec<&'a UiNode>) {
        out.push(n);
        for c in &n.children {
            all(c, out);
        }
    }
    let mut nodes = Vec::new();
    all(root, &mut nodes);
    let mut terminals = Vec::new();
    for app in nodes
        .iter()
        .filter(|n| n.role == "application" && n.name == TERMINAL_APP)
    {
        for frame in app
            .children
            .iter()
            .filter(|f| f.role == "frame" && f.has_state("active"))
        {
            let mut inside = Vec::new();
            all(frame, &mut inside);
            terminals.extend(
                inside
                    .into_iter()
                    .filter(|t| t.role == "terminal" && t.has_state("focused")),
            );
        }
    }
    let [one] = terminals[..] else {
        return None;
    };
    let text: String = one
        .text
        .as_deref()?
        .chars()
        .filter(|c| !matches!(c, '\u{fffc}' | '\u{fffd}'))
        .collect();
    if text.is_empty() {
        return None;
    }
    // str.rstrip(): Unicode whitespace and the four ASCII separators Python counts too.
    Some(
        text.trim_end_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
            .to_owned(),
    )
}

/// The size a `vm_screen_size` or `vm_window_size` script printed.
fn x11_size(replies: &[&ProbeResult], getter: &str) -> Result<Value, EvalError> {
    let out = output(replies.first().copied(), &[getter.to_owned()])?;
    if !out.status.success() {
        return Err(EvalError::Scorer(format!(
            "{getter} failed in the guest (it needs python3 with Xlib and the X display): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| EvalError::Scorer(format!("{getter} did not print JSON ({e})")))
}

/// Starts the guest's system Python (`/usr/bin/python3`, which has the distribution's
/// modules), or the first `python3` on `PATH` where there is none: pyenv and venvs come
/// first on many users' `PATH`.
const PYTHON: &str = "p=/usr/bin/python3; [ -x \"$p\" ] || p=python3; exec \"$p\"";

/// `python3 -c script` with `args` as its `sys.argv[1..]`, in the Python of [`PYTHON`]
/// (where the distribution's python3-xlib goes).
pub(super) fn python(script: &str, args: &[&str]) -> Vec<String> {
    let mut argv = sh(&format!("{PYTHON} -c \"$0\" \"$@\""), &[script]);
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    argv
}

/// A command probe with the getters' time and output limits.
fn command(argv: Vec<String>) -> Probe {
    Probe::Command {
        argv,
        timeout_ms: COMMAND_MS,
        max_output: COMMAND_OUTPUT,
    }
}

/// `sh -c script` with `args` as its `$0`, `$1`, ...
fn sh(script: &str, args: &[&str]) -> Vec<String> {
    ["sh", "-c", script]
        .iter()
        .chain(args)
        .map(|a| (*a).to_owned())
        .collect()
}

/// The output of a command probe's reply.
fn output<'a>(
    r: Option<&'a ProbeResult>,
    argv: &[String],
) -> Result<&'a pincer_shared::setup::ExecOutput, EvalError> {
    let probe = format!("run {}", argv.join(" "));
    match r.map(|r| reply(r, &probe)).transpose()? {
        Some(ProbeReply::Command(out)) => Ok(out),
        Some(other) => Err(unexpected(&probe, other)),
        None => Err(EvalError::Scorer(format!("no reply to {probe}"))),
    }
}

/// The UI tree of a tree probe's reply (`probe` names it in errors).
fn ui_tree<'a>(r: Option<&'a ProbeResult>, probe: &str) -> Result<&'a UiTree, EvalError> {
    match r.map(|r| reply(r, probe)).transpose()? {
        Some(ProbeReply::UiTree(tree)) => Ok(tree),
        Some(other) => Err(unexpected(probe, other)),
        None => Err(EvalError::Scorer(format!("no reply to {probe}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: &str, name: &str, states: &[&str], children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            states: states.iter().map(|s| (*s).to_owned()).collect(),
            children,
            ..UiNode::default()
        }
    }

    fn terminal(states: &[&str], text: &str) -> UiNode {
        UiNode {
            text: Some(text.into()),
            ..node("terminal", "Terminal", states, Vec::new())
        }
    }

    fn desktop(frames: Vec<UiNode>) -> UiNode {
        node(
            "desktop frame",
            "main",
            &[],
            vec![
                node("application", "gnome-terminal-server", &[], frames),
                node(
                    "application",
                    "gedit",
                    &[],
                    vec![node(
                        "frame",
                        "gedit",
                        &["active"],
                        vec![terminal(&["focused"], "not a terminal of gnome-terminal")],
                    )],
                ),
            ],
        )
    }

    fn frame(states: &[&str], terminals: Vec<UiNode>) -> UiNode {
        node(
            "frame",
            "user@host: ~",
            states,
            vec![node("filler", "", &[], terminals)],
        )
    }

    #[test]
    fn the_terminal_output_is_the_focused_terminal_of_the_active_gnome_terminal_window() {
        let text = "$ stty size\n43 132\n\u{fffc}$ \n\n  \u{1f}";
        let tree = desktop(vec![
            frame(&[], vec![terminal(&["focused"], "an inactive window")]),
            frame(
                &["active"],
                vec![
                    terminal(&[], "a tab in the background"),
                    terminal(&["focused"], text),
                ],
            ),
        ]);
        assert_eq!(
            terminal_output(&tree).as_deref(),
            Some("$ stty size\n43 132\n$")
        );
    }

    #[test]
    fn no_terminal_output_without_exactly_one_focused_terminal_with_text() {
        // No active window (another application has the focus).
        let tree = desktop(vec![frame(&[], vec![terminal(&["focused"], "x")])]);
        assert_eq!(terminal_output(&tree), None);
        // Two focused terminals: OSWorld's server answers None.
        let two = || vec![terminal(&["focused"], "a"), terminal(&["focused"], "b")];
        assert_eq!(
            terminal_output(&desktop(vec![frame(&["active"], two())])),
            None
        );
        // Only replacement characters: the server's node has no text.
        let empty = desktop(vec![frame(
            &["active"],
            vec![terminal(&["focused"], "\u{fffc}\u{fffd}")],
        )]);
        assert_eq!(terminal_output(&empty), None);
        // Only whitespace: an empty string, as `"  ".rstrip()`.
        let blank = desktop(vec![frame(
            &["active"],
            vec![terminal(&["focused"], " \n")],
        )]);
        assert_eq!(terminal_output(&blank).as_deref(), Some(""));
    }
}

//! OSWorld's task files as pincer tasks. Each task becomes `<domain>/<id>` with one role,
//! `desktop`; its setup steps become pincer's (a download puts the file from OSWorld's file
//! cache, pyautogui code becomes input steps, commands become exec steps), its postconfig
//! becomes finalize steps, and its evaluator one final checkpoint: `osworld`, scored by
//! OSWorld's own metric code ([`super::metric`]), or `agent_said_infeasible` for the tasks
//! whose right answer is to say they cannot be done. Only the agent ends such a run, as in
//! OSWorld. The original task stays inside (`origin`).
//!
//! Every task is also classified, so a user sees what can run here: offline, runnable with
//! its files (present in the cache or missing), needing the live web or a Google account,
//! or not supported (naming the step kind, getter or metric, and why).
//!
//! OSWorld's machine has the user `user` at `/home/user`; a pincer desktop's user has a home
//! of its own, so a path under `/home/user` becomes one under `~` (`$HOME` in shell
//! commands).

use super::cache;
use super::check::Kept;
use super::model::{ConfigStep, Getter, Index, OsTask};
use super::pyautogui;
use crate::task::steps::{Step, WindowAction};
use crate::task::{Checkpoint, EndRule, EnvNeed, Limits, Requires, Task};
use pincer_shared::Platform;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// OSWorld's step limit (its `run.py` default).
pub const STEP_LIMIT: u32 = 15;

/// The getters pincer implements in Rust, returning what OSWorld's return (besides the
/// ones it calls in OSWorld's own code, `check::REPLAYED`).
pub const GETTERS: &[&str] = &[
    "vm_file",
    "cloud_file",
    "rule",
    "vm_command_line",
    "vm_command_error",
    "vlc_config",
    "gimp_config_file",
    "cache_file",
    "vm_wallpaper",
    "list_directory",
    "default_video_player",
    "vscode_config",
    "vm_terminal_output",
    "vm_screen_size",
    "vm_window_size",
    "vlc_playing_info",
    "accessibility_tree",
];

/// What a task needs to run here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "needs")]
pub enum Needs {
    /// Nothing from outside.
    Offline,
    /// Files from OSWorld's file host, cached (`missing` of them not in the cache yet).
    Files {
        /// Cache paths (relative to the cache) and the URLs they come from.
        files: Vec<(PathBuf, String)>,
        /// How many of them the cache lacks.
        missing: usize,
    },
    /// The live web (pages opened in the browser, packages installed).
    Web {
        /// Why.
        why: String,
    },
    /// A Google account (Drive, sign-in).
    Account {
        /// Why.
        why: String,
    },
}

/// One task imported.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The pincer task.
    pub task: Task,
    /// OSWorld's domain.
    pub domain: String,
    /// What it needs.
    pub needs: Needs,
    /// Why pincer cannot run or score it, if it cannot (step kinds, getters, metrics).
    pub unsupported: Vec<String>,
}

impl Imported {
    /// The column this task counts in.
    pub fn category(&self) -> &'static str {
        match (&self.needs, self.unsupported.is_empty()) {
            (Needs::Account { .. }, _) => "account",
            (Needs::Web { .. }, _) => "web",
            (_, false) => "unsupported",
            (Needs::Files { missing: 0, .. }, true) => "files-present",
            (Needs::Files { .. }, true) => "files-missing",
            (Needs::Offline, true) => "offline",
        }
    }
}

/// Why an import failed as a whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file is not what OSWorld writes.
    #[error("{path}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What was wrong, with the field.
        message: String,
    },
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        source,
    })?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| ImportError::Malformed {
        path: path.to_owned(),
        message: format!("at `{}`: {}", e.path(), e.inner()),
    })
}

/// Imports the tasks `index` names (a file of `dir`, `test_all.json` by default) from
/// OSWorld's `evaluation_examples` folder `dir`; `cache` is where their files are looked for.
pub fn import_dir(dir: &Path, index: &Path, cache: &Path) -> Result<Vec<Imported>, ImportError> {
    let index_path = if index.is_absolute() || index.exists() {
        index.to_owned()
    } else {
        dir.join(index)
    };
    let index: Index = read_json(&index_path)?;
    let mut out = Vec::new();
    for (domain, ids) in &index {
        for id in ids {
            let path = dir.join("examples").join(domain).join(format!("{id}.json"));
            let raw: serde_json::Value = read_json(&path)?;
            let task: OsTask = serde_path_to_error::deserialize(raw.clone()).map_err(|e| {
                ImportError::Malformed {
                    path: path.clone(),
                    message: format!("at `{}`: {}", e.path(), e.inner()),
                }
            })?;
            out.push(convert(domain, &task, raw, cache));
        }
    }
    Ok(out)
}

/// Every file the tasks need from OSWorld's file host (path in the cache, URL), once each.
pub fn files(all: &[Imported]) -> Vec<(PathBuf, String)> {
    let mut files: Vec<(PathBuf, String)> = all
        .iter()
        .filter_map(|i| match &i.needs {
            Needs::Files { files, .. } => Some(files.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    files.sort();
    files.dedup_by(|a, b| a.0 == b.0);
    files
}

/// Maps a guest path of OSWorld's machine to the desktop user's.
pub(super) fn home(path: &str) -> String {
    match path.strip_prefix("/home/user") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("~{rest}"),
        _ => path.to_owned(),
    }
}

/// Step kinds that need a Google account.
const ACCOUNT_STEPS: &[&str] = &["googledrive", "login"];
/// Step kinds that need the live web (through the guest's Chrome).
const WEB_STEPS: &[&str] = &["chrome_open_tabs", "chrome_close_tabs"];
/// Getters that read the live web through the guest's Chrome.
const WEB_GETTERS: &[&str] = &[
    "active_tab_info",
    "active_tab_html_parse",
    "page_info",
    "info_from_website",
    "pdf_from_url",
    "gotoRecreationPage_and_get_html_content",
    "open_tabs_info",
    "active_url_from_accessTree",
    "active_tab_url_parse",
    "url_dashPart",
];

/// The web address a `rule` getter expects (`{"type": "url"}`): the page or stream the
/// agent must open.
fn played_url(g: &Getter) -> Option<&str> {
    let rules = g.fields.get("rules")?;
    let url = rules.get("url")?.as_str()?;
    (g.kind == "rule"
        && rules.get("type").and_then(serde_json::Value::as_str) == Some("url")
        && (url.starts_with("http://") || url.starts_with("https://")))
    .then_some(url)
}

/// Converts one task.
pub fn convert(domain: &str, t: &OsTask, original: serde_json::Value, cache: &Path) -> Imported {
    let mut unsupported = Vec::new();
    let mut files = Vec::new();
    let mut web = None;
    let mut account = None;
    let mut setup = Vec::new();
    let mut finalize = Vec::new();
    let mut kept = BTreeMap::new();
    for (phase, list, into) in [
        ("setup", &t.config, &mut setup),
        ("postconfig", &t.evaluator.postconfig, &mut finalize),
    ] {
        for (i, s) in list.iter().enumerate() {
            if phase == "postconfig" {
                match keeps_output(s) {
                    Some(Ok(outputs)) => {
                        kept.extend(outputs);
                        continue;
                    }
                    Some(Err(why)) => {
                        unsupported.push(format!("{phase} step {i} ({}): {why}", s.kind));
                        continue;
                    }
                    None if !kept.is_empty() && s.kind != "sleep" => unsupported.push(format!(
                        "{phase} step {i} ({}) runs after a command whose output the task keeps: pincer runs such commands when the final state is judged, after every other step",
                        s.kind
                    )),
                    None => {}
                }
            }
            if ACCOUNT_STEPS.contains(&s.kind.as_str()) {
                account.get_or_insert(format!("{phase} step {i} is {}", s.kind));
            }
            if WEB_STEPS.contains(&s.kind.as_str()) {
                web.get_or_insert(format!("{phase} step {i} opens pages ({})", s.kind));
            }
            if let Some(why) = needs_network(s) {
                web.get_or_insert(format!("{phase} step {i} {why}"));
            }
            match map_step(&t.id, s, &mut files) {
                Ok(steps) => into.extend(steps),
                Err(why) => unsupported.push(format!("{phase} step {i} ({}): {why}", s.kind)),
            }
        }
    }
    for g in t.evaluator.getters() {
        if g.kind == "googledrive_file" {
            account.get_or_insert("its getter googledrive_file reads Google Drive".into());
        } else if WEB_GETTERS.contains(&g.kind.as_str()) {
            web.get_or_insert(format!(
                "its getter {} reads the browser's live page",
                g.kind
            ));
        } else if let Some(url) = played_url(g) {
            web.get_or_insert(format!("its expected result is the web address {url}"));
        } else if g.kind == "cloud_file" {
            for (path, url) in gold_files(&t.id, g) {
                files.push((path, url));
            }
        } else if g.kind == "vscode_config" {
            // OSWorld's getter runs the extension's command (ctrl+shift+p, its name,
            // enter), waits a second and reads the file it wrote: the input goes last in
            // finalize, the file is read as `vm_file` reads it.
            match g.str("vscode_extension_command") {
                Some(cmd) => finalize.extend([
                    Step::Press {
                        keys: "ctrl+shift+p".into(),
                    },
                    Step::TypeText { text: cmd.into() },
                    Step::Press {
                        keys: "enter".into(),
                    },
                    Step::Sleep { ms: 1000 },
                ]),
                None => unsupported
                    .push("getter vscode_config has no `vscode_extension_command`".into()),
            }
        } else if g.kind == "cache_file" && !g.str("path").is_some_and(|p| kept.contains_key(p)) {
            unsupported.push(format!(
                "getter cache_file reads {}, which no postconfig command of the task writes",
                g.str("path").unwrap_or("nothing")
            ));
        }
        if !GETTERS.contains(&g.kind.as_str())
            && !super::getters::REPLAYED.iter().any(|(n, _)| *n == g.kind)
            && !super::getters::SLIDE_GETTERS.contains(&g.kind.as_str())
        {
            unsupported.push(format!(
                "getter {} is not implemented in pincer yet",
                g.kind
            ));
        }
    }
    if !t.evaluator.is_infeasible() {
        for f in t.evaluator.funcs() {
            if let Err(why) = super::metric::supported(f) {
                unsupported.push(format!("metric {f}: {why}"));
            }
        }
    }
    unsupported.sort();
    unsupported.dedup();
    let needs = if let Some(why) = account {
        Needs::Account { why }
    } else if let Some(why) = web {
        Needs::Web { why }
    } else if files.is_empty() {
        Needs::Offline
    } else {
        files.sort();
        files.dedup();
        let missing = files
            .iter()
            .filter(|(p, _)| !cache.join(p).is_file())
            .count();
        Needs::Files { files, missing }
    };
    let checkpoint = if t.evaluator.is_infeasible() {
        Checkpoint {
            id: "infeasible".into(),
            env: None,
            check: "agent_said_infeasible".into(),
            args: serde_json::json!({}),
            after: Vec::new(),
            final_only: true,
        }
    } else {
        let mut evaluator = serde_json::to_value(&t.evaluator).unwrap_or_default();
        if let Some(map) = evaluator.as_object_mut() {
            map.remove("postconfig");
        }
        Checkpoint {
            id: "score".into(),
            env: Some("desktop".into()),
            check: "osworld".into(),
            args: if kept.is_empty() {
                serde_json::json!({"task": t.id, "evaluator": evaluator})
            } else {
                serde_json::json!({"task": t.id, "evaluator": evaluator, "kept": kept})
            },
            after: Vec::new(),
            final_only: true,
        }
    };
    let task = Task {
        id: format!("{domain}/{}", t.id),
        instruction: t.instruction.clone(),
        tags: vec!["osworld".into(), domain.to_owned()],
        envs: [(
            "desktop".to_owned(),
            EnvNeed {
                platform: Platform::Linux,
            },
        )]
        .into(),
        setup: nonempty(setup),
        finalize: nonempty(finalize),
        teardown: BTreeMap::new(),
        tools: BTreeMap::new(),
        checkpoints: vec![checkpoint],
        end: EndRule::Agent,
        limits: Limits {
            max_steps: STEP_LIMIT,
            ..Limits::default()
        },
        preconditions: None,
        oracle: None,
        origin: Some(
            serde_json::json!({"benchmark": "osworld", "domain": domain, "task": original}),
        ),
        requires: Requires {
            network: match &needs {
                Needs::Web { why } => Some(why.clone()),
                _ => None,
            },
            account: match &needs {
                Needs::Account { why } => Some(why.clone()),
                _ => None,
            },
            unsupported: unsupported.clone(),
            apps: apps_started(t),
        },
        compat: Default::default(),
    };
    Imported {
        task,
        domain: domain.to_owned(),
        needs,
        unsupported,
    }
}

/// Programs of OSWorld's machine that a machine may lack, as setups start them.
const APPS: &[&str] = &[
    "google-chrome",
    "code",
    "vlc",
    "gimp",
    "thunderbird",
    "libreoffice",
    "soffice",
    "nautilus",
    "gnome-terminal",
    "socat",
];

/// The apps of [`APPS`] that a task's setup or postconfig starts (`launch`, `execute`,
/// `command`), by the program its command names first.
fn apps_started(t: &OsTask) -> Vec<String> {
    let steps = t.config.iter().chain(&t.evaluator.postconfig);
    let mut apps: Vec<String> = steps
        .filter(|s| matches!(s.kind.as_str(), "launch" | "execute" | "command"))
        .filter_map(|s| {
            let first = match s.parameters.get("command")? {
                serde_json::Value::String(c) => shlex_split(c).ok()?.into_iter().next()?,
                serde_json::Value::Array(a) => {
                    let first = a.first()?.as_str()?;
                    // A shell script's first word when it is one.
                    first.split_whitespace().next()?.to_owned()
                }
                _ => return None,
            };
            let name = first.rsplit('/').next().unwrap_or(&first).to_owned();
            APPS.contains(&name.as_str()).then_some(name)
        })
        .collect();
    apps.sort();
    apps.dedup();
    apps
}

fn nonempty(steps: Vec<Step>) -> BTreeMap<String, Vec<Step>> {
    if steps.is_empty() {
        BTreeMap::new()
    } else {
        [("desktop".to_owned(), steps)].into()
    }
}

/// Why a step needs the network, if it does: installing packages.
fn needs_network(s: &ConfigStep) -> Option<&'static str> {
    let text = s.parameters.get("command").map(|c| c.to_string())?;
    (text.contains("apt-get install")
        || text.contains("apt install")
        || text.contains("pip install"))
    .then_some("installs packages from the network")
}

/// The gold files a `cloud_file` getter names (its `path`/`dest`, one or several).
fn gold_files(task: &str, g: &Getter) -> Vec<(PathBuf, String)> {
    let list = |key: &str| -> Vec<String> {
        match g.fields.get(key) {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    list("path")
        .into_iter()
        .zip(list("dest"))
        .map(|(url, dest)| (cache::gold(task, &dest), url))
        .collect()
}

/// The gold files (cache paths) of an `osworld` checkpoint's arguments.
pub fn gold_files_of(args: &serde_json::Value) -> Vec<PathBuf> {
    let (Some(task), Some(ev)) = (
        args.get("task").and_then(|t| t.as_str()),
        args.get("evaluator"),
    ) else {
        return Vec::new();
    };
    let Ok(ev) = serde_json::from_value::<super::model::Evaluator>(ev.clone()) else {
        return Vec::new();
    };
    ev.getters()
        .into_iter()
        .filter(|g| g.kind == "cloud_file")
        .flat_map(|g| gold_files(task, g))
        .map(|(path, _)| path)
        .collect()
}

/// pincer's steps for one OSWorld step; `files` gathers what a download needs.
fn map_step(
    task: &str,
    s: &ConfigStep,
    files: &mut Vec<(PathBuf, String)>,
) -> Result<Vec<Step>, String> {
    let p = &s.parameters;
    let str_of = |k: &str| p.get(k).and_then(serde_json::Value::as_str);
    match s.kind.as_str() {
        "download" => {
            let list = p
                .get("files")
                .and_then(serde_json::Value::as_array)
                .ok_or("no `files` list")?;
            let mut out = Vec::new();
            for f in list {
                let (Some(url), Some(path)) = (
                    f.get("url").and_then(serde_json::Value::as_str),
                    f.get("path").and_then(serde_json::Value::as_str),
                ) else {
                    return Err("a file without `url` and `path`".into());
                };
                let asset = cache::download(task, url, path);
                files.push((asset.clone(), url.to_owned()));
                out.push(Step::PutAsset {
                    asset: asset.to_string_lossy().into_owned(),
                    path: home(path),
                });
            }
            Ok(out)
        }
        "launch" => Ok(vec![Step::Launch {
            argv: command(p.get("command"), shell(p))?,
        }]),
        "open" => {
            let path = home(str_of("path").ok_or("no `path`")?);
            let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
            let stem = name
                .rsplit_once('.')
                .map_or(name.clone(), |(s, _)| s.to_owned());
            Ok(vec![
                Step::Launch {
                    argv: vec!["xdg-open".into(), path],
                },
                Step::WaitWindow {
                    title_contains: stem,
                    timeout_ms: Some(60_000),
                },
            ])
        }
        "execute" | "command" => {
            if p.get("stdout").is_some() || p.get("stderr").is_some() {
                return Err("keeps a command's output during setup, which pincer does not keep (only postconfig outputs, for cache_file)".into());
            }
            if let Some(code) = python_code(p.get("command")) {
                return pyautogui::steps(&code);
            }
            let argv = guest_command(p)?;
            let mut steps = Vec::new();
            if argv.iter().any(|a| a == "sudo" || a.contains("sudo ")) {
                steps.push(Step::Exec {
                    argv: ["sh", "-c", SUDO_CHECK].map(str::to_owned).to_vec(),
                    timeout_ms: Some(30_000),
                    check: true,
                });
            }
            steps.push(Step::Exec {
                argv,
                timeout_ms: Some(120_000),
                check: false,
            });
            Ok(steps)
        }
        // OSWorld only logs a window it cannot find; `strict` (an exact title) is read as
        // a part of it.
        "activate_window" | "close_window" => {
            let title = str_of("window_name").ok_or("no `window_name`")?;
            Ok(vec![Step::Window {
                title_contains: title.to_owned(),
                op: if s.kind == "close_window" {
                    WindowAction::Close
                } else {
                    WindowAction::Activate
                },
                by_class: super::model::truthy(p.get("by_class")),
                optional: true,
            }])
        }
        "sleep" => {
            let secs = p
                .get("seconds")
                .and_then(serde_json::Value::as_f64)
                .ok_or("no `seconds`")?;
            Ok(vec![Step::Sleep {
                ms: (secs.max(0.0) * 1000.0).round() as u64,
            }])
        }
        "update_browse_history" => {
            let history = p
                .get("history")
                .and_then(serde_json::Value::as_array)
                .ok_or("no `history` list")?;
            let valid = history.iter().all(|h| {
                h.get("url").is_some_and(serde_json::Value::is_string)
                    && h.get("title").is_some_and(serde_json::Value::is_string)
                    && h.get("visit_time_from_now_in_seconds")
                        .is_some_and(serde_json::Value::is_number)
            });
            if !valid {
                return Err(
                    "a history entry without `url`, `title` and `visit_time_from_now_in_seconds`"
                        .into(),
                );
            }
            let asset = cache::browse_history(task);
            files.push((asset.clone(), cache::BROWSE_HISTORY_URL.to_owned()));
            let path = home(CHROME_HISTORY);
            let entries = serde_json::Value::Array(history.clone()).to_string();
            Ok(vec![
                Step::PutAsset {
                    asset: asset.to_string_lossy().into_owned(),
                    path: path.clone(),
                },
                Step::Exec {
                    argv: super::getters::python(BROWSE_HISTORY, &[&path, &entries]),
                    timeout_ms: Some(60_000),
                    check: true,
                },
            ])
        }
        other => Err(format!(
            "the step kind {other} is not implemented in pincer yet"
        )),
    }
}

/// Chrome's history on OSWorld's machine, where `update_browse_history` puts it.
const CHROME_HISTORY: &str = "/home/user/.config/google-chrome/Default/History";

/// OSWorld's `update_browse_history` after the empty history is in place (argv: its path,
/// the entries as JSON): each entry a row of `urls` and one of `visits`, at the entry's
/// seconds before now in Chrome's microseconds since 1601, with OSWorld's values
/// (`_update_browse_history_setup` in desktop-env's `controllers/setup.py`). The clock is
/// the guest's, where OSWorld's is the host's; both take local time.
const BROWSE_HISTORY: &str = r#"
import json, sqlite3, sys
from datetime import datetime, timedelta
path, entries = sys.argv[1], json.loads(sys.argv[2])
conn = sqlite3.connect(path)
for e in entries:
    visit = datetime.now() - timedelta(seconds=e["visit_time_from_now_in_seconds"])
    stamp = int((visit - datetime(1601, 1, 1)).total_seconds() * 1000000)
    cur = conn.execute(
        "INSERT INTO urls (url, title, visit_count, typed_count, last_visit_time, hidden) "
        "VALUES (?, ?, ?, ?, ?, ?)", (e["url"], e["title"], 1, 0, stamp, 0))
    conn.execute(
        "INSERT INTO visits (url, visit_time, from_visit, transition, segment_id, visit_duration) "
        "VALUES (?, ?, ?, ?, ?, ?)", (cur.lastrowid, stamp, 0, 805306368, 0, 0))
conn.commit()
"#;

/// Checked before a setup command that runs `sudo` with OSWorld's password: OSWorld
/// ignores a failing setup command, so without this a machine whose user cannot sudo with
/// that password would leave the task set up wrong and score the agent on it.
const SUDO_CHECK: &str = "echo password | sudo -S -k -p '' true 2>/dev/null || { echo \"this task's setup runs sudo with OSWorld's password ('password'), which this machine's user cannot: run it on the osworld image, or as a user who can\" >&2; exit 1; }";

/// The command of an `execute`/`command` step as pincer runs it in the guest. Commands
/// that run `sudo` pipe OSWorld's password (`password`) into it: they work on OSWorld's
/// machine (the `osworld` image), as root, or for a user with that password; elsewhere a
/// setup step checked first ([`SUDO_CHECK`]) fails, the environment's failure.
fn guest_command(p: &serde_json::Value) -> Result<Vec<String>, String> {
    command(p.get("command"), shell(p))
}

/// The outputs a postconfig `execute`/`command` step keeps for `cache_file` (its `stdout`
/// and `stderr` file names), if it keeps any.
fn keeps_output(s: &ConfigStep) -> Option<Result<Vec<(String, Kept)>, String>> {
    let p = &s.parameters;
    if !matches!(s.kind.as_str(), "execute" | "command")
        || (p.get("stdout").is_none() && p.get("stderr").is_none())
    {
        return None;
    }
    let kept = || {
        let argv = guest_command(p)?;
        [("stdout", false), ("stderr", true)]
            .into_iter()
            .filter_map(|(k, stderr)| p.get(k).map(|v| (k, v, stderr)))
            .map(|(k, v, stderr)| {
                let name = v.as_str().ok_or(format!("`{k}` is not a file name"))?;
                Ok((
                    super::getters::dest(name)?,
                    Kept {
                        argv: argv.clone(),
                        stderr,
                    },
                ))
            })
            .collect()
    };
    Some(kept())
}

/// Whether a step's (or getter's) `shell` is set, as Python reads it (OSWorld's server
/// hands the value to `subprocess`, so `"true"` counts).
pub(super) fn shell(p: &serde_json::Value) -> bool {
    super::model::truthy(p.get("shell"))
}

/// The code of a `python -c CODE` command, if it is one.
fn python_code(cmd: Option<&serde_json::Value>) -> Option<String> {
    let list = cmd?.as_array()?;
    match list.as_slice() {
        [py, flag, code] if py.as_str()?.starts_with("python") && flag.as_str()? == "-c" => {
            Some(code.as_str()?.to_owned())
        }
        _ => None,
    }
}

/// An argv from OSWorld's `command` (a list, or a string split on spaces; with `shell`,
/// `sh -c` over the string), paths under `/home/user` moved to the desktop user's home,
/// run from that home as OSWorld's server runs commands from `/home/user` (its tasks run
/// `bash eval.sh` and `./check_password.sh`).
pub(super) fn command(cmd: Option<&serde_json::Value>, shell: bool) -> Result<Vec<String>, String> {
    let cmd = cmd.ok_or("no `command`")?;
    let in_home = |script: String| {
        vec![
            "sh".into(),
            "-c".into(),
            format!("cd ~ && {{\n{script}\n}}"),
        ]
    };
    let argv: Vec<String> = match cmd {
        serde_json::Value::String(s) if shell => in_home(s.replace("/home/user", "$HOME")),
        serde_json::Value::String(s) => {
            let mut argv: Vec<String> = vec![
                "sh".into(),
                "-c".into(),
                "cd ~ && exec \"$@\"".into(),
                "sh".into(),
            ];
            argv.extend(shlex_split(s)?.iter().map(|a| home(a)));
            argv
        }
        // Python's subprocess with a list and shell=True: the first item is the script,
        // the rest its $0, $1, ...
        serde_json::Value::Array(a) if shell => {
            let items = strings(a)?;
            let Some((script, rest)) = items.split_first() else {
                return Err("an empty command".into());
            };
            let mut argv = in_home(script.replace("/home/user", "$HOME"));
            argv.extend(rest.iter().cloned());
            argv
        }
        serde_json::Value::Array(a) => {
            let mut argv: Vec<String> = vec![
                "sh".into(),
                "-c".into(),
                "cd ~ && exec \"$@\"".into(),
                "sh".into(),
            ];
            argv.extend(strings(a)?.iter().map(|s| home(s)));
            argv
        }
        _ => return Err("`command` is neither a string nor a list".into()),
    };
    if argv.is_empty() {
        return Err("an empty command".into());
    }
    Ok(argv)
}

/// Python's `shlex.split` (POSIX mode), as OSWorld's server splits a command string that is
/// not run by a shell: words split on spaces, tabs and newlines; `'...'` literal; `"..."`
/// with `\"` and `\\` escaped; `\` outside quotes escapes the next character.
fn shlex_split(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    let unclosed = || format!("the command {s:?} has an unclosed quotation");
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\r' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next().ok_or_else(unclosed)? {
                        '\'' => break,
                        x => word.push(x),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next().ok_or_else(unclosed)? {
                        '"' => break,
                        '\\' => match chars.next().ok_or_else(unclosed)? {
                            x @ ('"' | '\\') => word.push(x),
                            x => {
                                word.push('\\');
                                word.push(x);
                            }
                        },
                        x => word.push(x),
                    }
                }
            }
            '\\' => {
                in_word = true;
                let x = chars
                    .next()
                    .ok_or_else(|| format!("the command {s:?} ends in an escape"))?;
                word.push(x);
            }
            x => {
                in_word = true;
                word.push(x);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

fn strings(a: &[serde_json::Value]) -> Result<Vec<String>, String> {
    a.iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| "a command argument that is not a string".to_owned())
        })
        .collect()
}

/// The name of the import's report in the folder it writes (hidden, so that loading the
/// folder's tasks skips it).
pub const REPORT: &str = ".osworld-import.json";

/// Writes each task as `out/<domain>/<id>.json` and the summary as [`REPORT`]; the number
/// of task files written.
pub fn write(all: &[Imported], out: &Path) -> Result<usize, ImportError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ImportError::Io { path, source }
    };
    for t in all {
        let path = out.join(format!("{}.json", t.task.id));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let text = serde_json::to_string_pretty(&t.task).unwrap_or_default();
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    let report = out.join(REPORT);
    let text = serde_json::to_string_pretty(&Summary::of(all)).unwrap_or_default();
    std::fs::write(&report, text).map_err(io(&report))?;
    Ok(all.len())
}

/// One line per category and domain, and the totals: what `pincer task import-osworld`
/// prints and writes as `import.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Counts per domain and category.
    pub domains: BTreeMap<String, BTreeMap<String, usize>>,
    /// Counts per category over all domains.
    pub total: BTreeMap<String, usize>,
    /// Per task: its id, category, needs and what is not supported.
    pub tasks: Vec<TaskLine>,
    /// How many runnable tasks start each app a machine may lack.
    pub apps: BTreeMap<String, usize>,
}

/// One task in the summary.
#[derive(Debug, Clone, Serialize)]
pub struct TaskLine {
    /// `<domain>/<id>`.
    pub id: String,
    /// Its category.
    pub category: String,
    /// What it needs.
    pub needs: Needs,
    /// What is not supported.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
}

/// The categories, in report order.
pub const CATEGORIES: [&str; 6] = [
    "offline",
    "files-present",
    "files-missing",
    "web",
    "account",
    "unsupported",
];

impl Summary {
    /// The summary of an import.
    pub fn of(all: &[Imported]) -> Self {
        let mut s = Self::default();
        for t in all {
            let c = t.category();
            *s.domains
                .entry(t.domain.clone())
                .or_default()
                .entry(c.to_owned())
                .or_default() += 1;
            *s.total.entry(c.to_owned()).or_default() += 1;
            if t.task.requires.refusal(true).is_none() {
                for app in &t.task.requires.apps {
                    *s.apps.entry(app.clone()).or_default() += 1;
                }
            }
            s.tasks.push(TaskLine {
                id: t.task.id.clone(),
                category: c.to_owned(),
                needs: t.needs.clone(),
                unsupported: t.unsupported.clone(),
            });
        }
        s
    }

    /// The table for people.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!("{:<22} {:>8}", "domain", "imported");
        for c in CATEGORIES {
            let _ = write!(out, " {c:>13}");
        }
        out.push('\n');
        let row = |out: &mut String, name: &str, counts: &BTreeMap<String, usize>| {
            let _ = write!(out, "{name:<22} {:>8}", counts.values().sum::<usize>());
            for c in CATEGORIES {
                let _ = write!(out, " {:>13}", counts.get(c).copied().unwrap_or(0));
            }
            out.push('\n');
        };
        for (d, counts) in &self.domains {
            row(&mut out, d, counts);
        }
        row(&mut out, "all", &self.total);
        if !self.apps.is_empty() {
            let apps: Vec<String> = self.apps.iter().map(|(a, n)| format!("{a} {n}")).collect();
            let _ = writeln!(
                out,
                "apps their setups start: {} (a run leaves out a task whose app its machine lacks)",
                apps.join(", ")
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Python's `shlex.split` gives for the same strings.
    #[test]
    fn command_strings_split_as_pythons_shlex() {
        let split = |s: &str| shlex_split(s).unwrap();
        assert_eq!(split("which spotify"), ["which", "spotify"]);
        assert_eq!(split("  a\tb\n c "), ["a", "b", "c"]);
        assert_eq!(
            split(r#"echo 'a  b' "c \" d" e\ f"#),
            ["echo", "a  b", "c \" d", "e f"]
        );
        assert_eq!(split(r#"x"y"'z'"#), ["xyz"]);
        assert_eq!(split(r#""a\nb""#), ["a\\nb"]);
        assert_eq!(split("''"), [""]);
        assert!(shlex_split("echo 'open").unwrap_err().contains("unclosed"));
        // Run from the home, paths under /home/user moved there.
        let argv = command(Some(&serde_json::json!("ls '/home/user/My Files'")), false).unwrap();
        assert_eq!(argv[4..], ["ls", "~/My Files"]);
    }

    /// `update_browse_history` needs OSWorld's one empty history file, cached in the task's
    /// folder, and refuses entries it could not insert.
    #[test]
    fn browse_history_setups_need_the_empty_history_and_whole_entries() {
        let with = |entry: serde_json::Value| {
            let task = serde_json::json!({"id": "t1", "instruction": "x", "config": [
                {"type": "update_browse_history", "parameters": {"history": [entry]}}],
                "evaluator": {"func": "infeasible"}});
            let t: OsTask = serde_json::from_value(task.clone()).unwrap();
            convert("chrome", &t, task, Path::new("/nonexistent"))
        };
        let good = with(
            serde_json::json!({"url": "https://a.example/", "title": "A",
            "visit_time_from_now_in_seconds": 60}),
        );
        assert!(good.unsupported.is_empty(), "{:?}", good.unsupported);
        match &good.needs {
            Needs::Files { files, .. } => assert_eq!(
                files,
                &[(
                    PathBuf::from("t1/history_new.sqlite"),
                    cache::BROWSE_HISTORY_URL.to_owned()
                )]
            ),
            other => panic!("{other:?}"),
        }
        let bad = with(serde_json::json!({"url": "https://a.example/", "title": "A"}));
        assert!(
            bad.unsupported[0].contains("visit_time_from_now_in_seconds"),
            "{:?}",
            bad.unsupported
        );
    }

    fn import(evaluator: serde_json::Value) -> Imported {
        let task = serde_json::json!({"id": "t1", "instruction": "x", "config": [],
            "evaluator": evaluator});
        let t: OsTask = serde_json::from_value(task.clone()).unwrap();
        convert("os", &t, task, Path::new("/nonexistent"))
    }

    #[test]
    fn the_apps_a_setup_starts_are_required_and_a_machine_without_one_leaves_the_task_out() {
        let task = serde_json::json!({"id": "t1", "instruction": "x", "config": [
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
            {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
            {"type": "execute", "parameters": {"command": "/usr/bin/code --install-extension x", "shell": true}},
            {"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui"]}},
            {"type": "launch", "parameters": {"command": "vlc --start-time=3 a.mp4", "shell": true}},
        ], "evaluator": {"func": "infeasible"}});
        let t: OsTask = serde_json::from_value(task.clone()).unwrap();
        let got = convert("os", &t, task, Path::new("/nonexistent"));
        assert_eq!(
            got.task.requires.apps,
            ["code", "google-chrome", "socat", "vlc"]
        );
        let image = |packages: &[&str]| crate::peers::Machine::Image {
            name: "osworld".into(),
            packages: packages.iter().map(|p| (*p).to_owned()).collect(),
        };
        let skipped = |machine| {
            crate::peers::runnable(vec![got.task.clone()], Path::new("/"), false, &machine).1
        };
        // Chromium is google-chrome in the osworld image; VS Code is only there from its .deb.
        let why = skipped(image(&["chromium", "socat", "vlc"]));
        assert_eq!(why.len(), 1);
        assert!(
            why[0]
                .1
                .starts_with("needs code, which the image osworld lacks"),
            "{why:?}"
        );
        assert!(skipped(image(&["google-chrome-stable", "code", "socat", "vlc"])).is_empty());
        assert!(skipped(crate::peers::Machine::Unknown).is_empty());
    }

    /// A setup command that runs sudo with OSWorld's password is preceded by a checked
    /// step that fails, saying why, on a machine whose user cannot sudo with it (OSWorld
    /// itself ignores the failing command, which would leave the task set up wrong).
    #[test]
    fn sudo_in_setup_is_checked_first_and_fails_loudly_without_osworlds_password() {
        let task = serde_json::json!({"id": "t1", "instruction": "x", "config": [
            {"type": "execute", "parameters": {"command": "echo 'password' | sudo -S mkdir ~/Desktop/a", "shell": true}},
            {"type": "execute", "parameters": {"command": "mkdir -p ~/b", "shell": true}},
        ], "evaluator": {"func": "infeasible"}});
        let t: OsTask = serde_json::from_value(task.clone()).unwrap();
        let got = convert("os", &t, task, Path::new("/nonexistent"));
        assert!(
            got.task.requires.unsupported.is_empty(),
            "{:?}",
            got.task.requires
        );
        let steps = &got.task.setup["desktop"];
        let checked: Vec<bool> = steps
            .iter()
            .map(|s| match s {
                Step::Exec { check, .. } => *check,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(checked, [true, false, false]);
        // The check itself, run here where there is no sudo at all.
        let empty = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", SUDO_CHECK])
            .env("PATH", empty.path())
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("run it on the osworld image"),
            "{out:?}"
        );
    }

    #[test]
    fn kept_outputs_become_commands_run_at_judgement_when_nothing_changes_after_them() {
        let ls = serde_json::json!({"type": "execute", "parameters": {
            "command": ["ls", "-R", "/home/user/Local Folders"], "stdout": "ls.out"}});
        let read = serde_json::json!({"func": "check_list",
            "result": {"type": "cache_file", "path": "ls.out"},
            "expected": {"type": "rule", "rules": {"expect": ["a"]}}});
        let mut ev = read.clone();
        ev["postconfig"] = serde_json::json!([
            {"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 's')"]}},
            ls,
            {"type": "sleep", "parameters": {"seconds": 1}},
        ]);
        let got = import(ev);
        assert!(got.unsupported.is_empty(), "{:?}", got.unsupported);
        // The save stays in finalize; the kept command is the check's, not a step.
        let finalize = &got.task.finalize["desktop"];
        assert_eq!(finalize.len(), 2, "{finalize:?}");
        let kept = &got.task.checkpoints[0].args["kept"]["ls.out"];
        assert_eq!(
            kept["argv"].as_array().unwrap()[4..],
            [
                serde_json::json!("ls"),
                "-R".into(),
                "~/Local Folders".into()
            ]
        );
        assert_eq!(kept["stderr"], false);

        // A step that changes state after it: OSWorld's command would not see that change.
        let mut ev = read.clone();
        ev["postconfig"] = serde_json::json!([ls, {"type": "execute", "parameters": {
            "command": ["rm", "-r", "/home/user/Local Folders"]}}]);
        let got = import(ev);
        assert!(
            got.unsupported
                .iter()
                .any(|u| u.contains("runs after a command whose output")),
            "{:?}",
            got.unsupported
        );
        // Nothing writes the file the getter reads; a kept name that climbs out.
        assert!(
            import(read)
                .unsupported
                .iter()
                .any(|u| u.contains("which no postconfig command"))
        );
        let mut ev = serde_json::json!({"func": "check_list",
            "result": {"type": "cache_file", "path": "../x"},
            "expected": {"type": "rule", "rules": {"expect": ["a"]}}});
        ev["postconfig"] = serde_json::json!([{"type": "execute", "parameters": {
            "command": "ls", "stdout": "../x"}}]);
        assert!(
            import(ev)
                .unsupported
                .iter()
                .any(|u| u.contains("not a plain relative name"))
        );
    }

    #[test]
    fn a_task_that_expects_a_web_address_played_needs_the_web() {
        let getter = |rules: serde_json::Value| Getter {
            kind: "rule".into(),
            fields: serde_json::from_value(serde_json::json!({ "rules": rules })).unwrap(),
        };
        let youtube = "https://www.youtube.com/watch?v=pgBsyTKAwLw";
        assert_eq!(
            played_url(&getter(serde_json::json!({"type": "url", "url": youtube}))),
            Some(youtube)
        );
        // A file name, or an address that is not on the web, is not.
        assert_eq!(
            played_url(&getter(
                serde_json::json!({"type": "file_name", "file_name": "a.mp4"})
            )),
            None
        );
        assert_eq!(
            played_url(&getter(
                serde_json::json!({"type": "url", "url": "file:///home/user/a.mp4"})
            )),
            None
        );
    }

    #[test]
    fn vscode_config_runs_its_command_last_in_finalize() {
        let got = import(serde_json::json!({"func": "compare_config",
            "result": {"type": "vscode_config", "vscode_extension_command": "OpenProject",
                       "path": "/home/user/OpenProject.txt", "dest": "OpenProject.txt"},
            "expected": {"type": "rule", "rules": {"expected": "x"}},
            "postconfig": [{"type": "sleep", "parameters": {"seconds": 0.5}}]}));
        assert!(got.unsupported.is_empty(), "{:?}", got.unsupported);
        assert_eq!(
            got.task.finalize["desktop"],
            vec![
                Step::Sleep { ms: 500 },
                Step::Press {
                    keys: "ctrl+shift+p".into()
                },
                Step::TypeText {
                    text: "OpenProject".into()
                },
                Step::Press {
                    keys: "enter".into()
                },
                Step::Sleep { ms: 1000 },
            ]
        );
    }
}

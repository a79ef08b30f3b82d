//! Setup and teardown steps: the typed, declarative things a task may do to an environment
//! before the agent starts (write a file, run a program, start an app and wait for its
//! window, put text on the clipboard). They run through the setup class of the protocol.

use crate::env::{ClientError, Environment};
use base64::Engine as _;
use pincer_shared::android::{AndroidSetup, ContentValue};
use pincer_shared::probe::{Probe, ProbeReply, WindowInfo};
use pincer_shared::setup::{ExecRequest, ExitStatus, Setup, WindowOp};
use pincer_shared::{Request, WireError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// One setup or teardown step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Write a file (parents created), from text or base64.
    WriteFile {
        /// Destination (`~` is the environment user's home).
        path: String,
        /// Text content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Binary content, base64.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base64: Option<String>,
        /// Octal permission bits, such as "644".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// Remove a file or directory tree (missing is fine).
    Remove {
        /// What to remove.
        path: String,
    },
    /// Create a directory and its parents.
    MakeDir {
        /// The directory.
        path: String,
    },
    /// Run a program to completion.
    Exec {
        /// Program and arguments.
        argv: Vec<String>,
        /// Kill it after this long (default 60 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
        /// Fail the setup unless it exits with 0 (default true).
        #[serde(default = "yes")]
        check: bool,
    },
    /// Stop every process with this exact name in the environment's session (TERM, then
    /// KILL once `timeout_ms` has passed) and wait until they are gone, so that a
    /// single-instance app started next does not hand its window to a dying one.
    Kill {
        /// Process name, as `pgrep -x` matches it (`mousepad`, `soffice.bin`).
        name: String,
        /// How long to wait for a clean exit before killing (default 5 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Start a program and return at once.
    Launch {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Wait until a window whose title contains this text exists.
    WaitWindow {
        /// Part of the title.
        title_contains: String,
        /// Give up after this long (default 30 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Change the first window whose title contains this text.
    Window {
        /// Part of the title (with `by_class`: of the window's class, `instance.class` as
        /// X11's `WM_CLASS` gives it, ignoring case, as `wmctrl -x` matches).
        title_contains: String,
        /// activate, maximize, restore, minimize or close.
        op: WindowAction,
        /// Match the window's class instead of its title.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        by_class: bool,
        /// A window that is not there is no failure (OSWorld's `activate_window` and
        /// `close_window` only log it): the step waits 2 s instead of 10 and moves on.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        optional: bool,
    },
    /// Wait.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Put text on the clipboard.
    SetClipboard {
        /// The text.
        text: String,
    },
    /// Press a key or a combination (`ctrl+s`, `enter`) as a person would: through the
    /// action class (OSWorld's setups and postconfigs press keys with pyautogui).
    Press {
        /// The key or combination, in pincer's key names.
        keys: String,
    },
    /// Click at a point of the screen, as a person would.
    Click {
        /// Pixels from the left edge.
        x: i32,
        /// Pixels from the top edge.
        y: i32,
        /// left (default), middle or right.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        button: Option<String>,
        /// How many clicks (default 1; 2 is a double click).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u8>,
    },
    /// Type text, as a person would.
    TypeText {
        /// The text.
        text: String,
    },
    /// Scroll by wheel notches where the pointer is (positive `dy` scrolls down).
    Scroll {
        /// Vertical notches.
        dy: i32,
    },
    /// Put a file of the run's asset cache (`--assets`) into the environment, as a task's
    /// download would have (OSWorld's `download`, from its file cache).
    PutAsset {
        /// The file, relative to the asset cache.
        asset: String,
        /// Destination (`~` is the environment user's home).
        path: String,
    },
    /// Android: start an activity (`am start -n`) and wait for it to be shown.
    StartApp {
        /// `PACKAGE/ACTIVITY` (`com.android.settings/.Settings`).
        component: String,
    },
    /// Android: stop an app (`am force-stop`).
    StopApp {
        /// The package.
        package: String,
    },
    /// Android: clear an app's data, as after installing it (`pm clear`).
    ClearAppData {
        /// The package.
        package: String,
    },
    /// Android: put a setting (`settings put`).
    PutSetting {
        /// system, secure or global.
        namespace: String,
        /// The key (`bluetooth_name`).
        key: String,
        /// The value.
        value: String,
    },
    /// Android: insert a row into a content provider (`content insert`).
    InsertRow {
        /// The provider (`content://sms/inbox`).
        uri: String,
        /// Column to value: a string, an integer or a boolean.
        values: BTreeMap<String, serde_json::Value>,
    },
    /// Android: delete rows of a content provider (`content delete`).
    DeleteRows {
        /// The provider.
        uri: String,
        /// Which rows, as an SQL WHERE clause (all when absent).
        #[serde(default, rename = "where", skip_serializing_if = "Option::is_none")]
        selection: Option<String>,
    },
}

fn yes() -> bool {
    true
}

/// Window operations available to setup steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WindowAction {
    /// Raise and focus.
    Activate,
    /// Fill the screen.
    Maximize,
    /// Undo maximize.
    Restore,
    /// Iconify.
    Minimize,
    /// Close as the close button does.
    Close,
}

impl From<WindowAction> for WindowOp {
    fn from(a: WindowAction) -> Self {
        match a {
            WindowAction::Activate => Self::Activate,
            WindowAction::Maximize => Self::Maximize,
            WindowAction::Restore => Self::Restore,
            WindowAction::Minimize => Self::Minimize,
            WindowAction::Close => Self::Close,
        }
    }
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The environment refused or failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The step itself is wrong (bad base64, bad mode).
    #[error("{0}")]
    Invalid(String),
    /// A checked program failed.
    #[error("`{argv}` ended with {status}: {stderr}")]
    Failed {
        /// The command line.
        argv: String,
        /// How it ended.
        status: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// Processes outlived a kill.
    #[error("processes named '{name}' are still running after SIGKILL")]
    Survived {
        /// The process name.
        name: String,
    },
    /// A wait ran out.
    #[error("no window with '{title}' in its title after {after:?}")]
    NoWindow {
        /// The title part waited for.
        title: String,
        /// How long was waited.
        after: Duration,
    },
}

impl Step {
    /// A one-line description for progress output.
    pub fn describe(&self) -> String {
        match self {
            Self::WriteFile { path, .. } => format!("write {path}"),
            Self::Remove { path } => format!("remove {path}"),
            Self::MakeDir { path } => format!("mkdir {path}"),
            Self::Exec { argv, .. } => format!("exec {}", argv.join(" ")),
            Self::Kill { name, .. } => format!("kill {name}"),
            Self::Launch { argv } => format!("launch {}", argv.join(" ")),
            Self::WaitWindow { title_contains, .. } => {
                format!("wait for window '{title_contains}'")
            }
            Self::Window {
                title_contains,
                op,
                by_class,
                ..
            } => {
                let what = if *by_class { "of class" } else { "" };
                format!("{op:?} window {what} '{title_contains}'")
                    .to_lowercase()
                    .replace("  ", " ")
            }
            Self::Sleep { ms } => format!("sleep {ms} ms"),
            Self::SetClipboard { .. } => "set clipboard".into(),
            Self::Press { keys } => format!("press {keys}"),
            Self::Click { x, y, count, .. } => match count {
                Some(2) => format!("double-click at {x},{y}"),
                _ => format!("click at {x},{y}"),
            },
            Self::TypeText { text } => format!("type {} characters", text.chars().count()),
            Self::Scroll { dy } => format!("scroll {dy}"),
            Self::PutAsset { asset, path } => format!("put {asset} at {path}"),
            Self::StartApp { component } => format!("start {component}"),
            Self::StopApp { package } => format!("stop {package}"),
            Self::ClearAppData { package } => format!("clear the data of {package}"),
            Self::PutSetting {
                namespace,
                key,
                value,
            } => format!("put setting {namespace} {key}={value}"),
            Self::InsertRow { uri, .. } => format!("insert a row into {uri}"),
            Self::DeleteRows { uri, .. } => format!("delete rows of {uri}"),
        }
    }

    /// The Android setup request of an Android step.
    fn android(&self) -> Option<Result<AndroidSetup, String>> {
        let setup = match self {
            Self::StartApp { component } => AndroidSetup::StartActivity {
                component: component.clone(),
            },
            Self::StopApp { package } => AndroidSetup::ForceStop {
                package: package.clone(),
            },
            Self::ClearAppData { package } => AndroidSetup::ClearData {
                package: package.clone(),
            },
            Self::PutSetting {
                namespace,
                key,
                value,
            } => match namespace.parse() {
                Ok(namespace) => AndroidSetup::PutSetting {
                    namespace,
                    key: key.clone(),
                    value: value.clone(),
                },
                Err(e) => return Some(Err(e)),
            },
            Self::InsertRow { uri, values } => {
                let mut typed = Vec::new();
                for (col, v) in values {
                    let value = match v {
                        serde_json::Value::String(s) => ContentValue::Text(s.clone()),
                        serde_json::Value::Bool(b) => ContentValue::Bool(*b),
                        serde_json::Value::Number(n) if n.as_i64().is_some() => {
                            ContentValue::Integer(n.as_i64().unwrap_or_default())
                        }
                        other => {
                            return Some(Err(format!(
                                "insert_row: the value of '{col}' is {other}: give a string, an integer or a boolean"
                            )));
                        }
                    };
                    typed.push((col.clone(), value));
                }
                AndroidSetup::ContentInsert {
                    uri: uri.clone(),
                    values: typed,
                }
            }
            Self::DeleteRows { uri, selection } => AndroidSetup::ContentDelete {
                uri: uri.clone(),
                selection: selection.clone(),
            },
            _ => return None,
        };
        Some(setup.validate().map(|()| setup))
    }

    /// Checks what can be checked without an environment (base64, modes, empty argv).
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::WriteFile {
                content,
                base64,
                mode,
                ..
            } => {
                if content.is_some() == base64.is_some() {
                    return Err("write_file needs exactly one of `content` and `base64`".into());
                }
                if let Some(b) = base64 {
                    base64::engine::general_purpose::STANDARD
                        .decode(b)
                        .map_err(|e| format!("`base64` is not valid base64: {e}"))?;
                }
                if let Some(m) = mode {
                    parse_mode(m)?;
                }
                Ok(())
            }
            Self::Exec { argv, .. } | Self::Launch { argv } if argv.is_empty() => {
                Err("`argv` is empty".into())
            }
            Self::Kill { name, .. } if name.is_empty() || name.contains('/') => Err(format!(
                "kill: '{name}' is not a process name (give the name `pgrep -x` matches)"
            )),
            // The kernel keeps the first 15 bytes of a process's name; a longer one never
            // matches.
            Self::Kill { name, .. } if name.len() > 15 => Err(format!(
                "kill: '{name}' is longer than the 15 bytes the kernel keeps of a process name: \
                 write '{}'",
                name.chars()
                    .scan(0, |n, c| {
                        *n += c.len_utf8();
                        (*n <= 15).then_some(c)
                    })
                    .collect::<String>()
            )),
            Self::PutAsset { asset, .. }
                if asset.is_empty()
                    || Path::new(asset).is_absolute()
                    || asset.split('/').any(|c| c == "..") =>
            {
                Err(format!(
                    "put_asset: '{asset}' is not a path inside the asset cache (relative, without ..)"
                ))
            }
            _ => match self.input() {
                Some(action) => action.map(drop),
                None => self.android().transpose().map(drop),
            },
        }
    }

    /// The input action of an input step (press, click, type, scroll).
    fn input(&self) -> Option<Result<pincer_shared::Action, String>> {
        use pincer_shared::Action;
        use pincer_shared::action::{MouseButton, Point};
        Some(match self {
            Self::Press { keys } => match pincer_shared::key::parse_combo(keys) {
                Ok(mut k) if k.len() == 1 => Ok(Action::KeyPress { key: k.remove(0) }),
                Ok(k) => Ok(Action::Hotkey { keys: k }),
                Err(e) => Err(format!("press: {e}")),
            },
            Self::Click {
                x,
                y,
                button,
                count,
            } => {
                let button = match button.as_deref() {
                    None | Some("left") => MouseButton::Left,
                    Some("middle") => MouseButton::Middle,
                    Some("right") => MouseButton::Right,
                    Some(other) => {
                        return Some(Err(format!(
                            "click: '{other}' is no button (left, middle or right)"
                        )));
                    }
                };
                match count.unwrap_or(1) {
                    n @ 1..=3 => Ok(Action::Click {
                        at: Some(Point::new(*x, *y)),
                        button,
                        count: n,
                    }),
                    n => Err(format!("click: {n} clicks (give 1 to 3)")),
                }
            }
            Self::TypeText { text } => Ok(Action::TypeText { text: text.clone() }),
            Self::Scroll { dy } => Ok(Action::Scroll {
                at: None,
                dx: 0,
                dy: *dy,
            }),
            _ => return None,
        })
    }

    /// Runs the step on an environment; `assets` is the run's asset cache, if it has one.
    pub async fn run(&self, env: &Environment, assets: Option<&Path>) -> Result<(), StepError> {
        self.validate().map_err(StepError::Invalid)?;
        match self {
            Self::WriteFile {
                path,
                content,
                base64,
                mode,
            } => {
                let bytes = match (content, base64) {
                    (Some(c), _) => c.as_bytes().to_vec(),
                    (None, Some(b)) => base64::engine::general_purpose::STANDARD
                        .decode(b)
                        .map_err(|e| StepError::Invalid(e.to_string()))?,
                    (None, None) => Vec::new(),
                };
                let mode = mode
                    .as_deref()
                    .map(parse_mode)
                    .transpose()
                    .map_err(StepError::Invalid)?;
                env.write_file(path, &bytes, mode.unwrap_or(0o644)).await?;
            }
            Self::Remove { path } => env.remove(path).await?,
            Self::MakeDir { path } => env.make_dir(path).await?,
            Self::Exec {
                argv,
                timeout_ms,
                check,
            } => {
                let mut req = ExecRequest::new(argv.clone());
                req.timeout_ms = timeout_ms.unwrap_or(60_000);
                let out = env.exec(req).await?;
                if *check && !out.status.success() {
                    let err = String::from_utf8_lossy(&out.stderr);
                    let tail: String = err
                        .chars()
                        .rev()
                        .take(300)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    return Err(StepError::Failed {
                        argv: argv.join(" "),
                        status: out.status.to_string(),
                        stderr: tail.trim().to_owned(),
                    });
                }
            }
            Self::Kill { name, timeout_ms } => {
                kill(
                    env,
                    name,
                    Duration::from_millis(timeout_ms.unwrap_or(5_000)),
                )
                .await?;
            }
            Self::Launch { argv } => {
                env.launch(argv.clone(), Vec::new()).await?;
            }
            Self::WaitWindow {
                title_contains,
                timeout_ms,
            } => {
                wait_window(
                    env,
                    title_contains,
                    Duration::from_millis(timeout_ms.unwrap_or(30_000)),
                )
                .await?;
            }
            Self::Window {
                title_contains,
                op,
                by_class,
                optional,
            } => {
                // Apps replace windows as they start (LibreOffice's first window gives way
                // to the document's, under the same title): a window that is gone by the
                // time the operation reaches it is looked up again, within the wait.
                let timeout = Duration::from_secs(if *optional { 2 } else { 10 });
                let start = Instant::now();
                let by = if *by_class {
                    Match::Class(title_contains)
                } else {
                    Match::Title(title_contains)
                };
                loop {
                    let left = timeout.saturating_sub(start.elapsed());
                    let w = match find_window(env, &by, left).await {
                        Err(StepError::NoWindow { .. }) if *optional => break,
                        found => found?,
                    };
                    let req = Request::Setup(Setup::Window {
                        id: w.id,
                        op: (*op).into(),
                    });
                    match env.call(&req, None, env.deadlines().call).await {
                        Err(e)
                            if matches!(e.wire(), Some(WireError::NotFound { .. }))
                                && start.elapsed() < timeout =>
                        {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        // The guest could not do it to that window: tolerated like a
                        // missing one. A failing connection is never tolerated.
                        Err(e) if *optional && e.wire().is_some() => break,
                        done => break done.map(drop)?,
                    }
                }
            }
            Self::Sleep { ms } => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Self::SetClipboard { text } => env.set_clipboard(text).await?,
            Self::Press { .. }
            | Self::Click { .. }
            | Self::TypeText { .. }
            | Self::Scroll { .. } => {
                if let Some(action) = self.input() {
                    env.act(action.map_err(StepError::Invalid)?).await?;
                }
            }
            Self::PutAsset { asset, path } => {
                let Some(root) = assets else {
                    return Err(StepError::Invalid(format!(
                        "put_asset {asset}: this run has no asset cache (give --assets DIR)"
                    )));
                };
                let from = root.join(asset);
                let bytes = std::fs::read(&from).map_err(|e| {
                    StepError::Invalid(format!(
                        "put_asset: {} cannot be read ({e}): fetch the task's files first",
                        from.display()
                    ))
                })?;
                env.write_file(path, &bytes, 0o644).await?;
            }
            Self::StartApp { .. }
            | Self::StopApp { .. }
            | Self::ClearAppData { .. }
            | Self::PutSetting { .. }
            | Self::InsertRow { .. }
            | Self::DeleteRows { .. } => {
                if let Some(setup) = self.android().transpose().map_err(StepError::Invalid)? {
                    let req = Request::Setup(Setup::Android(setup));
                    env.call(&req, None, env.deadlines().call).await?;
                }
            }
        }
        Ok(())
    }
}

/// File permission bits as task files and `pincer file put --mode` write them, in octal
/// with or without `0o` ("644", "0o600"), at most 0o7777.
pub fn parse_mode(m: &str) -> Result<u32, String> {
    u32::from_str_radix(m.trim_start_matches("0o"), 8)
        .ok()
        .filter(|v| *v <= 0o7777)
        .ok_or_else(|| format!("mode '{m}' is not octal permission bits such as \"644\""))
}

/// Signals every process named `name` in the agent's session (the session of the
/// desktop, so other desktops on the same machine are left alone) and waits until none is
/// left, escalating to SIGKILL after `grace`.
async fn kill(env: &Environment, name: &str, grace: Duration) -> Result<(), StepError> {
    let run = |argv: &[&str]| {
        let req = ExecRequest::new(
            argv.iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<String>>(),
        );
        async move { env.exec(req).await }
    };
    // pgrep and pkill take a pattern: the name is matched literally.
    let pattern = format!("^{}$", regex::escape(name));
    // Zombies are not counted: a dead process nobody has reaped yet is gone for our purpose.
    let alive = || async {
        let out = run(&["pgrep", "-s", "0", "-r", "R,S,D,T,t,I", &pattern]).await?;
        match out.status {
            ExitStatus::Exited(0) => Ok(true),
            ExitStatus::Exited(1) => Ok(false),
            other => Err(StepError::Failed {
                argv: format!("pgrep -s 0 {pattern}"),
                status: other.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            }),
        }
    };
    // Who they are, so that their windows can be waited for too.
    let listed = run(&["pgrep", "-s", "0", &pattern]).await?;
    let pids: Vec<u32> = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    run(&["pkill", "-s", "0", &pattern]).await?;
    let mut deadline = Instant::now() + grace;
    let mut killed = false;
    while alive().await? {
        if Instant::now() > deadline {
            if killed {
                return Err(StepError::Survived {
                    name: name.to_owned(),
                });
            }
            run(&["pkill", "-KILL", "-s", "0", &pattern]).await?;
            killed = true;
            deadline = Instant::now() + Duration::from_secs(2);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A dead client's windows stay listed until the X server and the window manager have
    // caught up with its death; a window waited for next must not be one of them (the
    // same app started again would otherwise be "found" at once, and its window gone when
    // the next step reaches for it). Single-instance apps also hand a new start to an
    // instance that is still registered, so the old one must be wholly gone.
    let until = Instant::now() + Duration::from_secs(5);
    while !pids.is_empty() && Instant::now() < until {
        match env.probe(Probe::Windows).await {
            Ok(ProbeReply::Windows(ws))
                if ws.iter().any(|w| w.pid.is_some_and(|p| pids.contains(&p))) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // No window of theirs, or no display to ask: nothing to wait for.
            _ => break,
        }
    }
    Ok(())
}

/// Polls the window list until a window's title contains `title`.
pub async fn wait_window(
    env: &Environment,
    title: &str,
    timeout: Duration,
) -> Result<WindowInfo, StepError> {
    find_window(env, &Match::Title(title), timeout).await
}

/// How a window step names its window.
enum Match<'a> {
    /// Part of the title.
    Title(&'a str),
    /// Part of `instance.class`, ignoring case.
    Class(&'a str),
}

impl Match<'_> {
    fn matches(&self, w: &WindowInfo) -> bool {
        match self {
            Self::Title(t) => w.title.contains(t),
            Self::Class(c) => format!(
                "{}.{}",
                w.instance.as_deref().unwrap_or(""),
                w.class.as_deref().unwrap_or("")
            )
            .to_lowercase()
            .contains(&c.to_lowercase()),
        }
    }
}

/// The topmost window `by` names, waiting up to `timeout` for one.
async fn find_window(
    env: &Environment,
    by: &Match<'_>,
    timeout: Duration,
) -> Result<WindowInfo, StepError> {
    let start = Instant::now();
    loop {
        if let ProbeReply::Windows(ws) = env.probe(Probe::Windows).await?
            && let Some(w) = ws.into_iter().rev().find(|w| by.matches(w))
        {
            return Ok(w);
        }
        if start.elapsed() > timeout {
            let (Match::Title(t) | Match::Class(t)) = by;
            return Err(StepError::NoWindow {
                title: (*t).to_owned(),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs steps in order, stopping at the first failure; `assets` is the run's asset cache.
pub async fn run_all(
    env: &Environment,
    steps: &[Step],
    assets: Option<&Path>,
    progress: &mut (dyn FnMut(&Step) + Send),
) -> Result<(), (usize, StepError)> {
    for (i, s) in steps.iter().enumerate() {
        progress(s);
        s.run(env, assets).await.map_err(|e| (i, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn android_steps_become_typed_setup_and_bad_ones_are_named() {
        let step = |v: serde_json::Value| serde_json::from_value::<Step>(v).unwrap();
        let insert = step(
            serde_json::json!({"do": "insert_row", "uri": "content://sms/inbox",
            "values": {"address": "5550142", "read": 0, "seen": true}}),
        );
        assert_eq!(
            insert.android().unwrap().unwrap(),
            AndroidSetup::ContentInsert {
                uri: "content://sms/inbox".into(),
                values: vec![
                    ("address".into(), ContentValue::Text("5550142".into())),
                    ("read".into(), ContentValue::Integer(0)),
                    ("seen".into(), ContentValue::Bool(true)),
                ],
            }
        );
        let delete = step(
            serde_json::json!({"do": "delete_rows", "uri": "content://sms/inbox", "where": "read=1"}),
        );
        assert!(matches!(
            delete.android().unwrap().unwrap(),
            AndroidSetup::ContentDelete { selection: Some(w), .. } if w == "read=1"
        ));
        for (bad, says) in [
            (
                serde_json::json!({"do": "put_setting", "namespace": "vendor", "key": "k", "value": "v"}),
                "use system, secure or global",
            ),
            (
                serde_json::json!({"do": "put_setting", "namespace": "secure", "key": "a b", "value": "v"}),
                "is not a key",
            ),
            (
                serde_json::json!({"do": "start_app", "component": "com.android.settings"}),
                "PACKAGE/ACTIVITY",
            ),
            (
                serde_json::json!({"do": "stop_app", "package": "rm -rf"}),
                "not a package",
            ),
            (
                serde_json::json!({"do": "insert_row", "uri": "content://sms", "values": {"body": 1.5}}),
                "a string, an integer or a boolean",
            ),
            (
                serde_json::json!({"do": "insert_row", "uri": "http://x", "values": {"a": "b"}}),
                "content:// URI",
            ),
            (
                serde_json::json!({"do": "insert_row", "uri": "content://sms", "values": {}}),
                "at least one value",
            ),
        ] {
            let e = step(bad.clone()).validate().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // Desktop steps have no Android request.
        assert!(
            step(serde_json::json!({"do": "sleep", "ms": 1}))
                .android()
                .is_none()
        );
        assert_eq!(
            step(serde_json::json!({"do": "clear_app_data", "package": "com.android.contacts"}))
                .describe(),
            "clear the data of com.android.contacts"
        );
    }

    #[test]
    fn steps_parse_and_validate() {
        let s: Step = serde_json::from_value(
            serde_json::json!({"do": "write_file", "path": "~/a", "content": "x", "mode": "600"}),
        )
        .unwrap();
        assert!(s.validate().is_ok());
        let bad: Step = serde_json::from_value(serde_json::json!({"do": "write_file", "path": "~/a", "content": "x", "base64": "eA=="})).unwrap();
        assert!(bad.validate().unwrap_err().contains("exactly one"));
        let bad: Step = serde_json::from_value(
            serde_json::json!({"do": "write_file", "path": "~/a", "base64": "%%%"}),
        )
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("base64"));
        let bad: Step = serde_json::from_value(
            serde_json::json!({"do": "write_file", "path": "~/a", "content": "", "mode": "999"}),
        )
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("octal"));
        let e: Step =
            serde_json::from_value(serde_json::json!({"do": "exec", "argv": ["true"]})).unwrap();
        assert!(matches!(e, Step::Exec { check: true, .. }));
        assert!(serde_json::from_value::<Step>(serde_json::json!({"do": "explode"})).is_err());
        assert_eq!(parse_mode("0o755"), Ok(0o755));
        let kill = |name: &str| Step::Kill {
            name: name.into(),
            timeout_ms: None,
        };
        assert!(kill("soffice.bin").validate().is_ok());
        let long = kill("gtk3-widget-factory").validate().unwrap_err();
        assert!(long.contains("write 'gtk3-widget-fac'"), "{long}");
        assert!(kill("/usr/bin/x").validate().is_err());
    }
}

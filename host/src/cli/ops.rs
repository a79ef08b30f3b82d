//! `pincer act`, `probe`, `exec`, `launch` and `file`.

use super::EnvArg;
use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use pincer::env::registry::Registry;
use pincer_shared::Action;
use pincer_shared::action::{Gesture, MouseButton, Point, SystemKey};
use pincer_shared::android::{AndroidAnswer, AndroidQuery, Namespace};
use pincer_shared::key::parse_combo;
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::setup::ExecRequest;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct ActArgs {
    #[command(flatten)]
    env: EnvArg,
    #[command(subcommand)]
    action: ActCmd,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Button {
    Left,
    Middle,
    Right,
}

impl From<Button> for MouseButton {
    fn from(b: Button) -> Self {
        match b {
            Button::Left => Self::Left,
            Button::Middle => Self::Middle,
            Button::Right => Self::Right,
        }
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ActCmd {
    /// Click at X Y.
    Click {
        x: i32,
        y: i32,
        #[arg(long, value_enum, default_value_t = Button::Left)]
        button: Button,
        /// 2 for a double click.
        #[arg(long, default_value_t = 1)]
        count: u8,
    },
    /// Move the pointer to X Y.
    Move { x: i32, y: i32 },
    /// Drag from X1 Y1 to X2 Y2.
    Drag {
        x1: i32,
        y1: i32,
        x2: i32,
        y2: i32,
        /// Duration of the movement in ms.
        #[arg(long, default_value_t = 200)]
        duration: u32,
    },
    /// Scroll DX DY wheel notches (positive DY scrolls down).
    Scroll {
        #[arg(allow_hyphen_values = true)]
        dx: i32,
        #[arg(allow_hyphen_values = true)]
        dy: i32,
        /// Move to X,Y first.
        #[arg(long, value_parser = parse_point)]
        at: Option<Point>,
    },
    /// Press a key or combination: enter, ctrl+s, alt+F4, ctrl+shift+t.
    Key { combo: String },
    /// Type text.
    Type { text: String },
    /// Tap X Y (touch screens).
    Tap { x: i32, y: i32 },
    /// Touch and hold X Y (touch screens).
    LongPress {
        x: i32,
        y: i32,
        /// How long to hold, ms.
        #[arg(long, default_value_t = 800)]
        duration: u32,
    },
    /// Swipe from X1 Y1 to X2 Y2 (touch screens).
    Swipe {
        x1: i32,
        y1: i32,
        x2: i32,
        y2: i32,
        /// Duration of the stroke, ms.
        #[arg(long, default_value_t = 300)]
        duration: u32,
    },
    /// Press a phone's system key: home, back, app-switch, enter, delete, volume-up,
    /// volume-down, power, menu, search.
    System {
        #[arg(value_enum)]
        key: SystemKeyArg,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SystemKeyArg {
    Home,
    Back,
    AppSwitch,
    Enter,
    Delete,
    VolumeUp,
    VolumeDown,
    Power,
    Menu,
    Search,
}

impl From<SystemKeyArg> for SystemKey {
    fn from(k: SystemKeyArg) -> Self {
        match k {
            SystemKeyArg::Home => Self::Home,
            SystemKeyArg::Back => Self::Back,
            SystemKeyArg::AppSwitch => Self::AppSwitch,
            SystemKeyArg::Enter => Self::Enter,
            SystemKeyArg::Delete => Self::Delete,
            SystemKeyArg::VolumeUp => Self::VolumeUp,
            SystemKeyArg::VolumeDown => Self::VolumeDown,
            SystemKeyArg::Power => Self::Power,
            SystemKeyArg::Menu => Self::Menu,
            SystemKeyArg::Search => Self::Search,
        }
    }
}

fn parse_point(s: &str) -> Result<Point, String> {
    let (x, y) = s
        .split_once(',')
        .ok_or_else(|| format!("'{s}' is not a point: write X,Y"))?;
    Ok(Point::new(
        x.trim().parse().map_err(|_| format!("bad x in '{s}'"))?,
        y.trim().parse().map_err(|_| format!("bad y in '{s}'"))?,
    ))
}

pub(crate) async fn act(a: ActArgs, reg: &Registry) -> anyhow::Result<()> {
    let action = match a.action {
        ActCmd::Click {
            x,
            y,
            button,
            count,
        } => Action::Click {
            at: Some(Point::new(x, y)),
            button: button.into(),
            count,
        },
        ActCmd::Move { x, y } => Action::MouseMove {
            to: Point::new(x, y),
        },
        ActCmd::Drag {
            x1,
            y1,
            x2,
            y2,
            duration,
        } => Action::Drag {
            from: Point::new(x1, y1),
            to: Point::new(x2, y2),
            button: MouseButton::Left,
            duration_ms: duration,
        },
        ActCmd::Scroll { dx, dy, at } => Action::Scroll { at, dx, dy },
        ActCmd::Key { combo } => {
            let keys = parse_combo(&combo)?;
            if keys.len() == 1 {
                Action::KeyPress { key: keys[0] }
            } else {
                Action::Hotkey { keys }
            }
        }
        ActCmd::Type { text } => Action::TypeText { text },
        ActCmd::Tap { x, y } => Action::Touch(Gesture::Tap {
            at: Point::new(x, y),
        }),
        ActCmd::LongPress { x, y, duration } => Action::Touch(Gesture::LongPress {
            at: Point::new(x, y),
            duration_ms: duration,
        }),
        ActCmd::Swipe {
            x1,
            y1,
            x2,
            y2,
            duration,
        } => Action::Touch(Gesture::Swipe {
            from: Point::new(x1, y1),
            to: Point::new(x2, y2),
            duration_ms: duration,
        }),
        ActCmd::System { key } => Action::SystemKey(key.into()),
    };
    let env = a.env.connect(reg).await?;
    let t = std::time::Instant::now();
    env.act(action).await?;
    println!("done in {:.2} ms", t.elapsed().as_secs_f64() * 1000.0);
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(crate) struct ProbeArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Print the raw reply as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    probe: ProbeCmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ProbeCmd {
    /// Print a file's content.
    File {
        path: String,
        /// Most bytes.
        #[arg(long, default_value_t = 1024 * 1024)]
        max: u64,
    },
    /// Metadata of a path.
    Stat { path: String },
    /// Entries of a directory.
    Ls { path: String },
    /// The focused window.
    Window,
    /// Running processes.
    Processes,
    /// Clipboard text.
    Clipboard,
    /// A phone's state (Android environments).
    #[command(subcommand)]
    Android(AndroidProbeCmd),
}

#[derive(Debug, Subcommand)]
pub(crate) enum AndroidProbeCmd {
    /// A setting (`settings get`).
    Setting {
        /// system, secure or global.
        namespace: Namespace,
        key: String,
    },
    /// Rows of a content provider (`content query`).
    Content {
        /// `content://sms/inbox`.
        uri: String,
        /// A column to read (repeat; all when none).
        #[arg(long = "column", value_name = "COLUMN")]
        columns: Vec<String>,
        /// An SQL WHERE clause.
        #[arg(long = "where", value_name = "CLAUSE")]
        selection: Option<String>,
        /// An SQL ORDER BY.
        #[arg(long, value_name = "ORDER")]
        sort: Option<String>,
    },
    /// The app in front and its activity.
    Foreground,
    /// Installed packages and their version codes.
    Packages,
    /// A system property (`getprop`).
    Property { name: String },
    /// Charge and charger.
    Battery,
    /// Wi-Fi and airplane mode.
    Radios,
    /// Screen size, density and rotation.
    Display,
}

impl From<AndroidProbeCmd> for AndroidQuery {
    fn from(c: AndroidProbeCmd) -> Self {
        match c {
            AndroidProbeCmd::Setting { namespace, key } => Self::Setting { namespace, key },
            AndroidProbeCmd::Content {
                uri,
                columns,
                selection,
                sort,
            } => Self::Content {
                uri,
                projection: columns,
                selection,
                sort,
            },
            AndroidProbeCmd::Foreground => Self::Foreground,
            AndroidProbeCmd::Packages => Self::Packages,
            AndroidProbeCmd::Property { name } => Self::Property { name },
            AndroidProbeCmd::Battery => Self::Battery,
            AndroidProbeCmd::Radios => Self::Radios,
            AndroidProbeCmd::Display => Self::Display,
        }
    }
}

pub(crate) async fn probe(a: ProbeArgs, reg: &Registry) -> anyhow::Result<()> {
    let p = match a.probe {
        ProbeCmd::File { path, max } => Probe::ReadFile { path, max_len: max },
        ProbeCmd::Stat { path } => Probe::Stat { path },
        ProbeCmd::Ls { path } => Probe::ListDir { path },
        ProbeCmd::Window => Probe::ActiveWindow,
        ProbeCmd::Processes => Probe::Processes,
        ProbeCmd::Clipboard => Probe::Clipboard,
        ProbeCmd::Android(q) => Probe::Android(q.into()),
    };
    let path = match &p {
        Probe::ReadFile { path, .. } | Probe::ListDir { path } => path.clone(),
        _ => String::new(),
    };
    let env = a.env.connect(reg).await?;
    let reply = env.probe(p).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reply_json(&reply))?);
        return Ok(());
    }
    match reply {
        ProbeReply::File(None) | ProbeReply::Dir(None) => {
            bail!("env '{}': {path}: no such file or directory", env.name())
        }
        ProbeReply::File(Some(f)) => {
            std::io::stdout().write_all(&f.bytes)?;
            if (f.bytes.len() as u64) < f.total_size {
                eprintln!("(first {} of {} bytes)", f.bytes.len(), f.total_size);
            }
        }
        ProbeReply::Stat(s) if !s.exists => println!("{}: does not exist", s.path),
        ProbeReply::Stat(s) => println!(
            "{}: {:?}, {} bytes, mode {:o}, modified {} ms after the epoch",
            s.path,
            s.kind.context("kind")?,
            s.size,
            s.mode,
            s.modified_ms
        ),
        ProbeReply::Dir(Some(entries)) => {
            for e in entries {
                let slash = if e.kind == pincer_shared::probe::FileKind::Dir {
                    "/"
                } else {
                    ""
                };
                println!("{:>12}  {}{slash}", e.size, e.name);
            }
        }
        ProbeReply::ActiveWindow(None) => println!("no window has focus"),
        ProbeReply::ActiveWindow(Some(w)) => {
            println!("title    {}", w.title);
            println!("pid      {}", w.pid.map_or("?".into(), |p| p.to_string()));
            println!("process  {}", w.process_name.as_deref().unwrap_or("?"));
            println!(
                "class    {} ({})",
                w.class.as_deref().unwrap_or("?"),
                w.instance.as_deref().unwrap_or("?")
            );
            if let Some(b) = w.bounds {
                println!("bounds   {},{} {}x{}", b.x, b.y, b.width, b.height);
            }
            println!("id       0x{:x}", w.id);
        }
        ProbeReply::Processes(ps) => {
            println!(
                "{:>7} {:>7} {:>6}  {:<16} command",
                "pid", "ppid", "uid", "name"
            );
            for p in ps {
                println!(
                    "{:>7} {:>7} {:>6}  {:<16} {}",
                    p.pid,
                    p.ppid,
                    p.uid,
                    p.name,
                    p.cmdline.join(" ")
                );
            }
        }
        ProbeReply::Clipboard(None) => println!("(the clipboard holds no text)"),
        ProbeReply::Clipboard(Some(t)) => println!("{t}"),
        ProbeReply::Android(a) => print_android(&a),
        other => println!("{other:?}"),
    }
    Ok(())
}

fn print_android(a: &AndroidAnswer) {
    match a {
        AndroidAnswer::Setting(None) => println!("null (not set)"),
        AndroidAnswer::Setting(Some(v)) | AndroidAnswer::Property(v) => println!("{v}"),
        AndroidAnswer::Rows(rows) if rows.is_empty() => println!("no rows"),
        AndroidAnswer::Rows(rows) => {
            for (i, row) in rows.iter().enumerate() {
                let cols: Vec<String> = row
                    .iter()
                    .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("NULL")))
                    .collect();
                println!("Row: {i} {}", cols.join(", "));
            }
        }
        AndroidAnswer::Foreground(None) => println!("no app is in front"),
        AndroidAnswer::Foreground(Some(f)) => match &f.activity {
            Some(a) => println!("{}/{a}", f.package),
            None => println!("{}", f.package),
        },
        AndroidAnswer::Packages(ps) => {
            for p in ps {
                match p.version_code {
                    Some(v) => println!("{} {v}", p.name),
                    None => println!("{}", p.name),
                }
            }
        }
        AndroidAnswer::Battery(b) => println!(
            "level {}/{}, {}",
            b.level,
            b.scale,
            if b.plugged { "charging" } else { "on battery" }
        ),
        AndroidAnswer::Radios(r) => println!(
            "wifi {}, airplane mode {}",
            if r.wifi { "on" } else { "off" },
            if r.airplane { "on" } else { "off" }
        ),
        AndroidAnswer::Display(d) => println!(
            "{}x{} at {} dpi, rotation {}",
            d.width, d.height, d.density, d.rotation
        ),
    }
}

fn reply_json(r: &ProbeReply) -> serde_json::Value {
    match serde_json::to_value(r) {
        Ok(v) => v,
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Kill the program after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Program and arguments.
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

pub(crate) async fn exec(a: ExecArgs, reg: &Registry) -> anyhow::Result<()> {
    let env = a.env.connect(reg).await?;
    let mut req = ExecRequest::new(a.argv);
    req.timeout_ms = a.timeout.saturating_mul(1000);
    req.max_output = 16 * 1024 * 1024;
    let out = env.exec(req).await?;
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    if out.truncated {
        eprintln!("(output truncated)");
    }
    if !out.status.success() {
        bail!(
            "the program ended with {} after {} ms",
            out.status,
            out.elapsed_ms
        );
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(crate) struct LaunchArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Program and arguments.
    #[arg(last = true, required = true)]
    argv: Vec<String>,
}

pub(crate) async fn launch(a: LaunchArgs, reg: &Registry) -> anyhow::Result<()> {
    let env = a.env.connect(reg).await?;
    let pid = env.launch(a.argv.clone(), Vec::new()).await?;
    println!("started {} (pid {pid})", a.argv[0]);
    Ok(())
}

#[derive(Debug, Subcommand)]
pub(crate) enum FileCmd {
    /// Upload a local file to the guest.
    Put {
        #[command(flatten)]
        env: EnvArg,
        local: PathBuf,
        remote: String,
        /// Permission bits.
        #[arg(long, default_value = "644", value_parser = pincer::task::steps::parse_mode)]
        mode: u32,
    },
    /// Download a file from the guest.
    Get {
        #[command(flatten)]
        env: EnvArg,
        remote: String,
        local: PathBuf,
    },
}

pub(crate) async fn file(c: FileCmd, reg: &Registry) -> anyhow::Result<()> {
    match c {
        FileCmd::Put {
            env,
            local,
            remote,
            mode,
        } => {
            let bytes =
                std::fs::read(&local).with_context(|| format!("reading {}", local.display()))?;
            let env = env.connect(reg).await?;
            let t = std::time::Instant::now();
            env.write_file(&remote, &bytes, mode).await?;
            println!(
                "{} bytes written to {remote} in {:.1} ms",
                bytes.len(),
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
        FileCmd::Get { env, remote, local } => {
            let env = env.connect(reg).await?;
            let t = std::time::Instant::now();
            let create = async || {
                tokio::fs::File::create(&local)
                    .await
                    .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", local.display())))
            };
            let (_, len) = env.read_file_to(&remote, create).await?;
            println!(
                "{len} bytes read from {remote} in {:.1} ms",
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
    }
    Ok(())
}

//! The Android platform under the guest core: the screen through `screencap`, input
//! through a virtual touchscreen and keyboard (`/dev/uinput`) or `input` commands, the UI
//! tree through `uiautomator dump`, the app in front as the "window", settings through
//! `settings`, and the device's own state and setup (content providers, packages,
//! properties, battery, radios, apps) through Android's commands. The clipboard capability
//! is lacking: since Android 10 only the app in front or the keyboard may read the
//! clipboard, not the `shell` user (which may write it: typing text `input text` cannot
//! type goes through it, see [`crate::clip`]).

use crate::commands::{run, run_blocking};
use crate::input::{InputRoute, PhoneInput};
use crate::{device, hierarchy, screencap};
use pincer_guest_core::encode::{self, Frame, FrameEncoder};
use pincer_guest_core::platform::{self, Lacking, Platform};
use pincer_shared::WireError;
use pincer_shared::android::{
    AndroidAnswer, AndroidQuery, AndroidSetup, Battery, ContentValue, Display, ForegroundApp,
    Package, Radios,
};
use pincer_shared::message::capability;
use pincer_shared::observe::{
    Rect, ScreenInfo, ScreenshotMeta, ScreenshotRequest, TreeRequest, TreeScope,
};
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use pincer_shared::tree::{UiNode, UiTree};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long one of Android's commands may take.
const COMMAND_TIME: Duration = Duration::from_secs(20);
/// `uiautomator dump` waits for the screen to be idle, up to about 10 s.
const DUMP_TIME: Duration = Duration::from_secs(30);

/// The Android platform.
#[derive(Debug, Clone)]
pub(crate) struct Android {
    /// Where input goes.
    pub(crate) input: InputRoute,
    /// A directory the shell user may write (uiautomator's dumps and the clipboard helper
    /// go there).
    pub(crate) work_dir: PathBuf,
}

impl Platform for Android {
    type Input = PhoneInput;
    type Screen = PhoneScreen;
    type Damage = Lacking;
    type InputLog = Lacking;
    type Windows = Apps;
    type Clipboard = Lacking;
    type Accessibility = Uiautomator;
    type Settings = PhoneSettings;
    type Device = PhoneDevice;

    const NAME: pincer_shared::Platform = pincer_shared::Platform::Android;
    const CAPABILITIES: &'static [&'static str] = &[
        capability::TOUCH,
        capability::SCREENSHOT,
        capability::UI_TREE,
        capability::PROBE,
        capability::WINDOW,
    ];

    fn os(&self) -> String {
        // Asked once, as the guest starts: three quick property reads.
        let prop = |name: &str| {
            std::process::Command::new("getprop")
                .arg(name)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        let (release, sdk, model) = (
            prop("ro.build.version.release"),
            prop("ro.build.version.sdk"),
            prop("ro.product.model"),
        );
        if release.is_empty() {
            "Android".into()
        } else {
            format!("Android {release} (API {sdk}) on {model}")
        }
    }

    fn input(&self) -> PhoneInput {
        PhoneInput::new(self.input.clone(), self.work_dir.clone())
    }

    fn screen(&self) -> PhoneScreen {
        PhoneScreen
    }

    fn damage(&self) -> Lacking {
        Lacking
    }

    fn input_log(&self) -> Lacking {
        Lacking
    }

    fn windows(&self) -> Apps {
        Apps
    }

    fn clipboard(&self) -> Lacking {
        Lacking
    }

    fn accessibility(&self) -> Uiautomator {
        Uiautomator {
            dump: self.work_dir.join("window_dump.xml"),
        }
    }

    fn settings(&self) -> PhoneSettings {
        PhoneSettings
    }

    fn device(&self) -> PhoneDevice {
        PhoneDevice
    }
}

/// The screen: `wm size` for its geometry, `screencap` for its pixels.
#[derive(Debug)]
pub(crate) struct PhoneScreen;

impl platform::Screen for PhoneScreen {
    fn info(&mut self) -> Result<ScreenInfo, WireError> {
        let size = run_blocking(&["wm", "size"], COMMAND_TIME)?;
        let (width, height) = device::wm_size(&size.text()).map_err(io)?;
        Ok(ScreenInfo {
            width,
            height,
            monitors: vec![Rect::new(0, 0, width, height)],
            capture: "screencap".into(),
        })
    }

    fn capture(
        &mut self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        let start = Instant::now();
        let raw = run_blocking(&["screencap"], COMMAND_TIME)?;
        let cap = screencap::parse(&raw.stdout).map_err(io)?;
        let grabbed_in = start.elapsed();
        let source = encode::source_rect(req.region, cap.width, cap.height)?;
        encode::check_output(source, req.max_size)?;
        let stride = cap.width as usize * 4;
        let offset = source.y as usize * stride + source.x as usize * 4;
        let frame = Frame::new(
            &cap.pixels[offset..],
            source.width,
            source.height,
            stride,
            cap.format,
        )?;
        encoder.screenshot(frame, source, grabbed_in, req)
    }
}

/// Turns a reader's error (which names its command) into the wire's.
fn io(e: impl std::fmt::Display) -> WireError {
    WireError::Io {
        message: e.to_string(),
    }
}

/// The app in front, read the way each Android version allows.
async fn foreground() -> Result<Option<ForegroundApp>, WireError> {
    let activities = run(&["dumpsys", "activity", "activities"], COMMAND_TIME).await?;
    let text = activities.text();
    device::check_dump("dumpsys activity", &text).map_err(io)?;
    let found = match device::resumed_activity(&text) {
        Some(f) => Some(f),
        None => {
            let window = run(&["dumpsys", "window", "displays"], COMMAND_TIME).await?;
            device::focused_app(&window.text())
        }
    };
    Ok(found.map(|f| ForegroundApp {
        package: f.package,
        activity: f.activity,
    }))
}

/// A phone's "windows": the app in front.
#[derive(Debug)]
pub(crate) struct Apps;

impl platform::Windows for Apps {
    fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        let handle = tokio::runtime::Handle::try_current().map_err(io)?;
        Ok(handle.block_on(foreground())?.map(|f| WindowInfo {
            id: 1,
            title: match &f.activity {
                Some(a) => format!("{}/{a}", f.package),
                None => f.package.clone(),
            },
            pid: None,
            process_name: Some(f.package.clone()),
            class: f.activity,
            instance: Some(f.package),
            bounds: None,
        }))
    }

    fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        Ok(self.active()?.into_iter().collect())
    }

    fn apply(&mut self, _: u64, _: WindowOp) -> Result<(), WireError> {
        Err(WireError::Unsupported {
            what: "window operations: a phone shows one app at a time; start or stop apps with Android setup steps".into(),
        })
    }
}

/// The UI tree through `uiautomator dump`, into a file of the shim's own: a failed dump
/// writes none, so an old one is never read as the current screen.
#[derive(Debug)]
pub(crate) struct Uiautomator {
    dump: PathBuf,
}

/// Keeps only the apps of `packages` under the root (the tree of one app).
fn scoped(mut tree: UiTree, keep: &dyn Fn(&UiNode) -> bool) -> UiTree {
    tree.root.children.retain(|c| keep(c));
    tree.node_count = tree.root.count() as u32;
    tree
}

impl platform::Accessibility for Uiautomator {
    async fn tree(&mut self, req: &TreeRequest, _: Option<u32>) -> Result<UiTree, WireError> {
        let start = Instant::now();
        let _ = std::fs::remove_file(&self.dump);
        let path = self.dump.display().to_string();
        let out = run(&["uiautomator", "dump", &path], DUMP_TIME).await?;
        let said = out.text();
        let xml = match std::fs::read_to_string(&self.dump) {
            Ok(x) if said.contains("dumped to") => x,
            // uiautomator reports its failures on its output with status 0.
            _ => {
                return Err(WireError::Io {
                    message: format!(
                        "uiautomator dump: {}",
                        format!("{said} {}", out.err()).trim()
                    ),
                });
            }
        };
        let mut tree = hierarchy::parse(&xml).map_err(io)?;
        let package_of = |n: &UiNode| {
            n.attributes
                .get("package")
                .cloned()
                .or_else(|| {
                    n.children
                        .first()
                        .and_then(|c| c.attributes.get("package").cloned())
                })
                .unwrap_or_default()
        };
        tree = match &req.scope {
            TreeScope::Desktop => tree,
            TreeScope::App(name) => {
                let want = name.to_lowercase();
                scoped(tree, &|n| package_of(n).to_lowercase().contains(&want))
            }
            TreeScope::ActiveApp => match foreground().await? {
                Some(f) => scoped(tree, &|n| package_of(n) == f.package),
                None => tree,
            },
        };
        tree.walk_us = start.elapsed().as_micros() as u64;
        Ok(tree)
    }
}

/// `settings get`: the schema is the namespace (`system`, `secure`, `global`).
#[derive(Debug)]
pub(crate) struct PhoneSettings;

impl platform::Settings for PhoneSettings {
    async fn get(&self, schema: &str, key: &str) -> Result<Option<String>, WireError> {
        let namespace: pincer_shared::android::Namespace = schema
            .parse()
            .map_err(|message| WireError::InvalidArgument { message })?;
        query_setting(namespace, key).await
    }
}

/// `settings get NAMESPACE KEY`, for the settings probe and the typed query alike: the key
/// is checked here, as the query's is, so that no path hands `settings` an unchecked one.
async fn query_setting(
    namespace: pincer_shared::android::Namespace,
    key: &str,
) -> Result<Option<String>, WireError> {
    pincer_shared::android::setting_key(key)
        .map_err(|message| WireError::InvalidArgument { message })?;
    let out = run(&["settings", "get", namespace.as_str(), key], COMMAND_TIME).await?;
    Ok(device::setting(&out.text()))
}

/// Android's own state and setup.
#[derive(Debug)]
pub(crate) struct PhoneDevice;

impl platform::Device for PhoneDevice {
    async fn query(&self, q: &AndroidQuery) -> Result<AndroidAnswer, WireError> {
        Ok(match q {
            AndroidQuery::Setting { namespace, key } => {
                AndroidAnswer::Setting(query_setting(*namespace, key).await?)
            }
            AndroidQuery::Content {
                uri,
                projection,
                selection,
                sort,
            } => {
                let joined = projection.join(":");
                let mut argv = vec!["content", "query", "--uri", uri.as_str()];
                if !projection.is_empty() {
                    argv.extend(["--projection", joined.as_str()]);
                }
                if let Some(w) = selection {
                    argv.extend(["--where", w.as_str()]);
                }
                if let Some(s) = sort {
                    argv.extend(["--sort", s.as_str()]);
                }
                let out = run(&argv, COMMAND_TIME).await?;
                AndroidAnswer::Rows(
                    device::content_rows(&out.text(), &out.err(), projection).map_err(io)?,
                )
            }
            AndroidQuery::Foreground => AndroidAnswer::Foreground(foreground().await?),
            AndroidQuery::Packages => {
                // `--show-versioncode` came with Android 9; older ones list names only.
                let out = match run(
                    &["pm", "list", "packages", "--show-versioncode"],
                    COMMAND_TIME,
                )
                .await
                {
                    Ok(o) => o,
                    Err(_) => run(&["pm", "list", "packages"], COMMAND_TIME).await?,
                };
                AndroidAnswer::Packages(
                    device::packages(&out.text())
                        .into_iter()
                        .map(|p| Package {
                            name: p.name,
                            version_code: p.version_code,
                        })
                        .collect(),
                )
            }
            AndroidQuery::Property { name } => {
                let out = run(&["getprop", name.as_str()], COMMAND_TIME).await?;
                AndroidAnswer::Property(out.text().trim_end_matches('\n').to_owned())
            }
            AndroidQuery::Battery => {
                let out = run(&["dumpsys", "battery"], COMMAND_TIME).await?;
                let b = device::battery(&out.text()).map_err(io)?;
                AndroidAnswer::Battery(Battery {
                    level: b.level,
                    scale: b.scale,
                    plugged: b.plugged,
                })
            }
            AndroidQuery::Display => {
                let size = run(&["wm", "size"], COMMAND_TIME).await?;
                let density = run(&["wm", "density"], COMMAND_TIME).await?;
                let input = run(&["dumpsys", "input"], COMMAND_TIME).await?;
                let (width, height) = device::wm_size(&size.text()).map_err(io)?;
                AndroidAnswer::Display(Display {
                    width,
                    height,
                    density: device::wm_density(&density.text()).map_err(io)?,
                    rotation: device::rotation(&input.text()),
                })
            }
            AndroidQuery::Radios => {
                use pincer_shared::android::Namespace::Global;
                let on = |v: Option<String>| v.is_some_and(|v| v.trim() == "1");
                AndroidAnswer::Radios(Radios {
                    wifi: on(query_setting(Global, "wifi_on").await?),
                    airplane: on(query_setting(Global, "airplane_mode_on").await?),
                })
            }
        })
    }

    async fn setup(&self, step: &AndroidSetup) -> Result<(), WireError> {
        match step {
            AndroidSetup::StartActivity { component } => {
                let out = run(
                    &["am", "start", "-W", "-n", component.as_str()],
                    COMMAND_TIME,
                )
                .await?;
                // `am` reports a failed start on its output with status 0.
                let text = out.text();
                if let Some(line) = text.lines().find(|l| l.starts_with("Error")) {
                    return Err(WireError::Io {
                        message: format!("am start -n {component}: {line}"),
                    });
                }
            }
            AndroidSetup::ForceStop { package } => {
                run(&["am", "force-stop", package.as_str()], COMMAND_TIME).await?;
            }
            AndroidSetup::ClearData { package } => {
                let out = run(&["pm", "clear", package.as_str()], COMMAND_TIME).await?;
                if !out.text().contains("Success") {
                    return Err(WireError::Io {
                        message: format!("pm clear {package}: {}", out.text().trim()),
                    });
                }
            }
            AndroidSetup::PutSetting {
                namespace,
                key,
                value,
            } => {
                run(
                    &[
                        "settings",
                        "put",
                        namespace.as_str(),
                        key.as_str(),
                        value.as_str(),
                    ],
                    COMMAND_TIME,
                )
                .await?;
            }
            AndroidSetup::ContentInsert { uri, values } => {
                let binds: Vec<String> = values
                    .iter()
                    .map(|(col, v)| match v {
                        ContentValue::Text(t) => format!("{col}:s:{t}"),
                        ContentValue::Integer(i) => format!("{col}:l:{i}"),
                        ContentValue::Bool(b) => format!("{col}:b:{b}"),
                    })
                    .collect();
                let mut argv = vec!["content", "insert", "--uri", uri.as_str()];
                for b in &binds {
                    argv.extend(["--bind", b.as_str()]);
                }
                let out = run(&argv, COMMAND_TIME).await?;
                content_failed("insert", &out.err())?;
            }
            AndroidSetup::ContentDelete { uri, selection } => {
                let mut argv = vec!["content", "delete", "--uri", uri.as_str()];
                if let Some(w) = selection {
                    argv.extend(["--where", w.as_str()]);
                }
                let out = run(&argv, COMMAND_TIME).await?;
                content_failed("delete", &out.err())?;
            }
        }
        Ok(())
    }
}

/// `content` reports provider errors on stderr with status 0.
fn content_failed(what: &str, stderr: &str) -> Result<(), WireError> {
    let err = stderr.trim();
    if err.contains("Error") || err.contains("Exception") {
        Err(WireError::Io {
            message: format!("content {what}: {}", err.lines().next().unwrap_or(err)),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_guest_core::confine::{Confinement, PincerPlaces, Policy};
    use pincer_guest_core::{Config, Guest, Reply, RequestBody};
    use pincer_shared::identity::Token;
    use pincer_shared::tool::{Sandbox, ToolCall, ToolSpec};
    use pincer_shared::{Request, Response, WireError};
    use std::path::Path;
    use std::sync::Arc;

    /// The settings probe checks its key as the typed query does: a key with a space, a
    /// shell metacharacter or a leading '-' is refused before `settings` runs (this test
    /// has no `settings` on `PATH`: one that ran would be `Unsupported`).
    #[tokio::test]
    async fn the_settings_probe_refuses_a_bad_key_before_settings_runs() {
        for key in ["a b", "x;reboot", "$(id)", "--user", "-x", ""] {
            let got = platform::Settings::get(&PhoneSettings, "system", key).await;
            assert!(
                matches!(&got, Err(WireError::InvalidArgument { message }) if message.contains("setting")),
                "{key:?}: {got:?}"
            );
        }
        let got = platform::Settings::get(&PhoneSettings, "vendor", "x").await;
        assert!(
            matches!(&got, Err(WireError::InvalidArgument { message }) if message.contains("namespace")),
            "{got:?}"
        );
    }

    /// A phone has no sandbox for API tools: the shim answers them `Unsupported` even when
    /// started with `--allow-tools`, and runs nothing.
    #[tokio::test]
    async fn api_tools_are_unsupported_on_phones() {
        let nowhere = Path::new("/nonexistent");
        let policy = Policy {
            home: nowhere.into(),
            state_dir: nowhere.into(),
            token_file: nowhere.join("token"),
            others: PincerPlaces::default(),
            read_roots: None,
            read_env: Vec::new(),
        };
        let config = Config {
            name: "phone".into(),
            token: Token::generate(),
            read_only: false,
            allow_tools: true,
            confinement: Arc::new(Confinement::new(&policy).unwrap()),
            process_session: None,
        };
        let platform = Android {
            input: InputRoute::Commands,
            work_dir: nowhere.into(),
        };
        let guest = Guest::new(config, &platform);
        let call = ToolCall {
            spec: ToolSpec {
                name: "t".into(),
                description: String::new(),
                params: vec![],
                argv: vec!["/system/bin/true".into()],
                sandbox: Sandbox::default(),
                timeout_ms: 1000,
            },
            args: Default::default(),
        };
        match guest
            .handle(Request::Tool(Box::new(call)), RequestBody::none())
            .await
        {
            Reply::Msg(Response::Error(WireError::Unsupported { what })) => {
                assert!(what.contains("android"), "{what}");
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert!(
            !guest
                .info()
                .await
                .capabilities
                .contains(&"tools".to_owned())
        );
    }
}

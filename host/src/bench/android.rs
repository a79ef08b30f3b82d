//! `pincer bench` on a phone: each call through the shim next to the Android command it
//! runs, the command timed on the phone itself (`date +%s%N` around it, run through exec),
//! so the shim's own overhead per call (transport, checking, parsing, encoding) is what the
//! call takes beyond the command. Read-only phones refuse exec: their calls are measured
//! without the comparison.

use super::{BenchOptions, Stats, measure};
use crate::env::{ClientError, Environment};
use pincer_shared::Action;
use pincer_shared::action::{Gesture, Point};
use pincer_shared::android::{AndroidQuery, Namespace};
use pincer_shared::observe::{ImageFormat, ScreenshotRequest, TreeRequest};
use pincer_shared::probe::Probe;
use pincer_shared::setup::ExecRequest;
use std::time::Duration;

/// The shim's overhead per call it is held to, beyond the command's time.
const OVERHEAD_TARGET_MS: f64 = 2.0;

/// How long `command` takes on the phone, once, in the phone's own clock.
async fn command_time(env: &Environment, command: &str) -> Result<Duration, ClientError> {
    let script =
        format!("a=$(date +%s%N); {command} >/dev/null 2>&1; b=$(date +%s%N); echo $((b-a))");
    let out = env.exec(ExecRequest::new(["sh", "-c", &script])).await?;
    let ns: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| ClientError::Protocol {
            env: env.name().into(),
            message: format!(
                "timing `{command}` on the phone printed {:?}, not nanoseconds",
                String::from_utf8_lossy(&out.stdout)
            ),
        })?;
    Ok(Duration::from_nanos(ns))
}

/// Median of samples.
fn median(mut s: Vec<Duration>) -> Duration {
    s.sort();
    s[s.len() / 2]
}

/// Measures the call's samples, and when the phone allows exec, the command alone and the
/// difference (the shim's overhead row).
async fn compare<F, Fut, T>(
    env: &Environment,
    n: usize,
    name: &str,
    command: &str,
    timed: bool,
    call: F,
    out: &mut Vec<Stats>,
) -> Result<(), ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let (calls, _) = measure(n, call).await?;
    if !timed {
        out.push(Stats::from_samples(
            name,
            calls,
            None,
            None,
            format!("runs `{command}`"),
        ));
        return Ok(());
    }
    let (alone, _) = measure(n, || command_time(env, command)).await?;
    let alone_p50 = median(alone);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    out.push(Stats::from_samples(
        name,
        calls.clone(),
        None,
        None,
        format!("runs `{command}`: {:.2} ms alone (p50)", ms(alone_p50)),
    ));
    out.push(Stats::from_samples(
        &format!("  shim overhead: {name}"),
        calls.iter().map(|c| c.saturating_sub(alone_p50)).collect(),
        Some(OVERHEAD_TARGET_MS),
        None,
        "the call minus the command's median time".into(),
    ));
    Ok(())
}

/// Every measurement on a phone.
pub(super) async fn run(
    env: &Environment,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Stats>, ClientError> {
    let n = opts.iterations.max(5);
    let few = (n / 5).max(5);
    let timed = env.info().is_some_and(|i| !i.read_only);
    if !timed {
        progress("read-only phone: calls are measured without the command alone");
    }
    let mut out = Vec::new();
    let screen = env.screen_info().await?;

    progress("ping");
    let (s, _) = measure(n, || env.ping()).await?;
    out.push(Stats::from_samples(
        "ping",
        s,
        Some(0.3),
        None,
        String::new(),
    ));

    progress("tap");
    let corner = Point::new(
        screen.width.saturating_sub(1) as i32,
        screen.height.saturating_sub(1) as i32,
    );
    let tap = Action::Touch(Gesture::Tap { at: corner });
    let (s, _) = measure(n, || env.act(tap.clone())).await?;
    out.push(Stats::from_samples(
        "tap",
        s,
        None,
        None,
        format!(
            "at ({}, {}): a virtual touchscreen where /dev/uinput opens, else `input tap`",
            corner.x, corner.y
        ),
    ));

    let probe = |q: AndroidQuery| {
        let p = Probe::Android(q);
        move || env.probe(p.clone())
    };
    progress("setting");
    compare(
        env,
        n,
        "setting",
        "settings get global airplane_mode_on",
        timed,
        probe(AndroidQuery::Setting {
            namespace: Namespace::Global,
            key: "airplane_mode_on".into(),
        }),
        &mut out,
    )
    .await?;
    progress("property");
    compare(
        env,
        n,
        "property",
        "getprop ro.build.version.sdk",
        timed,
        probe(AndroidQuery::Property {
            name: "ro.build.version.sdk".into(),
        }),
        &mut out,
    )
    .await?;
    progress("content rows");
    compare(
        env,
        n,
        "content rows",
        "content query --uri content://settings/system --projection name:value",
        timed,
        probe(AndroidQuery::Content {
            uri: "content://settings/system".into(),
            projection: vec!["name".into(), "value".into()],
            selection: None,
            sort: None,
        }),
        &mut out,
    )
    .await?;
    progress("app in front");
    compare(
        env,
        n,
        "app in front",
        "dumpsys activity activities",
        timed,
        probe(AndroidQuery::Foreground),
        &mut out,
    )
    .await?;
    progress("ui tree");
    compare(
        env,
        few,
        "UI tree",
        "uiautomator dump /dev/null",
        timed,
        || env.tree(TreeRequest::default()),
        &mut out,
    )
    .await?;
    for (name, format) in [
        ("screenshot raw", ImageFormat::Raw { zstd: None }),
        ("screenshot raw+zstd", ImageFormat::Raw { zstd: Some(1) }),
        ("screenshot PNG", ImageFormat::Png),
    ] {
        progress(name);
        let req = ScreenshotRequest {
            format,
            ..Default::default()
        };
        compare(
            env,
            few,
            name,
            "screencap",
            timed,
            || env.screenshot(req),
            &mut out,
        )
        .await?;
    }
    Ok(out)
}

//! `pincer bench` on a phone: each call through the shim next to the Android command it
//! runs, the command timed on the phone itself (`date +%s%N` around it, run through exec),
//! so the shim's own overhead per call (transport, checking, parsing, encoding) is what the
//! call takes beyond the command. Read-only phones refuse exec: their calls are measured
//! without the comparison.

use super::{BenchOptions, Stats, measure, ping};
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

/// How long `command` takes on the phone, once, in the phone's own clock, with the second
/// `date` included (see [`Clock`]).
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

/// The phone's clock as the bench reads it: `date` itself takes a millisecond or two to
/// start, so what a command takes is what it is timed at minus what nothing (`:`) is.
struct Clock {
    nothing: Duration,
}

impl Clock {
    async fn calibrate(env: &Environment, n: usize) -> Result<Self, ClientError> {
        let (s, _) = measure(n, || command_time(env, ":")).await?;
        Ok(Self { nothing: median(s) })
    }

    /// The median time of `command` alone.
    async fn time(
        &self,
        env: &Environment,
        n: usize,
        command: &str,
    ) -> Result<Duration, ClientError> {
        let (s, _) = measure(n, || command_time(env, command)).await?;
        Ok(median(s).saturating_sub(self.nothing))
    }
}

/// Median of samples.
fn median(mut s: Vec<Duration>) -> Duration {
    s.sort();
    s[s.len() / 2]
}

/// One call to measure: its name, the Android command it runs, and the target for the
/// shim's overhead beyond that command (screenshots have none: their encoding is work the
/// shim is asked to do, reported as such).
struct Call<'a> {
    name: &'a str,
    command: &'a str,
    target_ms: Option<f64>,
}

/// Measures the call's samples, and with a clock (phones that allow exec) the command
/// alone and the difference: the shim's overhead row.
async fn compare<F, Fut, T>(
    env: &Environment,
    n: usize,
    call: Call<'_>,
    clock: Option<&Clock>,
    f: F,
    out: &mut Vec<Stats>,
) -> Result<(), ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let (calls, _) = measure(n, f).await?;
    let Some(clock) = clock else {
        out.push(Stats::from_samples(
            call.name,
            calls,
            None,
            None,
            format!("runs `{}`", call.command),
        ));
        return Ok(());
    };
    let alone = clock.time(env, n, call.command).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    out.push(Stats::from_samples(
        call.name,
        calls.clone(),
        None,
        None,
        format!("runs `{}`: {:.2} ms alone (p50)", call.command, ms(alone)),
    ));
    out.push(Stats::from_samples(
        &format!("  beyond the command: {}", call.name),
        calls.iter().map(|c| c.saturating_sub(alone)).collect(),
        call.target_ms,
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
    let read_only = env.info().is_some_and(|i| i.read_only);
    let clock = if read_only {
        progress("read-only phone: calls are measured without their commands alone");
        None
    } else {
        progress("the phone's clock");
        Some(Clock::calibrate(env, n).await?)
    };
    let clock = clock.as_ref();
    let mut out = Vec::new();
    let screen = env.screen_info().await?;

    progress("ping");
    out.push(ping(env, n).await?);

    let (x, y) = (
        screen.width.saturating_sub(1) as i32,
        screen.height.saturating_sub(1) as i32,
    );
    let tap = Action::Touch(Gesture::Tap {
        at: Point::new(x, y),
    });
    let command = format!("input tap {x} {y}");
    progress("tap");
    compare(
        env,
        n,
        Call {
            name: "tap (input route)",
            command: &command,
            target_ms: Some(OVERHEAD_TARGET_MS),
        },
        clock,
        || env.act(tap.clone()),
        &mut out,
    )
    .await?;

    let probe = |q: AndroidQuery| {
        let p = Probe::Android(q);
        move || env.probe(p.clone())
    };
    let small = |name, command| Call {
        name,
        command,
        target_ms: Some(OVERHEAD_TARGET_MS),
    };
    progress("setting");
    compare(
        env,
        n,
        small("setting", "settings get global airplane_mode_on"),
        clock,
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
        small("property", "getprop ro.build.version.sdk"),
        clock,
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
        small(
            "content rows",
            "content query --uri content://settings/system --projection name:value",
        ),
        clock,
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
        small("app in front", "dumpsys activity activities"),
        clock,
        probe(AndroidQuery::Foreground),
        &mut out,
    )
    .await?;
    progress("ui tree");
    compare(
        env,
        few,
        small("UI tree", "uiautomator dump /dev/null"),
        clock,
        || env.tree(TreeRequest::default()),
        &mut out,
    )
    .await?;
    for (name, format) in [
        ("screenshot raw+zstd", ImageFormat::Raw { zstd: Some(1) }),
        ("screenshot PNG", ImageFormat::Png),
        ("screenshot raw", ImageFormat::Raw { zstd: None }),
    ] {
        progress(name);
        let req = ScreenshotRequest {
            format,
            ..Default::default()
        };
        compare(
            env,
            few,
            Call {
                name,
                command: "screencap",
                target_ms: None,
            },
            clock,
            || env.screenshot(req),
            &mut out,
        )
        .await?;
    }
    Ok(out)
}

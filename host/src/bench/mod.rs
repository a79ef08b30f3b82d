//! `pincer bench`: round-trip latency of each kind of call against a live environment,
//! measured from the host (so it includes QUIC, encoding and the guest's work), with the
//! targets pincer is held to and the medians OSWorld's in-VM server reaches on the same
//! kind of machine. Also a soak mode that takes thousands of screenshots in a row and
//! watches the agent's memory and file descriptors, and what video streams cost the guest
//! (`video`).

use crate::agent::observe::ObservationConfig;
use crate::env::{ClientError, Environment};
use crate::eval::functions::Library;
use crate::eval::graph::{Evaluator, Graph, ProbeSource};
use crate::eval::{AgentLog, ProbeResult};
use crate::observe::{self, ObserveError};
use crate::task::Task;
use pincer_shared::Action;
use pincer_shared::Platform;
use pincer_shared::action::{MouseButton, Point};
use pincer_shared::observe::{ImageFormat, ScreenshotRequest, TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod android;
mod video;

pub use video::{VideoStats, video, video_table};

/// Latency summary of one operation.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// What was measured.
    pub name: String,
    /// Samples taken.
    pub n: usize,
    /// Milliseconds.
    pub min: f64,
    /// Milliseconds.
    pub p50: f64,
    /// Milliseconds.
    pub p95: f64,
    /// Milliseconds.
    pub p99: f64,
    /// Milliseconds.
    pub max: f64,
    /// pincer's target for the median, in milliseconds, if it has one.
    pub target_ms: Option<f64>,
    /// What OSWorld's server takes for this (median range), for comparison.
    pub osworld: Option<&'static str>,
    /// Extra facts (image size, node count).
    pub note: String,
}

impl Stats {
    /// Summarises samples of one operation.
    pub fn from_samples(
        name: &str,
        mut s: Vec<Duration>,
        target_ms: Option<f64>,
        osworld: Option<&'static str>,
        note: String,
    ) -> Self {
        s.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let pick = |q: f64| ms(s[((s.len() as f64 - 1.0) * q).round() as usize]);
        Self {
            name: name.into(),
            n: s.len(),
            min: ms(s[0]),
            p50: pick(0.5),
            p95: pick(0.95),
            p99: pick(0.99),
            max: ms(s[s.len() - 1]),
            target_ms,
            osworld,
            note,
        }
    }

    /// Whether the median meets the target (true when there is none).
    pub fn meets_target(&self) -> bool {
        self.target_ms.is_none_or(|t| self.p50 <= t)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Samples per operation (UI trees and big files use a fifth of it, at least 5).
    pub iterations: usize,
    /// Include typing (it types into whatever has focus).
    pub typing: bool,
}

async fn measure<F, Fut, T>(n: usize, mut f: F) -> Result<(Vec<Duration>, T), ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    // Two untimed runs warm caches and connections.
    let mut last = f().await?;
    last = f().await.map(|_| last)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        last = f().await?;
        out.push(t.elapsed());
    }
    Ok((out, last))
}

/// The round trip of a ping: the transport and the guest's dispatch, nothing else.
async fn ping(env: &Environment, n: usize) -> Result<Stats, ClientError> {
    let (s, _) = measure(n, || env.ping()).await?;
    Ok(Stats::from_samples(
        "ping",
        s,
        Some(0.3),
        None,
        String::new(),
    ))
}

/// Runs every measurement; operations the guest refuses (read-only) are skipped with a note.
pub async fn run(
    env: &Environment,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Stats>, ClientError> {
    if env.info().is_some_and(|i| i.platform == Platform::Android) {
        return android::run(env, opts, progress).await;
    }
    let n = opts.iterations.max(5);
    let few = (n / 5).max(5);
    let mut out = Vec::new();
    let screen = env.screen_info().await?;
    let corner = Point::new(
        screen.width.saturating_sub(1) as i32,
        screen.height.saturating_sub(1) as i32,
    );

    progress("ping");
    out.push(ping(env, n).await?);

    progress("click");
    let click = Action::Click {
        at: Some(corner),
        button: MouseButton::Left,
        count: 1,
    };
    let (s, _) = measure(n, || env.act(click.clone())).await?;
    out.push(Stats::from_samples(
        "click",
        s,
        Some(1.0),
        Some("269-358 ms"),
        format!("left click at ({}, {})", corner.x, corner.y),
    ));

    if opts.typing {
        progress("type 20 chars");
        let text = Action::TypeText {
            text: "pincer types twenty!".into(),
        };
        let (s, _) = measure(few, || env.act(text.clone())).await?;
        out.push(Stats::from_samples(
            "type 20 ASCII chars",
            s,
            Some(5.0),
            Some("252-383 ms"),
            "into the focused window".into(),
        ));
    }

    for (name, format, target, osworld) in [
        (
            "screenshot PNG",
            ImageFormat::Png,
            Some(15.0),
            Some("58-84 ms"),
        ),
        (
            "screenshot JPEG q80",
            ImageFormat::Jpeg { quality: 80 },
            None,
            None,
        ),
        (
            "screenshot raw+zstd",
            ImageFormat::Raw { zstd: Some(1) },
            Some(8.0),
            None,
        ),
        (
            "screenshot raw",
            ImageFormat::Raw { zstd: None },
            None,
            None,
        ),
    ] {
        progress(name);
        let req = ScreenshotRequest {
            format,
            ..Default::default()
        };
        let (s, shot) = measure(n, || env.screenshot(req)).await?;
        let note = format!(
            "{}x{}, {} KiB; the last call: guest grab {} us + encode {} us",
            shot.meta.width,
            shot.meta.height,
            shot.bytes.len() / 1024,
            shot.meta.grab_us,
            shot.meta.encode_us
        );
        out.push(Stats::from_samples(name, s, target, osworld, note));
    }

    progress("ui tree");
    let (s, tree) = measure(few, || env.tree(TreeRequest::default())).await?;
    out.push(Stats::from_samples(
        "UI tree (desktop, showing)",
        s,
        None,
        Some("0.6-0.74 s (small app), 6.1 s (Calc)"),
        format!("{} nodes", tree.node_count),
    ));

    progress("screen info");
    let (s, _) = measure(n, || env.screen_info()).await?;
    out.push(Stats::from_samples(
        "screen info",
        s,
        None,
        None,
        String::new(),
    ));

    let info = env.info();
    let writable = info.as_ref().is_some_and(|i| !i.read_only);
    let dir = "/tmp/pincer-bench";
    if writable {
        progress("files");
        let big: Vec<u8> = (0..10 * 1024 * 1024u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        env.write_file(&format!("{dir}/10mib.bin"), &big, 0o644)
            .await?;
        for i in 0..3 {
            env.write_file(&format!("{dir}/small{i}.txt"), b"hello pincer\n", 0o644)
                .await?;
        }
        let path = format!("{dir}/10mib.bin");
        let (s, (_, bytes)) = measure(few, || env.read_file(&path)).await?;
        if bytes != big {
            return Err(ClientError::Protocol {
                env: env.name().into(),
                message: "the 10 MiB file came back different".into(),
            });
        }
        out.push(Stats::from_samples(
            "read 10 MiB file",
            s,
            Some(30.0),
            Some("21-43 ms"),
            String::new(),
        ));

        progress("batch of 10 probes");
        let probes: Vec<Probe> = (0..4)
            .map(|i| Probe::Stat {
                path: format!("{dir}/small{}.txt", i % 3),
            })
            .chain((0..3).map(|i| Probe::ReadFile {
                path: format!("{dir}/small{i}.txt"),
                max_len: 4096,
            }))
            .chain([
                Probe::ActiveWindow,
                Probe::ListDir { path: dir.into() },
                Probe::EnvVar {
                    name: "DISPLAY".into(),
                },
            ])
            .collect();
        let (s, _) = measure(n, || env.batch(probes.clone())).await?;
        out.push(Stats::from_samples(
            "batch of 10 probes",
            s,
            Some(2.0),
            None,
            "4 stat, 3 read, window, list dir, env var".into(),
        ));

        progress("evaluate an 11-checkpoint graph over 2 roles");
        let graph = bench_graph(env, dir)?;
        let (s, trips) = measure(n, || evaluate(env, &graph)).await?;
        out.push(Stats::from_samples(
            "evaluate 11 checkpoints",
            s,
            Some(5.0),
            None,
            format!("2 roles, {trips} round trips, all pass"),
        ));

        progress("harness step: observe with marks while evaluating");
        let cfg = ObservationConfig::default();
        // As the runner does after an action: the next observation is built while the
        // action is evaluated.
        let (s, (elements, png)) = measure(few, || async {
            let (view, evaluated) = futures::join!(
                observe::view(env, "desktop", Platform::Linux, &cfg),
                evaluate(env, &graph)
            );
            let view = view.map_err(|e| match e {
                ObserveError::Client(c) => c,
                other => ClientError::Local {
                    env: env.name().into(),
                    message: other.to_string(),
                },
            })?;
            evaluated?;
            Ok((view.elements.len(), view.marked.map_or(0, |m| m.len())))
        })
        .await?;
        out.push(Stats::from_samples(
            "harness step (observe + marks, evaluate alongside)",
            s,
            Some(30.0),
            Some("CRAB: 1-2 s sleep + 3-5 s detector"),
            format!(
                "{}x{} screenshot + UI tree, {elements} marks drawn, {} KiB PNG, 11 checkpoints",
                screen.width,
                screen.height,
                png / 1024
            ),
        ));
        let _ = env.remove(dir).await;
    } else {
        progress("read-only guest: skipping file benchmarks");
    }
    Ok(out)
}

/// Both roles of the benchmark graph answered by the one benched guest: each role's batch
/// is still its own round trip, and the two go out concurrently, as for two environments.
struct BothRoles<'a>(&'a Environment);

impl ProbeSource for BothRoles<'_> {
    async fn batch(
        &self,
        _role: &str,
        probes: Arc<[Probe]>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        self.0.batch(probes).await
    }
}

/// The benchmark's 11-checkpoint graph on roles `a` and `b` (sources, successors,
/// negation, AND, OR, a process check) over the files written under `dir`.
fn bench_graph(env: &Environment, dir: &str) -> Result<Arc<Graph>, ClientError> {
    let node = |id: &str, role: &str, check: &str, args: serde_json::Value, after: &[&str]| serde_json::json!({"id": id, "env": role, "check": check, "args": args, "after": after});
    let f = |i: u32| format!("{dir}/small{i}.txt");
    let exists = |i: u32| serde_json::json!({"check": "file_exists", "args": {"path": f(i)}});
    let task = serde_json::json!({
        "id": "bench-11",
        "instruction": "benchmark graph",
        "envs": {"a": {"platform": "linux"}, "b": {"platform": "linux"}},
        "checkpoints": [
            node("a-dir", "a", "dir_exists", serde_json::json!({"path": dir}), &[]),
            node("a-text", "a", "file_contains", serde_json::json!({"path": f(0), "text": "pincer"}), &["a-dir"]),
            node("a-equal", "a", "file_equals", serde_json::json!({"path": f(1), "content": "hello pincer"}), &["a-dir"]),
            node("a-file", "a", "file_exists", serde_json::json!({"path": f(2)}), &[]),
            node("a-none", "a", "file_absent", serde_json::json!({"path": format!("{dir}/missing")}), &[]),
            node("b-dir", "b", "dir_exists", serde_json::json!({"path": dir}), &[]),
            node("b-regex", "b", "file_matches", serde_json::json!({"path": f(0), "regex": "hel+o"}), &["b-dir", "a-file"]),
            node("b-not", "b", "not", serde_json::json!({"check": "file_exists", "args": {"path": format!("{dir}/missing")}}), &[]),
            node("b-all", "b", "all_of", serde_json::json!({"checks": [exists(0), exists(1)]}), &[]),
            node("b-any", "b", "any_of", serde_json::json!({"checks": [exists(9), exists(2)]}), &[]),
            node("b-agent", "b", "process_running", serde_json::json!({"name": "pincer-agent"}), &[]),
        ],
    });
    let local = |message: String| ClientError::Local {
        env: env.name().into(),
        message,
    };
    let task: Task = serde_json::from_value(task).map_err(|e| local(e.to_string()))?;
    Graph::build(&task, &Library::standard())
        .map(Arc::new)
        .map_err(|e| local(e.to_string()))
}

/// One evaluator step over a fresh evaluator of `graph`, both roles answered by `env`:
/// each role's batch is still its own round trip, and the two go out concurrently, as for
/// two environments. Returns the round trips it took; fails unless every checkpoint passed.
async fn evaluate(env: &Environment, graph: &Arc<Graph>) -> Result<u32, ClientError> {
    let local = |message: String| ClientError::Local {
        env: env.name().into(),
        message,
    };
    let mut ev = Evaluator::new(graph.clone());
    let r = ev
        .step(1, &BothRoles(env), &AgentLog::default())
        .await
        .map_err(|e| local(e.to_string()))?;
    if !ev.is_success() {
        return Err(local(format!(
            "the benchmark graph did not pass: {:?}",
            ev.progress()
        )));
    }
    Ok(r.round_trips)
}

/// Waits until the tree of `app` holds at least `min_nodes` nodes (the app has started and
/// drawn its content), or `timeout` passes.
async fn wait_for_tree(
    env: &Environment,
    req: &TreeRequest,
    min_nodes: u32,
    timeout: Duration,
) -> Result<u32, ClientError> {
    let start = Instant::now();
    loop {
        let n = env.tree(req.clone()).await?.node_count;
        if n >= min_nodes || start.elapsed() > timeout {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn stop_group(env: &Environment, pid: u32) {
    // Launched programs lead their own process group; stop all of it.
    let _ = env
        .exec(pincer_shared::setup::ExecRequest::new([
            "kill",
            "-TERM",
            "--",
            &format!("-{pid}"),
        ]))
        .await;
}

/// UI-tree latency of real apps the benchmark starts on the guest itself: a ~100-node
/// GTK list dialog and LibreOffice Calc with a 300x26 sheet of numbers (OSWorld's
/// reference cases). Needs the setup class, zenity and LibreOffice on the guest.
pub async fn app_trees(
    env: &Environment,
    iterations: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<Stats>, ClientError> {
    let few = (iterations / 5).max(5);
    let mut out = Vec::new();

    progress("app tree: zenity list (~100 nodes)");
    let mut argv: Vec<String> = [
        "zenity",
        "--list",
        "--title",
        "pincer bench list",
        "--width",
        "600",
        "--height",
        "900",
        "--column",
        "Name",
        "--column",
        "Value",
    ]
    .map(String::from)
    .to_vec();
    for i in 0..40 {
        argv.push(format!("row {i}"));
        argv.push(format!("{}", i * 7));
    }
    let pid = env.launch(argv, Vec::new()).await?;
    let req = TreeRequest {
        scope: TreeScope::App("zenity".into()),
        ..Default::default()
    };
    wait_for_tree(env, &req, 80, Duration::from_secs(30)).await?;
    let (s, tree) = measure(few, || env.tree(req.clone())).await?;
    out.push(Stats::from_samples(
        "UI tree: zenity list",
        s,
        Some(50.0),
        Some("0.6-0.74 s"),
        format!("{} nodes", tree.node_count),
    ));
    stop_group(env, pid).await;

    progress("app tree: LibreOffice Calc 300x26 (first start takes a while)");
    let dir = "/tmp/pincer-bench-calc";
    let csv: String = (0..300)
        .map(|r| {
            (0..26)
                .map(|c| (r * 26 + c).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join("\n");
    // What an interrupted run left (a lock file makes Calc ask "document in use?") goes first.
    let _ = env.remove(dir).await;
    env.write_file(&format!("{dir}/sheet.csv"), csv.as_bytes(), 0o644)
        .await?;
    // A profile of its own, without first-start dialogs: the user's is left alone.
    env.write_file(
        &format!("{dir}/profile/user/registrymodifications.xcu"),
        LIBREOFFICE_SETTINGS.as_bytes(),
        0o644,
    )
    .await?;
    let profile = format!("-env:UserInstallation=file://{dir}/profile");
    let mut convert = pincer_shared::setup::ExecRequest::new([
        "libreoffice",
        &profile,
        "--headless",
        "--convert-to",
        "ods",
        "--outdir",
        dir,
        &format!("{dir}/sheet.csv"),
    ]);
    convert.timeout_ms = 180_000;
    let out_conv = env.exec(convert).await?;
    if !out_conv.status.success() {
        return Err(ClientError::Guest {
            env: env.name().into(),
            source: pincer_shared::WireError::Io {
                message: format!(
                    "libreoffice --convert-to failed: {}",
                    String::from_utf8_lossy(&out_conv.stderr)
                ),
            },
        });
    }
    let pid = env
        .launch(
            [
                "libreoffice",
                &profile,
                "--calc",
                "--norestore",
                &format!("{dir}/sheet.ods"),
            ]
            .map(String::from)
            .to_vec(),
            Vec::new(),
        )
        .await?;
    // Give Calc the whole screen, as on a benchmark VM, so the sheet's visible cells are
    // what OSWorld's measurement walks.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(120) {
        if let Some(w) = env
            .windows()
            .await?
            .into_iter()
            .find(|w| w.title.contains("LibreOffice Calc"))
        {
            env.window(w.id, pincer_shared::setup::WindowOp::Maximize)
                .await?;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let req = TreeRequest {
        scope: TreeScope::App("soffice".into()),
        ..Default::default()
    };
    let mut last = 0;
    // Wait for the sheet to be on screen and the node count to settle.
    loop {
        let n = wait_for_tree(env, &req, 1000, Duration::from_secs(120)).await?;
        if n >= 1000 && n == last {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            stop_group(env, pid).await;
            return Err(ClientError::Local {
                env: env.name().into(),
                message: format!(
                    "LibreOffice Calc's sheet was not on screen after 120 s (its tree has {n} nodes); nothing measured"
                ),
            });
        }
        last = n;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (s, tree) = measure(few, || env.tree(req.clone())).await?;
    out.push(Stats::from_samples(
        "UI tree: Calc 300x26 sheet",
        s,
        Some(600.0),
        Some("6.1 s"),
        format!("{} nodes (showing)", tree.node_count),
    ));
    stop_group(env, pid).await;
    let _ = env.remove(dir).await;
    Ok(out)
}

/// LibreOffice settings that skip its first-start dialogs.
const LIBREOFFICE_SETTINGS: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="ooSetupInstCompleted" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="ooSetupLastVersion" oor:op="fuse"><value>7.4</value></prop></item>
</oor:items>
"#;

/// Resource use of the agent process, read through probes.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AgentUsage {
    /// Resident memory in KiB.
    pub rss_kib: u64,
    /// The most resident memory the agent has had since it started (VmHWM), in KiB.
    pub peak_kib: u64,
    /// Open file descriptors.
    pub fds: usize,
}

/// Reads the agent's RSS and fd count from /proc through probes.
pub async fn agent_usage(env: &Environment) -> Result<Option<AgentUsage>, ClientError> {
    let Some(pid) = env.info().map(|i| i.pid) else {
        return Ok(None);
    };
    let replies = env
        .batch(vec![
            Probe::ReadFile {
                path: format!("/proc/{pid}/status"),
                max_len: 64 * 1024,
            },
            Probe::ListDir {
                path: format!("/proc/{pid}/fd"),
            },
        ])
        .await?;
    let status = match &replies[0] {
        Ok(ProbeReply::File(Some(f))) => String::from_utf8_lossy(&f.bytes).into_owned(),
        _ => String::new(),
    };
    let kib = |field: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    let memory = kib("VmRSS:").zip(kib("VmHWM:"));
    let fds = match &replies[1] {
        Ok(ProbeReply::Dir(Some(d))) => Some(d.len()),
        _ => None,
    };
    Ok(memory
        .zip(fds)
        .map(|((rss_kib, peak_kib), fds)| AgentUsage {
            rss_kib,
            peak_kib,
            fds,
        }))
}

/// One sample of the soak run.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSample {
    /// Screenshots taken so far.
    pub shots: usize,
    /// Agent usage at that point.
    pub usage: Option<AgentUsage>,
}

/// Takes `count` PNG screenshots in a row, sampling the agent's memory and descriptors.
pub async fn soak(
    env: &Environment,
    count: usize,
    progress: &mut dyn FnMut(&SoakSample),
) -> Result<Vec<SoakSample>, ClientError> {
    let every = (count / 10).max(1);
    let mut samples = vec![SoakSample {
        shots: 0,
        usage: agent_usage(env).await?,
    }];
    progress(&samples[0]);
    for i in 1..=count {
        env.screenshot(ScreenshotRequest::default()).await?;
        if i % every == 0 || i == count {
            let s = SoakSample {
                shots: i,
                usage: agent_usage(env).await?,
            };
            progress(&s);
            samples.push(s);
        }
    }
    Ok(samples)
}

/// The table printed by `pincer bench`.
pub fn table(stats: &[Stats]) -> String {
    use std::fmt::Write;
    let width = |f: &dyn Fn(&Stats) -> usize, head: &str| {
        stats.iter().map(f).max().unwrap_or(0).max(head.len())
    };
    let nw = width(&|s| s.name.len(), "operation");
    let ow = width(&|s| s.osworld.map_or(1, str::len), "OSWorld (median)");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<nw$} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9}  {:<11} {:<ow$}  note",
        "operation",
        "n",
        "min ms",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms",
        "target",
        "OSWorld (median)"
    );
    for s in stats {
        let _ = writeln!(
            out,
            "{:<nw$} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}  {:<11} {:<ow$}  {}",
            s.name,
            s.n,
            s.min,
            s.p50,
            s.p95,
            s.p99,
            s.max,
            verdict(s),
            s.osworld.unwrap_or("-"),
            s.note
        );
    }
    out
}

/// The target column: `<=15 ok`, `<=600 MISS`, or `-`.
fn verdict(s: &Stats) -> String {
    match s.target_ms {
        Some(t) if s.meets_target() => format!("<={t} ok"),
        Some(t) => format!("<={t} MISS"),
        None => "-".into(),
    }
}

/// The same as a Markdown table, for the README.
pub fn markdown(stats: &[Stats]) -> String {
    use std::fmt::Write;
    let mut out = String::from(
        "| operation | n | min ms | p50 ms | p95 ms | p99 ms | max ms | target (p50) | OSWorld median | note |\n|---|--:|--:|--:|--:|--:|--:|---|---|---|\n",
    );
    for s in stats {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
            s.name,
            s.n,
            s.min,
            s.p50,
            s.p95,
            s.p99,
            s.max,
            verdict(s).replace("<=", "≤ "),
            s.osworld.unwrap_or("–"),
            s.note
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_sorted_samples() {
        let samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let s = Stats::from_samples("x", samples, Some(50.0), None, String::new());
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 100.0);
        assert_eq!(s.p95, 95.0);
        assert!((s.p50 - 50.0).abs() <= 1.0);
        assert!(
            !Stats::from_samples(
                "y",
                vec![Duration::from_millis(60)],
                Some(50.0),
                None,
                String::new()
            )
            .meets_target()
        );
        let t = table(&[s]);
        assert!(t.contains("p99 ms") && t.contains("<=50"), "{t}");
    }
}

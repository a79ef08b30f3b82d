//! `pincer screenshot`, `pincer video`, `pincer tree` and `pincer bench`.

use super::EnvArg;
use anyhow::{Context, bail};
use clap::ValueEnum;
use pincer::bench::{self, BenchOptions};
use pincer::env::registry::Registry;
use pincer_shared::observe::{
    ImageFormat, Rect, ScreenshotRequest, TreeRequest, TreeScope, VideoRequest,
};
use pincer_shared::tree::UiNode;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ShotFormat {
    Png,
    Jpeg,
    Raw,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ScreenshotArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Output file.
    #[arg(short, long)]
    out: PathBuf,
    /// Image format (raw writes the pixels as BGRX, 4 bytes per pixel).
    #[arg(long, value_enum, default_value_t = ShotFormat::Png)]
    format: ShotFormat,
    /// JPEG quality.
    #[arg(long, default_value_t = 85)]
    quality: u8,
    /// Only this region: X,Y,WIDTH,HEIGHT.
    #[arg(long, value_parser = parse_rect)]
    region: Option<Rect>,
    /// Downscale to fit WIDTHxHEIGHT.
    #[arg(long, value_parser = super::desktop::parse_size)]
    max_size: Option<(u32, u32)>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum VideoFormat {
    Raw,
    Jpeg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct VideoArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Output file (H.264 MP4, made by ffmpeg).
    #[arg(short, long)]
    out: PathBuf,
    /// How long to record.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Most frames per second (frames come only when the screen changes).
    #[arg(long, default_value_t = 30)]
    fps: u32,
    /// How the guest encodes frames: raw+zstd costs it about a quarter of JPEG's CPU and
    /// is smaller for desktops (the host turns them into PNG files for ffmpeg); jpeg is lossy.
    #[arg(long, value_enum, default_value_t = VideoFormat::Raw)]
    format: VideoFormat,
    /// JPEG quality, with --format jpeg.
    #[arg(long, default_value_t = 80)]
    quality: u8,
    /// Downscale to fit WIDTHxHEIGHT.
    #[arg(long, value_parser = super::desktop::parse_size)]
    max_size: Option<(u32, u32)>,
}

pub(crate) async fn video(a: VideoArgs, reg: &Registry) -> anyhow::Result<()> {
    if !(a.seconds > 0.0 && a.seconds.is_finite()) {
        bail!("--seconds {}: give a positive number of seconds", a.seconds);
    }
    let env = a.env.connect(reg).await?;
    let req = VideoRequest {
        max_fps: a.fps,
        format: match a.format {
            VideoFormat::Raw => ImageFormat::Raw { zstd: Some(1) },
            VideoFormat::Jpeg => ImageFormat::Jpeg { quality: a.quality },
        },
        max_size: a.max_size,
        duration_ms: (a.seconds * 1000.0).ceil() as u64,
    };
    match pincer::video::record(&env, req, &a.out).await? {
        Some(r) => println!(
            "{}: {} frames in {:.1} s ({:.1} fps on average), {} bytes of frames from the guest",
            a.out.display(),
            r.frames,
            r.seconds,
            r.frames as f64 / r.seconds,
            r.frame_bytes
        ),
        None => bail!("the guest sent no frame: nothing written"),
    }
    Ok(())
}

fn parse_rect(s: &str) -> Result<Rect, String> {
    let v: Vec<i64> = s
        .split(',')
        .map(|p| p.trim().parse::<i64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("'{s}' is not a region: write X,Y,WIDTH,HEIGHT"))?;
    match v.as_slice() {
        [x, y, w, h] if *w > 0 && *h > 0 => {
            Ok(Rect::new(*x as i32, *y as i32, *w as u32, *h as u32))
        }
        _ => Err(format!(
            "'{s}' is not a region: write X,Y,WIDTH,HEIGHT with positive sizes"
        )),
    }
}

pub(crate) async fn screenshot(a: ScreenshotArgs, reg: &Registry) -> anyhow::Result<()> {
    let env = a.env.connect(reg).await?;
    let format = match a.format {
        ShotFormat::Png => ImageFormat::Png,
        ShotFormat::Jpeg => ImageFormat::Jpeg { quality: a.quality },
        ShotFormat::Raw => ImageFormat::Raw { zstd: Some(1) },
    };
    let t = std::time::Instant::now();
    let shot = env
        .screenshot(ScreenshotRequest {
            format,
            region: a.region,
            max_size: a.max_size,
        })
        .await?;
    let took = t.elapsed();
    let bytes = match a.format {
        ShotFormat::Raw => shot.raw_pixels()?,
        _ => shot.bytes,
    };
    std::fs::write(&a.out, &bytes).with_context(|| format!("writing {}", a.out.display()))?;
    println!(
        "{}: {}x{} {:?}{}, {} bytes in {:.1} ms",
        a.out.display(),
        shot.meta.width,
        shot.meta.height,
        shot.meta.format,
        if matches!(a.format, ShotFormat::Raw) {
            format!(" ({:?} pixels)", shot.meta.layout)
        } else {
            String::new()
        },
        bytes.len(),
        took.as_secs_f64() * 1000.0
    );
    Ok(())
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum TreeFormat {
    Json,
    Xml,
    /// Indented `role "name"` lines.
    Text,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TreeArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Output format.
    #[arg(long, value_enum, default_value_t = TreeFormat::Json)]
    format: TreeFormat,
    /// Only the application of the focused window.
    #[arg(long, conflicts_with = "app")]
    active: bool,
    /// Only applications whose name contains this.
    #[arg(long)]
    app: Option<String>,
    /// Include nodes that are not showing.
    #[arg(long)]
    all: bool,
    /// Only nodes on screen.
    #[arg(long)]
    visible: bool,
    /// Deepest level.
    #[arg(long)]
    max_depth: Option<u32>,
    /// Most nodes.
    #[arg(long)]
    max_nodes: Option<u32>,
    /// Leave out node attributes (as agents' observations do; faster).
    #[arg(long)]
    no_attributes: bool,
    /// Write to a file instead of stdout.
    #[arg(short, long)]
    out: Option<PathBuf>,
}

pub(crate) async fn tree(a: TreeArgs, reg: &Registry) -> anyhow::Result<()> {
    let env = a.env.connect(reg).await?;
    let scope = match (a.active, a.app) {
        (true, _) => TreeScope::ActiveApp,
        (false, Some(app)) => TreeScope::App(app),
        _ => TreeScope::Desktop,
    };
    let t = std::time::Instant::now();
    let tree = env
        .tree(TreeRequest {
            scope,
            showing_only: !a.all,
            visible_only: a.visible,
            max_depth: a.max_depth,
            max_nodes: a.max_nodes,
            attributes: !a.no_attributes,
        })
        .await?;
    let took = t.elapsed();
    let text = match a.format {
        TreeFormat::Json => serde_json::to_string_pretty(&tree.root.to_json())?,
        TreeFormat::Xml => tree.root.to_xml(),
        TreeFormat::Text => text_tree(&tree.root),
    };
    match a.out {
        Some(p) => std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?,
        None => println!("{text}"),
    }
    eprintln!(
        "{} nodes{} in {:.1} ms (guest walk {:.1} ms)",
        tree.node_count,
        if tree.truncated { " (truncated)" } else { "" },
        took.as_secs_f64() * 1000.0,
        tree.walk_us as f64 / 1000.0
    );
    Ok(())
}

/// One line per node: indentation, role, name, bounds.
pub(crate) fn text_tree(root: &UiNode) -> String {
    let mut out = String::new();
    for (depth, n) in root.walk() {
        let bounds = n
            .bounds
            .map(|b| format!(" @{},{} {}x{}", b.x, b.y, b.width, b.height))
            .unwrap_or_default();
        let text = n
            .text
            .as_deref()
            .filter(|t| !t.is_empty() && *t != n.name)
            .map(|t| format!(" text={:?}", t.chars().take(60).collect::<String>()))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}{} {:?}{bounds}{text}\n",
            "  ".repeat(depth),
            n.role,
            n.name
        ));
    }
    out
}

#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    env: EnvArg,
    /// Samples per operation.
    #[arg(long, short = 'n', default_value_t = 200)]
    iterations: usize,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print a Markdown table (as in the README) instead.
    #[arg(long)]
    markdown: bool,
    /// Skip typing (it types into whatever has focus).
    #[arg(long)]
    no_typing: bool,
    /// Also measure the UI trees of real apps the benchmark starts on the guest: a ~100-node
    /// zenity list and LibreOffice Calc with a 300x26 sheet (needs zenity and LibreOffice).
    #[arg(long)]
    apps: bool,
    /// Measure only the apps' UI trees (implies --apps).
    #[arg(long)]
    apps_only: bool,
    /// Instead, take this many PNG screenshots in a row and report the agent's memory and
    /// file descriptors along the way.
    #[arg(long, value_name = "COUNT")]
    soak: Option<usize>,
    /// Instead, measure video streams: the agent's CPU and the bytes a second at 5, 15 and
    /// 30 fps, as JPEG q80 and as raw+zstd, while a full-screen terminal scrolls (needs
    /// xfce4-terminal), and with the screen still.
    #[arg(long)]
    video: bool,
    /// Seconds per video measurement.
    #[arg(long, default_value_t = 10.0)]
    video_seconds: f64,
}

pub(crate) async fn bench(a: BenchArgs, reg: &Registry) -> anyhow::Result<()> {
    let env = a.env.connect(reg).await?;
    let info = env.info().context("no session")?;
    if let Some(count) = a.soak {
        eprintln!("soak: {count} PNG screenshots from '{}'", env.name());
        let samples = bench::soak(&env, count, &mut |s| {
            if !a.json {
                match s.usage {
                    Some(u) => println!(
                        "{:>7} shots  agent RSS {:>8} KiB  peak {:>8} KiB  fds {:>4}",
                        s.shots, u.rss_kib, u.peak_kib, u.fds
                    ),
                    None => println!("{:>7} shots  (agent usage not readable)", s.shots),
                }
            }
        })
        .await?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&samples)?);
        }
        let usages: Vec<_> = samples.iter().filter_map(|s| s.usage).collect();
        if let (Some(first), Some(last)) = (usages.get(1).or(usages.first()), usages.last()) {
            eprintln!(
                "RSS {} -> {} KiB (peak {} KiB), fds {} -> {} over {count} screenshots",
                first.rss_kib, last.rss_kib, last.peak_kib, first.fds, last.fds
            );
        }
        return Ok(());
    }
    if a.video {
        if !(a.video_seconds >= 1.0 && a.video_seconds.is_finite()) {
            bail!("--video-seconds {}: give at least 1", a.video_seconds);
        }
        eprintln!(
            "video: '{}' ({}x{} via {}), {} s per measurement",
            env.name(),
            info.screen.width,
            info.screen.height,
            info.screen.capture,
            a.video_seconds
        );
        let formats = [
            ImageFormat::Jpeg { quality: 80 },
            ImageFormat::Raw { zstd: Some(1) },
        ];
        let stats = bench::video(&env, &[5, 15, 30], &formats, a.video_seconds, &mut |what| {
            eprintln!("  {what}...")
        })
        .await?
        .context("the agent's CPU time is not readable (/proc/<pid>/stat): nothing measured")?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&stats)?);
        } else {
            print!("{}", bench::video_table(&stats));
        }
        return Ok(());
    }
    if a.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    eprintln!(
        "benchmarking '{}' ({}x{} via {}, {}): {} samples per operation",
        env.name(),
        info.screen.width,
        info.screen.height,
        info.screen.capture,
        info.os,
        a.iterations
    );
    let mut stats = if a.apps_only {
        Vec::new()
    } else {
        bench::run(
            &env,
            &BenchOptions {
                iterations: a.iterations,
                typing: !a.no_typing,
            },
            &mut |what| eprintln!("  {what}..."),
        )
        .await?
    };
    if a.apps || a.apps_only {
        stats.extend(
            bench::app_trees(&env, a.iterations, &mut |what| eprintln!("  {what}...")).await?,
        );
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else if a.markdown {
        print!("{}", bench::markdown(&stats));
    } else {
        print!("{}", bench::table(&stats));
    }
    Ok(())
}

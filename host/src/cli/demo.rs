//! `pincer demo`: the main job on the embedded default. Brings up a local desktop, starts a
//! real GTK app, and shows what pincer sees and how fast: a screenshot, a summary of the UI
//! tree, and the `pincer bench` table.

use anyhow::Context;
use pincer::bench::{self, BenchOptions};
use pincer::env::Environment;
use pincer::env::registry::Registry;
use pincer::run::launch::{Environments, Signals, Source};
use pincer_shared::Platform;
use pincer_shared::observe::{ScreenshotRequest, TreeRequest, TreeScope};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// Where to write the screenshot and the tree.
    #[arg(long, default_value = "pincer-demo")]
    out: PathBuf,
    /// Samples per benchmark operation.
    #[arg(long, short = 'n', default_value_t = 200)]
    iterations: usize,
    /// Leave the desktop running afterwards.
    #[arg(long)]
    keep: bool,
    /// Only print the benchmark table.
    #[arg(long)]
    bench_only: bool,
}

const NAME: &str = "demo";

pub(crate) async fn run(a: DemoArgs, reg: &Registry) -> anyhow::Result<()> {
    let t = Instant::now();
    let roles = [("desktop".to_owned(), Platform::Linux)].into();
    // Unless kept, the desktop ends with the demo, also when the demo is killed; one left
    // from an earlier demo is stopped first.
    let source = Source::Desktop {
        name: NAME.into(),
        size: (1920, 1080),
        keep: a.keep,
    };
    let envs = Environments::start(reg, &source, &roles, false, Signals::Terminal, &|m| {
        println!("{m}")
    })
    .await?;
    if let Some(st) = envs.desktops().first() {
        println!(
            "1. local desktop '{NAME}' up in {:.2} s: Xvfb {} 1920x1080, window manager {}, pincer-agent at {}",
            t.elapsed().as_secs_f64(),
            st.display,
            st.window_manager.as_deref().unwrap_or("none"),
            st.agent_addr
        );
    }
    let result = match envs.sets[0].envs.get("desktop") {
        Some(env) => show(&a, env).await,
        None => Err(anyhow::anyhow!("the demo's desktop has no environment")),
    };
    envs.stop().await;
    if a.keep {
        println!("\nthe desktop is still running: `pincer desktop down {NAME}` stops it");
    } else {
        println!("\ndesktop '{NAME}' stopped");
    }
    result
}

async fn show(a: &DemoArgs, env: &Environment) -> anyhow::Result<()> {
    let info = env.info().context("no session")?;
    println!(
        "   connected over QUIC (pinned certificate, token proof): {} on {}, capture {}, capabilities {}",
        info.name,
        info.os,
        info.screen.capture,
        info.capabilities.join(", ")
    );
    if !a.bench_only {
        demo_app(a, env).await?;
    }
    println!(
        "\n4. pincer bench ({} samples per operation, from the host over QUIC loopback):",
        a.iterations
    );
    let stats = bench::run(
        env,
        &BenchOptions {
            iterations: a.iterations,
            typing: true,
        },
        &mut |_| {},
    )
    .await?;
    print!("{}", bench::table(&stats));
    let missed: Vec<_> = stats
        .iter()
        .filter(|s| !s.meets_target())
        .map(|s| s.name.as_str())
        .collect();
    if missed.is_empty() {
        println!("every operation with a target met it");
    } else {
        println!("missed targets: {}", missed.join(", "));
    }
    Ok(())
}

async fn demo_app(a: &DemoArgs, env: &Environment) -> anyhow::Result<()> {
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    env.launch(vec!["gtk3-widget-factory".into()], Vec::new())
        .await?;
    let scope = TreeRequest {
        scope: TreeScope::App("widget-factory".into()),
        ..Default::default()
    };
    // The window takes a moment to map and register with the accessibility bus.
    let start = Instant::now();
    let tree = loop {
        let tree = env.tree(scope.clone()).await?;
        if tree.root.find(|n| n.role == "push button").is_some()
            || start.elapsed() > Duration::from_secs(30)
        {
            break tree;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Give the app a moment to finish drawing before the picture.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    let shot = env.screenshot(ScreenshotRequest::default()).await?;
    let png = a.out.join("screen.png");
    std::fs::write(&png, &shot.bytes)?;
    println!(
        "\n2. screen: {}x{} PNG, {} KiB in {:.1} ms -> {}",
        shot.meta.width,
        shot.meta.height,
        shot.bytes.len() / 1024,
        t.elapsed().as_secs_f64() * 1000.0,
        png.display()
    );
    let t = Instant::now();
    let tree = env.tree(scope.clone()).await.unwrap_or(tree);
    let took = t.elapsed();
    let json = a.out.join("tree.json");
    std::fs::write(&json, serde_json::to_string_pretty(&tree.root.to_json())?)?;
    let mut roles: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, n) in tree.root.walk() {
        *roles.entry(n.role.as_str()).or_default() += 1;
    }
    let mut top: Vec<_> = roles.into_iter().collect();
    top.sort_by_key(|x| std::cmp::Reverse(x.1));
    println!(
        "\n3. UI tree of gtk3-widget-factory (showing nodes): {} nodes in {:.1} ms -> {}",
        tree.node_count,
        took.as_secs_f64() * 1000.0,
        json.display()
    );
    println!(
        "   roles: {}",
        top.iter()
            .take(8)
            .map(|(r, c)| format!("{r} {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let interactive: Vec<_> = tree
        .root
        .walk()
        .map(|(_, n)| n)
        .filter(|n| n.bounds.is_some() && !n.name.is_empty() && !n.actions.is_empty())
        .take(8)
        .collect();
    for n in interactive {
        let b = n.bounds.expect("filtered on bounds");
        println!(
            "   [{}] {:?} at {},{} {}x{} actions {}",
            n.role,
            n.name,
            b.x,
            b.y,
            b.width,
            b.height,
            n.actions.join("/")
        );
    }
    Ok(())
}

//! `pincer vm ...`: QEMU VMs from built images, reset from their golden state.

use super::image::{CacheArg, default_agent};
use clap::Subcommand;
use pincer::env::registry::Registry;
use pincer::vm::{self, UpOptions};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum VmCmd {
    /// Start a VM from an image (its first boot is saved as the golden state, which later
    /// starts and resets restore) and register it as an environment.
    Up {
        /// The image (`pincer image list`).
        #[arg(long)]
        image: String,
        /// The VM's name (and its environment's).
        #[arg(long)]
        name: String,
        /// Guest memory in MiB (default: the image's, from its recipe's `vm_memory_mib`, else
        /// 1024).
        #[arg(long, value_parser = memory_mib)]
        memory: Option<u32>,
        /// Virtual CPUs.
        #[arg(long, default_value_t = 2)]
        cpus: u32,
        /// The agent to run in it (default: pincer-agent next to this pincer).
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        #[command(flatten)]
        cache: CacheArg,
    },
    /// List VMs.
    List,
    /// Throw away everything a VM did since it started: restore its golden state.
    Reset {
        /// The VM.
        name: String,
    },
    /// Stop a VM and remove it.
    Down {
        /// The VM.
        name: String,
    },
    /// Measure a VM of an image: `vm up` from the golden state, `vm reset`, then every
    /// call through it (as `pincer bench` does for any environment).
    Bench {
        /// The image.
        #[arg(long)]
        image: String,
        /// Resets (and ups) to time.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Samples per call in the latency table.
        #[arg(long, default_value_t = 10)]
        iterations: usize,
        /// Print Markdown tables (for the README).
        #[arg(long)]
        markdown: bool,
        #[command(flatten)]
        cache: CacheArg,
    },
    /// Internal: ties a machine to the process that started it for its own use (started
    /// by `up`).
    #[command(hide = true)]
    Supervise {
        /// The machine's directory.
        #[arg(long)]
        dir: PathBuf,
        /// The VM's name, when it is a registered VM.
        #[arg(long)]
        name: Option<String>,
        /// The read end of the owner's lifeline.
        #[arg(long, value_name = "FD")]
        lifeline: i32,
    },
}

/// Parses a guest memory size in MiB, within what a VM may be given.
pub(super) fn memory_mib(text: &str) -> Result<u32, String> {
    let range = pincer::image::MEMORY_MIB;
    text.parse()
        .ok()
        .filter(|m| range.contains(m))
        .ok_or_else(|| format!("give {} to {} (MiB)", range.start(), range.end()))
}

pub(crate) async fn run(cmd: VmCmd, reg: &Registry) -> anyhow::Result<()> {
    match cmd {
        VmCmd::Up {
            image,
            name,
            memory,
            cpus,
            agent,
            cache,
        } => {
            if !(1..=64).contains(&cpus) {
                anyhow::bail!("--cpus {cpus}: give 1 to 64");
            }
            let opts = UpOptions {
                name,
                image,
                memory_mib: memory,
                cpus,
                agent: agent.unwrap_or_else(default_agent),
                // `vm up`'s VMs outlive the command.
                lifeline: false,
            };
            let up = vm::up(reg, &cache.cache(), &opts, &mut |m| eprintln!("{m}")).await?;
            let t = up.timing;
            println!(
                "VM '{}' is up: image {}, {} MiB, {} CPUs, {} ({}), agent on 127.0.0.1:{} (tcp)",
                up.state.name,
                up.state.image,
                up.state.memory_mib,
                up.state.cpus,
                up.state.accel,
                up.accel_reason,
                up.state.port
            );
            if t.golden_s > 1.0 {
                println!("  first boot and golden state: {:.1} s", t.golden_s);
            }
            println!(
                "  restored in {:.2} s, clock set in {:.2} s (guest {:+.2} s from the host), agent ready after {:.2} s",
                t.restore_s, t.clock_s, t.clock_offset_s, t.ready_s
            );
        }
        VmCmd::List => {
            let vms = vm::list();
            if vms.is_empty() {
                println!("no VMs (start one with `pincer vm up --image NAME --name N`)");
            }
            for (st, up) in vms {
                println!(
                    "{:<20} {:<8} image {:<22} {} MiB {} CPUs {}  127.0.0.1:{}  pid {}",
                    st.name,
                    if up { "up" } else { "stopped" },
                    st.image,
                    st.memory_mib,
                    st.cpus,
                    st.accel,
                    st.port,
                    st.pid
                );
            }
        }
        VmCmd::Reset { name } => {
            let t = vm::reset(&name).await?;
            println!(
                "VM '{name}' reset: restored in {:.2} s, clock set (guest {:+.2} s from the host), agent ready after {:.2} s",
                t.restore_s, t.clock_offset_s, t.ready_s
            );
        }
        VmCmd::Down { name } => {
            vm::down(reg, &name).await?;
            println!("VM '{name}' stopped and removed");
        }
        VmCmd::Supervise {
            dir,
            name,
            lifeline,
        } => vm::supervise(&dir, name.as_deref(), lifeline).await?,
        VmCmd::Bench {
            image,
            rounds,
            iterations,
            markdown,
            cache,
        } => {
            bench(
                reg,
                &cache.cache(),
                &image,
                rounds.max(2),
                iterations.max(5),
                markdown,
            )
            .await?
        }
    }
    Ok(())
}

/// `pincer vm bench`: the VM's own operations, then every call through it.
async fn bench(
    reg: &Registry,
    cache: &pincer::image::Cache,
    image: &str,
    rounds: usize,
    iterations: usize,
    markdown: bool,
) -> anyhow::Result<()> {
    use pincer::bench::{self, BenchOptions, Stats};
    use std::time::Duration;
    let built = cache.get(image)?;
    let name = format!("bench-{}", std::process::id());
    let opts = UpOptions {
        name: name.clone(),
        image: image.into(),
        memory_mib: None,
        cpus: 2,
        agent: default_agent(),
        // The benchmark's VM is its own: it goes if the benchmark is killed.
        lifeline: true,
    };
    let first = vm::up(reg, cache, &opts, &mut |m| eprintln!("{m}")).await?;
    eprintln!(
        "VM {name}: {} ({}); timing {rounds} resets and {} ups",
        first.state.accel,
        first.accel_reason,
        rounds / 2
    );
    let secs = |s: f64| Duration::from_secs_f64(s);
    let mut resets = Vec::new();
    let mut offsets = Vec::new();
    let measured = async {
        for _ in 0..rounds {
            let t = vm::reset(&name).await?;
            resets.push(secs(t.ready_s));
            offsets.push(t.clock_offset_s.abs());
        }
        let mut ups = Vec::new();
        for _ in 0..rounds / 2 {
            vm::down(reg, &name).await?;
            let up = vm::up(reg, cache, &opts, &mut |m| eprintln!("{m}")).await?;
            ups.push(secs(up.timing.ready_s));
        }
        let env = reg
            .connect(Some(&name), pincer::env::Deadlines::default())
            .await?;
        let calls = bench::run(
            &env,
            &BenchOptions {
                iterations,
                typing: true,
            },
            &mut |what| eprintln!("  {what}..."),
        )
        .await?;
        anyhow::Ok((ups, calls))
    }
    .await;
    let _ = vm::down(reg, &name).await;
    let (ups, calls) = measured?;
    offsets.sort_by(f64::total_cmp);
    let golden = vm::golden::open(&first.state.golden);
    let mut stats = vec![
        Stats::from_samples(
            "vm reset (restore -> agent answers)",
            resets,
            Some(1000.0),
            Some("revert + 3-60 s sleep"),
            format!(
                "{} MiB guest, {}; clock off by at most {:.2} s",
                first.state.memory_mib,
                first.state.accel,
                offsets.last().copied().unwrap_or(0.0)
            ),
        ),
        Stats::from_samples(
            "vm up from the golden state",
            ups,
            Some(2000.0),
            None,
            format!(
                "cold first boot to agent ready: {:.1} s",
                golden.map_or(0.0, |g| g.info.boot_seconds)
            ),
        ),
    ];
    stats.extend(calls);
    let m = &built.manifest;
    if markdown {
        print!("{}", bench::markdown(&stats));
    } else {
        print!("{}", bench::table(&stats));
    }
    println!(
        "image {}: {} packages, disk file {}, kernel {} + initrd {}, built in {:.0} s",
        m.name,
        m.packages.len(),
        pincer::image::human_bytes(m.sizes.disk_file),
        pincer::image::human_bytes(m.sizes.kernel),
        pincer::image::human_bytes(m.sizes.initrd),
        m.build_seconds
    );
    Ok(())
}

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
        /// Guest memory in MiB.
        #[arg(long, default_value_t = 1024)]
        memory: u32,
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
            if !(256..=65_536).contains(&memory) {
                anyhow::bail!("--memory {memory}: give 256 to 65536 MiB");
            }
            if !(1..=64).contains(&cpus) {
                anyhow::bail!("--cpus {cpus}: give 1 to 64");
            }
            let opts = UpOptions {
                name,
                image,
                memory_mib: memory,
                cpus,
                agent: agent.unwrap_or_else(default_agent),
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
    }
    Ok(())
}

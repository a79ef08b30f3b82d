//! `pincer env ...` and `pincer token`: the envs file, reachability, and guests that dial in.

use super::EnvArg;
use anyhow::{Context, bail};
use clap::Subcommand;
use pincer::env::listener::{self, Listener, TrustPolicy};
use pincer::env::registry::{EnvEntry, Reach, Registry, resolve};
use pincer::env::{Deadlines, EnvSpec, Environment, Transport};
use pincer_shared::Platform;
use pincer_shared::identity::{Fingerprint, Token};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum EnvCmd {
    /// List registered environments and whether they answer.
    List,
    /// Round-trip time to an environment.
    Ping {
        #[command(flatten)]
        env: EnvArg,
        /// Pings to send.
        #[arg(long, short = 'c', default_value_t = 5)]
        count: usize,
    },
    /// What an environment says about itself.
    Info {
        #[command(flatten)]
        env: EnvArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Register an environment (a VM or another machine running pincer-agent).
    Add {
        /// Name to give it.
        name: String,
        /// HOST:PORT of its agent.
        addr: String,
        /// Token file (copy the agent's token file to this machine).
        #[arg(long, value_name = "FILE")]
        token_file: PathBuf,
        /// The agent's certificate fingerprint (printed by `pincer-agent --print-fingerprint`).
        #[arg(long, conflicts_with = "trust")]
        fingerprint: Option<Fingerprint>,
        /// Connect once and pin whatever certificate it presents (trust on first use).
        #[arg(long)]
        trust: bool,
        /// Platform of the guest: linux or android. Checked against what its agent says.
        #[arg(long, default_value_t = Platform::Linux)]
        platform: Platform,
        /// How packets reach the agent, which serves both on its port: udp, or tcp for
        /// links that carry only TCP (a VM's restricted port forward, `adb forward`).
        #[arg(long, default_value_t, value_name = "udp|tcp")]
        transport: Transport,
    },
    /// Forget an environment.
    Remove {
        /// Name.
        name: String,
    },
    /// Listen for guests that dial in (`pincer-agent --connect HOST:PORT`), print them as
    /// they register and ping them. With --accept-new, guests trusted on first use are
    /// written to the envs file, and every command reaches them by name afterwards.
    Listen {
        /// Address to listen on.
        #[arg(default_value = "0.0.0.0:7100")]
        addr: String,
        /// Token file the guests use (created if missing).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Accept guests whose certificate is not pinned in the envs file (pin on first use).
        #[arg(long)]
        accept_new: bool,
        /// Stop after this many guests registered.
        #[arg(long)]
        count: Option<usize>,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct TokenArgs {
    /// Where to write the new token (mode 0600).
    file: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    force: bool,
}

pub(crate) fn token(a: TokenArgs) -> anyhow::Result<()> {
    if a.file.exists() && !a.force {
        bail!("{} exists; pass --force to replace it", a.file.display());
    }
    let _ = std::fs::remove_file(&a.file);
    Token::load_or_create(&a.file)?;
    println!("new token written to {}", a.file.display());
    Ok(())
}

pub(crate) async fn run(cmd: EnvCmd, reg: &Registry) -> anyhow::Result<()> {
    match cmd {
        EnvCmd::List => list(reg).await,
        EnvCmd::Ping { env, count } => {
            let e = env.connect(reg).await?;
            for _ in 0..count.max(1) {
                let rtt = e.ping().await?;
                println!(
                    "pong from '{}': {:.3} ms",
                    e.name(),
                    rtt.as_secs_f64() * 1000.0
                );
            }
            Ok(())
        }
        EnvCmd::Info { env, json } => {
            let e = env.connect(reg).await?;
            let info = e.info().context("no session")?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "name": info.name, "platform": info.platform, "os": info.os,
                        "agent_version": info.agent_version, "protocol": info.version,
                        "transport": e.transport().to_string(),
                        "screen": { "width": info.screen.width, "height": info.screen.height, "capture": info.screen.capture },
                        "capabilities": info.capabilities, "read_only": info.read_only, "pid": info.pid,
                    }))?
                );
            } else {
                println!("name          {}", info.name);
                println!("platform      {} ({})", info.platform, info.os);
                println!(
                    "agent         pincer-agent {} (pid {}), protocol v{} over {}",
                    info.agent_version,
                    info.pid,
                    info.version,
                    match e.transport() {
                        Transport::Udp => "udp",
                        Transport::Tcp => "tcp (a tunnel)",
                    }
                );
                if info.screen.capture.starts_with("refused") {
                    println!("screen        {}", info.screen.capture);
                } else {
                    println!(
                        "screen        {}x{} via {}",
                        info.screen.width, info.screen.height, info.screen.capture
                    );
                }
                println!("capabilities  {}", info.capabilities.join(", "));
                println!("read-only     {}", info.read_only);
            }
            Ok(())
        }
        EnvCmd::Add {
            name,
            addr,
            token_file,
            fingerprint,
            trust,
            platform,
            transport,
        } => {
            let token = Token::load(&token_file)?;
            let sock = resolve(&addr)?;
            let spec = EnvSpec {
                name: name.clone(),
                addr: sock,
                transport,
                fingerprint,
                token,
            };
            let (fp, info) = match (fingerprint, trust) {
                (Some(fp), _) => {
                    let env = Environment::connect(spec, Deadlines::default()).await?;
                    env.ping().await?;
                    (fp, env.info().context("no session")?)
                }
                (None, true) => {
                    Environment::probe_fingerprint(&spec, &Deadlines::default()).await?
                }
                (None, false) => bail!(
                    "give the agent's --fingerprint (see `pincer-agent --print-fingerprint`) or --trust to pin it on first use"
                ),
            };
            // The entry's platform decides which tasks' roles it may play: one the agent
            // contradicts would have a phone's steps sent to a desktop, or the reverse.
            if info.platform != platform {
                bail!(
                    "the agent at {addr} says it runs on {}, not {platform}: add it with --platform {}{}",
                    info.platform,
                    info.platform,
                    if info.platform == Platform::Linux {
                        " (or without --platform)"
                    } else {
                        ""
                    }
                );
            }
            if trust {
                println!(
                    "'{name}' is {} ({}) and presents {fp}; pinned",
                    info.name, info.os
                );
            }
            reg.update(|f| {
                f.envs.insert(
                    name.clone(),
                    EnvEntry {
                        addr: Some(addr),
                        listen: None,
                        transport: Some(transport).filter(|t| *t == Transport::Tcp),
                        fingerprint: Some(fp.to_string()),
                        token_file: std::path::absolute(&token_file).unwrap_or(token_file),
                        platform,
                        desktop: None,
                        vm: None,
                    },
                )
            })?;
            println!("environment '{name}' added to {}", reg.path().display());
            Ok(())
        }
        EnvCmd::Remove { name } => {
            let removed = reg.update(|f| f.envs.remove(&name))?;
            if removed.is_none() {
                bail!("no environment named '{name}' in {}", reg.path().display());
            }
            println!("environment '{name}' removed");
            Ok(())
        }
        EnvCmd::Listen {
            addr,
            token_file,
            accept_new,
            count,
        } => listen(reg, &addr, token_file, accept_new, count).await,
    }
}

async fn list(reg: &Registry) -> anyhow::Result<()> {
    let file = reg.load()?;
    if file.envs.is_empty() {
        println!(
            "no environments in {} (start one with `pincer desktop up`)",
            reg.path().display()
        );
        return Ok(());
    }
    println!(
        "{:<12} {:<28} {:<8} {:<8} status",
        "name", "address", "platform", "kind"
    );
    let checks = file.envs.iter().map(|(name, e)| async move {
        let status = match reg.reach_of(name, e) {
            Err(err) => format!("bad entry: {err}"),
            Ok(_) => {
                let d = Deadlines {
                    connect: std::time::Duration::from_secs(1),
                    dial_in: std::time::Duration::from_secs(2),
                    ..Default::default()
                };
                match reg.connect(Some(name), d).await {
                    Ok(env) => match env.ping().await {
                        Ok(rtt) => format!("up ({:.2} ms)", rtt.as_secs_f64() * 1000.0),
                        Err(err) => format!("down: {err}"),
                    },
                    Err(err) => format!("down: {}", super::describe(&err)),
                }
            }
        };
        (name, e, status)
    });
    for (name, e, status) in futures::future::join_all(checks).await {
        let default = if file.default.as_deref() == Some(name.as_str()) {
            "*"
        } else {
            ""
        };
        let kind = match (&e.desktop, &e.vm, reg.reach_of(name, e)) {
            (Some(_), _, _) => "desktop",
            (None, Some(_), _) => "vm",
            (None, None, Ok(Reach::DialIn(_))) => "dial-in",
            (None, None, _) => "remote",
        };
        println!(
            "{:<12} {:<28} {:<8} {:<8} {status}",
            format!("{name}{default}"),
            e.address(),
            e.platform,
            kind
        );
    }
    Ok(())
}

async fn listen(
    reg: &Registry,
    addr: &str,
    token_file: Option<PathBuf>,
    accept_new: bool,
    count: Option<usize>,
) -> anyhow::Result<()> {
    let sock = resolve(addr)?;
    let identity = listener::host_identity()?;
    let token_file = token_file.unwrap_or_else(listener::default_token_file);
    let token = Token::load_or_create(&token_file)?;
    let token_file = std::path::absolute(&token_file).unwrap_or(token_file);
    let mut policy = TrustPolicy {
        accept_new,
        ..Default::default()
    };
    for (name, e) in reg.load()?.envs {
        if let Some(fp) = e.fingerprint.as_deref().and_then(|f| f.parse().ok()) {
            policy.pinned.insert(name, fp);
        }
    }
    let listener = Listener::bind(sock, &identity, token, policy, Deadlines::default())?;
    println!(
        "listening for guests on {} (host fingerprint {}); start guests with:\n  pincer-agent --connect HOST:{} --token-file {} --host-fingerprint {}",
        listener.local_addr()?,
        listener.fingerprint(),
        listener.local_addr()?.port(),
        token_file.display(),
        listener.fingerprint()
    );
    let mut seen = 0;
    while let Some(arrival) = listener.next().await {
        let info = arrival.env.info().context("no session")?;
        let rtt = arrival.env.ping().await?;
        println!(
            "guest '{}' registered: {} {}x{}, certificate {}{}, ping {:.2} ms",
            info.name,
            info.os,
            info.screen.width,
            info.screen.height,
            arrival.fingerprint,
            if arrival.newly_trusted {
                " (newly trusted)"
            } else {
                ""
            },
            rtt.as_secs_f64() * 1000.0
        );
        if arrival.newly_trusted {
            let entry = EnvEntry {
                addr: None,
                listen: Some(addr.to_owned()),
                transport: None,
                fingerprint: Some(arrival.fingerprint.to_string()),
                token_file: token_file.clone(),
                platform: info.platform,
                desktop: None,
                vm: None,
            };
            let recorded = reg.update(|f| match f.envs.get_mut(&info.name) {
                None => {
                    f.envs.insert(info.name.clone(), entry);
                    true
                }
                // A dial-in entry written by hand without its fingerprint: pin it now.
                Some(e) if e.listen.is_some() && e.fingerprint.is_none() => {
                    e.fingerprint = entry.fingerprint;
                    true
                }
                Some(_) => false,
            })?;
            if recorded {
                println!(
                    "  pinned in {}: every command reaches it with --env {}",
                    reg.path().display(),
                    info.name
                );
            } else {
                println!(
                    "  not written to {}: it already has another entry named '{}'",
                    reg.path().display(),
                    info.name
                );
            }
        }
        seen += 1;
        if count.is_some_and(|c| seen >= c) {
            break;
        }
    }
    Ok(())
}

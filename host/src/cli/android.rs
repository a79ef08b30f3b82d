//! `pincer android ...`: devices through adb, the shim on them, and what they allow.

use clap::Subcommand;
use pincer::android::adb::Adb;
use pincer::android::{self, ConnectOptions};
use pincer::env::registry::Registry;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum AndroidCmd {
    /// List the devices adb sees.
    Devices,
    /// Push the shim to a device, start it, forward a port to it over adb and register it
    /// as an environment.
    Connect {
        /// The device's serial (default: the only device).
        serial: Option<String>,
        /// The environment's name.
        #[arg(long, default_value = "phone")]
        name: String,
        /// Serve read-only: no setup (for phones people own).
        #[arg(long)]
        read_only: bool,
        /// Where on the device the shim lives.
        #[arg(long, default_value = "/data/local/tmp", value_name = "DIR")]
        device_dir: String,
        /// The shim's port on the device.
        #[arg(long, default_value_t = 7000, value_name = "PORT")]
        device_port: u16,
        /// The shim binary (default: the build for the device's ABI next to pincer).
        #[arg(long, value_name = "PATH")]
        shim: Option<PathBuf>,
    },
    /// Check adb, a device and what its shell user may do, and say what to fix.
    Doctor {
        /// The device's serial (default: the only device).
        serial: Option<String>,
        /// A directory the shell user may write (uiautomator's test dump goes there).
        #[arg(long, default_value = "/data/local/tmp", value_name = "DIR")]
        device_dir: String,
    },
}

pub(crate) async fn run(cmd: AndroidCmd, reg: &Registry) -> anyhow::Result<()> {
    let adb = Adb::default();
    match cmd {
        AndroidCmd::Devices => {
            let devices = adb.devices().await?;
            if devices.is_empty() {
                println!("no devices (adb server at {})", adb.addr());
            }
            for d in devices {
                let model = d.detail("model").unwrap_or("-");
                println!("{:<24} {:<13} {model}", d.serial, d.state);
            }
        }
        AndroidCmd::Connect {
            serial,
            name,
            read_only,
            device_dir,
            device_port,
            shim,
        } => {
            let opts = ConnectOptions {
                serial,
                name: name.clone(),
                device_dir,
                device_port,
                read_only,
                shim,
            };
            let c = android::connect(reg, &adb, &opts, &mut |m| eprintln!("{m}")).await?;
            println!(
                "environment '{name}': {} ({}, API {}) at 127.0.0.1:{} over tcp (adb forward), fingerprint {}",
                c.serial, c.abi, c.sdk, c.port, c.fingerprint
            );
        }
        AndroidCmd::Doctor { serial, device_dir } => {
            let findings = android::doctor(&adb, serial.as_deref(), &device_dir).await?;
            let mut failed = 0;
            for f in &findings {
                println!(
                    "{} {:<12} {}",
                    if f.ok { "ok  " } else { "FIX " },
                    f.check,
                    f.seen
                );
                if let Some(fix) = &f.fix {
                    println!("     {:<12} {fix}", "");
                    failed += 1;
                }
            }
            if failed > 0 {
                anyhow::bail!("{failed} thing(s) to fix");
            }
        }
    }
    Ok(())
}

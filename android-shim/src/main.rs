//! `pincer-shim`: the pincer guest inside an Android phone or emulator. A static binary run
//! from `/data/local/tmp` as the adb `shell` user (no APK, no root), it serves the same
//! contract as the Linux agent over the same authenticated QUIC (UDP, or tunnelled through
//! TCP for `adb forward`), built on the same guest core; Android's own commands, run by
//! name through `PATH`, do the device's part ([`android::Android`]).

mod android;
mod clip;
mod commands;
mod device;
mod hierarchy;
mod input;
mod screencap;
mod uinput;

use android::Android;
use clap::Parser;
use input::InputRoute;
use pincer_guest_core::startup::{self, GuestArgs, Program};
use std::path::PathBuf;

/// The pincer Android shim.
#[derive(Debug, Parser)]
#[command(name = "pincer-shim", version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    guest: GuestArgs,
    /// Where virtual input devices are made.
    #[arg(long, value_name = "NODE", default_value = "/dev/uinput")]
    uinput: PathBuf,
    /// Use `input` commands instead of virtual input devices.
    #[arg(long, conflicts_with = "uinput_log")]
    no_uinput: bool,
    /// Append the touchscreen's and keyboard's events to FILE instead of making devices
    /// (to see what a device would get).
    #[arg(long, value_name = "FILE")]
    uinput_log: Option<PathBuf>,
    /// Make the virtual touchscreen and keyboard through --uinput, say what the kernel named
    /// them, remove them and exit: 0 when they can be made, 1 (and why) when touches and
    /// keys would go through `input` commands (`pincer android doctor` runs this).
    #[arg(long, conflicts_with_all = ["uinput_log", "no_uinput"])]
    check_input: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PINCER_LOG").unwrap_or_else(|_| {
                "pincer_shim=info,pincer_guest_core=info,pincer_shared=info".into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    if args.check_input {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        match rt.block_on(async { input::check(&args.uinput) }) {
            Ok(made) => println!("virtual input devices: {made}"),
            Err(why) => {
                println!(
                    "no virtual input devices ({why}): touches and keys go through `input` commands"
                );
                std::process::exit(1);
            }
        }
        return Ok(());
    }
    let state_dir = args
        .guest
        .state_dir
        .clone()
        .unwrap_or_else(|| startup::default_state_dir("pincer-shim"));
    let input = match (&args.uinput_log, args.no_uinput) {
        (Some(log), _) => InputRoute::Log(log.clone()),
        (None, true) => InputRoute::Commands,
        (None, false) => InputRoute::Uinput(args.uinput.clone()),
    };
    let platform = Android {
        input,
        work_dir: state_dir,
    };
    let program = Program {
        name: "pincer-shim",
        state_dir_name: "pincer-shim",
        process_session: None,
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(startup::serve(&program, &args.guest, platform))?;
    Ok(())
}

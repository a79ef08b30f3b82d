//! The guest core: everything a pincer guest does that does not depend on its platform, as a
//! library the Linux agent (`pincer-agent`) and the Android shim build on. [`server`]
//! accepts connections (or dials a host), authenticates them and serves one request per
//! stream; [`Guest`] dispatches every request kind, serving the file system (through
//! [`confine`]), programs ([`exec`]), processes, batches and their byte budgets itself, and
//! the rest through its [`Platform`]: input, screen, UI tree, windows or apps, clipboard
//! and settings, each behind a trait in [`platform`]. Screen frames are encoded here
//! ([`encode`]), so both guests send the same PNG, JPEG and raw+zstd bodies, and video
//! streams (`video`) grab them when the platform reports the screen changed. A task's API
//! tools run in a bubblewrap sandbox without network (`tool`), for guests started with
//! `--allow-tools`.

mod body;
mod budget;
pub mod confine;
pub mod encode;
pub mod exec;
mod fs;
mod guest;
pub mod platform;
pub mod processes;
mod record;
mod reply;
pub mod server;
pub mod startup;
mod subsystem;
#[cfg(test)]
mod testutil;
mod tool;
mod video;

pub use body::{FileStream, Reply, RequestBody};
pub use guest::{Config, Guest};
pub use platform::Platform;
pub use record::Events;
pub use video::Frames;

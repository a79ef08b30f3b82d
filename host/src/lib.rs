//! The pincer host: environments reached over authenticated QUIC ([`env`]), local X11
//! desktops ([`desktop`]), VM images built from recipes ([`image`]) and QEMU VMs reset
//! from their golden state ([`vm`]), Android devices through adb ([`android`]), tasks ([`task`]), the graph evaluator ([`eval`]), agents
//! ([`agent`]) and what they are shown ([`observe`]), the benchmark runner ([`run`]), its
//! reports ([`report`]), datasets made from runs ([`dataset`]) and latency benchmarks
//! ([`bench`]). The modules are layered as
//! `ARCHITECTURE.md` lists them (a test holds them to it). The `pincer` binary is a thin CLI
//! over this library.

pub mod accel;
pub mod agent;
pub mod android;
pub mod bench;
pub mod clock;
pub mod compose;
pub mod dataset;
pub mod desktop;
pub mod env;
pub mod eval;
pub mod image;
pub mod mcp;
pub mod metrics;
pub mod observe;
pub mod paths;
pub mod peers;
mod picture;
pub mod process;
pub mod record;
pub mod report;
pub mod run;
pub mod rundir;
pub mod task;
pub mod video;
pub mod vm;
pub mod web;

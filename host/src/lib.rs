//! The pincer host: environments reached over authenticated QUIC ([`env`]), local X11
//! desktops ([`desktop`]), latency benchmarks ([`bench`]) and, in later layers, tasks, the
//! graph evaluator, agents and the benchmark runner. The `pincer` binary is a thin CLI
//! over this library.

pub mod agent;
pub mod bench;
pub mod compose;
pub mod crab;
pub mod desktop;
pub mod env;
pub mod eval;
pub mod metrics;
pub mod paths;
pub mod report;
pub mod run;
pub mod task;

//! Peer benchmarks run as their authors run them: each importer turns a peer's task files
//! into pincer tasks (keeping the original inside for provenance), with the setup steps,
//! getters and scoring that make a pincer run score as the peer scores. CRAB's
//! Benchmark-v0 (`crab`: composed from pincer's sub-task templates) and OSWorld
//! (`osworld`: its 369 tasks, its file cache layout, its own metric code in a sandboxed
//! worker) sit side by side here.

pub mod crab;
pub mod osworld;

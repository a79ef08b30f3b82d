//! Peer benchmarks run as their authors run them: each importer turns a peer's task files
//! into pincer tasks (keeping the original inside for provenance), with the setup steps,
//! getters and scoring that make a pincer run score as the peer scores. CRAB's
//! Benchmark-v0 (`crab`: composed from pincer's sub-task templates) and OSWorld
//! (`osworld`: its 369 tasks, its file cache layout, its own metric code in a sandboxed
//! worker) sit side by side here.

pub mod crab;
pub mod osworld;

use crate::eval::functions::Library;
use std::path::Path;
use std::sync::Arc;

/// pincer's checkpoint functions and the peers' own: `osworld`, whose gold files come from
/// the OSWorld file cache at `assets` and whose metrics run in one scorer for every task
/// built from this library (it starts on the first score and stops with the last task).
pub fn library(assets: &Path) -> Library {
    let mut lib = Library::standard();
    let scorer = Arc::new(osworld::scorer::Scorer::new(osworld::scorer::default_env()));
    osworld::check::register(&mut lib, assets.to_owned(), scorer);
    lib
}

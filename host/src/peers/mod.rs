//! Peer benchmarks run as their authors run them: each importer turns a peer's task files
//! into pincer tasks (keeping the original inside for provenance), with the setup steps,
//! getters and scoring that make a pincer run score as the peer scores. CRAB's
//! Benchmark-v0 (`crab`: composed from pincer's sub-task templates) and OSWorld
//! (`osworld`: its 369 tasks, its file cache layout, its own metric code in a sandboxed
//! worker) sit side by side here.

pub mod crab;
pub mod osworld;

use crate::eval::functions::Library;
use crate::task::Task;
use crate::task::steps::Step;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
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

/// The files a task reads from the asset cache: its `put_asset` steps' and, for imported
/// OSWorld tasks, the gold files its evaluator compares with.
pub fn assets_of(task: &Task) -> Vec<PathBuf> {
    let steps = task.setup.values().chain(task.finalize.values()).flatten();
    let mut files: Vec<PathBuf> = steps
        .filter_map(|s| match s {
            Step::PutAsset { asset, .. } => Some(PathBuf::from(asset)),
            _ => None,
        })
        .collect();
    for c in task.checkpoints.iter().filter(|c| c.check == "osworld") {
        files.extend(osworld::import::gold_files_of(&c.args));
    }
    files.sort();
    files.dedup();
    files
}

/// What a run knows, before it starts, of the programs its machines have.
#[derive(Debug, Clone)]
pub enum Machine {
    /// Registered environments: unknown, so no task is left out for its apps.
    Unknown,
    /// Local desktops, which run this machine's programs.
    Local,
    /// VMs of an image, which has these packages (its manifest).
    Image {
        /// The image.
        name: String,
        /// Its packages.
        packages: BTreeSet<String>,
    },
}

impl Machine {
    /// Why a task that starts `app` cannot run on it, if it cannot.
    fn lacks(&self, app: &str) -> Option<String> {
        match self {
            Self::Unknown => None,
            Self::Local => (!crate::paths::on_path(app)).then(|| {
                format!(
                    "needs {app}, which this machine lacks (install it, or run on the `osworld` image: --vm osworld)"
                )
            }),
            Self::Image { name, packages } => {
                // The packages that give the program (Chromium is `google-chrome` in the
                // osworld image).
                let itself = [app];
                let givers: &[&str] = match app {
                    "google-chrome" => &["google-chrome-stable", "chromium"],
                    "libreoffice" | "soffice" => &["libreoffice-core"],
                    _ => &itself,
                };
                (!givers.iter().any(|p| packages.contains(*p))).then(|| {
                    format!(
                        "needs {app}, which the image {name} lacks (add its package to the recipe, or its .deb with `pincer image build --deb`)"
                    )
                })
            }
        }
    }
}

/// Splits `tasks` into those a run can start and those it cannot, each with why: a task
/// using what pincer lacks, needing an account, needing the live web when the run allows
/// no network (`network`), starting an app the `machine` lacks, or missing files from the
/// asset cache `assets` (it would fail half-way and be scored as the agent's failure).
pub fn runnable(
    tasks: Vec<Task>,
    assets: &Path,
    network: bool,
    machine: &Machine,
) -> (Vec<Task>, Vec<(String, String)>) {
    let mut run = Vec::new();
    let mut skipped = Vec::new();
    for t in tasks {
        let why = t
            .requires
            .refusal(network)
            .or_else(|| t.requires.apps.iter().find_map(|a| machine.lacks(a)))
            .or_else(|| {
                let files = assets_of(&t);
                let missing = files.iter().filter(|f| !assets.join(f).is_file()).count();
                (missing > 0).then(|| {
                    format!(
                        "needs files: {missing} of its {} files are not in {} (fetch them with `pincer osworld fetch`)",
                        files.len(),
                        assets.display()
                    )
                })
            });
        match why {
            Some(why) => skipped.push((t.id, why)),
            None => run.push(t),
        }
    }
    (run, skipped)
}

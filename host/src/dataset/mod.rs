//! Datasets from real runs, in AgentStudio's formats: GUI grounding items made from the UI
//! tree of a live desktop (`ground`: screenshot, instruction, box), inverse-dynamics items
//! from executed trajectories (`trajectory`: frames before and after one action, the
//! action) and success-detection items (`trajectory`: a task run's frames and instruction,
//! the checkpoint graph's verdict), and the scoring of a model's answers on each (`score`).
//! Every label comes from the harness (the tree, the executed action, the evaluator), never
//! from a person or a model.

pub mod ground;
pub mod score;
pub mod trajectory;

use std::path::{Path, PathBuf};

/// The metadata file of a grounding set (AgentStudio's GroundUI layout: the JSONL file next
/// to an `images/` directory that the `image` fields are relative to).
pub const GROUND_FILE: &str = "metadata.jsonl";
/// The metadata file of an inverse-dynamics set (AgentStudio's IDMBench name).
pub const IDM_FILE: &str = "metadata_idm.jsonl";
/// The metadata file of a success-detection set (AgentStudio's CriticBench name).
pub const CRITIC_FILE: &str = "metadata_success_detection.jsonl";
/// The directory of a set's images, next to its metadata file.
pub const IMAGES_DIR: &str = "images";
/// The review page of a grounding set.
pub const REVIEW_FILE: &str = "review.html";

/// Why a dataset could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A run directory holds no results.
    #[error(
        "{0}: no results.jsonl with finished task runs (give the --out directory of a `pincer run`)"
    )]
    NotARun(PathBuf),
    /// The output directory already holds a dataset.
    #[error("{0} already holds a dataset: choose an empty or new directory")]
    NotEmpty(PathBuf),
    /// The environment failed.
    #[error("environment '{env}': {source}")]
    Env {
        /// The environment.
        env: String,
        /// What failed.
        source: Box<crate::env::ClientError>,
    },
    /// The screen kept changing: no tree matched the screenshot taken between two walks.
    #[error(
        "environment '{0}': the screen kept changing across {1} captures (an animation or a clock?); close what moves and try again"
    )]
    Unsettled(String, u32),
}

impl DatasetError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// Makes the output directory and its `images/`, refusing one that already holds `file`.
pub fn prepare(out: &Path, file: &str) -> Result<PathBuf, DatasetError> {
    if out.join(file).exists() {
        return Err(DatasetError::NotEmpty(out.to_owned()));
    }
    let images = out.join(IMAGES_DIR);
    std::fs::create_dir_all(&images).map_err(DatasetError::io(&images))?;
    Ok(images)
}

/// Writes values as JSON lines.
pub(crate) fn write_jsonl<T: serde::Serialize>(
    path: &Path,
    items: &[T],
) -> Result<(), DatasetError> {
    let mut text = String::new();
    for item in items {
        let line = serde_json::to_string(item)
            .map_err(|e| DatasetError::io(path)(std::io::Error::from(e)))?;
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(DatasetError::io(path))
}

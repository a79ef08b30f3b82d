//! Run reports. `report.md` is the summary for terminals and pull requests: the run header,
//! scores by platform class and by termination, one row per task run and the harness's
//! overhead per step. `report.html` is one self-contained page with the same tables and a
//! trajectory viewer (screenshots, actions, thoughts, model traffic, and the checkpoint
//! graph lighting up step by step). Both are built from the run directory alone, so any run
//! (finished, interrupted, or copied from another machine) can be reported again with
//! `pincer report DIR`.

pub(crate) mod escape;
mod graph;
mod html;
mod images;
mod load;
mod markdown;
mod tables;
pub use tables::utc;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The directory holds no run.
    #[error(
        "{} is not a run directory: it has no results.jsonl (pincer run --out DIR writes one)",
        .0.display()
    )]
    NotARun(PathBuf),
    /// Reading the results or writing a report file failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// "reading" or "writing".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Where a report was written.
#[derive(Debug, Clone)]
pub struct ReportPaths {
    /// The HTML report.
    pub html: PathBuf,
    /// The Markdown summary.
    pub markdown: PathBuf,
}

/// Writes `report.md` and `report.html` into a run directory. Fails only when `dir` is not a
/// run directory or the files cannot be written; missing trajectories, screenshots or task
/// definitions are shown as missing.
pub fn write(dir: &Path) -> Result<ReportPaths, ReportError> {
    let run = load::RunDir::read(dir)?;
    let paths = ReportPaths {
        html: dir.join("report.html"),
        markdown: dir.join("report.md"),
    };
    write_atomically(&paths.markdown, markdown::render(&run).as_bytes())?;
    write_atomically(&paths.html, html::render(&run).as_bytes())?;
    Ok(paths)
}

/// Writes through a temporary file so a reader never sees half a report.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| ReportError::Io {
            what: "writing",
            path: path.to_owned(),
            source,
        })
}

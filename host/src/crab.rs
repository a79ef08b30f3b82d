//! Import of CRAB Benchmark-v0 composed tasks. Each CRAB file names sub-task templates by
//! id with attribute values and an adjacency list; pincer's equivalents of those templates
//! (bundled in `templates/crab.toml`) are composed with the same values and links. The
//! report says how many files load, how many are fully evaluable with pincer's checkpoint
//! functions, and why the rest are not.

use crate::compose::{self, Catalogue, Part};
use crate::eval::functions::Library;
use crate::eval::graph::Graph;
use crate::task::Task;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// CRAB's step limit for Benchmark-v0 tasks.
const CRAB_STEP_LIMIT: u32 = 20;

#[derive(Debug, Deserialize)]
struct CrabFile {
    description: String,
    tasks: Vec<CrabSubTask>,
    adjlist: String,
    id: String,
}

#[derive(Debug, Deserialize)]
struct CrabSubTask {
    task: String,
    #[serde(default)]
    attribute: BTreeMap<String, serde_json::Value>,
}

/// How one file fared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Converted; every checkpoint is evaluable offline with pincer's functions.
    Evaluable,
    /// Converted, but some templates cannot be evaluated offline (ids listed).
    Unsupported(Vec<String>),
    /// Could not be converted.
    Failed,
}

impl Status {
    /// Short label for listings.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Evaluable => "ok",
            Self::Unsupported(_) => "partial",
            Self::Failed => "FAILED",
        }
    }
}

/// One file's result.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// Path relative to the import directory.
    pub file: String,
    /// Folder it was in (android, ubuntu, cross).
    pub group: String,
    /// The outcome.
    pub status: Status,
    /// Details: the reason for failure or the unsupported templates.
    pub detail: String,
    /// The converted task.
    pub task: Option<Task>,
}

/// The result of importing a directory.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Directory imported.
    pub dir: PathBuf,
    /// Per file, sorted by path.
    pub files: Vec<FileReport>,
    /// Unsupported template id -> (name, reason).
    pub reasons: BTreeMap<String, (String, String)>,
}

/// Why an import could not run at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// Reading the directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The directory holds no JSON files.
    #[error("{0} holds no .json files: point at CRAB's crab-benchmark-v0/dataset directory")]
    Empty(String),
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ImportError> {
    let rd = std::fs::read_dir(dir).map_err(|source| ImportError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            json_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// Parses networkx adjacency-list text ("0 1\n1"): each line is a node then its successors.
pub fn parse_adjlist(text: &str, nodes: usize) -> Result<Vec<(usize, usize)>, String> {
    let mut edges = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let ids: Vec<usize> = line
            .split_whitespace()
            .map(|t| {
                t.parse::<usize>()
                    .map_err(|_| format!("adjlist: '{t}' is not a node index"))
            })
            .collect::<Result<_, _>>()?;
        if let Some(&bad) = ids.iter().find(|&&i| i >= nodes) {
            return Err(format!(
                "adjlist names node {bad}, but there are {nodes} sub-tasks"
            ));
        }
        edges.extend(ids[1..].iter().map(|&to| (ids[0], to)));
    }
    Ok(edges)
}

/// Converts one CRAB file.
fn convert(text: &str, cat: &Catalogue, lib: &Library) -> Result<(Task, Vec<String>), String> {
    let file: CrabFile =
        serde_json::from_str(text).map_err(|e| format!("not a CRAB task file: {e}"))?;
    let mut parts = Vec::new();
    let mut unsupported = Vec::new();
    for sub in &file.tasks {
        let t = cat
            .templates
            .get(&sub.task)
            .ok_or_else(|| format!("no pincer template for CRAB sub-task {}", sub.task))?;
        if t.unsupported.is_some() {
            unsupported.push(t.id.clone());
        }
        let values = sub
            .attribute
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect();
        parts.push(Part {
            template: t,
            values,
        });
    }
    let edges = parse_adjlist(&file.adjlist, parts.len())?;
    let mut task = compose::compose(&file.id, &parts, &edges, Some(file.description.clone()))
        .map_err(|e| e.to_string())?;
    task.tags = vec!["crab".into(), "crab-benchmark-v0".into()];
    task.limits.max_steps = CRAB_STEP_LIMIT;
    Graph::build(&task, lib).map_err(|e| e.to_string())?;
    Ok((task, unsupported))
}

/// Imports every `.json` file under `dir`.
pub fn import_dir(dir: &Path, cat: &Catalogue, lib: &Library) -> Result<Report, ImportError> {
    let mut paths = Vec::new();
    json_files(dir, &mut paths)?;
    if paths.is_empty() {
        return Err(ImportError::Empty(dir.display().to_string()));
    }
    paths.sort();
    let mut report = Report {
        dir: dir.to_owned(),
        ..Default::default()
    };
    for p in paths {
        let rel = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
        let group = Path::new(&rel)
            .parent()
            .and_then(|g| g.to_str())
            .filter(|g| !g.is_empty())
            .unwrap_or(".")
            .to_owned();
        let text = std::fs::read_to_string(&p).map_err(|source| ImportError::Io {
            path: p.display().to_string(),
            source,
        })?;
        let fr = match convert(&text, cat, lib) {
            Ok((task, unsupported)) if unsupported.is_empty() => FileReport {
                file: rel,
                group,
                status: Status::Evaluable,
                detail: format!("{} checkpoints", task.checkpoints.len()),
                task: Some(task),
            },
            Ok((task, unsupported)) => {
                for id in &unsupported {
                    if let Some(t) = cat.templates.get(id) {
                        report.reasons.insert(
                            id.clone(),
                            (t.name.clone(), t.unsupported.clone().unwrap_or_default()),
                        );
                    }
                }
                FileReport {
                    file: rel,
                    group,
                    detail: format!("unsupported: {}", unsupported.join(", ")),
                    status: Status::Unsupported(unsupported),
                    task: Some(task),
                }
            }
            Err(e) => FileReport {
                file: rel,
                group,
                status: Status::Failed,
                detail: e,
                task: None,
            },
        };
        report.files.push(fr);
    }
    Ok(report)
}

impl Report {
    /// The printed report: counts per group, then why files are not evaluable.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "CRAB Benchmark-v0 import from {}", self.dir.display());
        let _ = writeln!(
            out,
            "{:<10} {:>6} {:>7} {:>10} {:>12} {:>7}",
            "group", "files", "loaded", "evaluable", "unsupported", "failed"
        );
        let mut groups: Vec<&str> = self.files.iter().map(|f| f.group.as_str()).collect();
        groups.sort();
        groups.dedup();
        let row = |name: &str, fs: Vec<&FileReport>, out: &mut String| {
            let count = |s: fn(&Status) -> bool| fs.iter().filter(|f| s(&f.status)).count();
            let _ = writeln!(
                out,
                "{:<10} {:>6} {:>7} {:>10} {:>12} {:>7}",
                name,
                fs.len(),
                count(|s| *s != Status::Failed),
                count(|s| *s == Status::Evaluable),
                count(|s| matches!(s, Status::Unsupported(_))),
                count(|s| *s == Status::Failed)
            );
        };
        for g in &groups {
            row(
                g,
                self.files.iter().filter(|f| f.group == *g).collect(),
                &mut out,
            );
        }
        row("total", self.files.iter().collect(), &mut out);
        if !self.reasons.is_empty() {
            let _ = writeln!(
                out,
                "\nnot fully evaluable offline, by template (files using it):"
            );
            for (id, (name, reason)) in &self.reasons {
                let n = self
                    .files
                    .iter()
                    .filter(|f| matches!(&f.status, Status::Unsupported(ids) if ids.contains(id)))
                    .count();
                let _ = writeln!(out, "  {id} {name} ({n}): {reason}");
            }
        }
        let failed: Vec<&FileReport> = self
            .files
            .iter()
            .filter(|f| f.status == Status::Failed)
            .collect();
        if !failed.is_empty() {
            let _ = writeln!(out, "\nfailed to convert:");
            for f in failed {
                let _ = writeln!(out, "  {}: {}", f.file, f.detail);
            }
        }
        out
    }

    /// Writes every converted task as `<group>/<id>.json`; returns how many.
    pub fn write_tasks(&self, out: &Path) -> std::io::Result<usize> {
        let mut n = 0;
        for f in &self.files {
            if let Some(t) = &f.task {
                let dir = out.join(&f.group);
                std::fs::create_dir_all(&dir)?;
                let json = serde_json::to_string_pretty(t).map_err(std::io::Error::other)?;
                std::fs::write(dir.join(format!("{}.json", t.id)), json)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjlists_parse_like_networkx() {
        assert_eq!(parse_adjlist("0 1\n1", 2).unwrap(), vec![(0, 1)]);
        assert_eq!(parse_adjlist("0", 1).unwrap(), vec![]);
        assert_eq!(
            parse_adjlist("0 1 2\n1 2\n2", 3).unwrap(),
            vec![(0, 1), (0, 2), (1, 2)]
        );
        assert!(parse_adjlist("0 5", 2).unwrap_err().contains("node 5"));
        assert!(parse_adjlist("0 x", 2).is_err());
    }
}

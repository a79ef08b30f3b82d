//! Import of CRAB Benchmark-v0 composed tasks. Each CRAB file names sub-task templates by
//! id with attribute values and an adjacency list; pincer's equivalents of those templates
//! (bundled in `templates/crab.toml`) are composed with the same values and links. The
//! report says how many files load, how many are fully evaluable with pincer's checkpoint
//! functions, and why the rest are not.

use crate::compose::{self, Catalogue, Part};
use crate::eval::functions::Library;
use crate::eval::graph::Graph;
use crate::task::Task;
use pincer_shared::Platform;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// CRAB's step limit for Benchmark-v0 tasks.
const CRAB_STEP_LIMIT: u32 = 20;

/// CRAB files that no agent can pass as written, found while proving the others solvable,
/// by file id, with why.
const UNPASSABLE: &[(&str, &str)] = &[(
    "a956a091-8de4-42ee-b152-913308dfc24b",
    "its city \"yakarta\" is not a name the Clock app lists (it lists \"Jakarta\"), and clock-add-city compares the name exactly, in CRAB as in pincer",
)];

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
    /// Links whose upstream output type is not an attribute type of the downstream
    /// sub-task, as "upstream -> downstream" template names. CRAB does not enforce the type
    /// rule and neither does the import ([`compose::compose_lenient`]).
    pub untyped_edges: Vec<String>,
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

/// What is wrong with a CRAB file's adjacency list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdjlistError {
    /// A token that is not a node index.
    #[error("adjlist: '{0}' is not a node index")]
    NotIndex(String),
    /// An index past the sub-tasks.
    #[error("adjlist names node {index}, but there are {nodes} sub-tasks")]
    OutOfRange {
        /// The index named.
        index: usize,
        /// How many sub-tasks there are.
        nodes: usize,
    },
}

/// Parses networkx adjacency-list text ("0 1\n1"): each line is a node then its successors.
pub fn parse_adjlist(text: &str, nodes: usize) -> Result<Vec<(usize, usize)>, AdjlistError> {
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
                    .map_err(|_| AdjlistError::NotIndex(t.to_owned()))
            })
            .collect::<Result<_, _>>()?;
        if let Some(&index) = ids.iter().find(|&&i| i >= nodes) {
            return Err(AdjlistError::OutOfRange { index, nodes });
        }
        edges.extend(ids[1..].iter().map(|&to| (ids[0], to)));
    }
    Ok(edges)
}

/// A converted file: the task, its unsupported templates and its untyped links.
type Converted = (Task, Vec<String>, Vec<String>);

/// Converts one CRAB file.
fn convert(text: &str, cat: &Catalogue, lib: &Library) -> Result<Converted, String> {
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
    let edges = parse_adjlist(&file.adjlist, parts.len()).map_err(|e| e.to_string())?;
    let untyped = edges
        .iter()
        .map(|&(from, to)| (parts[from].template, parts[to].template))
        .filter(|(from, to)| compose::feeds(from, to).is_err())
        .map(|(from, to)| format!("{} -> {}", from.name, to.name))
        .collect();
    // CRAB's files link sub-tasks whatever their types and use templates pincer cannot
    // evaluate offline: both are reported, not refused.
    let mut task =
        compose::compose_lenient(&file.id, &parts, &edges, Some(file.description.clone()))
            .map_err(|e| e.to_string())?;
    task.tags = vec!["crab".into(), "crab-benchmark-v0".into()];
    task.limits.max_steps = CRAB_STEP_LIMIT;
    Graph::build(&task, lib).map_err(|e| e.to_string())?;
    Ok((task, unsupported, untyped))
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
            Ok((task, unsupported, untyped_edges)) if unsupported.is_empty() => FileReport {
                file: rel,
                group,
                status: Status::Evaluable,
                untyped_edges,
                detail: format!("{} checkpoints", task.checkpoints.len()),
                task: Some(task),
            },
            Ok((task, unsupported, untyped_edges)) => {
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
                    untyped_edges,
                    task: Some(task),
                }
            }
            Err(e) => FileReport {
                file: rel,
                group,
                status: Status::Failed,
                untyped_edges: Vec::new(),
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
        let on_phone = self
            .files
            .iter()
            .filter(|f| f.status == Status::Evaluable)
            .filter_map(|f| f.task.as_ref())
            .filter(|t| t.envs.values().any(|e| e.platform == Platform::Android))
            .count();
        if on_phone > 0 {
            let _ = writeln!(
                out,
                "({on_phone} of the evaluable tasks need an Android phone: their checks read it through the Android shim's probes)"
            );
        }
        let _ = writeln!(
            out,
            "(evaluable: every checkpoint maps to a pincer function. The tasks keep CRAB's paths \
             (/home/crab/...) and assume the files and state of CRAB's VM image, which they do \
             not set up: run them there. See docs/crab.md.)"
        );
        for f in &self.files {
            if let Some((_, why)) = UNPASSABLE
                .iter()
                .find(|(id, _)| f.task.as_ref().is_some_and(|t| t.id == *id))
            {
                let _ = writeln!(out, "cannot pass as written: {}: {why}", f.file);
            }
        }
        let linked: Vec<&FileReport> = self.files.iter().filter(|f| f.task.is_some()).collect();
        let untyped = linked
            .iter()
            .filter(|f| !f.untyped_edges.is_empty())
            .count();
        let _ = writeln!(
            out,
            "{untyped} of the {} converted files link a sub-task whose output type is not an \
             attribute type of the next (CRAB does not enforce the type rule; they were composed \
             as written)",
            linked.len()
        );
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

    /// CRAB's benchmark files, vendored unchanged in the repository's
    /// `fixtures/crab-benchmark-v0` (see its SOURCE.md).
    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/crab-benchmark-v0")
    }

    /// (files, evaluable, partial, failed) of a group.
    fn counts(r: &Report, group: &str) -> (usize, usize, usize, usize) {
        let fs: Vec<&FileReport> = r.files.iter().filter(|f| f.group == group).collect();
        let n = |p: fn(&Status) -> bool| fs.iter().filter(|f| p(&f.status)).count();
        (
            fs.len(),
            n(|s| *s == Status::Evaluable),
            n(|s| matches!(s, Status::Unsupported(_))),
            n(|s| *s == Status::Failed),
        )
    }

    fn task<'a>(r: &'a Report, file: &str) -> &'a Task {
        r.files
            .iter()
            .find(|f| f.file == file)
            .and_then(|f| f.task.as_ref())
            .unwrap_or_else(|| panic!("{file} was not converted"))
    }

    fn after<'a>(t: &'a Task, id: &str) -> &'a [String] {
        &t.checkpoints
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("{}: no checkpoint {id}", t.id))
            .after
    }

    #[test]
    fn crab_benchmark_v0_imports_with_the_expected_counts() {
        let dir = fixtures();
        let cat = Catalogue::bundled().unwrap();
        let r = import_dir(&dir, &cat, &Library::standard()).unwrap();
        let failed: Vec<String> = r
            .files
            .iter()
            .filter(|f| f.status == Status::Failed)
            .map(|f| format!("{}: {}", f.file, f.detail))
            .collect();
        assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
        assert_eq!(r.files.len(), 123);
        // Fully evaluable = no template that needs the live web, a Google account or a
        // learned model (docs/crab.md lists them).
        assert_eq!(counts(&r, "android"), (36, 8, 28, 0));
        assert_eq!(counts(&r, "ubuntu"), (77, 30, 47, 0));
        assert_eq!(counts(&r, "cross"), (10, 1, 9, 0));
        assert!(
            r.summary().contains(
                "cannot pass as written: cross/a956a091-8de4-42ee-b152-913308dfc24b.json: its city \"yakarta\""
            ),
            "{}",
            r.summary()
        );
        // 19 of the 35 templates are not evaluable offline, and every one is used.
        assert_eq!(r.reasons.len(), 19, "{:?}", r.reasons.keys());
        assert!(
            r.reasons
                .values()
                .all(|(name, why)| !name.is_empty() && why.len() > 20)
        );
        let summary = r.summary();
        println!("{summary}");
        let total: Vec<&str> = summary
            .lines()
            .find(|l| l.starts_with("total"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        assert_eq!(total, ["total", "123", "123", "39", "84", "0"], "{summary}");
        assert!(
            summary.contains("XFeat") && summary.contains("Google account"),
            "{summary}"
        );
        assert!(
            summary.contains("(9 of the evaluable tasks need an Android phone"),
            "{summary}"
        );
        // 37 files break the type rule, all of them among the 55 of two sub-tasks.
        let parts = |f: &FileReport| {
            f.task.as_ref().map_or(0, |t| {
                t.checkpoints
                    .iter()
                    .filter_map(|c| c.id.split_once('.').map(|(p, _)| p))
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            })
        };
        let untyped: Vec<&FileReport> = r
            .files
            .iter()
            .filter(|f| !f.untyped_edges.is_empty())
            .collect();
        assert_eq!(untyped.len(), 37);
        assert!(untyped.iter().all(|f| parts(f) == 2));
        assert_eq!(r.files.iter().filter(|f| parts(f) == 2).count(), 55);
        assert!(
            summary.contains("37 of the 123 converted files link a sub-task"),
            "{summary}"
        );
        assert!(
            summary.contains("assume the files and state of CRAB's VM image"),
            "{summary}"
        );
        let cat_file = r
            .files
            .iter()
            .find(|f| f.file == "cross/1e92db38-501e-429b-ac31-453d1af10a25.json")
            .unwrap();
        assert_eq!(
            cat_file.untyped_edges,
            ["terminal-cat-file -> keep-note"],
            "message does not feed keep-note's content"
        );

        // A cross-environment task: print a file in a terminal, then save it as a Keep note.
        let t = task(&r, "cross/1e92db38-501e-429b-ac31-453d1af10a25.json");
        assert_eq!(t.envs.keys().collect::<Vec<_>>(), vec!["desktop", "phone"]);
        assert_eq!(t.envs["phone"].platform, Platform::Android);
        assert_eq!(t.envs["desktop"].platform, Platform::Linux);
        // The desktop sub-graph's sink leads to the phone sub-graph's source.
        assert_eq!(after(t, "s1.keep"), ["s0.typed-cat"]);
        let env_of = |id: &str| {
            t.checkpoints
                .iter()
                .find(|c| c.id == id)
                .and_then(|c| c.env.clone())
        };
        assert_eq!(env_of("s0.terminal").as_deref(), Some("desktop"));
        assert_eq!(env_of("s1.keep").as_deref(), Some("phone"));
        assert_eq!(env_of("s0.typed-cat"), None);
        assert_eq!(t.limits.max_steps, CRAB_STEP_LIMIT);
        // The instruction is CRAB's composed description, not the templates' texts.
        let file: CrabFile = serde_json::from_str(
            &std::fs::read_to_string(dir.join("cross/1e92db38-501e-429b-ac31-453d1af10a25.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(t.instruction, file.description);

        // A diamond (CRAB's mail graph) after a desktop sub-task: the one sink links to the
        // one source, and the diamond keeps its shape.
        let t = task(&r, "cross/760ed27e-b1bd-451f-8659-bdb9845fcb7f.json");
        assert_eq!(after(t, "s1.gmail"), ["s0.typed-cat"]);
        assert_eq!(
            after(t, "s1.composed"),
            ["s1.typed-mail", "s1.typed-content"]
        );
        assert_eq!(after(t, "s1.typed-mail"), ["s1.gmail"]);

        // The attribute values are given literally, whatever CRAB's types say: the post
        // code's task feeds a Writer task whose file is named by hand.
        let t = task(&r, "cross/05a7633d-b966-471c-8848-e18e69ad265f.json");
        let query = t.checkpoints.iter().find(|c| c.id == "s0.query").unwrap();
        assert_eq!(
            query.args["contains"],
            serde_json::json!(["Germany", "44145"])
        );
        let pasted = t.checkpoints.iter().find(|c| c.id == "s1.pasted").unwrap();
        assert_eq!(pasted.args["path"], "/home/crab/Desktop/target.odt");

        // Every converted task is written and reads back as a valid task.
        let out = tempfile::tempdir().unwrap();
        assert_eq!(r.write_tasks(out.path()).unwrap(), 123);
        let back = crate::task::load_file(
            &out.path()
                .join("cross/1e92db38-501e-429b-ac31-453d1af10a25.json"),
        )
        .unwrap();
        assert_eq!(
            &back,
            task(&r, "cross/1e92db38-501e-429b-ac31-453d1af10a25.json")
        );
        Graph::build(&back, &Library::standard()).unwrap();
    }

    #[test]
    fn every_crab_template_is_complete() {
        let cat = Catalogue::bundled().unwrap();
        let lib = Library::standard();
        let crab: Vec<&compose::Template> = cat
            .templates
            .values()
            .filter(|t| t.id.len() == 36 && t.id.matches('-').count() == 4)
            .collect();
        assert_eq!(crab.len(), 35);
        for t in crab {
            assert!(!t.name.is_empty(), "{}", t.id);
            assert!(!t.checkpoints.is_empty(), "{}", t.id);
            if let Some(u) = &t.unsupported {
                assert!(u.len() > 20, "{}: say exactly why: {u}", t.id);
            }
            // Placeholders name attributes, and every checkpoint builds with values filled.
            let values: BTreeMap<String, String> = t
                .attributes
                .iter()
                .map(|a| (a.name.clone(), format!("v-{}-42", a.name)))
                .collect();
            let task = compose::compose_lenient(
                "t",
                &[Part {
                    template: t,
                    values,
                }],
                &[],
                None,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", t.id));
            Graph::build(&task, &lib).unwrap_or_else(|e| panic!("{}: {e}", t.id));
            // CRAB's own checks build too, in place of the checkpoints they name.
            let mut imported = task.clone();
            imported.tags.push(crate::task::compat::CRAB_TAG.to_owned());
            let crabs = imported
                .scored_as(crate::task::compat::Compat::Crab)
                .unwrap();
            Graph::build(&crabs, &lib).unwrap_or_else(|e| panic!("{} as CRAB: {e}", t.id));
        }
    }

    #[test]
    fn every_supported_crab_template_generates_seeded_instances() {
        let cat = Catalogue::bundled().unwrap();
        let lib = Library::standard();
        let supported: Vec<&compose::Template> = cat
            .templates
            .values()
            .filter(|t| t.id.len() == 36 && t.unsupported.is_none())
            .collect();
        assert_eq!(supported.len(), 16, "9 Ubuntu and 7 Android templates");
        for t in supported {
            let mut instructions = std::collections::BTreeSet::new();
            for seed in 0..20 {
                let task = compose::generate(&cat, &[t.id.as_str()], seed, None)
                    .unwrap_or_else(|e| panic!("{} ({}) seed {seed}: {e}", t.id, t.name));
                Graph::build(&task, &lib).unwrap_or_else(|e| panic!("{}: {e}", t.id));
                for a in &t.attributes {
                    assert!(
                        !task.instruction.contains(&format!("{{{}}}", a.name)),
                        "{}: {}",
                        t.id,
                        task.instruction
                    );
                }
                assert_eq!(
                    task,
                    compose::generate(&cat, &[t.id.as_str()], seed, None).unwrap(),
                    "{}: the same seed gives the same task",
                    t.id
                );
                instructions.insert(task.instruction);
            }
            if !t.attributes.is_empty() {
                assert!(instructions.len() > 2, "{}: {instructions:?}", t.id);
            }
        }
        // A template's own pool replaces the shared one: the phone's paths, not the desktop's.
        let dates = cat.get("file-create-date").unwrap();
        for seed in 0..10 {
            let task = compose::generate(&cat, &[dates.id.as_str()], seed, None).unwrap();
            assert!(!task.instruction.contains('~'), "{}", task.instruction);
        }
    }

    #[test]
    fn unknown_templates_and_bad_files_fail_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path().join("ubuntu");
        std::fs::create_dir_all(&g).unwrap();
        let ok = r#"{"description": "Say hi.", "tasks": [{"task": "1c3bedc3-ea5a-453c-a15b-223d72ab756d", "attribute": {"content": "hi"}, "output": null}], "adjlist": "0", "id": "ok"}"#;
        std::fs::write(g.join("ok.json"), ok).unwrap();
        let unknown = ok.replace("1c3bedc3-ea5a-453c-a15b-223d72ab756d", "nope");
        std::fs::write(g.join("unknown.json"), unknown).unwrap();
        std::fs::write(g.join("broken.json"), "{").unwrap();
        let missing = ok.replace(r#""content": "hi""#, r#""other": "hi""#);
        std::fs::write(g.join("missing.json"), missing).unwrap();
        let r = import_dir(
            dir.path(),
            &Catalogue::bundled().unwrap(),
            &Library::standard(),
        )
        .unwrap();
        let detail = |f: &str| {
            let fr = r
                .files
                .iter()
                .find(|x| x.file == format!("ubuntu/{f}"))
                .unwrap();
            (fr.status.clone(), fr.detail.clone())
        };
        assert_eq!(detail("ok.json").0, Status::Evaluable);
        let (s, d) = detail("unknown.json");
        assert!(
            s == Status::Failed && d.contains("no pincer template for CRAB sub-task nope"),
            "{d}"
        );
        let (s, d) = detail("broken.json");
        assert!(
            s == Status::Failed && d.contains("not a CRAB task file"),
            "{d}"
        );
        let (s, d) = detail("missing.json");
        assert!(
            s == Status::Failed && d.contains("no value for attribute 'content'"),
            "{d}"
        );
        assert!(r.summary().contains("failed to convert"), "{}", r.summary());
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            import_dir(
                empty.path(),
                &Catalogue::bundled().unwrap(),
                &Library::standard()
            ),
            Err(ImportError::Empty(_))
        ));
    }

    #[test]
    fn adjlists_parse_like_networkx() {
        assert_eq!(parse_adjlist("0 1\n1", 2).unwrap(), vec![(0, 1)]);
        assert_eq!(parse_adjlist("0", 1).unwrap(), vec![]);
        assert_eq!(
            parse_adjlist("0 1 2\n1 2\n2", 3).unwrap(),
            vec![(0, 1), (0, 2), (1, 2)]
        );
        assert_eq!(
            parse_adjlist("0 5", 2),
            Err(AdjlistError::OutOfRange { index: 5, nodes: 2 })
        );
        assert_eq!(
            parse_adjlist("0 x", 2),
            Err(AdjlistError::NotIndex("x".into()))
        );
    }
}

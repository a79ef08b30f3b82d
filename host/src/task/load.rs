//! Finding and reading task files: a file, a directory of them, or a suite bundled into the
//! binary (`demo`). Errors name the file, the path inside it and what was expected.

use super::Task;
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};

/// Suites shipped inside the binary: each subdirectory of the repository's `tasks/`.
static BUNDLED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../tasks");

/// Where a task came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file on disk.
    File(PathBuf),
    /// A bundled suite's file (`suite/file.json`).
    Bundled(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::Bundled(p) => write!(f, "bundled:{p}"),
        }
    }
}

/// Why tasks could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid JSON/TOML.
    #[error("{file}: {message}")]
    Syntax {
        /// The file.
        file: Source,
        /// What the parser said, with line and column.
        message: String,
    },
    /// The file parses but does not describe a task.
    #[error("{file}: at `{at}`: {message}")]
    Invalid {
        /// The file.
        file: Source,
        /// Path inside the document, such as `checkpoints[2].after`.
        at: String,
        /// What was expected.
        message: String,
    },
    /// Neither a file, a directory nor a bundled suite.
    #[error("no task file, directory or bundled suite named '{name}' (bundled suites: {})", known.join(", "))]
    NotFound {
        /// What was asked for.
        name: String,
        /// Bundled suite names.
        known: Vec<String>,
    },
    /// Two tasks share an id.
    #[error("task id '{id}' is used by both {first} and {second}")]
    DuplicateId {
        /// The id.
        id: String,
        /// The first file.
        first: Source,
        /// The second file.
        second: Source,
    },
    /// A task asked for by id is not in the set.
    #[error("no task '{id}' in {spec}; its tasks are: {}", known.join(", "))]
    NoSuchTask {
        /// The id asked for.
        id: String,
        /// The file, directory or suite.
        spec: String,
        /// The ids there are.
        known: Vec<String>,
    },
    /// The selection leaves no task.
    #[error("no tasks of {spec} are selected{}", if tags.is_empty() { String::new() } else { format!(" (tags: {})", tags.join(", ")) })]
    NoneSelected {
        /// The file, directory or suite.
        spec: String,
        /// The tags asked for.
        tags: Vec<String>,
    },
}

/// The tasks of `spec` (a file, directory or bundled suite) that every front-end runs: only
/// the ids in `only` (each must be there), only those with one of `tags`; an empty
/// selection is an error.
pub fn select(spec: &str, only: &[String], tags: &[String]) -> Result<Vec<Task>, LoadError> {
    let set = load_path(spec)?;
    let known: Vec<String> = set.ids().into_iter().map(str::to_owned).collect();
    if let Some(id) = only.iter().find(|id| !known.contains(id)) {
        return Err(LoadError::NoSuchTask {
            id: id.clone(),
            spec: spec.to_owned(),
            known,
        });
    }
    let tasks: Vec<Task> = set
        .tasks
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| only.is_empty() || only.contains(&t.id))
        .filter(|t| tags.is_empty() || t.tags.iter().any(|g| tags.contains(g)))
        .collect();
    if tasks.is_empty() {
        return Err(LoadError::NoneSelected {
            spec: spec.to_owned(),
            tags: tags.to_vec(),
        });
    }
    Ok(tasks)
}

/// Tasks with where each came from, in a stable order.
#[derive(Debug, Clone, Default)]
pub struct TaskSet {
    /// The tasks.
    pub tasks: Vec<(Task, Source)>,
}

impl TaskSet {
    /// The task with this id.
    pub fn get(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().map(|(t, _)| t).find(|t| t.id == id)
    }

    /// Ids of all tasks.
    pub fn ids(&self) -> Vec<&str> {
        self.tasks.iter().map(|(t, _)| t.id.as_str()).collect()
    }
}

/// Names of the bundled suites.
pub fn bundled_suites() -> Vec<String> {
    BUNDLED
        .dirs()
        .filter_map(|d| d.path().to_str().map(str::to_owned))
        .collect()
}

/// Parses one task document. `toml` selects TOML, else JSON.
pub fn parse(text: &str, toml: bool, source: Source) -> Result<Task, LoadError> {
    let result = if toml {
        let value: toml::Value = toml::from_str(text).map_err(|e| LoadError::Syntax {
            file: source.clone(),
            message: e.to_string(),
        })?;
        let json = serde_json::to_value(value).map_err(|e| LoadError::Syntax {
            file: source.clone(),
            message: e.to_string(),
        })?;
        serde_path_to_error::deserialize(json)
    } else {
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de)
    };
    let task: Task = result.map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            LoadError::Syntax {
                file: source.clone(),
                message: inner.to_string(),
            }
        } else {
            LoadError::Invalid {
                file: source.clone(),
                at,
                message: inner.to_string(),
            }
        }
    })?;
    task.check_tools()
        .map_err(|(at, message)| LoadError::Invalid {
            file: source.clone(),
            at,
            message,
        })?;
    Ok(task)
}

/// Reads one task file (`.json` or `.toml`).
pub fn load_file(path: &Path) -> Result<Task, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&text, is_toml(path), Source::File(path.to_owned()))
}

fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "toml")
}

/// A task file: JSON or TOML, and not hidden (an importer's report, an editor's backup).
fn is_task_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json" || e == "toml")
        && !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

/// Loads a task file, every task file under a directory, or a bundled suite by name.
pub fn load_path(spec: &str) -> Result<TaskSet, LoadError> {
    let path = Path::new(spec);
    let mut set = TaskSet::default();
    if path.is_file() {
        set.tasks
            .push((load_file(path)?, Source::File(path.to_owned())));
    } else if path.is_dir() {
        let mut files = Vec::new();
        collect(path, &mut files)?;
        files.sort();
        for f in files {
            set.tasks.push((load_file(&f)?, Source::File(f)));
        }
    } else if let Some(dir) = BUNDLED.get_dir(spec) {
        let mut files: Vec<_> = Vec::new();
        collect_bundled(dir, &mut files);
        files.sort_by(|a, b| a.path().cmp(b.path()));
        for f in files {
            let name = f.path().display().to_string();
            let text = f.contents_utf8().ok_or_else(|| LoadError::Syntax {
                file: Source::Bundled(name.clone()),
                message: "not UTF-8".into(),
            })?;
            set.tasks.push((
                parse(text, is_toml(f.path()), Source::Bundled(name.clone()))?,
                Source::Bundled(name),
            ));
        }
    } else {
        return Err(LoadError::NotFound {
            name: spec.to_owned(),
            known: bundled_suites(),
        });
    }
    check_unique(&set)?;
    Ok(set)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let rd = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out)?;
        } else if is_task_file(&p) {
            out.push(p);
        }
    }
    Ok(())
}

fn collect_bundled<'a>(dir: &'a Dir<'static>, out: &mut Vec<&'a include_dir::File<'static>>) {
    for f in dir.files() {
        if is_task_file(f.path()) {
            out.push(f);
        }
    }
    for d in dir.dirs() {
        collect_bundled(d, out);
    }
}

fn check_unique(set: &TaskSet) -> Result<(), LoadError> {
    let mut seen: std::collections::HashMap<&str, &Source> = std::collections::HashMap::new();
    for (t, src) in &set.tasks {
        if let Some(first) = seen.insert(&t.id, src) {
            return Err(LoadError::DuplicateId {
                id: t.id.clone(),
                first: first.clone(),
                second: src.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selection every front-end makes: ids must exist, tags narrow, nothing left is
    /// an error that says so.
    #[test]
    fn tasks_are_selected_by_id_and_tag_and_an_unknown_id_is_named() {
        let all = select("demo", &[], &[]).unwrap();
        assert!(all.len() >= 12);
        let one = select("demo", &["calculator-multiply".into()], &[]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].id, "calculator-multiply");
        let e = select("demo", &["no-such".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no task 'no-such' in demo") && e.contains("calculator-multiply"),
            "{e}"
        );
        let e = select("demo", &[], &["no-such-tag".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no tasks of demo are selected (tags: no-such-tag)"),
            "{e}"
        );
        let tagged = select("demo", &[], &[all[0].tags[0].clone()]).unwrap();
        assert!(!tagged.is_empty() && tagged.len() <= all.len());
    }

    const GOOD: &str = r#"{"id": "a", "instruction": "x", "envs": {"desktop": {"platform": "linux"}},
        "checkpoints": [{"id": "c", "env": "desktop", "check": "file_exists", "args": {"path": "/x"}}]}"#;

    #[test]
    fn declared_tools_are_checked_where_they_are() {
        let src = || Source::File("t.json".into());
        let with = |tools: &str| {
            GOOD.replacen(
                "\"checkpoints\"",
                &format!("\"tools\": {tools}, \"checkpoints\""),
                1,
            )
        };
        let tool = r#"{"name": "t", "description": "d", "argv": ["/usr/bin/true"]}"#;
        let ok = parse(&with(&format!(r#"{{"desktop": [{tool}]}}"#)), false, src()).unwrap();
        assert_eq!(ok.tool("t").map(|(role, _)| role), Some("desktop"));
        for (tools, at, says) in [
            (
                format!(r#"{{"phone": [{tool}]}}"#),
                "tools.phone",
                "no environment 'phone'",
            ),
            (
                format!(r#"{{"desktop": [{tool}, {tool}]}}"#),
                "tools.desktop[1]",
                "a second tool",
            ),
            (
                r#"{"desktop": [{"name": "t", "description": "d", "argv": ["true"]}]}"#.into(),
                "tools.desktop[0]",
                "absolute path",
            ),
        ] {
            let e = parse(&with(&tools), false, src()).unwrap_err().to_string();
            assert!(e.contains(&format!("at `{at}`")) && e.contains(says), "{e}");
        }
    }

    #[test]
    fn errors_name_the_file_the_path_and_the_expectation() {
        let src = || Source::File("t.json".into());
        let bad = GOOD.replace("\"linux\"", "\"windows\"");
        let e = parse(&bad, false, src()).unwrap_err().to_string();
        assert!(e.starts_with("t.json: at `envs.desktop.platform`"), "{e}");
        assert!(
            e.contains("unknown variant `windows`") && e.contains("linux"),
            "{e}"
        );
        let e = parse(
            &GOOD.replace("\"checkpoints\"", "\"checkponts\""),
            false,
            src(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown field `checkponts`"), "{e}");
        let e = parse("{\"id\": ", false, src()).unwrap_err();
        assert!(matches!(e, LoadError::Syntax { .. }), "{e}");
        let e = parse(
            &GOOD
                .replace("\"after\"", "x")
                .replace("\"path\": \"/x\"}", "\"path\": \"/x\"}, \"after\": 3"),
            false,
            src(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("checkpoints[0].after") && e.contains("sequence"),
            "{e}"
        );
    }

    #[test]
    fn toml_tasks_load_too() {
        let toml = r#"
id = "t"
instruction = "x"
[envs.desktop]
platform = "linux"
[[checkpoints]]
id = "c"
env = "desktop"
check = "file_exists"
args = { path = "/x" }
"#;
        let t = parse(toml, true, Source::File("t.toml".into())).unwrap();
        assert_eq!(t.checkpoints[0].args["path"], "/x");
        let e = parse(
            &toml.replace("\"linux\"", "5"),
            true,
            Source::File("t.toml".into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("envs.desktop.platform"), "{e}");
    }

    #[test]
    fn directories_load_recursively_and_ids_must_be_unique() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("a.json"), GOOD).unwrap();
        std::fs::write(
            dir.path().join("sub/b.json"),
            GOOD.replace("\"id\": \"a\"", "\"id\": \"b\""),
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let set = load_path(dir.path().to_str().unwrap()).unwrap();
        assert_eq!(set.ids(), vec!["a", "b"]);
        std::fs::write(dir.path().join("sub/c.json"), GOOD).unwrap();
        assert!(matches!(
            load_path(dir.path().to_str().unwrap()),
            Err(LoadError::DuplicateId { .. })
        ));
        let e = load_path("no-such-suite").unwrap_err().to_string();
        assert!(e.contains("bundled suites"), "{e}");
    }
}

//! The checkpoint-function library: named, documented, typed functions that build a
//! [`Check`] from JSON arguments. `pincer task functions` prints this catalogue.
//!
//! Functions read one environment (files, processes, windows, clipboard, settings, the UI
//! tree, command output) or the agent's own log (answers, typed text); `not`, `all_of` and
//! `any_of` combine others on the same environment.

mod agent;
mod android;
mod documents;
mod files;
mod logic;
mod media;
mod system;
mod tree;

use super::text::{TextMatch, clip};
use super::{Check, Verdict};
use crate::task::Platform;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// What a function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// An environment of one of these platforms.
    Env(&'static [Platform]),
    /// The agent's own log; no environment.
    Agent,
    /// Whatever its inner checks read (combinators).
    Inner,
}

type Builder =
    Box<dyn Fn(&serde_json::Value, &Library) -> Result<Box<dyn Check>, BuildError> + Send + Sync>;

/// One function of the library.
pub struct FunctionDef {
    /// Name used in task files.
    pub name: &'static str,
    /// One line on what it checks.
    pub summary: &'static str,
    /// What it reads.
    pub reads: Reads,
    /// An example of its arguments, as JSON.
    pub example: &'static str,
    /// JSON Schema of its arguments.
    pub schema: serde_json::Value,
    build: Builder,
}

impl std::fmt::Debug for FunctionDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionDef")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Why a checkpoint could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No function by that name.
    #[error("unknown checkpoint function '{name}'{}", if nearest.is_empty() { String::new() } else { format!(" (did you mean {}?)", nearest.join(", ")) })]
    UnknownFunction {
        /// The name used.
        name: String,
        /// The closest known names.
        nearest: Vec<String>,
    },
    /// The arguments do not fit the function.
    #[error("bad arguments for {function}: {}{message} (example: {example})", if at.is_empty() || at == "." { String::new() } else { format!("at `{at}`: ") })]
    BadArgs {
        /// The function.
        function: String,
        /// Path inside the arguments.
        at: String,
        /// What was wrong.
        message: String,
        /// A correct example.
        example: String,
    },
}

/// Parses typed arguments, reporting where they went wrong.
fn args<A: DeserializeOwned>(v: &serde_json::Value) -> Result<A, (String, String)> {
    serde_path_to_error::deserialize(v)
        .map_err(|e| (e.path().to_string(), e.into_inner().to_string()))
}

/// The catalogue of checkpoint functions.
#[derive(Debug)]
pub struct Library {
    defs: BTreeMap<&'static str, FunctionDef>,
}

impl Library {
    /// Every function pincer ships.
    pub fn standard() -> Self {
        let mut lib = Self {
            defs: BTreeMap::new(),
        };
        files::register(&mut lib);
        system::register(&mut lib);
        tree::register(&mut lib);
        agent::register(&mut lib);
        logic::register(&mut lib);
        documents::register(&mut lib);
        media::register(&mut lib);
        android::register(&mut lib);
        lib
    }

    /// Adds a function: `make` turns its typed arguments into a check, or says why the
    /// values are unusable.
    pub fn add<A, C, F>(
        &mut self,
        name: &'static str,
        summary: &'static str,
        reads: Reads,
        example: &'static str,
        make: F,
    ) where
        A: DeserializeOwned + JsonSchema + 'static,
        C: Check + 'static,
        F: Fn(A, &Self) -> Result<C, String> + Send + Sync + 'static,
    {
        let schema = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_default();
        let build: Builder = Box::new(move |v, lib| {
            let bad = |at: String, message: String| BuildError::BadArgs {
                function: name.into(),
                at,
                message,
                example: example.into(),
            };
            let a: A = args(v).map_err(|(at, m)| bad(at, m))?;
            make(a, lib)
                .map(|c| Box::new(c) as Box<dyn Check>)
                .map_err(|m| bad(String::new(), m))
        });
        self.defs.insert(
            name,
            FunctionDef {
                name,
                summary,
                reads,
                example,
                schema,
                build,
            },
        );
    }

    /// The function named `name`.
    pub fn get(&self, name: &str) -> Option<&FunctionDef> {
        self.defs.get(name)
    }

    /// All functions, by name.
    pub fn iter(&self) -> impl Iterator<Item = &FunctionDef> {
        self.defs.values()
    }

    /// Builds a check from a function name and its arguments.
    pub fn build(
        &self,
        name: &str,
        args: &serde_json::Value,
    ) -> Result<Box<dyn Check>, BuildError> {
        let def = self
            .defs
            .get(name)
            .ok_or_else(|| BuildError::UnknownFunction {
                name: name.into(),
                nearest: self.nearest(name),
            })?;
        (def.build)(args, self)
    }

    /// Up to three known names closest to `name`.
    pub fn nearest(&self, name: &str) -> Vec<String> {
        let mut scored: Vec<(f64, &str)> = self
            .defs
            .keys()
            .map(|k| (strsim::jaro_winkler(name, k), *k))
            .filter(|(s, _)| *s > 0.7)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
            .into_iter()
            .take(3)
            .map(|(_, k)| k.to_owned())
            .collect()
    }

    /// Whether the function reads an environment (false for agent-log functions; for
    /// combinators, whether any inner check does).
    pub fn reads_env(&self, name: &str, args: &serde_json::Value) -> bool {
        match self.defs.get(name).map(|d| d.reads) {
            Some(Reads::Env(_)) => true,
            Some(Reads::Agent) | None => false,
            Some(Reads::Inner) => logic::inner_specs(args)
                .iter()
                .any(|(n, a)| self.reads_env(n, a)),
        }
    }

    /// Environment roles named by the arguments of an agent-log function (`env` of
    /// `typed_contains`) or of any inner function of a combinator, with the function naming
    /// each; validation checks them against the task's roles.
    pub fn roles_in_args(&self, name: &str, args: &serde_json::Value) -> Vec<(String, String)> {
        match self.defs.get(name).map(|d| d.reads) {
            Some(Reads::Agent) => args
                .get("env")
                .and_then(serde_json::Value::as_str)
                .map(|r| vec![(name.to_owned(), r.to_owned())])
                .unwrap_or_default(),
            Some(Reads::Inner) => logic::inner_specs(args)
                .iter()
                .flat_map(|(n, a)| self.roles_in_args(n, a))
                .collect(),
            Some(Reads::Env(_)) | None => Vec::new(),
        }
    }

    /// Platforms the function (and for combinators, every inner function) works on.
    pub fn platforms(&self, name: &str, args: &serde_json::Value) -> Option<Vec<Platform>> {
        match self.defs.get(name)?.reads {
            Reads::Env(p) => Some(p.to_vec()),
            Reads::Agent => Some(vec![Platform::Linux, Platform::Android]),
            Reads::Inner => {
                let mut all = vec![Platform::Linux, Platform::Android];
                for (n, a) in logic::inner_specs(args) {
                    let inner = self.platforms(&n, &a)?;
                    all.retain(|p| inner.contains(p));
                }
                Some(all)
            }
        }
    }
}

/// The verdict of `m` on the text `what` holds ("file ~/a.txt", "the clipboard"): the text
/// seen (for a regex, the part that matched) and what it had to be.
fn judge_text(what: &str, text: &str, m: &TextMatch) -> Verdict {
    if m.test(text) {
        let seen = m.matched(text).unwrap_or(text);
        Verdict::pass(format!("{what} reads '{}' ({m})", clip(seen, 60)))
    } else {
        Verdict::fail(format!(
            "{what} reads '{}', expected text {m}",
            clip(text, 60)
        ))
    }
}

const LINUX: &[Platform] = &[Platform::Linux];
const ANY: &[Platform] = &[Platform::Linux, Platform::Android];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_suggest_the_nearest() {
        let lib = Library::standard();
        match lib.build("file_contain", &serde_json::json!({})) {
            Err(BuildError::UnknownFunction { nearest, .. }) => {
                assert_eq!(
                    nearest.first().map(String::as_str),
                    Some("file_contains"),
                    "{nearest:?}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_arguments_say_where_and_show_an_example() {
        let lib = Library::standard();
        let e = lib
            .build("file_contains", &serde_json::json!({"path": "/x"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing field `text`") && e.contains("example"),
            "{e}"
        );
        let e = lib
            .build(
                "not",
                &serde_json::json!({"check": "file_exists", "args": {"paht": "/x"}}),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `paht`"), "{e}");
        let e = lib
            .build(
                "file_matches",
                &serde_json::json!({"path": "/x", "regex": "("}),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("regex"), "{e}");
    }

    #[test]
    fn every_function_has_an_example_that_builds() {
        let lib = Library::standard();
        assert!(lib.iter().count() >= 20);
        for def in lib.iter() {
            let ex: serde_json::Value =
                serde_json::from_str(def.example).unwrap_or_else(|e| panic!("{}: {e}", def.name));
            lib.build(def.name, &ex)
                .unwrap_or_else(|e| panic!("{}: {e}", def.name));
            assert!(!def.summary.is_empty());
        }
    }

    /// Checks that decide without writing feedback must decide as their full judgement
    /// does, on every stat reply there can be.
    #[test]
    fn quick_decisions_agree_with_judgements() {
        use pincer_shared::probe::{FileKind, FileStat, ProbeReply};
        let lib = Library::standard();
        let checks = [
            lib.build("file_exists", &serde_json::json!({"path": "/p"})),
            lib.build("dir_exists", &serde_json::json!({"path": "/p"})),
            lib.build("file_absent", &serde_json::json!({"path": "/p"})),
        ]
        .map(Result::unwrap);
        let kinds = [
            None,
            Some(FileKind::File),
            Some(FileKind::Dir),
            Some(FileKind::Symlink),
            Some(FileKind::Other),
        ];
        let log = crate::eval::AgentLog::default();
        let mut seen = 0;
        for exists in [false, true] {
            for kind in kinds {
                for target in kinds {
                    let reply: super::super::ProbeResult = Ok(ProbeReply::Stat(FileStat {
                        path: "/p".into(),
                        exists,
                        kind,
                        target,
                        size: 3,
                        mode: 0o644,
                        modified_ms: 0,
                    }));
                    for c in &checks {
                        let judged = c.judge(&[&reply], &log).unwrap().passed;
                        assert_eq!(
                            c.passes(&[&reply], &log).unwrap(),
                            judged,
                            "{c:?} on {reply:?}"
                        );
                        seen += usize::from(judged);
                    }
                }
            }
        }
        assert!(seen > 0, "some of them pass");
        let broken: super::super::ProbeResult = Err(pincer_shared::WireError::Internal {
            message: "x".into(),
        });
        for c in &checks {
            assert!(c.passes(&[&broken], &log).is_err() && c.judge(&[&broken], &log).is_err());
        }
    }

    #[test]
    fn roles_named_in_arguments_are_found_inside_combinators() {
        let lib = Library::standard();
        let typed = serde_json::json!({"text": "x", "env": "phone"});
        assert_eq!(
            lib.roles_in_args("typed_contains", &typed),
            [("typed_contains".to_owned(), "phone".to_owned())]
        );
        let nested = serde_json::json!({"check": "typed_contains", "args": typed});
        assert_eq!(lib.roles_in_args("not", &nested).len(), 1);
        assert!(
            lib.roles_in_args("typed_contains", &serde_json::json!({"text": "x"}))
                .is_empty()
        );
        assert!(
            lib.roles_in_args("file_exists", &serde_json::json!({"path": "/env"}))
                .is_empty()
        );
    }

    #[test]
    fn combinators_inherit_what_they_read() {
        let lib = Library::standard();
        let inner = serde_json::json!({"check": "answer_contains", "args": {"text": "x"}});
        assert!(!lib.reads_env("not", &inner));
        let inner = serde_json::json!({"checks": [{"check": "answer_contains", "args": {"text": "x"}}, {"check": "window_title_contains", "args": {"text": "x"}}]});
        assert!(lib.reads_env("all_of", &inner));
        assert_eq!(lib.platforms("all_of", &inner), Some(vec![Platform::Linux]));
    }
}

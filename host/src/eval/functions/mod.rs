//! The checkpoint-function library: named, documented, typed functions that build a
//! [`Check`] from JSON arguments. `pincer task functions` prints this catalogue.
//!
//! Functions read one environment (files, processes, windows, clipboard, settings, the UI
//! tree, command output) or the agent's own log (answers, typed text); `not`, `all_of` and
//! `any_of` combine others on the same environment.

mod agent;
mod android;
mod crab;
mod documents;
mod files;
mod logic;
mod media;
mod system;
mod tree;

use super::text::{TextMatch, clip, excerpt};
use super::{Check, Verdict};
use pincer_shared::Platform;
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
        crab::register(&mut lib);
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

/// Characters of an observed text quoted in feedback.
const QUOTE: usize = 60;

/// The verdict of `m` on the text `what` holds ("file ~/a.txt", "the clipboard"): the text
/// seen and what it had to be.
fn judge_text(what: &str, text: &str, m: &TextMatch) -> Verdict {
    match (m.test(text), text.is_empty()) {
        (true, true) => Verdict::pass(format!("{what} is empty ({m})")),
        (true, false) => Verdict::pass(format!("{what} reads {} ({m})", quote_passing(text, m))),
        (false, true) => Verdict::fail(format!("{what} is empty, expected text {m}")),
        (false, false) => Verdict::fail(format!("{what} reads {}, expected text {m}", quote(text))),
    }
}

/// A text that passed `m`, quoted for feedback: the part a regex matched, or the stretch
/// around a `contains` hit that the start of a long text would not show, or the start. An
/// empty regex match (`^`, `x*`) shows nothing of why the text passed, so the text is
/// quoted instead.
fn quote_passing(text: &str, m: &TextMatch) -> String {
    if let Some(part) = m.matched(text).filter(|p| !p.is_empty()) {
        return format!("'{}'", clip(part, QUOTE));
    }
    match m.occurrence(text) {
        Some(hit) if text[..hit.end].chars().count() > QUOTE => format!("'{}'", excerpt(text, hit)),
        _ => format!("'{}'", clip(text, QUOTE)),
    }
}

/// A text quoted for feedback, with its length when the quote leaves part of it out: a
/// failure may lie in the part not shown.
fn quote(text: &str) -> String {
    let n = text.chars().count();
    if n > QUOTE {
        format!("'{}' ({n} characters)", clip(text, QUOTE))
    } else {
        format!("'{}'", clip(text, QUOTE))
    }
}

/// Texts quoted and listed for feedback ("'a', 'b'"), each cut to 40 characters and the
/// list to `max`.
fn quoted<'a>(items: impl IntoIterator<Item = &'a str>, max: usize) -> String {
    clip(
        &items
            .into_iter()
            .map(|t| format!("'{}'", clip(t, 40)))
            .collect::<Vec<_>>()
            .join(", "),
        max,
    )
}

/// `noun` with its indefinite article ("a file", "an image").
fn a(noun: &str) -> String {
    let vowel = noun
        .chars()
        .next()
        .is_some_and(|c| "aeiouAEIOU".contains(c));
    format!("{} {noun}", if vowel { "an" } else { "a" })
}

/// "1 byte", "2 bytes": a count with its noun, singular or plural.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Linux guests only (for functions defined outside this module too).
pub const LINUX: &[Platform] = &[Platform::Linux];
const ANY: &[Platform] = &[Platform::Linux, Platform::Android];

/// Hand-made probe replies, and the verdicts of functions on them, for the functions'
/// unit tests.
#[cfg(test)]
mod replies {
    use crate::eval::{AgentLog, ProbeResult, Verdict};
    use pincer_shared::probe::{FileContent, FileKind, FileStat, ProbeReply};

    /// A stat of `/p`: whether anything is there, what, what a link there resolves to, and
    /// its size.
    pub(super) fn stat(
        exists: bool,
        kind: Option<FileKind>,
        target: Option<FileKind>,
        size: u64,
    ) -> ProbeResult {
        Ok(ProbeReply::Stat(FileStat {
            path: "/p".into(),
            exists,
            kind,
            target,
            size,
            mode: 0o644,
            modified_ms: 0,
        }))
    }

    /// The whole content of `/p`.
    pub(super) fn file(bytes: &[u8]) -> ProbeResult {
        Ok(ProbeReply::File(Some(FileContent {
            path: "/p".into(),
            bytes: bytes.to_vec(),
            total_size: bytes.len() as u64,
        })))
    }

    /// A zip archive from (name, text) parts, stored the way LibreOffice stores them: the
    /// `mimetype` first and uncompressed, the XML deflated.
    pub(super) fn archive(parts: &[(&str, &str)]) -> Vec<u8> {
        use std::io::Write as _;
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, text) in parts {
            let method = if *name == "mimetype" {
                zip::CompressionMethod::Stored
            } else {
                zip::CompressionMethod::Deflated
            };
            w.start_file(
                *name,
                zip::write::SimpleFileOptions::default().compression_method(method),
            )
            .unwrap();
            w.write_all(text.as_bytes()).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// The verdict of the function `name` with `args` on `replies`, with an empty log.
    pub(super) fn judge(name: &str, args: serde_json::Value, replies: &[ProbeResult]) -> Verdict {
        let check = super::Library::standard().build(name, &args).unwrap();
        let replies: Vec<&ProbeResult> = replies.iter().collect();
        check.judge(&replies, &AgentLog::default()).unwrap()
    }
}

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
        use pincer_shared::probe::FileKind;
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
                    let reply = replies::stat(exists, kind, target, 3);
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
    fn passing_texts_are_quoted_where_they_passed() {
        let judge = |text: &str, m: TextMatch| judge_text("the clipboard", text, &m).feedback;
        // A regex quotes what it matched; an empty match says nothing, so the text is quoted.
        assert_eq!(
            judge(
                "order 42 shipped",
                TextMatch::regex("[0-9]+", false).unwrap()
            ),
            "the clipboard reads '42' (matching /[0-9]+/)"
        );
        assert_eq!(
            judge("order 42", TextMatch::regex("x*", false).unwrap()),
            "the clipboard reads 'order 42' (matching /x*/)"
        );
        // A hit past the quoted start is shown with the text around it.
        let long = format!("{}needle{}", "a".repeat(100), "b".repeat(100));
        assert_eq!(
            judge(&long, TextMatch::contains("needle")),
            format!(
                "the clipboard reads '…{}needle{}…' (containing 'needle')",
                "a".repeat(20),
                "b".repeat(20)
            )
        );
        assert_eq!(
            judge("short needle", TextMatch::contains("needle")),
            "the clipboard reads 'short needle' (containing 'needle')"
        );
        // Without case, the hit is found in the original text even where lowercasing
        // changes lengths ('İ' lowercases to two characters).
        let turkish = format!("{}NEEDLE!", "İ".repeat(70));
        assert_eq!(
            judge(&turkish, TextMatch::contains("needle").ignoring_case(true)),
            format!(
                "the clipboard reads '…{}NEEDLE!' (containing 'needle' (ignoring case))",
                "İ".repeat(20)
            )
        );
        assert_eq!(
            judge("", TextMatch::equals("")),
            "the clipboard is empty (equal to '')"
        );
    }

    #[test]
    fn failing_texts_say_how_long_they_are_when_cut() {
        let judge = |text: &str| judge_text("file /a", text, &TextMatch::contains("y")).feedback;
        assert_eq!(
            judge(&"x".repeat(100)),
            format!(
                "file /a reads '{}…' (100 characters), expected text containing 'y'",
                "x".repeat(60)
            )
        );
        assert_eq!(
            judge("x\r\n"),
            "file /a reads 'x⏎', expected text containing 'y'"
        );
        assert_eq!(judge(""), "file /a is empty, expected text containing 'y'");
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

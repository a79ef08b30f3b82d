//! Combinators: negation, conjunction and disjunction of checks on the same environment.

use super::{Library, Reads};
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict};
use pincer_shared::probe::Probe;
use schemars::JsonSchema;
use serde::Deserialize;

/// A nested checkpoint function call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Inner {
    /// Function name.
    check: String,
    /// Its arguments.
    #[serde(default)]
    #[schemars(with = "std::collections::BTreeMap<String, serde_json::Value>")]
    args: serde_json::Value,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ManyArgs {
    /// The checks.
    checks: Vec<Inner>,
}

/// The inner (function, args) pairs of a combinator's arguments, for validation.
pub(super) fn inner_specs(args: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    let one = serde_json::from_value::<Inner>(args.clone())
        .ok()
        .into_iter();
    let many = serde_json::from_value::<ManyArgs>(args.clone())
        .map(|m| m.checks)
        .unwrap_or_default();
    one.chain(many)
        .map(|i| {
            (
                i.check,
                if i.args.is_null() {
                    serde_json::json!({})
                } else {
                    i.args
                },
            )
        })
        .collect()
}

fn build(lib: &Library, i: Inner) -> Result<Box<dyn Check>, String> {
    let args = if i.args.is_null() {
        serde_json::json!({})
    } else {
        i.args
    };
    lib.build(&i.check, &args).map_err(|e| e.to_string())
}

/// Children with the number of probes each takes, to split a reply slice.
#[derive(Debug)]
struct Children(Vec<(Box<dyn Check>, usize)>);

impl Children {
    fn new(checks: Vec<Box<dyn Check>>) -> Self {
        Self(
            checks
                .into_iter()
                .map(|c| {
                    let n = c.probes().len();
                    (c, n)
                })
                .collect(),
        )
    }

    fn probes(&self) -> Vec<Probe> {
        self.0.iter().flat_map(|(c, _)| c.probes()).collect()
    }

    fn judge_all(&self, r: &[&ProbeResult], log: &AgentLog) -> Result<Vec<Verdict>, EvalError> {
        let mut at = 0;
        self.0
            .iter()
            .map(|(c, n)| {
                let v = c.judge(&r[at..at + n], log);
                at += n;
                v
            })
            .collect()
    }
}

/// Negation.
#[derive(Debug)]
struct Not(Children);

impl Check for Not {
    fn probes(&self) -> Vec<Probe> {
        self.0.probes()
    }

    fn judge(&self, r: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let v = self.0.judge_all(r, log)?.remove(0);
        // Said as what the negation concluded, so a pass does not read like a failure.
        let feedback = if v.passed {
            format!("fails, as the inner check holds: {}", v.feedback)
        } else {
            format!("holds, as the inner check fails: {}", v.feedback)
        };
        Ok(Verdict {
            passed: !v.passed,
            feedback,
        })
    }
}

/// All or any of several checks.
#[derive(Debug)]
struct Many {
    children: Children,
    all: bool,
}

impl Check for Many {
    fn probes(&self) -> Vec<Probe> {
        self.children.probes()
    }

    fn judge(&self, r: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let vs = self.children.judge_all(r, log)?;
        let passed = if self.all {
            vs.iter().all(|v| v.passed)
        } else {
            vs.iter().any(|v| v.passed)
        };
        // Report what decided it: the failures of an `all`, the passes of an `any`.
        let deciding: Vec<&str> = vs
            .iter()
            .filter(|v| v.passed != self.all || vs.iter().all(|w| w.passed == v.passed))
            .map(|v| v.feedback.as_str())
            .collect();
        Ok(Verdict {
            passed,
            feedback: deciding.join("; "),
        })
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "not",
        "The inner check does not hold.",
        Reads::Inner,
        r#"{"check": "process_running", "args": {"name": "vim"}}"#,
        |a: Inner, lib| Ok(Not(Children::new(vec![build(lib, a)?]))),
    );
    lib.add(
        "all_of",
        "Every inner check holds.",
        Reads::Inner,
        r#"{"checks": [{"check": "file_exists", "args": {"path": "~/a.txt"}}, {"check": "file_contains", "args": {"path": "~/a.txt", "text": "hi"}}]}"#,
        |a: ManyArgs, lib| {
            if a.checks.is_empty() {
                return Err("`checks` is empty".into());
            }
            let c = a.checks.into_iter().map(|i| build(lib, i)).collect::<Result<Vec<_>, _>>()?;
            Ok(Many {
                children: Children::new(c),
                all: true,
            })
        },
    );
    lib.add(
        "any_of",
        "At least one inner check holds.",
        Reads::Inner,
        r#"{"checks": [{"check": "file_exists", "args": {"path": "~/a.txt"}}, {"check": "file_exists", "args": {"path": "~/b.txt"}}]}"#,
        |a: ManyArgs, lib| {
            if a.checks.is_empty() {
                return Err("`checks` is empty".into());
            }
            let c = a.checks.into_iter().map(|i| build(lib, i)).collect::<Result<Vec<_>, _>>()?;
            Ok(Many {
                children: Children::new(c),
                all: false,
            })
        },
    );
}

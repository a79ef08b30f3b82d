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
struct Not {
    /// The inner function's name, which the feedback says held or not.
    name: String,
    inner: Children,
}

impl Check for Not {
    fn probes(&self) -> Vec<Probe> {
        self.inner.probes()
    }

    fn judge(&self, r: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let v = self.inner.judge_all(r, log)?.remove(0);
        let name = &self.name;
        // Said as what the negation concluded, so a pass does not read like a failure.
        Ok(Verdict::when(
            !v.passed,
            format!("{name} does not hold, as required: {}", v.feedback),
            format!("{name} holds but must not: {}", v.feedback),
        ))
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
        let n = vs.len();
        let holding = vs.iter().filter(|v| v.passed).count();
        let passed = if self.all { holding == n } else { holding > 0 };
        // Report what decided it: the checks that hold when it passes (for `all`, every
        // one), the checks that fail when it fails (for `any`, every one).
        let deciding = |held: bool| {
            vs.iter()
                .filter(|v| v.passed == held)
                .map(|v| child(&v.feedback))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let failing = n - holding;
        let feedback = match (passed, holding) {
            _ if n == 1 => format!(
                "its only check {}: {}",
                if passed { "holds" } else { "fails" },
                deciding(passed)
            ),
            (true, h) if h == n => format!("all {n} checks hold: {}", deciding(true)),
            (true, 1) => format!("1 of {n} checks holds: {}", deciding(true)),
            (true, h) => format!("{h} of {n} checks hold: {}", deciding(true)),
            (false, 0) => format!("none of the {n} checks holds: {}", deciding(false)),
            (false, _) if failing == 1 => format!("1 of {n} checks fails: {}", deciding(false)),
            (false, _) => format!("{failing} of {n} checks fail: {}", deciding(false)),
        };
        Ok(Verdict {
            passed,
            feedback,
            score: None,
        })
    }
}

/// A child's feedback in a list joined by "; ", in parentheses when it is such a list
/// itself, so that nested combinators read unambiguously.
fn child(feedback: &str) -> std::borrow::Cow<'_, str> {
    if feedback.contains("; ") {
        format!("({feedback})").into()
    } else {
        feedback.into()
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "not",
        "The inner check does not hold.",
        Reads::Inner,
        r#"{"check": "process_running", "args": {"name": "vim"}}"#,
        |a: Inner, lib| {
            Ok(Not {
                name: a.check.clone(),
                inner: Children::new(vec![build(lib, a)?]),
            })
        },
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

#[cfg(test)]
mod tests {
    use crate::eval::functions::Library;
    use crate::eval::{AgentEvent, AgentLog};

    /// The feedback of `name` with `args` on a log whose answer is "42", and whether it
    /// passed.
    fn judge(name: &str, args: serde_json::Value) -> (bool, String) {
        let log = AgentLog {
            events: vec![AgentEvent::Answer { text: "42".into() }],
        };
        let v = Library::standard()
            .build(name, &args)
            .unwrap()
            .judge(&[], &log)
            .unwrap();
        (v.passed, v.feedback)
    }

    /// `answer_contains` of `text`: holds for "4" and "2", fails for others.
    fn answer(text: &str) -> serde_json::Value {
        serde_json::json!({"check": "answer_contains", "args": {"text": text}})
    }

    fn checks(texts: &[&str]) -> serde_json::Value {
        serde_json::json!({"checks": texts.iter().map(|t| answer(t)).collect::<Vec<_>>()})
    }

    #[test]
    fn negation_names_the_inner_function_and_says_what_it_concluded() {
        assert_eq!(
            judge("not", answer("x")),
            (
                true,
                "answer_contains does not hold, as required: the agent's answer reads '42', expected text containing 'x'".into()
            )
        );
        assert_eq!(
            judge("not", answer("4")),
            (
                false,
                "answer_contains holds but must not: the agent's answer reads '42' (containing '4')"
                    .into()
            )
        );
    }

    #[test]
    fn conjunctions_and_disjunctions_count_what_decided_them() {
        let holds = |t: &str| format!("the agent's answer reads '42' (containing '{t}')");
        let fails =
            |t: &str| format!("the agent's answer reads '42', expected text containing '{t}'");
        let cases = [
            (
                "all_of",
                &["4", "2"][..],
                true,
                format!("all 2 checks hold: {}; {}", holds("4"), holds("2")),
            ),
            (
                "all_of",
                &["4", "2", "x"],
                false,
                format!("1 of 3 checks fails: {}", fails("x")),
            ),
            (
                "all_of",
                &["4", "x", "y"],
                false,
                format!("2 of 3 checks fail: {}; {}", fails("x"), fails("y")),
            ),
            (
                "all_of",
                &["x", "y"],
                false,
                format!("none of the 2 checks holds: {}; {}", fails("x"), fails("y")),
            ),
            (
                "all_of",
                &["4"],
                true,
                format!("its only check holds: {}", holds("4")),
            ),
            (
                "any_of",
                &["x", "4", "y"],
                true,
                format!("1 of 3 checks holds: {}", holds("4")),
            ),
            (
                "any_of",
                &["4", "x", "2"],
                true,
                format!("2 of 3 checks hold: {}; {}", holds("4"), holds("2")),
            ),
            (
                "any_of",
                &["x", "y"],
                false,
                format!("none of the 2 checks holds: {}; {}", fails("x"), fails("y")),
            ),
            (
                "any_of",
                &["x"],
                false,
                format!("its only check fails: {}", fails("x")),
            ),
        ];
        for (name, texts, passed, feedback) in cases {
            assert_eq!(
                judge(name, checks(texts)),
                (passed, feedback),
                "{name} {texts:?}"
            );
        }
    }

    #[test]
    fn a_nested_list_is_set_off_in_parentheses() {
        let nested = serde_json::json!({"checks": [answer("4"), {"check": "any_of", "args": checks(&["x", "y"])}]});
        let (passed, feedback) = judge("all_of", nested);
        assert!(!passed);
        assert_eq!(
            feedback,
            "1 of 2 checks fails: (none of the 2 checks holds: the agent's answer reads '42', expected text containing 'x'; the agent's answer reads '42', expected text containing 'y')"
        );
    }
}

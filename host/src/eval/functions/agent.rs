//! The agent's own actions and answers, read from its log rather than a machine.

use super::{Library, Reads, clip};
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict};
use pincer_shared::probe::Probe;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AnswerArgs {
    /// The text.
    text: String,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TypedArgs {
    /// Text the agent must have typed (within one typing action).
    text: String,
    /// Only count typing on this environment role (one the task declares).
    #[serde(default)]
    env: Option<String>,
    /// Compare ignoring case (CRAB's templates ask for it: CRAB's check ignores case).
    #[serde(default)]
    ignore_case: bool,
}

fn norm(s: &str, fold: bool) -> String {
    if fold { s.to_lowercase() } else { s.to_owned() }
}

/// The submitted answer contains (or equals) a text.
#[derive(Debug)]
struct Answer {
    text: String,
    fold: bool,
    exact: bool,
}

impl Check for Answer {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let Some(got) = log.answer() else {
            return Ok(Verdict::fail("the agent has not submitted an answer"));
        };
        let (g, w) = (
            norm(got.trim(), self.fold),
            norm(self.text.trim(), self.fold),
        );
        let ok = if self.exact { g == w } else { g.contains(&w) };
        let rel = if self.exact { "to be" } else { "to contain" };
        Ok(Verdict::when(
            ok,
            format!("the agent answered '{}'", clip(got, 60)),
            format!(
                "the agent answered '{}', expected it {rel} '{}'",
                clip(got, 60),
                clip(&self.text, 60)
            ),
        ))
    }
}

/// The agent typed a text.
#[derive(Debug)]
struct Typed {
    a: TypedArgs,
}

impl Check for Typed {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let fold = self.a.ignore_case;
        let want = norm(&self.a.text, fold);
        let typed: Vec<&str> = log.typed(self.a.env.as_deref()).collect();
        Ok(match typed.iter().find(|t| norm(t, fold).contains(&want)) {
            Some(t) => Verdict::pass(format!("the agent typed '{}'", clip(t, 60))),
            None if typed.is_empty() => Verdict::fail("the agent has typed nothing"),
            None => Verdict::fail(format!(
                "the agent typed {}, none containing '{}'",
                clip(
                    &typed
                        .iter()
                        .map(|t| format!("'{t}'"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    80
                ),
                clip(&self.a.text, 60)
            )),
        })
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "answer_contains",
        "The agent's submitted answer contains the text.",
        Reads::Agent,
        r#"{"text": "Dortmund"}"#,
        |a: AnswerArgs, _| {
            Ok(Answer {
                text: a.text,
                fold: a.ignore_case,
                exact: false,
            })
        },
    );
    lib.add(
        "answer_equals",
        "The agent's submitted answer is the text (surrounding whitespace ignored).",
        Reads::Agent,
        r#"{"text": "42"}"#,
        |a: AnswerArgs, _| {
            Ok(Answer {
                text: a.text,
                fold: a.ignore_case,
                exact: true,
            })
        },
    );
    lib.add(
        "typed_contains",
        "One of the agent's typing actions contains the text (on one environment if `env` is given).",
        Reads::Agent,
        r#"{"text": "hello world"}"#,
        |a: TypedArgs, _| Ok(Typed { a }),
    );
}

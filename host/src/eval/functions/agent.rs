//! The agent's own actions and answers, read from its log rather than a machine.

use super::{Library, Reads, clip, judge_text, quote_passing};
use crate::eval::text::TextMatch;
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict};
use pincer_shared::probe::Probe;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AnswerMatchArgs {
    /// How the answer is compared.
    text: TextMatch,
}

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
struct TypedMatchArgs {
    /// How one typing action's text is compared.
    text: TextMatch,
    /// Only count typing on this environment role (one the task declares).
    #[serde(default)]
    env: Option<String>,
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

/// The submitted answer passes a text match.
#[derive(Debug)]
struct Answer(TextMatch);

impl Check for Answer {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        Ok(match log.answer() {
            Some(got) => judge_text("the agent's answer", got, &self.0),
            None => Verdict::fail(format!(
                "the agent has not submitted an answer, expected one {}",
                self.0
            )),
        })
    }
}

/// The agent typed a text (within one typing action).
#[derive(Debug)]
struct Typed {
    test: TextMatch,
    env: Option<String>,
}

impl Check for Typed {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let typed: Vec<&str> = log.typed(self.env.as_deref()).collect();
        let on = self
            .env
            .as_deref()
            .map(|role| format!(" on {role}"))
            .unwrap_or_default();
        let m = &self.test;
        Ok(match typed.iter().find(|t| m.test(t)) {
            Some(t) => Verdict::pass(format!("the agent typed {}{on} ({m})", quote_passing(t, m))),
            None if typed.is_empty() => Verdict::fail(format!(
                "the agent has typed nothing{on}, expected text {m}"
            )),
            None => Verdict::fail(format!(
                "the agent typed {}{on}, none {m}",
                clip(
                    &typed
                        .iter()
                        .map(|t| format!("'{}'", clip(t, 40)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    100
                ),
            )),
        })
    }
}

/// Passes when the agent's last word was that the task cannot be done.
#[derive(Debug)]
struct SaidInfeasible;

impl Check for SaidInfeasible {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let reason = log.events.iter().rev().find_map(|e| match e {
            crate::eval::AgentEvent::Infeasible { reason } => Some(reason.as_str()),
            _ => None,
        });
        Ok(match reason {
            Some(r) if log.said_infeasible() => Verdict::pass(format!(
                "the agent called the task infeasible: {}",
                clip(r, 200)
            )),
            _ => Verdict::fail("the agent did not end by calling the task infeasible"),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "agent_said_infeasible",
        "The agent's last word was that the task cannot be done (a task whose right answer is to say so; OSWorld's `infeasible`).",
        Reads::Agent,
        "{}",
        |_: NoArgs, _| Ok(SaidInfeasible),
    );
    lib.add(
        "answer",
        "The agent's submitted answer passes a text match.",
        Reads::Agent,
        r#"{"text": {"equals": "42"}}"#,
        |a: AnswerMatchArgs, _| Ok(Answer(a.text)),
    );
    lib.add(
        "answer_contains",
        "The agent's submitted answer contains the text (answer with `contains`).",
        Reads::Agent,
        r#"{"text": "Dortmund"}"#,
        |a: AnswerArgs, _| {
            Ok(Answer(
                TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
            ))
        },
    );
    lib.add(
        "answer_equals",
        "The agent's submitted answer is the text, surrounding whitespace ignored (answer with `equals`).",
        Reads::Agent,
        r#"{"text": "42"}"#,
        |a: AnswerArgs, _| {
            Ok(Answer(
                TextMatch::equals(&a.text).ignoring_case(a.ignore_case),
            ))
        },
    );
    lib.add(
        "typed",
        "One of the agent's typing actions passes a text match (on one environment if `env` is given).",
        Reads::Agent,
        r#"{"text": {"contains": "hello world"}}"#,
        |a: TypedMatchArgs, _| {
            Ok(Typed {
                test: a.text,
                env: a.env,
            })
        },
    );
    lib.add(
        "typed_contains",
        "One of the agent's typing actions contains the text (typed with `contains`; on one environment if `env` is given).",
        Reads::Agent,
        r#"{"text": "hello world"}"#,
        |a: TypedArgs, _| {
            Ok(Typed {
                test: TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
                env: a.env,
            })
        },
    );
}

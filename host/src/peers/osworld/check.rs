//! The `osworld` checkpoint function: an imported task's evaluator, scored as OSWorld's
//! `DesktopEnv.evaluate()` (desktop-env 1.0.2) scores it. pincer's getters
//! ([`super::getters`]) fetch the end state over the guest protocol, and the
//! [`Scorer`](super::scorer::Scorer) calls OSWorld's metric functions on what they return
//! and combines them (`and`: 0 if any is 0, else the mean; `or`: 1 if any is 1, else the
//! highest).
//!
//! As in OSWorld, a feasible task scores 0 when the agent's last word was that it cannot be
//! done. A metric that raises, a gold file missing from the cache or a result file larger
//! than a probe can carry is an evaluator error, never the agent's failure.

use super::getters::Get;
use super::model::{Evaluator, Getter, OneOrMany};
use super::scorer::{Call, Request, Scorer};
use crate::eval::functions::{LINUX, Library, Reads};
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict};
use pincer_shared::probe::Probe;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// OSWorld's task id (without the domain): the folder of its files in the cache.
    task: String,
    /// OSWorld's evaluator as its task file writes it, without `postconfig`.
    #[schemars(with = "serde_json::Value")]
    evaluator: Value,
    /// The output postconfig commands keep for the `cache_file` getter, by file name.
    #[serde(default)]
    kept: BTreeMap<String, Kept>,
}

/// A postconfig command whose output OSWorld keeps in the task's cache folder (`stdout` or
/// `stderr` of an `execute` step) for the `cache_file` getter. pincer runs it when the final
/// state is judged, after every finalize step; the importer keeps only commands that no
/// state-changing step follows, so it reads the state OSWorld's would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Kept {
    /// The command, as pincer runs it in the guest.
    pub argv: Vec<String>,
    /// Its stderr rather than its stdout.
    #[serde(default)]
    pub stderr: bool,
}

/// Adds `osworld` to `lib`: gold files come from the cache at `assets`, metrics run in
/// `scorer`.
pub fn register(lib: &mut Library, assets: PathBuf, scorer: Arc<Scorer>) {
    lib.add(
        "osworld",
        "An imported OSWorld task's evaluator, scored by OSWorld's own metric code (desktop-env, pinned) in a sandboxed worker; graded 0..1, judged on the final state.",
        Reads::Env(LINUX),
        r#"{"task": "<OSWorld id>", "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": "ls ~"}, "expected": {"type": "rule", "rules": {"expected": "a\n"}}}}"#,
        move |a: Args, _| OsWorld::build(a, &assets, scorer.clone()),
    );
}

#[derive(Debug)]
struct Metric {
    module: &'static str,
    name: String,
    result: Get,
    expected: Option<Get>,
    options: serde_json::Map<String, Value>,
}

/// A built `osworld` check.
#[derive(Debug)]
struct OsWorld {
    task: String,
    single: bool,
    conj: String,
    metrics: Vec<Metric>,
    scorer: Arc<Scorer>,
}

/// OSWorld's `options`: one map, or one per metric (`null` for none).
fn options(ev: &Evaluator, n: usize) -> Result<Vec<serde_json::Map<String, Value>>, String> {
    let map = |v: Option<&Value>| match v {
        None | Some(Value::Null) => Ok(serde_json::Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err("`options` holds a value that is not an object".to_owned()),
    };
    match &ev.options {
        None => Ok(vec![serde_json::Map::new(); n]),
        Some(OneOrMany::One(o)) if n == 1 => Ok(vec![map(o.as_ref())?]),
        Some(OneOrMany::Many(list)) if list.len() == n => {
            list.iter().map(|o| map(o.as_ref())).collect()
        }
        Some(_) => Err(format!(
            "`options` does not give one entry per metric ({n})"
        )),
    }
}

/// The getters of `list` (result or expected), one per metric.
fn getters(list: Option<&OneOrMany<Option<Getter>>>, n: usize) -> Option<Vec<Option<&Getter>>> {
    let items: Vec<Option<&Getter>> = list?.items().into_iter().map(Option::as_ref).collect();
    (items.len() == n).then_some(items)
}

impl OsWorld {
    fn build(a: Args, assets: &Path, scorer: Arc<Scorer>) -> Result<Self, String> {
        let ev: Evaluator =
            serde_json::from_value(a.evaluator).map_err(|e| format!("evaluator: {e}"))?;
        if ev.is_infeasible() {
            return Err(
                "the `infeasible` evaluator is judged by agent_said_infeasible, not scored".into(),
            );
        }
        let names = ev.funcs();
        let n = names.len();
        let results = getters(ev.result.as_ref(), n).ok_or(format!(
            "the evaluator does not give one result getter per metric ({n})"
        ))?;
        // OSWorld passes `expected` only when the evaluator has a non-empty one.
        let expected = match &ev.expected {
            None => vec![None; n],
            Some(_) => getters(ev.expected.as_ref(), n).ok_or(format!(
                "the evaluator does not give one expected getter per metric ({n})"
            ))?,
        };
        let options = options(&ev, n)?;
        let mut metrics = Vec::new();
        for (((name, result), expected), options) in
            names.into_iter().zip(results).zip(expected).zip(options)
        {
            let (module, _) = super::metric::lookup(name).ok_or(format!(
                "not supported: desktop-env {} has no metric named {name}",
                super::metric::DESKTOP_ENV
            ))?;
            super::metric::supported(name)
                .map_err(|why| format!("not supported: metric {name} {why}"))?;
            let result = result.ok_or(format!("metric {name} has no result getter"))?;
            metrics.push(Metric {
                module,
                name: name.to_owned(),
                result: Get::build(result, &a.task, assets, &a.kept)?,
                expected: expected
                    .map(|g| Get::build(g, &a.task, assets, &a.kept))
                    .transpose()?,
                options,
            });
        }
        let conj = ev.conj.clone().unwrap_or_else(|| "and".into());
        if conj != "and" && conj != "or" {
            return Err(format!(
                "`conj` is {conj:?}: OSWorld knows \"and\" and \"or\""
            ));
        }
        Ok(Self {
            task: a.task,
            single: matches!(ev.func, OneOrMany::One(_)),
            conj,
            metrics,
            scorer,
        })
    }

    fn gets(&self) -> impl Iterator<Item = &Get> {
        self.metrics
            .iter()
            .flat_map(|m| std::iter::once(&m.result).chain(m.expected.as_ref()))
    }
}

impl Check for OsWorld {
    fn probes(&self) -> Vec<Probe> {
        self.gets().flat_map(Get::probes).collect()
    }

    fn judge(&self, replies: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        if log.said_infeasible() {
            return Ok(Verdict::scored(
                0.0,
                "the agent said the task cannot be done; OSWorld scores a feasible task 0 then",
            ));
        }
        let ws = self
            .scorer
            .workspace()
            .map_err(|e| EvalError::Scorer(e.to_string()))?;
        let mut rest = replies;
        let mut value = |g: &Get| {
            let (mine, after) = rest.split_at(g.probes().len().min(rest.len()));
            rest = after;
            g.value(mine, &ws)
        };
        let mut calls = Vec::new();
        for m in &self.metrics {
            let result = value(&m.result)?;
            let expected = m.expected.as_ref().map(&mut value).transpose()?;
            calls.push(Call {
                result,
                has_expected: expected.is_some(),
                expected: expected.unwrap_or(Value::Null),
                options: m.options.clone(),
                result_getter: m.result.replay(&ws),
                expected_getter: m.expected.as_ref().and_then(|g| g.replay(&ws)),
            });
        }
        let req = Request {
            metrics: self
                .metrics
                .iter()
                .map(|m| (m.module.to_owned(), m.name.clone()))
                .collect(),
            single: self.single,
            conj: self.conj.clone(),
            calls,
        };
        let scored = self
            .scorer
            .score(&req)
            .map_err(|e| EvalError::Scorer(format!("OSWorld task {}: {e}", self.task)))?;
        let names: Vec<&str> = self.metrics.iter().map(|m| m.name.as_str()).collect();
        let each = scored
            .scores
            .iter()
            .zip(&names)
            .map(|(s, n)| format!("{n} {s}"))
            .collect::<Vec<_>>()
            .join(", ");
        let how = if self.single {
            String::new()
        } else {
            format!(" ({}: {each})", self.conj)
        };
        Ok(Verdict::scored(
            scored.score,
            format!(
                "OSWorld's {} (desktop-env {}) scored {}{how}",
                names.join(" + "),
                super::metric::DESKTOP_ENV,
                scored.score
            ),
        ))
    }
}

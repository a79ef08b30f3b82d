//! OSWorld's task files as they are written (`evaluation_examples/examples/<domain>/<id>.json`
//! and the `test_all.json` index), read typed but leniently: every field pincer does not use
//! is kept in the original, which stays inside the imported task for provenance.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One OSWorld task file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsTask {
    /// The task's id (a UUID; not unique across domains).
    pub id: String,
    /// What the agent is told.
    pub instruction: String,
    /// Setup steps, in order.
    #[serde(default)]
    pub config: Vec<ConfigStep>,
    /// How the end state is scored.
    pub evaluator: Evaluator,
    /// The apps the task involves.
    #[serde(default)]
    pub related_apps: Vec<String>,
}

/// One setup (or postconfig) step: its kind and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigStep {
    /// `download`, `launch`, `open`, `execute`, `command`, `activate_window`, `sleep`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The kind's parameters.
    #[serde(default)]
    pub parameters: serde_json::Value,
}

/// One value or a list of them (OSWorld writes both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    /// Several.
    Many(Vec<T>),
    /// One.
    One(T),
}

impl<T> OneOrMany<T> {
    /// The values, in order.
    pub fn items(&self) -> Vec<&T> {
        match self {
            Self::Many(v) => v.iter().collect(),
            Self::One(t) => vec![t],
        }
    }
}

/// A task's evaluator: metric functions over what getters fetch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluator {
    /// The metric function(s), by name in `desktop_env.evaluators.metrics`.
    pub func: OneOrMany<String>,
    /// How several metrics combine: `and` (default) or `or`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conj: Option<String>,
    /// The getter(s) of the agent's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<OneOrMany<Option<Getter>>>,
    /// The getter(s) of what is expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<OneOrMany<Option<Getter>>>,
    /// Keyword options of the metric(s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<OneOrMany<Option<serde_json::Value>>>,
    /// Steps run after the agent has ended and before scoring.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub postconfig: Vec<ConfigStep>,
}

impl Evaluator {
    /// The metric names.
    pub fn funcs(&self) -> Vec<&str> {
        self.func.items().into_iter().map(String::as_str).collect()
    }

    /// Every getter named, result and expected.
    pub fn getters(&self) -> Vec<&Getter> {
        [&self.result, &self.expected]
            .into_iter()
            .flatten()
            .flat_map(|g| g.items())
            .flatten()
            .collect()
    }

    /// Whether this is OSWorld's infeasible task: the right answer is to say it cannot be
    /// done (only the plain string form counts, as in OSWorld's `evaluate`).
    pub fn is_infeasible(&self) -> bool {
        matches!(&self.func, OneOrMany::One(f) if f == "infeasible")
    }
}

/// A getter: its kind (`vm_file`, `cloud_file`, `rule`, ...) and its fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Getter {
    /// The kind (`get_<type>` in `desktop_env.evaluators.getters`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its other fields (`path`, `dest`, `url`, `rules`, `command`, ...).
    #[serde(flatten)]
    pub fields: BTreeMap<String, serde_json::Value>,
}

impl Getter {
    /// A string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(serde_json::Value::as_str)
    }
}

/// `test_all.json` and its kin: task ids by domain.
pub type Index = BTreeMap<String, Vec<String>>;

/// A flag as Python reads it (`if config.get("multi")`): OSWorld's files write `true` and
/// also `"true"`, and any non-empty string, non-zero number or non-empty list counts.
pub fn truthy(v: Option<&serde_json::Value>) -> bool {
    use serde_json::Value;
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

//! Tasks: what an agent is asked to do, on which environments, how each environment is set
//! up and torn down, and the checkpoint graph that decides success. Task files are JSON or
//! TOML; their JSON Schema is generated from these types (`pincer task schema`), and a bad
//! file is reported with the file, the path inside it and what was expected.

pub mod compat;
mod load;
pub mod oracle;
pub mod selector;
pub mod steps;

pub use load::{LoadError, Source, TaskSet, bundled_suites, load_file, load_path, parse, select};

use pincer_shared::Platform;
use pincer_shared::tool::ToolSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A benchmark task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Unique id (letters, digits, '-', '_', '.').
    pub id: String,
    /// What the agent is told to do.
    pub instruction: String,
    /// Free-form labels for filtering (`--tag`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The environments the task needs, by role (`desktop`, `phone`, `desktop2`, ...).
    pub envs: BTreeMap<String, EnvNeed>,
    /// Steps that put each environment into the task's starting state, by role.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub setup: BTreeMap<String, Vec<steps::Step>>,
    /// Steps run after the agent has ended the run and before the final check, by role
    /// (a peer benchmark's "postconfig": save the open document, close a dialog). Recorded
    /// in the trajectory (`finalize.jsonl`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub finalize: BTreeMap<String, Vec<steps::Step>>,
    /// Steps that clean up afterwards, by role (run even when the task failed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub teardown: BTreeMap<String, Vec<steps::Step>>,
    /// API tools the agent may call besides acting on screens, by the role of the
    /// environment that runs them (a Linux guest started with `--allow-tools`): each a
    /// program and argument template fixed here, typed parameters the agent fills, and
    /// what its sandbox may see.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(with = "BTreeMap<String, Vec<BTreeMap<String, serde_json::Value>>>")]
    pub tools: BTreeMap<String, Vec<ToolSpec>>,
    /// The checkpoint graph: a DAG; the task succeeds when every sink has passed.
    pub checkpoints: Vec<Checkpoint>,
    /// What ends a run of the task besides its limits: every sink passing (`sinks`, CRAB's
    /// rule, the default) or only the agent (`agent`: done, infeasible or an answer;
    /// OSWorld's and AndroidWorld's rule), after which the finalize steps run and the final
    /// state is judged once.
    #[serde(default, skip_serializing_if = "EndRule::is_default")]
    pub end: EndRule,
    /// Step and time limits.
    #[serde(default)]
    pub limits: Limits,
    /// What must hold before setup for the task to make sense (for people reading it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<String>,
    /// Steps that solve the task, replayed by the oracle agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oracle: Option<Vec<oracle::OracleStep>>,
    /// Where an imported task came from, kept for provenance and never read by pincer: the
    /// peer benchmark, and its original task as its authors wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<serde_json::Value>,
    /// What the task needs that a run may lack, as an importer found it: runs skip such a
    /// task before it starts and say why; it is never scored.
    #[serde(default, skip_serializing_if = "Requires::is_empty")]
    pub requires: Requires,
    /// A peer benchmark's own checks of some checkpoints, by scoring mode (`crab`), where
    /// they differ from pincer's: `pincer run --compat crab` scores with them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub compat: BTreeMap<String, Vec<compat::CompatCheck>>,
}

/// What a task needs beyond an environment of its platform.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Requires {
    /// Why it needs the live web (pages, downloads at run time): it runs only when the run
    /// allows a network (`--allow-network`), which then is not hermetic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Why it needs an account pincer cannot hold (Google Drive, a sign-in): never run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// What it uses that pincer does not implement (a step kind, getter or metric): never
    /// run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
    /// Programs its setup starts that a machine may lack (`google-chrome`, `code`, `vlc`):
    /// a run on an image or on local desktops that lack one leaves the task out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<String>,
}

impl Requires {
    /// Nothing beyond the environment.
    pub fn is_empty(&self) -> bool {
        self.network.is_none() && self.account.is_none() && self.unsupported.is_empty()
    }

    /// Why a run cannot run the task, if it cannot; `network`: whether the run allows one.
    pub fn refusal(&self, network: bool) -> Option<String> {
        if !self.unsupported.is_empty() {
            return Some(format!("not supported: {}", self.unsupported.join("; ")));
        }
        if let Some(why) = &self.account {
            return Some(format!("needs an account: {why}"));
        }
        match &self.network {
            Some(why) if !network => Some(format!(
                "needs the live web ({why}); run with --allow-network to include it"
            )),
            _ => None,
        }
    }
}

/// What kind of environment a role needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvNeed {
    /// The platform.
    pub platform: Platform,
}

/// One node of the checkpoint graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// Id, unique within the task.
    pub id: String,
    /// Role of the environment it reads; omitted for checks of the agent's own actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Name of a checkpoint function (`pincer task functions` lists them).
    pub check: String,
    /// The function's arguments.
    #[serde(default = "empty_args", skip_serializing_if = "is_empty_args")]
    #[schemars(with = "BTreeMap<String, serde_json::Value>")]
    pub args: serde_json::Value,
    /// Checkpoints that must pass before this one is checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Judged once, on the final state after the finalize steps, never after a step (a
    /// peer's score of the end state); a final checkpoint has no successors.
    #[serde(rename = "final", default, skip_serializing_if = "std::ops::Not::not")]
    pub final_only: bool,
}

/// What ends a task run besides its limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EndRule {
    /// The run ends the moment every sink checkpoint has passed (CRAB's rule).
    #[default]
    Sinks,
    /// Only the agent ends the run (done, infeasible, an answer) or a limit does; then the
    /// finalize steps run and the final state is judged once (OSWorld's rule).
    Agent,
}

impl EndRule {
    fn is_default(&self) -> bool {
        *self == Self::Sinks
    }
}

impl std::fmt::Display for EndRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sinks => "sinks",
            Self::Agent => "agent",
        })
    }
}

impl std::str::FromStr for EndRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sinks" => Ok(Self::Sinks),
            "agent" => Ok(Self::Agent),
            other => Err(format!(
                "'{other}' is no end rule: use sinks (the run ends when every sink passes) or agent (only the agent ends it)"
            )),
        }
    }
}

impl Task {
    /// The declared tool called `name` and the role whose environment runs it.
    pub fn tool(&self, name: &str) -> Option<(&str, &ToolSpec)> {
        self.tools
            .iter()
            .flat_map(|(role, list)| list.iter().map(move |t| (role.as_str(), t)))
            .find(|(_, t)| t.name == name)
    }

    /// Checks the declared tools: each runs on a Linux role of the task, is a valid
    /// declaration, and has a name no other tool has. Errors say where (`tools.ROLE[i]`).
    pub fn check_tools(&self) -> Result<(), (String, String)> {
        let mut seen = std::collections::BTreeSet::new();
        for (role, list) in &self.tools {
            match self.envs.get(role) {
                Some(EnvNeed {
                    platform: Platform::Linux,
                }) => {}
                Some(_) => {
                    return Err((
                        format!("tools.{role}"),
                        "API tools run only on Linux guests".into(),
                    ));
                }
                None => {
                    return Err((
                        format!("tools.{role}"),
                        format!("there is no environment '{role}' in `envs`"),
                    ));
                }
            }
            for (i, t) in list.iter().enumerate() {
                let at = format!("tools.{role}[{i}]");
                t.validate().map_err(|e| (at.clone(), e))?;
                if !seen.insert(t.name.as_str()) {
                    return Err((at, format!("a second tool called {}", t.name)));
                }
            }
        }
        Ok(())
    }
}

fn empty_args() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn is_empty_args(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(serde_json::Map::is_empty)
}

/// When a run gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Most agent actions.
    #[serde(default = "default_steps")]
    pub max_steps: u32,
    /// Most wall-clock seconds from the first action.
    #[serde(default = "default_seconds")]
    pub max_seconds: u32,
}

fn default_steps() -> u32 {
    15
}

fn default_seconds() -> u32 {
    600
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_steps: default_steps(),
            max_seconds: default_seconds(),
        }
    }
}

/// How a task spans environments, for aggregating results. A task that needs no environment
/// (it judges only the agent's answers and typing) counts as single-desktop: it runs on
/// whatever environment set it is given, in practice one desktop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlatformClass {
    /// One Linux desktop (or no environment at all).
    SingleDesktop,
    /// One Android device.
    Android,
    /// Two or more environments.
    CrossEnvironment,
}

impl std::fmt::Display for PlatformClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SingleDesktop => "single-desktop",
            Self::Android => "android",
            Self::CrossEnvironment => "cross-environment",
        })
    }
}

impl Task {
    /// Which aggregate the task belongs to.
    pub fn platform_class(&self) -> PlatformClass {
        match self.envs.values().collect::<Vec<_>>().as_slice() {
            [one] if one.platform == Platform::Android => PlatformClass::Android,
            [] | [_] => PlatformClass::SingleDesktop,
            _ => PlatformClass::CrossEnvironment,
        }
    }

    /// The task's JSON Schema.
    pub fn schema() -> serde_json::Value {
        serde_json::to_value(schemars::schema_for!(Self)).unwrap_or_default()
    }

    /// The checkpoint graph in Graphviz DOT.
    pub fn to_dot(&self) -> String {
        let mut out = format!(
            "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, style=rounded];\n",
            escape_dot(&self.id)
        );
        for c in &self.checkpoints {
            let env = c.env.as_deref().unwrap_or("agent");
            out.push_str(&format!(
                "  \"{}\" [label=\"{}\\n{}({})\"];\n",
                escape_dot(&c.id),
                escape_dot(&c.id),
                escape_dot(&c.check),
                escape_dot(env)
            ));
        }
        for c in &self.checkpoints {
            for a in &c.after {
                out.push_str(&format!(
                    "  \"{}\" -> \"{}\";\n",
                    escape_dot(a),
                    escape_dot(&c.id)
                ));
            }
        }
        out.push_str("}\n");
        out
    }

    /// The checkpoint graph as a Mermaid flowchart.
    pub fn to_mermaid(&self) -> String {
        let ids: BTreeMap<&str, String> = self
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.as_str(), format!("n{i}")))
            .collect();
        let mut out = String::from("flowchart LR\n");
        for c in &self.checkpoints {
            let env = c.env.as_deref().unwrap_or("agent");
            out.push_str(&format!(
                "  {}[\"{}<br/>{}({})\"]\n",
                ids[c.id.as_str()],
                escape_mermaid(&c.id),
                escape_mermaid(&c.check),
                escape_mermaid(env)
            ));
        }
        for c in &self.checkpoints {
            for a in &c.after {
                if let Some(from) = ids.get(a.as_str()) {
                    out.push_str(&format!("  {from} --> {}\n", ids[c.id.as_str()]));
                }
            }
        }
        out
    }
}

/// A file-name-safe form of an id.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn escape_dot(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn escape_mermaid(s: &str) -> String {
    s.replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        serde_json::from_value(serde_json::json!({
            "id": "t1",
            "instruction": "write hello",
            "envs": {"desktop": {"platform": "linux"}},
            "checkpoints": [
                {"id": "a", "env": "desktop", "check": "file_exists", "args": {"path": "/tmp/x"}},
                {"id": "b \"q\"", "env": "desktop", "check": "file_contains", "args": {"path": "/tmp/x", "text": "hi"}, "after": ["a"]}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn defaults_and_classes() {
        let t = task();
        assert_eq!(t.limits, Limits::default());
        assert_eq!(t.platform_class(), PlatformClass::SingleDesktop);
        let mut cross = t.clone();
        cross.envs.insert(
            "phone".into(),
            EnvNeed {
                platform: Platform::Android,
            },
        );
        assert_eq!(cross.platform_class(), PlatformClass::CrossEnvironment);
        let mut phone = cross.clone();
        phone.envs.remove("desktop");
        assert_eq!(phone.platform_class(), PlatformClass::Android);
        // Answer-only tasks need no environment; they are not cross-environment.
        let mut none = t;
        none.envs.clear();
        assert_eq!(none.platform_class(), PlatformClass::SingleDesktop);
    }

    #[test]
    fn graphs_export_to_dot_and_mermaid() {
        let t = task();
        let dot = t.to_dot();
        assert!(dot.contains("\"a\" -> \"b \\\"q\\\"\""), "{dot}");
        assert!(dot.contains("file_contains(desktop)"), "{dot}");
        let m = t.to_mermaid();
        assert!(m.starts_with("flowchart LR"), "{m}");
        assert!(m.contains("n0 --> n1"), "{m}");
        assert!(m.contains("b #quot;q#quot;"), "{m}");
    }

    #[test]
    fn schema_describes_the_fields() {
        let s = Task::schema().to_string();
        for field in [
            "instruction",
            "checkpoints",
            "max_steps",
            "wait_window",
            "after",
        ] {
            assert!(s.contains(field), "schema lacks {field}");
        }
    }
}

//! The agents' action space: typed actions per platform, the tool (function-calling)
//! definitions with JSON schemas that LLM backends send, parsing of a model's tool call or
//! JSON text into an action, and resolution of an action into protocol input for one
//! environment. Elements are named by their Set-of-Marks number; the click lands on the
//! centre of the element's box.

use pincer_shared::Action;
use pincer_shared::Platform;
use pincer_shared::action::{Gesture, MouseButton, Point, SystemKey};
use pincer_shared::key::parse_combo;
use pincer_shared::observe::Rect;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where on the screen: a Set-of-Marks element or coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Target {
    /// A numbered element from the marked screenshot.
    Element {
        /// The element's number.
        element: u32,
    },
    /// Screen pixels.
    Point {
        /// From the left.
        x: i32,
        /// From the top.
        y: i32,
    },
}

/// Targets are shown to models as one object with optional fields, which every provider's
/// schema dialect accepts (Gemini takes no `anyOf`), instead of the untagged union.
impl JsonSchema for Target {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Target".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "properties": {
                "element": {"type": "integer", "description": "element number"},
                "x": {"type": "integer"},
                "y": {"type": "integer"}
            }
        })
    }
}

/// One action an agent chose. Its JSON Schema is where the tools LLMs call come from
/// ([`tools`]): the doc comments of variants and fields are what the models read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum AgentAction {
    /// Left-click an element or a point.
    Click {
        /// Environment role.
        env: String,
        /// Where to click.
        target: Target,
    },
    /// Double-click an element or a point.
    DoubleClick {
        /// Environment role.
        env: String,
        /// Where to double-click.
        target: Target,
    },
    /// Right-click an element or a point.
    RightClick {
        /// Environment role.
        env: String,
        /// Where to right-click.
        target: Target,
    },
    /// Type text into the focused field (or click a target first).
    Type {
        /// Environment role.
        env: String,
        /// Text to type.
        text: String,
        /// Optional: click here first.
        #[serde(default)]
        target: Option<Target>,
    },
    /// Press one key: enter, tab, escape, backspace, delete, up, down, left, right, home,
    /// end, pageup, pagedown, f1..f12, or a character.
    Key {
        /// Environment role.
        env: String,
        /// The key.
        key: String,
    },
    /// Press a key combination, modifiers first: ["ctrl", "s"].
    Hotkey {
        /// Environment role.
        env: String,
        /// The keys, modifiers first.
        keys: Vec<String>,
    },
    /// Scroll with the mouse wheel.
    Scroll {
        /// Environment role.
        env: String,
        /// Notches right (negative: left).
        dx: i32,
        /// Notches down (negative: up).
        dy: i32,
        /// Optional: where to scroll.
        #[serde(default)]
        target: Option<Target>,
    },
    /// Move the pointer without clicking (to hover: tooltips, menus that open on hover).
    Move {
        /// Environment role.
        env: String,
        /// Where to move the pointer.
        target: Target,
    },
    /// Drag with the left button held.
    Drag {
        /// Environment role.
        env: String,
        /// Start.
        from: Target,
        /// End.
        to: Target,
    },
    /// Tap an element or a point.
    Tap {
        /// Environment role.
        env: String,
        /// Where to tap.
        target: Target,
    },
    /// Press and hold an element or a point.
    LongPress {
        /// Environment role.
        env: String,
        /// Where to press.
        target: Target,
    },
    /// Swipe from one place to another.
    Swipe {
        /// Environment role.
        env: String,
        /// Start.
        from: Target,
        /// End.
        to: Target,
    },
    /// Enter text into the focused field.
    Text {
        /// Environment role.
        env: String,
        /// Text to enter.
        text: String,
    },
    /// Press the home button.
    Home {
        /// Environment role.
        env: String,
    },
    /// Press the back button.
    Back {
        /// Environment role.
        env: String,
    },
    /// Wait a few seconds for something to load.
    Wait {
        /// Seconds, at most 10.
        seconds: f64,
    },
    /// Call one of the task's API tools with typed arguments (only tasks that declare
    /// tools offer it; LLMs see each tool as `api_NAME` with its own parameters).
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments by parameter name.
        #[serde(default)]
        arguments: BTreeMap<String, serde_json::Value>,
    },
    /// Declare that the task is done.
    Complete,
    /// Give the answer the task asks for.
    Submit {
        /// The answer.
        answer: String,
    },
    /// Declare that the task cannot be done, and why.
    Infeasible {
        /// Why it cannot be done.
        reason: String,
    },
}

/// Why an agent's output is not a usable action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid action: {0}")]
pub struct InvalidAction(pub String);

impl AgentAction {
    /// The environment role it acts on, if any.
    pub fn env(&self) -> Option<&str> {
        match self {
            Self::Click { env, .. }
            | Self::DoubleClick { env, .. }
            | Self::RightClick { env, .. }
            | Self::Type { env, .. }
            | Self::Key { env, .. }
            | Self::Hotkey { env, .. }
            | Self::Scroll { env, .. }
            | Self::Move { env, .. }
            | Self::Drag { env, .. }
            | Self::Tap { env, .. }
            | Self::LongPress { env, .. }
            | Self::Swipe { env, .. }
            | Self::Text { env, .. }
            | Self::Home { env }
            | Self::Back { env } => Some(env),
            Self::Wait { .. }
            | Self::Tool { .. }
            | Self::Complete
            | Self::Submit { .. }
            | Self::Infeasible { .. } => None,
        }
    }

    /// Maps every point target through `f` (element targets stay): for clients that give
    /// coordinates on a scaled image.
    pub fn map_points(&mut self, f: impl Fn(i32, i32) -> (i32, i32)) {
        for t in self.targets_mut() {
            if let Target::Point { x, y } = t {
                (*x, *y) = f(*x, *y);
            }
        }
    }

    /// Every target of the action (a drag or swipe has two).
    pub fn targets_mut(&mut self) -> Vec<&mut Target> {
        match self {
            Self::Click { target, .. }
            | Self::DoubleClick { target, .. }
            | Self::RightClick { target, .. }
            | Self::Move { target, .. }
            | Self::Tap { target, .. }
            | Self::LongPress { target, .. } => vec![target],
            Self::Type { target, .. } | Self::Scroll { target, .. } => {
                target.as_mut().into_iter().collect()
            }
            Self::Drag { from, to, .. } | Self::Swipe { from, to, .. } => vec![from, to],
            Self::Key { .. }
            | Self::Hotkey { .. }
            | Self::Text { .. }
            | Self::Home { .. }
            | Self::Back { .. }
            | Self::Wait { .. }
            | Self::Tool { .. }
            | Self::Complete
            | Self::Submit { .. }
            | Self::Infeasible { .. } => Vec::new(),
        }
    }

    /// The tool name of this action.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Click { .. } => "click",
            Self::DoubleClick { .. } => "double_click",
            Self::RightClick { .. } => "right_click",
            Self::Type { .. } => "type",
            Self::Key { .. } => "key",
            Self::Hotkey { .. } => "hotkey",
            Self::Scroll { .. } => "scroll",
            Self::Move { .. } => "move",
            Self::Drag { .. } => "drag",
            Self::Tap { .. } => "tap",
            Self::LongPress { .. } => "long_press",
            Self::Swipe { .. } => "swipe",
            Self::Text { .. } => "text",
            Self::Home { .. } => "home",
            Self::Back { .. } => "back",
            Self::Wait { .. } => "wait",
            Self::Tool { .. } => "tool",
            Self::Complete => "complete",
            Self::Submit { .. } => "submit",
            Self::Infeasible { .. } => "infeasible",
        }
    }

    /// The name of the tool a model calls for this action: [`name`](Self::name), or
    /// `api_NAME` for a task's API tool.
    pub fn tool_name(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Tool { name, .. } => format!("{API_PREFIX}{name}").into(),
            other => other.name().into(),
        }
    }

    /// A short human description ("click element 4 on desktop").
    pub fn describe(&self) -> String {
        let t = |t: &Target| match t {
            Target::Element { element } => format!("element {element}"),
            Target::Point { x, y } => format!("({x}, {y})"),
        };
        match self {
            Self::Click { env, target }
            | Self::DoubleClick { env, target }
            | Self::RightClick { env, target }
            | Self::Tap { env, target }
            | Self::Move { env, target }
            | Self::LongPress { env, target } => {
                format!("{} {} on {env}", self.name(), t(target))
            }
            Self::Type { env, text, target } => format!(
                "type {:?}{} on {env}",
                text,
                target
                    .as_ref()
                    .map(|x| format!(" into {}", t(x)))
                    .unwrap_or_default()
            ),
            Self::Text { env, text } => format!("text {text:?} on {env}"),
            Self::Key { env, key } => format!("key {key} on {env}"),
            Self::Hotkey { env, keys } => format!("hotkey {} on {env}", keys.join("+")),
            Self::Scroll { env, dx, dy, .. } => format!("scroll ({dx}, {dy}) on {env}"),
            Self::Drag { env, from, to } | Self::Swipe { env, from, to } => {
                format!("{} {} -> {} on {env}", self.name(), t(from), t(to))
            }
            Self::Home { env } | Self::Back { env } => format!("{} on {env}", self.name()),
            Self::Wait { seconds } => format!("wait {seconds} s"),
            Self::Tool { name, arguments } => format!(
                "tool {name} {}",
                serde_json::to_string(arguments).unwrap_or_default()
            ),
            Self::Complete => "complete".into(),
            Self::Submit { answer } => format!("submit {answer:?}"),
            Self::Infeasible { reason } => format!("infeasible: {reason}"),
        }
    }
}

/// A tool an LLM can call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its parameters.
    pub parameters: serde_json::Value,
}

/// The desktop actions' tool names.
pub(crate) const DESKTOP: &[&str] = &[
    "click",
    "double_click",
    "right_click",
    "type",
    "key",
    "hotkey",
    "scroll",
    "move",
    "drag",
];
const PHONE: &[&str] = &["tap", "long_press", "swipe", "text", "home", "back"];

/// How a target is described to models, after the field's own words.
const TARGET_HOW: &str = "an element number from the marked screenshot ({\"element\": 4}) or screen pixels ({\"x\": 100, \"y\": 200})";

/// A schema as every provider takes it: no `format` (Gemini rejects unknown ones), no
/// `null` alternatives for optional fields (not being required says it), targets explained.
fn plain(v: &mut serde_json::Value) {
    use serde_json::Value;
    let Value::Object(map) = v else { return };
    map.remove("format");
    map.remove("$schema");
    map.remove("default");
    if let Some(Value::Array(alts)) = map.get("anyOf") {
        let real: Vec<Value> = alts
            .iter()
            .filter(|a| a.get("type") != Some(&Value::from("null")))
            .cloned()
            .collect();
        if let [only] = real.as_slice() {
            let description = map.remove("description");
            map.remove("anyOf");
            if let Value::Object(inner) = only {
                map.extend(inner.clone());
            }
            if let Some(d) = description {
                map.insert("description".into(), d);
            }
        }
    }
    if let Some(Value::Array(types)) = map.get("type")
        && let [t] = types
            .iter()
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .as_slice()
    {
        let t = (*t).clone();
        map.insert("type".into(), t);
    }
    // A target: say what it may be.
    if map
        .get("properties")
        .and_then(|p| p.get("element"))
        .is_some()
    {
        let what = map
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("where")
            .trim_end_matches('.')
            .to_owned();
        map.insert(
            "description".into(),
            Value::from(format!("{what}: {TARGET_HOW}")),
        );
    }
    for child in map.values_mut() {
        match child {
            Value::Object(_) => plain(child),
            Value::Array(items) => items.iter_mut().for_each(plain),
            _ => {}
        }
    }
}

/// The tools for a task whose environments have these roles and platforms, generated
/// from [`AgentAction`]'s JSON Schema: one tool per variant, its description the variant's
/// doc comment. Input tools appear only for platforms the task has; with several
/// environments, each takes a required `env` naming one of them, with one it has none.
pub fn tools(roles: &BTreeMap<String, Platform>) -> Vec<ToolSpec> {
    let mut schema = serde_json::to_value(schemars::schema_for!(AgentAction)).unwrap_or_default();
    plain(&mut schema);
    let many = roles.len() > 1;
    let variants = schema["oneOf"].as_array().cloned().unwrap_or_default();
    variants
        .into_iter()
        .filter_map(|v| {
            let name = v["properties"]["action"]["const"].as_str()?.to_owned();
            // A task's API tools are offered one by one (`api_tools`), never generically.
            if name == "tool" {
                return None;
            }
            let platform = if DESKTOP.contains(&name.as_str()) {
                Some(Platform::Linux)
            } else if PHONE.contains(&name.as_str()) {
                Some(Platform::Android)
            } else {
                None
            };
            let mut props = v["properties"].as_object().cloned().unwrap_or_default();
            props.remove("action");
            props.remove("env");
            let mut required: Vec<String> = v["required"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r.as_str())
                .filter(|r| *r != "action" && *r != "env")
                .map(str::to_owned)
                .collect();
            if let Some(p) = platform {
                let envs: Vec<&String> = roles
                    .iter()
                    .filter(|(_, rp)| **rp == p)
                    .map(|(r, _)| r)
                    .collect();
                if envs.is_empty() {
                    return None;
                }
                if many {
                    props.insert(
                        "env".into(),
                        serde_json::json!({"type": "string", "enum": envs, "description": "which environment"}),
                    );
                    required.insert(0, "env".into());
                }
            }
            Some(ToolSpec {
                description: v["description"].as_str().unwrap_or_default().replace('\n', " "),
                name,
                parameters: serde_json::json!({"type": "object", "properties": props, "required": required}),
            })
        })
        .collect()
}

/// The prefix of an API tool's name in tool lists: `api_add_event` calls `add_event`.
pub const API_PREFIX: &str = "api_";

/// The tools for a task's declared API tools, one each (`api_NAME`, its parameters as
/// their JSON Schema), after [`tools`]' actions; none for a task that declares none.
pub fn api_tools<'a>(
    declared: impl IntoIterator<Item = &'a pincer_shared::tool::ToolSpec>,
) -> Vec<ToolSpec> {
    declared
        .into_iter()
        .map(|t| {
            let props: serde_json::Map<String, serde_json::Value> = t
                .params
                .iter()
                .map(|p| {
                    let mut s = serde_json::json!({"type": p.kind.json_type()});
                    if !p.description.is_empty() {
                        s["description"] = p.description.clone().into();
                    }
                    if let Some(m) = p.max_len {
                        s["maxLength"] = m.into();
                    }
                    if !p.one_of.is_empty() {
                        s["enum"] = p.one_of.clone().into();
                    }
                    if let Some(c) = &p.charset {
                        s["description"] = format!(
                            "{} (letters, digits and {c:?} only)",
                            p.description
                        )
                        .trim_start()
                        .into();
                    }
                    if let Some(m) = p.min {
                        s["minimum"] = m.into();
                    }
                    if let Some(m) = p.max {
                        s["maximum"] = m.into();
                    }
                    (p.name.clone(), s)
                })
                .collect();
            let required: Vec<&str> = t
                .params
                .iter()
                .filter(|p| p.required)
                .map(|p| p.name.as_str())
                .collect();
            ToolSpec {
                name: format!("{API_PREFIX}{}", t.name),
                description: format!(
                    "API tool (works without the screen): {}",
                    t.description.replace('\n', " ")
                ),
                parameters: serde_json::json!({"type": "object", "properties": props, "required": required}),
            }
        })
        .collect()
}

fn field<'a>(
    args: &'a serde_json::Value,
    name: &str,
    tool: &str,
) -> Result<&'a serde_json::Value, InvalidAction> {
    args.get(name)
        .ok_or_else(|| InvalidAction(format!("{tool} needs `{name}`")))
}

fn string(args: &serde_json::Value, name: &str, tool: &str) -> Result<String, InvalidAction> {
    field(args, name, tool)?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| InvalidAction(format!("{tool}: `{name}` must be a string")))
}

fn int(v: &serde_json::Value) -> Option<i32> {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f.round() as i64))
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        .and_then(|i| i32::try_from(i).ok())
}

fn target(v: &serde_json::Value, tool: &str) -> Result<Target, InvalidAction> {
    if let Some(e) = v.get("element").and_then(int) {
        return u32::try_from(e)
            .map(|element| Target::Element { element })
            .map_err(|_| InvalidAction(format!("{tool}: element {e} is not an element number")));
    }
    if let Some(e) = int(v) {
        return u32::try_from(e)
            .map(|element| Target::Element { element })
            .map_err(|_| InvalidAction(format!("{tool}: element {e} is not an element number")));
    }
    match (v.get("x").and_then(int), v.get("y").and_then(int)) {
        (Some(x), Some(y)) => Ok(Target::Point { x, y }),
        _ => Err(InvalidAction(format!(
            "{tool}: a target is {{\"element\": N}} or {{\"x\": X, \"y\": Y}}, got {v}"
        ))),
    }
}

/// Reads a target given either as a `target` object or as top-level element/x/y fields.
fn target_of(args: &serde_json::Value, name: &str, tool: &str) -> Result<Target, InvalidAction> {
    match args.get(name) {
        Some(v) => target(v, tool),
        None if name == "target" => target(args, tool),
        None => Err(InvalidAction(format!("{tool} needs `{name}`"))),
    }
}

/// Parses a tool call into an action. `roles` are the task's environments; with one, `env`
/// may be left out.
pub fn parse(
    tool: &str,
    args: &serde_json::Value,
    roles: &BTreeMap<String, Platform>,
) -> Result<AgentAction, InvalidAction> {
    let tool = tool.trim().to_lowercase();
    let wanted = if DESKTOP.contains(&tool.as_str()) {
        Some(Platform::Linux)
    } else if PHONE.contains(&tool.as_str()) {
        Some(Platform::Android)
    } else {
        None
    };
    let env = match wanted {
        None => String::new(),
        Some(p) => {
            let of_platform: Vec<&String> = roles
                .iter()
                .filter(|(_, q)| **q == p)
                .map(|(r, _)| r)
                .collect();
            match args.get("env").and_then(|v| v.as_str()) {
                Some(e) if of_platform.iter().any(|r| *r == e) => e.to_owned(),
                Some(e) => {
                    return Err(InvalidAction(format!(
                        "{tool} on '{e}': the {p} environments here are {}",
                        of_platform
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                None if of_platform.len() == 1 => of_platform[0].clone(),
                None if of_platform.is_empty() => {
                    return Err(InvalidAction(format!(
                        "{tool} needs a {p} environment and this task has none"
                    )));
                }
                None => {
                    return Err(InvalidAction(format!(
                        "{tool} needs `env`: one of {}",
                        of_platform
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
        }
    };
    let a = args;
    if let Some(name) = tool.strip_prefix(API_PREFIX) {
        let mut arguments: BTreeMap<String, serde_json::Value> = match a {
            serde_json::Value::Object(m) => m.clone().into_iter().collect(),
            serde_json::Value::Null => BTreeMap::new(),
            other => {
                return Err(InvalidAction(format!(
                    "{tool}: arguments are an object of parameters, got {other}"
                )));
            }
        };
        // `from_json` passes the whole object, its name included.
        arguments.remove("action");
        return Ok(AgentAction::Tool {
            name: name.to_owned(),
            arguments,
        });
    }
    Ok(match tool.as_str() {
        "click" => AgentAction::Click {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "double_click" => AgentAction::DoubleClick {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "right_click" => AgentAction::RightClick {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "type" => AgentAction::Type {
            env,
            text: string(a, "text", &tool)?,
            target: a.get("target").map(|t| target(t, &tool)).transpose()?,
        },
        "key" => {
            let key = string(a, "key", &tool)?;
            parse_combo(&key).map_err(|e| InvalidAction(e.to_string()))?;
            AgentAction::Key { env, key }
        }
        "hotkey" => {
            let keys: Vec<String> = match field(a, "keys", &tool)? {
                serde_json::Value::Array(ks) => ks
                    .iter()
                    .map(|k| k.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| InvalidAction("hotkey: `keys` must be strings".into()))?,
                serde_json::Value::String(s) => s.split('+').map(|k| k.trim().to_owned()).collect(),
                _ => {
                    return Err(InvalidAction(
                        "hotkey: `keys` is a list such as [\"ctrl\", \"s\"]".into(),
                    ));
                }
            };
            parse_combo(&keys.join("+")).map_err(|e| InvalidAction(e.to_string()))?;
            AgentAction::Hotkey { env, keys }
        }
        "scroll" => AgentAction::Scroll {
            env,
            dx: a.get("dx").and_then(int).unwrap_or(0),
            dy: a.get("dy").and_then(int).unwrap_or(0),
            target: a.get("target").map(|t| target(t, &tool)).transpose()?,
        },
        "move" => AgentAction::Move {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "drag" => AgentAction::Drag {
            env,
            from: target_of(a, "from", &tool)?,
            to: target_of(a, "to", &tool)?,
        },
        "tap" => AgentAction::Tap {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "long_press" => AgentAction::LongPress {
            env,
            target: target_of(a, "target", &tool)?,
        },
        "swipe" => AgentAction::Swipe {
            env,
            from: target_of(a, "from", &tool)?,
            to: target_of(a, "to", &tool)?,
        },
        "text" => AgentAction::Text {
            env,
            text: string(a, "text", &tool)?,
        },
        "home" => AgentAction::Home { env },
        "back" => AgentAction::Back { env },
        "wait" => AgentAction::Wait {
            seconds: a
                .get("seconds")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(1.0)
                .clamp(0.0, 10.0),
        },
        "tool" => AgentAction::Tool {
            name: string(a, "name", &tool)?,
            arguments: match a.get("arguments") {
                Some(serde_json::Value::Object(m)) => m.clone().into_iter().collect(),
                None => BTreeMap::new(),
                Some(other) => {
                    return Err(InvalidAction(format!(
                        "tool: `arguments` is an object of parameters, got {other}"
                    )));
                }
            },
        },
        "complete" | "done" | "finish" => AgentAction::Complete,
        "submit" | "answer" => AgentAction::Submit {
            answer: string(a, "answer", &tool)?,
        },
        "infeasible" => AgentAction::Infeasible {
            reason: a
                .get("reason")
                .and_then(|r| r.as_str())
                .unwrap_or("")
                .to_owned(),
        },
        other => return Err(InvalidAction(format!("unknown action '{other}'"))),
    })
}

/// An action given as one JSON object, `{"action": "click", "target": {"element": 4}}`: the
/// form the Python package and `action_schema` use (a tool call with its name inside).
pub fn from_json(
    v: &serde_json::Value,
    roles: &BTreeMap<String, Platform>,
) -> Result<AgentAction, InvalidAction> {
    let tool = v.get("action").and_then(|a| a.as_str()).ok_or_else(|| {
        InvalidAction(format!(
            "an action is an object with an \"action\" name, such as {{\"action\": \"click\", \"target\": {{\"x\": 10, \"y\": 20}}}}; got {v}"
        ))
    })?;
    parse(tool, v, roles)
}

/// The JSON Schema of the actions for these roles, as [`from_json`] reads them: one
/// alternative per tool, its name in `action`.
pub fn json_schema(roles: &BTreeMap<String, Platform>) -> serde_json::Value {
    let alternatives: Vec<serde_json::Value> = tools(roles)
        .into_iter()
        .map(|t| {
            let mut p = t.parameters;
            p["properties"]["action"] = serde_json::json!({"const": t.name});
            if let Some(req) = p["required"].as_array_mut() {
                req.insert(0, "action".into());
            }
            p["description"] = t.description.into();
            p
        })
        .collect();
    serde_json::json!({"oneOf": alternatives})
}

/// Parses JSON-in-text output (for models without tool calling): the first JSON object in
/// the text, `{"action": "click", ...}`, or a list of them.
pub fn parse_text(
    text: &str,
    roles: &BTreeMap<String, Platform>,
) -> Result<Vec<AgentAction>, InvalidAction> {
    let start = text
        .find(['{', '['])
        .ok_or_else(|| InvalidAction("no JSON action in the reply".into()))?;
    let mut de =
        serde_json::Deserializer::from_str(&text[start..]).into_iter::<serde_json::Value>();
    let v = de
        .next()
        .ok_or_else(|| InvalidAction("no JSON action in the reply".into()))?
        .map_err(|e| InvalidAction(format!("the JSON action does not parse: {e}")))?;
    let items = match v {
        serde_json::Value::Array(a) => a,
        other => vec![other],
    };
    items
        .iter()
        .map(|item| {
            let name = item
                .get("action")
                .or_else(|| item.get("name"))
                .and_then(|n| n.as_str())
                .ok_or_else(|| InvalidAction(format!("{item} has no \"action\"")))?;
            let args = item
                .get("arguments")
                .or_else(|| item.get("args"))
                .unwrap_or(item);
            parse(name, args, roles)
        })
        .collect()
}

/// The screen boxes of the marked elements of one environment, by number.
pub type Marks = BTreeMap<u32, Rect>;

fn point(t: &Target, marks: &Marks) -> Result<Point, InvalidAction> {
    match t {
        Target::Point { x, y } => Ok(Point::new(*x, *y)),
        Target::Element { element } => marks.get(element).map(Rect::center).ok_or_else(|| {
            InvalidAction(format!(
                "there is no element {element} on the marked screenshot"
            ))
        }),
    }
}

/// The protocol input for an action on its environment, with elements resolved through
/// that environment's marks. Meta actions (wait, complete, submit, infeasible) and API tool
/// calls (the tool class, not input) give none.
pub fn resolve(a: &AgentAction, marks: &Marks) -> Result<Vec<Action>, InvalidAction> {
    let click = |t: &Target, button: MouseButton, count: u8| -> Result<Action, InvalidAction> {
        Ok(Action::Click {
            at: Some(point(t, marks)?),
            button,
            count,
        })
    };
    let keys = |s: &str| parse_combo(s).map_err(|e| InvalidAction(e.to_string()));
    Ok(match a {
        AgentAction::Click { target, .. } => vec![click(target, MouseButton::Left, 1)?],
        AgentAction::DoubleClick { target, .. } => vec![click(target, MouseButton::Left, 2)?],
        AgentAction::RightClick { target, .. } => vec![click(target, MouseButton::Right, 1)?],
        AgentAction::Type { text, target, .. } => {
            let mut out = Vec::new();
            if let Some(t) = target {
                out.push(click(t, MouseButton::Left, 1)?);
            }
            out.push(Action::TypeText { text: text.clone() });
            out
        }
        AgentAction::Key { key, .. } => match keys(key)?.as_slice() {
            [one] => vec![Action::KeyPress { key: *one }],
            many => vec![Action::Hotkey {
                keys: many.to_vec(),
            }],
        },
        AgentAction::Hotkey { keys: ks, .. } => vec![Action::Hotkey {
            keys: keys(&ks.join("+"))?,
        }],
        AgentAction::Scroll { dx, dy, target, .. } => vec![Action::Scroll {
            at: target.as_ref().map(|t| point(t, marks)).transpose()?,
            dx: *dx,
            dy: *dy,
        }],
        AgentAction::Move { target, .. } => vec![Action::MouseMove {
            to: point(target, marks)?,
        }],
        AgentAction::Drag { from, to, .. } => vec![Action::Drag {
            from: point(from, marks)?,
            to: point(to, marks)?,
            button: MouseButton::Left,
            duration_ms: 300,
        }],
        AgentAction::Tap { target, .. } => vec![Action::Touch(Gesture::Tap {
            at: point(target, marks)?,
        })],
        AgentAction::LongPress { target, .. } => vec![Action::Touch(Gesture::LongPress {
            at: point(target, marks)?,
            duration_ms: 800,
        })],
        AgentAction::Swipe { from, to, .. } => vec![Action::Touch(Gesture::Swipe {
            from: point(from, marks)?,
            to: point(to, marks)?,
            duration_ms: 300,
        })],
        AgentAction::Text { text, .. } => vec![Action::TypeText { text: text.clone() }],
        AgentAction::Home { .. } => vec![Action::SystemKey(SystemKey::Home)],
        AgentAction::Back { .. } => vec![Action::SystemKey(SystemKey::Back)],
        AgentAction::Wait { .. }
        | AgentAction::Tool { .. }
        | AgentAction::Complete
        | AgentAction::Submit { .. }
        | AgentAction::Infeasible { .. } => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one() -> BTreeMap<String, Platform> {
        [("desktop".to_owned(), Platform::Linux)].into()
    }

    fn cross() -> BTreeMap<String, Platform> {
        [
            ("desktop".to_owned(), Platform::Linux),
            ("desktop2".to_owned(), Platform::Linux),
            ("phone".to_owned(), Platform::Android),
        ]
        .into()
    }

    #[test]
    fn actions_as_json_objects_and_their_schema() {
        let a = from_json(
            &serde_json::json!({"action": "move", "target": {"x": 5, "y": 6}}),
            &one(),
        )
        .unwrap();
        assert_eq!(
            a,
            AgentAction::Move {
                env: "desktop".into(),
                target: Target::Point { x: 5, y: 6 }
            }
        );
        assert_eq!(
            resolve(&a, &Marks::new()).unwrap(),
            vec![Action::MouseMove {
                to: Point::new(5, 6)
            }]
        );
        let no_name = from_json(&serde_json::json!({"target": {"x": 1, "y": 2}}), &one());
        assert!(no_name.unwrap_err().0.contains("\"action\" name"));
        let schema = json_schema(&one());
        let alts = schema["oneOf"].as_array().unwrap();
        let click = alts
            .iter()
            .find(|a| a["properties"]["action"]["const"] == "click")
            .unwrap();
        assert_eq!(click["required"][0], "action");
        assert!(
            !alts
                .iter()
                .any(|a| a["properties"]["action"]["const"] == "tap")
        );
    }

    #[test]
    fn points_map_and_elements_stay() {
        let mut drag = AgentAction::Drag {
            env: "desktop".into(),
            from: Target::Point { x: 10, y: 20 },
            to: Target::Element { element: 3 },
        };
        drag.map_points(|x, y| (x * 2, y * 3));
        assert_eq!(
            drag,
            AgentAction::Drag {
                env: "desktop".into(),
                from: Target::Point { x: 20, y: 60 },
                to: Target::Element { element: 3 },
            }
        );
        let mut typed = AgentAction::Type {
            env: "desktop".into(),
            text: "x".into(),
            target: None,
        };
        let before = typed.clone();
        typed.map_points(|_, _| (0, 0));
        assert_eq!(typed, before);
    }

    #[test]
    fn tools_follow_the_environments() {
        let names: Vec<String> = tools(&one()).into_iter().map(|t| t.name).collect();
        assert!(names.contains(&"click".to_owned()) && !names.contains(&"tap".to_owned()));
        assert!(
            tools(&one())[0].parameters["required"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r != "env")
        );
        let t = tools(&cross());
        let click = t.iter().find(|t| t.name == "click").unwrap();
        assert_eq!(
            click.parameters["properties"]["env"]["enum"],
            serde_json::json!(["desktop", "desktop2"])
        );
        let tap = t.iter().find(|t| t.name == "tap").unwrap();
        assert_eq!(
            tap.parameters["properties"]["env"]["enum"],
            serde_json::json!(["phone"])
        );
    }

    /// Arguments that fill every required field of a schema with a plausible value.
    fn example(
        schema: &serde_json::Value,
        roles: &BTreeMap<String, Platform>,
    ) -> serde_json::Value {
        let mut args = serde_json::Map::new();
        for (name, prop) in schema["properties"].as_object().unwrap() {
            let v = match (name.as_str(), prop["type"].as_str()) {
                ("env", _) => prop["enum"][0].clone(),
                (_, Some("object")) => serde_json::json!({"x": 5, "y": 7}),
                (_, Some("integer")) => serde_json::json!(2),
                (_, Some("number")) => serde_json::json!(0.5),
                (_, Some("array")) => serde_json::json!(["ctrl", "s"]),
                ("key", _) => serde_json::json!("enter"),
                _ => serde_json::json!("hello"),
            };
            args.insert(name.clone(), v);
        }
        assert!(roles.len() > 1 || !args.contains_key("env"));
        serde_json::Value::Object(args)
    }

    #[test]
    fn every_action_has_a_tool_and_every_tool_call_parses_back() {
        let roles = cross();
        let tools = tools(&roles);
        for tool in &tools {
            let args = example(&tool.parameters, &roles);
            let action = parse(&tool.name, &args, &roles)
                .unwrap_or_else(|e| panic!("{} {args}: {e}", tool.name));
            assert_eq!(action.name(), tool.name);
            // What went in comes back out: the schema names the fields the parser reads.
            let back = serde_json::to_value(&action).unwrap();
            for (k, v) in args.as_object().unwrap() {
                assert_eq!(&back[k], v, "{}: field {k}", tool.name);
            }
            assert!(
                !tool.description.is_empty(),
                "{} has no description",
                tool.name
            );
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        for name in DESKTOP
            .iter()
            .chain(PHONE)
            .chain(&["wait", "complete", "submit", "infeasible"])
        {
            assert!(names.contains(name), "no tool for {name}: {names:?}");
        }
        assert_eq!(names.len(), DESKTOP.len() + PHONE.len() + 4);
    }

    #[test]
    fn tool_calls_parse_with_lenient_shapes() {
        let r = one();
        assert_eq!(
            parse("click", &serde_json::json!({"target": {"element": 4}}), &r).unwrap(),
            AgentAction::Click {
                env: "desktop".into(),
                target: Target::Element { element: 4 }
            }
        );
        assert_eq!(
            parse("click", &serde_json::json!({"x": 10, "y": "20"}), &r).unwrap(),
            AgentAction::Click {
                env: "desktop".into(),
                target: Target::Point { x: 10, y: 20 }
            }
        );
        assert_eq!(
            parse("click", &serde_json::json!({"target": 7}), &r).unwrap(),
            AgentAction::Click {
                env: "desktop".into(),
                target: Target::Element { element: 7 }
            }
        );
        assert_eq!(
            parse("hotkey", &serde_json::json!({"keys": "ctrl+s"}), &r).unwrap(),
            AgentAction::Hotkey {
                env: "desktop".into(),
                keys: vec!["ctrl".into(), "s".into()]
            }
        );
        assert!(
            parse(
                "hotkey",
                &serde_json::json!({"keys": ["ctrl", "hyper"]}),
                &r
            )
            .unwrap_err()
            .0
            .contains("hyper")
        );
        assert!(
            parse("tap", &serde_json::json!({"x": 1, "y": 2}), &r)
                .unwrap_err()
                .0
                .contains("android")
        );
        assert!(
            parse("fly", &serde_json::json!({}), &r)
                .unwrap_err()
                .0
                .contains("unknown action")
        );
        let c = cross();
        assert!(
            parse("click", &serde_json::json!({"x": 1, "y": 2}), &c)
                .unwrap_err()
                .0
                .contains("needs `env`")
        );
        assert!(
            parse(
                "click",
                &serde_json::json!({"env": "phone", "x": 1, "y": 2}),
                &c
            )
            .unwrap_err()
            .0
            .contains("desktop, desktop2")
        );
        assert_eq!(
            parse("tap", &serde_json::json!({"x": 1, "y": 2}), &c)
                .unwrap()
                .env(),
            Some("phone")
        );
    }

    #[test]
    fn json_in_text_is_found_in_prose() {
        let r = one();
        let a = parse_text(
            "I will save now.\n```json\n{\"action\": \"hotkey\", \"keys\": [\"ctrl\", \"s\"]}\n```",
            &r,
        )
        .unwrap();
        assert_eq!(
            a,
            vec![AgentAction::Hotkey {
                env: "desktop".into(),
                keys: vec!["ctrl".into(), "s".into()]
            }]
        );
        let a = parse_text(
            "[{\"action\": \"type\", \"text\": \"hi\"}, {\"action\": \"complete\"}]",
            &r,
        )
        .unwrap();
        assert_eq!(a.len(), 2);
        assert!(parse_text("I am not sure.", &r).is_err());
    }

    #[test]
    fn elements_resolve_to_their_centres() {
        let marks: Marks = [(3, Rect::new(100, 200, 50, 20))].into();
        let a = AgentAction::Type {
            env: "desktop".into(),
            text: "x".into(),
            target: Some(Target::Element { element: 3 }),
        };
        assert_eq!(
            resolve(&a, &marks).unwrap(),
            vec![
                Action::click(125, 210),
                Action::TypeText { text: "x".into() }
            ]
        );
        let bad = AgentAction::Click {
            env: "desktop".into(),
            target: Target::Element { element: 9 },
        };
        assert!(
            resolve(&bad, &marks)
                .unwrap_err()
                .0
                .contains("no element 9")
        );
        let k = AgentAction::Key {
            env: "desktop".into(),
            key: "ctrl+a".into(),
        };
        assert!(matches!(
            resolve(&k, &marks).unwrap()[0],
            Action::Hotkey { .. }
        ));
        assert!(resolve(&AgentAction::Complete, &marks).unwrap().is_empty());
    }

    #[test]
    fn api_tools_are_offered_one_by_one_and_only_when_declared() {
        // The generic action list never carries tools, whatever the roles.
        for roles in [one(), cross()] {
            assert!(
                tools(&roles)
                    .iter()
                    .all(|t| t.name != "tool" && !t.name.starts_with(API_PREFIX))
            );
        }
        assert!(api_tools([]).is_empty());
        let spec: pincer_shared::tool::ToolSpec = serde_json::from_value(serde_json::json!({
            "name": "add_event", "description": "Adds an event.",
            "params": [
                {"name": "title", "type": "string", "required": true, "max_len": 80},
                {"name": "hour", "type": "integer", "min": 0, "max": 23},
                {"name": "kind", "type": "string", "enum": ["work", "home"]}
            ],
            "argv": ["/usr/bin/true", "{title}"]
        }))
        .unwrap();
        let t = &api_tools([&spec])[0];
        assert_eq!(t.name, "api_add_event");
        assert!(t.description.contains("Adds an event."));
        assert_eq!(
            t.parameters,
            serde_json::json!({"type": "object", "required": ["title"], "properties": {
                "title": {"type": "string", "maxLength": 80},
                "hour": {"type": "integer", "minimum": 0.0, "maximum": 23.0},
                "kind": {"type": "string", "enum": ["work", "home"]}
            }})
        );
    }

    #[test]
    fn api_tool_calls_parse_from_their_own_name_or_the_generic_form() {
        let args = serde_json::json!({"title": "Dentist", "hour": 9});
        let want = AgentAction::Tool {
            name: "add_event".into(),
            arguments: [
                ("title".to_owned(), serde_json::json!("Dentist")),
                ("hour".to_owned(), serde_json::json!(9)),
            ]
            .into(),
        };
        assert_eq!(parse("api_add_event", &args, &one()).unwrap(), want);
        let generic = serde_json::json!({"action": "tool", "name": "add_event", "arguments": args});
        assert_eq!(from_json(&generic, &one()).unwrap(), want);
        assert!(
            parse("api_add_event", &serde_json::json!([1]), &one())
                .unwrap_err()
                .0
                .contains("object")
        );
        assert_eq!(want.env(), None);
        assert_eq!(want.tool_name(), "api_add_event");
        assert_eq!(AgentAction::Complete.tool_name(), "complete");
        assert!(resolve(&want, &Marks::new()).unwrap().is_empty());
        assert_eq!(
            want.describe(),
            r#"tool add_event {"hour":9,"title":"Dentist"}"#
        );
    }
}

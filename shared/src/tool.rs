//! API tools: typed programs a task declares (create a calendar event, deliver a mail) that
//! agents call with typed arguments only. The task's author fixes the program, its argument
//! vector and what its sandbox may see; the agent fills the placeholders with values checked
//! against the declared parameters, and the guest runs the result without a shell, in a
//! sandbox without network, as an unprivileged user ([`Request::Tool`](crate::Request::Tool),
//! the `tool` privilege class, which a guest grants only when started with `--allow-tools`).
//!
//! Wire types: no `skip_serializing_if` and no untagged or internally tagged enums, so the
//! same structs travel as postcard and load from task files.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The bubblewrap program sandboxes run under.
pub const BWRAP: &str = "bwrap";

/// Files of `/etc` programs commonly need (the dynamic loader's cache, Debian's
/// alternatives links, time zone, user names); bound when they exist.
const ETC: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
];

/// The start of a bubblewrap command line for a minimal sandbox, shared by API tools (in
/// guests) and the host's scorers: every namespace unshared (no network at all), user
/// 65534 inside, no capabilities, an empty environment, `/usr` (and the `/bin`, `/lib`
/// links or directories) and a few `/etc` files read-only, fresh `/proc`, `/dev` and a
/// private `/tmp`. Callers add their own binds, variables and the program.
pub fn sandbox_root() -> Vec<String> {
    let mut c: Vec<String> = [
        BWRAP,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
        "--ro-bind",
        "/usr",
        "/usr",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--dir",
        "/etc",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for (link, to) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        // Merged-/usr systems (Debian since 12) have these as links; others as directories.
        let path = std::path::Path::new(link);
        if path.is_symlink() || !path.exists() {
            c.extend(["--symlink".into(), to.into(), link.into()]);
        } else {
            c.extend(["--ro-bind".into(), link.into(), link.into()]);
        }
    }
    for f in ETC {
        c.extend(["--ro-bind-try".into(), (*f).into(), (*f).into()]);
    }
    c
}

/// Most parameters of one tool.
pub const MAX_PARAMS: usize = 32;
/// Most argv elements of one tool, and most sandbox paths.
pub const MAX_ARGV: usize = 64;
/// Longest string a tool argument may ever carry (a parameter's `max_len` is at most this).
pub const MAX_VALUE_LEN: u32 = 16 * 1024;
/// Longest time a tool may run.
pub const MAX_TOOL_TIMEOUT_MS: u64 = 60_000;
/// Most bytes of stdout (and of stderr) a tool call returns.
pub const MAX_TOOL_OUTPUT: u64 = 64 * 1024;

/// A tool as the task's author declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Name agents call it by: 1 to 64 of `a-z`, `0-9`, `_`.
    pub name: String,
    /// What it does, for the agent.
    pub description: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Vec<ToolParam>,
    /// The program and its arguments: an absolute program path, then arguments in which
    /// `{name}` stands for the value of parameter `name` (`{{` and `}}` for braces). A
    /// parameter that is omitted leaves out every element that names it.
    pub argv: Vec<String>,
    /// What the sandbox sees besides a minimal read-only system.
    #[serde(default)]
    pub sandbox: Sandbox,
    /// Milliseconds before the tool is killed.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_timeout() -> u64 {
    10_000
}

/// One typed parameter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolParam {
    /// Its name: 1 to 64 of `a-z`, `0-9`, `_`.
    pub name: String,
    /// What it means, for the agent.
    #[serde(default)]
    pub description: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: ParamKind,
    /// Whether a call must give it.
    #[serde(default)]
    pub required: bool,
    /// Strings: most characters (default and at most [`MAX_VALUE_LEN`]).
    #[serde(default)]
    pub max_len: Option<u32>,
    /// Strings: the only values allowed (empty: any).
    #[serde(default, rename = "enum")]
    pub one_of: Vec<String>,
    /// Strings: the only characters allowed besides ASCII letters and digits (`None`: any
    /// printable text, newlines and tabs included).
    #[serde(default)]
    pub charset: Option<String>,
    /// Integers and numbers: the smallest value.
    #[serde(default)]
    pub min: Option<f64>,
    /// Integers and numbers: the largest value.
    #[serde(default)]
    pub max: Option<f64>,
}

/// Types a parameter may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamKind {
    /// Text.
    String,
    /// A whole number.
    Integer,
    /// A number.
    Number,
    /// `true` or `false`.
    Boolean,
}

impl ParamKind {
    /// The JSON Schema type name.
    pub fn json_type(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
        }
    }
}

/// What a tool's sandbox sees besides `/usr` (with `/bin`, `/lib*`, `/sbin` as links into
/// it), a few files of `/etc` (`ld.so.cache`, `alternatives`, `localtime`, `passwd`,
/// `group`, `nsswitch.conf`), a private `/tmp`, `/proc` and a minimal `/dev`. Paths are
/// absolute and appear at the same place inside.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// Files and directories the tool may read.
    #[serde(default)]
    pub read: Vec<String>,
    /// Files and directories the tool may write (a calendar collection, a Maildir).
    #[serde(default)]
    pub write: Vec<String>,
    /// Environment variables the tool gets (nothing else is passed).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// A typed argument value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToolValue {
    /// Text.
    String(String),
    /// A whole number.
    Integer(i64),
    /// A number.
    Number(f64),
    /// A truth value.
    Boolean(bool),
}

impl ToolValue {
    /// The value from JSON, as parameter `p` wants it; `None` when it is not of that type.
    pub fn from_json(p: &ToolParam, v: &serde_json::Value) -> Option<Self> {
        match p.kind {
            ParamKind::String => v.as_str().map(|s| Self::String(s.to_owned())),
            ParamKind::Integer => v.as_i64().map(Self::Integer),
            ParamKind::Number => v.as_f64().map(Self::Number),
            ParamKind::Boolean => v.as_bool().map(Self::Boolean),
        }
    }

    /// As JSON (for trajectories).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::String(s) => s.clone().into(),
            Self::Integer(i) => (*i).into(),
            Self::Number(n) => (*n).into(),
            Self::Boolean(b) => (*b).into(),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::String(s) => s.clone(),
            Self::Integer(i) => i.to_string(),
            Self::Number(n) => n.to_string(),
            Self::Boolean(b) => b.to_string(),
        }
    }
}

/// One call of a tool: the declaration (the task's, sent by the host) and the agent's
/// arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The tool.
    pub spec: ToolSpec,
    /// The arguments by parameter name.
    pub args: BTreeMap<String, ToolValue>,
}

fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The pieces of one argv template element.
enum Piece<'a> {
    Text(String),
    Param(&'a str),
}

fn pieces(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if let Some(r) = rest.strip_prefix("{{") {
            text.push('{');
            rest = r;
        } else if let Some(r) = rest.strip_prefix("}}") {
            text.push('}');
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let end = r
                .find('}')
                .ok_or_else(|| format!("argv element {template:?} opens '{{' without '}}'"))?;
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Param(&r[..end]));
            rest = &r[end + 1..];
        } else if c == '}' {
            return Err(format!(
                "argv element {template:?} has a lone '}}' (write '}}}}')"
            ));
        } else {
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

fn in_sandbox_path(what: &str, p: &str) -> Result<(), String> {
    if !p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".") {
        return Err(format!(
            "{what} {p:?} must be an absolute path without '.' or '..'"
        ));
    }
    if p == "/" {
        return Err(format!("{what} may not be the whole file system"));
    }
    Ok(())
}

impl ToolSpec {
    /// Checks the declaration itself: names, parameter types, the argv template (every
    /// placeholder a parameter, the program an absolute path without placeholders), the
    /// sandbox's paths and the timeout.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if !is_name(name) {
            return Err(format!(
                "tool name {name:?} must be 1 to 64 of a-z, 0-9 and '_'"
            ));
        }
        if self.params.len() > MAX_PARAMS {
            return Err(format!(
                "tool {name} has {} parameters; at most {MAX_PARAMS}",
                self.params.len()
            ));
        }
        for (i, p) in self.params.iter().enumerate() {
            if !is_name(&p.name) {
                return Err(format!(
                    "tool {name}: parameter name {:?} must be 1 to 64 of a-z, 0-9 and '_'",
                    p.name
                ));
            }
            if self.params[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("tool {name}: parameter {} twice", p.name));
            }
            let stringy = p.max_len.is_some() || !p.one_of.is_empty() || p.charset.is_some();
            if p.kind != ParamKind::String && stringy {
                return Err(format!(
                    "tool {name}: parameter {} is {}: max_len, enum and charset are for strings",
                    p.name,
                    p.kind.json_type()
                ));
            }
            let numeric = matches!(p.kind, ParamKind::Integer | ParamKind::Number);
            if !numeric && (p.min.is_some() || p.max.is_some()) {
                return Err(format!(
                    "tool {name}: parameter {}: min and max are for integers and numbers",
                    p.name
                ));
            }
            if p.max_len.is_some_and(|m| m > MAX_VALUE_LEN) {
                return Err(format!(
                    "tool {name}: parameter {}: max_len is at most {MAX_VALUE_LEN}",
                    p.name
                ));
            }
        }
        if self.argv.is_empty() || self.argv.len() > MAX_ARGV {
            return Err(format!(
                "tool {name}: argv needs a program and at most {MAX_ARGV} elements"
            ));
        }
        let program = &self.argv[0];
        if !program.starts_with('/') || program.contains('{') {
            return Err(format!(
                "tool {name}: the program {program:?} must be an absolute path without placeholders"
            ));
        }
        for element in &self.argv {
            for piece in pieces(element).map_err(|e| format!("tool {name}: {e}"))? {
                if let Piece::Param(p) = piece
                    && !self.params.iter().any(|q| q.name == p)
                {
                    return Err(format!(
                        "tool {name}: argv names {{{p}}}, which is not a parameter"
                    ));
                }
            }
        }
        let s = &self.sandbox;
        if s.read.len() + s.write.len() > MAX_ARGV {
            return Err(format!("tool {name}: at most {MAX_ARGV} sandbox paths"));
        }
        for p in &s.read {
            in_sandbox_path(&format!("tool {name}: sandbox read path"), p)?;
        }
        for p in &s.write {
            in_sandbox_path(&format!("tool {name}: sandbox write path"), p)?;
        }
        for k in s.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!(
                    "tool {name}: environment variable name {k:?} is not one"
                ));
            }
        }
        if self.timeout_ms == 0 || self.timeout_ms > MAX_TOOL_TIMEOUT_MS {
            return Err(format!(
                "tool {name}: timeout_ms must be 1 to {MAX_TOOL_TIMEOUT_MS}"
            ));
        }
        Ok(())
    }

    /// The parameter called `name`.
    pub fn param(&self, name: &str) -> Option<&ToolParam> {
        self.params.iter().find(|p| p.name == name)
    }
}

impl ToolParam {
    /// Checks one value against the parameter's type and limits.
    fn check(&self, tool: &str, v: &ToolValue) -> Result<(), String> {
        let name = &self.name;
        let wrong = || {
            format!(
                "tool {tool}: `{name}` must be a {} (got {})",
                self.kind.json_type(),
                v.to_json()
            )
        };
        match (self.kind, v) {
            (ParamKind::String, ToolValue::String(s)) => {
                let max = self.max_len.unwrap_or(MAX_VALUE_LEN);
                let n = s.chars().count();
                if n > max as usize {
                    return Err(format!(
                        "tool {tool}: `{name}` has {n} characters; at most {max}"
                    ));
                }
                if !self.one_of.is_empty() && !self.one_of.contains(s) {
                    return Err(format!(
                        "tool {tool}: `{name}` must be one of {:?}",
                        self.one_of
                    ));
                }
                if let Some(bad) = s.chars().find(|c| match &self.charset {
                    Some(extra) => !c.is_ascii_alphanumeric() && !extra.contains(*c),
                    None => c.is_control() && *c != '\n' && *c != '\t',
                }) {
                    return Err(format!(
                        "tool {tool}: `{name}` may not contain {bad:?}{}",
                        self.charset
                            .as_ref()
                            .map(|c| format!(" (letters, digits and {c:?} only)"))
                            .unwrap_or_default()
                    ));
                }
                Ok(())
            }
            (ParamKind::Integer, ToolValue::Integer(_))
            | (ParamKind::Number, ToolValue::Number(_)) => {
                let x = match v {
                    ToolValue::Integer(i) => *i as f64,
                    ToolValue::Number(n) if n.is_finite() => *n,
                    _ => return Err(wrong()),
                };
                if self.min.is_some_and(|m| x < m) || self.max.is_some_and(|m| x > m) {
                    return Err(format!(
                        "tool {tool}: `{name}` is {x}; it must be within {} to {}",
                        self.min.map_or("-inf".into(), |m| m.to_string()),
                        self.max.map_or("inf".into(), |m| m.to_string())
                    ));
                }
                Ok(())
            }
            (ParamKind::Boolean, ToolValue::Boolean(_)) => Ok(()),
            _ => Err(wrong()),
        }
    }
}

impl ToolCall {
    /// The argument vector to run: the declaration validated, every argument checked
    /// against its parameter (unknown ones and missing required ones refused), and the
    /// placeholders filled. A string standing alone as an element may not start with `-`,
    /// so an argument is never read as an option.
    pub fn argv(&self) -> Result<Vec<String>, String> {
        let spec = &self.spec;
        spec.validate()?;
        let tool = &spec.name;
        for (k, v) in &self.args {
            let p = spec.param(k).ok_or_else(|| {
                format!(
                    "tool {tool} has no parameter `{k}`; it takes: {}",
                    spec.params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            p.check(tool, v)?;
        }
        if let Some(p) = spec
            .params
            .iter()
            .find(|p| p.required && !self.args.contains_key(&p.name))
        {
            return Err(format!("tool {tool} needs `{}`", p.name));
        }
        let mut out = Vec::with_capacity(spec.argv.len());
        'elements: for element in &spec.argv {
            let pieces = pieces(element)?;
            let alone = pieces.len() == 1 && matches!(pieces[0], Piece::Param(_));
            let mut filled = String::new();
            for piece in pieces {
                match piece {
                    Piece::Text(t) => filled.push_str(&t),
                    Piece::Param(p) => match self.args.get(p) {
                        Some(v) => {
                            let text = v.text();
                            if alone && matches!(v, ToolValue::String(_)) && text.starts_with('-') {
                                return Err(format!("tool {tool}: `{p}` may not start with '-'"));
                            }
                            filled.push_str(&text);
                        }
                        None => continue 'elements,
                    },
                }
            }
            out.push(filled);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "add_event".into(),
            description: "Adds an event".into(),
            params: vec![
                ToolParam {
                    name: "title".into(),
                    description: String::new(),
                    kind: ParamKind::String,
                    required: true,
                    max_len: Some(20),
                    one_of: vec![],
                    charset: None,
                    min: None,
                    max: None,
                },
                ToolParam {
                    name: "hour".into(),
                    description: String::new(),
                    kind: ParamKind::Integer,
                    required: false,
                    max_len: None,
                    one_of: vec![],
                    charset: None,
                    min: Some(0.0),
                    max: Some(23.0),
                },
            ],
            argv: vec![
                "/usr/bin/echo".into(),
                "{title}".into(),
                "--hour={hour}".into(),
                "{{literal}}".into(),
            ],
            sandbox: Sandbox::default(),
            timeout_ms: 1000,
        }
    }

    fn call(args: &[(&str, ToolValue)]) -> ToolCall {
        ToolCall {
            spec: spec(),
            args: args
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        }
    }

    fn s(x: &str) -> ToolValue {
        ToolValue::String(x.into())
    }

    #[test]
    fn placeholders_are_filled_and_omitted_ones_drop_their_element() {
        assert_eq!(
            call(&[("title", s("Dentist")), ("hour", ToolValue::Integer(9))]).argv(),
            Ok(vec![
                "/usr/bin/echo".into(),
                "Dentist".into(),
                "--hour=9".into(),
                "{literal}".into()
            ])
        );
        assert_eq!(
            call(&[("title", s("a b; rm -rf /"))]).argv(),
            Ok(vec![
                "/usr/bin/echo".into(),
                "a b; rm -rf /".into(),
                "{literal}".into()
            ])
        );
    }

    #[test]
    fn arguments_outside_the_schema_are_refused_by_name() {
        for (args, says) in [
            (vec![], "needs `title`"),
            (vec![("title", ToolValue::Integer(3))], "must be a string"),
            (vec![("title", s(&"x".repeat(21)))], "at most 20"),
            (vec![("title", s("-rf"))], "may not start with '-'"),
            (vec![("title", s("a\u{1b}[2J"))], "may not contain"),
            (
                vec![("title", s("a")), ("hour", ToolValue::Integer(24))],
                "within 0 to 23",
            ),
            (
                vec![("title", s("a")), ("hour", s("9"))],
                "must be a integer",
            ),
            (
                vec![("title", s("a")), ("cmd", s("id"))],
                "no parameter `cmd`",
            ),
        ] {
            let e = call(&args).argv().unwrap_err();
            assert!(e.contains(says), "{e} should say {says}");
        }
    }

    #[test]
    fn enums_and_charsets_restrict_strings() {
        let mut c = call(&[("title", s("b"))]);
        c.spec.params[0].one_of = vec!["a".into()];
        assert!(c.argv().unwrap_err().contains("one of"));
        let mut c = call(&[("title", s("x/y"))]);
        c.spec.params[0].charset = Some("-_".into());
        assert!(c.argv().unwrap_err().contains("'/'"));
        c.args.insert("title".into(), s("x_y"));
        assert!(c.argv().is_ok());
    }

    #[test]
    fn bad_declarations_are_refused() {
        let bad = |f: fn(&mut ToolSpec), says: &str| {
            let mut t = spec();
            f(&mut t);
            let e = t.validate().unwrap_err();
            assert!(e.contains(says), "{e} should say {says}");
        };
        bad(|t| t.name = "Add Event".into(), "tool name");
        bad(|t| t.argv[0] = "echo".into(), "absolute path");
        bad(|t| t.argv[0] = "/usr/bin/{title}".into(), "absolute path");
        bad(|t| t.argv.push("{nope}".into()), "not a parameter");
        bad(|t| t.argv.push("{open".into()), "without '}'");
        bad(|t| t.sandbox.write.push("/a/../etc".into()), "'..'");
        bad(|t| t.sandbox.read.push("/".into()), "whole file system");
        bad(|t| t.timeout_ms = 0, "timeout_ms");
        bad(|t| t.params[1].max_len = Some(3), "for strings");
        bad(|t| t.params[0].min = Some(3.0), "min and max");
        assert_eq!(spec().validate(), Ok(()));
    }

    #[test]
    fn calls_survive_postcard() {
        let c = call(&[("title", s("x")), ("hour", ToolValue::Integer(3))]);
        let bytes = postcard::to_allocvec(&c).unwrap();
        assert_eq!(postcard::from_bytes::<ToolCall>(&bytes).unwrap(), c);
    }
}

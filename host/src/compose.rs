//! Sub-task templates, composition and parameterized generation (CRAB's task composition,
//! AndroidWorld's seeded instances).
//!
//! A template has typed attributes, an instruction with `{attribute}` placeholders, an
//! output type (and how its output value follows from its attributes), setup steps and an
//! evaluator sub-graph whose arguments use the same placeholders. Composing templates links
//! every sink of an upstream sub-graph to every source of the downstream one; an edge is
//! legal when the upstream output type is one of the downstream attribute types, and
//! [`compose`] refuses other edges and templates marked unsupported. [`compose_lenient`]
//! accepts both, for importing benchmarks written without the rule (CRAB's). Values are
//! drawn from typed pools by a seed, without replacement within an instance, so one template
//! chain yields unlimited reproducible instances and no two attributes of an instance share
//! a drawn value.
//!
//! A template may carry an oracle fragment: the steps that solve it, with the same
//! placeholders. A composed task has an oracle when every part has one: the parts'
//! fragments, filled, one after another in an order the links allow, each step naming the
//! part's environment role.

use crate::task::compat::CompatCheck;
use crate::task::oracle::OracleStep;
use crate::task::steps::Step;
use crate::task::{Checkpoint, EnvNeed, Limits, Task};
use include_dir::{Dir, include_dir};
use pincer_shared::Platform;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Template files shipped inside the binary (the repository's `templates/`).
static BUNDLED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../templates");

/// A typed attribute of a template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attribute {
    /// Name used in placeholders.
    pub name: String,
    /// Value type, naming a pool ("file_path", "text", "country", ...).
    #[serde(rename = "type")]
    pub ty: String,
    /// Whether an upstream sub-task's output may fill it (default true). False for an
    /// attribute the template's own setup gives meaning to, such as a file it writes with
    /// known content: another sub-task's file would not hold that content.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub from_upstream: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(v: &bool) -> bool {
    *v
}

/// A sub-task template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Template {
    /// Id (CRAB's UUID for imported ones).
    pub id: String,
    /// Short human name.
    #[serde(default)]
    pub name: String,
    /// Platform it runs on.
    pub platform: Platform,
    /// Instruction with `{attribute}` placeholders.
    pub description: String,
    /// Attributes in order.
    #[serde(default)]
    pub attributes: Vec<Attribute>,
    /// Output type, if the sub-task produces a value a later one can use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The output value, from attribute placeholders ("{content}").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_value: Option<String>,
    /// Setup steps (placeholders allowed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<Step>,
    /// Setup steps that make the sub-task's input exist, run only when no upstream
    /// sub-task makes it (no edge leads to this part): a file to delete is written here, so
    /// that after a sub-task that creates it nothing exists before the agent acts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_setup: Vec<Step>,
    /// The evaluator sub-graph (placeholders allowed in arguments).
    pub checkpoints: Vec<Checkpoint>,
    /// Steps that solve the sub-task (placeholders allowed in their strings; a run-time
    /// `{{var}}` of the oracle is written `{{{{var}}}}`). Composed tasks have an oracle
    /// when all their parts do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oracle: Vec<OracleStep>,
    /// A peer benchmark's own checks of some of the checkpoints, by scoring mode (`crab`),
    /// where they differ from pincer's (placeholders allowed); composed tasks carry them
    /// for `pincer run --compat`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub compat: BTreeMap<String, Vec<CompatCheck>>,
    /// Why the template cannot be evaluated offline, if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
    /// Values for this template's attributes by type, drawn instead of the shared pools
    /// (for a type whose values depend on the platform: an Android file path).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, Vec<String>>,
    /// Notes on how it differs from its source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// A file of templates and value pools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFile {
    /// Templates.
    #[serde(default, rename = "template")]
    pub templates: Vec<Template>,
    /// Value pools by type.
    #[serde(default)]
    pub pools: BTreeMap<String, Vec<String>>,
}

/// Problems composing or generating.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ComposeError {
    /// No template with that id.
    #[error("no template '{0}' (see `pincer task templates`)")]
    UnknownTemplate(String),
    /// An id prefix or name that fits several templates.
    #[error("'{given}' could be any of {}: give more of the id", candidates.join(", "))]
    AmbiguousTemplate {
        /// What was given.
        given: String,
        /// The templates it fits, as `id (name)`.
        candidates: Vec<String>,
    },
    /// The template cannot be evaluated offline, so tasks are not made from it.
    #[error("template {template} is marked unsupported: {reason}")]
    Unsupported {
        /// The template.
        template: String,
        /// Why.
        reason: String,
    },
    /// An edge names a part that does not exist.
    #[error("edge {from} -> {to} names a part beyond the {parts} given")]
    BadEdge {
        /// Upstream index.
        from: usize,
        /// Downstream index.
        to: usize,
        /// How many parts there are.
        parts: usize,
    },
    /// A pool has fewer distinct values than the attributes of its type in one instance.
    #[error(
        "template '{template}' needs another '{ty}' for '{attribute}', but every value of that \
         pool is already used in this instance: add values to `{ty}` under [pools]"
    )]
    PoolExhausted {
        /// The template.
        template: String,
        /// The attribute.
        attribute: String,
        /// Its type.
        ty: String,
    },
    /// A placeholder names no attribute.
    #[error("template {template}: placeholder '{{{name}}}' names no attribute")]
    UnknownPlaceholder {
        /// The template.
        template: String,
        /// The placeholder.
        name: String,
    },
    /// An attribute has no value.
    #[error("template {template}: no value for attribute '{name}'")]
    MissingValue {
        /// The template.
        template: String,
        /// The attribute.
        name: String,
    },
    /// An edge joins templates whose types do not fit.
    #[error(
        "{from} cannot feed {to}: its output type {output} is not one of the types {to} takes from upstream ({inputs})"
    )]
    TypeMismatch {
        /// Upstream template.
        from: String,
        /// Downstream template.
        to: String,
        /// Upstream output type.
        output: String,
        /// Downstream attribute types.
        inputs: String,
    },
    /// No pool for an attribute's type.
    #[error(
        "template '{template}' needs a value of type '{ty}' for '{attribute}', and no template \
         file has a pool of that type: add `{ty} = [...]` under [pools] in templates/*.toml, or \
         chain a template whose output is a '{ty}' before it"
    )]
    NoPool {
        /// The template.
        template: String,
        /// The attribute.
        attribute: String,
        /// Its type.
        ty: String,
    },
    /// A template or pool file is invalid.
    #[error("{file}: {message}")]
    File {
        /// The file.
        file: String,
        /// What was wrong.
        message: String,
    },
}

/// All templates and pools.
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    /// Templates by id.
    pub templates: BTreeMap<String, Template>,
    /// Value pools by type.
    pub pools: BTreeMap<String, Vec<String>>,
}

impl Catalogue {
    /// The bundled templates and pools.
    pub fn bundled() -> Result<Self, ComposeError> {
        let mut c = Self::default();
        let mut files: Vec<_> = BUNDLED
            .files()
            .filter(|f| f.path().extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort_by_key(|f| f.path());
        for f in files {
            let name = f.path().display().to_string();
            c.add_toml(&name, f.contents_utf8().unwrap_or_default())?;
        }
        Ok(c)
    }

    /// Adds the templates and pools of a TOML document.
    pub fn add_toml(&mut self, name: &str, text: &str) -> Result<(), ComposeError> {
        let file: TemplateFile = toml::from_str(text).map_err(|e| ComposeError::File {
            file: name.into(),
            message: e.to_string(),
        })?;
        for t in file.templates {
            self.templates.insert(t.id.clone(), t);
        }
        for (k, v) in file.pools {
            self.pools.entry(k).or_default().extend(v);
        }
        Ok(())
    }

    /// The template with this id, or the one template whose id starts with it or whose
    /// name it is.
    pub fn get(&self, id: &str) -> Result<&Template, ComposeError> {
        if let Some(t) = self.templates.get(id) {
            return Ok(t);
        }
        let hits: Vec<&Template> = self
            .templates
            .values()
            .filter(|t| t.id.starts_with(id) || t.name == id)
            .collect();
        match hits.as_slice() {
            [t] => Ok(t),
            [] => Err(ComposeError::UnknownTemplate(id.into())),
            many => Err(ComposeError::AmbiguousTemplate {
                given: id.into(),
                candidates: many
                    .iter()
                    .map(|t| format!("{} ({})", t.id, t.name))
                    .collect(),
            }),
        }
    }

    /// The values an attribute of `ty` of `template` is drawn from: the template's own
    /// pool for the type, else the shared one.
    fn pool<'a>(&'a self, template: &'a Template, ty: &str) -> Option<&'a [String]> {
        template
            .pools
            .get(ty)
            .or_else(|| self.pools.get(ty))
            .map(Vec::as_slice)
            .filter(|p| !p.is_empty())
    }
}

/// Replaces `{name}` placeholders; `{{` and `}}` are literal braces.
pub fn fill(
    template_id: &str,
    text: &str,
    values: &BTreeMap<String, String>,
) -> Result<String, ComposeError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let c = rest.as_bytes()[i];
        if rest[i + 1..].starts_with(c as char) {
            out.push(c as char);
            rest = &rest[i + 2..];
            continue;
        }
        if c == b'}' {
            out.push('}');
            rest = &rest[i + 1..];
            continue;
        }
        let Some(end) = rest[i..].find('}') else {
            out.push_str(&rest[i..]);
            rest = "";
            break;
        };
        let name = &rest[i + 1..i + end];
        let v = values
            .get(name)
            .ok_or_else(|| ComposeError::UnknownPlaceholder {
                template: template_id.into(),
                name: name.into(),
            })?;
        out.push_str(v);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn fill_json(
    template_id: &str,
    v: &serde_json::Value,
    values: &BTreeMap<String, String>,
) -> Result<serde_json::Value, ComposeError> {
    Ok(match v {
        serde_json::Value::String(s) => serde_json::Value::String(fill(template_id, s, values)?),
        serde_json::Value::Array(a) => serde_json::Value::Array(
            a.iter()
                .map(|x| fill_json(template_id, x, values))
                .collect::<Result<_, _>>()?,
        ),
        serde_json::Value::Object(o) => serde_json::Value::Object(
            o.iter()
                .map(|(k, x)| Ok((k.clone(), fill_json(template_id, x, values)?)))
                .collect::<Result<_, ComposeError>>()?,
        ),
        other => other.clone(),
    })
}

/// The environment role a platform's sub-tasks run on in composed tasks.
pub fn role_of(p: Platform) -> &'static str {
    match p {
        Platform::Linux => "desktop",
        Platform::Android => "phone",
    }
}

/// A template with attribute values.
#[derive(Debug, Clone)]
pub struct Part<'a> {
    /// The template.
    pub template: &'a Template,
    /// Values by attribute name.
    pub values: BTreeMap<String, String>,
}

impl Part<'_> {
    /// The filled instruction.
    pub fn instruction(&self) -> Result<String, ComposeError> {
        self.check_values()?;
        fill(&self.template.id, &self.template.description, &self.values)
    }

    fn check_values(&self) -> Result<(), ComposeError> {
        for a in &self.template.attributes {
            if !self.values.contains_key(&a.name) {
                return Err(ComposeError::MissingValue {
                    template: self.template.id.clone(),
                    name: a.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// The output value for these attribute values.
    pub fn output(&self) -> Result<Option<String>, ComposeError> {
        self.template
            .output_value
            .as_deref()
            .map(|o| fill(&self.template.id, o, &self.values))
            .transpose()
    }
}

/// Whether `from`'s output can feed one of `to`'s attributes (one of its type that may
/// come from upstream); returns that attribute.
pub fn feeds<'a>(from: &Template, to: &'a Template) -> Result<&'a Attribute, ComposeError> {
    let output = from.output.clone().unwrap_or_else(|| "none".into());
    to.attributes
        .iter()
        .find(|a| a.from_upstream && Some(&a.ty) == from.output.as_ref())
        .ok_or_else(|| ComposeError::TypeMismatch {
            from: from.id.clone(),
            to: to.id.clone(),
            output,
            inputs: to
                .attributes
                .iter()
                .filter(|a| a.from_upstream)
                .map(|a| a.ty.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Composes parts into one task. `edges` are (upstream, downstream) part indices; each
/// must follow the type rule (the upstream output type is one of the downstream attribute
/// types, see [`feeds`]), and no template may be marked unsupported. Every sink of the
/// upstream sub-graph is linked to every source of the downstream one. Checkpoint ids
/// become `s<part>.<id>`. The instruction is the parts' instructions joined, unless
/// `instruction` is given.
pub fn compose(
    id: &str,
    parts: &[Part<'_>],
    edges: &[(usize, usize)],
    instruction: Option<String>,
) -> Result<Task, ComposeError> {
    if let Some(t) = parts
        .iter()
        .map(|p| p.template)
        .find(|t| t.unsupported.is_some())
    {
        return Err(ComposeError::Unsupported {
            template: t.id.clone(),
            reason: t.unsupported.clone().unwrap_or_default(),
        });
    }
    check_edges(parts, edges)?;
    for &(from, to) in edges {
        feeds(parts[from].template, parts[to].template)?;
    }
    compose_lenient(id, parts, edges, instruction)
}

fn check_edges(parts: &[Part<'_>], edges: &[(usize, usize)]) -> Result<(), ComposeError> {
    match edges
        .iter()
        .find(|&&(from, to)| from >= parts.len() || to >= parts.len())
    {
        Some(&(from, to)) => Err(ComposeError::BadEdge {
            from,
            to,
            parts: parts.len(),
        }),
        None => Ok(()),
    }
}

/// [`compose`] without its two rules: edges need not follow the type rule and templates
/// may be marked unsupported. For importing benchmarks whose tasks were written without the
/// rule: CRAB's files link sub-tasks whatever their types (37 of Benchmark-v0's 55
/// two-sub-task files break it) and use templates pincer cannot evaluate offline; the
/// import report counts both. Task authors use [`compose`].
pub fn compose_lenient(
    id: &str,
    parts: &[Part<'_>],
    edges: &[(usize, usize)],
    instruction: Option<String>,
) -> Result<Task, ComposeError> {
    check_edges(parts, edges)?;
    let mut envs = BTreeMap::new();
    let mut setup: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    let mut checkpoints = Vec::new();
    let mut sources: Vec<Vec<String>> = Vec::new();
    let mut sinks: Vec<Vec<String>> = Vec::new();
    let mut texts = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let t = part.template;
        texts.push(part.instruction()?);
        let role = role_of(t.platform);
        envs.insert(
            role.to_owned(),
            EnvNeed {
                platform: t.platform,
            },
        );
        let fed = edges.iter().any(|&(_, to)| to == i);
        let input_setup = if fed { &[][..] } else { &t.input_setup[..] };
        for s in t.setup.iter().chain(input_setup) {
            let filled: Step = serde_json::from_value(fill_json(
                &t.id,
                &serde_json::to_value(s).unwrap_or_default(),
                &part.values,
            )?)
            .map_err(|e| ComposeError::File {
                file: t.id.clone(),
                message: e.to_string(),
            })?;
            setup.entry(role.to_owned()).or_default().push(filled);
        }
        let prefix = |c: &str| format!("s{i}.{c}");
        let with_succ: std::collections::HashSet<&str> = t
            .checkpoints
            .iter()
            .flat_map(|c| c.after.iter().map(String::as_str))
            .collect();
        let has_succ = |c: &Checkpoint| with_succ.contains(c.id.as_str());
        sources.push(
            t.checkpoints
                .iter()
                .filter(|c| c.after.is_empty())
                .map(|c| prefix(&c.id))
                .collect(),
        );
        sinks.push(
            t.checkpoints
                .iter()
                .filter(|c| !has_succ(c))
                .map(|c| prefix(&c.id))
                .collect(),
        );
        for c in &t.checkpoints {
            checkpoints.push(Checkpoint {
                id: prefix(&c.id),
                env: c.env.as_ref().map(|_| role.to_owned()),
                check: c.check.clone(),
                args: fill_json(&t.id, &c.args, &part.values)?,
                after: c.after.iter().map(|a| prefix(a)).collect(),
                final_only: false,
            });
        }
    }
    for &(from, to) in edges {
        for c in checkpoints
            .iter_mut()
            .filter(|c| sources[to].contains(&c.id))
        {
            c.after.extend(sinks[from].iter().cloned());
        }
    }
    let oracle = composed_oracle(parts, edges, envs.len() > 1)?;
    let mut compat: BTreeMap<String, Vec<CompatCheck>> = BTreeMap::new();
    for (i, part) in parts.iter().enumerate() {
        let t = part.template;
        for (mode, checks) in &t.compat {
            for c in checks {
                compat.entry(mode.clone()).or_default().push(CompatCheck {
                    id: part_checkpoint(t, i, &c.id, &format!("compat.{mode}"))?,
                    check: c.check.clone(),
                    args: fill_json(&t.id, &c.args, &part.values)?,
                });
            }
        }
    }
    Ok(Task {
        id: id.to_owned(),
        instruction: instruction.unwrap_or_else(|| texts.join(" ")),
        tags: vec!["composed".into()],
        envs,
        setup,
        finalize: BTreeMap::new(),
        teardown: BTreeMap::new(),
        tools: BTreeMap::new(),
        checkpoints,
        end: Default::default(),
        limits: Limits::default(),
        preconditions: None,
        oracle,
        origin: None,
        requires: Default::default(),
        compat,
    })
}

/// The parts' oracle fragments, filled, in an order the edges allow (each part after the
/// parts that feed it; otherwise in the parts' order); `None` when a part has none. With
/// several environments each step names its part's role.
fn composed_oracle(
    parts: &[Part<'_>],
    edges: &[(usize, usize)],
    name_roles: bool,
) -> Result<Option<Vec<OracleStep>>, ComposeError> {
    if parts.iter().any(|p| p.template.oracle.is_empty()) {
        return Ok(None);
    }
    let mut steps = Vec::new();
    for i in linked_order(parts.len(), edges) {
        let part = &parts[i];
        let t = part.template;
        let role = role_of(t.platform);
        for step in &t.oracle {
            let filled = fill_json(
                &t.id,
                &serde_json::to_value(step).unwrap_or_default(),
                &part.values,
            )?;
            let mut step: OracleStep =
                serde_json::from_value(filled).map_err(|e| ComposeError::File {
                    file: t.id.clone(),
                    message: format!("oracle: {e}"),
                })?;
            if name_roles && let Some(env) = step.env_mut() {
                *env = Some(role.to_owned());
            }
            if let OracleStep::WaitPassed { checkpoint, .. } = &mut step {
                *checkpoint = part_checkpoint(t, i, checkpoint, "oracle: wait_passed")?;
            }
            steps.push(step);
        }
    }
    Ok(Some(steps))
}

/// The composed task's id (`s{i}.{id}`) of checkpoint `id` of part `i`'s template, which
/// `what` (an oracle step, a compat check) names; an id the template lacks is refused.
fn part_checkpoint(t: &Template, i: usize, id: &str, what: &str) -> Result<String, ComposeError> {
    if t.checkpoints.iter().any(|c| c.id == id) {
        Ok(format!("s{i}.{id}"))
    } else {
        Err(ComposeError::File {
            file: t.id.clone(),
            message: format!("{what}: '{id}' is no checkpoint of the template"),
        })
    }
}

/// Part indices with every part after those linked into it (Kahn's algorithm, lowest index
/// first among the ready ones); parts on a cycle come last, in their order.
fn linked_order(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut fed_by = vec![0usize; n];
    for &(_, to) in edges {
        fed_by[to] += 1;
    }
    let mut order = Vec::with_capacity(n);
    let mut done = vec![false; n];
    while let Some(i) = (0..n).find(|&i| !done[i] && fed_by[i] == 0) {
        done[i] = true;
        order.push(i);
        for &(from, to) in edges {
            if from == i {
                fed_by[to] -= 1;
            }
        }
    }
    order.extend((0..n).filter(|&i| !done[i]));
    order
}

/// A small deterministic generator (SplitMix64): the same seed gives the same instance on
/// every machine and every pincer version.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Generates a chain A → B → ... of templates with values drawn from the pools by `seed`.
/// Each downstream template's attribute whose type is the upstream output type takes the
/// upstream output value; every other attribute is drawn from its type's pool without
/// replacement: two attributes of one instance never get the same drawn value (a file read
/// and a file written are different files). The instruction is the filled templates joined,
/// unless `instruction` is given.
pub fn generate(
    cat: &Catalogue,
    ids: &[&str],
    seed: u64,
    instruction: Option<String>,
) -> Result<Task, ComposeError> {
    let templates: Vec<&Template> = ids.iter().map(|id| cat.get(id)).collect::<Result<_, _>>()?;
    let parts = draw(cat, &templates, seed)?;
    let edges: Vec<(usize, usize)> = (1..parts.len()).map(|i| (i - 1, i)).collect();
    let names: Vec<&str> = templates
        .iter()
        .map(|t| {
            if t.name.is_empty() {
                t.id.as_str()
            } else {
                t.name.as_str()
            }
        })
        .collect();
    compose(
        &format!("{}-seed{seed}", names.join("+")),
        &parts,
        &edges,
        instruction,
    )
}

/// The attribute values of a chain's parts for `seed` (see [`generate`]).
fn draw<'a>(
    cat: &Catalogue,
    templates: &[&'a Template],
    seed: u64,
) -> Result<Vec<Part<'a>>, ComposeError> {
    if let Some(t) = templates.iter().find(|t| t.unsupported.is_some()) {
        return Err(ComposeError::Unsupported {
            template: t.id.clone(),
            reason: t.unsupported.clone().unwrap_or_default(),
        });
    }
    let mut rng = Rng::new(seed);
    let mut used: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    let mut parts: Vec<Part<'a>> = Vec::new();
    for (i, t) in templates.iter().enumerate() {
        let fed = if i > 0 {
            Some(feeds(templates[i - 1], t)?.name.clone())
        } else {
            None
        };
        let mut values = BTreeMap::new();
        for a in &t.attributes {
            let v = if Some(&a.name) == fed.as_ref() {
                parts[i - 1]
                    .output()?
                    .ok_or_else(|| ComposeError::MissingValue {
                        template: templates[i - 1].id.clone(),
                        name: "output_value".into(),
                    })?
            } else {
                let pool = cat.pool(t, &a.ty).ok_or_else(|| ComposeError::NoPool {
                    template: t.id.clone(),
                    attribute: a.name.clone(),
                    ty: a.ty.clone(),
                })?;
                let taken = used.entry(a.ty.as_str()).or_default();
                let free: Vec<&String> = pool
                    .iter()
                    .filter(|v| !taken.contains(v.as_str()))
                    .collect();
                if free.is_empty() {
                    return Err(ComposeError::PoolExhausted {
                        template: t.id.clone(),
                        attribute: a.name.clone(),
                        ty: a.ty.clone(),
                    });
                }
                let v = free[rng.below(free.len())];
                taken.insert(v.as_str());
                v.clone()
            };
            values.insert(a.name.clone(), v);
        }
        parts.push(Part {
            template: t,
            values,
        });
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAT: &str = r#"
[pools]
file_path = ["~/a.txt", "~/b.txt", "~/c.txt"]
text = ["alpha", "beta", "gamma", "delta"]

[[template]]
id = "make-file"
platform = "linux"
description = "Create {path} containing \"{text}\"."
attributes = [{ name = "path", type = "file_path" }, { name = "text", type = "text" }]
output = "file_path"
output_value = "{path}"
[[template.checkpoints]]
id = "exists"
env = "desktop"
check = "file_exists"
args = { path = "{path}" }
[[template.checkpoints]]
id = "content"
env = "desktop"
check = "file_contains"
args = { path = "{path}", text = "{text}" }
after = ["exists"]
[[template.oracle]]
do = "type"
text = "echo '{text}' > {path} && echo DONE-${{X}}\n"
target = { role = "terminal" }
[[template.oracle]]
do = "wait_passed"
checkpoint = "content"

[[template]]
id = "remove-file"
platform = "linux"
description = "Delete {target}."
attributes = [{ name = "target", type = "file_path" }]
oracle = [{ do = "type", text = "rm {target}\n" }, { do = "sleep", ms = 100 }]
[[template.checkpoints]]
id = "gone"
env = "desktop"
check = "file_absent"
args = { path = "{target}" }

[[template]]
id = "answer"
platform = "android"
description = "Say {{hi}}."
attributes = []
oracle = [{ do = "submit", answer = "hi" }]
[[template.checkpoints]]
id = "said"
check = "answer_contains"
args = { text = "hi" }

[[template]]
id = "move-file"
platform = "linux"
description = "Move {from} to {to}."
attributes = [{ name = "from", type = "file_path" }, { name = "to", type = "file_path" }]
[[template.checkpoints]]
id = "moved"
env = "desktop"
check = "file_exists"
args = { path = "{to}" }

[[template]]
id = "online"
platform = "linux"
description = "Look {text} up on the web."
attributes = [{ name = "text", type = "text" }]
unsupported = "live web: the answer changes every day"
[[template.checkpoints]]
id = "said"
check = "answer_contains"
args = { text = "{text}" }
"#;

    /// Attribute values from (name, value) pairs.
    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn cat() -> Catalogue {
        let mut c = Catalogue::default();
        c.add_toml("test.toml", CAT).unwrap();
        c
    }

    #[test]
    fn placeholders_fill_and_braces_escape() {
        let v: BTreeMap<String, String> = [("a".to_owned(), "x".to_owned())].into();
        assert_eq!(fill("t", "{a}-{{a}}-}}", &v).unwrap(), "x-{a}-}");
        assert!(matches!(
            fill("t", "{b}", &v),
            Err(ComposeError::UnknownPlaceholder { .. })
        ));
    }

    #[test]
    fn composition_links_sinks_to_sources() {
        let c = cat();
        let task = generate(&c, &["make-file", "remove-file"], 7, None).unwrap();
        let ids: Vec<&str> = task.checkpoints.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, vec!["s0.exists", "s0.content", "s1.gone"]);
        assert_eq!(task.checkpoints[2].after, vec!["s0.content"]);
        // The file made upstream is the one removed downstream.
        assert_eq!(
            task.checkpoints[0].args["path"],
            task.checkpoints[2].args["path"]
        );
        assert!(
            task.instruction.starts_with("Create ~/") && task.instruction.contains(" Delete ~/"),
            "{}",
            task.instruction
        );
        assert_eq!(task.envs.keys().collect::<Vec<_>>(), vec!["desktop"]);
        crate::eval::graph::Graph::build(&task, &crate::eval::functions::Library::standard())
            .unwrap();
    }

    #[test]
    fn oracle_fragments_compose_in_link_order_and_name_roles() {
        let c = cat();
        let remove = Part {
            template: c.get("remove-file").unwrap(),
            values: values(&[("target", "~/a b.txt")]),
        };
        let make = Part {
            template: c.get("make-file").unwrap(),
            values: values(&[("path", "~/a b.txt"), ("text", "x")]),
        };
        // Listed after the part it feeds, the maker still solves first; `{{X}}` is a
        // literal brace for the shell.
        let task = compose("t", &[remove.clone(), make.clone()], &[(1, 0)], None).unwrap();
        let oracle = serde_json::to_value(task.oracle.unwrap()).unwrap();
        assert_eq!(
            oracle,
            serde_json::json!([
                {"do": "type", "text": "echo 'x' > ~/a b.txt && echo DONE-${X}\n", "target": {"role": "terminal"}},
                {"do": "wait_passed", "checkpoint": "s1.content"},
                {"do": "type", "text": "rm ~/a b.txt\n"},
                {"do": "sleep", "ms": 100},
            ])
        );
        // Across platforms each acting step names its part's role.
        let answer = Part {
            template: c.get("answer").unwrap(),
            values: BTreeMap::new(),
        };
        let both = compose_lenient("t", &[make, answer, remove], &[], None).unwrap();
        let envs: Vec<Option<String>> = both
            .oracle
            .unwrap()
            .iter_mut()
            .map(|s| s.env_mut().and_then(|e| e.clone()))
            .collect();
        assert_eq!(
            envs,
            [
                Some("desktop".into()),
                None,
                None,
                Some("desktop".into()),
                None
            ]
        );
        // A part without a fragment leaves the task without an oracle.
        let moved = Part {
            template: c.get("move-file").unwrap(),
            values: values(&[("from", "~/a"), ("to", "~/b")]),
        };
        assert!(compose("t", &[moved], &[], None).unwrap().oracle.is_none());
    }

    #[test]
    fn oracle_waits_and_compat_checks_must_name_the_templates_checkpoints() {
        let bad = |extra: &str| {
            let mut c = Catalogue::default();
            c.add_toml(
                "bad.toml",
                &format!(
                    "[[template]]\nid = \"gone\"\nplatform = \"linux\"\ndescription = \"Delete it.\"\nattributes = []\n{extra}\n[[template.checkpoints]]\nid = \"gone\"\nenv = \"desktop\"\ncheck = \"file_absent\"\nargs = {{ path = \"~/x\" }}\n"
                ),
            )
            .unwrap();
            let part = Part {
                template: c.get("gone").unwrap(),
                values: BTreeMap::new(),
            };
            compose("t", &[part], &[], None).map(|t| (t.oracle, t.compat))
        };
        let (oracle, compat) =
            bad("oracle = [{ do = \"wait_passed\", checkpoint = \"gone\" }]\ncompat = { crab = [{ id = \"gone\", check = \"file_absent\", args = { path = \"~/y\" } }] }")
                .unwrap();
        assert_eq!(
            serde_json::to_value(oracle).unwrap(),
            serde_json::json!([{"do": "wait_passed", "checkpoint": "s0.gone"}])
        );
        assert_eq!(compat["crab"][0].id, "s0.gone");
        for (extra, says) in [
            (
                "oracle = [{ do = \"wait_passed\", checkpoint = \"went\" }]",
                "oracle: wait_passed: 'went' is no checkpoint of the template",
            ),
            (
                "compat = { crab = [{ id = \"went\", check = \"file_absent\", args = { path = \"~/y\" } }] }",
                "compat.crab: 'went' is no checkpoint of the template",
            ),
        ] {
            let e = bad(extra).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn seeds_are_reproducible_and_vary() {
        let c = cat();
        let a = generate(&c, &["make-file"], 1, None).unwrap();
        assert_eq!(a, generate(&c, &["make-file"], 1, None).unwrap());
        let distinct: std::collections::BTreeSet<String> = (0..20)
            .map(|s| generate(&c, &["make-file"], s, None).unwrap().instruction)
            .collect();
        assert!(distinct.len() > 5, "{distinct:?}");
    }

    #[test]
    fn edges_need_matching_types() {
        let c = cat();
        let e = generate(&c, &["remove-file", "make-file"], 1, None).unwrap_err();
        assert!(matches!(e, ComposeError::TypeMismatch { .. }), "{e}");
        let cross = generate(&c, &["answer"], 1, None).unwrap();
        assert_eq!(cross.instruction, "Say {hi}.");
        assert!(cross.checkpoints[0].env.is_none());
    }

    #[test]
    fn compose_enforces_the_type_rule_and_the_lenient_variant_does_not() {
        let c = cat();
        let parts = [
            Part {
                template: c.get("remove-file").unwrap(),
                values: values(&[("target", "~/a.txt")]),
            },
            Part {
                template: c.get("make-file").unwrap(),
                values: values(&[("path", "~/b.txt"), ("text", "x")]),
            },
        ];
        // remove-file has no output, so it feeds nothing.
        let e = compose("t", &parts, &[(0, 1)], None).unwrap_err();
        assert!(
            matches!(&e, ComposeError::TypeMismatch { from, to, .. } if from == "remove-file" && to == "make-file"),
            "{e}"
        );
        let lenient = compose_lenient("t", &parts, &[(0, 1)], None).unwrap();
        let exists = lenient
            .checkpoints
            .iter()
            .find(|c| c.id == "s1.exists")
            .unwrap();
        assert_eq!(exists.after, ["s0.gone"]);
        // The legal direction composes.
        let parts = [parts[1].clone(), parts[0].clone()];
        compose("t", &parts, &[(0, 1)], None).unwrap();
        for f in [compose, compose_lenient] {
            let e = f("t", &parts, &[(0, 2)], None).unwrap_err();
            assert_eq!(
                e,
                ComposeError::BadEdge {
                    from: 0,
                    to: 2,
                    parts: 2
                }
            );
        }
    }

    #[test]
    fn unsupported_templates_are_refused_except_by_the_lenient_variant() {
        let c = cat();
        let e = generate(&c, &["online"], 1, None).unwrap_err();
        assert!(
            matches!(&e, ComposeError::Unsupported { template, .. } if template == "online"),
            "{e}"
        );
        assert!(e.to_string().contains("live web"), "{e}");
        let part = Part {
            template: c.get("online").unwrap(),
            values: [("text".to_owned(), "alpha".to_owned())].into(),
        };
        let e = compose("t", std::slice::from_ref(&part), &[], None).unwrap_err();
        assert!(matches!(e, ComposeError::Unsupported { .. }), "{e}");
        compose_lenient("t", &[part], &[], None).unwrap();
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_candidates() {
        let c = Catalogue::bundled().unwrap();
        let e = c.get("a313ea4d").unwrap_err();
        let ComposeError::AmbiguousTemplate { given, candidates } = &e else {
            panic!("{e}")
        };
        assert_eq!(given, "a313ea4d");
        assert_eq!(candidates.len(), 2, "{candidates:?}");
        assert!(
            e.to_string().contains("download-url")
                && e.to_string().contains("download-clipboard-url"),
            "{e}"
        );
        assert_eq!(c.get("linux-make").unwrap().name, "make-file");
        assert_eq!(c.get("make-file").unwrap().id, "linux-make-file");
        assert!(matches!(
            c.get("no-such-template"),
            Err(ComposeError::UnknownTemplate(_))
        ));
    }

    #[test]
    fn attributes_of_one_type_never_share_a_drawn_value() {
        let c = cat();
        for seed in 0..50 {
            let t = generate(&c, &["move-file"], seed, None).unwrap();
            let (from, to) = t.instruction["Move ".len()..]
                .trim_end_matches('.')
                .split_once(" to ")
                .unwrap();
            assert_ne!(from, to, "seed {seed}: {}", t.instruction);
        }
        let mut small = Catalogue::default();
        small
            .add_toml(
                "small.toml",
                &CAT.replace(r#"["~/a.txt", "~/b.txt", "~/c.txt"]"#, r#"["~/a.txt"]"#),
            )
            .unwrap();
        let e = generate(&small, &["move-file"], 1, None).unwrap_err();
        assert!(
            matches!(&e, ComposeError::PoolExhausted { attribute, .. } if attribute == "to"),
            "{e}"
        );
    }

    #[test]
    fn a_written_instruction_replaces_the_joined_ones() {
        let c = cat();
        let t = generate(&c, &["make-file"], 3, Some("Do it.".into())).unwrap();
        assert_eq!(t.instruction, "Do it.");
        assert_eq!(
            t.checkpoints,
            generate(&c, &["make-file"], 3, None).unwrap().checkpoints
        );
    }

    /// Every chain of up to three of the bundled Linux templates that the type rule allows.
    fn linux_chains(c: &Catalogue) -> Vec<Vec<&Template>> {
        let linux: Vec<&Template> = c
            .templates
            .values()
            .filter(|t| t.id.starts_with("linux-"))
            .collect();
        let mut chains: Vec<Vec<&Template>> = linux.iter().map(|t| vec![*t]).collect();
        let mut last = chains.clone();
        for _ in 1..3 {
            let mut next = Vec::new();
            for chain in &last {
                for t in &linux {
                    if feeds(chain[chain.len() - 1], t).is_ok() {
                        let mut longer = chain.clone();
                        longer.push(*t);
                        next.push(longer);
                    }
                }
            }
            chains.extend(next.iter().cloned());
            last = next;
        }
        chains
    }

    #[test]
    fn every_linux_template_chain_generates_sane_instances() {
        use crate::eval::functions::Library;
        use crate::eval::graph::Graph;
        let c = Catalogue::bundled().unwrap();
        let lib = Library::standard();
        let chains = linux_chains(&c);
        assert!(chains.len() > 10, "{}", chains.len());
        for chain in &chains {
            let ids: Vec<&str> = chain.iter().map(|t| t.id.as_str()).collect();
            for seed in 0..64 {
                let at = format!("{ids:?} seed {seed}");
                let parts = draw(&c, chain, seed).unwrap_or_else(|e| panic!("{at}: {e}"));
                let task = generate(&c, &ids, seed, None).unwrap_or_else(|e| panic!("{at}: {e}"));
                // No drawn value is used twice within a type; fed values repeat their
                // upstream value by design.
                let mut drawn: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
                for (i, p) in parts.iter().enumerate() {
                    let fed = (i > 0).then(|| feeds(chain[i - 1], chain[i]).unwrap().name.as_str());
                    for a in &p.template.attributes {
                        if Some(a.name.as_str()) != fed {
                            drawn.entry(&a.ty).or_default().push(&p.values[&a.name]);
                        }
                    }
                }
                for (ty, vs) in &drawn {
                    let distinct: std::collections::BTreeSet<&&str> = vs.iter().collect();
                    assert_eq!(distinct.len(), vs.len(), "{at}: {ty} drawn twice: {vs:?}");
                }
                // The instruction is every filled template, with no placeholder left.
                assert!(
                    !task.instruction.contains(['{', '}']) && !task.instruction.is_empty(),
                    "{at}: {}",
                    task.instruction
                );
                for p in &parts {
                    assert!(
                        task.instruction.contains(&p.instruction().unwrap()),
                        "{at}: {}",
                        task.instruction
                    );
                }
                Graph::build(&task, &lib).unwrap_or_else(|e| panic!("{at}: {e}"));
                // Nothing a source checkpoint looks at is settled by the setup: a file to
                // create is not written, a file to delete is.
                let mut written = std::collections::BTreeSet::new();
                for s in task.setup.values().flatten() {
                    match s {
                        Step::WriteFile { path, .. } => {
                            written.insert(path.as_str());
                        }
                        Step::Remove { path } => {
                            written.remove(path.as_str());
                        }
                        _ => {}
                    }
                }
                for cp in task.checkpoints.iter().filter(|c| c.after.is_empty()) {
                    let path = cp.args["path"].as_str().unwrap_or_default();
                    match cp.check.as_str() {
                        "file_exists" | "file_contains" | "file_equals" => {
                            assert!(!written.contains(path), "{at}: {} passes at once", cp.id);
                        }
                        "file_absent" => {
                            assert!(written.contains(path), "{at}: {} passes at once", cp.id);
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    #[test]
    fn input_setup_runs_only_when_nothing_upstream_makes_the_input() {
        let c = Catalogue::bundled().unwrap();
        let writes = |t: &Task| {
            t.setup
                .values()
                .flatten()
                .filter(|s| matches!(s, Step::WriteFile { .. }))
                .count()
        };
        let alone = generate(&c, &["remove-file"], 5, None).unwrap();
        assert_eq!(writes(&alone), 1, "{:?}", alone.setup);
        let chained = generate(&c, &["make-file", "remove-file"], 5, None).unwrap();
        assert_eq!(writes(&chained), 0, "{:?}", chained.setup);
        // read-file's file is its own: nothing upstream may feed it.
        assert!(matches!(
            generate(&c, &["make-file", "read-file"], 5, None),
            Err(ComposeError::TypeMismatch { .. })
        ));
    }

    #[test]
    fn a_missing_pool_names_the_template_attribute_and_fix() {
        let mut c = Catalogue::default();
        c.add_toml("test.toml", &CAT.replace("text = [", "words = ["))
            .unwrap();
        let e = generate(&c, &["make-file"], 1, None).unwrap_err();
        let ComposeError::NoPool {
            template,
            attribute,
            ty,
        } = &e
        else {
            panic!("{e}")
        };
        assert_eq!(
            (template.as_str(), attribute.as_str(), ty.as_str()),
            ("make-file", "text", "text")
        );
        assert!(e.to_string().contains("[pools]"), "{e}");
    }
}

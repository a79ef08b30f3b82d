//! Sub-task templates, composition and parameterized generation (CRAB's task composition,
//! AndroidWorld's seeded instances).
//!
//! A template has typed attributes, an instruction with `{attribute}` placeholders, an
//! output type (and how its output value follows from its attributes), setup steps and an
//! evaluator sub-graph whose arguments use the same placeholders. Composing templates links
//! every sink of an upstream sub-graph to every source of the downstream one; an edge is
//! legal when the upstream output type is one of the downstream attribute types. Values are
//! drawn from typed pools by a seed, so one template chain yields unlimited reproducible
//! instances.

use crate::task::steps::Step;
use crate::task::{Checkpoint, EnvNeed, Limits, Platform, Task};
use include_dir::{Dir, include_dir};
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
    /// The evaluator sub-graph (placeholders allowed in arguments).
    pub checkpoints: Vec<Checkpoint>,
    /// Why the template cannot be evaluated offline, if it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<String>,
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
        "{from} cannot feed {to}: its output type {output} is not one of {to}'s attribute types ({inputs})"
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

    /// The template with this id (or a unique prefix of it).
    pub fn get(&self, id: &str) -> Result<&Template, ComposeError> {
        if let Some(t) = self.templates.get(id) {
            return Ok(t);
        }
        let mut hits = self
            .templates
            .values()
            .filter(|t| t.id.starts_with(id) || t.name == id);
        match (hits.next(), hits.next()) {
            (Some(t), None) => Ok(t),
            _ => Err(ComposeError::UnknownTemplate(id.into())),
        }
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

/// Whether `from`'s output can feed one of `to`'s attributes; returns that attribute.
pub fn feeds<'a>(from: &Template, to: &'a Template) -> Result<&'a Attribute, ComposeError> {
    let output = from.output.clone().unwrap_or_else(|| "none".into());
    to.attributes
        .iter()
        .find(|a| Some(&a.ty) == from.output.as_ref())
        .ok_or_else(|| ComposeError::TypeMismatch {
            from: from.id.clone(),
            to: to.id.clone(),
            output,
            inputs: to
                .attributes
                .iter()
                .map(|a| a.ty.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Composes parts into one task. `edges` are (upstream, downstream) part indices; every
/// sink of the upstream sub-graph is linked to every source of the downstream one.
/// Checkpoint ids become `s<part>.<id>`. The instruction is the parts' instructions joined,
/// unless `instruction` is given.
pub fn compose(
    id: &str,
    parts: &[Part<'_>],
    edges: &[(usize, usize)],
    instruction: Option<String>,
) -> Result<Task, ComposeError> {
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
        for s in &t.setup {
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
        let has_succ = |c: &Checkpoint| t.checkpoints.iter().any(|d| d.after.contains(&c.id));
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
    Ok(Task {
        id: id.to_owned(),
        instruction: instruction.unwrap_or_else(|| texts.join(" ")),
        tags: vec!["composed".into()],
        envs,
        setup,
        teardown: BTreeMap::new(),
        checkpoints,
        limits: Limits::default(),
        preconditions: None,
        oracle: None,
    })
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
/// upstream output value; every other attribute is drawn from its type's pool.
pub fn generate(cat: &Catalogue, ids: &[&str], seed: u64) -> Result<Task, ComposeError> {
    let templates: Vec<&Template> = ids.iter().map(|id| cat.get(id)).collect::<Result<_, _>>()?;
    let mut rng = Rng::new(seed);
    let mut parts: Vec<Part<'_>> = Vec::new();
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
                let pool = cat
                    .pools
                    .get(&a.ty)
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| ComposeError::NoPool {
                        template: t.id.clone(),
                        attribute: a.name.clone(),
                        ty: a.ty.clone(),
                    })?;
                pool[rng.below(pool.len())].clone()
            };
            values.insert(a.name.clone(), v);
        }
        parts.push(Part {
            template: t,
            values,
        });
    }
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
        None,
    )
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

[[template]]
id = "remove-file"
platform = "linux"
description = "Delete {target}."
attributes = [{ name = "target", type = "file_path" }]
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
[[template.checkpoints]]
id = "said"
check = "answer_contains"
args = { text = "hi" }
"#;

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
        let task = generate(&c, &["make-file", "remove-file"], 7).unwrap();
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
    fn seeds_are_reproducible_and_vary() {
        let c = cat();
        let a = generate(&c, &["make-file"], 1).unwrap();
        assert_eq!(a, generate(&c, &["make-file"], 1).unwrap());
        let distinct: std::collections::BTreeSet<String> = (0..20)
            .map(|s| generate(&c, &["make-file"], s).unwrap().instruction)
            .collect();
        assert!(distinct.len() > 5, "{distinct:?}");
    }

    #[test]
    fn edges_need_matching_types() {
        let c = cat();
        let e = generate(&c, &["remove-file", "make-file"], 1).unwrap_err();
        assert!(matches!(e, ComposeError::TypeMismatch { .. }), "{e}");
        let cross = generate(&c, &["answer"], 1).unwrap();
        assert_eq!(cross.instruction, "Say {hi}.");
        assert!(cross.checkpoints[0].env.is_none());
    }

    #[test]
    fn a_missing_pool_names_the_template_attribute_and_fix() {
        let mut c = Catalogue::default();
        c.add_toml("test.toml", &CAT.replace("text = [", "words = ["))
            .unwrap();
        let e = generate(&c, &["make-file"], 1).unwrap_err();
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

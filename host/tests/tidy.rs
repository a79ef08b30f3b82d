//! The map cannot drift from the territory: `ARCHITECTURE.md`'s "Host layers" table lists the
//! host library's modules from the bottom layer up, and each module may use only the
//! modules listed above it. This test reads every module's source, collects the crate
//! modules it names (`use crate::…`, paths written inline, `super::` chains that climb to
//! the crate root), and fails on a use of a layer below, on a module missing from the table
//! (or a row naming none), and on submodules of one module that use each other in a circle.
//! Test code (`#[cfg(test)]` modules) is exempt: tests may reach anything.
//!
//! Modelled on rust-analyzer's tidy tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn host() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layers in `ARCHITECTURE.md`, bottom first: the backticked names in the first column
/// of the "Host layers" table (`env/` for a directory module, `paths` for a file).
fn documented_layers(architecture: &str) -> Vec<String> {
    let section = architecture
        .split("\n## ")
        .find(|s| s.starts_with("Host layers"))
        .expect("ARCHITECTURE.md has a \"Host layers\" section");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let first = l.split('|').nth(1).unwrap_or_default();
            let names: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
            assert_eq!(
                names.len(),
                1,
                "each row of the layer table names one module: {l}"
            );
            names[0].trim_end_matches('/').to_owned()
        })
        .collect()
}

/// The library's top-level modules, as `lib.rs` declares them.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            ["pub mod ", "pub(crate) mod ", "mod "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
        })
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect()
}

/// A source file of the library: its path and its module path (`["eval", "graph"]`).
#[derive(Debug)]
struct Source {
    path: PathBuf,
    module: Vec<String>,
    text: String,
}

/// Every non-test source file under `src/`, except the binary's (`main.rs`, `cli/`).
fn sources(src: &Path) -> Vec<Source> {
    sources_of(src, &[src.join("cli"), src.join("main.rs")])
}

/// Every non-test source file under `src/` but the paths in `skip`.
fn sources_of(src: &Path, skip: &[PathBuf]) -> Vec<Source> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if skip.contains(&path) {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.push(Source { path, module, text });
        }
    }
    // Files that are test modules of their parent: `#[cfg(test)] mod tests;`, perhaps with
    // a `#[path = "graph_tests.rs"]` between.
    let test_files: BTreeSet<PathBuf> = out
        .iter()
        .flat_map(|s| {
            let lines: Vec<&str> = s.text.lines().map(str::trim).collect();
            let dir = if s.path.ends_with("mod.rs") {
                s.path.parent().unwrap().to_path_buf()
            } else {
                s.path.with_extension("")
            };
            let mut found = Vec::new();
            for (i, _) in lines
                .iter()
                .enumerate()
                .filter(|(_, l)| **l == "#[cfg(test)]")
            {
                let mut next = lines.get(i + 1).copied().unwrap_or_default();
                let custom = next
                    .strip_prefix("#[path = \"")
                    .and_then(|p| p.strip_suffix("\"]"));
                if custom.is_some() {
                    next = lines.get(i + 2).copied().unwrap_or_default();
                }
                let Some(name) = next.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) else {
                    continue;
                };
                found.push(match custom {
                    Some(file) => s.path.parent().unwrap().join(file),
                    None => dir.join(format!("{name}.rs")),
                });
            }
            found
        })
        .collect();
    out.retain(|s| !test_files.contains(&s.path));
    out
}

/// The code of a file without its comments and its inline test module (which, by the
/// house's habit, ends the file).
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tests_start = lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim().starts_with("mod ")
                && w[1].trim().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines[..tests_start]
        .iter()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first names of every path in a `{...}` group that starts at `s` (just after `{`).
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && (c.is_ascii_alphabetic() || c == '_') => {
                heads.push(ident(&s[i..]).to_owned());
                item_start = false;
            }
            _ => {}
        }
    }
    heads
}

/// Crate-level modules `source` names: `crate::x`, `crate::{x, y}`, and `super` chains
/// that reach the crate root.
fn used_modules(source: &Source) -> BTreeSet<String> {
    let code = code(&source.text);
    let mut used = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let preceded_by_ident = rest[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let after = rest[i + "crate::".len()..].trim_start();
        if !preceded_by_ident {
            if let Some(group) = after.strip_prefix('{') {
                used.extend(group_heads(group));
            } else {
                used.insert(ident(after).to_owned());
            }
        }
        rest = &rest[i + "crate::".len()..];
    }
    // `super` climbs one level from a module's parent; enough of them reach the root.
    let depth = source.module.len();
    let chain = "super::".repeat(depth);
    if depth > 0 {
        let mut rest = code.as_str();
        while let Some(i) = rest.find(&chain) {
            let after = &rest[i + chain.len()..];
            if !after.starts_with("super") {
                if let Some(group) = after.strip_prefix('{') {
                    used.extend(group_heads(group));
                } else {
                    used.insert(ident(after).to_owned());
                }
            }
            rest = &rest[i + chain.len()..];
        }
    }
    used.retain(|m| !m.is_empty() && m != "self");
    used
}

/// Sibling submodules of a directory module that `source` (one of them) names: `super::x`
/// from a file directly inside the directory, `crate::top::x` from anywhere in it.
fn used_siblings(source: &Source) -> BTreeSet<String> {
    let code = code(&source.text);
    let mut used = BTreeSet::new();
    let top = &source.module[0];
    for prefix in [format!("crate::{top}::"), "super::".to_owned()] {
        if prefix == "super::" && source.module.len() != 2 {
            continue;
        }
        let mut rest = code.as_str();
        while let Some(i) = rest.find(&prefix) {
            let preceded_by_ident = rest[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            let after = &rest[i + prefix.len()..];
            if !preceded_by_ident && !after.starts_with("super") {
                if let Some(group) = after.strip_prefix('{') {
                    used.extend(group_heads(group));
                } else {
                    used.insert(ident(after).to_owned());
                }
            }
            rest = after;
        }
    }
    used
}

/// A cycle in `edges`, if any, as the path around it.
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut cycle = path[at..].to_vec();
            cycle.push(n.to_owned());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

#[test]
fn host_modules_use_only_the_layers_above_them() {
    let architecture = std::fs::read_to_string(host().join("../ARCHITECTURE.md")).unwrap();
    let layers = documented_layers(&architecture);
    let lib = std::fs::read_to_string(host().join("src/lib.rs")).unwrap();
    let declared = declared_modules(&lib);
    let documented: BTreeSet<String> = layers.iter().cloned().collect();
    assert_eq!(
        documented, declared,
        "ARCHITECTURE.md's layer table and lib.rs list different modules"
    );
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();

    let mut problems = Vec::new();
    let mut siblings: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for source in sources(&host().join("src")) {
        let Some(top) = source.module.first() else {
            continue;
        };
        let Some(&own) = rank.get(top.as_str()) else {
            problems.push(format!(
                "{}: module {top} is not in the layer table",
                source.path.display()
            ));
            continue;
        };
        for used in used_modules(&source) {
            match rank.get(used.as_str()) {
                Some(&r) if r > own => problems.push(format!(
                    "{}: `{top}` uses `{used}`, a layer below it",
                    source.path.display()
                )),
                Some(_) => {}
                None => problems.push(format!(
                    "{}: uses `crate::{used}`, which is not a module in the layer table",
                    source.path.display()
                )),
            }
        }
        if source.module.len() >= 2 {
            let own_sub = source.module[1].clone();
            let uses: BTreeSet<String> = used_siblings(&source)
                .into_iter()
                .filter(|s| *s != own_sub)
                .collect();
            siblings
                .entry(top.clone())
                .or_default()
                .entry(own_sub)
                .or_default()
                .extend(uses);
        }
    }
    for (top, edges) in &siblings {
        // Only edges between submodules that exist; the rest are items of the module.
        let subs: BTreeSet<&String> = edges.keys().collect();
        let edges: BTreeMap<String, BTreeSet<String>> = edges
            .iter()
            .map(|(k, v)| {
                let v = v.iter().filter(|s| subs.contains(s)).cloned().collect();
                (k.clone(), v)
            })
            .collect();
        if let Some(cycle) = find_cycle(&edges) {
            problems.push(format!(
                "submodules of `{top}` use each other in a circle: {}",
                cycle.join(" -> ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The library paths a front-end's code names: `pincer::x::y` as `x::y` (two segments at
/// most), groups included (`pincer::{desktop, run::sets}`).
fn library_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("pincer::") {
        let preceded_by_ident = rest[..i]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let after = &rest[i + "pincer::".len()..];
        if !preceded_by_ident {
            let mut two = |s: &str| {
                let first = ident(s);
                let second = s[first.len()..]
                    .strip_prefix("::")
                    .map(ident)
                    .filter(|n| !n.is_empty());
                found.insert(match second {
                    Some(n) => format!("{first}::{n}"),
                    None => first.to_owned(),
                });
            };
            match after.strip_prefix('{') {
                Some(group) => {
                    for item in group.split('}').next().unwrap_or_default().split(',') {
                        two(item.trim());
                    }
                }
                None => two(after),
            }
        }
        rest = after;
    }
    found
}

/// `cli/` is argument parsing and printing, and a run starts in one place: `run::launch`
/// (environments, their guard, the signal policy). So no front-end (the CLI's files, the
/// Python bindings) starts or stops desktops or VMs itself: only the `desktop` and `vm`
/// commands name those modules, and nothing outside `run` names `run::sets`.
#[test]
fn front_ends_start_runs_only_through_launch() {
    let root = host().join("..");
    let mut files: Vec<PathBuf> = std::fs::read_dir(host().join("src/cli"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.push(host().join("src/main.rs"));
    files.push(root.join("python/src/lib.rs"));
    let mut problems = Vec::new();
    for f in &files {
        let code = code(&std::fs::read_to_string(f).unwrap());
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let in_cli = f.parent() == Some(&host().join("src/cli"));
        for path in library_paths(&code) {
            let module = path.split("::").next().unwrap_or_default();
            let own_command = in_cli && name == format!("{module}.rs");
            if (module == "desktop" || module == "vm") && !own_command {
                problems.push(format!(
                    "{}: names `pincer::{path}`; start environments through `run::launch`",
                    f.display()
                ));
            }
            if path == "run::sets" {
                problems.push(format!(
                    "{}: names `pincer::run::sets`; use `run::launch`",
                    f.display()
                ));
            }
        }
        if code.contains("sets::") && !code.contains("pincer::run::sets") {
            problems.push(format!(
                "{}: reaches `run::sets` through an alias",
                f.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The guest crates keep the house's shape too: every file opens with a module doc, and
/// modules (top-level, and the submodules of one module) never use each other in a circle.
#[test]
fn guest_crates_have_no_circles_and_every_file_says_what_it_is() {
    let root = host().join("..");
    let mut problems = Vec::new();
    for krate in ["shared", "guest-core", "guest-agent", "android-shim"] {
        let src = root.join(krate).join("src");
        let all = sources_of(&src, &[]);
        let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut siblings: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for source in &all {
            if !source.text.starts_with("//!") {
                problems.push(format!(
                    "{}: opens without a module doc (`//!`) saying what it is",
                    source.path.display()
                ));
            }
            let Some(own) = source.module.first() else {
                continue;
            };
            let uses = used_modules(source);
            top.entry(own.clone())
                .or_default()
                .extend(uses.into_iter().filter(|u| u != own));
            if source.module.len() >= 2 {
                let own_sub = source.module[1].clone();
                let uses: BTreeSet<String> = used_siblings(source)
                    .into_iter()
                    .filter(|s| *s != own_sub)
                    .collect();
                siblings
                    .entry(own.clone())
                    .or_default()
                    .entry(own_sub)
                    .or_default()
                    .extend(uses);
            }
        }
        let mut graphs = vec![(krate.to_owned(), top)];
        graphs.extend(
            siblings
                .into_iter()
                .map(|(m, e)| (format!("{krate}::{m}"), e)),
        );
        for (name, edges) in graphs {
            let known: BTreeSet<&String> = edges.keys().collect();
            let edges: BTreeMap<String, BTreeSet<String>> = edges
                .iter()
                .map(|(k, v)| {
                    let v = v.iter().filter(|s| known.contains(s)).cloned().collect();
                    (k.clone(), v)
                })
                .collect();
            if let Some(cycle) = find_cycle(&edges) {
                problems.push(format!(
                    "modules of `{name}` use each other in a circle: {}",
                    cycle.join(" -> ")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: it sees the forms of `use` the code writes.
#[test]
fn the_checker_finds_every_form_of_use() {
    let s = |module: &[&str], text: &str| Source {
        path: PathBuf::from("x.rs"),
        module: module.iter().map(|m| (*m).to_owned()).collect(),
        text: text.to_owned(),
    };
    let got = used_modules(&s(
        &["run", "task"],
        "use crate::env::Environment;\nuse crate::{agent::X,\n  eval::{graph, Y}};\n#[cfg(test)]\nfn g() {}\nfn f(x: &crate::task::Task) {}\nuse super::super::report;\n// crate::bench in a comment\n#[cfg(test)]\nmod tests {\n use crate::desktop;\n}",
    ));
    assert_eq!(
        got,
        ["agent", "env", "eval", "report", "task"]
            .map(str::to_owned)
            .into(),
    );
    let got = used_siblings(&s(
        &["report", "graph"],
        "use super::escape::esc;\nuse super::{load::GraphSpec, html};\nuse crate::report::tables;",
    ));
    assert_eq!(
        got,
        ["escape", "html", "load", "tables"]
            .map(str::to_owned)
            .into()
    );
    let cycle = find_cycle(
        &[("a", "b"), ("b", "c"), ("c", "a")]
            .map(|(k, v)| (k.to_owned(), BTreeSet::from([v.to_owned()])))
            .into(),
    );
    assert_eq!(cycle.unwrap().join(" -> "), "a -> b -> c -> a");
    assert_eq!(
        library_paths(
            "use pincer::run::launch::{Launch, Source};\nuse pincer::{desktop, vm::qemu, run::sets};\nfn f() { pincer::env::x(); mypincer::desktop::y(); }"
        ),
        ["desktop", "env::x", "run::launch", "run::sets", "vm::qemu"]
            .map(str::to_owned)
            .into()
    );
    assert_eq!(
        documented_layers(
            "# A\n## Host layers\n\n| module | what |\n|---|---|\n| `env/` | x |\n| `paths` | y |\n\n## Next\n| `z` | |"
        ),
        ["env", "paths"]
    );
}

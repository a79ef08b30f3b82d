//! Where packages come from: the host's own apt configuration (`/etc/apt/sources.list` and
//! `sources.list.d/`, one-line and deb822 formats), or a mirror the user names. pincer never
//! writes a mirror host of its own into an image or the repository.

use super::recipe::{Distribution, Recipe};
use std::path::Path;

/// One apt source as the host has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Base URI (`http://deb.debian.org/debian`).
    pub uri: String,
    /// Suites (`bookworm`, `bookworm-updates`).
    pub suites: Vec<String>,
    /// The keyring the host verifies it with, if it names one.
    pub signed_by: Option<String>,
}

/// Reads every `deb` source of the host's apt configuration under `root` (`/` normally).
pub fn host_sources(root: &Path) -> Vec<Source> {
    let etc = root.join("etc/apt");
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string(etc.join("sources.list")) {
        out.extend(one_line(&text));
    }
    let mut files: Vec<_> = std::fs::read_dir(etc.join("sources.list.d"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        match f.extension().and_then(|e| e.to_str()) {
            Some("list") => out.extend(one_line(&text)),
            Some("sources") => out.extend(deb822(&text)),
            _ => {}
        }
    }
    out
}

/// `deb [options] URI SUITE COMPONENTS...` lines.
fn one_line(text: &str) -> Vec<Source> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter_map(|l| {
            let rest = l.strip_prefix("deb ")?.trim();
            let (opts, rest) = match rest.strip_prefix('[') {
                Some(r) => {
                    let (o, r) = r.split_once(']')?;
                    (o, r.trim())
                }
                None => ("", rest),
            };
            let mut words = rest.split_whitespace();
            let uri = words.next()?.trim_end_matches('/').to_owned();
            let suite = words.next()?.to_owned();
            let signed_by = opts
                .split_whitespace()
                .find_map(|o| o.strip_prefix("signed-by="))
                .map(str::to_owned);
            Some(Source {
                uri,
                suites: vec![suite],
                signed_by,
            })
        })
        .collect()
}

/// deb822 stanzas (`Types: deb`, `URIs:`, `Suites:`, `Signed-By:`).
fn deb822(text: &str) -> Vec<Source> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let enabled = field("Enabled").is_none_or(|v| v != "no");
        let debs = field("Types").is_some_and(|t| t.split_whitespace().any(|w| w == "deb"));
        let (Some(uris), Some(suites)) = (field("URIs"), field("Suites")) else {
            continue;
        };
        if !(enabled && debs) {
            continue;
        }
        // A Signed-By that holds an inline key (several lines) is not a path.
        let signed_by = field("Signed-By").filter(|s| s.starts_with('/'));
        for uri in uris.split_whitespace() {
            out.push(Source {
                uri: uri.trim_end_matches('/').to_owned(),
                suites: suites.split_whitespace().map(str::to_owned).collect(),
                signed_by: signed_by.clone(),
            });
        }
    }
    out
}

/// The `deb` lines an image of `recipe` is built from, taken from the host's sources:
/// those serving the recipe's suite (with its `-updates` and `-security` suites), else the
/// archive of the same distribution with the recipe's suite. `None` when the host has no
/// source for the distribution.
pub fn lines_for(recipe: &Recipe, sources: &[Source]) -> Option<Vec<String>> {
    let components = recipe.components.join(" ");
    let same_suite = |s: &str| {
        s == recipe.suite
            || s.strip_prefix(&recipe.suite)
                .is_some_and(|rest| ["-updates", "-security"].contains(&rest))
    };
    let mut lines: Vec<String> = Vec::new();
    for src in sources {
        for suite in src.suites.iter().filter(|s| same_suite(s)) {
            lines.push(format!("deb {} {suite} {components}", src.uri));
        }
    }
    if lines
        .iter()
        .any(|l| l.split_whitespace().nth(2) == Some(recipe.suite.as_str()))
    {
        lines.dedup();
        return Some(lines);
    }
    // Another suite of the same distribution: its archive serves the recipe's suite too.
    let archive = match recipe.distribution {
        Distribution::Debian => "/debian",
        Distribution::Ubuntu => "/ubuntu",
    };
    let base = sources.iter().find(|s| s.uri.ends_with(archive))?;
    Some(vec![format!(
        "deb {} {} {components}",
        base.uri, recipe.suite
    )])
}

/// The `deb` line for a mirror the user names (`--mirror URI`).
pub fn line_for_mirror(recipe: &Recipe, uri: &str) -> String {
    format!(
        "deb {} {} {}",
        uri.trim_end_matches('/'),
        recipe.suite,
        recipe.components.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::recipe;

    fn recipe(suite: &str, distribution: &str) -> Recipe {
        recipe::parse(
            "t",
            &format!(
                "description = \"t\"\ndistribution = \"{distribution}\"\nsuite = \"{suite}\"\nkernel = \"linux-image-amd64\"\ncomponents = [\"main\", \"contrib\"]\n[user]\nname = \"u\"\n[session]\n"
            ),
            None,
        )
        .unwrap()
        .recipe
    }

    #[test]
    fn host_sources_in_both_formats_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let apt = dir.path().join("etc/apt");
        std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
        std::fs::write(
            apt.join("sources.list"),
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main\ndeb-src http://x/debian bookworm main\n",
        )
        .unwrap();
        std::fs::write(
            apt.join("sources.list.d/debian.sources"),
            "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\nTypes: deb\nURIs: http://deb.example/debian-security\nSuites: bookworm-security\nComponents: main\n\nTypes: deb\nEnabled: no\nURIs: http://off.example/debian\nSuites: bookworm\n",
        )
        .unwrap();
        std::fs::write(
            apt.join("sources.list.d/notes.txt"),
            "deb http://ignored/ x main",
        )
        .unwrap();
        let s = host_sources(dir.path());
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].uri, "http://mirror.example/debian");
        assert_eq!(s[0].signed_by.as_deref(), Some("/k.gpg"));
        assert_eq!(s[1].suites, ["bookworm", "bookworm-updates"]);

        // The host's own suite: every source serving it, with the recipe's components.
        let lines = lines_for(&recipe("bookworm", "debian"), &s).unwrap();
        assert_eq!(
            lines,
            [
                "deb http://mirror.example/debian bookworm main contrib",
                "deb http://deb.example/debian bookworm main contrib",
                "deb http://deb.example/debian bookworm-updates main contrib",
                "deb http://deb.example/debian-security bookworm-security main contrib",
            ]
        );
        // Another Debian suite comes from the host's Debian archive.
        assert_eq!(
            lines_for(&recipe("trixie", "debian"), &s).unwrap(),
            ["deb http://mirror.example/debian trixie main contrib"]
        );
        // No Ubuntu archive on this host.
        assert_eq!(lines_for(&recipe("noble", "ubuntu"), &s), None);
        assert_eq!(
            line_for_mirror(&recipe("noble", "ubuntu"), "http://archive.example/ubuntu/"),
            "deb http://archive.example/ubuntu noble main contrib"
        );
    }
}

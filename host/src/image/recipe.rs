//! Image recipes: one TOML file per image in `images/` (bundled into the binary) or
//! anywhere on disk. A recipe says which distribution and suite, which packages, the user,
//! locale and time zone, files to add and the desktop session; pincer adds what its session
//! and agent need. Everything a recipe gets wrong is found here, before anything is built.

use include_dir::{Dir, include_dir};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The recipes shipped with pincer (`images/*.toml`).
static BUNDLED: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../images");

/// Suites pincer knows how to build, per distribution: a typo fails at once instead of
/// after minutes of downloading.
const SUITES: &[(Distribution, &[&str])] = &[
    (
        Distribution::Debian,
        &[
            "bullseye",
            "bookworm",
            "trixie",
            "forky",
            "sid",
            "oldstable",
            "stable",
            "testing",
            "unstable",
        ],
    ),
    (
        Distribution::Ubuntu,
        &["jammy", "noble", "oracular", "plucky", "questing"],
    ),
];

/// A distribution pincer builds images of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    /// Debian.
    Debian,
    /// Ubuntu.
    Ubuntu,
}

impl std::fmt::Display for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Debian => "debian",
            Self::Ubuntu => "ubuntu",
        })
    }
}

/// A recipe as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// One line for `pincer image list`.
    pub description: String,
    /// The distribution.
    pub distribution: Distribution,
    /// Its suite (`bookworm`, `noble`).
    pub suite: String,
    /// Archive components (`main`, `universe`).
    #[serde(default = "main_component")]
    pub components: Vec<String>,
    /// The kernel package (`linux-image-amd64` on Debian, `linux-image-virtual` on Ubuntu).
    pub kernel: String,
    /// Size of the root file system in GiB (the disk grows to it; unused space costs
    /// nothing in the qcow2 file).
    #[serde(default = "default_disk")]
    pub disk_gib: u32,
    /// The locale (`C.UTF-8`, `en_US.UTF-8`).
    #[serde(default = "c_utf8")]
    pub locale: String,
    /// The time zone (`UTC`, `Europe/Berlin`).
    #[serde(default = "utc")]
    pub timezone: String,
    /// The apps and tools of the image; pincer adds its session's own packages.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Apt repositories besides the distribution's (a vendor's), with their keys; their
    /// packages go in `packages`.
    #[serde(default)]
    pub apt_sources: Vec<AptSource>,
    /// Local `.deb` files to install (a vendor's download), relative to the recipe's
    /// directory; their dependencies come from the archive.
    #[serde(default)]
    pub debs: Vec<PathBuf>,
    /// Python packages installed with pip into the system's Python (`pyautogui==0.9.54`).
    #[serde(default)]
    pub pip: Vec<String>,
    /// The desktop user.
    pub user: User,
    /// The desktop session.
    pub session: Session,
    /// Files to add.
    #[serde(default)]
    pub files: Vec<FileSpec>,
    /// Shell commands run as root inside the image, in order, after its packages, files,
    /// user and pip packages are in (compiling GSettings overrides, editing a packaged
    /// configuration); one that fails fails the build. Left out of the serialized recipe
    /// when empty, so that recipes without it keep their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run: Vec<String>,
    /// The versions a machine this image stands in for has (OSWorld's), by package: the
    /// manifest lists each next to the image's own. Metadata: not part of the image's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<Compare>,
    /// Guest memory, MiB, for VMs of this image when the user names none (`vm up
    /// --memory`, `run --vm-memory`); 1024 when left out. How the image runs, not what it is
    /// made of: not part of its hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_memory_mib: Option<u32>,
}

/// Another machine's package versions, to be listed next to an image's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compare {
    /// Which machine, and where its versions are stated.
    pub machine: String,
    /// Its version of each package, by the image's package name.
    pub versions: std::collections::BTreeMap<String, String>,
}

/// The user the desktop session runs as (uid 1000).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// Login name.
    pub name: String,
    /// Its password (none: the account has no password and cannot log in with one).
    #[serde(default)]
    pub password: Option<String>,
    /// Whether it may use sudo (as a member of the `sudo` group, asked for its password).
    #[serde(default)]
    pub sudo: bool,
}

/// An apt repository added to the image's sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AptSource {
    /// Its address (`https://dl.google.com/linux/chrome/deb/`, `file:///srv/repo`).
    pub uri: String,
    /// Its suite (`stable`), or a path ending in `/` for a flat repository (`./`).
    pub suite: String,
    /// Its components (`main`); none for a flat repository.
    #[serde(default)]
    pub components: Vec<String>,
    /// The file with the key that signs it (armored `.asc` or binary `.gpg`), relative to
    /// the recipe's directory.
    pub key: PathBuf,
}

/// The desktop session started at boot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// Screen size, `WIDTHxHEIGHT`. The session always starts at boot, logged in as the
    /// user, with no display manager.
    #[serde(default = "default_screen")]
    pub screen: String,
    /// The window manager's package and command (`openbox`), or `none`.
    #[serde(default = "openbox")]
    pub window_manager: String,
}

/// A file put into the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// Absolute path in the image.
    pub path: String,
    /// Its text.
    #[serde(default)]
    pub content: Option<String>,
    /// Or a file to copy, relative to the recipe's directory.
    #[serde(default)]
    pub source: Option<PathBuf>,
    /// Permission bits in octal (`644`, `755`).
    #[serde(default = "default_mode")]
    pub mode: String,
}

fn main_component() -> Vec<String> {
    vec!["main".into()]
}
fn default_disk() -> u32 {
    4
}
fn c_utf8() -> String {
    "C.UTF-8".into()
}
fn utc() -> String {
    "UTC".into()
}
fn default_screen() -> String {
    "1920x1080".into()
}
fn openbox() -> String {
    "openbox".into()
}
fn default_mode() -> String {
    "644".into()
}

/// What is wrong with a recipe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecipeError {
    /// No bundled recipe and no file of that name.
    #[error("no recipe '{name}': give a recipe file, or one of the bundled recipes: {}", known.join(", "))]
    Unknown {
        /// What was asked for.
        name: String,
        /// The bundled recipes.
        known: Vec<String>,
    },
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TOML does not parse or has an unknown or missing field.
    #[error("recipe {name}: {message}")]
    Parse {
        /// The recipe.
        name: String,
        /// What the parser said, with the place.
        message: String,
    },
    /// A value that cannot be right.
    #[error("recipe {name}: `{field}` {problem}")]
    Invalid {
        /// The recipe.
        name: String,
        /// The field.
        field: String,
        /// What is wrong and what would be right.
        problem: String,
    },
}

/// A recipe with its name and the directory its `source` files are relative to.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The image's name: the file name without `.toml`.
    pub name: String,
    /// The recipe.
    pub recipe: Recipe,
    /// The file's text, as hashed.
    pub text: String,
    /// Where `source` paths start (none for bundled recipes, which have no `source`s).
    pub dir: Option<PathBuf>,
}

/// Names of the bundled recipes.
pub fn bundled() -> Vec<String> {
    let mut names: Vec<String> = BUNDLED
        .files()
        .filter_map(|f| {
            let p = f.path();
            (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    names
}

/// Loads a recipe by bundled name (`debian-12-minimal`) or as a file path.
pub fn load(spec: &str) -> Result<Loaded, RecipeError> {
    let path = Path::new(spec);
    if spec.ends_with(".toml") || path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Io {
            path: path.to_owned(),
            source,
        })?;
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(spec)
            .to_owned();
        let dir = path.parent().map(Path::to_owned);
        return parse(&name, &text, dir);
    }
    let file = BUNDLED
        .get_file(format!("{spec}.toml"))
        .ok_or_else(|| RecipeError::Unknown {
            name: spec.into(),
            known: bundled(),
        })?;
    let text = file.contents_utf8().unwrap_or_default().to_owned();
    parse(spec, &text, None)
}

/// Parses and validates a recipe's text.
pub fn parse(name: &str, text: &str, dir: Option<PathBuf>) -> Result<Loaded, RecipeError> {
    let recipe: Recipe = toml::from_str(text).map_err(|e| RecipeError::Parse {
        name: name.into(),
        message: e.to_string().trim().replace('\n', " "),
    })?;
    let loaded = Loaded {
        name: name.into(),
        recipe,
        text: text.into(),
        dir,
    };
    loaded.validate()?;
    Ok(loaded)
}

/// Whether a word is a valid Debian package name (Policy 5.6.1).
fn package_name(p: &str) -> bool {
    p.len() >= 2
        && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c))
}

impl Loaded {
    fn invalid(&self, field: &str, problem: impl Into<String>) -> RecipeError {
        RecipeError::Invalid {
            name: self.name.clone(),
            field: field.into(),
            problem: problem.into(),
        }
    }

    fn validate(&self) -> Result<(), RecipeError> {
        let r = &self.recipe;
        let known = SUITES
            .iter()
            .find(|(d, _)| *d == r.distribution)
            .map_or(&[][..], |(_, s)| *s);
        if !known.contains(&r.suite.as_str()) {
            return Err(self.invalid(
                "suite",
                format!(
                    "'{}' is not a {} suite pincer knows: use one of {}",
                    r.suite,
                    r.distribution,
                    known.join(", ")
                ),
            ));
        }
        if r.components.is_empty() {
            return Err(self.invalid("components", "is empty: name at least `main`"));
        }
        let compared = r.compare.iter().flat_map(|c| c.versions.keys());
        for (field, p) in std::iter::once(("kernel", &r.kernel))
            .chain(r.packages.iter().map(|p| ("packages", p)))
            .chain(compared.map(|p| ("compare.versions", p)))
        {
            if !package_name(p) {
                return Err(self.invalid(
                    field,
                    format!("'{p}' is not a package name (lower case letters, digits, + - .)"),
                ));
            }
        }
        if !(1..=512).contains(&r.disk_gib) {
            return Err(self.invalid("disk_gib", "must be 1 to 512"));
        }
        let memory = super::MEMORY_MIB;
        if r.vm_memory_mib.is_some_and(|m| !memory.contains(&m)) {
            return Err(self.invalid(
                "vm_memory_mib",
                format!("must be {} to {} (MiB)", memory.start(), memory.end()),
            ));
        }
        let valid_locale = r.locale == "C.UTF-8"
            || r.locale.split_once('.').is_some_and(|(lang, codeset)| {
                lang.len() >= 2
                    && lang.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
                    && codeset == "UTF-8"
            });
        if !valid_locale {
            return Err(self.invalid(
                "locale",
                format!(
                    "'{}' is not a UTF-8 locale such as C.UTF-8 or en_US.UTF-8",
                    r.locale
                ),
            ));
        }
        let valid_zone = !r.timezone.is_empty()
            && !r.timezone.contains("..")
            && r.timezone.split('/').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_+-".contains(c))
            });
        if !valid_zone {
            return Err(self.invalid(
                "timezone",
                format!(
                    "'{}' is not a time zone such as UTC or Europe/Berlin",
                    r.timezone
                ),
            ));
        }
        let valid_user = r.user.name.len() <= 32
            && r.user.name.starts_with(|c: char| c.is_ascii_lowercase())
            && r.user
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            && r.user.name != "root";
        if !valid_user {
            return Err(self.invalid(
                "user.name",
                format!(
                    "'{}' is not a login name (lower case, not root, at most 32 characters)",
                    r.user.name
                ),
            ));
        }
        if self.screen().is_none() {
            return Err(self.invalid(
                "session.screen",
                format!(
                    "'{}' is not WIDTHxHEIGHT, such as 1920x1080",
                    r.session.screen
                ),
            ));
        }
        let wm = &r.session.window_manager;
        if wm != "none" && !package_name(wm) {
            return Err(self.invalid(
                "session.window_manager",
                format!("'{wm}' is not a package (openbox) nor `none`"),
            ));
        }
        self.validate_additions()?;
        for (i, f) in r.files.iter().enumerate() {
            let field = format!("files[{i}]");
            if !f.path.starts_with('/') || f.path.split('/').any(|p| p == "..") {
                return Err(self.invalid(
                    &format!("{field}.path"),
                    format!("'{}' must be an absolute path without `..`", f.path),
                ));
            }
            if f.content.is_some() == f.source.is_some() {
                return Err(self.invalid(&field, "needs exactly one of `content` and `source`"));
            }
            if u32::from_str_radix(&f.mode, 8).map_or(true, |m| m > 0o7777) {
                return Err(self.invalid(
                    &format!("{field}.mode"),
                    format!("'{}' is not octal permission bits such as 644", f.mode),
                ));
            }
            if let Some(src) = &f.source {
                let Some(dir) = &self.dir else {
                    return Err(self.invalid(
                        &format!("{field}.source"),
                        "bundled recipes cannot copy files: use `content`",
                    ));
                };
                if !dir.join(src).is_file() {
                    return Err(self.invalid(
                        &format!("{field}.source"),
                        format!("{} is not a file", dir.join(src).display()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks what a recipe adds beyond the archive: apt sources, local `.deb`s, pip
    /// packages and the user's password.
    fn validate_additions(&self) -> Result<(), RecipeError> {
        let r = &self.recipe;
        // Words that go into apt's sources and the shell hooks unquoted must be plain.
        let plain = |s: &str| {
            !s.is_empty()
                && !s.starts_with('-')
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/:._-~+%@=".contains(c))
        };
        for (i, src) in r.apt_sources.iter().enumerate() {
            let field = format!("apt_sources[{i}]");
            let scheme = ["http://", "https://", "file:///"];
            if !scheme.iter().any(|s| src.uri.starts_with(s)) || !plain(&src.uri) {
                return Err(self.invalid(
                    &format!("{field}.uri"),
                    format!(
                        "'{}' is not an http://, https:// or file:/// address without spaces",
                        src.uri
                    ),
                ));
            }
            if !plain(&src.suite) {
                return Err(self.invalid(
                    &format!("{field}.suite"),
                    format!("'{}' is not a suite such as stable or ./", src.suite),
                ));
            }
            let flat = src.suite.ends_with('/');
            if flat != src.components.is_empty() || !src.components.iter().all(|c| plain(c)) {
                return Err(self.invalid(
                    &format!("{field}.components"),
                    "names the components (main) of a suite, and none of a flat repository (a suite ending in /)",
                ));
            }
            self.local_file(&format!("{field}.key"), &src.key, &["asc", "gpg"])?;
        }
        for (i, deb) in r.debs.iter().enumerate() {
            self.local_file(&format!("debs[{i}]"), deb, &["deb"])?;
        }
        if let Some(i) = r.run.iter().position(|c| c.trim().is_empty()) {
            return Err(self.invalid(
                &format!("run[{i}]"),
                "is empty: write the shell command to run in the image, or remove the entry",
            ));
        }
        for (i, spec) in r.pip.iter().enumerate() {
            let ok = spec.starts_with(|c: char| c.is_ascii_alphanumeric())
                && spec
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-[],=<>!~".contains(c));
            if !ok {
                return Err(self.invalid(
                    &format!("pip[{i}]"),
                    format!("'{spec}' is not a requirement such as pyautogui or pyautogui==0.9.54"),
                ));
            }
        }
        if let Some(pw) = &r.user.password
            && (pw.is_empty() || pw.contains([':', '\n', '\r', '\0']))
        {
            return Err(self.invalid(
                "user.password",
                "must be non-empty, on one line and without `:`",
            ));
        }
        Ok(())
    }

    /// Checks that `path`, relative to the recipe's directory, is a file with one of the
    /// `extensions`.
    fn local_file(&self, field: &str, path: &Path, extensions: &[&str]) -> Result<(), RecipeError> {
        let Some(dir) = &self.dir else {
            return Err(self.invalid(
                field,
                "bundled recipes carry no files: copy the recipe next to the file and build that copy",
            ));
        };
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !extensions.contains(&ext) {
            return Err(self.invalid(
                field,
                format!(
                    "{} does not end in .{}",
                    path.display(),
                    extensions.join(" or .")
                ),
            ));
        }
        let full = dir.join(path);
        if !full.is_file() {
            return Err(self.invalid(field, format!("{} is not a file", full.display())));
        }
        Ok(())
    }

    /// Files outside the recipe that the image is made from, in the order the recipe names
    /// them: sources of `files`, apt keys and `.deb`s.
    pub fn local_inputs(&self) -> Vec<PathBuf> {
        let r = &self.recipe;
        r.files
            .iter()
            .filter_map(|f| f.source.as_ref())
            .chain(r.apt_sources.iter().map(|s| &s.key))
            .chain(&r.debs)
            .map(|p| self.resolve(p))
            .collect()
    }

    /// A path the recipe names, from its directory (absolute ones as they are).
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match &self.dir {
            Some(dir) => dir.join(path),
            None => path.to_owned(),
        }
    }

    /// Adds local `.deb` files given on the command line (`image build --deb`), to any
    /// recipe, bundled ones too.
    pub fn add_debs(&mut self, debs: &[PathBuf]) -> Result<(), RecipeError> {
        for deb in debs {
            let full = std::path::absolute(deb).map_err(|source| RecipeError::Io {
                path: deb.clone(),
                source,
            })?;
            if full.extension().and_then(|e| e.to_str()) != Some("deb") || !full.is_file() {
                return Err(self.invalid("--deb", format!("{} is not a .deb file", full.display())));
            }
            self.recipe.debs.push(full);
        }
        Ok(())
    }

    /// The screen size.
    pub fn screen(&self) -> Option<(u32, u32)> {
        let (w, h) = self.recipe.session.screen.split_once('x')?;
        let (w, h) = (w.parse().ok()?, h.parse().ok()?);
        ((320..=7680).contains(&w) && (200..=4320).contains(&h)).then_some((w, h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
description = "test"
distribution = "debian"
suite = "bookworm"
kernel = "linux-image-amd64"
packages = ["zenity", "libglib2.0-bin"]
[user]
name = "pincer"
[session]
"#;

    fn error(text: &str) -> String {
        parse("t", text, None).unwrap_err().to_string()
    }

    #[test]
    fn the_bundled_recipes_parse() {
        let names = bundled();
        for want in [
            "debian-12-minimal",
            "debian-12-desktop",
            "ubuntu-24.04-desktop",
        ] {
            assert!(names.iter().any(|n| n == want), "{names:?}");
        }
        for n in names {
            let l = load(&n).unwrap_or_else(|e| panic!("{n}: {e}"));
            // OSWorld's tasks assume its user and password, CRAB's its user `crab`.
            let user = if n.contains("osworld") {
                "user"
            } else if n == "crab" {
                "crab"
            } else {
                "pincer"
            };
            assert_eq!(l.recipe.user.name, user);
        }
    }

    #[test]
    fn debs_from_the_command_line_join_any_recipe_and_its_hash_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let deb = dir.path().join("google-chrome-stable_current_amd64.deb");
        std::fs::write(&deb, "DEB").unwrap();
        let mut l = load("osworld").unwrap();
        assert!(l.local_inputs().is_empty());
        l.add_debs(std::slice::from_ref(&deb)).unwrap();
        assert_eq!(l.local_inputs(), [deb]);
        let e = l
            .add_debs(&[dir.path().join("chrome.zip")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`--deb`") && e.contains("chrome.zip is not a .deb file"),
            "{e}"
        );
    }

    #[test]
    fn defaults_fill_what_a_recipe_leaves_out() {
        let l = parse("t", GOOD, None).unwrap();
        assert_eq!(l.recipe.components, ["main"]);
        assert_eq!(l.recipe.locale, "C.UTF-8");
        assert_eq!(l.screen(), Some((1920, 1080)));
        assert_eq!(l.recipe.session.window_manager, "openbox");
    }

    #[test]
    fn mistakes_are_named_before_anything_is_built() {
        let e = error(&GOOD.replace("packages", "pakages"));
        assert!(e.contains("unknown field `pakages`"), "{e}");
        let e = error(&GOOD.replace("bookworm", "bookwrom"));
        assert!(
            e.contains("'bookwrom' is not a debian suite") && e.contains("trixie"),
            "{e}"
        );
        let e = error(&GOOD.replace("\"zenity\"", "\"Zenity!\""));
        assert!(
            e.contains("`packages` 'Zenity!' is not a package name"),
            "{e}"
        );
        let e = error(&GOOD.replace("name = \"pincer\"", "name = \"root\""));
        assert!(e.contains("user.name"), "{e}");
        let e = error(&format!("{GOOD}screen = \"big\""));
        assert!(e.contains("session.screen"), "{e}");
        let e = error(&format!(
            "{GOOD}[[files]]\npath = \"etc/x\"\ncontent = \"\""
        ));
        assert!(e.contains("files[0].path"), "{e}");
        let e = error(&format!("{GOOD}[[files]]\npath = \"/etc/x\""));
        assert!(e.contains("exactly one of `content` and `source`"), "{e}");
        let e = error(&format!(
            "{GOOD}[[files]]\npath = \"/etc/x\"\ncontent = \"\"\nmode = \"9\""
        ));
        assert!(e.contains("files[0].mode"), "{e}");
        let e = error(&GOOD.replace("distribution = \"debian\"", "distribution = \"arch\""));
        assert!(e.contains("distribution"), "{e}");
        let e = error(&GOOD.replace("suite = \"bookworm\"", "suite = \"noble\""));
        assert!(e.contains("'noble' is not a debian suite"), "{e}");
        let e = error(&GOOD.replace("name = \"pincer\"", "name = \"pincer\"\npassword = \"a:b\""));
        assert!(e.contains("`user.password`"), "{e}");
        let e = error(&format!("pip = [\"pyautogui; rm -rf /\"]\n{GOOD}"));
        assert!(e.contains("`pip[0]`"), "{e}");
        let e = error(&format!("run = [\"true\", \" \"]\n{GOOD}"));
        assert!(e.contains("`run[1]` is empty"), "{e}");
        let e = error(&format!("debs = [\"chrome.deb\"]\n{GOOD}"));
        assert!(
            e.contains("`debs[0]` bundled recipes carry no files"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.asc"), "").unwrap();
        let source = |uri: &str, suite: &str, comps: &str| {
            let text = format!(
                "{GOOD}[[apt_sources]]\nuri = \"{uri}\"\nsuite = \"{suite}\"\ncomponents = [{comps}]\nkey = \"k.asc\"\n"
            );
            parse("t", &text, Some(dir.path().to_owned())).map(|_| ())
        };
        assert!(source("https://x.org/deb/", "stable", "\"main\"").is_ok());
        assert!(source("file:///srv/repo", "./", "").is_ok());
        let e = source("ftp://x.org/deb/", "stable", "\"main\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt_sources[0].uri"), "{e}");
        let e = source("https://x.org/a b/", "stable", "\"main\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without spaces"), "{e}");
        let e = source("https://x.org/deb/", "./", "\"main\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt_sources[0].components"), "{e}");
        let e = source("https://x.org/deb/", "stable", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("apt_sources[0].components"), "{e}");
        std::fs::remove_file(dir.path().join("k.asc")).unwrap();
        let e = source("https://x.org/deb/", "stable", "\"main\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("k.asc is not a file"), "{e}");
        let e = load("debian-13-nothing").unwrap_err().to_string();
        assert!(e.contains("debian-12-minimal"), "{e}");
    }
}

//! What a recipe adds beyond its distribution's archive: apt repositories with their keys,
//! local `.deb` files, pip packages, the user's password and sudo, and the recipe's own
//! commands (`run`). Their files are
//! staged in a private directory under `/tmp` whose path has no space or comma, because
//! apt's source options and mmdebstrap's package list cannot quote one (the cache may live
//! under any home directory); this module writes the source lines, package paths and
//! hooks the build hands to mmdebstrap.

use super::recipe::{AptSource, Loaded};
use super::{ImageError, io};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Where apt keys of added repositories live in the image.
const KEYRINGS: &str = "/etc/apt/keyrings";

/// Where the host's certificate authorities are while pip runs in the image.
const HOST_CA: &str = "/tmp/pincer-host-ca.crt";

/// mmdebstrap's hook that makes `file://` repositories and local `.deb`s visible inside
/// the chroot.
const AUTOMOUNT: &str = "/usr/share/mmdebstrap/hooks/file-mirror-automount";

/// A recipe's additions, staged for one build (removed when dropped).
#[derive(Debug)]
pub(super) struct Staged {
    dir: tempfile::TempDir,
    /// apt source lines to add to the distribution's.
    pub(super) sources: Vec<String>,
    /// Absolute paths of the local `.deb`s, for `--include`.
    pub(super) debs: Vec<String>,
    /// Whether mmdebstrap must make local files visible in the chroot.
    pub(super) automount: bool,
}

impl Staged {
    /// Copies the recipe's keys and `.deb`s into a new private directory.
    pub(super) fn new(loaded: &Loaded) -> Result<Self, ImageError> {
        let r = &loaded.recipe;
        let dir = tempfile::Builder::new()
            .prefix("pincer-image-")
            .tempdir_in("/tmp")
            .map_err(io(
                "creating a directory in /tmp for the recipe's keys and .debs",
            ))?;
        // mmdebstrap may run in a user namespace as another uid: it must read these.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(io(format!("setting the mode of {}", dir.path().display())))?;
        let copy = |from: &Path, name: &str| -> Result<PathBuf, ImageError> {
            let to = dir.path().join(name);
            let from = loaded.resolve(from);
            std::fs::copy(&from, &to).map_err(io(format!("copying {}", from.display())))?;
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644))
                .map_err(io(format!("setting the mode of {}", to.display())))?;
            Ok(to)
        };
        let mut sources = Vec::new();
        for (i, src) in r.apt_sources.iter().enumerate() {
            let key = copy(&src.key, &key_name(i, src))?;
            let mut line = format!(
                "deb [signed-by={}] {} {}",
                key.display(),
                src.uri,
                src.suite
            );
            for c in &src.components {
                line.push(' ');
                line.push_str(c);
            }
            sources.push(line);
        }
        let mut debs = Vec::new();
        for (i, deb) in r.debs.iter().enumerate() {
            // The name apt shows in its errors, made plain.
            let stem: String = deb
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("package")
                .chars()
                .map(|c| match c {
                    'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' | '+' => c,
                    _ => '_',
                })
                .collect();
            let to = copy(deb, &format!("{i}-{stem}.deb"))?;
            debs.push(to.display().to_string());
        }
        let automount =
            !debs.is_empty() || r.apt_sources.iter().any(|s| s.uri.starts_with("file:"));
        Ok(Self {
            dir,
            sources,
            debs,
            automount,
        })
    }

    /// mmdebstrap options for the additions: the hook directory for local files.
    pub(super) fn options(&self) -> Vec<String> {
        match self.automount {
            true => vec![format!("--hook-dir={AUTOMOUNT}")],
            false => Vec::new(),
        }
    }

    /// Customize hooks, run after the user exists: the keys go to `/etc/apt/keyrings` and
    /// the image's sources point there; the user's password and sudo; pip packages; then
    /// the recipe's `run` commands, each in its own `sh -e` inside the image.
    pub(super) fn hooks(&self, loaded: &Loaded) -> Vec<String> {
        let r = &loaded.recipe;
        let user = &r.user.name;
        let mut hooks = Vec::new();
        if !r.apt_sources.is_empty() {
            hooks.push(format!("mkdir -p \"$1\"{KEYRINGS}"));
            for (i, src) in r.apt_sources.iter().enumerate() {
                let name = key_name(i, src);
                hooks.push(format!(
                    "install -m 0644 {}/{name} \"$1\"{KEYRINGS}/{name}",
                    self.dir.path().display()
                ));
            }
            hooks.push(format!(
                "sed -i 's|signed-by={}/|signed-by={KEYRINGS}/|' \"$1\"/etc/apt/sources.list",
                self.dir.path().display()
            ));
        }
        if let Some(pw) = &r.user.password {
            hooks.push(format!(
                "printf '%s\\n' {} | chroot \"$1\" chpasswd",
                quote(&format!("{user}:{pw}"))
            ));
        }
        if r.user.sudo {
            hooks.push(format!("chroot \"$1\" usermod -aG sudo {user}"));
        }
        if !r.pip.is_empty() {
            // pip downloads as the host does, trusting the host's certificate authorities
            // (a proxy's own, as apt's sources are the host's); the image keeps its own.
            // Options go as variables, which a pip that does not know one ignores (Ubuntu
            // 22.04's 22.0 has no --break-system-packages, nor needs it).
            let specs: Vec<String> = r.pip.iter().map(|s| quote(s)).collect();
            hooks.push(format!(
                "root=$1; ca=${{PIP_CERT:-${{SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}}; set --; \
                 if [ -f \"$ca\" ]; then cp \"$ca\" \"$root\"{HOST_CA} && set -- PIP_CERT={HOST_CA} REQUESTS_CA_BUNDLE={HOST_CA} SSL_CERT_FILE={HOST_CA}; fi; \
                 chroot \"$root\" env -u PIP_FIND_LINKS -u PIP_CERT -u REQUESTS_CA_BUNDLE -u SSL_CERT_FILE \"$@\" PIP_NO_CACHE_DIR=1 PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install {}; \
                 rc=$?; rm -f \"$root\"{HOST_CA}; exit $rc",
                specs.join(" ")
            ));
        }
        for command in &r.run {
            hooks.push(format!("chroot \"$1\" /bin/sh -ec {}", quote(command)));
        }
        hooks
    }
}

/// The file name of the `i`th repository's key, with its own extension (`.asc` or `.gpg`).
fn key_name(i: usize, src: &AptSource) -> String {
    let ext = src
        .key
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("gpg");
    format!("pincer-{i}.{ext}")
}

/// `s` quoted for the shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::recipe::parse;

    #[test]
    fn additions_become_sources_paths_and_hooks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vendor key.asc"), "KEY").unwrap();
        std::fs::create_dir(dir.path().join("débs")).unwrap();
        std::fs::write(dir.path().join("débs/code 1,2_amd64.deb"), "DEB").unwrap();
        let text = r#"
description = "t"
distribution = "debian"
suite = "bookworm"
kernel = "linux-image-amd64"
debs = ["débs/code 1,2_amd64.deb"]
pip = ["pyautogui==0.9.54"]
run = ["glib-compile-schemas /usr/share/glib-2.0/schemas", "echo 'it''s' > /etc/x"]
[[apt_sources]]
uri = "https://dl.example.com/deb/"
suite = "stable"
components = ["main", "contrib"]
key = "vendor key.asc"
[user]
name = "user"
password = "pass word'$"
sudo = true
[session]
"#;
        let loaded = parse("t", text, Some(dir.path().to_owned())).unwrap();
        let staged = Staged::new(&loaded).unwrap();
        let at = staged.dir.path().display().to_string();
        assert!(!at.contains([' ', ',']), "{at}");
        assert_eq!(
            staged.sources,
            [format!(
                "deb [signed-by={at}/pincer-0.asc] https://dl.example.com/deb/ stable main contrib"
            )]
        );
        assert_eq!(staged.debs, [format!("{at}/0-code_1_2_amd64.deb")]);
        assert_eq!(std::fs::read(&staged.debs[0]).unwrap(), b"DEB");
        assert!(staged.options()[0].ends_with("file-mirror-automount"));
        let hooks = staged.hooks(&loaded).join("\n");
        assert!(
            hooks.contains(&format!(
                "sed -i 's|signed-by={at}/|signed-by=/etc/apt/keyrings/|'"
            )),
            "{hooks}"
        );
        assert!(
            hooks.contains("printf '%s\\n' 'user:pass word'\\''$' | chroot \"$1\" chpasswd"),
            "{hooks}"
        );
        assert!(hooks.contains("usermod -aG sudo user"), "{hooks}");
        assert!(
            hooks.contains("pip install") && hooks.contains("'pyautogui==0.9.54'"),
            "{hooks}"
        );
        // The recipe's commands come last, in order, quoted whole.
        let all = staged.hooks(&loaded);
        assert_eq!(
            all[all.len() - 2..],
            [
                "chroot \"$1\" /bin/sh -ec 'glib-compile-schemas /usr/share/glib-2.0/schemas'",
                "chroot \"$1\" /bin/sh -ec 'echo '\\''it'\\'''\\''s'\\'' > /etc/x'",
            ]
        );
        // The staged files go with the build.
        let kept = staged.dir.path().to_owned();
        drop(staged);
        assert!(!kept.exists());
    }
}

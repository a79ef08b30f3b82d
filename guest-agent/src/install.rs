//! `pincer-agent install` and `uninstall`: the agent as a systemd user service started with
//! the person's graphical session on a physical machine — the same unit every VM image
//! runs (`pincer_shared::service`). The binary is copied to a place of its own, so the
//! service does not depend on where the installer was run from, and an XDG autostart entry
//! starts the service in desktops whose sessions do not reach `graphical-session.target`.
//! On GNOME, pincer's Shell extension (windows on Wayland) goes into the person's data
//! directory and into GNOME's list of enabled extensions; GNOME Shell loads it at the next
//! login.

use anyhow::Context as _;
use pincer_shared::gnome_extension;
use pincer_shared::identity::{Identity, Token};
use pincer_shared::service::{AGENT_UNIT, SESSION_TARGET, agent_unit};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to install.
#[derive(Debug, Clone)]
pub(crate) struct Install {
    /// The agent's listening address.
    pub(crate) listen: String,
    /// Its name, if not the hostname.
    pub(crate) name: Option<String>,
    /// `--read-only` and its read roots and variables.
    pub(crate) read_only: bool,
    pub(crate) read_roots: Vec<PathBuf>,
    pub(crate) read_envs: Vec<String>,
    /// Start it now (when a user manager runs).
    pub(crate) start: bool,
}

/// Where things go, from the environment (`HOME`, `XDG_CONFIG_HOME`, `XDG_DATA_HOME`).
#[derive(Debug, Clone)]
pub(crate) struct Places {
    /// `~/.config/systemd/user`.
    pub(crate) units: PathBuf,
    /// `~/.config/autostart`.
    pub(crate) autostart: PathBuf,
    /// `~/.local/lib/pincer`: the installed binary.
    pub(crate) lib: PathBuf,
    /// `~/.local/share/gnome-shell/extensions`.
    pub(crate) extensions: PathBuf,
    /// Whether to change GNOME's settings (the enabled extensions): not in unit tests.
    pub(crate) gnome_settings: bool,
}

impl Places {
    pub(crate) fn from_env() -> Self {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
        let config =
            std::env::var_os("XDG_CONFIG_HOME").map_or_else(|| home.join(".config"), PathBuf::from);
        let data = std::env::var_os("XDG_DATA_HOME")
            .map_or_else(|| home.join(".local/share"), PathBuf::from);
        Self {
            units: config.join("systemd/user"),
            autostart: config.join("autostart"),
            lib: home.join(".local/lib/pincer"),
            extensions: data.join("gnome-shell/extensions"),
            gnome_settings: true,
        }
    }

    fn extension(&self) -> PathBuf {
        self.extensions.join(gnome_extension::UUID)
    }

    fn unit(&self) -> PathBuf {
        self.units.join(AGENT_UNIT)
    }

    fn wants_link(&self) -> PathBuf {
        self.units
            .join(format!("{SESSION_TARGET}.wants"))
            .join(AGENT_UNIT)
    }

    fn desktop_entry(&self) -> PathBuf {
        self.autostart.join("pincer-agent.desktop")
    }

    fn binary(&self) -> PathBuf {
        self.lib.join("pincer-agent")
    }
}

/// The agent's arguments in the unit.
fn args(i: &Install) -> Vec<String> {
    let mut a = vec!["--listen".to_owned(), i.listen.clone()];
    if let Some(n) = &i.name {
        a.extend(["--name".into(), n.clone()]);
    }
    if i.read_only {
        a.push("--read-only".into());
        for r in &i.read_roots {
            a.extend(["--read-root".into(), r.display().to_string()]);
        }
        for e in &i.read_envs {
            a.extend(["--read-env".into(), e.clone()]);
        }
    }
    a
}

/// `systemctl --user ARGS`; `None` when no user manager can be reached.
fn systemctl(args: &[&str]) -> Option<std::process::Output> {
    Command::new("systemctl")
        .arg("--user")
        .args(args)
        .output()
        .ok()
        .filter(|o| {
            let err = String::from_utf8_lossy(&o.stderr);
            !err.contains("Failed to connect to bus") && !err.contains("No medium found")
        })
}

/// Installs (or reinstalls) the service; returns what to tell the person.
pub(crate) fn install(
    i: &Install,
    places: &Places,
    state_dir: &Path,
    hostname: &str,
) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("locating this pincer-agent")?;
    std::fs::create_dir_all(&places.lib)
        .with_context(|| format!("creating {}", places.lib.display()))?;
    let installed = places.binary();
    if exe.canonicalize().ok() != installed.canonicalize().ok() {
        // Through a new file and a rename: a running agent keeps its old binary.
        let tmp = installed.with_extension("new");
        std::fs::copy(&exe, &tmp).with_context(|| format!("copying to {}", tmp.display()))?;
        std::fs::rename(&tmp, &installed)
            .with_context(|| format!("installing {}", installed.display()))?;
    }
    let unit = agent_unit(&installed.display().to_string(), &args(i));
    for dir in [&places.units, &places.autostart] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(places.unit(), unit)
        .with_context(|| format!("writing {}", places.unit().display()))?;
    // What `systemctl --user enable` does, done directly so that it works without a
    // running user manager too.
    let link = places.wants_link();
    if let Some(d) = link.parent() {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(places.unit(), &link)
        .with_context(|| format!("linking {}", link.display()))?;
    std::fs::write(
        places.desktop_entry(),
        format!(
            "[Desktop Entry]\nType=Application\nName=pincer agent\nComment=Starts the pincer agent's user service with sessions that do not start {SESSION_TARGET}\nExec=systemctl --user start {AGENT_UNIT}\nNoDisplay=true\nX-GNOME-Autostart-enabled=true\n"
        ),
    )
    .with_context(|| format!("writing {}", places.desktop_entry().display()))?;

    let extension = install_extension(places)?;

    let name = i.name.clone().unwrap_or_else(|| hostname.to_owned());
    let (id, _) = Identity::load_or_create(state_dir, &name)
        .with_context(|| format!("state directory {}", state_dir.display()))?;
    let token_file = state_dir.join("token");
    Token::load_or_create(&token_file)?;
    let started = if !i.start {
        "not started (--no-start): it starts with your next graphical session".to_owned()
    } else if systemctl(&["daemon-reload"]).is_some_and(|o| o.status.success()) {
        match systemctl(&["restart", AGENT_UNIT]) {
            Some(o) if o.status.success() => "started now, and with every graphical session".into(),
            _ => "it starts with your next graphical session (starting it now failed: is a graphical session running? `systemctl --user status pincer-agent`)".into(),
        }
    } else {
        "no systemd user manager answers here: it starts with your next graphical session".into()
    };
    let port = i.listen.rsplit(':').next().unwrap_or("7000");
    Ok(format!(
        "installed {unit} for {user}: {exe} {args}\n  {started}\n{extension}\nOn the host, copy the token file and register this machine:\n  scp {host}:{token} ./{name}.token\n  pincer env add {name} {host}:{port} --fingerprint {fp} --token-file ./{name}.token\n",
        unit = places.unit().display(),
        user = std::env::var("USER").unwrap_or_default(),
        exe = installed.display(),
        args = args(i).join(" "),
        host = hostname,
        token = token_file.display(),
        fp = id.fingerprint(),
    ))
}

/// Writes pincer's GNOME Shell extension and adds it to GNOME's enabled extensions, where
/// GNOME's settings exist; returns a line for the person.
fn install_extension(places: &Places) -> anyhow::Result<String> {
    let dir = places.extension();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (file, text) in gnome_extension::FILES {
        std::fs::write(dir.join(file), text)
            .with_context(|| format!("writing {}", dir.join(file).display()))?;
    }
    let enabled = if places.gnome_settings {
        set_enabled(true)
    } else {
        Err("not asked to".to_owned())
    };
    Ok(match enabled {
        Ok(()) => format!(
            "  GNOME Shell extension {} installed in {} and enabled: on GNOME Wayland, \
             windows work after your next login\n",
            gnome_extension::UUID,
            dir.display()
        ),
        Err(why) => format!(
            "  GNOME Shell extension written to {} but not enabled ({why}); on GNOME, run \
             `gnome-extensions enable {}` and log in again\n",
            dir.display(),
            gnome_extension::UUID
        ),
    })
}

/// Adds pincer's extension to (or removes it from) GNOME's enabled extensions.
fn set_enabled(enabled: bool) -> Result<(), String> {
    let gsettings = |args: &[&str]| {
        Command::new("gsettings")
            .args(args)
            .output()
            .map_err(|e| format!("gsettings: {e}"))
            .and_then(|o| {
                if o.status.success() {
                    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
                } else {
                    Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
                }
            })
    };
    let now = gsettings(&["get", "org.gnome.shell", "enabled-extensions"])?;
    let next = gnome_extension::enabled_with(&now, gnome_extension::UUID, enabled);
    gsettings(&["set", "org.gnome.shell", "enabled-extensions", &next]).map(drop)
}

/// Removes the service, its autostart entry, the installed binary and the GNOME Shell
/// extension; the identity stays (a reinstall keeps the fingerprint hosts have pinned).
pub(crate) fn uninstall(places: &Places) -> anyhow::Result<String> {
    let existed = places.unit().exists();
    if existed {
        let _ = systemctl(&["stop", AGENT_UNIT]);
    }
    for f in [
        places.wants_link(),
        places.unit(),
        places.desktop_entry(),
        places.binary(),
    ] {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", f.display())),
        }
    }
    if places.extension().exists() {
        if places.gnome_settings {
            let _ = set_enabled(false);
        }
        std::fs::remove_dir_all(places.extension())
            .with_context(|| format!("removing {}", places.extension().display()))?;
    }
    let _ = systemctl(&["daemon-reload"]);
    Ok(if existed {
        format!(
            "removed the pincer agent service ({})",
            places.unit().display()
        )
    } else {
        format!(
            "no pincer agent service was installed ({})",
            places.unit().display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_writes_the_session_unit_and_uninstall_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let places = Places {
            units: dir.path().join("config/systemd/user"),
            autostart: dir.path().join("config/autostart"),
            lib: dir.path().join("lib"),
            extensions: dir.path().join("share/gnome-shell/extensions"),
            gnome_settings: false,
        };
        let state = dir.path().join("state");
        let i = Install {
            listen: "0.0.0.0:7100".into(),
            name: Some("desk".into()),
            read_only: true,
            read_roots: vec!["/home/me/Documents".into()],
            read_envs: vec![],
            start: false,
        };
        let said = install(&i, &places, &state, "box").unwrap();
        let unit = std::fs::read_to_string(places.unit()).unwrap();
        let exe = places.binary().display().to_string();
        assert!(
            unit.contains(&format!(
                "ExecStart={exe} --listen 0.0.0.0:7100 --name desk --read-only --read-root /home/me/Documents"
            )),
            "{unit}"
        );
        assert_eq!(
            std::fs::read_link(places.wants_link()).unwrap(),
            places.unit()
        );
        assert!(places.binary().is_file());
        assert!(state.join("token").is_file());
        let extension = places.extension().join("extension.js");
        assert!(
            std::fs::read_to_string(&extension)
                .unwrap()
                .contains(gnome_extension::BUS_NAME),
            "{}",
            extension.display()
        );
        assert!(
            said.contains("pincer env add desk box:7100 --fingerprint sha256:"),
            "{said}"
        );
        // Installing again replaces it in place.
        install(&i, &places, &state, "box").unwrap();
        let said = uninstall(&places).unwrap();
        assert!(said.starts_with("removed"), "{said}");
        for f in [
            places.unit(),
            places.wants_link(),
            places.desktop_entry(),
            places.binary(),
            places.extension(),
        ] {
            assert!(!f.exists(), "{}", f.display());
        }
        // The identity stays for the next install.
        assert!(state.join("token").is_file());
        assert!(uninstall(&places).unwrap().starts_with("no pincer agent"));
    }
}

//! Golden states: an image's first boot, saved once the agent answers and the desktop is
//! idle. It is the image's disk as that boot left it (a qcow2 overlay, read-only from then
//! on), the guest's RAM in a file, the rest of the machine state (devices, CPU) as a QEMU
//! migration stream, and the agent's disk with the identity (certificate, key, token) made
//! for it. Every `vm up` and every reset restores it into a fresh overlay, so each task
//! starts from the same bytes. A golden state belongs to one agent build, memory size, CPU
//! count and accelerator, the things a restore cannot change.

use super::qemu::{Accel, Machine, Ram};
use super::qmp::Qmp;
use super::{VmError, io};
use crate::env::{Deadlines, EnvSpec, Environment, Transport};
use crate::image::build::file_sha256;
use crate::image::{FileLock, Image, owner_alive};
use pincer_shared::identity::{Identity, Token};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What a golden directory's `golden.json` says.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoldenInfo {
    /// The agent's certificate fingerprint.
    pub fingerprint: String,
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The accelerator it was made under.
    pub accel: Accel,
    /// The agent build's SHA-256.
    pub agent_sha256: String,
    /// Seconds from starting QEMU to the agent answering on the first boot.
    pub boot_seconds: f64,
    /// Seconds to save the state.
    pub save_seconds: f64,
}

/// The image's disk as the golden disk's backing file: golden states live in
/// `<image>/golden/<key>/` (and are made in `<image>/golden/.new-*/`), the disk in
/// `<image>/disk.qcow2`.
const GOLDEN_TO_IMAGE_DISK: &str = "../../disk.qcow2";

/// A golden state on disk.
#[derive(Debug, Clone)]
pub struct Golden {
    /// Its directory.
    pub dir: PathBuf,
    /// Its record.
    pub info: GoldenInfo,
}

impl Golden {
    /// The disk as the first boot left it.
    pub fn disk(&self) -> PathBuf {
        self.dir.join("disk.qcow2")
    }

    /// Guest RAM.
    pub fn ram(&self) -> PathBuf {
        self.dir.join("memory.ram")
    }

    /// The machine state (QEMU's migration stream, RAM left out).
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// The agent's disk.
    pub fn agent_disk(&self) -> PathBuf {
        self.dir.join("agent.img")
    }

    /// The UEFI variable store as the first boot left it (imported UEFI disks).
    pub fn efi_vars(&self) -> PathBuf {
        self.dir.join("efivars.fd")
    }

    /// The token the agent expects (the envs file points here).
    pub fn token_file(&self) -> PathBuf {
        self.dir.join("identity/token")
    }
}

/// What a golden state is made for.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The accelerator.
    pub accel: Accel,
    /// The agent binary.
    pub agent: PathBuf,
}

/// Finds the golden state of `image` for `spec`, making it first (a cold boot: seconds
/// under KVM, about a minute under TCG) if there is none.
pub async fn ensure(
    image: &Image,
    spec: &Spec,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Golden, VmError> {
    let agent_sha = file_sha256(&spec.agent)?;
    // "r": the disk's backing path is relative (golden states made before used absolute
    // ones, which break when the cache is mounted elsewhere).
    let key = format!(
        "m{}-c{}-{}-{}-r",
        spec.memory_mib,
        spec.cpus,
        spec.accel,
        &agent_sha[..16]
    );
    let root = image.golden_dir();
    let dir = root.join(&key);
    std::fs::create_dir_all(&root).map_err(io(format!("creating {}", root.display())))?;
    let _lock = FileLock::take(&root.join(format!(".lock-{key}")))?;
    if let Some(g) = open(&dir) {
        return Ok(g);
    }
    prune(&root);
    let scratch = root.join(format!(".new-{key}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let made = make(image, spec, &agent_sha, &scratch, progress).await;
    match made {
        Ok(()) => {
            std::fs::rename(&scratch, &dir).map_err(io(format!("moving {}", dir.display())))?;
            open(&dir).ok_or_else(|| VmError::Golden {
                image: image.manifest.name.clone(),
                why: "the saved state cannot be read back".into(),
                log: String::new(),
            })
        }
        Err(e) => {
            super::qemu::remove_sockets(&scratch);
            let _ = std::fs::remove_dir_all(&scratch);
            Err(e)
        }
    }
}

/// Golden states unused this long are removed when a new one is made: each agent build
/// makes its own, and old ones would pile up (hundreds of MiB each).
const UNUSED_FOR: Duration = Duration::from_secs(24 * 3600);

/// Removes golden states no VM has started from for [`UNUSED_FOR`], unfinished ones of
/// dead builds, and the lock files (`.lock-KEY`) of states that are gone and that no build
/// holds.
fn prune(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let (locks, states): (Vec<_>, Vec<_>) = entries
        .filter_map(Result::ok)
        .partition(|e| e.file_name().to_string_lossy().starts_with(".lock-"));
    for e in states {
        let used = std::fs::metadata(e.path().join("golden.json"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        // Unfinished ones of dead builds (`.new-*`) have no record at all.
        let stale = match used {
            Some(age) => age > UNUSED_FOR,
            None => {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(".new-") && !owner_alive(&name)
            }
        };
        if stale {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    for e in locks {
        let name = e.file_name().to_string_lossy().into_owned();
        let key = &name[".lock-".len()..];
        if !root.join(key).exists() {
            FileLock::remove_if_free(&e.path());
        }
    }
}

/// Marks a golden state as used now (restores keep it from being pruned), and gives its
/// RAM file back the write permission QEMU needs to open it (golden states made before
/// this version made it read-only; see [`make`]).
pub fn touch(g: &Golden) {
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(m) = std::fs::metadata(g.ram())
            && m.permissions().mode() & 0o200 == 0
        {
            let _ = std::fs::set_permissions(g.ram(), std::fs::Permissions::from_mode(0o644));
        }
    }
    let f = g.dir.join("golden.json");
    if let Ok(file) = std::fs::File::options().append(true).open(&f) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// The golden state in `dir`, if it is complete.
pub fn open(dir: &Path) -> Option<Golden> {
    let text = std::fs::read_to_string(dir.join("golden.json")).ok()?;
    Some(Golden {
        dir: dir.to_owned(),
        info: serde_json::from_str(&text).ok()?,
    })
}

/// The agent's disk: an ext4 file system holding the agent binary and its identity, made
/// without mounting anything.
fn agent_disk(agent: &Path, identity: &Path, out: &Path) -> Result<(), VmError> {
    let tree = out.with_extension("tree");
    let state = tree.join("state");
    std::fs::create_dir_all(&state).map_err(io(format!("creating {}", state.display())))?;
    std::fs::copy(agent, tree.join("pincer-agent"))
        .map_err(io(format!("copying {}", agent.display())))?;
    for e in std::fs::read_dir(identity).map_err(io("reading the identity"))? {
        let e = e.map_err(io("reading the identity"))?;
        std::fs::copy(e.path(), state.join(e.file_name())).map_err(io("copying the identity"))?;
    }
    let bytes = std::fs::metadata(agent).map_or(0, |m| m.len());
    // Room for the file system's own structures.
    let mib = (bytes / (1 << 20)) * 5 / 4 + 16;
    let out_status = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "pincer-agent", "-O", "^has_journal", "-d"])
        .arg(&tree)
        .arg(out)
        .arg(format!("{mib}M"))
        .output()
        .map_err(io("running mkfs.ext4 (install e2fsprogs)"))?;
    let _ = std::fs::remove_dir_all(&tree);
    if !out_status.status.success() {
        return Err(VmError::Golden {
            image: String::new(),
            why: format!(
                "mkfs.ext4 of the agent's disk failed: {}",
                String::from_utf8_lossy(&out_status.stderr).trim()
            ),
            log: String::new(),
        });
    }
    Ok(())
}

/// The first boot: start the image on a fresh overlay, wait for the agent and an idle
/// desktop, save the state, stop.
async fn make(
    image: &Image,
    spec: &Spec,
    agent_sha: &str,
    dir: &Path,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), VmError> {
    let name = image.manifest.name.clone();
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let identity = dir.join("identity");
    let (id, _) =
        Identity::load_or_create(&identity, &format!("pincer-vm-{name}")).map_err(|e| {
            VmError::Golden {
                image: name.clone(),
                why: e.to_string(),
                log: String::new(),
            }
        })?;
    let token_file = identity.join("token");
    let token = Token::load_or_create(&token_file).map_err(|e| VmError::Golden {
        image: name.clone(),
        why: e.to_string(),
        log: String::new(),
    })?;
    let golden = Golden {
        dir: dir.to_owned(),
        info: GoldenInfo {
            fingerprint: id.fingerprint().to_string(),
            memory_mib: spec.memory_mib,
            cpus: spec.cpus,
            accel: spec.accel,
            agent_sha256: agent_sha.to_owned(),
            boot_seconds: 0.0,
            save_seconds: 0.0,
        },
    };
    agent_disk(&spec.agent, &identity, &golden.agent_disk())?;
    // The image's disk by a path relative to the golden disk (qemu resolves it from the
    // overlay's directory), so that the cache stays usable wherever it is mounted: a shared
    // volume is /runs/.pincer/images in a pod and elsewhere on the machine that built it.
    super::overlay(Path::new(GOLDEN_TO_IMAGE_DISK), &golden.disk())?;
    if image.manifest.firmware == crate::image::Firmware::Uefi {
        super::writable_copy(&image.efi_vars(), &golden.efi_vars())?;
    }
    let port = super::free_port()?;
    let machine = Machine {
        name: format!("golden-{name}"),
        memory_mib: spec.memory_mib,
        cpus: spec.cpus,
        accel: spec.accel,
        boot: super::boot_of(image, golden.efi_vars()),
        disk: golden.disk(),
        agent_disk: golden.agent_disk(),
        ram: Ram {
            path: golden.ram(),
            shared: true,
        },
        port,
        dir: dir.to_owned(),
        incoming: false,
    };
    progress(&format!(
        "first boot of {name} for its golden state ({}; {} MiB, {} CPUs): {}",
        spec.accel,
        spec.memory_mib,
        spec.cpus,
        if spec.accel == Accel::Tcg {
            "about a minute under TCG"
        } else {
            "a few seconds"
        }
    ));
    let started = Instant::now();
    // The first boot is this process's alone, whatever the VM's: if the process dies
    // mid-boot (a minute under TCG), its QEMU and scratch directory go with it.
    super::supervise::start(dir, None)?;
    let mut child = machine
        .spawn()
        .map_err(io("starting qemu-system-x86_64 (install qemu-system-x86)"))?;
    let fail = |why: String, machine: &Machine| VmError::Golden {
        image: name.clone(),
        why,
        log: super::tail_of(&machine.log(), &machine.serial_log()),
    };
    let env_spec = EnvSpec {
        name: format!("golden-{name}"),
        addr: ([127, 0, 0, 1], port).into(),
        fingerprint: Some(id.fingerprint()),
        token: token.clone(),
        transport: Transport::Tcp,
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let env = loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(fail(format!("QEMU exited ({status})"), &machine));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(fail(
                "the agent did not answer within 10 minutes".into(),
                &machine,
            ));
        }
        let quick = Deadlines {
            connect: Duration::from_secs(2),
            ..Deadlines::default()
        };
        if let Ok(env) = Environment::connect(env_spec.clone(), quick).await
            && env.ping().await.is_ok()
        {
            break env;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let boot = started.elapsed().as_secs_f64();
    progress(&format!(
        "  the agent answers after {boot:.1} s; waiting for the desktop to settle"
    ));
    // The accessibility registry starts with its first client: in the snapshot it runs.
    let _ = env
        .tree(pincer_shared::observe::TreeRequest::default())
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.close();
    drop(env);
    crate::env::finish_closing().await;

    let t = Instant::now();
    let saved = save(&machine, &golden.state()).await;
    let _ = child.kill();
    let _ = child.wait();
    saved.map_err(|e| fail(format!("saving the state: {e}"), &machine))?;
    let save_s = t.elapsed().as_secs_f64();
    super::qemu::remove_sockets(dir);
    for f in ["qemu.log", "serial.log", super::supervise::LOG] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    // Read-only by convention from now on: every VM of the image builds on these. Not the
    // RAM file: QEMU 7.2 opens a memory backend's file for writing even when it maps it
    // privately (share=off), so a mode of 0444 stops every VM of a user who is not root.
    for f in [
        golden.disk(),
        golden.state(),
        golden.agent_disk(),
        golden.efi_vars(),
    ] {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444));
    }
    let info = GoldenInfo {
        boot_seconds: boot,
        save_seconds: save_s,
        ..golden.info
    };
    std::fs::write(
        dir.join("golden.json"),
        serde_json::to_string_pretty(&info).unwrap_or_default(),
    )
    .map_err(io("writing golden.json"))?;
    progress(&format!("  golden state saved in {save_s:.2} s"));
    Ok(())
}

/// Saves the machine state, leaving the RAM in its file (`x-ignore-shared`).
async fn save(machine: &Machine, state: &Path) -> Result<(), super::qmp::QmpError> {
    let mut q = Qmp::connect(&machine.qmp_socket()).await?;
    q.ignore_shared_ram().await?;
    // QEMU limits migrations to 128 MiB/s by default, even of a stopped machine.
    q.execute(
        "migrate-set-parameters",
        json!({"max-bandwidth": 100u64 << 30}),
    )
    .await?;
    q.execute("stop", json!({})).await?;
    q.execute(
        "migrate",
        json!({"uri": format!("exec:cat > {}", super::sh_quote(state))}),
    )
    .await?;
    q.wait_migration(Duration::from_secs(120)).await?;
    let _ = q.execute("quit", json!({})).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    #[test]
    fn the_golden_disk_finds_the_image_disk_from_where_it_lies() {
        let image = Path::new("/cache/debian-12-minimal");
        for golden in [
            image.join("golden/m1024-c2-tcg-0123456789abcdef-r"),
            image.join("golden/.new-m1024-c2-tcg-0123456789abcdef-r-42"),
        ] {
            let mut at = golden.clone();
            for c in Path::new(GOLDEN_TO_IMAGE_DISK).components() {
                match c {
                    Component::ParentDir => {
                        at.pop();
                    }
                    other => at.push(other),
                }
            }
            assert_eq!(at, image.join("disk.qcow2"), "from {}", golden.display());
        }
    }

    /// A lock file goes with its golden state, unless a build holds it; the states and
    /// unfinished builds are pruned as before.
    #[test]
    fn lock_files_of_gone_states_are_pruned_unless_held() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let fresh = root.join("m1024-fresh");
        std::fs::create_dir(&fresh).unwrap();
        std::fs::write(fresh.join("golden.json"), "{}").unwrap();
        let dead_build = root.join(".new-m1024-gone-999999999");
        std::fs::create_dir(&dead_build).unwrap();
        for key in [
            "m1024-fresh",
            "m1024-gone",
            "m1024-held",
            ".new-m1024-gone-999999999",
        ] {
            std::fs::write(root.join(format!(".lock-{key}")), "").unwrap();
        }
        let _held = FileLock::take(&root.join(".lock-m1024-held")).unwrap();
        prune(root);
        let mut left: Vec<String> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [".lock-m1024-fresh", ".lock-m1024-held", "m1024-fresh"]
        );
    }
}

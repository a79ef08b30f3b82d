//! `pincer image import`: a user's own bootable disk (qcow2 or raw; BIOS or UEFI) as a
//! pincer image. The disk is copied into the cache as qcow2 (the user's file is only read);
//! libguestfs, which edits a disk through a small appliance VM of its own (no root, no loop
//! mounts), puts pincer's guest services in: the root services that take the agent and
//! the clock from the host, and the agent's systemd user unit, which the disk's own
//! graphical session starts. VMs of the image boot through the disk's own bootloader; golden
//! states and reset work as for built images.

use super::build::{GUEST, Scratch, agent_args, hex, need_tool, run_step, sweep};
use super::{Cache, FileLock, Firmware, Image, ImageError, Manifest, Sizes, io};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// OVMF as Debian and Ubuntu ship it (package `ovmf`): the code, and the variable store an
/// imported UEFI disk starts from (copied into the image).
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
/// See [`OVMF_CODE`].
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// The script that adapts and enables the guest files inside the disk.
const INSTALL: &str = include_str!("../../../images/import/install.sh");

/// What to import.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The user's disk.
    pub disk: PathBuf,
    /// The image's name.
    pub name: String,
    /// The user whose desktop session the agent drives (default: the disk's first user,
    /// uid 1000).
    pub user: Option<String>,
    /// The firmware; `None` reads it from the disk's partition table.
    pub firmware: Option<Firmware>,
    /// Run libguestfs's appliance under TCG, as pincer's VMs run where there is no usable
    /// KVM (`accel::probe_accel`): a `/dev/kvm` without hardware virtualization (nested,
    /// para-virtualized) aborts its QEMU.
    pub tcg: bool,
}

/// Why a disk cannot be imported (the rest are [`ImageError`]'s other kinds).
fn refused(disk: &Path, why: impl Into<String>) -> ImageError {
    ImageError::Import {
        disk: disk.to_owned(),
        why: why.into(),
    }
}

/// Imports `opts.disk` into `cache` as image `opts.name`.
pub async fn import(
    cache: &Cache,
    opts: &ImportOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Image, ImageError> {
    let started = Instant::now();
    let name = &opts.name;
    let disk = &opts.disk;
    check_name(name)?;
    if let Some(u) = &opts.user
        && !login_name(u)
    {
        return Err(refused(
            disk,
            format!("'{u}' is not a login name: --user takes the name of a user on the disk"),
        ));
    }
    need_tool("qemu-img", "qemu-utils")?;
    need_tool("guestfish", "libguestfs-tools")?;
    let info = disk_info(disk).await?;
    std::fs::create_dir_all(cache.dir()).map_err(io(format!(
        "creating the image cache {}",
        cache.dir().display()
    )))?;
    let _lock = FileLock::take(&cache.dir().join(format!(".lock-{name}")))?;
    sweep(cache.dir());
    if cache.get(name).is_ok() {
        return Err(ImageError::Taken { name: name.clone() });
    }
    let work = cache
        .dir()
        .join(format!(".import-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(io(format!("creating {}", work.display())))?;
    let scratch = Scratch::new(work.clone());
    let copy = work.join("disk.qcow2");
    // Its partition table first: what is no bootable disk is refused before it is copied.
    let firmware = match opts.firmware {
        Some(f) => f,
        None => {
            let head = work.join("head.raw");
            run_step(
                "reading the partition table (qemu-img dd)",
                "qemu-img",
                &[
                    "dd".into(),
                    "-f".into(),
                    info.format.clone(),
                    "-O".into(),
                    "raw".into(),
                    "bs=512".into(),
                    "count=34".into(),
                    format!("if={}", disk.display()),
                    format!("of={}", head.display()),
                ],
                &[],
                progress,
            )
            .await?;
            let bytes = std::fs::read(&head).map_err(io(format!("reading {}", head.display())))?;
            firmware_of(&bytes).map_err(|why| refused(disk, why))?
        }
    };
    progress(&format!(
        "copying {} ({}, {} virtual) into the cache as qcow2",
        disk.display(),
        info.format,
        super::human_bytes(info.virtual_size)
    ));
    let t = Instant::now();
    run_step(
        "copying the disk (qemu-img convert)",
        "qemu-img",
        &[
            "convert".into(),
            "-f".into(),
            info.format.clone(),
            "-O".into(),
            "qcow2".into(),
            disk.display().to_string(),
            copy.display().to_string(),
        ],
        &[],
        progress,
    )
    .await?;
    progress(&format!("  copied in {:.1} s", t.elapsed().as_secs_f64()));

    if firmware == Firmware::Uefi {
        for f in [OVMF_CODE, OVMF_VARS] {
            if !Path::new(f).exists() {
                return Err(ImageError::MissingTool {
                    tool: f.into(),
                    package: "ovmf".into(),
                });
            }
        }
        std::fs::copy(OVMF_VARS, work.join("efivars.fd"))
            .map_err(io(format!("copying {OVMF_VARS}")))?;
    }
    progress(&format!(
        "its VMs boot through its own bootloader under {}",
        if firmware == Firmware::Uefi {
            "OVMF (UEFI)"
        } else {
            "SeaBIOS"
        }
    ));
    progress(&format!(
        "putting pincer's guest services in with libguestfs (its appliance VM boots in {})",
        if opts.tcg {
            "half a minute under TCG"
        } else {
            "a few seconds"
        }
    ));
    let t = Instant::now();
    let facts = install(disk, &work, opts, progress).await?;
    progress(&format!("  done in {:.1} s", t.elapsed().as_secs_f64()));
    if facts.session == "none" {
        progress(&format!(
            "warning: nothing on the disk logs {} in at boot, and the agent starts with their graphical session: set up automatic login (GDM: AutomaticLoginEnable=true and AutomaticLogin={} in /etc/gdm3/custom.conf), or the VM's first boot waits for the agent in vain",
            facts.user, facts.user
        ));
    }

    let source = std::fs::canonicalize(disk).unwrap_or_else(|_| disk.clone());
    let manifest = Manifest {
        name: name.clone(),
        description: format!("imported from {}", source.display()),
        recipe_hash: import_hash(&source),
        distribution: facts.os.0,
        suite: facts.os.1,
        sources: Vec::new(),
        kernel: facts.kernel,
        packages: facts.packages,
        sizes: Sizes {
            disk_virtual: info.virtual_size,
            disk_file: std::fs::metadata(&copy).map_or(0, |m| m.len()),
            kernel: 0,
            initrd: 0,
        },
        agent_sha256: String::new(),
        built_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        build_seconds: started.elapsed().as_secs_f64(),
        container: None,
        container_binaries: None,
        firmware,
        imported: Some(Imported {
            from: source.display().to_string(),
            user: facts.user,
            session: facts.session,
        }),
        compared: None,
        vm_memory_mib: None,
    };
    for f in ["head.raw", "facts"] {
        let _ = std::fs::remove_file(work.join(f));
    }
    std::fs::write(
        work.join(super::MANIFEST),
        serde_json::to_string_pretty(&manifest).unwrap_or_default(),
    )
    .map_err(io("writing the manifest"))?;
    let dir = cache.dir().join(name);
    std::fs::rename(&work, &dir).map_err(io(format!("moving the image to {}", dir.display())))?;
    scratch.keep();
    Ok(Image { dir, manifest })
}

/// Where an imported image came from, in its manifest.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Imported {
    /// The disk it was copied from.
    pub from: String,
    /// The user whose desktop the agent drives.
    pub user: String,
    /// How that user's session starts at boot (`gdm-autologin`, `lightdm-autologin`,
    /// `sddm-autologin`, `linger`, or `none`).
    pub session: String,
}

/// Image names: directory names in the cache and words on command lines.
fn check_name(name: &str) -> Result<(), ImageError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c));
    if !ok {
        return Err(ImageError::BadName {
            name: name.into(),
            why: "use lower-case letters, digits, '.', '_' and '-' (at most 64, starting with a letter or digit)".into(),
        });
    }
    if super::recipe::bundled().iter().any(|r| r == name) {
        return Err(ImageError::BadName {
            name: name.into(),
            why: "it is a bundled recipe's name: pick another, so that `pincer image build` of the recipe does not replace the import".into(),
        });
    }
    Ok(())
}

/// A login name as useradd takes it; the only user input that reaches the guest's shell.
fn login_name(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= 32
        && u.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && u.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// What `qemu-img info` says of the user's disk.
struct DiskInfo {
    format: String,
    virtual_size: u64,
}

async fn disk_info(disk: &Path) -> Result<DiskInfo, ImageError> {
    if !disk.is_file() {
        return Err(refused(disk, "no such file"));
    }
    let out = tokio::process::Command::new("qemu-img")
        .args(["info", "--output=json", "--"])
        .arg(disk)
        .output()
        .await
        .map_err(io("running qemu-img info"))?;
    if !out.status.success() {
        return Err(refused(
            disk,
            format!(
                "qemu-img cannot read it: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let format = v["format"].as_str().unwrap_or_default().to_owned();
    if format != "qcow2" && format != "raw" {
        return Err(refused(
            disk,
            format!(
                "it is a {format} disk; pincer imports qcow2 and raw: convert it first (qemu-img convert -O qcow2 DISK disk.qcow2)"
            ),
        ));
    }
    Ok(DiskInfo {
        format,
        virtual_size: v["virtual-size"].as_u64().unwrap_or(0),
    })
}

/// The GPT partition type of an EFI system partition, as it lies on disk (mixed-endian).
const ESP: [u8; 16] = guid_bytes(
    0xC12A7328,
    0xF81F,
    0x11D2,
    [0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B],
);
/// The GPT partition type of GRUB's BIOS boot partition.
const BIOS_BOOT: [u8; 16] = guid_bytes(
    0x21686148,
    0x6449,
    0x6E6F,
    [0x74, 0x4E, 0x65, 0x65, 0x64, 0x45, 0x46, 0x49],
);

const fn guid_bytes(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let a = a.to_le_bytes();
    let b = b.to_le_bytes();
    let c = c.to_le_bytes();
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The firmware a disk boots with, from its first 34 sectors: an MBR disk boots under BIOS;
/// a GPT disk with a BIOS boot partition too (GRUB's core lives there); one with only an
/// EFI system partition under UEFI.
fn firmware_of(head: &[u8]) -> Result<Firmware, String> {
    if head.len() < 1024 || head[510..512] != [0x55, 0xAA] {
        return Err("it has no partition table (no boot signature in its first sector): it is not a bootable disk".into());
    }
    let protective = (0..4).any(|i| head[446 + 16 * i + 4] == 0xEE);
    if !protective || &head[512..520] != b"EFI PART" {
        return Ok(Firmware::Bios);
    }
    let u32_at = |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    let entries_lba = u64::from_le_bytes(head[512 + 72..512 + 80].try_into().unwrap_or_default());
    let count = u32_at(512 + 80) as usize;
    let size = u32_at(512 + 84) as usize;
    let start = usize::try_from(entries_lba)
        .unwrap_or(usize::MAX)
        .saturating_mul(512);
    let types: Vec<&[u8]> = (0..count.min(128))
        .filter_map(|i| head.get(start + i * size..start + i * size + 16))
        .collect();
    if types.contains(&BIOS_BOOT.as_slice()) {
        Ok(Firmware::Bios)
    } else if types.contains(&ESP.as_slice()) {
        Ok(Firmware::Uefi)
    } else {
        Err("its GPT has neither an EFI system partition nor a BIOS boot partition: say how it boots with --firmware bios|uefi".into())
    }
}

/// What the install script found on the disk.
struct Facts {
    os: (String, String),
    kernel: String,
    user: String,
    session: String,
    packages: BTreeMap<String, String>,
}

/// Puts the guest files into the copy in `work` and runs the install script there, all in
/// one libguestfs appliance.
async fn install(
    disk: &Path,
    work: &Path,
    opts: &ImportOptions,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Facts, ImageError> {
    let user = opts.user.as_deref();
    let files = work.join("files");
    let guest = |name: &str| {
        GUEST
            .get_file(name)
            .map(|f| f.contents())
            .unwrap_or_default()
    };
    let agent_unit =
        pincer_shared::service::agent_unit("/usr/local/bin/pincer-agent", &agent_args());
    let put: [(&str, &[u8], &str, &str); 6] = [
        (
            "pincer-agent-disk",
            guest("pincer-agent-disk"),
            "/usr/local/sbin",
            "0755",
        ),
        (
            "pincer-agent-disk.service",
            guest("pincer-agent-disk.service"),
            "/etc/systemd/system",
            "0644",
        ),
        (
            "pincer-clock",
            guest("pincer-clock"),
            "/usr/local/sbin",
            "0755",
        ),
        (
            "pincer-clock.service",
            guest("pincer-clock.service"),
            "/etc/systemd/system",
            "0644",
        ),
        (
            pincer_shared::service::AGENT_UNIT,
            agent_unit.as_bytes(),
            "/etc/systemd/user",
            "0644",
        ),
        ("pincer-import.sh", INSTALL.as_bytes(), "/tmp", "0755"),
    ];
    std::fs::create_dir_all(&files).map_err(io(format!("creating {}", files.display())))?;
    // guestfish -i has found the disk's operating system and mounted its file systems
    // where its fstab says.
    let mut script = String::new();
    for (file, bytes, dir, mode) in put {
        let local = files.join(file);
        std::fs::write(&local, bytes).map_err(io(format!("writing {}", local.display())))?;
        script.push_str(&format!(
            "mkdir-p {dir}\nupload {} {dir}/{file}\nchmod {mode} {dir}/{file}\n",
            quote(&local)
        ));
    }
    // uid 1000 is the first user of every Debian, Ubuntu and Fedora install.
    let who = user.map_or_else(
        || "$(getent passwd 1000 | cut -d: -f1)".to_owned(),
        str::to_owned,
    );
    script.push_str(&format!(
        "sh \"/tmp/pincer-import.sh {who}\"\ndownload /tmp/pincer-import.facts {}\nrm /tmp/pincer-import.sh\nrm /tmp/pincer-import.facts\n",
        quote(&work.join("facts"))
    ));
    let script_file = work.join("import.guestfish");
    std::fs::write(&script_file, &script).map_err(io("writing the guestfish script"))?;
    let mut env: Vec<(&str, &Path)> = vec![("LIBGUESTFS_BACKEND", Path::new("direct"))];
    if opts.tcg {
        env.push(("LIBGUESTFS_BACKEND_SETTINGS", Path::new("force_tcg")));
    }
    let ran = run_step(
        "putting the guest services in (guestfish)",
        "guestfish",
        &[
            "--rw".into(),
            "--format=qcow2".into(),
            "-a".into(),
            work.join("disk.qcow2").display().to_string(),
            "-i".into(),
            "-f".into(),
            script_file.display().to_string(),
        ],
        &env,
        progress,
    )
    .await;
    let _ = std::fs::remove_dir_all(&files);
    let _ = std::fs::remove_file(&script_file);
    if let Err(ImageError::Step { tail, .. }) = &ran {
        if let Some(why) = tail.lines().find_map(|l| l.split_once("pincer-import: ")) {
            return Err(refused(disk, why.1.trim()));
        }
        if tail.contains("no operating system was found") {
            return Err(refused(
                disk,
                "libguestfs finds no operating system on it (an encrypted or unknown root file system?)",
            ));
        }
    }
    ran?;
    let text =
        std::fs::read_to_string(work.join("facts")).map_err(io("reading the disk's facts"))?;
    Ok(parse_facts(&text, user))
}

fn parse_facts(text: &str, user: Option<&str>) -> Facts {
    let mut f = Facts {
        os: ("linux".into(), "unknown".into()),
        kernel: String::new(),
        user: user.unwrap_or_default().to_owned(),
        session: "none".into(),
        packages: BTreeMap::new(),
    };
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("os"), Some(id), Some(release)) => f.os = (id.into(), release.into()),
            (Some("kernel"), Some(k), _) => f.kernel = k.into(),
            (Some("user"), Some(u), _) => f.user = u.into(),
            (Some("session"), Some(s), _) => f.session = s.into(),
            (Some("package"), Some(p), Some(v)) => {
                f.packages.insert(p.into(), v.into());
            }
            _ => {}
        }
    }
    f
}

/// guestfish's quoting of a host path.
fn quote(p: &Path) -> String {
    format!(
        "\"{}\"",
        p.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
    )
}

/// An imported image's "recipe hash": what it was made from (the source's path, size and
/// time) and what pincer put in.
fn import_hash(source: &Path) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(source.as_os_str().as_encoded_bytes());
    if let Ok(m) = std::fs::metadata(source) {
        ctx.update(&m.len().to_le_bytes());
        if let Ok(t) = m
            .modified()
            .map(|t| t.duration_since(std::time::UNIX_EPOCH))
        {
            ctx.update(&t.unwrap_or_default().as_nanos().to_le_bytes());
        }
    }
    ctx.update(INSTALL.as_bytes());
    for f in GUEST.files() {
        ctx.update(f.contents());
    }
    format!("import-{}", hex(ctx.finish().as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 34 sectors of a disk with these MBR partition types, and for a GPT these
    /// partition type GUIDs.
    fn head(mbr_types: &[u8], gpt: &[[u8; 16]]) -> Vec<u8> {
        let mut b = vec![0u8; 34 * 512];
        b[510] = 0x55;
        b[511] = 0xAA;
        for (i, t) in mbr_types.iter().enumerate() {
            b[446 + 16 * i + 4] = *t;
        }
        if !gpt.is_empty() {
            b[512..520].copy_from_slice(b"EFI PART");
            b[512 + 72..512 + 80].copy_from_slice(&2u64.to_le_bytes());
            b[512 + 80..512 + 84].copy_from_slice(&128u32.to_le_bytes());
            b[512 + 84..512 + 88].copy_from_slice(&128u32.to_le_bytes());
            for (i, g) in gpt.iter().enumerate() {
                let at = 1024 + 128 * i;
                b[at..at + 16].copy_from_slice(g);
            }
        }
        b
    }

    #[test]
    fn the_firmware_is_read_from_the_partition_table() {
        let linux = guid_bytes(
            0x0FC63DAF,
            0x8483,
            0x4772,
            [0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4],
        );
        assert_eq!(firmware_of(&head(&[0x83], &[])), Ok(Firmware::Bios));
        assert_eq!(
            firmware_of(&head(&[0xEE], &[ESP, linux])),
            Ok(Firmware::Uefi)
        );
        // Ubuntu's cloud images and many installers: both, and SeaBIOS boots them.
        assert_eq!(
            firmware_of(&head(&[0xEE], &[BIOS_BOOT, ESP, linux])),
            Ok(Firmware::Bios)
        );
        let e = firmware_of(&head(&[0xEE], &[linux])).unwrap_err();
        assert!(e.contains("--firmware"), "{e}");
        let e = firmware_of(&vec![0u8; 34 * 512]).unwrap_err();
        assert!(e.contains("not a bootable disk"), "{e}");
        assert!(firmware_of(&[0x55, 0xAA]).is_err());
    }

    /// The install script adapts the guest files by editing these lines: a change to them
    /// that it would no longer find fails here, not in a user's VM.
    #[test]
    fn the_guest_files_have_what_the_install_script_edits() {
        let text = |n: &str| GUEST.get_file(n).and_then(|f| f.contents_utf8()).unwrap();
        let unit = text("pincer-agent-disk.service");
        assert!(
            unit.contains("\nConditionKernelCommandLine=pincer.agent_disk\n"),
            "{unit}"
        );
        assert!(unit.contains("user@1000.service"), "{unit}");
        assert!(INSTALL.contains("s/user@1000\\.service/user@$uid.service/"));
        assert!(INSTALL.contains("/^ConditionKernelCommandLine=/d"));
        let script = text("pincer-agent-disk");
        assert!(
            script.matches("getent passwd 1000").count() >= 2,
            "{script}"
        );
        assert!(INSTALL.contains("s/getent passwd 1000/getent passwd $uid/g"));
    }

    #[test]
    fn names_and_users_are_checked() {
        assert!(check_name("ubuntu-22.04_lab").is_ok());
        for bad in ["", "My Disk", "-x", "a/b", ".hidden", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let e = check_name("osworld").unwrap_err().to_string();
        assert!(e.contains("bundled recipe"), "{e}");
        assert!(login_name("user") && login_name("_svc") && login_name("a-b_1"));
        for bad in ["", "Root", "x;reboot", "a b", "$(id)", "1abc"] {
            assert!(!login_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_facts_the_disk_gives_fill_the_manifest() {
        let f = parse_facts(
            "user alex\nos ubuntu jammy\nkernel 6.5.0-41-generic\nsession gdm-autologin\npackage vlc 3.0.16-1build7\npackage libc6 2.35-0ubuntu3\nnoise\n",
            None,
        );
        assert_eq!(f.user, "alex");
        assert_eq!(f.os, ("ubuntu".into(), "jammy".into()));
        assert_eq!(f.kernel, "6.5.0-41-generic");
        assert_eq!(f.session, "gdm-autologin");
        assert_eq!(f.packages.len(), 2);
        assert_eq!(f.packages["vlc"], "3.0.16-1build7");
    }
}

//! `pincer image build`: a recipe becomes a bootable image without loop mounts or other
//! root-only tricks. mmdebstrap bootstraps the root file system (as root, or in a user
//! namespace otherwise) and, in its hooks, adds pincer's session and the recipe's files,
//! copies out the kernel and initrd for direct boot, and writes the file system into an
//! ext4 image with `mkfs.ext4 -d`; `qemu-img convert` makes it a qcow2. Everything happens
//! in a `.build-*` directory of the cache that is renamed into place at the end, so an
//! image in the cache is always whole; an image whose recipe hash matches is reused.
//! Downloaded packages are kept per suite, so rebuilding after a recipe change fetches only
//! what is new.

use super::extras::Staged;
use super::recipe::{Distribution, Loaded};
use super::{Cache, FileLock, Image, ImageError, Manifest, Sizes, io, mirror, owner_alive};
use include_dir::{Dir, include_dir};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokio::io::AsyncBufReadExt as _;

/// pincer's own guest files (`images/guest/`).
pub(crate) static GUEST: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../images/guest");

/// Bumped whenever what pincer adds to every image changes in a way the guest files do not
/// show (packages, hooks), so that images built before are rebuilt.
const FORMAT: u32 = 2;

/// Packages pincer's session and agent need, whatever the recipe says.
fn session_packages(loaded: &Loaded) -> Vec<String> {
    let r = &loaded.recipe;
    let mut p: Vec<String> = [
        "systemd-sysv",
        "udev",
        "kmod",
        "dbus",
        "dbus-user-session",
        "xvfb",
        "xauth",
        "at-spi2-core",
        "libatk-adaptor",
    ]
    .map(str::to_owned)
    .to_vec();
    p.push(r.kernel.clone());
    if r.distribution == Distribution::Debian {
        p.push("initramfs-tools".into());
    }
    if r.session.window_manager != "none" {
        p.push(r.session.window_manager.clone());
    }
    if r.locale != "C.UTF-8" {
        p.push("locales".into());
    }
    if r.timezone != "UTC" {
        p.push("tzdata".into());
    }
    if r.user.sudo {
        p.push("sudo".into());
    }
    if !r.pip.is_empty() {
        p.push("python3-pip".into());
    }
    p
}

/// How to build.
#[derive(Debug, Clone)]
pub struct Options {
    /// A mirror to use instead of the host's apt sources.
    pub mirror: Option<String>,
    /// A keyring to verify the archive with (for archives the host has no key of).
    pub keyring: Option<PathBuf>,
    /// The agent binary to build into the image.
    pub agent: PathBuf,
    /// The `pincer` binary to build into the image (`/usr/local/bin/pincer`), so that the
    /// image can run shards of a run (`pincer run --shard`), as a Kubernetes pod does.
    pub pincer: Option<PathBuf>,
    /// Also export the root file system as a container image with podman.
    pub container: bool,
    /// Build even if an image with the same recipe hash exists.
    pub rebuild: bool,
}

/// What a build did.
#[derive(Debug)]
pub enum Built {
    /// The cached image was up to date.
    Cached(Image),
    /// A new image.
    Fresh(Image),
}

/// The hash an image built from `loaded` carries: of the recipe (parsed, so comments and
/// layout do not count), the files it names (`source`s, apt keys, `.deb`s), pincer's guest
/// files and [`FORMAT`].
pub fn recipe_hash(loaded: &Loaded) -> Result<String, ImageError> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(&FORMAT.to_le_bytes());
    // `compare` and `vm_memory_mib` are what the manifest says about the image and how it
    // runs, not what it is made of.
    let recipe = super::recipe::Recipe {
        compare: None,
        vm_memory_mib: None,
        ..loaded.recipe.clone()
    };
    let canonical = serde_json::to_vec(&recipe).unwrap_or_default();
    ctx.update(&canonical);
    for p in loaded.local_inputs() {
        let bytes = std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?;
        ctx.update(&(bytes.len() as u64).to_le_bytes());
        ctx.update(&bytes);
    }
    let mut files: Vec<_> = GUEST.files().collect();
    files.sort_by_key(|f| f.path());
    for f in files {
        ctx.update(f.path().to_string_lossy().as_bytes());
        ctx.update(f.contents());
    }
    ctx.update(
        pincer_shared::service::agent_unit("/usr/local/bin/pincer-agent", &agent_args()).as_bytes(),
    );
    Ok(hex(ctx.finish().as_ref()))
}

/// The SHA-256 of a file, in hex.
pub fn file_sha256(path: &Path) -> Result<String, ImageError> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).map_err(io(format!("reading {}", path.display())))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(io(format!("reading {}", path.display())))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(hex(ctx.finish().as_ref()))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The agent's arguments in images: it listens on every interface of the VM; QEMU forwards
/// only the host's 127.0.0.1 to it.
pub(crate) fn agent_args() -> Vec<String> {
    vec!["--listen".into(), "0.0.0.0:7000".into()]
}

/// Checks that `tool` is installed, naming the package that has it.
pub fn need_tool(tool: &str, package: &str) -> Result<(), ImageError> {
    if crate::paths::on_path(tool) {
        Ok(())
    } else {
        Err(ImageError::MissingTool {
            tool: tool.into(),
            package: package.into(),
        })
    }
}

/// A build or import directory, removed when dropped unless it became the image.
pub(crate) struct Scratch(Option<PathBuf>);

impl Scratch {
    /// Removes `dir` when dropped.
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self(Some(dir))
    }

    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("/nonexistent"))
    }

    /// Keeps the directory: it became the image.
    pub(crate) fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            remove_work(&p);
        }
    }
}

/// The mount points at or below `dir`, deepest first.
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    points
}

/// Removes a build's working directory. A step that was stopped (mmdebstrap, whose
/// temporary root lives in it) can leave that root's /proc, /sys and /dev mounted: they
/// are detached first, and while one stays the directory is left alone, since removing
/// it through a bind mount would delete the host's files.
fn remove_work(dir: &Path) {
    for point in mounts_below(dir) {
        if let Ok(c) = std::ffi::CString::new(point.as_os_str().as_encoded_bytes()) {
            // SAFETY: a NUL-terminated path; detaching a mount this build's step made.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
    if mounts_below(dir).is_empty() {
        let _ = std::fs::remove_dir_all(dir);
    } else {
        eprintln!(
            "warning: {} still has mounts under it; unmount them and remove it by hand",
            dir.display()
        );
    }
}

/// Removes what builds and imports that were interrupted left behind (their process is
/// gone).
pub(crate) fn sweep(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let work = [".build-", ".import-", ".rm-"]
            .iter()
            .any(|p| name.starts_with(p));
        if work && !owner_alive(&name) {
            remove_work(&e.path());
        }
    }
}

/// One SHA-256 over the pincer-agent and pincer binaries a build puts into the image.
pub fn binaries_sha256(opts: &Options) -> Result<String, ImageError> {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(file_sha256(&opts.agent)?.as_bytes());
    if let Some(pincer) = &opts.pincer {
        ctx.update(file_sha256(pincer)?.as_bytes());
    }
    Ok(hex(ctx.finish().as_ref()))
}

/// Puts this build's pincer-agent and pincer into an up-to-date image's container image as
/// a new layer (`podman build`, copies only), tagged anew; the old tag is removed.
async fn refresh_container(
    mut image: Image,
    old: &str,
    binaries: String,
    opts: &Options,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Image, ImageError> {
    need_tool("podman", "podman")?;
    let tag = format!(
        "localhost/pincer/{}:{}-{}",
        image.manifest.name,
        &image.manifest.recipe_hash[..12],
        &binaries[..12]
    );
    progress(&format!(
        "the image is up to date, but its container image {old} carries other pincer binaries: adding these as {tag}"
    ));
    let ctx = tempfile::Builder::new()
        .prefix("pincer-container-")
        .tempdir()
        .map_err(io("making a build context"))?;
    let mut containerfile = format!("FROM {old}\n");
    for (src, name) in [
        (Some(&opts.agent), "pincer-agent"),
        (opts.pincer.as_ref(), "pincer"),
    ] {
        if let Some(src) = src {
            std::fs::copy(src, ctx.path().join(name))
                .map_err(io(format!("copying {}", src.display())))?;
            containerfile.push_str(&format!("COPY {name} /usr/local/bin/{name}\n"));
        }
    }
    std::fs::write(ctx.path().join("Containerfile"), containerfile)
        .map_err(io("writing the Containerfile"))?;
    let dir = ctx.path().display().to_string();
    run_step(
        "podman build",
        "podman",
        &[
            "build".into(),
            "--pull=never".into(),
            "--tag".into(),
            tag.clone(),
            "--file".into(),
            format!("{dir}/Containerfile"),
            dir,
        ],
        &[],
        progress,
    )
    .await?;
    if old != tag {
        // Only the name goes: the new image is built on the old one's layers.
        let _ = std::process::Command::new("podman")
            .args(["untag", old])
            .output();
    }
    image.manifest.container = Some(tag);
    image.manifest.container_binaries = Some(binaries);
    let text = serde_json::to_string_pretty(&image.manifest).unwrap_or_default();
    std::fs::write(image.dir.join(super::MANIFEST), text).map_err(io("writing the manifest"))?;
    Ok(image)
}

/// Builds the image of `loaded` into `cache` (or finds it up to date), saying what it does
/// through `progress`.
pub async fn build(
    cache: &Cache,
    loaded: &Loaded,
    opts: &Options,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Built, ImageError> {
    let mut built = build_or_reuse(cache, loaded, opts, progress).await?;
    let image = match &mut built {
        Built::Cached(i) | Built::Fresh(i) => i,
    };
    let compared = loaded
        .recipe
        .compare
        .as_ref()
        .map(|c| compared(c, &image.manifest.packages));
    let memory = loaded.recipe.vm_memory_mib;
    // A cached image takes the recipe's metadata as it is now.
    if image.manifest.compared != compared || image.manifest.vm_memory_mib != memory {
        image.manifest.compared = compared;
        image.manifest.vm_memory_mib = memory;
        // Renamed into place: other pincer processes read the manifest meanwhile.
        let path = image.dir.join(super::MANIFEST);
        let part = image
            .dir
            .join(format!(".{}.{}", super::MANIFEST, std::process::id()));
        std::fs::write(
            &part,
            serde_json::to_string_pretty(&image.manifest).unwrap_or_default(),
        )
        .and_then(|()| std::fs::rename(&part, &path))
        .map_err(io("writing the manifest"))?;
    }
    Ok(built)
}

/// The recipe's `compare` next to the image's packages.
fn compared(c: &super::recipe::Compare, packages: &BTreeMap<String, String>) -> super::Compared {
    super::Compared {
        machine: c.machine.clone(),
        packages: c
            .versions
            .iter()
            .map(|(p, theirs)| {
                (
                    p.clone(),
                    super::Versions {
                        machine: theirs.clone(),
                        image: packages.get(p).cloned(),
                    },
                )
            })
            .collect(),
    }
}

async fn build_or_reuse(
    cache: &Cache,
    loaded: &Loaded,
    opts: &Options,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Built, ImageError> {
    let started = Instant::now();
    let hash = recipe_hash(loaded)?;
    let _lock = FileLock::take(&cache.dir().join(format!(".lock-{}", loaded.name)))?;
    sweep(cache.dir());
    if let Ok(image) = cache.get(&loaded.name)
        && image.manifest.recipe_hash == hash
        && !opts.rebuild
    {
        if opts.container && image.manifest.container.is_none() {
            progress(
                "the image is up to date, but was built without --container: building it again with the root file system kept",
            );
        } else if let Some(old) = image.manifest.container.clone()
            && let binaries = binaries_sha256(opts)?
            && image.manifest.container_binaries.as_deref() != Some(&binaries)
        {
            return refresh_container(image, &old, binaries, opts, progress)
                .await
                .map(Built::Cached);
        } else {
            return Ok(Built::Cached(image));
        }
    }
    need_tool("mmdebstrap", "mmdebstrap")?;
    need_tool("mkfs.ext4", "e2fsprogs")?;
    need_tool("qemu-img", "qemu-utils")?;
    if opts.container {
        need_tool("podman", "podman")?;
    }
    if !opts.agent.is_file() {
        return Err(io(format!("the agent {}", opts.agent.display()))(
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "not found: build it (cargo build -p pincer-agent) or pass --agent PATH",
            ),
        ));
    }
    let r = &loaded.recipe;
    let mut sources = match &opts.mirror {
        Some(uri) => vec![mirror::line_for_mirror(r, uri)],
        None => mirror::lines_for(r, &mirror::host_sources(Path::new("/"))).ok_or_else(|| {
            ImageError::NoMirror {
                distribution: r.distribution.to_string(),
                suite: r.suite.clone(),
            }
        })?,
    };
    let staged = Staged::new(loaded)?;
    sources.extend(staged.sources.iter().cloned());
    let mut packages = session_packages(loaded);
    packages.extend(r.packages.iter().cloned());
    packages.sort();
    packages.dedup();
    packages.extend(staged.debs.iter().cloned());

    progress(&format!(
        "checking {} packages against {}",
        packages.len(),
        sources.join("; ")
    ));
    simulate(loaded, opts, &staged, &packages, &sources).await?;

    let scratch = Scratch::new(cache.dir().join(format!(
        ".build-{}-{}",
        loaded.name,
        std::process::id()
    )));
    let out = scratch.path().to_owned();
    let overlay = out.join("overlay");
    std::fs::create_dir_all(&overlay).map_err(io(format!("creating {}", overlay.display())))?;
    stage(loaded, opts, &overlay)?;
    let debs = cache
        .dir()
        .join(".debs")
        .join(format!("{}-{}", r.distribution, r.suite));
    std::fs::create_dir_all(&debs).map_err(io(format!("creating {}", debs.display())))?;

    progress(&format!(
        "bootstrapping {} {} with mmdebstrap (a few minutes; packages are kept in {} for the next build)",
        r.distribution,
        r.suite,
        debs.display()
    ));
    let args = mmdebstrap_args(
        loaded, opts, &staged, &packages, &sources, &out, &overlay, &debs,
    );
    // mmdebstrap's temporary root goes in the build's directory, not /tmp: a build that is
    // stopped midway takes it along (mounts and all) when the directory goes.
    let tmp = out.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(io(format!("creating {}", tmp.display())))?;
    run_step(
        "mmdebstrap",
        "mmdebstrap",
        &args,
        &[("TMPDIR", &tmp)],
        progress,
    )
    .await?;

    progress("converting the root file system to qcow2");
    let raw = out.join("root.raw");
    let disk = out.join("disk.qcow2");
    run_step(
        "qemu-img convert",
        "qemu-img",
        &[
            "convert".into(),
            "-O".into(),
            "qcow2".into(),
            raw.display().to_string(),
            disk.display().to_string(),
        ],
        &[],
        progress,
    )
    .await?;
    let disk_virtual = std::fs::metadata(&raw).map_or(0, |m| m.len());
    std::fs::remove_file(&raw).map_err(io(format!("removing {}", raw.display())))?;

    let container = if opts.container {
        let tag = format!("localhost/pincer/{}:{}", loaded.name, &hash[..12]);
        progress(&format!(
            "importing the root file system into podman as {tag}"
        ));
        let tar = out.join("rootfs.tar");
        run_step(
            "podman import",
            "podman",
            &["import".into(), tar.display().to_string(), tag.clone()],
            &[],
            progress,
        )
        .await?;
        let _ = std::fs::remove_file(&tar);
        Some(tag)
    } else {
        None
    };

    let size = |name: &str| std::fs::metadata(out.join(name)).map_or(0, |m| m.len());
    let manifest = Manifest {
        name: loaded.name.clone(),
        description: r.description.clone(),
        recipe_hash: hash,
        distribution: r.distribution.to_string(),
        suite: r.suite.clone(),
        sources,
        kernel: std::fs::read_to_string(out.join("kernel.txt"))
            .unwrap_or_default()
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned(),
        packages: read_packages(&out.join("packages.tsv")),
        sizes: Sizes {
            disk_virtual,
            disk_file: size("disk.qcow2"),
            kernel: size("vmlinuz"),
            initrd: size("initrd.img"),
        },
        agent_sha256: file_sha256(&opts.agent)?,
        built_at: crate::clock::unix_secs(),
        build_seconds: started.elapsed().as_secs_f64(),
        container_binaries: match container {
            Some(_) => Some(binaries_sha256(opts)?),
            None => None,
        },
        container,
        firmware: super::Firmware::Kernel,
        imported: None,
        compared: None,
        vm_memory_mib: None,
    };
    for leftover in ["overlay", "packages.tsv", "kernel.txt"] {
        let p = out.join(leftover);
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
    let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    std::fs::write(out.join(super::MANIFEST), text).map_err(io("writing the manifest"))?;

    // Into place: the old image (and its golden states, made from its disk) goes.
    let target = cache.dir().join(&loaded.name);
    if target.exists() {
        let old = cache
            .dir()
            .join(format!(".rm-{}-{}", loaded.name, std::process::id()));
        std::fs::rename(&target, &old).map_err(io(format!("replacing {}", target.display())))?;
        let _ = std::fs::remove_dir_all(&old);
    }
    std::fs::rename(&out, &target)
        .map_err(io(format!("moving the image to {}", target.display())))?;
    // It is the image now.
    scratch.keep();
    Ok(Built::Fresh(cache.get(&loaded.name)?))
}

/// Packages as `dpkg-query -W` printed them.
fn read_packages(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (p, v) = l.split_once('\t')?;
            Some((p.to_owned(), v.to_owned()))
        })
        .collect()
}

/// Quotes a path for the shell hooks.
fn sh(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// The arguments common to the check and the build.
fn base_args(loaded: &Loaded, opts: &Options, staged: &Staged, packages: &[String]) -> Vec<String> {
    let mut a = vec![
        "--variant=minbase".to_owned(),
        format!("--include={}", packages.join(",")),
        format!("--components={}", loaded.recipe.components.join(",")),
        "--aptopt=Acquire::Languages \"none\"".into(),
        "--aptopt=APT::Install-Recommends \"false\"".into(),
    ];
    if let Some(k) = &opts.keyring {
        a.push(format!("--keyring={}", k.display()));
    }
    a.extend(staged.options());
    a
}

/// Asks apt (in mmdebstrap's simulation) whether every package exists, naming those that
/// do not, before anything is downloaded.
async fn simulate(
    loaded: &Loaded,
    opts: &Options,
    staged: &Staged,
    packages: &[String],
    sources: &[String],
) -> Result<(), ImageError> {
    let mut args = base_args(loaded, opts, staged, packages);
    args.push("--simulate".into());
    args.push(loaded.recipe.suite.clone());
    args.push("/dev/null".into());
    args.extend(sources.iter().cloned());
    let out = tokio::process::Command::new("mmdebstrap")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(io("running mmdebstrap --simulate"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(e) = unverified_source(loaded, &text) {
        return Err(e);
    }
    let missing = unknown_packages(&text);
    if missing.is_empty() {
        Err(ImageError::Step {
            step: "checking the packages (mmdebstrap --simulate)".into(),
            status: out.status.to_string(),
            tail: tail(&text, 30),
        })
    } else {
        Err(ImageError::UnknownPackages {
            recipe: loaded.name.clone(),
            packages: missing,
        })
    }
}

/// The recipe's repository that apt could not verify, if its output names one.
fn unverified_source(loaded: &Loaded, apt_output: &str) -> Option<ImageError> {
    let unverified = [
        "is not signed",
        "NO_PUBKEY",
        "signatures couldn't be verified",
    ];
    loaded.recipe.apt_sources.iter().find_map(|src| {
        // apt writes file:///x as file:/x.
        let short = src.uri.replacen("file:///", "file:/", 1);
        let names = |l: &str| {
            l.contains(src.uri.trim_end_matches('/')) || l.contains(short.trim_end_matches('/'))
        };
        let said = apt_output
            .lines()
            .find(|l| names(l) && unverified.iter().any(|u| l.contains(u)))?;
        Some(ImageError::UnverifiedSource {
            recipe: loaded.name.clone(),
            uri: src.uri.clone(),
            key: src.key.display().to_string(),
            said: said.trim().trim_start_matches("E: ").to_owned(),
        })
    })
}

/// The packages apt says it cannot find.
fn unknown_packages(apt_output: &str) -> Vec<String> {
    let mut out: Vec<String> = apt_output
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            if let Some(rest) = l.strip_prefix("E: Unable to locate package ") {
                return Some(rest.trim().to_owned());
            }
            let rest = l.strip_prefix("E: Package '")?;
            let (name, why) = rest.split_once('\'')?;
            why.contains("has no installation candidate")
                .then(|| name.to_owned())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes what the image gets besides packages into `overlay`, laid out as in the image.
fn stage(loaded: &Loaded, opts: &Options, overlay: &Path) -> Result<(), ImageError> {
    let r = &loaded.recipe;
    let user = &r.user.name;
    let fill = |text: &str| {
        text.replace("{{user}}", user)
            .replace("{{screen}}", &r.session.screen)
            .replace("{{window_manager}}", &r.session.window_manager)
    };
    let guest = |name: &str| {
        GUEST
            .get_file(name)
            .and_then(|f| f.contents_utf8())
            .map(fill)
            .unwrap_or_default()
    };
    let mut files: Vec<(String, String, u32)> = vec![
        ("etc/hostname".into(), "pincer-vm\n".into(), 0o644),
        (
            "etc/hosts".into(),
            "127.0.0.1 localhost\n127.0.1.1 pincer-vm\n".into(),
            0o644,
        ),
        (
            "etc/fstab".into(),
            "/dev/vda / ext4 rw,errors=remount-ro 0 1\n".into(),
            0o644,
        ),
        (
            "etc/systemd/network/10-eth.network".into(),
            guest("10-eth.network"),
            0o644,
        ),
        (
            "etc/systemd/system/pincer-clock.service".into(),
            guest("pincer-clock.service"),
            0o644,
        ),
        (
            "usr/local/sbin/pincer-clock".into(),
            guest("pincer-clock"),
            0o755,
        ),
        (
            "etc/systemd/system/pincer-agent-disk.service".into(),
            guest("pincer-agent-disk.service"),
            0o644,
        ),
        (
            "usr/local/sbin/pincer-agent-disk".into(),
            guest("pincer-agent-disk"),
            0o755,
        ),
        (
            "etc/systemd/user/pincer-session.target".into(),
            guest("pincer-session.target"),
            0o644,
        ),
        (
            "etc/systemd/user/pincer-xvfb.service".into(),
            guest("pincer-xvfb.service"),
            0o644,
        ),
        (
            format!("etc/systemd/user/{}", pincer_shared::service::AGENT_UNIT),
            pincer_shared::service::agent_unit("/usr/local/bin/pincer-agent", &agent_args()),
            0o644,
        ),
        (
            "etc/systemd/user.conf.d/pincer.conf".into(),
            guest("pincer-user.conf"),
            0o644,
        ),
        (
            format!("var/lib/systemd/linger/{user}"),
            String::new(),
            0o644,
        ),
    ];
    if r.session.window_manager != "none" {
        files.push((
            "etc/systemd/user/pincer-wm.service".into(),
            guest("pincer-wm.service"),
            0o644,
        ));
    }
    if r.locale != "C.UTF-8" {
        files.push((
            "etc/locale.gen".into(),
            format!("{} UTF-8\n", r.locale),
            0o644,
        ));
    }
    files.push((
        "etc/default/locale".into(),
        format!("LANG={}\n", r.locale),
        0o644,
    ));
    if r.timezone != "UTC" {
        files.push(("etc/timezone".into(), format!("{}\n", r.timezone), 0o644));
    }
    for f in &r.files {
        let text = match (&f.content, &f.source, &loaded.dir) {
            (Some(c), _, _) => c.clone().into_bytes(),
            (None, Some(src), Some(dir)) => {
                let p = dir.join(src);
                std::fs::read(&p).map_err(io(format!("reading {}", p.display())))?
            }
            _ => Vec::new(),
        };
        let mode = u32::from_str_radix(&f.mode, 8).unwrap_or(0o644);
        write(overlay, f.path.trim_start_matches('/'), &text, mode)?;
    }
    for (path, text, mode) in files {
        write(overlay, &path, text.as_bytes(), mode)?;
    }
    let bin = overlay.join("usr/local/bin");
    std::fs::create_dir_all(&bin).map_err(io(format!("creating {}", bin.display())))?;
    for (from, name) in [
        (Some(&opts.agent), "pincer-agent"),
        (opts.pincer.as_ref(), "pincer"),
    ] {
        let Some(from) = from else { continue };
        let to = bin.join(name);
        std::fs::copy(from, &to).map_err(io(format!("copying {}", from.display())))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
            .map_err(io(format!("setting the mode of {}", to.display())))?;
    }
    Ok(())
}

fn write(root: &Path, rel: &str, bytes: &[u8], mode: u32) -> Result<(), ImageError> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
    }
    std::fs::write(&p, bytes).map_err(io(format!("writing {}", p.display())))?;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("setting the mode of {}", p.display())))
}

/// mmdebstrap's command line: bootstrap into a temporary directory (format `null`) and do
/// everything else in hooks, where the file system has the right owners even in a user
/// namespace.
#[allow(clippy::too_many_arguments)]
fn mmdebstrap_args(
    loaded: &Loaded,
    opts: &Options,
    staged: &Staged,
    packages: &[String],
    sources: &[String],
    out: &Path,
    overlay: &Path,
    debs: &Path,
) -> Vec<String> {
    let r = &loaded.recipe;
    let user = &r.user.name;
    let o = |name: &str| sh(&out.join(name));
    let mut a = base_args(loaded, opts, staged, packages);
    // Smaller images: no manuals, documentation (but the copyrights) or translations.
    for opt in [
        "path-exclude=/usr/share/man/*",
        "path-exclude=/usr/share/doc/*",
        "path-include=/usr/share/doc/*/copyright",
        "path-exclude=/usr/share/info/*",
        "path-exclude=/usr/share/locale/*",
        "path-include=/usr/share/locale/locale.alias",
    ] {
        a.push(format!("--dpkgopt={opt}"));
    }
    // Downloaded packages kept between builds (and not deleted after unpacking).
    a.push("--skip=essential/unlink".into());
    a.push("--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives".into());
    a.push(format!(
        "--setup-hook=sync-in {} /var/cache/apt/archives/",
        debs.display()
    ));
    let mut hooks = vec![
        format!("sync-in {} /", overlay.display()),
        format!("chroot \"$1\" useradd -m -u 1000 -U -s /bin/bash {user}"),
        "chroot \"$1\" systemctl enable systemd-networkd.service pincer-clock.service pincer-agent-disk.service".into(),
        "chroot \"$1\" systemctl mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer".into(),
        format!(
            "chroot \"$1\" systemctl --global enable pincer-session.target {}",
            pincer_shared::service::AGENT_UNIT
        ),
    ];
    hooks.extend(staged.hooks(loaded));
    if r.locale != "C.UTF-8" {
        hooks.push("chroot \"$1\" locale-gen".into());
    }
    if r.timezone != "UTC" {
        hooks.push(format!(
            "ln -sf /usr/share/zoneinfo/{} \"$1\"/etc/localtime",
            r.timezone
        ));
    }
    hooks.extend([
        format!("sync-out /var/cache/apt/archives {}", debs.display()),
        format!(
            "chroot \"$1\" dpkg-query -W -f='${{Package}}\\t${{Version}}\\n' > {}",
            o("packages.tsv")
        ),
        "rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/archives/*.deb \"$1\"/var/cache/apt/*.bin".into(),
        format!("ls \"$1\"/lib/modules > {}", o("kernel.txt")),
        // Debian links /vmlinuz, Ubuntu /boot/vmlinuz.
        format!(
            "for d in \"$1\" \"$1\"/boot; do if [ -e \"$d/vmlinuz\" ]; then cp -L \"$d/vmlinuz\" {} && cp -L \"$d/initrd.img\" {} && exit 0; fi; done; echo no kernel >&2; exit 1",
            o("vmlinuz"),
            o("initrd.img")
        ),
        // The file system (and, for --container, a tarball of it) through a bind mount of
        // the root alone: in the hooks the root has /proc, /sys and /dev mounted on it,
        // which must not be copied.
        format!(
            "mkdir -p {view} && mount --bind \"$1\" {view} && mkfs.ext4 -q -F -L root -d {view} {raw} {gib}G {tar}; rc=$?; umount {view}; rmdir {view}; exit $rc",
            view = o("view"),
            raw = o("root.raw"),
            gib = r.disk_gib,
            tar = if opts.container {
                format!("&& tar --numeric-owner --xattrs -C {} -cf {} .", o("view"), o("rootfs.tar"))
            } else {
                String::new()
            }
        ),
    ]);
    for h in hooks {
        a.push(format!("--customize-hook={h}"));
    }
    a.push(r.suite.clone());
    a.push("/dev/null".into());
    a.extend(sources.iter().cloned());
    a
}

/// Runs one step of the build, passing its progress lines on and keeping its last lines
/// for the error.
pub(crate) async fn run_step(
    step: &str,
    program: &str,
    args: &[String],
    env: &[(&str, &Path)],
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<(), ImageError> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Its own process group: a Ctrl-C at the terminal reaches pincer alone, which then
        // stops the step so that it can clean up (mmdebstrap unmounts what it mounted).
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(io(format!("starting {program}")))?;
    let pid = child.id().unwrap_or(0) as i32;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(io("listening for Ctrl-C"))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io("listening for SIGTERM"))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut kept: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let started = Instant::now();
    loop {
        let line = tokio::select! {
            l = rx.recv() => l,
            _ = interrupt.recv() => return Err(stop(&mut child, pid, step).await),
            _ = terminate.recv() => return Err(stop(&mut child, pid, step).await),
        };
        let Some(line) = line else { break };
        // mmdebstrap's steps ("I: downloading packages with apt...").
        if let Some(info) = line.strip_prefix("I: ") {
            progress(&format!(
                "  [{:>4.0} s] {info}",
                started.elapsed().as_secs_f64()
            ));
        }
        kept.push_back(line);
        if kept.len() > 40 {
            kept.pop_front();
        }
    }
    let status = child
        .wait()
        .await
        .map_err(io(format!("waiting for {program}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(ImageError::Step {
            step: step.into(),
            status: status.to_string(),
            tail: kept.into_iter().collect::<Vec<_>>().join("\n"),
        })
    }
}

/// Stops an interrupted step: asks it to end (mmdebstrap then unmounts and removes its
/// temporary root), and kills its process group if it has not within a minute.
async fn stop(child: &mut tokio::process::Child, pid: i32, step: &str) -> ImageError {
    if pid > 0 {
        // SAFETY: signalling the step this build started.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        if tokio::time::timeout(std::time::Duration::from_secs(60), child.wait())
            .await
            .is_err()
        {
            // SAFETY: its process group is the step's own.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = child.wait().await;
        }
        // Helpers it forked can outlive it (mmdebstrap's, which mount its temporary root's
        // /proc and /sys): the rest of its group goes too, and is waited for, so that no
        // mount appears after the build's directory is cleaned.
        // SAFETY: its process group is the step's own; kill(.., 0) only asks.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while unsafe { libc::kill(-pid, 0) } == 0 && Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    ImageError::Interrupted(step.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::recipe;

    #[test]
    fn apt_names_the_packages_it_cannot_find() {
        let out = "I: running apt-get update...\nE: Unable to locate package mousepadd\nE: Package 'libfoo1' has no installation candidate\nE: Unable to locate package mousepadd\n";
        assert_eq!(unknown_packages(out), ["libfoo1", "mousepadd"]);
        assert!(unknown_packages("E: something else").is_empty());
    }

    #[test]
    fn the_hash_follows_the_recipe_not_its_layout() {
        let a = recipe::load("debian-12-minimal").unwrap();
        let reformatted = recipe::parse(
            "debian-12-minimal",
            &format!("# a new comment\n{}", a.text),
            None,
        )
        .unwrap();
        assert_eq!(recipe_hash(&a).unwrap(), recipe_hash(&reformatted).unwrap());
        let changed = recipe::parse(
            "debian-12-minimal",
            &a.text.replace("\"zenity\",", "\"zenity\", \"galculator\","),
            None,
        )
        .unwrap();
        assert_ne!(recipe_hash(&a).unwrap(), recipe_hash(&changed).unwrap());
        // What the manifest says about the image is not what it is made of.
        let compared = recipe::parse(
            "debian-12-minimal",
            &a.text.replace(
                "[user]",
                "[compare]\nmachine = \"m\"\nversions = { zenity = \"3.42\" }\n[user]",
            ),
            None,
        )
        .unwrap();
        assert!(compared.recipe.compare.is_some());
        assert_eq!(recipe_hash(&a).unwrap(), recipe_hash(&compared).unwrap());
        // Nor is how its VMs run.
        let memory = recipe::parse(
            "debian-12-minimal",
            &a.text.replace("[user]", "vm_memory_mib = 3072\n[user]"),
            None,
        )
        .unwrap();
        assert_eq!(memory.recipe.vm_memory_mib, Some(3072));
        assert_eq!(recipe_hash(&a).unwrap(), recipe_hash(&memory).unwrap());
        let err = recipe::parse(
            "debian-12-minimal",
            &a.text.replace("[user]", "vm_memory_mib = 100\n[user]"),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("vm_memory_mib"), "{err}");
    }

    #[test]
    fn the_manifest_lists_the_other_machines_versions_next_to_the_images() {
        let osworld = recipe::load("osworld").unwrap();
        let c = osworld.recipe.compare.as_ref().expect("osworld compares");
        let packages: BTreeMap<String, String> =
            [("gimp".to_owned(), "2.10.34-1+deb12u3".to_owned())].into();
        let m = compared(c, &packages);
        assert!(m.machine.contains("OSWorld"), "{}", m.machine);
        assert_eq!(m.packages["gimp"].machine, "2.10.30");
        assert_eq!(
            m.packages["gimp"].image.as_deref(),
            Some("2.10.34-1+deb12u3")
        );
        // VS Code is not in Debian: the image has none.
        assert_eq!(m.packages["code"].machine, "1.91.1");
        assert_eq!(m.packages["code"].image, None);
    }

    #[test]
    fn the_session_gets_what_the_recipe_asks_for() {
        let l = recipe::load("debian-12-desktop").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent");
        std::fs::write(&agent, b"\x7fELF").unwrap();
        let opts = Options {
            mirror: None,
            keyring: None,
            agent,
            pincer: Some(dir.path().join("agent")),
            container: false,
            rebuild: false,
        };
        let overlay = dir.path().join("o");
        stage(&l, &opts, &overlay).unwrap();
        let read = |p: &str| std::fs::read_to_string(overlay.join(p)).unwrap();
        assert!(read("etc/systemd/user/pincer-xvfb.service").contains("-screen 0 1920x1080x24"));
        assert!(read("etc/systemd/user/pincer-wm.service").contains("ExecStart=/usr/bin/openbox"));
        assert!(read("etc/systemd/user/pincer-agent.service").contains("--listen 0.0.0.0:7000"));
        for bin in ["usr/local/bin/pincer-agent", "usr/local/bin/pincer"] {
            assert_eq!(
                std::fs::read(overlay.join(bin)).unwrap(),
                b"\x7fELF",
                "{bin}"
            );
        }
        assert_eq!(read("etc/locale.gen"), "en_US.UTF-8 UTF-8\n");
        assert!(overlay.join("var/lib/systemd/linger/pincer").exists());
        let mode = std::fs::metadata(overlay.join("usr/local/sbin/pincer-clock"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(session_packages(&l).contains(&"locales".to_owned()));
        assert!(session_packages(&l).contains(&"openbox".to_owned()));
    }
}

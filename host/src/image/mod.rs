//! VM images: built from declarative recipes (`recipe`, `images/*.toml`) with mmdebstrap
//! into a cache directory (`build`), one directory per image holding the disk (qcow2), the
//! kernel and initrd for direct boot, and a manifest (recipe hash, package versions, sizes,
//! kernel). An image is rebuilt only when its recipe changes. A user's own bootable disk
//! becomes an image by `import`: its directory holds the disk (and for UEFI the firmware's
//! variable store), and its VMs boot through the disk's own bootloader. This module finds,
//! lists and removes them.

pub mod build;
mod extras;
pub mod import;
pub mod mirror;
pub mod recipe;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The manifest's file name in an image directory.
const MANIFEST: &str = "manifest.json";

/// What an image directory holds, besides its files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The image's name (its recipe's).
    pub name: String,
    /// The recipe's one-line description.
    pub description: String,
    /// Hash of everything the image is built from (recipe, pincer's guest files); an image
    /// whose hash matches its recipe's is reused.
    pub recipe_hash: String,
    /// `debian` or `ubuntu`.
    pub distribution: String,
    /// The suite.
    pub suite: String,
    /// The apt sources it was built from.
    pub sources: Vec<String>,
    /// The kernel version (`6.1.0-41-amd64`).
    pub kernel: String,
    /// Every installed package and its version.
    pub packages: BTreeMap<String, String>,
    /// Sizes in bytes.
    pub sizes: Sizes,
    /// The SHA-256 of the agent built into the image.
    pub agent_sha256: String,
    /// When it was built (seconds since the Unix epoch).
    pub built_at: u64,
    /// How long the build took.
    pub build_seconds: f64,
    /// The container image it was exported as (`--container`), if it was.
    #[serde(default)]
    pub container: Option<String>,
    /// The SHA-256 of the pincer-agent and pincer binaries that container carries (see
    /// [`build::binaries_sha256`]): a build with other binaries puts them in a new layer.
    #[serde(default)]
    pub container_binaries: Option<String>,
    /// How its VMs boot.
    #[serde(default)]
    pub firmware: Firmware,
    /// Where an imported image came from (`pincer image import`); `None` for built ones.
    #[serde(default)]
    pub imported: Option<import::Imported>,
    /// The recipe's `compare`: another machine's versions next to the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<Compared>,
    /// The recipe's `vm_memory_mib`: guest memory of its VMs when the user names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_memory_mib: Option<u32>,
}

/// Guest memory of a VM whose user and image name none, MiB.
pub const DEFAULT_MEMORY_MIB: u32 = 1024;

/// The guest memory a VM may be given, MiB (flags and recipes alike).
pub const MEMORY_MIB: std::ops::RangeInclusive<u32> = 256..=65_536;

impl Manifest {
    /// Guest memory, MiB, of this image's VMs when the user names none.
    pub fn default_memory_mib(&self) -> u32 {
        self.vm_memory_mib.unwrap_or(DEFAULT_MEMORY_MIB)
    }
}

/// Another machine's package versions next to an image's (a recipe's `compare`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// Which machine, and where its versions are stated.
    pub machine: String,
    /// Both versions by package.
    pub packages: BTreeMap<String, Versions>,
}

/// One package's version on the other machine and in the image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    /// The other machine's.
    pub machine: String,
    /// The image's (`None`: the image does not have it).
    pub image: Option<String>,
}

/// How an image's VMs boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    /// QEMU loads the image's kernel and initrd (built images).
    #[default]
    Kernel,
    /// The disk's own bootloader under SeaBIOS.
    Bios,
    /// The disk's own bootloader under OVMF.
    Uefi,
}

impl std::fmt::Display for Firmware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Kernel => "kernel",
            Self::Bios => "bios",
            Self::Uefi => "uefi",
        })
    }
}

/// Sizes of an image's parts, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    /// The root file system's size as the VM sees it.
    pub disk_virtual: u64,
    /// The qcow2 file on the host.
    pub disk_file: u64,
    /// The kernel.
    pub kernel: u64,
    /// The initrd.
    pub initrd: u64,
}

/// A built image in the cache.
#[derive(Debug, Clone)]
pub struct Image {
    /// Its directory.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Image {
    /// The root disk (qcow2).
    pub fn disk(&self) -> PathBuf {
        self.dir.join("disk.qcow2")
    }

    /// The kernel for direct boot.
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }

    /// The initrd for direct boot.
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }

    /// The UEFI variable store an imported UEFI disk's first boot starts from.
    pub fn efi_vars(&self) -> PathBuf {
        self.dir.join("efivars.fd")
    }

    /// Where this image's golden states (saved first boots) live.
    pub fn golden_dir(&self) -> PathBuf {
        self.dir.join("golden")
    }
}

/// Why an image cannot be built, found or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The recipe is wrong.
    #[error(transparent)]
    Recipe(#[from] recipe::RecipeError),
    /// A program the build needs is not installed.
    #[error(
        "`{tool}` is not installed: install the Debian package {package} (apt install {package})"
    )]
    MissingTool {
        /// The program.
        tool: String,
        /// The package that has it.
        package: String,
    },
    /// The host's apt configuration has no source for the distribution.
    #[error(
        "the host's apt sources serve no {distribution} archive for '{suite}': pass --mirror URI (and --keyring FILE if the host lacks its archive key)"
    )]
    NoMirror {
        /// The distribution.
        distribution: String,
        /// The suite.
        suite: String,
    },
    /// Packages the archive does not have.
    #[error("recipe {recipe}: the archive has no package {}: check the names (apt-cache search) and the recipe's components", packages.join(", "))]
    UnknownPackages {
        /// The recipe.
        recipe: String,
        /// The packages.
        packages: Vec<String>,
    },
    /// A build step failed.
    /// apt cannot verify an added repository with the key the recipe gives.
    #[error(
        "recipe {recipe}: apt cannot verify the repository {uri} with the key the recipe gives ({key}): check that `apt_sources` names the key that signs it (apt said: {said})"
    )]
    UnverifiedSource {
        /// The recipe.
        recipe: String,
        /// The repository.
        uri: String,
        /// The key file, as the recipe names it.
        key: String,
        /// apt's line about it.
        said: String,
    },
    #[error("{step} failed ({status}); its last output:\n{tail}")]
    Step {
        /// What was being done.
        step: String,
        /// How it ended.
        status: String,
        /// The last lines it printed.
        tail: String,
    },
    /// The build was interrupted (Ctrl-C, SIGTERM); nothing of it is left in the cache.
    #[error("interrupted during {0}: nothing was left in the cache")]
    Interrupted(String),
    /// A disk that cannot be imported.
    #[error("cannot import {}: {why}", disk.display())]
    Import {
        /// The disk.
        disk: PathBuf,
        /// What is wrong and what to do.
        why: String,
    },
    /// An image of that name is in the cache already.
    #[error(
        "an image '{name}' is in the cache already: remove it first (pincer image rm {name}) or pick another --name"
    )]
    Taken {
        /// The name.
        name: String,
    },
    /// A name that cannot be an image's.
    #[error("'{name}' cannot name an image: {why}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        why: String,
    },
    /// No image of that name is built.
    #[error("no image '{name}' is built in {}: {}", dir.display(), if built.is_empty() { "none is; build one with `pincer image build RECIPE`".to_owned() } else { format!("built: {}", built.join(", ")) })]
    NotBuilt {
        /// The name asked for.
        name: String,
        /// The cache.
        dir: PathBuf,
        /// The images that are built.
        built: Vec<String>,
    },
    /// Reading or writing the cache failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Maps an OS error to [`ImageError::Io`] saying what was being done.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ImageError {
    let what = what.into();
    move |source| ImageError::Io { what, source }
}

/// An exclusive lock on a file, held until dropped: builds of one image, and golden
/// boots of one image, wait for each other instead of racing. A lock file may be removed
/// ([`FileLock::remove_if_free`]) while nobody holds it: a taker that waited on the removed
/// file finds it gone once it has the lock and takes the file now at the path instead.
#[derive(Debug)]
pub(crate) struct FileLock {
    /// Holds the lock: closing it releases.
    file: std::fs::File,
}

impl FileLock {
    /// Takes the lock, waiting for whoever holds it.
    pub(crate) fn take(path: &Path) -> Result<Self, ImageError> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(io(format!("creating {}", d.display())))?;
        }
        loop {
            let f = std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .map_err(io(format!("creating {}", path.display())))?;
            // A blocking lock is taken or fails; it never finds the file busy.
            let lock =
                Self::flock(f, libc::LOCK_EX).map_err(io(format!("locking {}", path.display())))?;
            if let Some(lock) = lock.filter(|l| l.is_at(path)) {
                return Ok(lock);
            }
        }
    }

    /// Removes the lock file at `path` if nobody holds or waits on it now; true when it
    /// was removed (or already gone).
    pub(crate) fn remove_if_free(path: &Path) -> bool {
        let Ok(f) = std::fs::File::open(path) else {
            return !path.exists();
        };
        match Self::flock(f, libc::LOCK_EX | libc::LOCK_NB) {
            // Removed while held: whoever waits on this file retries on a fresh one.
            Ok(Some(lock)) if lock.is_at(path) => std::fs::remove_file(path).is_ok(),
            _ => false,
        }
    }

    /// `flock(op)` on `f`: the lock, or `None` when a non-blocking lock is held elsewhere.
    fn flock(f: std::fs::File, op: libc::c_int) -> std::io::Result<Option<Self>> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(Some(Self { file: f }));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        }
    }

    /// Whether the locked file is still the one at `path` (not removed meanwhile).
    fn is_at(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        match (self.file.metadata(), std::fs::metadata(path)) {
            (Ok(held), Ok(now)) => (held.dev(), held.ino()) == (now.dev(), now.ino()),
            _ => false,
        }
    }
}

/// Whether the process whose pid ends a work directory's name (`.build-NAME-PID`) still
/// runs; directories of processes that are gone (or dead and not yet reaped) are
/// leftovers.
pub(crate) fn owner_alive(dir_name: &str) -> bool {
    let pid: Option<u32> = dir_name.rsplit('-').next().and_then(|p| p.parse().ok());
    pid.is_some_and(crate::process::alive)
}

/// The image cache: one directory per image; directories whose names start with `.` are
/// builds in progress, leftovers of interrupted ones, or the package cache, never images.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache at `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every built image, by name.
    pub fn images(&self) -> Vec<Image> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Image> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|e| read_image(&e.path()))
            .collect();
        out.sort_by(|a, b| a.manifest.name.cmp(&b.manifest.name));
        out
    }

    /// The built image `name`.
    pub fn get(&self, name: &str) -> Result<Image, ImageError> {
        read_image(&self.dir.join(name))
            .filter(|_| !name.starts_with('.') && !name.contains('/'))
            .ok_or_else(|| ImageError::NotBuilt {
                name: name.into(),
                dir: self.dir.clone(),
                built: self.images().into_iter().map(|i| i.manifest.name).collect(),
            })
    }

    /// Removes the image `name` (and its golden states).
    pub fn remove(&self, name: &str) -> Result<Image, ImageError> {
        let image = self.get(name)?;
        // Renamed away first, so that a removal cut short leaves no half an image.
        let trash = self.dir.join(format!(".rm-{name}-{}", std::process::id()));
        std::fs::rename(&image.dir, &trash)
            .map_err(io(format!("removing {}", image.dir.display())))?;
        std::fs::remove_dir_all(&trash).map_err(io(format!("removing {}", trash.display())))?;
        Ok(image)
    }
}

fn read_image(dir: &Path) -> Option<Image> {
    let text = std::fs::read_to_string(dir.join(MANIFEST)).ok()?;
    let manifest: Manifest = serde_json::from_str(&text).ok()?;
    Some(Image {
        dir: dir.to_owned(),
        manifest,
    })
}

/// Bytes as people read them (`1.3 GiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A taker that waited on a lock file removed meanwhile (pruned while free) takes the
    /// file now at the path, so it never runs beside whoever locked that one.
    #[test]
    fn a_lock_file_removed_under_a_waiter_is_not_shared() {
        use std::sync::mpsc;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".lock-k");
        let first = FileLock::take(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let lock = FileLock::take(&path).unwrap();
                tx.send(()).unwrap();
                lock
            })
        };
        // The waiter has opened the file and waits on it.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!FileLock::remove_if_free(&path), "held, so kept");
        // Removed while held (as remove_if_free does once it holds it), then a newcomer
        // locks the new file.
        std::fs::remove_file(&path).unwrap();
        let newcomer = FileLock::take(&path).unwrap();
        drop(first);
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "the waiter got a lock beside the newcomer's"
        );
        drop(newcomer);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the waiter gets the lock once it is free");
        drop(waiter.join().unwrap());
        assert!(FileLock::remove_if_free(&path));
        assert!(!path.exists());
    }

    /// A build directory whose owner exited but was not reaped yet is a leftover: a zombie
    /// holds nothing.
    #[test]
    fn a_dead_owner_is_dead_even_unreaped() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let name = format!(".build-x-{}", child.id());
        let start = std::time::Instant::now();
        while owner_alive(&name) && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            !owner_alive(&name),
            "an exited, unreaped owner counts as alive"
        );
        child.wait().unwrap();
        assert!(owner_alive(&format!(".build-x-{}", std::process::id())));
        assert!(!owner_alive(".build-x-0") && !owner_alive(".build-x-y"));
    }

    fn manifest(name: &str) -> Manifest {
        Manifest {
            name: name.into(),
            description: "d".into(),
            recipe_hash: "h".into(),
            distribution: "debian".into(),
            suite: "bookworm".into(),
            sources: Vec::new(),
            kernel: "6.1".into(),
            packages: BTreeMap::new(),
            sizes: Sizes {
                disk_virtual: 1,
                disk_file: 1,
                kernel: 1,
                initrd: 1,
            },
            agent_sha256: "a".into(),
            built_at: 0,
            build_seconds: 1.0,
            container: None,
            container_binaries: None,
            firmware: Firmware::Kernel,
            imported: None,
            compared: None,
            vm_memory_mib: None,
        }
    }

    #[test]
    fn the_cache_lists_finds_and_removes_images_and_ignores_builds_in_progress() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path());
        for name in ["b", "a", ".build-c-1"] {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join(MANIFEST),
                serde_json::to_string(&manifest(name)).unwrap(),
            )
            .unwrap();
        }
        // A directory without a manifest is no image.
        std::fs::create_dir_all(dir.path().join("half")).unwrap();
        let names: Vec<String> = cache
            .images()
            .into_iter()
            .map(|i| i.manifest.name)
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            cache.get("a").unwrap().disk(),
            dir.path().join("a/disk.qcow2")
        );
        let e = cache.get("half").unwrap_err().to_string();
        assert!(
            e.contains("no image 'half'") && e.contains("built: a, b"),
            "{e}"
        );
        assert!(cache.get(".build-c-1").is_err());
        cache.remove("a").unwrap();
        assert!(!dir.path().join("a").exists());
        assert_eq!(cache.images().len(), 1);
        let e = Cache::at(dir.path().join("none"))
            .get("x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pincer image build"), "{e}");
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(1_395_864_371), "1.3 GiB");
    }
}

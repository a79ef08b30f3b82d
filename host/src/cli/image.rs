//! `pincer image ...`: build VM images from recipes, import users' own disks, list and
//! remove them.

use clap::Subcommand;
use pincer::image::build::{self, Built, Options};
use pincer::image::{Cache, Firmware, human_bytes, import, recipe};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub(crate) struct CacheArg {
    /// The image cache (default: $PINCER_IMAGE_CACHE or ~/.cache/pincer/images).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

impl CacheArg {
    pub(crate) fn cache(&self) -> Cache {
        Cache::at(
            self.cache
                .clone()
                .unwrap_or_else(pincer::paths::image_cache_dir),
        )
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImageCmd {
    /// Build an image from a recipe (a bundled name such as debian-12-minimal, or a file);
    /// an image whose recipe did not change is reused.
    Build {
        /// The recipe.
        recipe: String,
        /// The archive to install from (default: the host's apt sources for the suite).
        #[arg(long, value_name = "URI")]
        mirror: Option<String>,
        /// The archive's keyring, when the host has no key for it.
        #[arg(long, value_name = "FILE")]
        keyring: Option<PathBuf>,
        /// The agent to build in (default: pincer-agent next to this pincer).
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// A local .deb to install besides the recipe's (Google Chrome, VS Code);
        /// repeatable. It counts in the image's hash.
        #[arg(long, value_name = "FILE")]
        deb: Vec<PathBuf>,
        /// Also export the root file system as a container image (podman import).
        #[arg(long)]
        container: bool,
        /// Build even if the cached image is up to date.
        #[arg(long)]
        rebuild: bool,
        #[command(flatten)]
        cache: CacheArg,
    },
    /// Make an image of your own bootable disk (qcow2 or raw; BIOS or UEFI): it is copied
    /// into the cache (your file is only read) and pincer's guest services are put in with
    /// libguestfs; its VMs boot through the disk's own bootloader and the agent starts with
    /// the user's graphical session (set up automatic login on the disk).
    Import {
        /// The disk.
        disk: PathBuf,
        /// The image's name.
        #[arg(long)]
        name: String,
        /// The user whose desktop session the agent drives (default: the disk's user with
        /// uid 1000).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// How the disk boots (default: read from its partition table).
        #[arg(long, value_enum)]
        firmware: Option<FirmwareArg>,
        #[command(flatten)]
        cache: CacheArg,
    },
    /// List built images and the bundled recipes.
    List {
        #[command(flatten)]
        cache: CacheArg,
    },
    /// Remove a built image (and its golden states).
    Rm {
        /// The image.
        name: String,
        #[command(flatten)]
        cache: CacheArg,
    },
}

/// `--firmware`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum FirmwareArg {
    /// SeaBIOS: an MBR disk, or a GPT disk with a BIOS boot partition.
    Bios,
    /// OVMF: a GPT disk with an EFI system partition.
    Uefi,
}

/// The agent next to this pincer binary.
pub(crate) fn default_agent() -> PathBuf {
    std::env::current_exe()
        .map(|p| p.with_file_name("pincer-agent"))
        .unwrap_or_else(|_| PathBuf::from("pincer-agent"))
}

pub(crate) async fn run(cmd: ImageCmd) -> anyhow::Result<()> {
    match cmd {
        ImageCmd::Build {
            recipe: spec,
            mirror,
            keyring,
            agent,
            deb,
            container,
            rebuild,
            cache,
        } => {
            let mut loaded = recipe::load(&spec)?;
            loaded.add_debs(&deb)?;
            let cache = cache.cache();
            let opts = Options {
                mirror,
                keyring,
                agent: agent.unwrap_or_else(default_agent),
                pincer: std::env::current_exe().ok(),
                container,
                rebuild,
            };
            let started = std::time::Instant::now();
            eprintln!("image {}: {}", loaded.name, loaded.recipe.description);
            let built = build::build(&cache, &loaded, &opts, &mut |m| eprintln!("{m}")).await?;
            let (image, how) = match built {
                Built::Cached(i) => (i, "up to date (recipe unchanged)"),
                Built::Fresh(i) => (i, "built"),
            };
            let m = &image.manifest;
            println!(
                "{} {how} in {:.1} s: {} ({} packages, kernel {}), disk {} (qcow2 file {}), at {}",
                m.name,
                started.elapsed().as_secs_f64(),
                m.description,
                m.packages.len(),
                m.kernel,
                human_bytes(m.sizes.disk_virtual),
                human_bytes(m.sizes.disk_file),
                image.dir.display()
            );
            if let Some(c) = &m.container {
                println!("container image: {c}");
            }
            if let Some(c) = &m.compared {
                eprintln!("versions of {} next to the image's:", c.machine);
                for (p, v) in &c.packages {
                    eprintln!(
                        "  {p} {} (the image: {})",
                        v.machine,
                        v.image.as_deref().unwrap_or("not installed")
                    );
                }
            }
        }
        ImageCmd::Import {
            disk,
            name,
            user,
            firmware,
            cache,
        } => {
            let cache = cache.cache();
            let opts = import::ImportOptions {
                disk,
                name,
                user,
                firmware: firmware.map(|f| match f {
                    FirmwareArg::Bios => Firmware::Bios,
                    FirmwareArg::Uefi => Firmware::Uefi,
                }),
                tcg: pincer::accel::probe_accel().0 == pincer::accel::Accel::Tcg,
            };
            let image = import::import(&cache, &opts, &mut |m| eprintln!("{m}")).await?;
            let m = &image.manifest;
            let user = m.imported.as_ref().map_or("", |i| i.user.as_str());
            println!(
                "{} imported in {:.1} s: {} {} ({} packages, kernel {}), boots under {}, agent as {user}; disk {} (qcow2 file {}), at {}",
                m.name,
                m.build_seconds,
                m.distribution,
                m.suite,
                m.packages.len(),
                if m.kernel.is_empty() {
                    "unknown"
                } else {
                    &m.kernel
                },
                m.firmware,
                human_bytes(m.sizes.disk_virtual),
                human_bytes(m.sizes.disk_file),
                image.dir.display()
            );
            println!(
                "start it with: pincer vm up --image {} (its first boot makes the golden state)",
                m.name
            );
        }
        ImageCmd::List { cache } => {
            let cache = cache.cache();
            let images = cache.images();
            if images.is_empty() {
                println!("no images built in {}", cache.dir().display());
            } else {
                println!(
                    "{:<24} {:<9} {:<10} {:>9} {:>10} {:>8}  {:<23} description",
                    "name", "suite", "recipe", "packages", "disk file", "build s", "built"
                );
                for i in images {
                    let m = &i.manifest;
                    let fresh = (m.imported.is_none())
                        .then(|| recipe::load(&m.name).ok())
                        .flatten()
                        .and_then(|l| build::recipe_hash(&l).ok())
                        .map_or("", |h| {
                            if h == m.recipe_hash {
                                ""
                            } else {
                                " (recipe changed: rebuild)"
                            }
                        });
                    println!(
                        "{:<24} {:<9} {:<10} {:>9} {:>10} {:>8.0}  {:<23} {}{fresh}",
                        m.name,
                        m.suite,
                        &m.recipe_hash[..10.min(m.recipe_hash.len())],
                        m.packages.len(),
                        human_bytes(m.sizes.disk_file),
                        m.build_seconds,
                        pincer::report::utc(m.built_at * 1000),
                        m.description
                    );
                }
            }
            println!("recipes: {}", recipe::bundled().join(", "));
        }
        ImageCmd::Rm { name, cache } => {
            let image = cache.cache().remove(&name)?;
            println!("removed {} ({})", name, image.dir.display());
        }
    }
    Ok(())
}

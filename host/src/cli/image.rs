//! `pincer image ...`: build VM images from recipes, list and remove them.

use clap::Subcommand;
use pincer::image::build::{self, Built, Options};
use pincer::image::{Cache, human_bytes, recipe};
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
                    let fresh = recipe::load(&m.name)
                        .ok()
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

//! Where the host keeps things: configuration (the envs file) and state (local desktops,
//! the host's own certificate), following the XDG base-directory conventions.

use std::path::PathBuf;

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// `$XDG_CONFIG_HOME/pincer` or `~/.config/pincer`.
pub fn config_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map_or_else(|| home().join(".config"), PathBuf::from)
        .join("pincer")
}

/// `$PINCER_STATE_DIR`, else `$XDG_STATE_HOME/pincer`, else `~/.local/state/pincer`.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_STATE_DIR") {
        return PathBuf::from(d);
    }
    std::env::var_os("XDG_STATE_HOME")
        .map_or_else(|| home().join(".local/state"), PathBuf::from)
        .join("pincer")
}

/// `$PINCER_IMAGE_CACHE`, else `$XDG_CACHE_HOME/pincer/images`, else
/// `~/.cache/pincer/images`: built VM images and their golden states.
pub fn image_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_IMAGE_CACHE") {
        return PathBuf::from(d);
    }
    cache_dir().join("images")
}

/// `$XDG_CACHE_HOME/pincer` or `~/.cache/pincer`: what pincer can build or fetch again
/// (images, OSWorld's files, the OSWorld scorer's environment).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map_or_else(|| home().join(".cache"), PathBuf::from)
        .join("pincer")
}

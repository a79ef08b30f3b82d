//! OSWorld's file cache, in OSWorld's own layout so that a user's existing `cache/` works
//! unchanged: a setup download of `url` to the guest path `path` is
//! `<cache>/<task id>/<uuid5(NAMESPACE_URL, url)>_<basename of path>`, and a gold file of
//! the `cloud_file` getter is `<cache>/<task id>/<dest>`. The task id is OSWorld's, without
//! the domain (as OSWorld keys it). Because the name hashes the whole URL, a cache filled
//! from one revision of the task files (Google Drive links) does not serve another
//! (Hugging Face links).

use std::path::{Path, PathBuf};

/// RFC 4122's namespace for URLs (`uuid.NAMESPACE_URL` in Python).
const NAMESPACE_URL: [u8; 16] = [
    0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
];

/// `uuid.uuid5(uuid.NAMESPACE_URL, name)` as Python writes it.
pub fn uuid5_url(name: &str) -> String {
    let mut input = NAMESPACE_URL.to_vec();
    input.extend_from_slice(name.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = crate::image::build::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The last component of a guest path, as Python's `os.path.basename` gives it.
fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Where a setup download of `url` into the guest's `path` lives, relative to the cache.
pub fn download(task_id: &str, url: &str, path: &str) -> PathBuf {
    Path::new(task_id).join(format!("{}_{}", uuid5_url(url), basename(path)))
}

/// Where a gold file (`cloud_file`'s `dest`) lives, relative to the cache.
pub fn gold(task_id: &str, dest: &str) -> PathBuf {
    Path::new(task_id).join(dest)
}

/// Where OSWorld's `update_browse_history` setup gets the empty Chrome history it fills:
/// one file for every task, from the folder of the one task that uses it.
pub const BROWSE_HISTORY_URL: &str = "https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/chrome/44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true";

/// Where that empty history lives, relative to the cache (`history_new.sqlite` in the
/// task's folder, as OSWorld keeps it).
pub fn browse_history(task_id: &str) -> PathBuf {
    Path::new(task_id).join("history_new.sqlite")
}

/// The default cache: `$PINCER_OSWORLD_CACHE`, else `~/.cache/pincer/osworld` (next to the
/// image cache).
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_OSWORLD_CACHE") {
        return PathBuf::from(d);
    }
    crate::paths::cache_dir().join("osworld")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names Python's `uuid` gives (`uuid.uuid5(uuid.NAMESPACE_URL, url)`), so a cache
    /// OSWorld's harness filled is found.
    #[test]
    fn names_are_osworlds() {
        assert_eq!(
            uuid5_url("https://example.com/a.xlsx"),
            "03fb1144-4ca2-5df0-a5fd-eabb7a9b1e57"
        );
        let url = "https://drive.usercontent.google.com/download?id=1FuOZ-5YoKgLLwl_oZd4R3D8pZACf_ukS&export=download&authuser=0&confirm=t&uuid=2ff7b7cf-9ac5-4a32-8e1b-e7ec1f4ba0d4&at=APZUnTUVAvcHvoG6JGPUJMqg4mbd:1705896617127";
        assert_eq!(uuid5_url(url), "31aeb433-9af6-5cff-a546-578eae20a30a");
        assert_eq!(
            download(
                "t-1",
                "https://example.com/a.xlsx",
                "/home/user/Desktop/Budget.xlsx"
            ),
            Path::new("t-1/03fb1144-4ca2-5df0-a5fd-eabb7a9b1e57_Budget.xlsx")
        );
        assert_eq!(gold("t-1", "b_gold.xlsx"), Path::new("t-1/b_gold.xlsx"));
    }
}

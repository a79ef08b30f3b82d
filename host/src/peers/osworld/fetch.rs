//! `pincer osworld fetch`: the files OSWorld's tasks name (setup downloads and the gold
//! files of `cloud_file`), into its own cache layout ([`super::cache`]), several at once.
//!
//! A download goes to `<file>.part` and is renamed into place once whole, so an
//! interrupted fetch leaves no file a task would take for complete; the next fetch asks
//! the host for the rest (`Range`) and starts over when the host does not serve ranges.
//! A file is whole when its length is the one the host announced. Sizes are kept in
//! `<cache>/.pincer-fetch.json`, so a cached file of another size (cut short, or changed
//! by hand) is refused and fetched again; files already in a cache that pincer did not
//! fetch (a user's OSWorld `cache/`) are checked against the host's announced length when
//! it gives one, and kept otherwise.

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// The sizes of what was fetched, by path in the cache.
const MANIFEST: &str = ".pincer-fetch.json";

/// Tries per file.
const TRIES: u32 = 3;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Manifest {
    files: BTreeMap<String, Entry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    url: String,
    size: u64,
}

/// What a fetch did.
#[derive(Debug, Default)]
pub struct Fetched {
    /// Files downloaded now.
    pub fetched: usize,
    /// Files that were already whole.
    pub present: usize,
    /// Files that could not be fetched, with why.
    pub failed: Vec<(PathBuf, String)>,
    /// Bytes downloaded now.
    pub bytes: u64,
    /// How long it took.
    pub elapsed: Duration,
}

/// Fetches `files` (path in the cache, URL) into `cache`, `parallel` at a time;
/// `progress` hears a line per file fetched or failed.
pub async fn fetch(
    files: &[(PathBuf, String)],
    cache: &Path,
    parallel: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Fetched, String> {
    let client = crate::web::client(None, Duration::from_secs(30))?;
    std::fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let manifest_path = cache.join(MANIFEST);
    let manifest: Manifest = std::fs::read(&manifest_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let manifest = Mutex::new(manifest);
    let t = Instant::now();
    let total = files.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<(PathBuf, Result<Option<u64>, String>)> =
        futures::stream::iter(files.iter().map(|(rel, url)| {
            let (client, manifest, done) = (&client, &manifest, &done);
            async move {
                let key = rel.to_string_lossy().into_owned();
                let known = manifest
                    .lock()
                    .ok()
                    .and_then(|m| m.files.get(&key).map(|e| e.size));
                let r = one(client, url, &cache.join(rel), known).await;
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                match &r {
                    Ok(Some(size)) => {
                        progress(&format!("[{n}/{total}] {key} ({})", human(*size)));
                    }
                    Ok(None) => {}
                    Err(e) => progress(&format!("[{n}/{total}] FAILED {key}: {e}")),
                }
                if let (Ok(fetched), Ok(mut m)) = (&r, manifest.lock()) {
                    let size = match fetched {
                        Some(s) => *s,
                        None => std::fs::metadata(cache.join(rel)).map_or(0, |m| m.len()),
                    };
                    m.files.insert(
                        key,
                        Entry {
                            url: url.clone(),
                            size,
                        },
                    );
                }
                (rel.clone(), r)
            }
        }))
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    if let Ok(m) = manifest.lock() {
        let text = serde_json::to_vec_pretty(&*m).unwrap_or_default();
        let aside = manifest_path.with_extension("tmp");
        std::fs::write(&aside, text)
            .and_then(|()| std::fs::rename(&aside, &manifest_path))
            .map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    }
    let mut out = Fetched {
        elapsed: t.elapsed(),
        ..Fetched::default()
    };
    for (rel, r) in outcomes {
        match r {
            Ok(Some(size)) => {
                out.fetched += 1;
                out.bytes += size;
            }
            Ok(None) => out.present += 1,
            Err(e) => out.failed.push((rel, e)),
        }
    }
    out.failed.sort();
    Ok(out)
}

/// `1234567` → `1.2 MB`.
pub fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} kB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

/// Makes `dest` whole; `Some(size)` when it was downloaded now, `None` when it already was.
async fn one(
    client: &reqwest::Client,
    url: &str,
    dest: &Path,
    known: Option<u64>,
) -> Result<Option<u64>, String> {
    if let Ok(meta) = std::fs::metadata(dest) {
        let whole = match known {
            Some(size) => meta.len() == size,
            // Not fetched by pincer: trust it unless the host says another length.
            None => announced(client, url)
                .await
                .is_none_or(|size| size == meta.len()),
        };
        if whole {
            return Ok(None);
        }
        std::fs::remove_file(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    }
    let mut last = String::new();
    for attempt in 0..TRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
        }
        match download(client, url, dest).await {
            Ok(size) => return Ok(Some(size)),
            // The host refused (no such file, not allowed): asking again changes nothing.
            Err(Failed::Refused(e)) => return Err(e),
            Err(Failed::Broken(e)) => last = e,
        }
    }
    Err(format!("{last} (after {TRIES} tries)"))
}

/// The length the host announces for `url`, if it does.
async fn announced(client: &reqwest::Client, url: &str) -> Option<u64> {
    let r = client.head(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.headers()
        .get(reqwest::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Why a try failed.
enum Failed {
    /// The host said no (a 4xx answer).
    Refused(String),
    /// The connection, the disk or the host broke; another try may do.
    Broken(String),
}

impl From<String> for Failed {
    fn from(e: String) -> Self {
        Self::Broken(e)
    }
}

/// One try: continues `<dest>.part` where the host serves ranges, checks the length, and
/// renames it into place.
async fn download(client: &reqwest::Client, url: &str, dest: &Path) -> Result<u64, Failed> {
    if let Some(dir) = dest.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut part_name = dest.as_os_str().to_owned();
    part_name.push(".part");
    let part = PathBuf::from(part_name);
    let have = tokio::fs::metadata(&part).await.map_or(0, |m| m.len());
    let mut req = client.get(url);
    if have > 0 {
        req = req.header(reqwest::header::RANGE, format!("bytes={have}-"));
    }
    let mut r = req.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = r.status();
    let (start, expected) = if status == reqwest::StatusCode::PARTIAL_CONTENT && have > 0 {
        // Content-Range: bytes START-END/TOTAL
        let total = r
            .headers()
            .get(reqwest::header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .and_then(|t| t.parse::<u64>().ok());
        (have, total)
    } else if status.is_success() {
        (0, r.content_length())
    } else if status.is_client_error() {
        return Err(Failed::Refused(format!(
            "{url}: the host answered {status}"
        )));
    } else {
        return Err(format!("{url}: the host answered {status}").into());
    };
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(start > 0)
        .truncate(start == 0)
        .open(&part)
        .await
        .map_err(|e| format!("{}: {e}", part.display()))?;
    let mut got = start;
    loop {
        match r.chunk().await {
            Ok(Some(bytes)) => {
                file.write_all(&bytes)
                    .await
                    .map_err(|e| format!("{}: {e}", part.display()))?;
                got += bytes.len() as u64;
            }
            Ok(None) => break,
            Err(e) => {
                let _ = file.flush().await;
                return Err(format!("{url}: cut off after {got} bytes: {e}").into());
            }
        }
    }
    file.flush().await.map_err(|e| e.to_string())?;
    file.sync_all().await.map_err(|e| e.to_string())?;
    if let Some(want) = expected
        && got != want
    {
        return Err(format!("{url}: got {got} of {want} bytes").into());
    }
    tokio::fs::rename(&part, dest)
        .await
        .map_err(|e| format!("{}: {e}", dest.display()))?;
    Ok(got)
}

//! How the agent's memory allocator behaves: tuned once at start so that the agent's
//! resident memory follows what it holds, not what it once held.
//!
//! Left alone, glibc's malloc gives each thread that allocates under contention an arena of
//! its own (up to eight per core), and each freed `mmap`ed block raises the threshold below
//! which blocks come from those arenas (up to 32 MiB) together with the amount of free memory
//! an arena keeps before giving it back (twice that). The agent's large, short-lived buffers
//! (8 MB raw frames, file chunks, reply bodies) are allocated on tokio's blocking threads and
//! freed on its workers, so after a few raw screenshots every blocking thread's arena kept
//! 8-12 MB it no longer used: 72 MB resident after `pincer bench`, 37 MB of it free memory in
//! four arenas.

/// Blocks this large or larger get their own mapping, which `free` returns to the system.
/// Screenshot bodies of compressed formats (100-200 KB) stay below it and are recycled.
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD: libc::c_int = 256 * 1024;

/// Free memory at the top of an arena beyond this is returned to the system.
#[cfg(target_env = "gnu")]
const TRIM_THRESHOLD: libc::c_int = 1024 * 1024;

/// Arenas: the agent's threads seldom allocate at the same moment, so two are enough.
#[cfg(target_env = "gnu")]
const ARENAS: libc::c_int = 2;

/// Fixes the allocator's thresholds (which also stops glibc from raising them) and limits
/// its arenas. Call first thing in `main`; arenas already created stay. Other C libraries
/// (musl) have neither arenas nor these settings.
pub(crate) fn tune() {
    #[cfg(target_env = "gnu")]
    for (param, value) in [
        (libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (libc::M_ARENA_MAX, ARENAS),
    ] {
        // SAFETY: mallopt only sets allocator parameters; these are valid ones.
        if unsafe { libc::mallopt(param, value) } != 1 {
            tracing::warn!(param, value, "mallopt refused an allocator setting");
        }
    }
}

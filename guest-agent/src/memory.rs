//! How the agent's memory allocator behaves: tuned once at start so that the agent's
//! resident memory follows what it holds, not what it once held.
//!
//! Left alone, glibc's malloc gives each thread that allocates under contention an arena of
//! its own (up to eight per core), and each freed `mmap`ed block raises the threshold below
//! which blocks come from those arenas (up to 32 MiB) together with the free memory an arena
//! keeps at its top (twice that). The agent's large, short-lived buffers (8 MB raw frames,
//! file chunks, reply bodies) are allocated on whichever of tokio's blocking threads runs the
//! request, so after `pincer bench` 13 arenas existed and four of them held 8-12 MB each:
//! 72 MB resident. Two arenas with the thresholds fixed where glibc would have moved
//! them keep the speed of reusing a raw frame's 8 MB (mapping it afresh for every frame costs
//! 2,000 page faults, 4-14 ms here) without the copies per thread.

/// Blocks this large or larger get their own mapping, which `free` returns to the system:
/// 4K raw frames (33 MB) and larger; everything smaller is recycled within the arenas.
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD: libc::c_int = 32 * 1024 * 1024;

/// Free memory at the top of an arena beyond this is returned to the system: room for a raw
/// 1080p frame and its neighbours, or for the twenty-odd 1 MiB buffers (the agent's and the
/// transport's) a 10 MiB file read passes through, so that back-to-back screenshots and
/// reads reuse their memory instead of faulting in and zeroing every page again (a fifth of
/// a fresh 10 MiB read's time).
#[cfg(target_env = "gnu")]
const TRIM_THRESHOLD: libc::c_int = 32 * 1024 * 1024;

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
            // Before logging is set up: said on stderr, which is the agent's log.
            eprintln!("mallopt refused allocator setting {param} = {value}");
        }
    }
}

/// Returns the free memory inside the allocator's arenas to the system, not only what lies
/// at their tops: after `./run.sh bench`'s 40 Calc tree walks the agent was 52 MB resident
/// without it, 32 MB with it.
pub(crate) fn give_back() {
    // SAFETY: malloc_trim only hands free pages back to the kernel.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

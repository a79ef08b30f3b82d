//! Wall-clock time as the run directory, manifests and file names stamp it: Unix time in
//! milliseconds or seconds. A clock before 1970 reads 0 rather than failing; nothing here
//! measures durations (that is `Instant`'s job).

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix time in whole seconds.
pub fn unix_secs() -> u64 {
    unix_ms() / 1000
}
